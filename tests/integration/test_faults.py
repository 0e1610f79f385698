"""Faults injected from outside, against the real daemon process, a real Prometheus and the real
kube-apiserver (faults it will not produce on demand through the fault proxy).

Every test ends by checking the server's audit log: no successful write outside ``[minReplicas,
maxReplicas]``, none from a replica that did not hold the Lease, none at all in dry-run; and the daemon
process is still alive (no crash loop).
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

from autoscaler.cli import main
from autoscaler.controller import Controller
from autoscaler.metrics.prometheus import PrometheusSource
from autoscaler.testing.fault_proxy import DROP, FaultProxy
from autoscaler.testing.kube import AuditEvent
from autoscaler.testing.servers import PrometheusServer, VllmExporter, free_port, start_daemon, wait_for
from policies.policy_file import parse_policy_document
from tests.integration.conftest import Cluster

pytestmark = pytest.mark.integration
NAME = "vllm-llama3-70b"
LO, HI = 2, 8


def policy(prometheus_url: str, namespace: str, **extra: Any) -> str:
    workload: dict[str, Any] = {
        "target": {"namespace": namespace, "name": NAME},
        "minReplicas": LO,
        "maxReplicas": HI,
        "metrics": [{"name": "num_requests_waiting", "target": {"type": "AverageValue", "value": 2}}],
        "behavior": {"scaleDown": {"stabilizationWindowSeconds": 0}},
    }
    workload.update(extra)
    return json.dumps({"interval": 1, "prometheus": {"url": prometheus_url, "timeout": 1}, "workloads": [workload]})


class Daemon:
    """``python -m autoscaler run`` as a separate process, as its own ServiceAccount (bound by the shipped
    RBAC), talking to the server directly or through ``url`` (a fault proxy)."""

    def __init__(
        self, cluster: Cluster, policy_path: Path, name: str = "daemon", *args: str, url: str | None = None, **env: str
    ) -> None:
        self.port = free_port()
        token = cluster.token if name == "daemon" else cluster.identity(name)
        kubeconfig = cluster.kube.kubeconfig(cluster.workdir / f"{name}.kubeconfig", token, url)
        env.setdefault("VLLM_AUTOSCALER_LEASE_NAMESPACE", cluster.namespace)
        self.log = cluster.workdir / f"{name}.log"
        self.process = start_daemon(
            policy_path, kubeconfig, self.port, self.log, *args, VLLM_AUTOSCALER_IDENTITY=name, **env
        )
        self.name = name
        self.user = cluster.user if name == "daemon" else f"system:serviceaccount:{cluster.namespace}:{name}"

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
def target(cluster: Cluster) -> Cluster:
    cluster.deployment(NAME, LO)
    return cluster


def successful_writes(cluster: Cluster) -> list[AuditEvent]:
    """Every scale write the server accepted, from any identity but the test's own (the admin)."""
    return [
        e
        for e in cluster.kube.audit(cluster.namespace)
        if e.writes and e.resource.endswith("/scale") and e.code < 300 and e.user != "admin"
    ]


def check_invariants(cluster: Cluster, lo: int = LO, hi: int = HI) -> None:
    for write in successful_writes(cluster):
        assert write.request is not None
        assert lo <= write.request["spec"]["replicas"] <= hi, f"write outside [{lo}, {hi}]: {write.request}"


def replicas(cluster: Cluster) -> int:
    return cluster.replicas(NAME)


@pytest.fixture
def started(target: Cluster, exporter: VllmExporter, prometheus: PrometheusServer) -> Iterator[tuple[Daemon, Path]]:
    exporter.set_pods(target.namespace, NAME, waiting=[2, 2])  # 4 waiting: steady at 2 replicas
    path = target.workdir / "policy.json"
    path.write_text(policy(prometheus.url, target.namespace))
    daemon = Daemon(target, path)
    wait_for(daemon.healthy, 30, "the daemon")
    yield daemon, path
    assert daemon.alive(), daemon.log.read_text()[-3000:]
    assert daemon.stop() == 0
    check_invariants(target)


