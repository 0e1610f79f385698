"""The daemon end to end against the real kube-apiserver, as a ServiceAccount bound by the shipped RBAC, with
metrics from a real Prometheus scraping the vLLM-shaped exporter. What the daemon sent is read from the
server's own audit log; faults the server will not produce on demand come from the fault proxy."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest
import requests
from kubernetes import client
from structlog.testing import capture_logs

from autoscaler.actuators.kubernetes import KubernetesActuator, api_client
from autoscaler.cli import main
from autoscaler.leader import LeaderElector
from autoscaler.metrics.prometheus import PrometheusSource
from autoscaler.testing.fault_proxy import DROP, FaultProxy
from autoscaler.testing.kube import set_status
from autoscaler.testing.servers import PrometheusServer, VllmExporter, free_port, start_daemon, wait_for
from policies.policy_file import TargetRef
from tests.integration.conftest import Cluster, shipped_rules
from tests.integration.daemon_kit import (
    NAME,
    controller_for,
    events,
    log_lines,
    policy_text,
    run_once,
)

pytestmark = pytest.mark.integration


def test_a_load_step_scales_up_with_one_patch(cluster: Cluster, loaded: PrometheusServer) -> None:
    cluster.deployment(NAME, 2)
    assert run_once(cluster, policy_text(loaded.url, cluster.namespace)) == 0
    writes = cluster.scale_writes()
    assert len(writes) == 1
    assert (writes[0].verb, writes[0].resource, writes[0].name) == ("patch", "deployments/scale", NAME)
    assert writes[0].request["spec"] == {"replicas": 6}  # 20 waiting / 2 = 10, at most max(2 + 4, 2 * 2) per 15 s
    assert cluster.replicas(NAME) == 6
    recorded = events(cluster)
    assert [e.reason for e in recorded] == ["SuccessfulRescale"]
    assert recorded[0].involved_object.name == NAME


def test_dry_run_sends_no_write_at_all(
    cluster: Cluster, loaded: PrometheusServer, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster.deployment(NAME, 2)
    assert run_once(cluster, policy_text(loaded.url, cluster.namespace), "--dry-run") == 0
    logs = log_lines(capsys)
    assert cluster.writes() == []
    sent = cluster.kube.audit(user=cluster.user)
    assert sent and {e.verb for e in sent} <= {"get", "list"}
    would = [e for e in logs if e["event"] == "would-scale"]
    assert would and would[0]["desired"] == 6 and would[0]["dry_run"] is True
    assert cluster.replicas(NAME) == 2


def test_a_real_conflict_is_retried_with_a_fresh_read(cluster: Cluster) -> None:
    """A status write between the read and the patch moves the resourceVersion: the server answers 409,
    the scale is read again, and the count (unchanged) is written on the new version."""
    cluster.deployment(NAME, 2)
    actuator = KubernetesActuator(api_client(str(cluster.kubeconfig())))
    target = TargetRef(namespace=cluster.namespace, name=NAME)
    state = actuator.read(target)
    set_status(cluster.admin, cluster.namespace, NAME, 2, 1)  # the kubelet saw a pod go unready
    result = actuator.scale(target, state, 6)
    assert (result.applied, result.outcome, result.attempts) == (True, "applied", 2)
    assert [w.code for w in cluster.scale_writes(ok=False)] == [409, 200]
    reads = [e for e in cluster.kube.audit(cluster.namespace, cluster.user) if e.verb == "get"]
    assert [e.resource for e in reads] == ["deployments/scale"]
    assert cluster.replicas(NAME) == 6


def test_a_count_changed_by_hand_is_not_overwritten(cluster: Cluster) -> None:
    cluster.deployment(NAME, 2)
    actuator = KubernetesActuator(api_client(str(cluster.kubeconfig())))
    target = TargetRef(namespace=cluster.namespace, name=NAME)
    state = actuator.read(target)
    cluster.kube.set_replicas(cluster.namespace, NAME, 5)
    result = actuator.scale(target, state, 6)
    assert (result.applied, result.outcome) == (False, "changed-concurrently")
    assert cluster.replicas(NAME) == 5


def test_throttling_server_errors_and_dropped_connections_are_retried(
    cluster: Cluster, loaded: PrometheusServer
) -> None:
    cluster.deployment(NAME, 2)
    proxy = FaultProxy(cluster.kube.url, cluster.kube.ca_file)
    try:
        proxy.inject("PATCH", "/scale$", 429, retry_after=1)
        proxy.inject("PATCH", "/scale$", 500)
        proxy.inject("PATCH", "/scale$", DROP)
        started = time.monotonic()
        assert (
            run_once(cluster, policy_text(loaded.url, cluster.namespace), kubeconfig=cluster.kubeconfig(proxy.url)) == 0
        )
        assert time.monotonic() - started >= 1.0  # Retry-After was respected
        assert [s.status for s in proxy.requests("PATCH", "/scale$")] == [429, 500, -1, 200]
    finally:
        proxy.close()
    assert [w.code for w in cluster.scale_writes(ok=False)] == [200]  # the server saw one write
    assert cluster.replicas(NAME) == 6


def test_forbidden_and_missing_targets(
    cluster: Cluster, loaded: PrometheusServer, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_once(cluster, policy_text(loaded.url, cluster.namespace)) == 0
    assert any(e.get("reason") == "target-not-found" for e in log_lines(capsys))
    cluster.deployment(NAME, 2)
    no_patch = [  # every right but patching the scale subresource
        {**rule, "verbs": [v for v in rule["verbs"] if v != "patch" or "deployments/scale" not in rule["resources"]]}
        for rule in shipped_rules()
    ]
    token = cluster.kube.service_account_token(cluster.namespace, "no-patch")
    cluster.kube.grant(cluster.namespace, (cluster.namespace, "no-patch"), no_patch, "no-patch")
    kubeconfig = cluster.kube.kubeconfig(cluster.workdir / "no-patch", token)
    assert run_once(cluster, policy_text(loaded.url, cluster.namespace), kubeconfig=kubeconfig) == 0
    assert any(e.get("write") == "forbidden" for e in log_lines(capsys))
    refused = cluster.scale_writes(f"system:serviceaccount:{cluster.namespace}:no-patch", ok=False)
    assert [w.code for w in refused] == [403]
    assert cluster.replicas(NAME) == 2
    assert [e.reason for e in events(cluster)] == ["FailedRescale"]


def test_the_pause_annotations_are_respected(cluster: Cluster, loaded: PrometheusServer) -> None:
    cluster.deployment(NAME, 2, annotations={"vllm-autoscaler.io/paused": "true"})
    assert run_once(cluster, policy_text(loaded.url, cluster.namespace)) == 0
    assert cluster.scale_writes() == []
    client.AppsV1Api(cluster.admin).patch_namespaced_deployment(
        NAME,
        cluster.namespace,
        {"metadata": {"annotations": {"vllm-autoscaler.io/paused": None, "vllm-autoscaler.io/paused-replicas": "3"}}},
    )
    assert run_once(cluster, policy_text(loaded.url, cluster.namespace)) == 0
    assert [w.request["spec"]["replicas"] for w in cluster.scale_writes()] == [3]


def test_a_deployment_at_zero_is_left_alone(cluster: Cluster, loaded: PrometheusServer) -> None:
    cluster.deployment(NAME, 0)
    assert run_once(cluster, policy_text(loaded.url, cluster.namespace)) == 0
    assert cluster.scale_writes() == []


def test_a_bad_policy_keeps_the_last_good_one(cluster: Cluster, loaded: PrometheusServer) -> None:
    cluster.deployment(NAME, 2)
    controller = controller_for(cluster, loaded.url)
    first = controller.tick()[0]
    assert first["desired"] == 6
    key = f"{cluster.namespace}/{NAME}"
    state = controller.runtime[key].decider.behavior_state
    policy = cluster.workdir / "config" / "policy.json"
    policy.write_text("workloads: [{target: {namespace: llm-serving}, maxReplicas: -1}")
    with capture_logs() as logs:
        second = controller.tick()[0]
    assert any(e["event"] == "policy-rejected" for e in logs)
    assert second["reason"] in ("scale-up", "rate-limited", "within-tolerance", "steady", "stabilized")
    assert [e.reason for e in events(cluster)].count("InvalidPolicy") == 1
    controller.tick()  # the same bad file is not reported again
    assert [e.reason for e in events(cluster)].count("InvalidPolicy") == 1
    policy.write_text(policy_text(loaded.url, cluster.namespace, maxReplicas=7))
    with capture_logs() as logs:
        controller.tick()
    assert any(e["event"] == "policy-reloaded" for e in logs)
    runtime = controller.runtime[key]
    assert runtime.workload.max_replicas == 7
    assert runtime.decider.behavior_state is state  # decision state survived the reload


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_two_daemons_with_leader_election_never_both_write(cluster: Cluster, loaded: PrometheusServer) -> None:
    cluster.deployment(NAME, 1)
    tokens = [cluster.identity(f"replica-{i}") for i in range(2)]
    kubeconfigs = [cluster.kube.kubeconfig(cluster.workdir / f"replica-{i}", tokens[i]) for i in range(2)]
    clocks = [FakeClock(), FakeClock()]
    electors = [
        LeaderElector(
            api_client(str(kubeconfigs[i])), cluster.namespace, "vllm-autoscaler", f"replica-{i}", 15, 10, 2, clocks[i]
        )
        for i in range(2)
    ]
    controllers = [
        controller_for(cluster, loaded.url, elector=electors[i], kubeconfig=kubeconfigs[i]) for i in range(2)
    ]
    users = [f"system:serviceaccount:{cluster.namespace}:replica-{i}" for i in range(2)]
    leaders_over_time = []
    for step in range(40):
        for clock in clocks:
            clock.now = 1000.0 + step
        if step < 10:  # replica-0 freezes after step 10: it stops renewing
            electors[0].try_acquire_or_renew()
        electors[1].try_acquire_or_renew()
        leaders = [e.is_leader() for e in electors]
        assert not all(leaders), f"both replicas lead at step {step}"
        leaders_over_time.append(leaders)
        if step % 5 == 0:
            cluster.kube.set_replicas(cluster.namespace, NAME, 1)
        for i in (0, 1):
            before = len(cluster.scale_writes(users[i]))
            lines = controllers[i].tick()
            wrote = len(cluster.scale_writes(users[i])) > before
            assert not wrote or leaders[i], f"replica-{i} wrote at step {step} without the lease"
            assert lines[0].get("write") != "not-leader" or not leaders[i]
    assert leaders_over_time[0] == [True, False]
    # replica-0 stops writing 10 s after its last renewal; replica-1 takes over only 15 s after it last saw it.
    assert leaders_over_time[20] in ([False, False], [False, True])
    assert leaders_over_time[-1] == [False, True]
    assert cluster.scale_writes(users[0]) and cluster.scale_writes(users[1])
    lease = client.CoordinationV1Api(cluster.admin).read_namespaced_lease("vllm-autoscaler", cluster.namespace)
    assert lease.spec.holder_identity == "replica-1"
    assert lease.spec.lease_transitions == 1


def test_releasing_the_lease_hands_over_at_once(cluster: Cluster) -> None:
    api = api_client(str(cluster.kubeconfig()))
    clock = FakeClock()
    first = LeaderElector(api, cluster.namespace, "lock", "a", 15, 10, 2, clock)
    second = LeaderElector(api, cluster.namespace, "lock", "b", 15, 10, 2, clock)
    assert first.try_acquire_or_renew() and not second.try_acquire_or_renew()
    first.release()
    assert not first.is_leader()
    assert second.try_acquire_or_renew()


def test_a_lead_that_lapses_is_reported_lost(cluster: Cluster) -> None:
    """A leader that stalls past its renew deadline, or cannot reach the API server until then, logs
    ``leader-lost`` and counts it, at the first round that sees it, and ``leader-acquired`` when it leads again."""
    clock, events = FakeClock(), []
    elector = LeaderElector(
        api_client(str(cluster.kubeconfig())), cluster.namespace, "lock", "a", 15, 10, 2, clock, events.append
    )
    assert elector.try_acquire_or_renew() and events == ["acquired"]
    clock.now += 11  # stalled: no round for longer than the renew deadline
    with capture_logs() as logs:
        assert elector.try_acquire_or_renew()  # the Lease is still its own: it renews and leads again
    lost = [e for e in logs if e["event"] == "leader-lost"]
    assert lost and lost[0]["detail"] == "not renewed for 11.0 s (renew deadline 10 s)"
    assert events == ["acquired", "lost", "acquired"]

    proxy = FaultProxy(cluster.kube.url, cluster.kube.ca_file)
    try:
        cut = LeaderElector(
            api_client(str(cluster.kubeconfig(proxy.url)), 2.0), cluster.namespace, "lock2", "b", 15, 10, 2, clock
        )
        cut.on_transition = events.append
        assert cut.try_acquire_or_renew()
        proxy.inject("GET", "/leases/lock2$", DROP, times=None)
        with capture_logs() as logs:
            clock.now += 2
            assert cut.try_acquire_or_renew()  # its authority still runs: not lost yet
            clock.now += 9
            assert not cut.try_acquire_or_renew()
            clock.now += 2
            assert not cut.try_acquire_or_renew()  # lost once, not again
        lost = [e for e in logs if e["event"] == "leader-lost"]
        assert len(lost) == 1 and lost[0]["detail"].startswith("not renewed for 11.0 s")
        assert "read failed" in lost[0]["detail"]  # why: the last round's answer
        assert events == ["acquired", "lost", "acquired", "acquired", "lost"]  # a, then b
    finally:
        proxy.close()


def test_cold_start_is_measured(cluster: Cluster, loaded: PrometheusServer) -> None:
    cluster.deployment(NAME, 2)
    with cluster.kubelet(startup_delay=1.0):
        controller = controller_for(cluster, loaded.url, coldStartSeconds="auto", policy={"type": "predictive"})
        assert controller.tick()[0]["applied"]
        wait_for(lambda: cluster.ready_replicas(NAME) == 6, 10, "the new pods ready")
        with capture_logs() as logs:
            controller.tick()
    measured = [e for e in logs if e["event"] == "cold-start-measured"]
    assert measured and 1.0 <= measured[0]["seconds"] < 5
    samples = controller.telemetry.registry.get_sample_value(
        "vllm_autoscaler_cold_start_seconds_count", {"workload": f"{cluster.namespace}/{NAME}"}
    )
    assert samples == 1


def test_the_daemon_serves_health_and_metrics_and_stops_on_sigterm(cluster: Cluster, loaded: PrometheusServer) -> None:
    cluster.deployment(NAME, 2)
    policy = cluster.workdir / "policy.json"
    policy.write_text(policy_text(loaded.url, cluster.namespace))
    port = free_port()
    process = start_daemon(
        policy,
        cluster.kubeconfig(),
        port,
        cluster.workdir / "daemon.log",
        VLLM_AUTOSCALER_LEADER_ELECT="true",
        VLLM_AUTOSCALER_LEASE_NAMESPACE=cluster.namespace,
    )
    try:
        base = f"http://127.0.0.1:{port}"

        def answers(path: str) -> int:
            try:
                return requests.get(base + path, timeout=1).status_code
            except requests.RequestException:
                return 0

        wait_for(lambda: answers("/readyz") == 200, 30, "/readyz")
        assert answers("/healthz") == 200
        desired = f'vllm_autoscaler_desired_replicas{{workload="{cluster.namespace}/{NAME}"}} 6.0'

        def decided() -> str | None:
            text = requests.get(base + "/metrics", timeout=2).text
            return text if desired in text else None

        metrics = wait_for(decided, 30, "the decision in /metrics")
        assert "vllm_autoscaler_decisions_total" in metrics
        process.send_signal(signal.SIGTERM)
        assert process.wait(20) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(5)
    assert cluster.replicas(NAME) == 6
    lease = client.CoordinationV1Api(cluster.admin).read_namespaced_lease("vllm-autoscaler", cluster.namespace)
    assert lease.spec.holder_identity in ("", None)  # released on SIGTERM


def test_bad_config_exits_2(tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text("workloads: []\n")
    assert main(["run", "--config", str(policy), "--once"]) == 2


def test_one_list_per_namespace_and_kind(cluster: Cluster, loaded: PrometheusServer) -> None:
    cluster.deployment(NAME, 2)
    cluster.deployment("other", 2)
    two = json.loads(policy_text(loaded.url, cluster.namespace))
    two["workloads"].append({**two["workloads"][0], "target": {"namespace": cluster.namespace, "name": "other"}})
    assert run_once(cluster, json.dumps(two)) == 0
    reads = [(e.verb, e.resource) for e in cluster.kube.audit(cluster.namespace, cluster.user) if not e.writes]
    assert reads.count(("list", "deployments")) == 1
    assert ("get", "deployments") not in reads


def test_a_live_run_once_while_another_holds_the_lease_writes_nothing(
    cluster: Cluster, loaded: PrometheusServer, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster.deployment(NAME, 2)
    other = LeaderElector(api_client(str(cluster.kubeconfig())), cluster.namespace, "vllm-autoscaler", "the-daemon")
    assert other.try_acquire_or_renew()
    assert run_once(cluster, policy_text(loaded.url, cluster.namespace)) == 1
    assert "held by the-daemon" in capsys.readouterr().err
    assert cluster.scale_writes(ok=False) == []
    assert cluster.replicas(NAME) == 2


def test_a_live_run_once_that_cannot_take_the_lease_says_why_and_writes_nothing(
    cluster: Cluster, loaded: PrometheusServer, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """No other holder: the API refused the Lease (here a namespace that does not exist, outside the daemon's
    rights), which is not "held by another process"."""
    cluster.deployment(NAME, 2)
    monkeypatch.setenv("VLLM_AUTOSCALER_LEASE_NAMESPACE", "no-such-namespace")
    assert run_once(cluster, policy_text(loaded.url, cluster.namespace)) == 1
    err = capsys.readouterr().err
    assert "the Lease no-such-namespace/vllm-autoscaler cannot be taken: " in err and "held by" not in err
    assert "set VLLM_AUTOSCALER_LEASE_NAMESPACE to the controller's namespace" in err
    assert cluster.scale_writes(ok=False) == []
    assert cluster.replicas(NAME) == 2


def test_a_live_run_once_takes_the_lease_and_gives_it_back(cluster: Cluster, loaded: PrometheusServer) -> None:
    cluster.deployment(NAME, 2)
    assert run_once(cluster, policy_text(loaded.url, cluster.namespace)) == 0
    assert cluster.replicas(NAME) == 6
    lease = client.CoordinationV1Api(cluster.admin).read_namespaced_lease("vllm-autoscaler", cluster.namespace)
    assert lease.spec.holder_identity in ("", None)


@pytest.mark.parametrize(("authority", "patches"), [(0.0, 0), (2.0, 1), (30.0, 3)])
def test_write_retries_end_at_the_lease_deadline(cluster: Cluster, authority: float, patches: int) -> None:
    """With ``authority`` seconds left to write and every answer a 503 asking for 3 s: none, one or all the
    attempts are sent, never one that would land after the deadline."""
    cluster.deployment(NAME, 2)
    proxy = FaultProxy(cluster.kube.url, cluster.kube.ca_file)
    try:
        proxy.inject("PATCH", "/scale$", 503, times=None, retry_after=3)
        left = {"s": authority}
        actuator = KubernetesActuator(
            api_client(str(cluster.kubeconfig(proxy.url))),
            sleep=lambda s: left.__setitem__("s", left["s"] - s),
            max_attempts=3,
            authority=lambda: left["s"],
        )
        target = TargetRef(namespace=cluster.namespace, name=NAME)
        result = actuator.scale(target, actuator.read(target), 6)
        assert not result.applied
        assert result.outcome == ("not-leader" if authority == 0 else "unavailable")
        assert len(proxy.requests("PATCH")) == patches
    finally:
        proxy.close()
    assert cluster.replicas(NAME) == 2


def test_sigterm_ends_a_write_retry_at_once(cluster: Cluster, loaded: PrometheusServer) -> None:
    cluster.deployment(NAME, 2)
    proxy = FaultProxy(cluster.kube.url, cluster.kube.ca_file)
    policy = cluster.workdir / "policy.json"
    policy.write_text(policy_text(loaded.url, cluster.namespace))
    try:
        proxy.inject("PATCH", "/scale$", 503, times=None, retry_after=5)
        process = start_daemon(policy, cluster.kubeconfig(proxy.url), free_port(), cluster.workdir / "daemon.log")
        try:
            wait_for(lambda: proxy.requests("PATCH", "/scale$"), 30, "the first scale PATCH")
            stopped = time.monotonic()
            process.send_signal(signal.SIGTERM)
            assert process.wait(20) == 0
            assert time.monotonic() - stopped < 3.0  # not the 5 s Retry-After, nor the retries after it
        finally:
            if process.poll() is None:
                process.kill()
                process.wait(5)
        assert len(proxy.requests("PATCH", "/scale$")) == 1
    finally:
        proxy.close()


def test_an_absurd_metric_value_does_not_stop_the_neighbour(
    cluster: Cluster, shared_metrics: tuple[VllmExporter, PrometheusServer], capsys: pytest.CaptureFixture[str]
) -> None:
    exporter, prometheus = shared_metrics
    cluster.deployment(NAME, 2)
    cluster.deployment("absurd", 2)
    exporter.set_pods(cluster.namespace, NAME, waiting=[10, 10])
    exporter.set_pods(cluster.namespace, "absurd", waiting=[1e306, 1e306])
    two = json.loads(policy_text(prometheus.url, cluster.namespace))
    two["workloads"].insert(0, {**two["workloads"][0], "target": {"namespace": cluster.namespace, "name": "absurd"}})
    query = f'count(vllm:num_requests_waiting{{namespace="{cluster.namespace}"}})'
    wait_for(
        lambda: requests.get(f"{prometheus.url}/api/v1/query", params={"query": query}).json()["data"]["result"],
        30,
        "both workloads' series",
    )
    assert run_once(cluster, json.dumps(two)) == 0
    lines = {e["workload"]: e for e in log_lines(capsys) if e["event"] in ("decision", "would-scale")}
    assert lines[f"{cluster.namespace}/absurd"]["reason"] == "metrics-unavailable"
    assert cluster.replicas("absurd") == 2
    assert cluster.replicas(NAME) == 6


def test_state_survives_a_restart_and_status_shows_it(
    cluster: Cluster, loaded: PrometheusServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """A first controller scales up and is gone before the new pods are ready; a second one, started fresh,
    carries on from the state in the cluster: the scale-up still on its way becomes a measured cold start,
    and the rate limit still counts the first one's scale event."""
    from autoscaler.state import ConfigMapStateStore

    cluster.deployment(NAME, 2)
    api = api_client(str(cluster.kubeconfig()))
    workload = {"coldStartSeconds": "auto", "policy": {"type": "predictive"}}
    first = controller_for(cluster, loaded.url, **workload)
    first.store = ConfigMapStateStore(api, cluster.namespace)
    assert first.tick()[0]["applied"]
    del first
    with cluster.kubelet(startup_delay=1.5):
        second = controller_for(cluster, loaded.url, **workload)
        second.store = ConfigMapStateStore(api, cluster.namespace)
        wait_for(lambda: cluster.ready_replicas(NAME) == 6, 10, "the new pods ready")
        with capture_logs() as logs:
            second.tick()
    assert any(e["event"] == "state-restored" for e in logs)
    measured = [e for e in logs if e["event"] == "cold-start-measured"]
    assert measured and measured[0]["seconds"] >= 1.5  # from the first controller's write, not the restart
    runtime = second.runtime[f"{cluster.namespace}/{NAME}"]
    assert runtime.decider.behavior_state.scale_up_events  # the first one's scale event, for the rate limits
    assert runtime.last_scale is not None and runtime.last_scale[1:3] == (2, 6)

    capsys.readouterr()
    assert main(["status", "--kubeconfig", str(cluster.kubeconfig()), "--namespace", cluster.namespace]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:3] == ["WORKLOAD", "TARGET", "POLICY"]
    assert f"{cluster.namespace}/{NAME}" in out[1] and "2->6" in out[1] and "predictive" in out[1]
    assert (
        main(["status", "--kubeconfig", str(cluster.kubeconfig()), "--namespace", cluster.namespace, "-o", "json"]) == 0
    )
    shown = json.loads(capsys.readouterr().out)["workloads"][0]
    assert (shown["workload"], shown["current"], shown["last_scale"]["from"]) == (f"{cluster.namespace}/{NAME}", 6, 2)
    # the HPA's conditions, in the ConfigMap as kubectl shows it
    raw = cluster.kube.kubectl("get", "configmap", "vllm-autoscaler-state", "-n", cluster.namespace, "-o", "json")
    stored = json.loads(next(iter(json.loads(raw)["data"].values())))
    assert {c["type"] for c in stored["conditions"]} == {"AbleToScale", "ScalingActive", "ScalingLimited"}
    assert all(c["lastTransitionTime"] > 0 for c in stored["conditions"])


