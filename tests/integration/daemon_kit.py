"""What the daemon's integration tests share: the workload they scale, its policy, the loaded Prometheus, and how
they read the log and the Events (tests/integration/test_daemon.py, test_owners.py)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from autoscaler.cli import main
from autoscaler.controller import Controller
from autoscaler.leader import LeaderElector
from tests.integration.conftest import DAEMON_WORKLOAD as NAME
from tests.integration.conftest import Cluster


def policy_text(prometheus_url: str, namespace: str, **workload: Any) -> str:
    spec: dict[str, Any] = {
        "target": {"kind": "Deployment", "namespace": namespace, "name": NAME},
        "minReplicas": 1,
        "maxReplicas": 8,
        "metrics": [{"name": "num_requests_waiting", "target": {"type": "AverageValue", "value": 2}}],
    }
    spec.update(workload)
    return json.dumps({"interval": 15, "prometheus": {"url": prometheus_url, "timeout": 2}, "workloads": [spec]})


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


def controller_for(
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


def create_hpa(cluster: Cluster, current: int | None = None, desired: int | None = None) -> None:
    ref = {"apiVersion": "apps/v1", "kind": "Deployment", "name": NAME}
    hpas = client.AutoscalingV2Api(cluster.admin)
    hpas.create_namespaced_horizontal_pod_autoscaler(
        cluster.namespace, {"metadata": {"name": "vllm-hpa"}, "spec": {"scaleTargetRef": ref, "maxReplicas": 8}}
    )
    if desired is not None:  # what the HPA controller would publish
        hpas.patch_namespaced_horizontal_pod_autoscaler_status(
            "vllm-hpa", cluster.namespace, {"status": {"currentReplicas": current, "desiredReplicas": desired}}
        )
