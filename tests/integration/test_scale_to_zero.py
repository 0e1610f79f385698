"""Scale to zero and back on the real kube-apiserver, with the activation signal and the replicas' activity
from a real Prometheus: zero only after the idle time, never on an outage, never for a zero set by hand or
a paused target, and a wake-up within one interval of the signal (the audit log times the write)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import requests
from kubernetes import client

from autoscaler.actuators.kubernetes import api_client
from autoscaler.cli import main
from autoscaler.controller import Controller
from autoscaler.state import ConfigMapStateStore
from autoscaler.testing.fault_proxy import FaultProxy
from autoscaler.testing.servers import PrometheusServer, VllmExporter, free_port, start_daemon, wait_for
from tests.integration.conftest import Cluster

pytestmark = pytest.mark.integration
NAME = "vllm-eval-7b"
GATEWAY = "gateway_queued_requests"
IDLE_S = 75


class Clock:
    def __init__(self) -> None:
        self.now = 5000.0

    def __call__(self) -> float:
        return self.now


def policy_text(prometheus_url: str, namespace: str, interval: int = 15, idle: int = IDLE_S) -> str:
    workload = {
        "target": {"kind": "Deployment", "namespace": namespace, "name": NAME},
        "minReplicas": 0,
        "maxReplicas": 4,
        "metrics": [{"name": "num_requests_waiting", "target": {"type": "AverageValue", "value": 2}}],
        "activation": {
            "query": f'sum({GATEWAY}{{namespace="{namespace}"}})',
            "threshold": 0.5,
            "idleSeconds": idle,
        },
    }
    return json.dumps(
        {"interval": interval, "prometheus": {"url": prometheus_url, "timeout": 2}, "workloads": [workload]}
    )


def query(prometheus: PrometheusServer, promql: str) -> float | None:
    result = requests.get(f"{prometheus.url}/api/v1/query", params={"query": promql}, timeout=2).json()["data"][
        "result"
    ]
    return float(result[0]["value"][1]) if result else None


def gateway(exporter: VllmExporter, prometheus: PrometheusServer, namespace: str, value: float) -> None:
    """Set the gateway's queue and wait until Prometheus has it."""
    exporter.set(GATEWAY, value, namespace=namespace)
    wait_for(lambda: query(prometheus, f'sum({GATEWAY}{{namespace="{namespace}"}})') == value, 20, "the gateway value")


def idle_pods(exporter: VllmExporter, prometheus: PrometheusServer, namespace: str, pods: int = 2) -> None:
    """``pods`` replicas with nothing running or waiting, their prompt-token counters still (a rate of 0)."""
    exporter.set_pods(namespace, NAME, waiting=[0] * pods, running=[0] * pods)
    rate = f'sum(rate(vllm:prompt_tokens_total{{namespace="{namespace}"}}[1m]))'
    wait_for(lambda: query(prometheus, rate) == 0.0, 20, "the prompt-token rate")
    gateway(exporter, prometheus, namespace, 0.0)


def controller(cluster: Cluster, url: str, clock: Clock, store: bool = True) -> Controller:
    policy = cluster.workdir / "policy.json"
    policy.write_text(policy_text(url, cluster.namespace))
    state = ConfigMapStateStore(api_client(str(cluster.kubeconfig())), cluster.namespace) if store else None
    return cluster.controller(policy, decision_clock=clock, store=state)


def ticks(control: Controller, clock: Clock, seconds: int) -> list[dict[str, Any]]:
    """One tick every 15 s of the fake decision clock, from now through ``seconds`` later."""
    lines = []
    for _ in range(0, seconds + 1, 15):
        lines += control.tick()
        clock.now += 15
    return lines


def written(cluster: Cluster) -> list[int]:
    return [w.request["spec"]["replicas"] for w in cluster.scale_writes()]


def reasons(cluster: Cluster) -> list[str]:
    """The Events' reasons, sorted (their stamps have a resolution of one second)."""
    return sorted(e.reason for e in client.CoreV1Api(cluster.admin).list_namespaced_event(cluster.namespace).items)


@pytest.fixture
def metrics(shared_metrics: tuple[VllmExporter, PrometheusServer]) -> tuple[VllmExporter, PrometheusServer]:
    return shared_metrics


def test_zero_comes_after_the_idle_time_is_recorded_and_wakes_after_a_restart(
    cluster: Cluster, metrics: tuple[VllmExporter, PrometheusServer], capsys: pytest.CaptureFixture[str]
) -> None:
    exporter, prometheus = metrics
    cluster.deployment(NAME, 2)
    idle_pods(exporter, prometheus, cluster.namespace)
    clock = Clock()
    first = controller(cluster, prometheus.url, clock)
    ticks(first, clock, IDLE_S - 15)
    assert written(cluster) == []  # idle for 60 s: not yet
    line = first.tick()[0]
    assert (line["reason"], line["desired"], written(cluster)) == ("scaled-to-zero", 0, [0])
    assert reasons(cluster) == ["ScaledToZero"]

    capsys.readouterr()
    assert main(["status", "--kubeconfig", str(cluster.kubeconfig()), "--namespace", cluster.namespace]) == 0
    row = [line for line in capsys.readouterr().out.splitlines() if line.startswith(f"{cluster.namespace}/{NAME}")]
    assert len(row) == 1 and "scaled-to-zero" in row[0]

    clock.now += 15
    second = controller(cluster, prometheus.url, clock)  # a restart: its zero is known from the state ConfigMap
    assert second.tick()[0]["reason"] == "scaled-to-zero"
    gateway(exporter, prometheus, cluster.namespace, 3.0)
    clock.now += 15
    line = second.tick()[0]
    assert (line["reason"], line["desired"], written(cluster)) == ("activated", 1, [0, 1])
    assert reasons(cluster) == ["Activated", "ScaledToZero"]


