"""Faults injected from outside, against the real daemon process, real Prometheus and the API emulator.

Every test ends by checking the emulator's record of every request: no successful write outside
``[minReplicas, maxReplicas]``, none from a replica that did not hold the lease, none at all in dry-run; and
the daemon process is still alive (no crash loop).
"""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import requests

from autoscaler.controller import Controller
from autoscaler.metrics.prometheus import PrometheusSource
from autoscaler.policy_file import parse_policy_document
from tests.k8s_emulator import KubernetesEmulator, Recorded
from tests.servers import PrometheusServer, VllmExporter, free_port, start_daemon, wait_for

pytestmark = pytest.mark.integration
NS, NAME = "llm-serving", "vllm-llama3-70b"
LO, HI = 2, 8


def policy(prometheus_url: str, **extra: Any) -> str:
    workload: dict[str, Any] = {
        "target": {"namespace": NS, "name": NAME},
        "minReplicas": LO,
        "maxReplicas": HI,
        "metrics": [{"name": "num_requests_waiting", "target": {"type": "AverageValue", "value": 2}}],
        "behavior": {"scaleDown": {"stabilizationWindowSeconds": 0}},
    }
    workload.update(extra)
    return json.dumps({"interval": 1, "prometheus": {"url": prometheus_url, "timeout": 1}, "workloads": [workload]})


class Daemon:
    """``python -m autoscaler run`` as a separate process."""

    def __init__(
        self, workdir: Path, k8s: KubernetesEmulator, policy_path: Path, name: str = "daemon", *args: str, **env: str
    ) -> None:
        self.port = free_port()
        kubeconfig = k8s.kubeconfig(workdir / f"{name}.kubeconfig", token=f"token-{name}")
        self.process = start_daemon(
            policy_path, kubeconfig, self.port, workdir / f"{name}.log", *args, VLLM_AUTOSCALER_IDENTITY=name, **env
        )
        self.name = name

    def alive(self) -> bool:
        return self.process.poll() is None

    def healthy(self) -> bool:
        try:
            return requests.get(f"http://127.0.0.1:{self.port}/healthz", timeout=1).status_code == 200
        except requests.RequestException:
            return False

    def stop(self) -> int:
        if self.alive():
            self.process.send_signal(signal.SIGTERM)
            try:
                return self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
        return self.process.wait(5)


@pytest.fixture
def k8s() -> Iterator[KubernetesEmulator]:
    emulator = KubernetesEmulator()
    emulator.add_deployment(NS, NAME, LO)
    yield emulator
    emulator.close()


def successful_writes(k8s: KubernetesEmulator) -> list[Recorded]:
    return [w for w in k8s.scale_writes() if w.status == 200]


def check_invariants(k8s: KubernetesEmulator, lo: int = LO, hi: int = HI) -> None:
    for write in successful_writes(k8s):
        assert lo <= write.body["spec"]["replicas"] <= hi, f"write outside [{lo}, {hi}]: {write.body}"


def replicas(k8s: KubernetesEmulator) -> int:
    return int(k8s.get("deployments", NS, NAME)["spec"]["replicas"])  # type: ignore[index]


@pytest.fixture
def started(
    tmp_path: Path, k8s: KubernetesEmulator, exporter: VllmExporter, prometheus: PrometheusServer
) -> Iterator[tuple[Daemon, Path]]:
    exporter.set_pods(NS, NAME, waiting=[2, 2])  # 4 waiting: steady at 2 replicas
    path = tmp_path / "policy.json"
    path.write_text(policy(prometheus.url))
    daemon = Daemon(tmp_path, k8s, path)
    wait_for(daemon.healthy, 30, "the daemon")
    yield daemon, path
    assert daemon.alive(), (tmp_path / "daemon.log").read_text()[-3000:]
    assert daemon.stop() == 0
    check_invariants(k8s)


def test_prometheus_killed_and_restarted(
    started: tuple[Daemon, Path], k8s: KubernetesEmulator, exporter: VllmExporter, prometheus: PrometheusServer
) -> None:
    wait_for(
        lambda: requests.get(f"http://127.0.0.1:{started[0].port}/readyz", timeout=1).status_code == 200,
        30,
        "readiness",
    )
    prometheus.process.kill()  # type: ignore[union-attr]
    prometheus.process.wait()  # type: ignore[union-attr]
    prometheus.process = None
    exporter.set_pods(NS, NAME, waiting=[10, 10])
    down_since = time.time()
    wait_for(lambda: time.time() - down_since > 4, 10, "a few ticks without Prometheus")
    assert successful_writes(k8s) == [] and replicas(k8s) == LO  # held where it was
    assert requests.get(f"http://127.0.0.1:{started[0].port}/readyz", timeout=1).status_code == 503
    prometheus.start()
    wait_for(lambda: replicas(k8s) > LO, 40, "the scale-up once Prometheus is back")


