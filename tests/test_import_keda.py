"""`import-keda` on the design article's ScaledObject and on other shapes."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from autoscaler.cli import main
from autoscaler.keda_import import KedaImportError, convert_text
from policies.policy_file import parse_policy_document

ARTICLE = Path(__file__).resolve().parents[1] / "deploy" / "examples" / "keda-scaledobject-article.yaml"


def test_the_articles_scaledobject_is_corrected(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["import-keda", str(ARTICLE)]) == 0
    captured = capsys.readouterr()
    policy = parse_policy_document(yaml.safe_load(captured.out))
    workload = policy.workloads[0]
    assert workload.key == "llm-serving/vllm-llama3-70b"
    assert (workload.min_replicas, workload.max_replicas) == (2, 8)
    assert [(m.name, m.target.type.value, m.target.value) for m in workload.metrics] == [
        ("num_requests_waiting", "AverageValue", 2.0),  # named from the query, not trigger_0
        ("gpu_cache_usage_perc", "Value", 0.85),  # a level, as a Value target
    ]
    assert workload.metrics[0].query == 'sum(vllm:num_requests_waiting{app="vllm-llama3-70b"})'  # the fleet total
    behavior = workload.behavior.resolved()
    assert behavior.down_window == 600 and behavior.down.policies[0].value == 25  # type: ignore[index]
    assert str(policy.prometheus.url) == "http://prometheus-k8s.monitoring.svc.cluster.local:9090"
    lines = captured.out.splitlines()
    at = lines.index("  - name: num_requests_waiting")
    assert lines[at - 1].startswith("  # import-keda corrected: the query sums over pods")
    assert "# import-keda corrected: metricType Value" in captured.out
    assert "corrected: the query sums over pods" in captured.err and "cooldownPeriod is not mapped" in captured.err
    written = tmp_path / "policy.yaml"
    written.write_text(captured.out)
    assert main(["validate", "--config", str(written)]) == 0


def test_as_is_keeps_kedas_semantics(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["import-keda", "--as-is", str(ARTICLE)]) == 0
    captured = capsys.readouterr()
    workload = parse_policy_document(yaml.safe_load(captured.out)).workloads[0]
    assert [m.target.type.value for m in workload.metrics] == ["AverageValue", "AverageValue"]
    assert workload.metrics[0].query == (
        'sum(vllm:num_requests_waiting{app="vllm-llama3-70b"}) / '
        'count(vllm:num_requests_waiting{app="vllm-llama3-70b"})'
    )
    assert "under-scales by the replica count" in captured.err
    assert "wants metricType Value" in captured.err


@pytest.mark.parametrize(
    ("query", "total"),
    [
        ("avg(vllm:num_requests_waiting{a='b'})", "sum(vllm:num_requests_waiting{a='b'})"),
        ("avg by (pod) (vllm:num_requests_waiting)", "sum(vllm:num_requests_waiting)"),
        ("sum(rate(x[1m])) / count(up)", "sum(rate(x[1m]))"),
        ("avg(x) * 2", None),
        ("max(x)", None),
    ],
)
def test_a_per_pod_average_becomes_the_fleet_total(query: str, total: str | None) -> None:
    from autoscaler.keda_import import fleet_total

    assert fleet_total(query) == total


def test_activation_is_not_answered_with_an_authentication_hint() -> None:
    _, warnings = _one("""
kind: ScaledObject
metadata: {name: x, namespace: y}
spec:
  scaleTargetRef: {name: z}
  minReplicaCount: 1
  triggers:
  - type: prometheus
    metadata: {query: 'sum(vllm:num_requests_waiting)', threshold: '4', activationThreshold: '1'}
""")
    activation = [w for w in warnings if "activationThreshold" in w]
    assert activation and "activation between 0 and 1" in activation[0] and "prometheus" not in activation[0]


def _one(text: str) -> tuple[dict, list[str]]:  # type: ignore[type-arg]
    conversion = convert_text(text)[0]
    return conversion.policy, conversion.warnings


def test_value_triggers_fallback_and_pause() -> None:
    policy, warnings = _one("""
apiVersion: keda.sh/v1alpha1
kind: ScaledObject
metadata:
  name: chat
  namespace: serving
  annotations: {autoscaling.keda.sh/paused-replicas: "3"}
spec:
  scaleTargetRef: {name: chat-vllm}
  minReplicaCount: 1
  maxReplicaCount: 20
  fallback: {failureThreshold: 5, replicas: 6}
  triggers:
  - type: prometheus
    metricType: Value
    metadata:
      serverAddress: http://prom:9090
      query: max(vllm:kv_cache_usage_perc{namespace="serving"})
      threshold: "0.8"
      ignoreNullValues: "false"
  - type: cpu
    metadata: {value: "60"}
""")
    workload = policy["workloads"][0]
    assert workload["metrics"][0]["target"] == {"type": "Value", "value": 0.8}
    assert workload["fallback"] == {"failureThreshold": 5, "replicas": 6}
    assert any("type 'cpu' is not supported" in w for w in warnings)
    assert any('vllm-autoscaler.io/paused-replicas: "3"' in w for w in warnings)
    assert not any("under-scales" in w for w in warnings)


def test_an_avg_query_under_average_value_is_flagged() -> None:
    _, warnings = _one("""
