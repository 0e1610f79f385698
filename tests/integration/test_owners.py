"""The daemon beside other autoscalers and other namespaces, on the real kube-apiserver: an owner refuses a write
however late it appears, a namespace in trouble holds only its own workloads, and every write passes one fence."""

from __future__ import annotations

import json
import time

import pytest
from kubernetes import client

from autoscaler.actuators.base import ScaleState, target_key
from autoscaler.actuators.kubernetes import KubernetesActuator, api_client
from autoscaler.controller import Controller
from autoscaler.testing.fault_proxy import FaultProxy
from autoscaler.testing.servers import PrometheusServer
from policies.policy_file import TargetRef
from tests.integration.conftest import Cluster, shipped_rules
from tests.integration.daemon_kit import (
    NAME,
    controller_for,
    create_hpa,
    events,
    log_lines,
    policy_text,
    run_once,
)

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("owner", ["hpa", "scaledobject"])
def test_a_target_owned_by_another_autoscaler_is_refused(
    cluster: Cluster, loaded: PrometheusServer, owner: str, request: pytest.FixtureRequest
) -> None:
    cluster.deployment(NAME, 2)
    ref = {"apiVersion": "apps/v1", "kind": "Deployment", "name": NAME}
    if owner == "hpa":
        client.AutoscalingV2Api(cluster.admin).create_namespaced_horizontal_pod_autoscaler(
            cluster.namespace, {"metadata": {"name": "vllm-hpa"}, "spec": {"scaleTargetRef": ref, "maxReplicas": 8}}
        )
    else:
        request.getfixturevalue("keda_crd")
        client.CustomObjectsApi(cluster.admin).create_namespaced_custom_object(
            "keda.sh",
            "v1alpha1",
            cluster.namespace,
            "scaledobjects",
            {
                "apiVersion": "keda.sh/v1alpha1",
                "kind": "ScaledObject",
                "metadata": {"name": "vllm-so"},
                "spec": {"scaleTargetRef": {"name": NAME}, "triggers": [{"type": "prometheus", "metadata": {}}]},
            },
        )
    assert run_once(cluster, policy_text(loaded.url, cluster.namespace)) == 0
    assert cluster.scale_writes() == []
    recorded = events(cluster)
    assert [e.reason for e in recorded] == ["ForeignAutoscaler"]
    assert ("vllm-hpa" if owner == "hpa" else "vllm-so") in recorded[0].message
    assert cluster.replicas(NAME) == 2


def test_an_owner_created_between_two_ticks_is_seen_before_the_next_write(
    cluster: Cluster, loaded: PrometheusServer
) -> None:
    """The owner check of a tick is cached for a minute; the check again just before a write is not: an HPA
    created after a tick stops the next tick's write, with one ForeignAutoscaler Event."""
    cluster.deployment(NAME, 8)
    controller = controller_for(cluster, loaded.url)
    assert controller.tick()[0]["desired"] == 8  # nothing to write; the namespace's autoscalers listed and cached
    ref = {"apiVersion": "apps/v1", "kind": "Deployment", "name": NAME}
    client.AutoscalingV2Api(cluster.admin).create_namespaced_horizontal_pod_autoscaler(
        cluster.namespace, {"metadata": {"name": "late-hpa"}, "spec": {"scaleTargetRef": ref, "maxReplicas": 8}}
    )
    client.AppsV1Api(cluster.admin).patch_namespaced_deployment_scale(
        NAME, cluster.namespace, {"spec": {"replicas": 4}}
    )  # by hand: the next tick wants 8 again
    line = controller.tick()[0]
    assert (line["reason"], line["write"], line["applied"]) == ("foreign-autoscaler", "refused", False)
    assert cluster.scale_writes() == []
    assert cluster.replicas(NAME) == 4
    key = {"workload": f"{cluster.namespace}/{NAME}"}
    assert (
        controller.telemetry.registry.get_sample_value(
            "vllm_autoscaler_scale_writes_total", {**key, "outcome": "refused"}
        )
        == 1
    )  # a write refused, the tick's decision counted once
    assert [e.reason for e in events(cluster) if e.reason == "ForeignAutoscaler"] == ["ForeignAutoscaler"]