class SlowProxy:
    """Forwards to Prometheus, answering ``delay`` seconds late while ``slow`` is set."""

    def __init__(self, upstream: str) -> None:
        self.slow = threading.Event()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if proxy.slow.is_set():
                    time.sleep(3)
                try:
                    answer = requests.get(upstream + self.path, timeout=5)
                    body, status = answer.content, answer.status_code
                except requests.RequestException:
                    body, status = b"{}", 502
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except OSError:
                    pass

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def test_prometheus_answering_past_the_timeout(
    tmp_path: Path, k8s: KubernetesEmulator, exporter: VllmExporter, prometheus: PrometheusServer
) -> None:
    proxy = SlowProxy(prometheus.url)
    exporter.set_pods(NS, NAME, waiting=[2, 2])
    path = tmp_path / "policy.json"
    path.write_text(policy(proxy.url))
    proxy.slow.set()
    daemon = Daemon(tmp_path, k8s, path)
    try:
        wait_for(daemon.healthy, 30, "the daemon")
        exporter.set_pods(NS, NAME, waiting=[10, 10])
        slow_since = time.time()
        wait_for(lambda: time.time() - slow_since > 6, 10, "ticks against a slow Prometheus")
        assert successful_writes(k8s) == []
        assert b"timeout" in (tmp_path / "daemon.log").read_bytes()
        proxy.slow.clear()
        wait_for(lambda: replicas(k8s) > LO, 40, "the scale-up once Prometheus answers in time")
        assert daemon.alive() and daemon.stop() == 0
    finally:
        proxy.server.shutdown()
    check_invariants(k8s)


def test_api_conflicts_throttling_errors_and_dropped_connections(
    tmp_path: Path, k8s: KubernetesEmulator, exporter: VllmExporter, prometheus: PrometheusServer
) -> None:
    exporter.set_pods(NS, NAME, waiting=[2, 2])
    for status in (409, 429, 500, "drop", 409, 503, "drop"):
        k8s.inject("PATCH", "/scale$", status, retry_after=0 if status == 429 else None)
    k8s.inject("GET", "/deployments$", "drop", times=2)
    k8s.inject("GET", "/deployments$", 500, times=2)
    path = tmp_path / "policy.json"
    path.write_text(policy(prometheus.url))
    daemon = Daemon(tmp_path, k8s, path)
    wait_for(daemon.healthy, 30, "the daemon")
    exporter.set_pods(NS, NAME, waiting=[6, 6])  # 12 waiting: 6 replicas
    wait_for(lambda: replicas(k8s) == 6, 60, "the scale-up through the faults")
    statuses = [w.status for w in k8s.scale_writes()]
    assert {409, 429, 500, -1} <= set(statuses) and statuses[-1] == 200
    assert daemon.alive() and daemon.stop() == 0
    check_invariants(k8s)


def test_deployment_deleted_and_recreated(
    started: tuple[Daemon, Path], k8s: KubernetesEmulator, exporter: VllmExporter
) -> None:
    k8s.delete("deployments", NS, NAME)
    exporter.set_pods(NS, NAME, waiting=[8, 8])
    gone_since = time.time()
    wait_for(lambda: time.time() - gone_since > 3, 10, "ticks without the Deployment")
    assert successful_writes(k8s) == []
    k8s.add_deployment(NS, NAME, 3)
    wait_for(lambda: replicas(k8s) == 8, 40, "the re-created Deployment scaled")


def test_policy_replaced_by_garbage_then_fixed(
    started: tuple[Daemon, Path],
    k8s: KubernetesEmulator,
    exporter: VllmExporter,
    prometheus: PrometheusServer,
    tmp_path: Path,
) -> None:
    daemon, path = started
    path.write_text("workloads: [ {target: {namespace: llm-serving}, maxReplicas: -1")
    wait_for(
        lambda: any(r.body.get("reason") == "InvalidPolicy" for r in k8s.writes("/events")),
        20,
        "the InvalidPolicy Event",
    )
    exporter.set_pods(NS, NAME, waiting=[5, 5])  # 10 waiting: 5 replicas under the last good policy
    wait_for(lambda: replicas(k8s) == 5, 30, "scaling under the last good policy")
    path.write_text(policy(prometheus.url, maxReplicas=4))
    wait_for(lambda: replicas(k8s) == 4, 30, "the fixed policy's new maximum")
    assert b"policy-reloaded" in (tmp_path / "daemon.log").read_bytes()
    assert daemon.alive()


