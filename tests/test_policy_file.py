"""The policy file: strict parsing, durations, defaults, and `validate` on broken files."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from autoscaler.cli import main
from policies.policy_file import (
    MAX_REPLICAS,
    PolicyFileError,
    json_schema,
    load_policy_file,
    parse_policy_document,
    parse_policy_text,
)
from policies.spec import parse_duration
from tests.helpers import workload_doc

CONTRACT_EXAMPLE = """
interval: 15
prometheus:
  url: http://prometheus-k8s.monitoring.svc:9090
  timeout: 5
workloads:
  - target: {kind: Deployment, namespace: llm-serving, name: vllm-llama3-70b}
    minReplicas: 2
    maxReplicas: 8
    coldStartSeconds: 300
    metrics:
      - name: num_requests_waiting
        query: sum(vllm:num_requests_waiting{namespace="llm-serving",pod=~"vllm-llama3-70b-.*"})
        target: {type: AverageValue, value: 2}
      - name: gpu_cache_usage_perc
        query: max(vllm:kv_cache_usage_perc{namespace="llm-serving",pod=~"vllm-llama3-70b-.*"})
        target: {type: Value, value: 0.85}
    policy: {type: threshold, tolerance: 0.1}
    behavior:
      scaleUp: {stabilizationWindowSeconds: 0, selectPolicy: Max,
                policies: [{type: Percent, value: 100, periodSeconds: 15}]}
      scaleDown: {stabilizationWindowSeconds: 600,
                  policies: [{type: Percent, value: 25, periodSeconds: 60}]}
