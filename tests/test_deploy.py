"""deploy/ and the Dockerfile: every manifest validates offline against the Kubernetes schemas, overlays
render, RBAC has no wildcards, the image runs as non-root, the vLLM workload drains on scale-down."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from autoscaler.policy_file import load_policy_file, parse_policy_text

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
K8S_VERSION = "1.35.0"
CRDS = {("monitoring.coreos.com/v1", "ServiceMonitor"), ("keda.sh/v1alpha1", "ScaledObject")}


def _documents(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _merge(base: Any, patch: Any) -> Any:
    """Strategic merge, as far as these manifests need it: maps merge, lists of named maps merge by name."""
    if isinstance(base, dict) and isinstance(patch, dict):
        out = copy.deepcopy(base)
        for key, value in patch.items():
            out[key] = _merge(out[key], value) if key in out else copy.deepcopy(value)
        return out
    if (
        isinstance(base, list)
        and isinstance(patch, list)
        and all(isinstance(i, dict) and "name" in i for i in base + patch)
    ):
        out = copy.deepcopy(base)
        for item in patch:
            match = next((i for i, b in enumerate(out) if b["name"] == item["name"]), None)
            if match is None:
                out.append(copy.deepcopy(item))
            else:
                out[match] = _merge(out[match], item)
        return out
    return copy.deepcopy(patch)


def render(directory: Path) -> list[dict[str, Any]]:
    """A small kustomize: resources (files or directories), patches by kind and name, images, namespace."""
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
    objects: list[dict[str, Any]] = []
    for entry in kustomization.get("resources", []):
        path = (directory / entry).resolve()
        assert path.exists(), f"{directory}/kustomization.yaml: resource {entry} does not exist"
        objects += render(path) if path.is_dir() else _documents(path)
    for patch in kustomization.get("patches", []):
        path = (directory / patch["path"]).resolve()
        assert path.exists(), f"{directory}: patch {patch['path']} does not exist"
        for doc in _documents(path):
            targets = [
                i
                for i, o in enumerate(objects)
                if o["kind"] == doc["kind"] and o["metadata"]["name"] == doc["metadata"]["name"]
            ]
            assert targets, f"{directory}: patch {patch['path']} matches no {doc['kind']} {doc['metadata']['name']}"
            for i in targets:
                objects[i] = _merge(objects[i], doc)
    for image in kustomization.get("images", []):
        for obj in objects:
            for container in _containers(obj):
                if container["image"].split(":")[0] == image["name"]:
                    container["image"] = f"{image['name']}:{image['newTag']}"
    if "namespace" in kustomization:
        for obj in objects:
            if obj["kind"] not in ("Namespace", "ClusterRole", "ClusterRoleBinding"):
                obj["metadata"]["namespace"] = kustomization["namespace"]
    return objects


def _containers(obj: dict[str, Any]) -> list[dict[str, Any]]:
    spec = obj.get("spec", {}).get("template", {}).get("spec", {})
    return list(spec.get("containers", [])) + list(spec.get("initContainers", []))


KUSTOMIZATIONS = sorted(p.parent for p in DEPLOY.rglob("kustomization.yaml"))
MANIFESTS = sorted(
    p
    for p in DEPLOY.rglob("*.yaml")
    if p.name != "kustomization.yaml" and "patch" not in p.name and "policies" not in p.parts
)


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: str(p.relative_to(DEPLOY)))
def test_every_manifest_validates_against_the_kubernetes_schemas(path: Path) -> None:
    for obj in _documents(path):
        if (obj["apiVersion"], obj["kind"]) in CRDS:
            assert obj["metadata"]["name"] and obj["spec"], f"{path}: {obj['kind']} without name or spec"
            continue
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


@pytest.mark.parametrize("directory", KUSTOMIZATIONS, ids=lambda p: str(p.relative_to(DEPLOY)))
def test_every_kustomization_renders_to_valid_objects(directory: Path) -> None:
    objects = render(directory)
    assert objects
    names = [(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]) for o in objects]
    assert len(names) == len(set(names)), "duplicate objects"
    for obj in objects:
        if (obj["apiVersion"], obj["kind"]) not in CRDS:
            kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


def test_rbac_is_least_privilege_without_wildcards() -> None:
    rules: dict[str, list[dict[str, Any]]] = {}
    for obj in _documents(DEPLOY / "controller" / "rbac.yaml"):
        if obj["kind"] in ("Role", "ClusterRole"):
            rules[obj["kind"]] = obj["rules"]
            for rule in obj["rules"]:
                for key in ("verbs", "resources", "apiGroups"):
                    assert "*" not in rule[key], f"wildcard in {obj['kind']} {key}"
    granted = {
        (g, r, v)
        for kind in rules.values()
        for rule in kind
        for g in rule["apiGroups"]
        for r in rule["resources"]
        for v in rule["verbs"]
    }
    needed = {
        ("apps", "deployments", "get"),
        ("apps", "deployments/scale", "patch"),
        ("", "events", "create"),
        ("coordination.k8s.io", "leases", "update"),
        ("autoscaling", "horizontalpodautoscalers", "list"),
        ("keda.sh", "scaledobjects", "list"),
        ("", "configmaps", "get"),
    }
    assert needed <= granted
    assert not any(
        r in ("secrets", "pods", "deployments") and v in ("create", "update", "patch", "delete") for _, r, v in granted
    )
    assert {r["resources"][0] for r in rules["Role"]} == {"leases", "configmaps"}


def test_the_controller_deployment_is_locked_down() -> None:
    deployment = next(o for o in render(DEPLOY / "controller") if o["kind"] == "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    assert deployment["spec"]["replicas"] == 2
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    container = pod["containers"][0]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["resources"]["requests"] and container["resources"]["limits"]
    mount = next(m for m in container["volumeMounts"] if m["name"] == "policy")
    assert "subPath" not in mount, "a subPath mount never sees ConfigMap updates"
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["VLLM_AUTOSCALER_LEADER_ELECT"] == "true"


def test_the_dry_run_overlay_writes_nothing() -> None:
    deployment = next(o for o in render(DEPLOY / "overlays" / "dry-run") if o["kind"] == "Deployment")
    env = {e["name"]: e.get("value") for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["VLLM_AUTOSCALER_DRY_RUN"] == "true" and deployment["spec"]["replicas"] == 1


def test_the_policies_shipped_are_valid() -> None:
    for path in sorted((DEPLOY / "examples" / "policies").glob("*.yaml")):
        assert load_policy_file(path).workloads
    for overlay in (DEPLOY / "controller", DEPLOY / "overlays" / "production"):
        configmap = next(
            o for o in render(overlay) if o["kind"] == "ConfigMap" and "autoscaler" in o["metadata"]["name"]
        )
        for key, text in configmap["data"].items():
            document = parse_policy_text(text, f"{overlay.name}:{key}")
            assert document.workloads[0].key == "llm-serving/vllm-llama3-70b"
    production = next(
        o
        for o in render(DEPLOY / "overlays" / "production")
        if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "vllm-autoscaler-policy"
    )
    assert parse_policy_text(production["data"]["policy.yaml"]).workloads[0].policy_type == "predictive"


def test_the_vllm_workload_drains_and_uses_current_vllm() -> None:
    objects = render(DEPLOY / "vllm")
    deployment = next(o for o in objects if o["kind"] == "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    args = container["args"]
    timeout = int(next(a.split("=", 1)[1] for a in args if a.startswith("--shutdown-timeout=")))
    sleep = int(container["lifecycle"]["preStop"]["exec"]["command"][-1])
    assert pod["terminationGracePeriodSeconds"] > timeout + sleep
    assert not any(a.startswith(("--speculative-model", "--num-speculative-tokens")) for a in args)
    tag = container["image"].rsplit(":v", 1)[1]
    assert tuple(int(x) for x in tag.split(".")[:2]) >= (0, 18)
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["NCCL_DEBUG"] == "WARN"
    shm = next(v for v in pod["volumes"] if v["name"] == "dshm")
    assert shm["emptyDir"]["medium"] == "Memory"
    cache_mount = next(m for m in container["volumeMounts"] if m["name"] == "model-cache")
    assert cache_mount["readOnly"] is True
    assert deployment["spec"]["template"]["metadata"]["annotations"]["prometheus.io/scrape"] == "true"
    assert "ready.py" in " ".join(container["readinessProbe"]["exec"]["command"])
    prefetch = next(o for o in objects if o["kind"] == "DaemonSet")
    assert (
        prefetch["spec"]["template"]["spec"]["volumes"][0]["hostPath"]["path"]
        == next(v for v in pod["volumes"] if v["name"] == "model-cache")["hostPath"]["path"]
    )


def test_the_image_is_multi_stage_and_runs_as_non_root() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert len(re.findall(r"^FROM ", dockerfile, re.M)) >= 2
    user = re.findall(r"^USER (\S+)", dockerfile, re.M)
    assert user and user[-1].split(":")[0] not in ("0", "root")
    assert 'ENTRYPOINT ["vllm-autoscaler"]' in dockerfile
    assert 'CMD ["run", "--config", "/etc/vllm-autoscaler/policy.yaml"]' in dockerfile
    assert re.search(r"pip (install|wheel).*(\.whl|--find-links|--wheel-dir)", dockerfile)


def test_the_grafana_dashboard_reads_the_daemons_metrics() -> None:
    import json

    dashboard = json.loads((DEPLOY / "grafana-dashboard.json").read_text())
    queries = " ".join(t["expr"] for p in dashboard["panels"] for t in p.get("targets", []))
    for metric in (
        "vllm_autoscaler_desired_replicas",
        "vllm_autoscaler_decisions_total",
        "vllm_autoscaler_cold_start_seconds_bucket",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
    ):
        assert metric in queries
