"""The HPA's three conditions read from a tick's decision line: table-driven, as the HPA's own tests are."""

from __future__ import annotations

from typing import Any

import pytest

from autoscaler.conditions import judge, merge

STEADY = {"current": 4, "recommended": 4, "stabilized": 4, "desired": 4, "reason": "within-tolerance"}
DEMAND = {"policy": {"demand": {"vllm:num_requests_waiting": 3.2, "vllm:kv_cache_usage_perc": 3.9}}}


@pytest.mark.parametrize(
    ("line", "able", "active", "limited"),
    [
        ({**STEADY, **DEMAND}, "ReadyForNewScale", "ValidMetricFound", "DesiredWithinRange"),
        (
            {
                **STEADY,
                "recommended": 9,
                "stabilized": 8,
                "desired": 8,
                "reason": "bounds",
                "applied": True,
                "write": "applied",
            },
            "SucceededRescale",
            "ValidMetricFound",
            "TooManyReplicas",
        ),
        (
            {**STEADY, "recommended": 1, "stabilized": 2, "desired": 2, "reason": "bounds"},
            "ReadyForNewScale",
            "ValidMetricFound",
            "TooFewReplicas",
        ),
        (
            {**STEADY, "current": 9, "recommended": 8, "stabilized": 8, "desired": 8, "reason": "bounds"},
            "ReadyForNewScale",
            "ValidMetricFound",
            "TooManyReplicas",
        ),
        (
            {**STEADY, "recommended": 8, "stabilized": 8, "desired": 6, "reason": "rate-limited"},
            "ReadyForNewScale",
            "ValidMetricFound",
            "ScaleUpLimit",
        ),
        (
            {**STEADY, "recommended": 2, "stabilized": 2, "desired": 3, "reason": "rate-limited"},
            "ReadyForNewScale",
            "ValidMetricFound",
            "ScaleDownLimit",
        ),
        (
            {**STEADY, "recommended": 2, "stabilized": 4, "reason": "stabilized"},
            "ScaleDownStabilized",
            "ValidMetricFound",
            "DesiredWithinRange",
        ),
        (
            {**STEADY, "reason": "metrics-unavailable", "metric_failures": {"waiting": "no-data: empty"}},
            "ReadyForNewScale",
            "FailedGetExternalMetric",
            None,
        ),
        (
            {**STEADY, "desired": 6, "write": "forbidden", "detail": "403"},
            "FailedUpdateScale",
            "ValidMetricFound",
            "DesiredWithinRange",
        ),
        ({**STEADY, "desired": 6, "write": "not-leader"}, "NotLeader", "ValidMetricFound", "DesiredWithinRange"),
        (
            {**STEADY, "dry_run": True, "owners": ["HPA keda-hpa-x"], "write": "dry-run"},
            "DryRun",
            "ValidMetricFound",
            "DesiredWithinRange",
        ),
        ({"current": 4, "reason": "foreign-autoscaler", "owners": ["HPA h"]}, "ForeignAutoscaler", None, None),
        ({"current": 4, "reason": "owner-unknown"}, "OwnerUnknown", None, None),
        ({"reason": "target-not-found", "detail": "gone"}, "FailedGetScale", None, None),
        ({"current": 4, "reason": "warming-up"}, None, "WarmingUp", None),
        ({"current": 4, "reason": "paused"}, "Paused", None, None),
        (
            {"current": 0, "recommended": 0, "stabilized": None, "desired": 0, "reason": "scaling-disabled"},
            "ReadyForNewScale",
            "ScalingDisabled",
            None,
        ),
        (
            {"current": 0, "recommended": 0, "stabilized": None, "desired": 0, "reason": "scaled-to-zero"},
            "ReadyForNewScale",
            "ScaledToZero",
            None,
        ),
    ],
)
def test_each_tick_reads_as_the_hpas_conditions(
    line: dict[str, Any], able: str | None, active: str | None, limited: str | None
) -> None:
    judged = judge(line, 2, 8)
    assert {kind: reason for kind, (_, reason, _) in judged.items()} == {
        kind: reason
        for kind, reason in (("AbleToScale", able), ("ScalingActive", active), ("ScalingLimited", limited))
        if reason is not None
    }


def test_the_metric_named_is_the_one_that_set_the_count() -> None:
    _, _, message = judge({**STEADY, **DEMAND}, 2, 8)["ScalingActive"]
    assert message.endswith("vllm:kv_cache_usage_perc")


def test_a_transition_time_moves_only_when_the_status_changes() -> None:
    first = merge([], judge({**STEADY, **DEMAND}, 2, 8), 100.0)
    limited = {**STEADY, "recommended": 8, "stabilized": 8, "desired": 6, "reason": "rate-limited"}
    second = merge(first, judge(limited, 2, 8), 160.0)
    times = {c.type: (c.status, c.reason, c.last_transition_time) for c in second}
    assert times["AbleToScale"] == ("True", "ReadyForNewScale", 100.0)
    assert times["ScalingLimited"] == ("True", "ScaleUpLimit", 160.0)
    unreadable = merge(second, judge({"reason": "target-unavailable"}, 2, 8), 220.0)
    kept = {c.type: (c.status, c.reason, c.last_transition_time) for c in unreadable}
    assert kept["AbleToScale"] == ("False", "FailedGetScale", 220.0)
    assert kept["ScalingLimited"] == times["ScalingLimited"]  # an unreadable target says nothing about the limits