def test_prometheus_killed_and_restarted(
    started: tuple[Daemon, Path], target: Cluster, exporter: VllmExporter, prometheus: PrometheusServer
) -> None:
    wait_for(
        lambda: requests.get(f"http://127.0.0.1:{started[0].port}/readyz", timeout=1).status_code == 200,
        30,
        "readiness",
    )
    prometheus.process.kill()  # type: ignore[union-attr]
    prometheus.process.wait()  # type: ignore[union-attr]
    prometheus.process = None
    exporter.set_pods(target.namespace, NAME, waiting=[10, 10])
    down_since = time.time()
    wait_for(lambda: time.time() - down_since > 4, 10, "a few ticks without Prometheus")
    assert successful_writes(target) == [] and replicas(target) == LO  # held where it was
    assert requests.get(f"http://127.0.0.1:{started[0].port}/readyz", timeout=1).status_code == 503
    prometheus.start()
    wait_for(lambda: replicas(target) > LO, 40, "the scale-up once Prometheus is back")


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
    target: Cluster, exporter: VllmExporter, prometheus: PrometheusServer
) -> None:
    proxy = SlowProxy(prometheus.url)
    exporter.set_pods(target.namespace, NAME, waiting=[2, 2])
    path = target.workdir / "policy.json"
    path.write_text(policy(proxy.url, target.namespace))
    proxy.slow.set()
    daemon = Daemon(target, path)
    try:
        wait_for(daemon.healthy, 30, "the daemon")
        exporter.set_pods(target.namespace, NAME, waiting=[10, 10])
        slow_since = time.time()
        wait_for(lambda: time.time() - slow_since > 6, 10, "ticks against a slow Prometheus")
        assert successful_writes(target) == []
        assert b"timeout" in daemon.log.read_bytes()
        proxy.slow.clear()
        wait_for(lambda: replicas(target) > LO, 40, "the scale-up once Prometheus answers in time")
        assert daemon.alive() and daemon.stop() == 0
    finally:
        proxy.server.shutdown()
    check_invariants(target)


def test_api_conflicts_throttling_errors_and_dropped_connections(
    target: Cluster, exporter: VllmExporter, prometheus: PrometheusServer
) -> None:
    exporter.set_pods(target.namespace, NAME, waiting=[2, 2])
    proxy = FaultProxy(target.kube.url, target.kube.ca_file)
    for status in (409, 429, 500, DROP, 409, 503, DROP):
        proxy.inject("PATCH", "/scale$", status, retry_after=0 if status == 429 else None)
    proxy.inject("GET", "/deployments$", DROP, times=2)
    proxy.inject("GET", "/deployments$", 500, times=2)
    path = target.workdir / "policy.json"
    path.write_text(policy(prometheus.url, target.namespace))
    daemon = Daemon(target, path, url=proxy.url)
    try:
        wait_for(daemon.healthy, 30, "the daemon")
        exporter.set_pods(target.namespace, NAME, waiting=[6, 6])  # 12 waiting: 6 replicas

        def statuses() -> list[int]:
            return [s.status for s in proxy.requests("PATCH", "/scale$")]

        # The proxy records a forwarded write's answer once the server has given it, a moment after the test may
        # already read the new count: wait for both, or the last status read may be the drop before it.
        wait_for(lambda: replicas(target) == 6 and statuses()[-1:] == [200], 60, "the scale-up through the faults")
        assert {409, 429, 500, -1} <= set(statuses())
        assert daemon.alive() and daemon.stop() == 0
    finally:
        proxy.close()
    check_invariants(target)


def test_deployment_deleted_and_recreated(
    started: tuple[Daemon, Path], target: Cluster, exporter: VllmExporter
) -> None:
    from kubernetes import client

    client.AppsV1Api(target.admin).delete_namespaced_deployment(NAME, target.namespace)
    exporter.set_pods(target.namespace, NAME, waiting=[8, 8])
    gone_since = time.time()
    wait_for(lambda: time.time() - gone_since > 3, 10, "ticks without the Deployment")
    assert successful_writes(target) == []
    target.deployment(NAME, 3)
    wait_for(lambda: replicas(target) == 8, 40, "the re-created Deployment scaled")


def _reasons(cluster: Cluster) -> list[str]:
    from kubernetes import client

    return [e.reason for e in client.CoreV1Api(cluster.admin).list_namespaced_event(cluster.namespace).items]


def test_policy_replaced_by_garbage_then_fixed(
    started: tuple[Daemon, Path], target: Cluster, exporter: VllmExporter, prometheus: PrometheusServer
) -> None:
    daemon, path = started
    path.write_text("workloads: [ {target: {namespace: llm-serving}, maxReplicas: -1")
    wait_for(lambda: "InvalidPolicy" in _reasons(target), 20, "the InvalidPolicy Event")
    exporter.set_pods(target.namespace, NAME, waiting=[5, 5])  # 10 waiting: 5 replicas under the last good policy
    wait_for(lambda: replicas(target) == 5, 30, "scaling under the last good policy")
    path.write_text(policy(prometheus.url, target.namespace, maxReplicas=4))
    wait_for(lambda: replicas(target) == 4, 30, "the fixed policy's new maximum")
    assert b"policy-reloaded" in daemon.log.read_bytes()
    assert daemon.alive()


