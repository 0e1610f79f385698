"""Real servers for the integration tests: Prometheus, a vLLM-shaped exporter, and one kube-apiserver per test
session (per xdist worker), each test in a namespace of its own."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests
from kubernetes import client

from autoscaler.actuators.kubernetes import KubernetesActuator, api_client
from autoscaler.controller import Controller
from autoscaler.metrics.prometheus import PrometheusSource
from autoscaler.telemetry import Telemetry
from autoscaler.testing.kube import Kubelet, KubeServer, find_kube_dir, rbac_rules, service_account_user
from autoscaler.testing.servers import PrometheusServer, Unavailable, VllmExporter, wait_for
from policies.policy_file import load_policy_file

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"


def unavailable(exc: Unavailable) -> None:
    """Skip where a real server is missing, except under CI, where that is a failure."""
    if os.environ.get("CI"):
        pytest.fail(f"{exc}: CI needs it")
    pytest.skip(str(exc))


@pytest.fixture
def exporter() -> Iterator[VllmExporter]:
    server = VllmExporter()
    yield server
    server.close()


@pytest.fixture
def prometheus(tmp_path: Path, exporter: VllmExporter) -> Iterator[PrometheusServer]:
    try:
        server = PrometheusServer(tmp_path, [exporter.port])
    except Unavailable as exc:
        unavailable(exc)
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def shared_metrics(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[VllmExporter, PrometheusServer]]:
    """One exporter and one Prometheus for a module's tests that only read metrics: each test's series carry
    its own namespace, so they never see each other's."""
    server = VllmExporter()
    try:
        prometheus = PrometheusServer(tmp_path_factory.mktemp("prometheus"), [server.port])
    except Unavailable as exc:
        server.close()
        unavailable(exc)
    prometheus.start()
    yield server, prometheus
    prometheus.stop()
    server.close()


def real_kube(tmp_path_factory: pytest.TempPathFactory, name: str) -> Iterator[KubeServer]:
    """A real kube-apiserver of ``../shared/kube`` with its audit log on, started for a fixture's scope."""
    try:
        server = KubeServer(tmp_path_factory.mktemp(name), find_kube_dir(ROOT))
    except Unavailable as exc:
        unavailable(exc)
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def kube(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeServer]:
    """One server for the whole session (each xdist worker's), each test in a namespace of its own."""
    yield from real_kube(tmp_path_factory, "kube")


def shipped_rules() -> list[dict[str, Any]]:
    """Every rule the manifests grant the controller (its ClusterRole and its own namespace's Role)."""
    return rbac_rules(sorted((DEPLOY / "controller").glob("*rbac*.yaml")))


@dataclass
class Cluster:
    """One test's share of the real server: a namespace, and the daemon's identity in it, a ServiceAccount
    bound there by exactly the rules the manifests ship."""

    kube: KubeServer
    namespace: str
    account: str
    token: str
    workdir: Path

    @property
    def user(self) -> str:
        return service_account_user(self.namespace, self.account)

    @property
    def admin(self) -> client.ApiClient:
        return self.kube.admin()

    def kubeconfig(self, url: str | None = None, token: str | None = None) -> Path:
        name = "kubeconfig" if url is None and token is None else f"kubeconfig-{abs(hash((url, token)))}"
        return self.kube.kubeconfig(self.workdir / name, token or self.token, url)

    def identity(self, account: str) -> str:
        """A further ServiceAccount bound by the shipped rules, for a second daemon; returns its token."""
        token = self.kube.service_account_token(self.namespace, account)
        self.kube.grant(self.namespace, (self.namespace, account), shipped_rules(), f"shipped-{account}")
        return token

    def deployment(self, name: str, replicas: int, **options: Any) -> None:
        self.kube.create_deployment(self.namespace, name, replicas, **options)

    def replicas(self, name: str) -> int:
        return self.kube.replicas(self.namespace, name)

    def ready_replicas(self, name: str) -> int:
        status = client.AppsV1Api(self.admin).read_namespaced_deployment(name, self.namespace).status
        return int((status.ready_replicas if status else 0) or 0)

    def controller(self, policy: Path, kubeconfig: Path | None = None, **options: Any) -> Controller:
        """A controller on the policy file at ``policy``, as this namespace's daemon (or ``kubeconfig``'s), with
        a real Prometheus source and actuator; ``options`` go to ``Controller`` (clocks, elector, store,
        install)."""
        document = load_policy_file(policy)
        actuator = KubernetesActuator(api_client(str(kubeconfig or self.kubeconfig())))
        return Controller(policy, document, PrometheusSource(document.prometheus), actuator, Telemetry(), **options)

    def kubelet(self, startup_delay: float = 0.0) -> Kubelet:
        return Kubelet(self.admin, self.namespace, startup_delay)

    def writes(self, user: str | None = None) -> list[Any]:
        """Every request that wrote, as the audit log has it: by ``user`` (default: the daemon) in this namespace."""
        return [e for e in self.kube.audit(self.namespace, user or self.user) if e.writes]

    def scale_writes(self, user: str | None = None, ok: bool = True) -> list[Any]:
        return [w for w in self.writes(user) if w.resource.endswith("/scale") and (w.code < 300 or not ok)]


@pytest.fixture
def cluster(kube: KubeServer, tmp_path: Path) -> Iterator[Cluster]:
    namespace = kube.create_namespace("t")
    token = kube.service_account_token(namespace, "autoscaler")
    kube.grant(namespace, (namespace, "autoscaler"), shipped_rules(), "shipped")
    yield Cluster(kube, namespace, "autoscaler", token, tmp_path)
    kube.delete_namespace(namespace)


DAEMON_WORKLOAD = "vllm-llama3-70b"  # the Deployment the daemon's tests scale (tests/integration/daemon_kit.py)
DAEMON_TESTS = ("test_daemon", "test_owners")
FIXTURES = ROOT / "tests" / "fixtures"


@pytest.fixture
def loaded(cluster: Cluster, shared_metrics: tuple[VllmExporter, PrometheusServer]) -> PrometheusServer:
    """Two pods with 10 waiting requests each: 20 in all, ten replicas' worth at a target of 2."""
    exporter, prometheus = shared_metrics
    exporter.set_pods(cluster.namespace, DAEMON_WORKLOAD, waiting=[10, 10], kv=[0.5, 0.5])
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


@pytest.fixture(autouse=True)
def lease_in_the_test_namespace(monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> None:
    """The daemon's tests (test_daemon, test_owners) take the Lease in their own namespace."""
    if request.module.__name__.rsplit(".", 1)[-1] in DAEMON_TESTS and "cluster" in request.fixturenames:
        cluster: Cluster = request.getfixturevalue("cluster")
        monkeypatch.setenv("VLLM_AUTOSCALER_LEASE_NAMESPACE", cluster.namespace)
