"""The kube-apiserver fixture from envtest's binaries (``KUBEBUILDER_ASSETS``), as a contributor outside this
tree runs the integration tests: the same server, RBAC, tokens and audit log as from ``start.sh``."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from autoscaler.testing.kube import ASSETS_ENV, KUBE_DIR_ENV, KubeServer, find_kube_dir
from autoscaler.testing.servers import Unavailable
from tests.integration.conftest import ROOT, unavailable

pytestmark = pytest.mark.integration


@pytest.fixture
def assets(tmp_path: Path) -> Path:
    """A folder of the two binaries, as ``setup-envtest use -p path`` names one: unpacked from the shared ones."""
    try:
        shared = find_kube_dir(ROOT)
    except Unavailable as exc:
        unavailable(exc)
    folder = tmp_path / "assets"
    KubeServer(tmp_path / "unpack", shared)._unpack(folder, {**os.environ, "KUBE_BIN_DIR": str(folder)})
    return folder


def test_the_server_starts_from_kubebuilder_assets(
    assets: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(KUBE_DIR_ENV, raising=False)
    monkeypatch.setenv(ASSETS_ENV, str(assets))
    assert find_kube_dir(ROOT) == assets
    server = KubeServer(tmp_path / "kube")
    server.start()
    try:
        namespace = server.create_namespace()
        assert namespace in server.kubectl("get", "namespaces", "-o", "name")
        limited = client.AppsV1Api(server.api_for(server.env["KUBE_SA_TOKEN"]))
        with pytest.raises(ApiException) as denied:  # RBAC on: the unprivileged identity has no grant yet
            limited.list_namespaced_deployment(namespace)
        assert denied.value.status == 403
        assert server.audit_log.is_file() and namespace in server.audit_log.read_text()
        folder = Path(server.env["KUBE_DIR"])
    finally:
        server.stop()
    assert not folder.exists() and not server.env


def test_assets_without_the_binaries_are_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(KUBE_DIR_ENV, raising=False)
    monkeypatch.setenv(ASSETS_ENV, str(tmp_path))
    with pytest.raises(Unavailable, match="holds no executable kube-apiserver and etcd"):
        find_kube_dir(ROOT)
