"""deploy/ as an operator runs it: every overlay with plain ``kubectl apply -k`` on a fresh real kube-apiserver
that has no Prometheus Operator CRDs, under the server's strict field validation; then the daemon as the
manifests' own ServiceAccount, under the manifests' own RBAC, with the audit log as the witness."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from autoscaler.testing.fault_proxy import FaultProxy
from autoscaler.testing.kube import Kubelet, KubeServer, rbac_rules, service_account_user
from autoscaler.testing.servers import PrometheusServer, VllmExporter, free_port, start_daemon, wait_for
from tests.integration.conftest import DEPLOY, real_kube

pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("deploy")]
OVERLAYS = sorted(p.parent.name for p in (DEPLOY / "overlays").glob("*/kustomization.yaml"))
SERVING, CONTROLLER = "llm-serving", "vllm-autoscaler"
USER = service_account_user(CONTROLLER, "vllm-autoscaler")
WORKLOAD, STATEFUL, OWNED = "vllm-llama3-70b", "vllm-stateful", "vllm-hpa-owned"


@pytest.fixture(scope="module")
def fresh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeServer]:
    """A server of this module's own: nothing installed on it but what these tests apply."""
    yield from real_kube(tmp_path_factory, "fresh-kube")


def apply(kube: KubeServer, directory: Path) -> str:
    return kube.kubectl("apply", "-k", str(directory), "--validate=strict")


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_each_overlay_applies_with_plain_kubectl_apply_k(fresh: KubeServer, overlay: str) -> None:
    """Each on a cluster that has the namespace its vLLM runs in, as a user's has: the namespaced overlay grants
    its rights there and creates no namespace of the user's."""
    _ensure(lambda: client.CoreV1Api(fresh.admin()).create_namespace({"metadata": {"name": SERVING}}))
    crds = fresh.kubectl("get", "crd", "-o", "name")
    assert "monitoring.coreos.com" not in crds  # no Prometheus Operator on this cluster
    out = apply(fresh, DEPLOY / "overlays" / overlay)
    assert out.strip()
    rendered = fresh.kubectl("kustomize", str(DEPLOY / "overlays" / overlay))
    for doc in yaml.safe_load_all(rendered):
        if doc:
            kind, meta = doc["kind"], doc["metadata"]
            name = f"{kind.lower()}/{meta['name']}"
            args = ["get", name, "-o", "name"] + (["-n", meta["namespace"]] if "namespace" in meta else [])
            assert fresh.kubectl(*args).strip(), f"{overlay}: {name} not on the server"


def user_overlay(folder: Path, base: str, policy_text: str) -> Path:
    """What the README tells a user to write: a kustomization on top of one of ours, with their policy file."""
    folder.mkdir(parents=True, exist_ok=True)
    relative = os.path.relpath(DEPLOY / "overlays" / base, folder)
    (folder / "policy.yaml").write_text(policy_text)
    (folder / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": [relative],
                "configMapGenerator": [
                    {
                        "name": "vllm-autoscaler-policy",
                        "namespace": CONTROLLER,
                        "behavior": "replace",
                        "files": ["policy.yaml"],
                        "options": {"disableNameSuffixHash": True},
                    }
                ],
            }
        )
    )
    return folder


def users_policy(prometheus_url: str) -> str:
    behavior = {"scaleDown": {"stabilizationWindowSeconds": 0}}
    metric = [{"name": "num_requests_waiting", "target": {"type": "AverageValue", "value": 2}}]
    workloads = [
        {"target": {"kind": kind, "namespace": SERVING, "name": name}, "minReplicas": 1, "maxReplicas": 8}
        | {"metrics": metric, "behavior": behavior}
        for kind, name in (("Deployment", WORKLOAD), ("StatefulSet", STATEFUL), ("Deployment", OWNED))
    ]
    return yaml.safe_dump({"interval": 1, "prometheus": {"url": prometheus_url, "timeout": 1}, "workloads": workloads})


def _ensure(create: Any) -> None:
    try:
        create()
    except ApiException as exc:
        if exc.status != 409:
            raise


