"""The daemon end to end: the official client and a kubeconfig against the API emulator, metrics from a
real Prometheus scraping the vLLM-shaped exporter."""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from structlog.testing import capture_logs

from autoscaler.actuators.base import ScaleState
from autoscaler.actuators.dryrun import DryRunActuator
from autoscaler.actuators.kubernetes import KubernetesActuator, api_client
from autoscaler.cli import main
from autoscaler.controller import Controller
from autoscaler.leader import LeaderElector
from autoscaler.metrics.prometheus import PrometheusSource
from autoscaler.policy_file import load_policy_file
from autoscaler.telemetry import Telemetry
from tests.k8s_emulator import KubernetesEmulator
from tests.servers import PrometheusServer, VllmExporter, free_port, start_daemon, wait_for

pytestmark = pytest.mark.integration
NS, NAME = "llm-serving", "vllm-llama3-70b"
SCALE_PATH = f"/apis/apps/v1/namespaces/{NS}/deployments/{NAME}/scale"


@pytest.fixture
def k8s() -> Iterator[KubernetesEmulator]:
    emulator = KubernetesEmulator()
    yield emulator
    emulator.close()


def policy_text(prometheus_url: str, **workload: Any) -> str:
    spec: dict[str, Any] = {
        "target": {"kind": "Deployment", "namespace": NS, "name": NAME},
        "minReplicas": 1,
        "maxReplicas": 8,
        "metrics": [{"name": "num_requests_waiting", "target": {"type": "AverageValue", "value": 2}}],
    }
    spec.update(workload)
    return json.dumps({"interval": 15, "prometheus": {"url": prometheus_url, "timeout": 2}, "workloads": [spec]})


@pytest.fixture
def loaded(exporter: VllmExporter, prometheus: PrometheusServer) -> PrometheusServer:
    """Two pods with 10 waiting requests each: 20 in all, ten replicas' worth at a target of 2."""
    exporter.set_pods(NS, NAME, waiting=[10, 10], kv=[0.5, 0.5])
    wait_for(
        lambda: requests.get(
            f"{prometheus.url}/api/v1/query", params={"query": "sum(vllm:num_requests_waiting)"}
        ).json()["data"]["result"],
        30,
        "the exporter's values in Prometheus",
    )
    return prometheus


def log_lines(capsys: pytest.CaptureFixture[str]) -> list[dict[str, Any]]:
    """The daemon's JSON log lines written to standard error so far."""
    lines = []
    for line in capsys.readouterr().err.splitlines():
        if line.startswith("{"):
            lines.append(json.loads(line))
    return lines


def run_once(tmp_path: Path, k8s: KubernetesEmulator, text: str, *extra: str) -> int:
    policy = tmp_path / "policy.json"
    policy.write_text(text)
    kubeconfig = k8s.kubeconfig(tmp_path / "kubeconfig")
    return main(["run", "--config", str(policy), "--once", "--kubeconfig", str(kubeconfig), *extra])


def test_a_load_step_scales_up_with_one_patch(
    tmp_path: Path, k8s: KubernetesEmulator, loaded: PrometheusServer
) -> None:
    k8s.add_deployment(NS, NAME, 2)
    assert run_once(tmp_path, k8s, policy_text(loaded.url)) == 0
    writes = k8s.scale_writes()
    assert len(writes) == 1
    assert writes[0].method == "PATCH" and writes[0].path == SCALE_PATH
    assert writes[0].content_type == "application/merge-patch+json"
    assert writes[0].body["spec"] == {"replicas": 6}  # 20 waiting / 2 = 10, at most max(2 + 4, 2 * 2) per 15 s
    assert k8s.get("deployments", NS, NAME)["spec"]["replicas"] == 6  # type: ignore[index]
    events = [r.body for r in k8s.writes("/events")]
    assert [e["reason"] for e in events] == ["SuccessfulRescale"]
    assert events[0]["involvedObject"]["name"] == NAME


def test_dry_run_sends_no_write_at_all(
    tmp_path: Path, k8s: KubernetesEmulator, loaded: PrometheusServer, capsys: pytest.CaptureFixture[str]
) -> None:
    k8s.add_deployment(NS, NAME, 2)
    assert run_once(tmp_path, k8s, policy_text(loaded.url), "--dry-run") == 0
    logs = log_lines(capsys)
    assert k8s.writes() == []
    assert {r.method for r in k8s.requests} == {"GET"}
    would = [e for e in logs if e["event"] == "would-scale"]
    assert would and would[0]["desired"] == 6 and would[0]["dry_run"] is True