def test_a_metrics_outage_is_not_idleness(cluster: Cluster, metrics: tuple[VllmExporter, PrometheusServer]) -> None:
    exporter, prometheus = metrics
    cluster.deployment(NAME, 1)
    idle_pods(exporter, prometheus, cluster.namespace, pods=1)
    proxy = FaultProxy(prometheus.url)
    try:
        clock = Clock()
        control = controller(cluster, proxy.url, clock)
        ticks(control, clock, 30)  # idle for 30 s
        proxy.inject("GET", "^/api/v1/query", 503, times=None)
        proxy.inject("POST", "^/api/v1/query", 503, times=None)
        outage = ticks(control, clock, 2 * IDLE_S)
        assert {line["reason"] for line in outage} == {"metrics-unavailable"}
        proxy.clear()
        after = ticks(control, clock, IDLE_S)
    finally:
        proxy.close()
    assert [line["desired"] for line in after] == [1] * (IDLE_S // 15) + [0]  # the idle clock started again
    assert written(cluster) == [0]


def test_a_zero_set_by_hand_is_left_alone(cluster: Cluster, metrics: tuple[VllmExporter, PrometheusServer]) -> None:
    exporter, prometheus = metrics
    cluster.deployment(NAME, 0)
    gateway(exporter, prometheus, cluster.namespace, 5.0)
    clock = Clock()
    assert {line["reason"] for line in ticks(controller(cluster, prometheus.url, clock), clock, 30)} == {
        "scaling-disabled"
    }
    assert written(cluster) == []


def test_a_paused_target_is_never_woken(cluster: Cluster, metrics: tuple[VllmExporter, PrometheusServer]) -> None:
    exporter, prometheus = metrics
    cluster.deployment(NAME, 1)
    idle_pods(exporter, prometheus, cluster.namespace, pods=1)
    clock = Clock()
    control = controller(cluster, prometheus.url, clock)
    ticks(control, clock, IDLE_S)
    assert written(cluster) == [0]
    apps = client.AppsV1Api(cluster.admin)
    apps.patch_namespaced_deployment(
        NAME, cluster.namespace, {"metadata": {"annotations": {"vllm-autoscaler.io/paused": "true"}}}
    )
    gateway(exporter, prometheus, cluster.namespace, 4.0)
    assert {line["reason"] for line in ticks(control, clock, 45)} == {"paused"}
    assert written(cluster) == [0]
    apps.patch_namespaced_deployment(
        NAME, cluster.namespace, {"metadata": {"annotations": {"vllm-autoscaler.io/paused": None}}}
    )
    assert control.tick()[0]["reason"] == "activated"
    assert written(cluster) == [0, 1]


def test_the_daemon_wakes_within_one_interval_of_the_signal(
    cluster: Cluster, metrics: tuple[VllmExporter, PrometheusServer]
) -> None:
    """The running daemon takes an idle workload to zero by itself, then a request at the gateway wakes it: the
    scale write (timed by the API server's audit log) comes at most one interval after Prometheus has the signal."""
    exporter, prometheus = metrics
    interval = 2
    cluster.deployment(NAME, 1)
    idle_pods(exporter, prometheus, cluster.namespace, pods=1)
    policy = cluster.workdir / "policy.json"
    policy.write_text(policy_text(prometheus.url, cluster.namespace, interval=interval, idle=3))
    process = start_daemon(
        policy,
        cluster.kubeconfig(),
        free_port(),
        cluster.workdir / "daemon.log",
        VLLM_AUTOSCALER_LEADER_ELECT="true",
        VLLM_AUTOSCALER_LEASE_NAMESPACE=cluster.namespace,
    )
    try:
        wait_for(lambda: cluster.replicas(NAME) == 0, 30, "the daemon's own zero")
        exporter.set(GATEWAY, 2.0, namespace=cluster.namespace)
        wait_for(
            lambda: query(prometheus, f'sum({GATEWAY}{{namespace="{cluster.namespace}"}})') == 2.0, 20, "the signal"
        )
        seen = time.time()
        wait_for(lambda: cluster.replicas(NAME) == 1, 3 * interval + 10, "the wake-up")
    finally:
        process.terminate()
        process.wait(20)
    wake = [w for w in cluster.scale_writes() if w.request["spec"]["replicas"] == 1]
    assert len(wake) == 1
    assert wake[0].at - seen <= interval + 1.0, (
        wake[0].at - seen,
        Path(cluster.workdir / "daemon.log").read_text()[-2000:],
    )
