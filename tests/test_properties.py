"""Invariants of the decision pipeline over random policies, behaviors and metric sequences."""

from __future__ import annotations

import math
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from policies.base import Observation
from policies.pipeline import Decision, Reason
from policies.policy_file import parse_policy_document
from tests.helpers import workload_doc

scaling_policy = st.fixed_dictionaries(
    {
        "type": st.sampled_from(["Pods", "Percent"]),
        "value": st.integers(1, 200),
        "periodSeconds": st.integers(1, 300),
    }
)
scaling_rules = st.fixed_dictionaries(
    {},
    optional={
        "stabilizationWindowSeconds": st.integers(0, 600),
        "selectPolicy": st.sampled_from(["Max", "Min"]),
        "policies": st.lists(scaling_policy, min_size=1, max_size=3),
    },
)
policy_block = st.one_of(
    st.fixed_dictionaries({"type": st.just("threshold"), "tolerance": st.floats(0, 0.5)}),
    st.fixed_dictionaries(
        {"type": st.just("pid"), "kp": st.floats(0, 2), "ki": st.floats(0, 0.2), "kd": st.floats(0, 60)}
    ),
    st.fixed_dictionaries(
        {
            "type": st.just("predictive"),
            "trend": st.fixed_dictionaries({"windowSeconds": st.floats(15, 1800)}),
            "headroom": st.floats(-0.75, 1),
        }
    ),
)
metric_value = st.one_of(st.none(), st.floats(0, 500, allow_nan=False))


@st.composite
def scenario(draw: st.DrawFn) -> dict[str, Any]:
    lo = draw(st.integers(1, 5))
    hi = draw(st.integers(lo, 40))
    doc = workload_doc(
        minReplicas=lo,
        maxReplicas=hi,
        metrics=[
            {"name": "num_requests_waiting", "target": {"type": "AverageValue", "value": 2}},
            {"name": "kv_cache_usage_perc", "target": {"type": "Value", "value": 0.8}},
        ],
        policy=draw(policy_block),
        behavior={"scaleUp": draw(scaling_rules), "scaleDown": draw(scaling_rules)},
    )
    steps = draw(
        st.lists(
            st.tuples(st.integers(1, 120), metric_value, st.one_of(st.none(), st.floats(0, 1))), min_size=1, max_size=60
        )
    )
    return {"doc": doc, "start": draw(st.integers(lo, hi)), "steps": steps}


def _run(case: dict[str, Any]) -> tuple[list[tuple[float, int, Decision]], Any]:
    document = parse_policy_document(case["doc"])
    workload = document.workloads[0]
    decider = document.decider(workload)
    now, current, out = 1_000.0, case["start"], []
    for gap, waiting, kv in case["steps"]:
        now += gap
        decision = decider.decide(
            Observation(now, current, {"num_requests_waiting": waiting, "kv_cache_usage_perc": kv})
        )
        decider.applied(decision)
        out.append((now, current, decision))
        current = decision.desired
    return out, workload


SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(scenario())
def test_never_outside_bounds(case: dict[str, Any]) -> None:
    decisions, workload = _run(case)
    for _, _, decision in decisions:
        assert workload.min_replicas <= decision.desired <= workload.max_replicas


def _count_before(decisions: list[tuple[float, int, Decision]], start: int, moment: float) -> int:
    """The count in effect at ``moment``: the last decision at or before it, else the starting count."""
    count = start
    for at, _, decision in decisions:
        if at > moment:
            break
        count = decision.desired
    return count


@SETTINGS
@given(scenario())
def test_rate_limits_hold_inside_every_period(case: dict[str, Any]) -> None:
    decisions, workload = _run(case)
    resolved = workload.behavior.resolved()
    for now, current, decision in decisions:
        if decision.desired < current:
            allowed = []
            for p in resolved.down.policies or []:
                start = _count_before(decisions, case["start"], now - p.period_seconds)
                allowed.append(start - p.value if p.type == "Pods" else int(start * (1 - p.value / 100)))
            floor = max(allowed) if resolved.down.select_policy == "Min" else min(allowed)
            assert decision.desired >= max(floor, workload.min_replicas)
        if decision.desired > current:
            allowed = []
            for p in resolved.up.policies or []:
                start = _count_before(decisions, case["start"], now - p.period_seconds)
                allowed.append(start + p.value if p.type == "Pods" else math.ceil(start * (1 + p.value / 100)))
            ceiling = min(allowed) if resolved.up.select_policy == "Min" else max(allowed)
            assert decision.desired <= max(min(ceiling, workload.max_replicas), current)


@SETTINGS
@given(scenario())
def test_no_scale_down_below_a_recommendation_in_the_window(case: dict[str, Any]) -> None:
    decisions, workload = _run(case)
    window = workload.behavior.resolved().down_window
    seen: list[tuple[float, int]] = [(1_000.0, case["start"])]
    for now, current, decision in decisions:
        if decision.reason not in (Reason.METRICS_UNAVAILABLE,):
            seen.append((now, decision.recommended))
        if decision.desired < current:
            recent = [r for at, r in seen if at > now - window] + [decision.recommended]
            assert decision.desired >= min(max(recent), current)


@SETTINGS
@given(scenario())
def test_same_inputs_same_decisions(case: dict[str, Any]) -> None:
    first, _ = _run(case)
    second, _ = _run(case)
    assert [(d.desired, d.reason) for _, _, d in first] == [(d.desired, d.reason) for _, _, d in second]
