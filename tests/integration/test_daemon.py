"""The daemon end to end against the real kube-apiserver, as a ServiceAccount bound by the shipped RBAC, with
metrics from a real Prometheus scraping the vLLM-shaped exporter. What the daemon sent is read from the
server's own audit log; faults the server will not produce on demand come from the fault proxy."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path
from typing import Any

import pytest
import requests
from kubernetes import client
from structlog.testing import capture_logs

from autoscaler.actuators.kubernetes import KubernetesActuator, api_client
from autoscaler.cli import main
from autoscaler.controller import Controller
from autoscaler.leader import LeaderElector
from autoscaler.metrics.prometheus import PrometheusSource
from autoscaler.testing.fault_proxy import DROP, FaultProxy
from autoscaler.testing.kube import KubeServer, set_status
from autoscaler.testing.servers import PrometheusServer, VllmExporter, free_port, start_daemon, wait_for
from policies.policy_file import TargetRef
from tests.integration.conftest import Cluster, shipped_rules

pytestmark = pytest.mark.integration
NAME = "vllm-llama3-70b"
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def policy_text(prometheus_url: str, namespace: str, **workload: Any) -> str:
    spec: dict[str, Any] = {
        "target": {"kind": "Deployment", "namespace": namespace, "name": NAME},
        "minReplicas": 1,
        "maxReplicas": 8,
        "metrics": [{"name": "num_requests_waiting", "target": {"type": "AverageValue", "value": 2}}],
    }
    spec.update(workload)
    return json.dumps({"interval": 15, "prometheus": {"url": prometheus_url, "timeout": 2}, "workloads": [spec]})


@pytest.fixture
def loaded(cluster: Cluster, shared_metrics: tuple[VllmExporter, PrometheusServer]) -> PrometheusServer:
    """Two pods with 10 waiting requests each: 20 in all, ten replicas' worth at a target of 2."""
    exporter, prometheus = shared_metrics
    exporter.set_pods(cluster.namespace, NAME, waiting=[10, 10], kv=[0.5, 0.5])
    wait_for(
        lambda: requests.get(
            f"{prometheus.url}/api/v1/query",
            params={"query": f'sum(vllm:num_requests_waiting{{namespace="{cluster.namespace}"}})'},
        ).json()["data"]["result"],
        30,
        "the exporter's values in Prometheus",
    )
    return prometheus


@pytest.fixture(scope="session")
def keda_crd(kube: KubeServer) -> None:
    """KEDA's ScaledObject CRD, the CRD only (no KEDA operator)."""
    kube.kubectl("apply", "-f", str(FIXTURES / "keda-scaledobject-crd.yaml"))
    kube.kubectl("wait", "--for=condition=Established", "crd/scaledobjects.keda.sh", "--timeout=30s")


def log_lines(capsys: pytest.CaptureFixture[str]) -> list[dict[str, Any]]:
    """The daemon's JSON log lines written to standard error so far."""
    return [json.loads(line) for line in capsys.readouterr().err.splitlines() if line.startswith("{")]


def run_once(cluster: Cluster, text: str, *extra: str, kubeconfig: Path | None = None) -> int:
    policy = cluster.workdir / "policy.json"
    policy.write_text(text)
    config = kubeconfig or cluster.kubeconfig()
    return main(["run", "--config", str(policy), "--once", "--kubeconfig", str(config), *extra])


def events(cluster: Cluster) -> list[Any]:
    listed = client.CoreV1Api(cluster.admin).list_namespaced_event(cluster.namespace)
    return sorted(listed.items, key=lambda e: e.metadata.creation_timestamp)