kind: ScaledObject
metadata: {name: x, namespace: y}
spec:
  scaleTargetRef: {name: z}
  triggers:
  - type: prometheus
    metadata: {query: 'avg by (pod) (vllm:num_requests_waiting)', threshold: '4', serverAddress: 'http://p:9090'}
""")
    assert any("corrected: the query sums over pods (sum(vllm:num_requests_waiting))" in w for w in warnings)
    assert any("scale to zero: activation reads spec.triggers[0]'s query above 0" in w for w in warnings)


def test_several_scaledobjects_become_several_workloads() -> None:
    text = (
        "\n---\n".join(
            f"""
kind: ScaledObject
metadata: {{name: so{i}, namespace: ns}}
spec:
  scaleTargetRef: {{name: app{i}}}
  minReplicaCount: 1
  triggers:
  - type: prometheus
    metadata: {{query: 'sum(x{i})', threshold: '1'}}
"""
            for i in range(2)
        )
        + "\n---\nkind: ConfigMap\nmetadata: {name: other}\n"
    )
    from autoscaler.keda_import import merge

    policy = merge(convert_text(text)).policy
    assert [w["target"]["name"] for w in policy["workloads"]] == ["app0", "app1"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("kind: Deployment\nmetadata: {name: x}\n", "no ScaledObject"),
        ("kind: ScaledObject\nspec: {triggers: []}\n", "scaleTargetRef.name is required"),
        ("kind: ScaledObject\nspec: {scaleTargetRef: {name: a}, triggers: [{type: cpu}]}\n", "no prometheus trigger"),
        (
            "kind: ScaledObject\nspec: {scaleTargetRef: {name: a}, triggers: [{type: prometheus, metadata: "
            "{query: q, threshold: lots}}]}\n",
            "is not a number",
        ),
        ("kind: ScaledObject\nspec: {scaleTargetRef: {name: a, kind: Rollout}, triggers: []}\n", "Rollout"),
        ("{{{", "not valid YAML"),
    ],
)
def test_bad_input(text: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(KedaImportError, match=message):
        convert_text(text)
    path = tmp_path / "so.yaml"
    path.write_text(text)
    assert main(["import-keda", str(path)]) == 2
    assert message in capsys.readouterr().err


ZERO = """
kind: ScaledObject
metadata: {name: eval, namespace: teams}
spec:
  scaleTargetRef: {name: eval-7b}
  minReplicaCount: 0
  maxReplicaCount: 3
  cooldownPeriod: 420
  triggers:
  - type: prometheus
    metadata: {query: 'sum(vllm:num_requests_waiting{model_name="eval"})', threshold: '3'}
  - type: prometheus
    metadata:
      query: 'sum(envoy_cluster_upstream_rq_pending_active{envoy_cluster_name="eval"})'
      threshold: '5'
      activationThreshold: '0.5'
"""


def test_scale_to_zero_maps_to_an_activation_block() -> None:
    policy, warnings = _one(ZERO)
    workload = parse_policy_document(policy).workloads[0]
    assert workload.min_replicas == 0 and workload.activation is not None
    assert workload.activation.query == 'sum(envoy_cluster_upstream_rq_pending_active{envoy_cluster_name="eval"})'
    assert (workload.activation.threshold, workload.activation.idle_seconds) == (0.5, 420)
    said = [w for w in warnings if w.startswith("scale to zero")]
    assert said and "KEDA woke on any of the 2 triggers" in said[0] and "even with requests still running" in said[0]
    assert not any("can never wake" in w for w in warnings)  # the gateway's query has a value at zero
    assert not any("cooldownPeriod is not mapped" in w for w in warnings)


def test_a_vllm_only_activation_is_said_to_never_wake() -> None:
    text = ZERO.replace("minReplicaCount: 0", "minReplicaCount: 2\n  idleReplicaCount: 0").split(
        "  - type: prometheus\n    metadata:\n"
    )[0]
    policy, warnings = _one(text)
    workload = parse_policy_document(policy).workloads[0]
    assert workload.min_replicas == 0 and workload.activation is not None
    assert workload.activation.idle_seconds == 420 and workload.activation.threshold == 0
    assert any("can never wake the workload" in w for w in warnings)
    assert any("KEDA woke straight to 2" in w for w in warnings)


def test_an_idle_replica_count_other_than_zero_is_refused() -> None:
    with pytest.raises(KedaImportError, match="idleReplicaCount 1"):
        _one(ZERO.replace("minReplicaCount: 0", "minReplicaCount: 2\n  idleReplicaCount: 1"))


def test_activation_is_not_mapped_where_keda_never_went_to_zero() -> None:
    policy, warnings = _one(ZERO.replace("minReplicaCount: 0", "minReplicaCount: 1"))
    assert policy["workloads"][0]["minReplicas"] == 1 and "activation" not in policy["workloads"][0]
    assert any("activationThreshold is not mapped" in w for w in warnings)
    assert any("cooldownPeriod is not mapped" in w for w in warnings)