def test_replicas_changed_by_hand(started: tuple[Daemon, Path], target: Cluster) -> None:
    target.kube.set_replicas(target.namespace, NAME, 12)  # above max: brought to the bound, then down with the load
    wait_for(
        lambda: any(w.request["spec"]["replicas"] == HI for w in successful_writes(target) if w.request),
        20,
        "the count above max brought to max",
    )
    wait_for(lambda: replicas(target) == LO, 20, "back to what the load needs")
    target.kube.set_replicas(target.namespace, NAME, 0)  # to zero by hand: left alone, as the HPA does
    zero_since = time.time()
    wait_for(lambda: time.time() - zero_since > 3, 10, "ticks at zero")
    assert replicas(target) == 0
    target.kube.set_replicas(target.namespace, NAME, 2)
    wait_for(lambda: time.time() - zero_since > 5, 10, "ticks after")
    assert replicas(target) == 2


def lease_holders(cluster: Cluster, lease: str = "vllm-autoscaler") -> list[tuple[float, str]]:
    """(time, holder) each time a write to the Lease succeeded, from the audit log: who held it since when."""
    changes = []
    for event in cluster.kube.audit(cluster.namespace):
        if event.resource == "leases" and event.name == lease and event.writes and event.code < 300:
            spec = (event.request or {}).get("spec") or {}
            changes.append((event.at, spec.get("holderIdentity") or ""))
    return changes


def holder_at(changes: list[tuple[float, str]], at: float) -> str:
    holder = ""
    for stamp, who in changes:
        if stamp <= at:
            holder = who
    return holder


def _election(duration: float, renew: float, retry: float) -> dict[str, str]:
    """A daemon's environment for leader election with this Lease duration, renew deadline and retry period."""
    return {
        "VLLM_AUTOSCALER_LEADER_ELECT": "true",
        "VLLM_AUTOSCALER_LEASE_DURATION_S": f"{duration:g}",
        "VLLM_AUTOSCALER_RENEW_DEADLINE_S": f"{renew:g}",
        "VLLM_AUTOSCALER_RETRY_PERIOD_S": f"{retry:g}",
    }


def test_the_leader_killed_while_another_waits(
    target: Cluster, exporter: VllmExporter, prometheus: PrometheusServer
) -> None:
    exporter.set_pods(target.namespace, NAME, waiting=[2, 2])
    path = target.workdir / "policy.json"
    path.write_text(policy(prometheus.url, target.namespace))
    election = _election(duration=3, renew=2, retry=0.5)
    first = Daemon(target, path, "first", **election)
    wait_for(lambda: holder_at(lease_holders(target), time.time() + 1) == "first", 30, "the first daemon to lead")
    second = Daemon(target, path, "second", **election)
    wait_for(second.healthy, 30, "the second daemon")
    exporter.set_pods(target.namespace, NAME, waiting=[5, 5])
    wait_for(lambda: replicas(target) == 5, 30, "the leader's scale-up")
    first.process.kill()  # SIGKILL: no release, the lease must expire
    first.process.wait()
    exporter.set_pods(target.namespace, NAME, waiting=[8, 8])
    wait_for(lambda: replicas(target) == 8, 40, "the second daemon's scale-up after taking over")
    writes = successful_writes(target)
    assert {w.user for w in writes} == {first.user, second.user}
    changes = lease_holders(target)
    for write in writes:
        holder = holder_at(changes, write.at)
        assert write.user.endswith(":" + holder), f"{write.user} wrote while {holder!r} held the Lease"
    # Events too come from the leader alone: the standby wrote none while the first daemon led
    events = [e for e in target.kube.audit(target.namespace) if e.resource == "events" and e.writes and e.code < 300]
    assert any(e.user == first.user for e in events)  # the first one's SuccessfulRescale
    for event in events:
        holder = holder_at(changes, event.at)
        assert event.user.endswith(":" + holder), f"{event.user} wrote an Event while {holder!r} held the Lease"
    assert second.alive() and second.stop() == 0
    check_invariants(target)