def test_a_conflict_is_retried_with_a_fresh_read(
    tmp_path: Path, k8s: KubernetesEmulator, loaded: PrometheusServer
) -> None:
    k8s.add_deployment(NS, NAME, 2)
    k8s.inject("PATCH", "/scale$", 409)
    assert run_once(tmp_path, k8s, policy_text(loaded.url)) == 0
    assert [r.status for r in k8s.scale_writes()] == [409, 200]
    assert k8s.get("deployments", NS, NAME)["spec"]["replicas"] == 6  # type: ignore[index]


def test_too_many_requests_and_server_errors_back_off(
    tmp_path: Path, k8s: KubernetesEmulator, loaded: PrometheusServer
) -> None:
    k8s.add_deployment(NS, NAME, 2)
    k8s.inject("PATCH", "/scale$", 429, times=1, retry_after=0)
    k8s.inject("PATCH", "/scale$", 503, times=1)
    assert run_once(tmp_path, k8s, policy_text(loaded.url)) == 0
    assert [r.status for r in k8s.scale_writes()] == [429, 503, 200]


def test_a_count_changed_by_hand_is_not_overwritten(tmp_path: Path, k8s: KubernetesEmulator) -> None:
    k8s.add_deployment(NS, NAME, 2)
    actuator = KubernetesActuator(api_client(str(k8s.kubeconfig(tmp_path / "kubeconfig"))))
    from autoscaler.policy_file import TargetRef

    target = TargetRef(namespace=NS, name=NAME)
    state = actuator.read(target)
    k8s.set_replicas_by_hand(NS, NAME, 5)
    result = actuator.scale(target, state, 6)
    assert (result.applied, result.outcome) == (False, "changed-concurrently")
    assert k8s.get("deployments", NS, NAME)["spec"]["replicas"] == 5  # type: ignore[index]