def test_status_without_state_says_why(cluster: Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status", "--kubeconfig", str(cluster.kubeconfig()), "--namespace", cluster.namespace]) == 1
    assert "no leader has written it yet" in capsys.readouterr().err


def test_a_reload_that_changes_prometheus_rebuilds_the_source(
    cluster: Cluster, loaded: PrometheusServer, shared_metrics: tuple[VllmExporter, PrometheusServer]
) -> None:
    cluster.deployment(NAME, 2)
    proxy = FaultProxy(loaded.url)  # a second address for the same Prometheus
    try:
        controller = controller_for(cluster, f"http://127.0.0.1:{free_port()}")  # nothing listens there
        controller.source_factory = lambda document: PrometheusSource(document.prometheus)
        assert controller.tick()[0]["reason"] == "metrics-unavailable"
        (cluster.workdir / "config" / "policy.json").write_text(policy_text(proxy.url, cluster.namespace))
        assert controller.tick()[0]["desired"] == 6
        assert proxy.requests("GET", "/api/v1/query")
    finally:
        proxy.close()


def test_identical_events_are_aggregated_into_one(cluster: Cluster, loaded: PrometheusServer) -> None:
    """A persistent 403 on the write, tick after tick: one FailedRescale Event whose count rises."""
    cluster.deployment(NAME, 2)
    rules = [
        {**rule, "verbs": [v for v in rule["verbs"] if v != "patch" or "events" in rule["resources"]]}
        for rule in shipped_rules()
    ]
    token = cluster.kube.service_account_token(cluster.namespace, "no-scale")
    cluster.kube.grant(cluster.namespace, (cluster.namespace, "no-scale"), rules, "no-scale")
    controller = controller_for(cluster, loaded.url, kubeconfig=cluster.kube.kubeconfig(cluster.workdir / "ns", token))
    for _ in range(5):
        assert controller.tick()[0]["write"] == "forbidden"
    failed = [e for e in events(cluster) if e.reason == "FailedRescale"]
    assert len(failed) == 1 and failed[0].count == 5
