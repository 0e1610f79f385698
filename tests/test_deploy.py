"""deploy/ and the Dockerfile, offline: every manifest validates against the Kubernetes schemas, overlays
render with the real `kubectl kustomize`, RBAC has no wildcards, the image runs as non-root, the vLLM
workload drains."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from policies.policy_file import load_policy_file, parse_policy_text

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
K8S_VERSION = "1.35.0"
CRDS = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"),
    ("monitoring.coreos.com/v1", "PodMonitor"),
    ("monitoring.coreos.com/v1", "PrometheusRule"),
    ("keda.sh/v1alpha1", "ScaledObject"),
}


def _documents(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def render(directory: Path) -> list[dict[str, Any]]:
    """The objects ``kubectl kustomize`` renders from ``directory``: the real kustomize, as ``apply -k`` runs it."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        if os.environ.get("CI"):
            pytest.fail("kubectl is missing: CI renders the manifests with the real kustomize")
        pytest.skip("kubectl is not installed")
    done = subprocess.run([kubectl, "kustomize", str(directory)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"kubectl kustomize {directory}: {done.stderr}"
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def _containers(obj: dict[str, Any]) -> list[dict[str, Any]]:
    spec = obj.get("spec", {}).get("template", {}).get("spec", {})
    return list(spec.get("containers", [])) + list(spec.get("initContainers", []))


KUSTOMIZATIONS = sorted(p.parent for p in DEPLOY.rglob("kustomization.yaml") if "components" not in p.parts)
MANIFESTS = sorted(
    p
    for p in DEPLOY.rglob("*.yaml")
    if p.name not in ("kustomization.yaml", "policy.yaml")
    and "patch" not in p.name
    and "policies" not in p.parts
    and "prometheus" not in p.parts  # Prometheus' own rules file, checked by promtool below
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


def _rules(path: Path) -> dict[str, list[dict[str, Any]]]:
    return {o["kind"]: o["rules"] for o in _documents(path) if o["kind"] in ("Role", "ClusterRole")}


def test_rbac_is_least_privilege_without_wildcards() -> None:
    """What each grant is used for is proven against the real server's audit log (integration/test_deploy)."""
    rules = {**_rules(DEPLOY / "controller" / "rbac.yaml"), **_rules(DEPLOY / "controller" / "cluster-rbac.yaml")}
    for kind in rules.values():
        for rule in kind:
            for key in ("verbs", "resources", "apiGroups"):
                assert "*" not in rule[key], f"wildcard in {key}"
    granted = {
        (g, r, v)
        for kind in rules.values()
        for rule in kind
        for g in rule["apiGroups"]
        for r in rule["resources"]
        for v in rule["verbs"]
    }
    assert not any(r in ("secrets", "pods") and v in ("create", "update", "patch", "delete") for _, r, v in granted)
    assert not any(r in ("deployments", "statefulsets") and v in ("create", "update", "delete") for _, r, v in granted)
    # patch on the objects themselves is for the claim annotation alone, which the admission policy enforces
    policy = _documents(DEPLOY / "controller" / "claims-admission-policy.yaml")[0]
    rules_matched = policy["spec"]["matchConstraints"]["resourceRules"][0]
    assert (
        set(rules_matched["resources"]) == {"deployments", "statefulsets"} and policy["spec"]["failurePolicy"] == "Fail"
    )
    assert {r["resources"][0] for r in rules["Role"]} == {"leases", "configmaps"}
    from autoscaler.state import MOST_SHARDS, STATE_CONFIGMAP, shard_name

    for rule in rules["Role"]:  # its own state ConfigMaps (the shards), by name, and no other
        if rule["resources"] == ["configmaps"] and rule["verbs"] != ["create"]:
            assert rule["resourceNames"] == [shard_name(STATE_CONFIGMAP, i) for i in range(MOST_SHARDS)]
    assert not any(r["resources"] == ["configmaps"] for r in rules["ClusterRole"])
    namespaced = _rules(DEPLOY / "overlays" / "namespaced" / "target-rbac.yaml")
    assert namespaced["Role"] == rules["ClusterRole"], "the namespaced variant grants the ClusterRole's rules"


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
    shipped = (DEPLOY / "controller" / "policy.yaml").read_text()
    assert shipped == (DEPLOY / "examples" / "policies" / "predictive.yaml").read_text()
    for overlay in ("dry-run", "production", "namespaced"):
        configmap = next(
            o
            for o in render(DEPLOY / "overlays" / overlay)
            if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "vllm-autoscaler-policy"
        )
        assert configmap["data"] == {"policy.yaml": shipped}
        assert parse_policy_text(shipped).workloads[0].policy_type == "predictive"


def test_going_live_installs_the_controller_alone() -> None:
    kinds = {o["kind"] for o in render(DEPLOY / "overlays" / "production")}
    assert "Deployment" in kinds and "DaemonSet" not in kinds
    deployments = [o for o in render(DEPLOY / "overlays" / "production") if o["kind"] == "Deployment"]
    assert [d["metadata"]["name"] for d in deployments] == ["vllm-autoscaler"]


def test_the_prometheus_operator_component_scrapes_the_vllm_pods() -> None:
    """The component is optional (it needs the operator's CRDs); included, it adds a PodMonitor that selects
    the example workload's pods by the label they carry, on their metrics port."""
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        overlay = Path(folder)
        relative = os.path.relpath(DEPLOY, overlay)
        (overlay / "kustomization.yaml").write_text(
            f"resources: [{relative}/overlays/production]\ncomponents: [{relative}/components/prometheus-operator]\n"
        )
        objects = render(overlay)
    monitor = next(o for o in objects if o["kind"] == "PodMonitor")
    pods = next(o for o in render(DEPLOY / "overlays" / "example-workload") if o["kind"] == "Deployment")
    template = pods["spec"]["template"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= template["metadata"]["labels"].items()
    ports = {p["name"] for p in template["spec"]["containers"][0]["ports"]}
    assert monitor["spec"]["podMetricsEndpoints"][0]["port"] in ports
    assert monitor["spec"]["namespaceSelector"] == {"any": True}
    assert any(o["kind"] == "ServiceMonitor" for o in objects)


def test_the_vllm_workload_drains_and_uses_current_vllm() -> None:
    objects = render(DEPLOY / "overlays" / "example-workload")
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


def test_the_image_installs_exactly_the_locked_runtime_dependencies() -> None:
    """Every runtime dependency of pyproject.toml is pinned in requirements.lock with its hashes, no extra's
    (the daemon's image carries no plotting), and the image installs the lock with --require-hashes."""
    import tomllib

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    lock = (ROOT / "requirements.lock").read_text()
    pinned = {canonicalize_name(m[0]): m[1] for m in re.findall(r"^([A-Za-z0-9_.\-]+)==(\S+) \\$", lock, re.M)}
    for dependency in project["dependencies"]:
        requirement = Requirement(dependency)
        name = canonicalize_name(requirement.name)
        assert name in pinned, f"{name} is not in requirements.lock: regenerate it (see the Dockerfile)"
        assert requirement.specifier.contains(pinned[name]), f"{name}=={pinned[name]} is outside {requirement}"
    entries = re.split(r"\n(?=[A-Za-z0-9])", lock.split("\n\n", 1)[-1].strip())
    assert all("--hash=sha256:" in entry for entry in entries if "==" in entry)
    assert "matplotlib" not in pinned
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert dockerfile.count("--require-hashes") == 2 and "--no-deps /wheels/vllm_autoscaler-" in dockerfile


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
        "vllm_autoscaler_owner_desired_replicas",
    ):
        assert metric in queries


RULES = DEPLOY / "prometheus" / "rules.yaml"


def _promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("promtool is missing: CI installs Debian's prometheus, which ships it")
        pytest.skip("promtool is not installed (apt-get install prometheus)")
    return found


def test_the_alert_rules_pass_promtools_own_tests() -> None:
    """Each alert fires on the series that call for it, after its `for`, and not on healthy ones
    (tests/fixtures/alerts-test.yaml)."""
    promtool = _promtool()
    fixtures = ROOT / "tests" / "fixtures"
    for command in (["check", "rules", str(RULES)], ["test", "rules", "alerts-test.yaml"]):
        done = subprocess.run([promtool, *command], capture_output=True, text=True, cwd=fixtures, timeout=60)
        assert done.returncode == 0, done.stdout + done.stderr


def test_the_prometheusrule_holds_the_same_alerts_as_the_rules_file() -> None:
    rule = yaml.safe_load((DEPLOY / "components" / "prometheus-operator" / "prometheusrule.yaml").read_text())
    assert rule["kind"] == "PrometheusRule" and rule["spec"] == yaml.safe_load(RULES.read_text())
    alerts = {r["alert"] for group in rule["spec"]["groups"] for r in group["rules"]}
    assert alerts == {
        "VllmAutoscalerNotTicking",
        "VllmAutoscalerMaxedOut",
        "VllmAutoscalerReplicasMismatch",
        "VllmAutoscalerMetricsFailing",
        "VllmAutoscalerOwnerConflict",
        "VllmAutoscalerErrorBudgetBurn",
    }