def test_an_owner_check_that_cannot_complete_writes_nothing(
    cluster: Cluster, loaded: PrometheusServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without the right to list HPAs the daemon cannot know that one owns the target: it holds, says why
    in the decision line, and records one Event naming the list and the missing rule."""
    cluster.deployment(NAME, 2)
    create_hpa(cluster)
    rules = [r for r in shipped_rules() if r["resources"] != ["horizontalpodautoscalers"]]
    token = cluster.kube.service_account_token(cluster.namespace, "no-hpa")
    cluster.kube.grant(cluster.namespace, (cluster.namespace, "no-hpa"), rules, "no-hpa")
    kubeconfig = cluster.kube.kubeconfig(cluster.workdir / "no-hpa", token)
    for _ in range(2):
        assert run_once(cluster, policy_text(loaded.url, cluster.namespace), kubeconfig=kubeconfig) == 0
    lines = [e for e in log_lines(capsys) if e["event"] == "decision"]
    assert [e["reason"] for e in lines] == ["owner-unknown", "owner-unknown"]
    assert "horizontalpodautoscalers" in lines[0]["owner_unknown"][0]
    assert cluster.scale_writes(f"system:serviceaccount:{cluster.namespace}:no-hpa", ok=False) == []
    assert cluster.replicas(NAME) == 2
    recorded = [e for e in events(cluster) if e.reason == "OwnerUnknown"]
    assert len(recorded) == 2  # one per process: each run --once is a new daemon
    assert "`list` on horizontalpodautoscalers in apiGroup autoscaling" in recorded[0].message


def test_an_owner_list_that_fails_is_not_cached_as_no_owners(
    cluster: Cluster, loaded: PrometheusServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failed owner list is held as a failure for its backoff (no request sent meanwhile), never as "no
    owners"; asked again after it, the HPA is seen."""
    monkeypatch.setattr("autoscaler.actuators.kubernetes.BACKOFF_S", 1.0)
    cluster.deployment(NAME, 2)
    create_hpa(cluster)
    proxy = FaultProxy(cluster.kube.url, cluster.kube.ca_file)
    try:
        proxy.inject("GET", "/horizontalpodautoscalers$", 500, times=None)
        controller = controller_for(cluster, loaded.url, kubeconfig=cluster.kubeconfig(proxy.url))
        assert controller.tick()[0]["reason"] == "owner-unknown"
        proxy.clear()
        sent = len(proxy.requests("GET", "/horizontalpodautoscalers$"))
        assert controller.tick()[0]["reason"] == "owner-unknown"  # within the backoff: held, not asked
        assert len(proxy.requests("GET", "/horizontalpodautoscalers$")) == sent
        time.sleep(1.1)
        assert controller.tick()[0]["reason"] == "foreign-autoscaler"  # asked again, not cached as "none"
    finally:
        proxy.close()
    assert cluster.scale_writes() == []


def test_dry_run_beside_an_hpa_decides_as_if_it_were_ours(
    cluster: Cluster, loaded: PrometheusServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """Shadow mode: the count we would set, beside the HPA's own, and still no write of any kind."""
    cluster.deployment(NAME, 2)
    create_hpa(cluster, current=2, desired=4)
    assert run_once(cluster, policy_text(loaded.url, cluster.namespace), "--dry-run") == 0
    would = [e for e in log_lines(capsys) if e["event"] == "would-scale"]
    assert len(would) == 1
    assert (would[0]["desired"], would[0]["owner_current"], would[0]["owner_desired"]) == (6, 2, 4)
    assert (would[0]["heading"], would[0]["agrees"]) == (8, False)  # ten replicas' worth, within maxReplicas 8
    assert would[0]["owners"] == ["HorizontalPodAutoscaler vllm-hpa"] and would[0]["shadow"] is True
    assert cluster.writes() == []
    hpa_status = {"status": {"currentReplicas": 8, "desiredReplicas": 8}}  # the owner comes round to ours
    client.AutoscalingV2Api(cluster.admin).patch_namespaced_horizontal_pod_autoscaler_status(
        "vllm-hpa", cluster.namespace, hpa_status
    )
    client.AppsV1Api(cluster.admin).patch_namespaced_deployment_scale(
        NAME, cluster.namespace, {"spec": {"replicas": 6}}
    )
    assert run_once(cluster, policy_text(loaded.url, cluster.namespace), "--dry-run") == 0
    agreeing = [e for e in log_lines(capsys) if e["event"] == "would-scale"]
    assert len(agreeing) == 1  # a line when it agrees too, every tick
    assert (agreeing[0]["desired"], agreeing[0]["owner_desired"], agreeing[0]["agrees"]) == (8, 8, True)
    assert cluster.writes() == []


def test_two_installs_never_scale_one_target(cluster: Cluster, loaded: PrometheusServer) -> None:
    """Install a claims the target with its first write; install b, which also lists it, leaves it alone
    (a foreign autoscaler) until a drops the workload from its policy and gives the claim up."""
    from autoscaler.actuators.base import CLAIMED_BY

    cluster.deployment(NAME, 2)

    def install(name: str) -> Controller:
        folder = cluster.workdir / name
        folder.mkdir()
        policy = folder / "policy.json"
        policy.write_text(policy_text(loaded.url, cluster.namespace))
        return cluster.controller(policy, install=f"{cluster.namespace}/{name}")

    first, second = install("a"), install("b")
    assert first.tick()[0]["applied"]
    deployment = client.AppsV1Api(cluster.admin).read_namespaced_deployment(NAME, cluster.namespace)
    assert deployment.metadata.annotations[CLAIMED_BY] == f"{cluster.namespace}/a"
    cluster.kube.set_replicas(cluster.namespace, NAME, 2)
    line = second.tick()[0]
    assert line["reason"] == "foreign-autoscaler" and line["owners"] == [
        f"vllm-autoscaler install {cluster.namespace}/a"
    ]
    assert cluster.replicas(NAME) == 2
    (cluster.workdir / "a" / "policy.json").write_text(
        json.dumps(
            {
                "interval": 15,
                "prometheus": {"url": loaded.url},
                "workloads": [
                    json.loads(policy_text(loaded.url, cluster.namespace))["workloads"][0]
                    | {"target": {"namespace": cluster.namespace, "name": "other"}}
                ],
            }
        )
    )
    first.tick()  # the reload drops the workload: a releases its claim
    assert second.tick()[0]["applied"]
    deployment = client.AppsV1Api(cluster.admin).read_namespaced_deployment(NAME, cluster.namespace)
    assert deployment.metadata.annotations[CLAIMED_BY] == f"{cluster.namespace}/b"


def test_a_throttled_list_backs_off_and_never_fans_out(
    cluster: Cluster, loaded: PrometheusServer, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster.deployment(NAME, 2)
    cluster.deployment("other", 2)
    two = json.loads(policy_text(loaded.url, cluster.namespace))
    two["workloads"].append({**two["workloads"][0], "target": {"namespace": cluster.namespace, "name": "other"}})
    proxy = FaultProxy(cluster.kube.url, cluster.kube.ca_file)
    try:
        proxy.inject("GET", "/deployments$", 429, times=None, retry_after=0)
        assert run_once(cluster, json.dumps(two), kubeconfig=cluster.kubeconfig(proxy.url)) == 0
        gets = proxy.requests("GET", "/deployments")
        assert gets and all(s.path.split("?")[0].endswith("/deployments") for s in gets)  # no per-workload GET
        assert len(gets) == 3  # the attempts one LIST gets within a second, then the tick holds
    finally:
        proxy.close()
    reasons = {e["workload"]: e["reason"] for e in log_lines(capsys) if e["event"] == "decision"}
    assert set(reasons.values()) == {"target-unavailable"}
    assert cluster.scale_writes(ok=False) == []


def test_a_slow_api_answer_times_out_and_holds(
    cluster: Cluster, loaded: PrometheusServer, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster.deployment(NAME, 2)
    monkeypatch.setenv("VLLM_AUTOSCALER_API_TIMEOUT_S", "0.5")
    proxy = FaultProxy(cluster.kube.url, cluster.kube.ca_file)
    try:
        proxy.inject("GET", "/deployments$", None, times=None, delay=1.5)
        assert (
            run_once(cluster, policy_text(loaded.url, cluster.namespace), kubeconfig=cluster.kubeconfig(proxy.url)) == 0
        )
    finally:
        proxy.close()
    line = next(e for e in log_lines(capsys) if e["event"] == "decision")
    assert line["reason"] == "target-unavailable"
    assert cluster.scale_writes(ok=False) == [] and cluster.replicas(NAME) == 2


def test_a_throttled_namespace_leaves_a_healthy_one_deciding_every_interval(
    cluster: Cluster, loaded: PrometheusServer
) -> None:
    """Every read in one namespace answers 429 with ``Retry-After: 5``: its workload holds (its target unreadable,
    then its owner unknown), the LIST is not sent again for those 5 s, and the healthy namespace beside it decides
    and scales on every tick, each tick well within its interval."""
    cluster.deployment(NAME, 2)
    other = cluster.kube.create_namespace("t")
    try:
        cluster.kube.grant(other, (cluster.namespace, cluster.account), shipped_rules(), "shipped")
        cluster.kube.create_deployment(other, NAME, 2)
        document = json.loads(policy_text(loaded.url, cluster.namespace))
        document["workloads"].append({**document["workloads"][0], "target": {"namespace": other, "name": NAME}})
        path = cluster.workdir / "two.json"
        path.write_text(json.dumps(document))
        proxy = FaultProxy(cluster.kube.url, cluster.kube.ca_file)
        try:
            proxy.inject("GET", f"/namespaces/{other}/", 429, times=None, retry_after=5)
            controller = cluster.controller(path, cluster.kubeconfig(proxy.url))
            walls, reasons = [], []
            for _ in range(8):
                started = time.monotonic()
                lines = {line["workload"]: line for line in controller.tick()}
                walls.append(time.monotonic() - started)
                reasons.append((lines[f"{cluster.namespace}/{NAME}"]["reason"], lines[f"{other}/{NAME}"]["reason"]))
                time.sleep(0.5)
            throttled = [s for s in proxy.requests("GET") if f"/namespaces/{other}/" in s.path]
        finally:
            proxy.close()
    finally:
        cluster.kube.delete_namespace(other)
    assert max(walls) < 1.5, walls
    assert all(healthy not in ("target-unavailable", "owner-unknown") for healthy, _ in reasons), reasons
    assert all(held in ("target-unavailable", "owner-unknown") for _, held in reasons), reasons
    assert cluster.replicas(NAME) == 6  # the healthy one scaled
    assert len(throttled) <= 2 * 2  # its deployments and HPA lists, once per Retry-After: not on every tick


def test_one_fence_for_every_write(cluster: Cluster) -> None:
    """Events and the state ConfigMap pass the Lease's fence as scale writes do: with no authority left, neither
    reaches the API server; with it back, both do."""
    from autoscaler.state import STATE_CONFIGMAP, ConfigMapStateStore, WorkloadRecord

    cluster.deployment(NAME, 2)
    api = api_client(str(cluster.kubeconfig()))
    left = {"s": 0.0}
    target = TargetRef(namespace=cluster.namespace, name=NAME)
    actuator = KubernetesActuator(api, authority=lambda: left["s"])
    store = ConfigMapStateStore(api, cluster.namespace, authority=lambda: left["s"])
    record = {
        "k.json": WorkloadRecord(
            workload=f"{cluster.namespace}/{NAME}", target="Deployment/x", policy="p", updated_at=1.0
        )
    }
    actuator.event(target, "Normal", "SuccessfulRescale", "fenced")
    store.save(record)
    assert events(cluster) == []
    configmaps = client.CoreV1Api(cluster.admin).list_namespaced_config_map(cluster.namespace).items
    assert STATE_CONFIGMAP not in {c.metadata.name for c in configmaps}
    left["s"] = 5.0
    actuator.event(target, "Normal", "SuccessfulRescale", "allowed")
    store.save(record)
    assert [e.message for e in events(cluster)] == ["allowed"]
    assert [r.workload for r in ConfigMapStateStore(api, cluster.namespace).load().values()] == [
        f"{cluster.namespace}/{NAME}"
    ]


def test_a_namespace_whose_targets_did_not_change_is_not_parsed_again(cluster: Cluster) -> None:
    """Each tick lists every namespace's Deployments; a list whose items are the bytes of the last (only the list's
    own resourceVersion moved) gives back what the last one was read as, and one scaled in between is read anew."""
    cluster.deployment(NAME, 2)
    cluster.deployment("vllm-other", 3)
    actuator = KubernetesActuator(api_client(str(cluster.kubeconfig())))
    targets = [TargetRef(namespace=cluster.namespace, name=name) for name in (NAME, "vllm-other")]
    first = actuator.read_many(targets)
    client.CoreV1Api(cluster.admin).create_namespaced_config_map(  # a write elsewhere moves the list's version
        cluster.namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="unrelated"))
    )
    again = actuator.read_many(targets)
    assert all(again[key] is first[key] for key in first)
    client.AppsV1Api(cluster.admin).patch_namespaced_deployment_scale(
        NAME, cluster.namespace, {"spec": {"replicas": 5}}
    )
    scaled = actuator.read_many(targets)
    key = target_key(targets[0])
    state = scaled[key]
    assert state is not first[key] and isinstance(state, ScaleState) and state.replicas == 5


def test_a_watched_namespace_is_listed_again_only_after_a_change(cluster: Cluster) -> None:
    """With its watch open, a namespace is listed once, however many ticks read it; a scale by someone else is seen
    by the watch and read by the next LIST (the audit log counts the LISTs)."""
    from autoscaler.testing.servers import wait_for

    cluster.deployment(NAME, 2)
    actuator = KubernetesActuator(api_client(str(cluster.kubeconfig())), watch=True)
    target = TargetRef(namespace=cluster.namespace, name=NAME)
    key = target_key(target)

    def lists() -> int:
        sent = cluster.kube.audit(cluster.namespace, cluster.user)
        return sum(1 for e in sent if e.verb == "list" and e.resource == "deployments")

    def replicas() -> int:
        state = actuator.read_many([target])[key]
        assert isinstance(state, ScaleState), state
        return state.replicas

    try:
        assert replicas() == 2
        wait_for(lambda: actuator.watching() == (1, 1), 10, "the watch open")
        assert [replicas() for _ in range(3)] == [2, 2, 2]
        assert lists() == 1
        client.AppsV1Api(cluster.admin).patch_namespaced_deployment_scale(
            NAME, cluster.namespace, {"spec": {"replicas": 5}}
        )
        wait_for(lambda: actuator.watching() == (0, 1), 10, "the scale seen by the watch")
        assert replicas() == 5 and lists() == 2
        wait_for(lambda: actuator.watching() == (1, 1), 10, "current again")
        assert replicas() == 5 and lists() == 2
        watches = [e for e in cluster.kube.audit(cluster.namespace, cluster.user) if e.verb == "watch"]
        assert watches and all(e.resource == "deployments" and e.code == 200 for e in watches)
    finally:
        actuator.stopping.set()