"""


def test_the_contract_example_is_valid() -> None:
    document = parse_policy_text(CONTRACT_EXAMPLE)
    workload = document.workloads[0]
    assert workload.key == "llm-serving/vllm-llama3-70b"
    resolved = workload.behavior.resolved()
    assert resolved.down_window == 600 and resolved.up_window == 0
    assert resolved.down.select_policy == "Max"


def test_behavior_defaults_are_the_hpas() -> None:
    resolved = parse_policy_document(workload_doc()).workloads[0].behavior.resolved()
    assert resolved.up_window == 0 and resolved.down_window == 300
    assert [(p.type.value, p.value, p.period_seconds) for p in resolved.up.policies or []] == [
        ("Pods", 4, 15),
        ("Percent", 100, 15),
    ]
    assert [(p.type.value, p.value, p.period_seconds) for p in resolved.down.policies or []] == [("Percent", 100, 15)]


@pytest.mark.parametrize(
    ("text", "seconds"),
    [(90, 90), ("90s", 90), ("5m", 300), ("1h30m", 5400), ("300", 300), ("7d", 604800), ("1d12h", 129600)],
)
def test_durations(text: object, seconds: int) -> None:
    assert parse_duration(text) == seconds
    doc = workload_doc(behavior={"scaleDown": {"stabilizationWindowSeconds": text}})
    if seconds <= 3600:
        assert parse_policy_document(doc).workloads[0].behavior.resolved().down_window == seconds


def _problems(document: dict[str, object]) -> list[str]:
    with pytest.raises(PolicyFileError) as caught:
        parse_policy_document(document)
    return caught.value.problems


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({"minReplicas": -1}, "workloads[0].minReplicas: Input should be greater than or equal to 0"),
        ({"minReplicas": 5, "maxReplicas": 3}, "workloads[0].minReplicas: must not exceed maxReplicas (5 > 3)"),
        (
            {"metrics": []},
            "workloads[0].metrics: required unless an slo block is set (then a capacity gives them, or simulate "
            "measures one)",
        ),
        ({"surprise": 1}, "workloads[0].surprise: unknown key"),
        (
            {"behavior": {"scaleDown": {"policies": [{"type": "Pods", "value": 1, "periodSeconds": 1801}]}}},
            "workloads[0].behavior.scaleDown.policies[0].periodSeconds: Input should be less than or equal to 1800",
        ),
        (
            {"behavior": {"scaleDown": {"policies": [{"type": "Percent", "value": 0, "periodSeconds": 60}]}}},
            "workloads[0].behavior.scaleDown.policies[0].value: Input should be greater than 0",
        ),
        (
            {"behavior": {"scaleUp": {"policies": [{"type": "Nodes", "value": 1, "periodSeconds": 60}]}}},
            "workloads[0].behavior.scaleUp.policies[0].type: Input should be 'Pods' or 'Percent'",
        ),
        (
            {"behavior": {"scaleUp": {"selectPolicy": "Maximum"}}},
            "workloads[0].behavior.scaleUp.selectPolicy: Input should be 'Max', 'Min' or 'Disabled'",
        ),
        (
            {"behavior": {"scaleUp": {"stabilizationWindowSeconds": 3601}}},
            "workloads[0].behavior.scaleUp.stabilizationWindowSeconds: Input should be less than or equal to 3600",
        ),
        (
            {"behavior": {"scaleUp": {"stabilizationWindowSeconds": "soon"}}},
            "workloads[0].behavior.scaleUp.stabilizationWindowSeconds: invalid duration 'soon': "
            "use integer seconds or a string such as '90s' or '5m'",
        ),
        (
            {"metrics": [{"name": "a", "target": {"value": 1}}, {"name": "a", "target": {"value": 2}}]},
            "workloads[0].metrics: metric names must be distinct; repeated: a",
        ),
        (
            {"metrics": [{"name": "a", "target": {"type": "Utilization", "value": 1}}]},
            "workloads[0].metrics[0].target.type: Input should be 'AverageValue' or 'Value'",
        ),
        (
            {"policy": {"type": "magic"}},
            "workloads[0].policy.type: unknown policy type 'magic'; known: pid, predictive, threshold",
        ),
        ({"policy": {"type": "pid", "kq": 1}}, "workloads[0].policy.kq: unknown key"),
        (
            {"policy": {"type": "predictive", "headroom": -1}},
            "workloads[0].policy.headroom: Input should be greater than or equal to -0.75",
        ),
        (
            {"policy": {"type": "pid", "metric": "nope"}},
            "workloads[0].policy: metric 'nope' is not one of the workload's metrics ['num_requests_waiting']",
        ),
        (
            {"coldStartSeconds": "later"},
            "workloads[0].coldStartSeconds: invalid duration 'later': "
            "use integer seconds or a string such as '90s' or '5m'",
        ),
    ],
)
def test_each_problem_has_its_field_path(overrides: dict[str, object], expected: str) -> None:
    assert expected in _problems(workload_doc(**overrides))


def test_every_problem_is_reported_at_once() -> None:
    doc = workload_doc(minReplicas=9, maxReplicas=3, extra=True, policy={"type": "pid", "kp": -1})
    problems = _problems(doc)
    assert len(problems) == 3, problems


def test_duplicate_targets_name_the_target() -> None:
    doc = workload_doc()
    doc["workloads"] = [doc["workloads"][0], dict(doc["workloads"][0])]  # type: ignore[index]
    assert _problems(doc) == ["workloads[1].target: same target as workloads[0]: Deployment llm-serving/vllm"]


def test_cold_start_auto_is_accepted() -> None:
    assert parse_policy_document(workload_doc(coldStartSeconds="auto")).workloads[0].cold_start_seconds == "auto"


def test_validate_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = tmp_path / "good.yaml"
    good.write_text(CONTRACT_EXAMPLE)
    assert main(["validate", "--config", str(good)]) == 0
    bad = tmp_path / "bad.json"
    bad.write_text(
        json.dumps(
            workload_doc(
                maxReplicas=0,
                behavior={
                    "scaleDown": {
                        "policies": [
                            {"type": "Percent", "value": 25, "periodSeconds": 60},
                            {"type": "Pod", "value": 1, "periodSeconds": 60},
                        ]
                    }
                },
            )
        )
    )
    capsys.readouterr()
    assert main(["validate", "--config", str(bad)]) == 2
    out = capsys.readouterr().out
    assert "workloads[0].behavior.scaleDown.policies[1].type: Input should be 'Pods' or 'Percent'" in out
    assert "workloads[0].maxReplicas: Input should be greater than or equal to 1" in out


@pytest.mark.parametrize("content", ["workloads: [", "", "- just\n- a list", "workloads: 3", "\x00binary"])
def test_validate_rejects_garbage(tmp_path: Path, content: str) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(content)
    assert main(["validate", "--config", str(path)]) == 2


def test_validate_missing_file(tmp_path: Path) -> None:
    assert main(["validate", "--config", str(tmp_path / "nope.yaml")]) == 2


def test_print_schema(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "--print-schema"]) == 0
    schema = json.loads(capsys.readouterr().out)
    workload = schema["$defs"]["Workload"]
    assert {"minReplicas", "maxReplicas", "metrics", "policy", "behavior"} <= set(workload["properties"])
    assert workload["additionalProperties"] is False
    policy_types = {v["properties"]["type"]["const"] for v in workload["properties"]["policy"]["anyOf"]}
    assert policy_types == {"threshold", "pid", "predictive"}


def _properties(node: object, path: str = "") -> list[tuple[str, dict[str, object]]]:
    """Every property of the schema, with where it sits."""
    found: list[tuple[str, dict[str, object]]] = []
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "properties":
                for name, prop in value.items():
                    found.append((f"{path}.{name}", prop))
                    found += _properties(prop, f"{path}.{name}")
            else:
                found += _properties(value, f"{path}/{key}")
    elif isinstance(node, list):
        for item in node:
            found += _properties(item, path)
    return found


def test_the_schema_describes_every_field() -> None:
    undescribed = [path for path, prop in _properties(json_schema()) if not prop.get("description")]
    assert undescribed == []


SHIPPED_POLICIES = sorted(Path(__file__).parents[1].glob("deploy/examples/policies/*.yaml"))


@pytest.mark.parametrize("path", SHIPPED_POLICIES, ids=lambda p: p.name)
def test_the_schema_accepts_the_shipped_policies_and_its_refs_resolve(path: Path) -> None:
    import jsonschema
    import yaml

    validator = jsonschema.Draft202012Validator(json_schema())
    document = yaml.safe_load(path.read_text())
    assert list(validator.iter_errors(document)) == []
    document["workloads"][0]["maxReplica"] = 8
    assert [e.validator for e in validator.iter_errors(document)] == ["additionalProperties"]


def test_a_seconds_setting_takes_the_duration_syntax_too() -> None:
    doc = workload_doc(policy={"type": "predictive", "horizonSeconds": "5m", "trend": {"windowSeconds": "90s"}})
    decider = parse_policy_document(doc).workloads[0].build_policy(15)
    assert decider.params.horizon_seconds == 300  # type: ignore[attr-defined]
    assert decider.params.trend.window_seconds == 90  # type: ignore[attr-defined]
    doc["prometheus"] = {"timeout": "2s"}
    assert parse_policy_document(doc).prometheus.timeout == 2


SLO = {"ttftSeconds": 2, "target": 0.99}
CAPACITY = {"promptTokensPerSecond": 1500, "runningRequests": 24}


def _slo_form(**overrides: object) -> dict[str, object]:
    doc = workload_doc(slo=SLO, **overrides)
    del doc["workloads"][0]["metrics"]  # type: ignore[index]
    return doc


def test_a_capacity_gives_the_metrics_and_predictive_is_the_policy() -> None:
    workload = parse_policy_document(_slo_form(capacity=CAPACITY)).workloads[0]
    assert [(m.name, m.target.type.value, m.target.value) for m in workload.metrics] == [
        ("prompt_tokens_per_second", "AverageValue", 1500),
        ("num_requests_running", "AverageValue", 24),
        ("num_requests_waiting", "AverageValue", 2),
    ]
    assert workload.policy_type == "predictive" and not workload.needs_capacity
    assert not workload.learns_capacity  # off unless asked (policies/spec.py, Capacity.learn)
    named = parse_policy_document(_slo_form(capacity=CAPACITY, policy={"type": "threshold"}))
    assert named.workloads[0].policy_type == "threshold" and not named.workloads[0].learns_capacity


@pytest.mark.parametrize(
    ("slo", "name", "reading"),
    [
        ({"ttftSeconds": 2, "target": 0.95}, "time_to_first_token_slo_seconds", 0.95),
        ({"ttftSeconds": 2, "target": 0.95}, "time_to_first_token_p90_seconds", 0.9),
        ({"ttftSeconds": 2, "target": 0.95}, "first_tokens_over_slo_per_second", 2.0),
        (None, "time_to_first_token_slo_seconds", 0.9),
        (None, "first_tokens_over_slo_per_second", math.inf),
    ],
)
def test_what_a_histogram_reading_takes_of_its_workload(
    slo: dict[str, float] | None, name: str, reading: float
) -> None:
    """One rule for the daemon's queries and the simulator's signals alike: the quantile at the slo's target, the
    p90's 0.9, the first tokens above the slo's seconds."""
    workload = parse_policy_document(workload_doc(**({} if slo is None else {"slo": slo}))).workloads[0]
    assert workload.histogram_reading(name) == reading


def test_the_slo_form_round_trips_without_the_metrics_it_built() -> None:
    document = parse_policy_document(_slo_form(capacity=CAPACITY))
    raw = document.model_dump(by_alias=True, exclude_none=True, mode="json")
    assert "metrics" not in raw["workloads"][0] and raw["workloads"][0]["capacity"]["promptTokensPerSecond"] == 1500
    assert parse_policy_document(raw) == document


def test_an_slo_alone_is_a_file_simulate_measures_and_the_daemon_refuses() -> None:
    workload = parse_policy_document(_slo_form()).workloads[0]
    assert workload.needs_capacity and workload.metrics == []
    from autoscaler.metrics.queries import metric_queries

    with pytest.raises(ValueError, match="capacity: needed to run"):
        metric_queries(workload)


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({"slo": None}, "workloads[0].metrics: required unless an slo block is set"),
        ({"slo": None, "capacity": CAPACITY}, "workloads[0].capacity: is what a replica sustains within an slo"),
        (
            {"capacity": CAPACITY, "metrics": [{"name": "num_requests_waiting", "target": {"value": 2}}]},
            "workloads[0].capacity: give metrics or capacity, not both",
        ),
        ({"capacity": {"promptTokensPerSecond": 0, "runningRequests": 8}}, "capacity.promptTokensPerSecond"),
        (
            {"capacity": {**CAPACITY, "learn": True}, "policy": {"type": "pid"}},
            "workloads[0].capacity.learn: only predictive learns its capacity; this workload runs pid",
        ),
    ],
)
def test_the_slo_forms_problems_name_their_field(overrides: dict[str, object], expected: str) -> None:
    doc = _slo_form()
    doc["workloads"][0].update(overrides)  # type: ignore[index]
    if doc["workloads"][0]["slo"] is None:  # type: ignore[index]
        del doc["workloads"][0]["slo"]  # type: ignore[index]
    assert any(expected in problem for problem in _problems(doc)), _problems(doc)


def test_validate_says_what_an_slo_alone_needs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import yaml

    path = tmp_path / "slo.yaml"
    path.write_text(yaml.safe_dump(_slo_form()))
    assert main(["validate", "--config", str(path)]) == 0
    captured = capsys.readouterr()
    assert "no metrics yet" in captured.out
    assert "simulate measures what one replica sustains" in captured.err
    path.write_text(yaml.safe_dump(_slo_form(capacity=CAPACITY)))
    assert main(["validate", "--config", str(path)]) == 0
    assert "built from capacity: 1500 prompt tokens/s" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("url", "accepted"),
    [
        ("http://prometheus.monitoring:9090", True),
        ("https://thanos.example.com/prom", True),
        ("not a url", False),
        ("prometheus:9090", False),
        ("ftp://prometheus", False),
        ("http://", False),
    ],
)
def test_the_prometheus_url_is_parsed(url: str, accepted: bool) -> None:
    document = {**workload_doc(), "prometheus": {"url": url}}
    if accepted:
        assert parse_policy_document(document).prometheus.url == url
    else:
        assert any(
            p.startswith("prometheus.url: ") and "not an http(s) URL with a host" in p for p in _problems(document)
        )


@pytest.mark.parametrize("field", ["minReplicas", "maxReplicas"])
def test_replica_bounds_fit_a_32_bit_count(field: str) -> None:
    assert parse_policy_document(workload_doc(minReplicas=1, maxReplicas=MAX_REPLICAS)).workloads[0].max_replicas
    bounds = {"minReplicas": 1, "maxReplicas": 8, field: 10**40}
    assert any(p.startswith(f"workloads[0].{field}: ") for p in _problems(workload_doc(**bounds)))


def test_a_file_over_a_configmaps_size_is_refused_before_parsing(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text("# padding\n" * 120_000)  # 1.2 MB of comments, valid YAML if it were parsed
    with pytest.raises(PolicyFileError) as caught:
        load_policy_file(path)
    assert caught.value.problems == ["(file): over 1 MiB, more than a ConfigMap holds; refused before parsing"]


def test_an_encoding_error_is_named_as_one(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_bytes(b"interval: 15\n# caf\xe9\n")
    with pytest.raises(PolicyFileError) as caught:
        load_policy_file(path)
    assert caught.value.problems == ["(file): not UTF-8 text: byte 0xe9 at offset 18"]