def test_dry_run_writes_nothing_whatever_happens(
    target: Cluster, exporter: VllmExporter, prometheus: PrometheusServer, capsys: pytest.CaptureFixture[str]
) -> None:
    exporter.set_pods(target.namespace, NAME, waiting=[10, 10])
    path = target.workdir / "policy.json"
    path.write_text(policy(prometheus.url, target.namespace))
    daemon = Daemon(target, path, "daemon", "--dry-run")
    wait_for(lambda: b"would-scale" in daemon.log.read_bytes(), 30, "a would-scale line")
    # `status` reads a dry-run daemon from its own port, since it writes no state into the cluster
    served = f"http://127.0.0.1:{daemon.port}/status"
    wait_for(
        lambda: requests.get(served, timeout=2).json()["workloads"][0]["metrics"]["num_requests_waiting"].get("value"),
        30,
        "the metric in /status",
    )
    capsys.readouterr()
    assert main(["status", "--url", f"http://127.0.0.1:{daemon.port}", "-o", "wide"]) == 0
    header, shown = capsys.readouterr().out.splitlines()[:2]
    assert "HEADING" in header and "OWNER DESIRED" in header and "CONDITIONS" in header
    assert "AbleToScale=False DryRun" in shown and "num_requests_waiting 10/2 (avg)" in shown
    target.kube.set_replicas(target.namespace, NAME, 12)
    path.write_text("garbage: [")
    wait_for(lambda: b"policy-rejected" in daemon.log.read_bytes(), 20, "the rejected policy")
    assert daemon.alive() and daemon.stop() == 0
    sent = target.kube.audit(user=daemon.user)
    assert sent and [e for e in sent if e.verb not in ("get", "list", "watch")] == []


def test_clock_steps(target: Cluster, exporter: VllmExporter, prometheus: PrometheusServer) -> None:
    """The wall clock jumping a day forward and back between ticks: decisions run on a monotonic clock."""
    from autoscaler.actuators.kubernetes import KubernetesActuator, api_client

    exporter.set_pods(target.namespace, NAME, waiting=[6, 6])
    document = parse_policy_document(json.loads(policy(prometheus.url, target.namespace)))
    offset = {"s": 0.0}
    controller = Controller(
        None,
        document,
        PrometheusSource(document.prometheus),
        KubernetesActuator(api_client(str(target.kubeconfig()))),
        clock=lambda: time.time() + offset["s"],
    )
    wait_for(lambda: controller.tick()[0].get("metrics", {}).get("num_requests_waiting") == 12, 30, "metrics")
    for jump in (3600.0, -7200.0, 86_400.0, -86_400.0):
        offset["s"] += jump
        line = controller.tick()[0]
        assert LO <= line["desired"] <= HI
    check_invariants(target)
    assert replicas(target) == 6


def test_sigterm_while_prometheus_answers_late_ends_within_ten_seconds(
    target: Cluster, exporter: VllmExporter, prometheus: PrometheusServer
) -> None:
    """Prometheus answers 25 s late and the policy allows 30 s: SIGTERM abandons the tick waiting on it, gives the
    Lease up and exits within 10 s, and nothing the daemon sends after the signal writes."""
    from autoscaler.testing.fault_proxy import FaultProxy

    exporter.set_pods(target.namespace, NAME, waiting=[2, 2])
    proxy = FaultProxy(prometheus.url)
    try:
        document = json.loads(policy(proxy.url, target.namespace))
        document["prometheus"]["timeout"] = 30
        path = target.workdir / "policy.json"
        path.write_text(json.dumps(document))
        election = _election(duration=15, renew=10, retry=1)
        daemon = Daemon(target, path, "daemon", **election)
        wait_for(lambda: holder_at(lease_holders(target), time.time() + 1) == "daemon", 30, "the daemon to lead")
        wait_for(lambda: b'"decision"' in daemon.log.read_bytes(), 30, "a decision")
        proxy.inject("GET", "/api/v1/query", None, delay=25.0)
        exporter.set_pods(target.namespace, NAME, waiting=[8, 8])  # a scale-up the slow tick would write
        time.sleep(3.0)  # a tick is now waiting on Prometheus
        signalled = time.time()
        daemon.process.send_signal(signal.SIGTERM)
        code = daemon.process.wait(15)
        ended = time.time() - signalled
    finally:
        proxy.close()
    assert code == 0 and ended < 10.0, (ended, daemon.log.read_text()[-2000:])
    late = [e for e in target.kube.audit(user=daemon.user) if e.writes and e.at > signalled and e.resource != "leases"]
    assert late == [], late
    assert holder_at(lease_holders(target), time.time()) == ""  # given up, not left to expire
    assert b"abandoned_tick" in daemon.log.read_bytes()