def test_forbidden_and_missing_targets(
    tmp_path: Path, k8s: KubernetesEmulator, loaded: PrometheusServer, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_once(tmp_path, k8s, policy_text(loaded.url)) == 0
    assert any(e.get("reason") == "target-not-found" for e in log_lines(capsys))
    k8s.add_deployment(NS, NAME, 2)
    k8s.deny("patch", "deployments/scale")
    assert run_once(tmp_path, k8s, policy_text(loaded.url)) == 0
    assert any(e.get("write") == "forbidden" for e in log_lines(capsys))
    assert k8s.get("deployments", NS, NAME)["spec"]["replicas"] == 2  # type: ignore[index]
    assert [r.body["reason"] for r in k8s.writes("/events")] == ["FailedRescale"]


def test_the_pause_annotations_are_respected(tmp_path: Path, k8s: KubernetesEmulator, loaded: PrometheusServer) -> None:
    k8s.add_deployment(NS, NAME, 2, annotations={"vllm-autoscaler.io/paused": "true"})
    assert run_once(tmp_path, k8s, policy_text(loaded.url)) == 0
    assert k8s.scale_writes() == []
    k8s.delete("deployments", NS, NAME)
    k8s.add_deployment(NS, NAME, 2, annotations={"vllm-autoscaler.io/paused-replicas": "3"})
    assert run_once(tmp_path, k8s, policy_text(loaded.url)) == 0
    assert [w.body["spec"]["replicas"] for w in k8s.scale_writes()] == [3]


@pytest.mark.parametrize("owner", ["hpa", "scaledobject"])
def test_a_target_owned_by_another_autoscaler_is_refused(
    tmp_path: Path, k8s: KubernetesEmulator, loaded: PrometheusServer, owner: str
) -> None:
    k8s.add_deployment(NS, NAME, 2)
    ref = {"apiVersion": "apps/v1", "kind": "Deployment", "name": NAME}
    if owner == "hpa":
        k8s.add("horizontalpodautoscalers", NS, "vllm-hpa", {"spec": {"scaleTargetRef": ref, "maxReplicas": 8}})
    else:
        k8s.add("scaledobjects", NS, "vllm-so", {"spec": {"scaleTargetRef": {"name": NAME}}})
    assert run_once(tmp_path, k8s, policy_text(loaded.url)) == 0
    assert k8s.scale_writes() == []
    events = [r.body for r in k8s.writes("/events")]
    assert [e["reason"] for e in events] == ["ForeignAutoscaler"]
    assert ("vllm-hpa" if owner == "hpa" else "vllm-so") in events[0]["message"]


def test_a_deployment_at_zero_is_left_alone(tmp_path: Path, k8s: KubernetesEmulator, loaded: PrometheusServer) -> None:
    k8s.add_deployment(NS, NAME, 0)
    assert run_once(tmp_path, k8s, policy_text(loaded.url)) == 0
    assert k8s.scale_writes() == []


def _controller(
    tmp_path: Path,
    k8s: KubernetesEmulator,
    prometheus_url: str,
    clock: Any = time.time,
    elector: LeaderElector | None = None,
    dry_run: bool = False,
) -> Controller:
    policy = tmp_path / "config" / "policy.json"
    policy.parent.mkdir(exist_ok=True)
    if not policy.exists():
        policy.write_text(policy_text(prometheus_url))
    document = load_policy_file(policy)
    actuator: Any = KubernetesActuator(api_client(str(k8s.kubeconfig(tmp_path / "kubeconfig"))))
    if dry_run:
        actuator = DryRunActuator(actuator)
    return Controller(policy, document, PrometheusSource(document.prometheus), actuator, Telemetry(), clock, elector)


def test_a_bad_policy_keeps_the_last_good_one(
    tmp_path: Path, k8s: KubernetesEmulator, loaded: PrometheusServer
) -> None:
    k8s.add_deployment(NS, NAME, 2)
    controller = _controller(tmp_path, k8s, loaded.url)
    first = controller.tick()[0]
    assert first["desired"] == 6
    state = controller.runtime[f"{NS}/{NAME}"].decider.behavior_state
    policy = tmp_path / "config" / "policy.json"
    policy.write_text("workloads: [{target: {namespace: llm-serving}, maxReplicas: -1}")
    with capture_logs() as logs:
        second = controller.tick()[0]
    assert any(e["event"] == "policy-rejected" for e in logs)
    assert second["reason"] in ("scale-up", "rate-limited", "within-tolerance", "steady", "stabilized")
    assert [r.body["reason"] for r in k8s.writes("/events")].count("InvalidPolicy") == 1
    controller.tick()  # the same bad file is not reported again
    assert [r.body["reason"] for r in k8s.writes("/events")].count("InvalidPolicy") == 1
    policy.write_text(policy_text(loaded.url, maxReplicas=7))
    with capture_logs() as logs:
        controller.tick()
    assert any(e["event"] == "policy-reloaded" for e in logs)
    runtime = controller.runtime[f"{NS}/{NAME}"]
    assert runtime.workload.max_replicas == 7
    assert runtime.decider.behavior_state is state  # decision state survived the reload


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_two_daemons_with_leader_election_never_both_write(
    tmp_path: Path, k8s: KubernetesEmulator, loaded: PrometheusServer
) -> None:
    k8s.add_deployment(NS, NAME, 1)
    api = api_client(str(k8s.kubeconfig(tmp_path / "kubeconfig")))
    clocks = [FakeClock(), FakeClock()]
    electors = [
        LeaderElector(api, "autoscaler", "vllm-autoscaler", f"replica-{i}", 15, 10, 2, clocks[i]) for i in range(2)
    ]
    controllers = [_controller(tmp_path, k8s, loaded.url, elector=electors[i]) for i in range(2)]
    leaders_over_time = []
    for step in range(40):
        for clock in clocks:
            clock.now = 1000.0 + step
        renewing = [True, step < 10]  # replica-0 freezes after step 10: it stops renewing
        renewing[0] = step < 10
        renewing[1] = True
        for i in (0, 1):
            if renewing[i]:
                electors[i].try_acquire_or_renew()
        leaders = [e.is_leader() for e in electors]
        assert not all(leaders), f"both replicas lead at step {step}"
        leaders_over_time.append(leaders)
        for i in (0, 1):
            before = len(k8s.scale_writes())
            k8s.set_replicas_by_hand(NS, NAME, 1) if step % 5 == 0 else None
            lines = controllers[i].tick()
            wrote = len(k8s.scale_writes()) > before
            assert not wrote or leaders[i], f"replica-{i} wrote at step {step} without the lease"
            assert lines[0].get("write") != "not-leader" or not leaders[i]
    assert leaders_over_time[0] == [True, False]
    # replica-0 stops writing 10 s after its last renewal; replica-1 takes over only 15 s after it last saw it.
    assert leaders_over_time[20] == [False, False] or leaders_over_time[20] == [False, True]
    assert leaders_over_time[-1] == [False, True]
    lease = k8s.get("leases", "autoscaler", "vllm-autoscaler")
    assert lease is not None and lease["spec"]["holderIdentity"] == "replica-1"
    assert lease["spec"]["leaseTransitions"] == 1


def test_releasing_the_lease_hands_over_at_once(tmp_path: Path, k8s: KubernetesEmulator) -> None:
    api = api_client(str(k8s.kubeconfig(tmp_path / "kubeconfig")))
    clock = FakeClock()
    first = LeaderElector(api, "autoscaler", "lock", "a", 15, 10, 2, clock)
    second = LeaderElector(api, "autoscaler", "lock", "b", 15, 10, 2, clock)
    assert first.try_acquire_or_renew() and not second.try_acquire_or_renew()
    first.release()
    assert not first.is_leader()
    assert second.try_acquire_or_renew()


def test_cold_start_is_measured(tmp_path: Path, loaded: PrometheusServer) -> None:
    k8s = KubernetesEmulator(startup_delay=1.0)
    try:
        k8s.add_deployment(NS, NAME, 2)
        policy = tmp_path / "config" / "policy.json"
        policy.parent.mkdir()
        policy.write_text(policy_text(loaded.url, coldStartSeconds="auto", policy={"type": "predictive"}))
        controller = _controller(tmp_path, k8s, loaded.url)
        assert controller.tick()[0]["applied"]
        time.sleep(1.5)  # the emulator's kubelet starts pods on the wall clock
        with capture_logs() as logs:
            controller.tick()
        measured = [e for e in logs if e["event"] == "cold-start-measured"]
        assert measured and 1.0 <= measured[0]["seconds"] < 5
        samples = controller.telemetry.registry.get_sample_value(
            "vllm_autoscaler_cold_start_seconds_count", {"workload": f"{NS}/{NAME}"}
        )
        assert samples == 1
    finally:
        k8s.close()


def test_the_daemon_serves_health_and_metrics_and_stops_on_sigterm(
    tmp_path: Path, k8s: KubernetesEmulator, loaded: PrometheusServer
) -> None:
    k8s.add_deployment(NS, NAME, 2)
    policy = tmp_path / "policy.json"
    policy.write_text(policy_text(loaded.url))
    port = free_port()
    process = start_daemon(policy, k8s.kubeconfig(tmp_path / "kubeconfig"), port, tmp_path / "daemon.log")
    try:
        base = f"http://127.0.0.1:{port}"

        def answers(path: str) -> int:
            try:
                return requests.get(base + path, timeout=1).status_code
            except requests.RequestException:
                return 0

        wait_for(lambda: answers("/readyz") == 200, 30, "/readyz")
        assert answers("/healthz") == 200
        metrics = requests.get(base + "/metrics", timeout=2).text
        assert f'vllm_autoscaler_desired_replicas{{workload="{NS}/{NAME}"}} 6.0' in metrics
        assert "vllm_autoscaler_decisions_total" in metrics
        process.send_signal(signal.SIGTERM)
        assert process.wait(20) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(5)
    assert k8s.get("deployments", NS, NAME)["spec"]["replicas"] == 6  # type: ignore[index]


def test_bad_config_exits_2(tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text("workloads: []\n")
    assert main(["run", "--config", str(policy), "--once"]) == 2


def test_scale_state_is_read_from_the_scale_subresource(tmp_path: Path, k8s: KubernetesEmulator) -> None:
    k8s.add_deployment(NS, NAME, 3, annotations={"a": "b"}, ready=1)
    actuator = KubernetesActuator(api_client(str(k8s.kubeconfig(tmp_path / "kubeconfig"))))
    from autoscaler.policy_file import TargetRef

    state = actuator.read(TargetRef(namespace=NS, name=NAME))
    assert isinstance(state, ScaleState) and (state.replicas, state.annotations) == (3, {"a": "b"})
    assert [r.path for r in k8s.requests] == [SCALE_PATH, f"/apis/apps/v1/namespaces/{NS}/deployments/{NAME}"]


def test_one_list_per_namespace_and_a_fallback_when_listing_is_refused(
    tmp_path: Path, k8s: KubernetesEmulator, loaded: PrometheusServer
) -> None:
    k8s.add_deployment(NS, NAME, 2)
    assert run_once(tmp_path, k8s, policy_text(loaded.url)) == 0
    reads = [r.path for r in k8s.requests if r.method == "GET" and "/deployments" in r.path]
    assert reads == [f"/apis/apps/v1/namespaces/{NS}/deployments"]
    k8s.requests.clear()
    k8s.set_replicas_by_hand(NS, NAME, 2)
    k8s.deny("list", "deployments")
    assert run_once(tmp_path, k8s, policy_text(loaded.url)) == 0
    assert SCALE_PATH in [r.path for r in k8s.requests if r.method == "GET"]
    assert [w.body["spec"]["replicas"] for w in k8s.scale_writes() if w.status == 200] == [6]