@pytest.fixture(autouse=True)
def _lease_in_the_test_namespace(monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> None:
    if "cluster" in request.fixturenames:
        cluster: Cluster = request.getfixturevalue("cluster")
        monkeypatch.setenv("VLLM_AUTOSCALER_LEASE_NAMESPACE", cluster.namespace)


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


def test_a_throttled_list_backs_off_and_never_fans_out(
    cluster: Cluster, loaded: PrometheusServer, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster.deployment(NAME, 2)
    cluster.deployment("other", 2)
    two = json.loads(policy_text(loaded.url, cluster.namespace))
    two["workloads"].append({**two["workloads"][0], "target": {"namespace": cluster.namespace, "name": "other"}})
    proxy = FaultProxy(cluster.kube.url, cluster.kube.ca_file)
    try:
        proxy.inject("GET", "/deployments$", 429, times=None, retry_after=0)
        assert run_once(cluster, json.dumps(two), kubeconfig=cluster.kubeconfig(proxy.url)) == 0
        gets = proxy.requests("GET", "/deployments")
        assert gets and all(s.path.split("?")[0].endswith("/deployments") for s in gets)  # no per-workload GET
        assert len(gets) == 3  # the attempts one LIST gets within a second, then the tick holds
    finally:
        proxy.close()
    reasons = {e["workload"]: e["reason"] for e in log_lines(capsys) if e["event"] == "decision"}
    assert set(reasons.values()) == {"target-unavailable"}
    assert cluster.scale_writes(ok=False) == []


def test_a_slow_api_answer_times_out_and_holds(
    cluster: Cluster, loaded: PrometheusServer, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster.deployment(NAME, 2)
    monkeypatch.setenv("VLLM_AUTOSCALER_API_TIMEOUT_S", "0.5")
    proxy = FaultProxy(cluster.kube.url, cluster.kube.ca_file)
    try:
        proxy.inject("GET", "/deployments$", None, times=None, delay=1.5)
        assert (
            run_once(cluster, policy_text(loaded.url, cluster.namespace), kubeconfig=cluster.kubeconfig(proxy.url)) == 0
        )
    finally:
        proxy.close()
    line = next(e for e in log_lines(capsys) if e["event"] == "decision")
    assert line["reason"] == "target-unavailable"
    assert cluster.scale_writes(ok=False) == [] and cluster.replicas(NAME) == 2


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


@pytest.mark.parametrize("owner", ["hpa", "scaledobject"])
def test_a_target_owned_by_another_autoscaler_is_refused(
    cluster: Cluster, loaded: PrometheusServer, owner: str, request: pytest.FixtureRequest
) -> None:
    cluster.deployment(NAME, 2)
    ref = {"apiVersion": "apps/v1", "kind": "Deployment", "name": NAME}
    if owner == "hpa":
        client.AutoscalingV2Api(cluster.admin).create_namespaced_horizontal_pod_autoscaler(
            cluster.namespace, {"metadata": {"name": "vllm-hpa"}, "spec": {"scaleTargetRef": ref, "maxReplicas": 8}}
        )
    else:
        request.getfixturevalue("keda_crd")
        client.CustomObjectsApi(cluster.admin).create_namespaced_custom_object(
            "keda.sh",
            "v1alpha1",
            cluster.namespace,
            "scaledobjects",
            {
                "apiVersion": "keda.sh/v1alpha1",
                "kind": "ScaledObject",
                "metadata": {"name": "vllm-so"},
                "spec": {"scaleTargetRef": {"name": NAME}, "triggers": [{"type": "prometheus", "metadata": {}}]},
            },
        )
    assert run_once(cluster, policy_text(loaded.url, cluster.namespace)) == 0
    assert cluster.scale_writes() == []
    recorded = events(cluster)
    assert [e.reason for e in recorded] == ["ForeignAutoscaler"]
    assert ("vllm-hpa" if owner == "hpa" else "vllm-so") in recorded[0].message
    assert cluster.replicas(NAME) == 2


def test_an_owner_created_between_two_ticks_is_seen_before_the_next_write(
    cluster: Cluster, loaded: PrometheusServer
) -> None:
    """The owner check of a tick is cached for a minute; the check again just before a write is not: an HPA
    created after a tick stops the next tick's write, with one ForeignAutoscaler Event."""
    cluster.deployment(NAME, 8)
    controller = _controller(cluster, loaded.url)
    assert controller.tick()[0]["desired"] == 8  # nothing to write; the namespace's autoscalers listed and cached
    ref = {"apiVersion": "apps/v1", "kind": "Deployment", "name": NAME}
    client.AutoscalingV2Api(cluster.admin).create_namespaced_horizontal_pod_autoscaler(
        cluster.namespace, {"metadata": {"name": "late-hpa"}, "spec": {"scaleTargetRef": ref, "maxReplicas": 8}}
    )
    client.AppsV1Api(cluster.admin).patch_namespaced_deployment_scale(
        NAME, cluster.namespace, {"spec": {"replicas": 4}}
    )  # by hand: the next tick wants 8 again
    line = controller.tick()[0]
    assert (line["reason"], line["write"], line["applied"]) == ("foreign-autoscaler", "refused", False)
    assert cluster.scale_writes() == []
    assert cluster.replicas(NAME) == 4
    key = {"workload": f"{cluster.namespace}/{NAME}"}
    assert (
        controller.telemetry.registry.get_sample_value(
            "vllm_autoscaler_scale_writes_total", {**key, "outcome": "refused"}
        )
        == 1
    )  # a write refused, the tick's decision counted once
    assert [e.reason for e in events(cluster) if e.reason == "ForeignAutoscaler"] == ["ForeignAutoscaler"]


def test_a_deployment_at_zero_is_left_alone(cluster: Cluster, loaded: PrometheusServer) -> None:
    cluster.deployment(NAME, 0)
    assert run_once(cluster, policy_text(loaded.url, cluster.namespace)) == 0
    assert cluster.scale_writes() == []


def _controller(
    cluster: Cluster,
    prometheus_url: str,
    clock: Any = time.time,
    elector: LeaderElector | None = None,
    kubeconfig: Path | None = None,
    **workload: Any,
) -> Controller:
    policy = cluster.workdir / "config" / "policy.json"
    policy.parent.mkdir(exist_ok=True)
    if not policy.exists():
        policy.write_text(policy_text(prometheus_url, cluster.namespace, **workload))
    return cluster.controller(policy, kubeconfig, clock=clock, elector=elector)


def test_a_bad_policy_keeps_the_last_good_one(cluster: Cluster, loaded: PrometheusServer) -> None:
    cluster.deployment(NAME, 2)
    controller = _controller(cluster, loaded.url)
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
    controllers = [_controller(cluster, loaded.url, elector=electors[i], kubeconfig=kubeconfigs[i]) for i in range(2)]
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
        controller = _controller(cluster, loaded.url, coldStartSeconds="auto", policy={"type": "predictive"})
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


def _hpa(cluster: Cluster, current: int | None = None, desired: int | None = None) -> None:
    ref = {"apiVersion": "apps/v1", "kind": "Deployment", "name": NAME}
    hpas = client.AutoscalingV2Api(cluster.admin)
    hpas.create_namespaced_horizontal_pod_autoscaler(
        cluster.namespace, {"metadata": {"name": "vllm-hpa"}, "spec": {"scaleTargetRef": ref, "maxReplicas": 8}}
    )
    if desired is not None:  # what the HPA controller would publish
        hpas.patch_namespaced_horizontal_pod_autoscaler_status(
            "vllm-hpa", cluster.namespace, {"status": {"currentReplicas": current, "desiredReplicas": desired}}
        )


def test_an_owner_check_that_cannot_complete_writes_nothing(
    cluster: Cluster, loaded: PrometheusServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without the right to list HPAs the daemon cannot know that one owns the target: it holds, says why
    in the decision line, and records one Event naming the list and the missing rule."""
    cluster.deployment(NAME, 2)
    _hpa(cluster)
    rules = [r for r in shipped_rules() if r["resources"] != ["horizontalpodautoscalers"]]
    token = cluster.kube.service_account_token(cluster.namespace, "no-hpa")
    cluster.kube.grant(cluster.namespace, (cluster.namespace, "no-hpa"), rules, "no-hpa")
    kubeconfig = cluster.kube.kubeconfig(cluster.workdir / "no-hpa", token)
    for _ in range(2):
        assert run_once(cluster, policy_text(loaded.url, cluster.namespace), kubeconfig=kubeconfig) == 0
    lines = [e for e in log_lines(capsys) if e["event"] == "decision"]
    assert [e["reason"] for e in lines] == ["owner-unknown", "owner-unknown"]
    assert "horizontalpodautoscalers" in lines[0]["owner_unknown"][0]
    assert cluster.scale_writes(f"system:serviceaccount:{cluster.namespace}:no-hpa", ok=False) == []
    assert cluster.replicas(NAME) == 2
    recorded = [e for e in events(cluster) if e.reason == "OwnerUnknown"]
    assert len(recorded) == 2  # one per process: each run --once is a new daemon
    assert "`list` on horizontalpodautoscalers in apiGroup autoscaling" in recorded[0].message


def test_an_owner_list_that_fails_is_not_cached_as_no_owners(
    cluster: Cluster, loaded: PrometheusServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failed owner list is held as a failure for its backoff (no request sent meanwhile), never as "no
    owners"; asked again after it, the HPA is seen."""
    monkeypatch.setattr("autoscaler.actuators.kubernetes.BACKOFF_S", 1.0)
    cluster.deployment(NAME, 2)
    _hpa(cluster)
    proxy = FaultProxy(cluster.kube.url, cluster.kube.ca_file)
    try:
        proxy.inject("GET", "/horizontalpodautoscalers$", 500, times=None)
        controller = _controller(cluster, loaded.url, kubeconfig=cluster.kubeconfig(proxy.url))
        assert controller.tick()[0]["reason"] == "owner-unknown"
        proxy.clear()
        sent = len(proxy.requests("GET", "/horizontalpodautoscalers$"))
        assert controller.tick()[0]["reason"] == "owner-unknown"  # within the backoff: held, not asked
        assert len(proxy.requests("GET", "/horizontalpodautoscalers$")) == sent
        time.sleep(1.1)
        assert controller.tick()[0]["reason"] == "foreign-autoscaler"  # asked again, not cached as "none"
    finally:
        proxy.close()
    assert cluster.scale_writes() == []


def test_dry_run_beside_an_hpa_decides_as_if_it_were_ours(
    cluster: Cluster, loaded: PrometheusServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """Shadow mode: the count we would set, beside the HPA's own, and still no write of any kind."""
    cluster.deployment(NAME, 2)
    _hpa(cluster, current=2, desired=4)
    assert run_once(cluster, policy_text(loaded.url, cluster.namespace), "--dry-run") == 0
    would = [e for e in log_lines(capsys) if e["event"] == "would-scale"]
    assert len(would) == 1
    assert (would[0]["desired"], would[0]["owner_current"], would[0]["owner_desired"]) == (6, 2, 4)
    assert (would[0]["heading"], would[0]["agrees"]) == (8, False)  # ten replicas' worth, within maxReplicas 8
    assert would[0]["owners"] == ["HorizontalPodAutoscaler vllm-hpa"] and would[0]["shadow"] is True
    assert cluster.writes() == []
    hpa_status = {"status": {"currentReplicas": 8, "desiredReplicas": 8}}  # the owner comes round to ours
    client.AutoscalingV2Api(cluster.admin).patch_namespaced_horizontal_pod_autoscaler_status(
        "vllm-hpa", cluster.namespace, hpa_status
    )
    client.AppsV1Api(cluster.admin).patch_namespaced_deployment_scale(
        NAME, cluster.namespace, {"spec": {"replicas": 6}}
    )
    assert run_once(cluster, policy_text(loaded.url, cluster.namespace), "--dry-run") == 0
    agreeing = [e for e in log_lines(capsys) if e["event"] == "would-scale"]
    assert len(agreeing) == 1  # a line when it agrees too, every tick
    assert (agreeing[0]["desired"], agreeing[0]["owner_desired"], agreeing[0]["agrees"]) == (8, 8, True)
    assert cluster.writes() == []


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
    first = _controller(cluster, loaded.url, **workload)
    first.store = ConfigMapStateStore(api, cluster.namespace)
    assert first.tick()[0]["applied"]
    del first
    with cluster.kubelet(startup_delay=1.5):
        second = _controller(cluster, loaded.url, **workload)
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
        controller = _controller(cluster, f"http://127.0.0.1:{free_port()}")  # nothing listens there
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
    controller = _controller(cluster, loaded.url, kubeconfig=cluster.kube.kubeconfig(cluster.workdir / "ns", token))
    for _ in range(5):
        assert controller.tick()[0]["write"] == "forbidden"
    failed = [e for e in events(cluster) if e.reason == "FailedRescale"]
    assert len(failed) == 1 and failed[0].count == 5


def test_two_installs_never_scale_one_target(cluster: Cluster, loaded: PrometheusServer) -> None:
    """Install a claims the target with its first write; install b, which also lists it, leaves it alone
    (a foreign autoscaler) until a drops the workload from its policy and gives the claim up."""
    from autoscaler.actuators.base import CLAIMED_BY

    cluster.deployment(NAME, 2)

    def install(name: str) -> Controller:
        folder = cluster.workdir / name
        folder.mkdir()
        policy = folder / "policy.json"
        policy.write_text(policy_text(loaded.url, cluster.namespace))
        return cluster.controller(policy, install=f"{cluster.namespace}/{name}")

    first, second = install("a"), install("b")
    assert first.tick()[0]["applied"]
    deployment = client.AppsV1Api(cluster.admin).read_namespaced_deployment(NAME, cluster.namespace)
    assert deployment.metadata.annotations[CLAIMED_BY] == f"{cluster.namespace}/a"
    cluster.kube.set_replicas(cluster.namespace, NAME, 2)
    line = second.tick()[0]
    assert line["reason"] == "foreign-autoscaler" and line["owners"] == [
        f"vllm-autoscaler install {cluster.namespace}/a"
    ]
    assert cluster.replicas(NAME) == 2
    (cluster.workdir / "a" / "policy.json").write_text(
        json.dumps(
            {
                "interval": 15,
                "prometheus": {"url": loaded.url},
                "workloads": [
                    json.loads(policy_text(loaded.url, cluster.namespace))["workloads"][0]
                    | {"target": {"namespace": cluster.namespace, "name": "other"}}
                ],
            }
        )
    )
    first.tick()  # the reload drops the workload: a releases its claim
    assert second.tick()[0]["applied"]
    deployment = client.AppsV1Api(cluster.admin).read_namespaced_deployment(NAME, cluster.namespace)
    assert deployment.metadata.annotations[CLAIMED_BY] == f"{cluster.namespace}/b"


def test_one_fence_for_every_write(cluster: Cluster) -> None:
    """Events and the state ConfigMap pass the Lease's fence as scale writes do: with no authority left, neither
    reaches the API server; with it back, both do."""
    from autoscaler.state import STATE_CONFIGMAP, ConfigMapStateStore, WorkloadRecord

    cluster.deployment(NAME, 2)
    api = api_client(str(cluster.kubeconfig()))
    left = {"s": 0.0}
    target = TargetRef(namespace=cluster.namespace, name=NAME)
    actuator = KubernetesActuator(api, authority=lambda: left["s"])
    store = ConfigMapStateStore(api, cluster.namespace, authority=lambda: left["s"])
    record = {
        "k.json": WorkloadRecord(
            workload=f"{cluster.namespace}/{NAME}", target="Deployment/x", policy="p", updated_at=1.0
        )
    }
    actuator.event(target, "Normal", "SuccessfulRescale", "fenced")
    store.save(record)
    assert events(cluster) == []
    configmaps = client.CoreV1Api(cluster.admin).list_namespaced_config_map(cluster.namespace).items
    assert STATE_CONFIGMAP not in {c.metadata.name for c in configmaps}
    left["s"] = 5.0
    actuator.event(target, "Normal", "SuccessfulRescale", "allowed")
    store.save(record)
    assert [e.message for e in events(cluster)] == ["allowed"]
    assert [r.workload for r in ConfigMapStateStore(api, cluster.namespace).load().values()] == [
        f"{cluster.namespace}/{NAME}"
    ]


def test_a_throttled_namespace_leaves_a_healthy_one_deciding_every_interval(
    cluster: Cluster, loaded: PrometheusServer
) -> None:
    """Every read in one namespace answers 429 with ``Retry-After: 5``: its workload holds (its target unreadable,
    then its owner unknown), the LIST is not sent again for those 5 s, and the healthy namespace beside it decides
    and scales on every tick, each tick well within its interval."""
    cluster.deployment(NAME, 2)
    other = cluster.kube.create_namespace("t")
    try:
        cluster.kube.grant(other, (cluster.namespace, cluster.account), shipped_rules(), "shipped")
        cluster.kube.create_deployment(other, NAME, 2)
        document = json.loads(policy_text(loaded.url, cluster.namespace))
        document["workloads"].append({**document["workloads"][0], "target": {"namespace": other, "name": NAME}})
        path = cluster.workdir / "two.json"
        path.write_text(json.dumps(document))
        proxy = FaultProxy(cluster.kube.url, cluster.kube.ca_file)
        try:
            proxy.inject("GET", f"/namespaces/{other}/", 429, times=None, retry_after=5)
            controller = cluster.controller(path, cluster.kubeconfig(proxy.url))
            walls, reasons = [], []
            for _ in range(8):
                started = time.monotonic()
                lines = {line["workload"]: line for line in controller.tick()}
                walls.append(time.monotonic() - started)
                reasons.append((lines[f"{cluster.namespace}/{NAME}"]["reason"], lines[f"{other}/{NAME}"]["reason"]))
                time.sleep(0.5)
            throttled = [s for s in proxy.requests("GET") if f"/namespaces/{other}/" in s.path]
        finally:
            proxy.close()
    finally:
        cluster.kube.delete_namespace(other)
    assert max(walls) < 1.5, walls
    assert all(healthy not in ("target-unavailable", "owner-unknown") for healthy, _ in reasons), reasons
    assert all(held in ("target-unavailable", "owner-unknown") for _, held in reasons), reasons
    assert cluster.replicas(NAME) == 6  # the healthy one scaled
    assert len(throttled) <= 2 * 2  # its deployments and HPA lists, once per Retry-After: not on every tick
