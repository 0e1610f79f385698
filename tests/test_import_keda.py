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
    assert any("minReplicaCount 0" in w for w in warnings)


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