def test_replicas_changed_by_hand(started: tuple[Daemon, Path], k8s: KubernetesEmulator) -> None:
    k8s.set_replicas_by_hand(NS, NAME, 12)  # above max: brought to the bound, then down with the load
    wait_for(
        lambda: any(w.body["spec"]["replicas"] == HI for w in successful_writes(k8s)),
        20,
        "the count above max brought to max",
    )
    wait_for(lambda: replicas(k8s) == LO, 20, "back to what the load needs")
    k8s.set_replicas_by_hand(NS, NAME, 0)  # to zero by hand: left alone, as the HPA does
    zero_since = time.time()
    wait_for(lambda: time.time() - zero_since > 3, 10, "ticks at zero")
    assert replicas(k8s) == 0
    k8s.set_replicas_by_hand(NS, NAME, 2)
    wait_for(lambda: time.time() - zero_since > 5, 10, "ticks after")
    assert replicas(k8s) == 2


def test_the_leader_killed_while_another_waits(
    tmp_path: Path, k8s: KubernetesEmulator, exporter: VllmExporter, prometheus: PrometheusServer
) -> None:
    exporter.set_pods(NS, NAME, waiting=[2, 2])
    path = tmp_path / "policy.json"
    path.write_text(policy(prometheus.url))
    election = {
        "VLLM_AUTOSCALER_LEADER_ELECT": "true",
        "VLLM_AUTOSCALER_LEASE_NAMESPACE": "autoscaler",
        "VLLM_AUTOSCALER_LEASE_DURATION_S": "3",
        "VLLM_AUTOSCALER_RENEW_DEADLINE_S": "2",
        "VLLM_AUTOSCALER_RETRY_PERIOD_S": "0.5",
    }
    first = Daemon(tmp_path, k8s, path, "first", **election)
    wait_for(
        lambda: (
            (k8s.get("leases", "autoscaler", "vllm-autoscaler") or {}).get("spec", {}).get("holderIdentity") == "first"
        ),
        30,
        "the first daemon to lead",
    )
    second = Daemon(tmp_path, k8s, path, "second", **election)
    wait_for(second.healthy, 30, "the second daemon")
    exporter.set_pods(NS, NAME, waiting=[5, 5])
    wait_for(lambda: replicas(k8s) == 5, 30, "the leader's scale-up")
    first.process.kill()  # SIGKILL: no release, the lease must expire
    first.process.wait()
    exporter.set_pods(NS, NAME, waiting=[8, 8])
    wait_for(lambda: replicas(k8s) == 8, 40, "the second daemon's scale-up after taking over")
    writers = {w.token: w.lease_holders.get("autoscaler/vllm-autoscaler") for w in successful_writes(k8s)}
    assert set(writers) == {"token-first", "token-second"}
    for write in successful_writes(k8s):
        assert write.lease_holders["autoscaler/vllm-autoscaler"] == write.token.removeprefix("token-")  # type: ignore[union-attr]
    assert second.alive() and second.stop() == 0
    check_invariants(k8s)


def test_dry_run_writes_nothing_whatever_happens(
    tmp_path: Path, k8s: KubernetesEmulator, exporter: VllmExporter, prometheus: PrometheusServer
) -> None:
    exporter.set_pods(NS, NAME, waiting=[10, 10])
    path = tmp_path / "policy.json"
    path.write_text(policy(prometheus.url))
    daemon = Daemon(tmp_path, k8s, path, "dry", "--dry-run")
    wait_for(lambda: b"would-scale" in (tmp_path / "dry.log").read_bytes(), 30, "a would-scale line")
    k8s.set_replicas_by_hand(NS, NAME, 12)
    path.write_text("garbage: [")
    wait_for(lambda: b"policy-rejected" in (tmp_path / "dry.log").read_bytes(), 20, "the rejected policy")
    assert daemon.alive() and daemon.stop() == 0
    assert [r for r in k8s.requests if r.method != "GET"] == []


def test_clock_steps(
    tmp_path: Path, k8s: KubernetesEmulator, exporter: VllmExporter, prometheus: PrometheusServer
) -> None:
    """The wall clock jumping a day forward and back between ticks: decisions run on a monotonic clock."""
    from autoscaler.actuators.kubernetes import KubernetesActuator, api_client

    exporter.set_pods(NS, NAME, waiting=[6, 6])
    document = parse_policy_document(json.loads(policy(prometheus.url)))
    offset = {"s": 0.0}
    controller = Controller(
        None,
        document,
        PrometheusSource(document.prometheus),
        KubernetesActuator(api_client(str(k8s.kubeconfig(tmp_path / "kc")))),
        clock=lambda: time.time() + offset["s"],
    )
    wait_for(lambda: controller.tick()[0].get("metrics", {}).get("num_requests_waiting") == 12, 30, "metrics")
    for jump in (3600.0, -7200.0, 86_400.0, -86_400.0):
        offset["s"] += jump
        line = controller.tick()[0]
        assert LO <= line["desired"] <= HI
    check_invariants(k8s)
    assert replicas(k8s) == 6
