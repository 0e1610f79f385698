"""The daemon's own metrics: per-workload families exposed from plain values (``autoscaler.telemetry``)."""

from __future__ import annotations

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from autoscaler.telemetry import Telemetry


def test_per_workload_series_are_exposed_as_prometheus_client_would() -> None:
    telemetry = Telemetry()
    telemetry.current.labels("llm/a").set(3)
    telemetry.current.labels("llm/b").set(5)
    telemetry.decisions.labels("llm/a", "steady").inc()
    telemetry.decisions.labels("llm/a", "steady").inc()
    telemetry.leader.set(1)
    families = {f.name: f for f in text_string_to_metric_families(generate_latest(telemetry.registry).decode())}
    current = families["vllm_autoscaler_current_replicas"]
    assert current.type == "gauge"
    assert {s.labels["workload"]: s.value for s in current.samples} == {"llm/a": 3.0, "llm/b": 5.0}
    decisions = families["vllm_autoscaler_decisions"]
    assert decisions.type == "counter"
    assert [(s.name, s.labels, s.value) for s in decisions.samples] == [
        ("vllm_autoscaler_decisions_total", {"workload": "llm/a", "reason": "steady"}, 2.0)
    ]
    assert telemetry.registry.get_sample_value("vllm_autoscaler_leader") == 1.0


def test_a_series_is_made_once_and_kept() -> None:
    telemetry = Telemetry()
    assert telemetry.ready.labels("llm/a") is telemetry.ready.labels("llm/a")