def prepare_targets(kube: KubeServer) -> None:
    """The example workload (applied from its overlay), a StatefulSet, and a Deployment an HPA owns."""
    apply(kube, DEPLOY / "overlays" / "example-workload")
    apps, admin = client.AppsV1Api(kube.admin()), kube.admin()
    template = {"metadata": {"labels": {"app": "x"}}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
    spec = {"replicas": 2, "selector": {"matchLabels": {"app": "x"}}, "template": template}
    _ensure(lambda: apps.create_namespaced_stateful_set(SERVING, {"metadata": {"name": STATEFUL}, "spec": spec}))
    _ensure(lambda: apps.create_namespaced_deployment(SERVING, {"metadata": {"name": OWNED}, "spec": spec}))
    ref = {"apiVersion": "apps/v1", "kind": "Deployment", "name": OWNED}
    _ensure(
        lambda: client.AutoscalingV2Api(admin).create_namespaced_horizontal_pod_autoscaler(
            SERVING, {"metadata": {"name": "vllm-hpa"}, "spec": {"scaleTargetRef": ref, "maxReplicas": 8}}
        )
    )
    unclaimed = {"metadata": {"annotations": {"vllm-autoscaler.io/claimed-by": None}}}
    for name in (WORKLOAD, OWNED):
        apps.patch_namespaced_deployment_scale(name, SERVING, {"spec": {"replicas": 2}})
        apps.patch_namespaced_deployment(name, SERVING, unclaimed)  # as a first install finds them
    apps.patch_namespaced_stateful_set_scale(STATEFUL, SERVING, {"spec": {"replicas": 2}})
    apps.patch_namespaced_stateful_set(STATEFUL, SERVING, unclaimed)
    for delete in (  # a Lease or state left by an earlier run would hide the create this run must show
        lambda: client.CoordinationV1Api(admin).delete_namespaced_lease("vllm-autoscaler", CONTROLLER),
        lambda: client.CoreV1Api(admin).delete_namespaced_config_map("vllm-autoscaler-state", CONTROLLER),
    ):
        try:
            delete()
        except ApiException as exc:
            if exc.status != 404:
                raise


def granted(paths: list[Path]) -> set[tuple[str, str, str]]:
    rules = rbac_rules(paths)
    return {(g, r, v) for rule in rules for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}


@pytest.mark.parametrize("variant", ["production", "namespaced"])
def test_the_manifests_service_account_scales_with_least_privilege(
    fresh: KubeServer, exporter: VllmExporter, prometheus: PrometheusServer, tmp_path: Path, variant: str
) -> None:
    rbac = client.RbacAuthorizationV1Api(fresh.admin())
    if variant == "namespaced":  # an earlier production apply left the cluster-wide grant
        for delete in (rbac.delete_cluster_role_binding, rbac.delete_cluster_role):
            try:
                delete("vllm-autoscaler")
            except ApiException as exc:
                if exc.status != 404:
                    raise
    started = time.time()
    prepare_targets(fresh)
    overlay = user_overlay(tmp_path / "my-autoscaler", variant, users_policy(prometheus.url))
    apply(fresh, overlay)
    configmap = client.CoreV1Api(fresh.admin()).read_namespaced_config_map("vllm-autoscaler-policy", CONTROLLER)
    mounted = tmp_path / "mounted" / "policy.yaml"  # what the pod would see at /etc/vllm-autoscaler
    mounted.parent.mkdir()
    mounted.write_text(configmap.data["policy.yaml"])
    assert mounted.read_text() == (overlay / "policy.yaml").read_text()

    for name in (WORKLOAD, STATEFUL, OWNED):  # 12 waiting: 6 replicas each
        exporter.set_pods(SERVING, name, waiting=[6, 6], stateful=name == STATEFUL)
    token = fresh.service_account_token(CONTROLLER, "vllm-autoscaler")
    proxy = FaultProxy(fresh.url, fresh.ca_file)
    proxy.inject("PATCH", f"/deployments/{WORKLOAD}/scale$", 409)  # a conflict: the scale is read afresh
    proxy.inject("PATCH", f"/statefulsets/{STATEFUL}/scale$", 409)
    # Then two ticks' writes fail alike: the second FailedRescale Event is aggregated into the first.
    proxy.inject("PATCH", f"/statefulsets/{STATEFUL}/scale$", 503, times=10, retry_after=0)
    port = free_port()
    process = start_daemon(
        mounted,
        fresh.kubeconfig(tmp_path / "sa.kubeconfig", token, proxy.url),
        port,
        tmp_path / "daemon.log",
        VLLM_AUTOSCALER_LEADER_ELECT="true",
        POD_NAMESPACE=CONTROLLER,
        VLLM_AUTOSCALER_IDENTITY="vllm-autoscaler-0",
    )
    apps = client.AppsV1Api(fresh.admin())
    try:
        with Kubelet(fresh.admin(), SERVING):
            wait_for(
                lambda: (
                    apps.read_namespaced_deployment_scale(WORKLOAD, SERVING).spec.replicas == 6
                    and apps.read_namespaced_stateful_set_scale(STATEFUL, SERVING).spec.replicas == 6
                ),
                60,
                "both targets scaled to 6",
            )
        process.send_signal(signal.SIGTERM)
        assert process.wait(20) == 0, (tmp_path / "daemon.log").read_text()[-3000:]
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(5)
        proxy.close()
    assert apps.read_namespaced_deployment_scale(OWNED, SERVING).spec.replicas == 2

    sent = [e for e in fresh.audit(user=USER) if e.at >= started]
    refused = [(e.verb, e.resource, e.namespace, e.code) for e in sent if e.code in (401, 403)]
    assert refused == [], f"refused requests: {refused}"
    places = {(e.resource, e.namespace) for e in sent if e.writes}
    assert places <= {
        ("deployments", SERVING),  # the claim annotation
        ("statefulsets", SERVING),
        ("deployments/scale", SERVING),
        ("statefulsets/scale", SERVING),
        ("events", SERVING),
        ("leases", CONTROLLER),
        ("configmaps", CONTROLLER),
    }, places
    state = [e.name for e in sent if e.writes and e.resource == "configmaps"]
    assert set(state) == {"vllm-autoscaler-state"}
    assert not [e for e in sent if e.writes and e.name == OWNED], "wrote to an HPA-owned Deployment"
    used = {(e.group, e.resource, e.verb) for e in sent}
    rules = [DEPLOY / "controller" / "rbac.yaml"]
    rules.append(
        DEPLOY / "controller" / "cluster-rbac.yaml"
        if variant == "production"
        else DEPLOY / "overlays" / "namespaced" / "target-rbac.yaml"
    )
    unused = granted(rules) - used
    assert unused == set(), f"granted but never used: {sorted(unused)}"


def test_a_users_overlay_for_dry_run_beside_keda(fresh: KubeServer, tmp_path: Path) -> None:
    """The README's migration: the same policy file through the dry-run overlay, then production."""
    text = (DEPLOY / "examples" / "policies" / "threshold.yaml").read_text()
    overlay = user_overlay(tmp_path / "mine", "dry-run", text)
    apply(fresh, overlay)
    deployment = client.AppsV1Api(fresh.admin()).read_namespaced_deployment("vllm-autoscaler", CONTROLLER)
    env = {e.name: e.value for e in deployment.spec.template.spec.containers[0].env}
    assert env["VLLM_AUTOSCALER_DRY_RUN"] == "true"
    configmap = client.CoreV1Api(fresh.admin()).read_namespaced_config_map("vllm-autoscaler-policy", CONTROLLER)
    assert configmap.data == {"policy.yaml": text}
    done = subprocess.run(
        [sys.executable, "-m", "autoscaler", "validate", "--config", str(overlay / "policy.yaml")],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr


def test_the_admission_policy_lets_the_controller_change_only_its_claim(fresh: KubeServer, tmp_path: Path) -> None:
    """RBAC grants patch on Deployments for the claim; the shipped ValidatingAdmissionPolicy refuses any other
    change from the controller's ServiceAccount, on the real server."""
    apply(fresh, DEPLOY / "overlays" / "production")
    prepare_targets(fresh)
    token = fresh.service_account_token(CONTROLLER, "vllm-autoscaler")
    apps = client.AppsV1Api(fresh.api_for(token))
    claim = {"metadata": {"annotations": {"vllm-autoscaler.io/claimed-by": "vllm-autoscaler/vllm-autoscaler"}}}
    apps.patch_namespaced_deployment(WORKLOAD, SERVING, claim)
    for change in (
        {"spec": {"replicas": 7}},
        {"spec": {"template": {"spec": {"containers": [{"name": "vllm-server", "image": "evil:latest"}]}}}},
        {"metadata": {"labels": {"app": "other"}}},
        {"metadata": {"annotations": {"prometheus.io/scrape": "false"}}},
    ):
        with pytest.raises(ApiException) as refused:
            apps.patch_namespaced_deployment(WORKLOAD, SERVING, change)
        assert refused.value.status in (403, 422) and "claim annotation" in str(refused.value.body)
    apps.patch_namespaced_deployment(
        WORKLOAD, SERVING, {"metadata": {"annotations": {"vllm-autoscaler.io/claimed-by": None}}}
    )
