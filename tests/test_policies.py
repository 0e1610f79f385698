"""Policies: the HPA's replica arithmetic, its missing-metric rule, PID and predictive."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest

from policies.base import Observation
from policies.pipeline import Reason, WorkloadDecider
from policies.policy_file import parse_policy_document
from policies.predictive import pooled_replicas
from policies.replica_calculator import Tolerance, average_value_replicas, milli, value_replicas
from tests.helpers import workload_doc

TOL = Tolerance(0.1, 0.1)


@pytest.mark.parametrize(
    ("value", "expected"),
    [(0.57, 570), (14.5, 14500), (2, 2000), (0.0005, 1), (0.0001, 1), (1e-9, 1), (0, 0), (-1.5, -1500)],
)
def test_milli_rounds_up_like_quantity(value: float, expected: int) -> None:
    assert milli(value) == expected


@pytest.mark.parametrize(
    ("name", "total", "target", "current", "expected"),
    [
        # After replica_calculator_test.go, External per-pod (AverageValue) cases.
        ("scale up", 8.6, 2.15, 3, 4),
        ("scale down", 8.6, 2.867, 5, 3),
        ("tolerance", 8.6, 2.9, 3, 3),
        ("ratio exactly 1 + tolerance is within", 11, 2, 5, 5),
        ("ratio just above the band", 11.01, 2, 5, 6),
        ("the article's average per pod: 8 waiting per pod on 4 pods", 8, 2, 4, 4),
        ("the same load summed", 32, 2, 4, 16),
        ("zero load", 0, 2, 4, 0),
    ],
)
def test_average_value(name: str, total: float, target: float, current: int, expected: int) -> None:
    assert average_value_replicas(total, target, current, TOL).replicas == expected


@pytest.mark.parametrize(
    ("name", "level", "target", "current", "basis", "expected"),
    [
        # After replica_calculator_test.go, External (Value) cases.
        ("scale up", 8.6, 4.4, 1, 1, 2),
        ("scale down", 8.6, 14.334, 5, 5, 3),
        ("tolerance", 8.6, 8.888, 3, 3, 3),
        ("the article's max KV cache as a Value", 0.95, 0.85, 4, 4, 5),
        ("multiplies by the ready count", 0.95, 0.85, 8, 4, 8),  # never below current while replicas start
        ("multiplies by the ready count when scaling up", 2.55, 0.85, 8, 4, 12),
        ("at zero replicas", 1.7, 0.85, 0, 0, 2),
    ],
)
def test_value(name: str, level: float, target: float, current: int, basis: int, expected: int) -> None:
    assert value_replicas(level, target, current, basis, TOL).replicas == expected


def _decider(**overrides: object) -> WorkloadDecider:
    document = parse_policy_document(workload_doc(**overrides))
    return document.decider(document.workloads[0])


TWO_METRICS = [
    {"name": "num_requests_waiting", "target": {"type": "AverageValue", "value": 2}},
    {"name": "kv_cache_usage_perc", "target": {"type": "Value", "value": 0.8}},
]


@dataclass
class MissingCase:
    name: str
    waiting: float | None
    kv: float | None
    expected_desired: int
    expected_reason: str


MISSING_CASES = [
    MissingCase("all metrics missing holds", None, None, 4, Reason.METRICS_UNAVAILABLE),
    MissingCase("one missing, the other scales up", 20, None, 8, Reason.RATE_LIMITED),
    MissingCase("one missing, the other scales up within the rate", 14, None, 7, Reason.SCALE_UP),
    MissingCase("one missing, the other scales down: hold", 2, None, 4, Reason.METRICS_UNAVAILABLE),
    MissingCase("one missing, the other proposes the current count", None, 0.8, 4, Reason.WITHIN_TOLERANCE),
    MissingCase("NaN is no value", math.nan, math.nan, 4, Reason.METRICS_UNAVAILABLE),
    MissingCase("largest proposal wins", 2, 1.0, 5, Reason.SCALE_UP),
]


@pytest.mark.parametrize("case", MISSING_CASES, ids=lambda c: c.name)
def test_missing_metrics_follow_the_hpa(case: MissingCase) -> None:
    decider = _decider(metrics=TWO_METRICS, behavior={"scaleDown": {"stabilizationWindowSeconds": 0}})
    metrics = {"num_requests_waiting": case.waiting, "kv_cache_usage_perc": case.kv}
    decision = decider.decide(Observation(100.0, 4, metrics))
    assert (decision.desired, decision.reason) == (case.expected_desired, case.expected_reason)


def test_missing_metrics_leave_no_trace_in_the_window() -> None:
    decider = _decider(behavior={"scaleDown": {"stabilizationWindowSeconds": 60}})
    decider.decide(Observation(0.0, 4, {"num_requests_waiting": 8}))
    before = list(decider.behavior_state.recommendations)
    decider.decide(Observation(15.0, 4, {"num_requests_waiting": None}))
    assert decider.behavior_state.recommendations == before


@pytest.mark.parametrize(
    ("current", "expected", "reason"),
    [(0, 0, Reason.SCALING_DISABLED), (12, 10, Reason.BOUNDS), (1, 2, Reason.BOUNDS)],
)
def test_counts_outside_bounds_and_zero(current: int, expected: int, reason: str) -> None:
    decider = _decider(minReplicas=2, maxReplicas=10)
    decision = decider.decide(Observation(0.0, current, {"num_requests_waiting": 100}))
    assert (decision.desired, decision.reason) == (expected, reason)


def test_fallback_goes_to_its_count_after_the_threshold_and_stays() -> None:
    decider = _decider(fallback={"failureThreshold": 2, "replicas": 6})
    reasons, current = [], 3
    for t in range(5):
        decision = decider.decide(Observation(15.0 * t, current, {}))
        decider.applied(decision)
        current = decision.desired
        reasons.append((decision.desired, decision.reason))
    assert reasons == [(3, "metrics-unavailable"), (6, "fallback"), (6, "fallback"), (6, "fallback"), (6, "fallback")]


def _run(decider: WorkloadDecider, series: list[float], start: int, step: float = 15.0) -> list[int]:
    current, out = start, []
    for i, waiting in enumerate(series):
        decision = decider.decide(Observation(i * step, current, {"num_requests_waiting": waiting}))
        decider.applied(decision)
        current = decision.desired
        out.append(current)
    return out


FREE = {
    "scaleUp": {"policies": [{"type": "Pods", "value": 100, "periodSeconds": 1}]},
    "scaleDown": {"stabilizationWindowSeconds": 0, "policies": [{"type": "Pods", "value": 100, "periodSeconds": 1}]},
}


def test_pid_with_only_integral_at_one_interval_matches_the_hpa() -> None:
    series = [3, 9, 20, 31, 31, 12, 5, 0, 17, 40]
    hpa = _run(_decider(maxReplicas=50, behavior=FREE), series, 2)
    pid = _run(
        _decider(maxReplicas=50, behavior=FREE, policy={"type": "pid", "kp": 0, "ki": 1 / 15, "kd": 0}), series, 2
    )
    assert pid == hpa


def test_pid_uses_the_real_elapsed_time() -> None:
    half = _decider(maxReplicas=50, behavior=FREE, policy={"type": "pid", "kp": 0, "ki": 1 / 30})
    # Two ticks 15 s apart: half a step; the same error 30 s later: a full step.
    first = _run(half, [2, 16], 2, step=15)
    whole = _run(
        _decider(maxReplicas=50, behavior=FREE, policy={"type": "pid", "kp": 0, "ki": 1 / 30}), [2, 16], 2, step=30
    )
    assert first[-1] < whole[-1] == 8


def test_pid_does_not_integrate_against_a_bound() -> None:
    decider = _decider(maxReplicas=4, behavior=FREE, policy={"type": "pid", "kp": 0, "ki": 1 / 15})
    _run(decider, [100] * 10, 4)
    assert decider.policy.state.integral == 0.0


@pytest.mark.parametrize(
    ("name", "policy", "min_replicas", "start", "series", "expected_last", "most"),
    [
        # 3 waiting against a target of 2 needs 1.5 replicas; an integral of a quarter of the error a tick
        # moves 3 replicas by less than one, which a count rounded up every tick never leaves.
        ("moves smaller than a replica add up", {"kp": 0, "ki": 1 / 60}, 1, 3, [3.0] * 12, 2, 3),
        # Pinned at the lower bound by a far smaller load, the proportional term's noise (the error moving
        # between -0.95 and -0.75) must not buy a replica each time it rises.
        ("noise at the lower bound", {}, 2, 2, [0.2, 1.0, 0.4, 0.9, 0.1, 1.0, 0.3, 0.8] * 4, 2, 2),
        ("noise above the lower bound", {}, 1, 6, [10.0, 13.0, 11.0, 12.5, 10.5, 12.0] * 5, 6, 6),
    ],
)
def test_pid_output_is_not_rounded_between_ticks(
    name: str,
    policy: dict[str, float],
    min_replicas: int,
    start: int,
    series: list[float],
    expected_last: int,
    most: int,
) -> None:
    decider = _decider(minReplicas=min_replicas, maxReplicas=50, behavior=FREE, policy={"type": "pid", **policy})
    counts = _run(decider, series, start)
    assert counts[-1] == expected_last
    assert max(counts) <= most


def test_pid_state_is_deterministic() -> None:
    series = [3, 9, 20, 31, 12, 5, 0, 17]
    runs = [_run(_decider(maxReplicas=50, policy={"type": "pid", "kd": 30.0}), series, 2) for _ in range(2)]
    assert runs[0] == runs[1]


def _first_reach(levels: list[int], level: int) -> int:
    return next(i for i, n in enumerate(levels) if n >= level)


RAMP_INTERVAL = 15
# Waiting requests flat, then rising by one replica's worth (target 2) every minute, for 75 minutes.
RAMP = [2.0] * 20 + [2.0 + 2 * (i * RAMP_INTERVAL / 60.0) for i in range(1, 300)]


@pytest.mark.parametrize("cold_start", [120, 300, 600])
def test_predictive_scales_up_a_cold_start_ahead_of_threshold_on_a_ramp(cold_start: int) -> None:
    # Tolerance 0 on both sides, so that the lead measured is the forecast's, not the band's phase. The
    # levels are reached once the trend window (twice the horizon) lies on the ramp.
    common = {"maxReplicas": 400, "behavior": FREE, "coldStartSeconds": cold_start}
    threshold = _run(_decider(**common, policy={"type": "threshold", "tolerance": 0}), RAMP, 1)
    predictive = _run(_decider(**common, policy={"type": "predictive", "tolerance": 0, "headroom": 0}), RAMP, 1)
    for level in (40, 50, 60):
        lead = (_first_reach(threshold, level) - _first_reach(predictive, level)) * RAMP_INTERVAL
        assert lead >= cold_start - RAMP_INTERVAL, (level, lead)


def test_predictive_is_never_later_than_threshold_with_default_tolerance() -> None:
    common = {"maxReplicas": 400, "behavior": FREE, "coldStartSeconds": 300}
    threshold = _run(_decider(**common), RAMP, 1)
    predictive = _run(_decider(**common, policy={"type": "predictive"}), RAMP, 1)
    for level in range(5, 70, 5):
        assert _first_reach(predictive, level) <= _first_reach(threshold, level), level


def test_predictive_never_scales_in_on_the_forecast_alone() -> None:
    decider = _decider(maxReplicas=50, behavior=FREE, policy={"type": "predictive", "headroom": 0})
    # Falling fast: the forecast is near zero, but the present still needs 10 replicas.
    levels = _run(decider, [40, 36, 32, 28, 24, 20, 20, 20], 20)
    assert all(
        level >= math.ceil(load / 2) for level, load in zip(levels, [40, 36, 32, 28, 24, 20, 20, 20], strict=True)
    )
    assert levels[-1] == 10


def test_a_third_party_policy_from_an_entry_point(monkeypatch: pytest.MonkeyPatch) -> None:
    from importlib.metadata import EntryPoint

    from policies import registry

    monkeypatch.setitem(__import__("sys").modules, "acme_policy", __import__("types").ModuleType("acme_policy"))
    from policies.spec import StrictModel

    class FixedParams(StrictModel):
        type: str = "fixed"
        replicas: int = 3

    class FixedPolicy:
        type = "fixed"
        Params = FixedParams

        def __init__(self, params: FixedParams, ctx: object) -> None:
            self.params, self.state = params, None

        def recommend(self, observation: Observation) -> object:
            from policies.base import Proposal

            return Proposal(self.params.replicas, "steady")

    __import__("sys").modules["acme_policy"].FixedPolicy = FixedPolicy  # type: ignore[attr-defined]
    entry = EntryPoint("fixed", "acme_policy:FixedPolicy", registry.ENTRY_POINT_GROUP)
    monkeypatch.setattr(registry, "entry_points", lambda group: [entry] if group == registry.ENTRY_POINT_GROUP else [])
    registry._load.cache_clear()
    try:
        decider = _decider(policy={"type": "fixed", "replicas": 5}, behavior=FREE)
        assert decider.decide(Observation(0.0, 2, {"num_requests_waiting": 0})).desired == 5
        with pytest.raises(Exception, match="unknown policy type 'nope'"):
            _decider(policy={"type": "nope"})
    finally:
        registry._load.cache_clear()


def test_no_further_scale_up_while_new_replicas_are_starting() -> None:
    """A level metric counts the Ready replicas: replicas already on their way are not asked for again."""
    kv = [{"name": "kv_cache_usage_perc", "target": {"type": "Value", "value": 0.8}}]
    decider = _decider(metrics=kv, maxReplicas=50, behavior=FREE)
    # 4 Ready replicas at 1.0 need 5; 8 are already on their way: no further scale-up, and no scale-down.
    assert decider.decide(Observation(0.0, 8, {"kv_cache_usage_perc": 1.0}, ready_replicas=4)).desired == 8
    # Once all 8 are Ready and still at 1.0, the load really needs 10.
    assert decider.decide(Observation(15.0, 8, {"kv_cache_usage_perc": 1.0}, ready_replicas=8)).desired == 10


def test_predictive_does_not_extrapolate_a_step() -> None:
    """A surge that has arrived and stays is sized by the headroom, not extrapolated as if it kept rising."""
    decider = _decider(maxReplicas=400, behavior=FREE, policy={"type": "predictive", "headroom": 0.5, "tolerance": 0})
    step = [20.0] * 60 + [40.0] * 60  # 10 then 20 replicas' worth of waiting, 15 s apart
    levels = _run(decider, step, 10)
    assert max(levels) == 30 and levels[-1] == 30


def test_predictive_extrapolates_a_sustained_ramp_past_its_headroom() -> None:
    def final(headroom: float) -> int:
        policy = {"type": "predictive", "headroom": headroom, "tolerance": 0}
        return _run(_decider(maxReplicas=400, behavior=FREE, policy=policy), RAMP, 1)[-1]

    # At the end the demand is 75.75 replicas, rising by one a minute: the horizon (5 min 15 s) adds 5.25.
    assert final(0.0) == 81
    # A 5 % headroom (3.8) covers part of that rise: the trend adds the rest.
    assert final(0.05) == 81
    # A 10 % headroom (7.6) covers it all.
    assert final(0.1) == math.ceil(75.75 * 1.1)


@pytest.mark.parametrize(("headroom", "expected"), [(0.0, 10), (1.0, 20), (-0.5, 5)])
def test_predictive_headroom_sizes_a_flat_load(headroom: float, expected: int) -> None:
    decider = _decider(maxReplicas=400, behavior=FREE, policy={"type": "predictive", "headroom": headroom})
    assert _run(decider, [20.0] * 80, 10)[-1] == expected


@pytest.mark.parametrize(
    ("name", "need", "gain", "reference", "expected"),
    [
        ("no gain: the need itself", 20.0, 0.0, 8.0, 20.0),
        ("at the reference: the need itself", 8.0, 0.1, 8.0, 8.0),
        ("below it, the targets hold as they are", 5.0, 0.3, 8.0, 5.0),
        # 16 replicas carry 1.1 times the targets each: 17.6 replicas' worth.
        ("one doubling", 17.6, 0.1, 8.0, 16.0),
        ("two doublings", 38.4, 0.1, 8.0, 32.0),  # 32 * 1.2
        ("a reference of one", 4.6, 0.15, 1.0, 3.601393684),
    ],
)
def test_pooled_replicas_carry_the_need_at_the_pooled_rate(
    name: str, need: float, gain: float, reference: float, expected: float
) -> None:
    n = pooled_replicas(need, gain, reference)
    assert n == pytest.approx(expected, rel=1e-6)
    if n > reference:
        assert n * (1 + gain * math.log2(n / reference)) == pytest.approx(need, rel=1e-9)


@pytest.mark.parametrize(
    ("waiting", "pooling", "expected"),
    [
        (40.0, {}, 20),  # 40 waiting against a target of 2
        (40.0, {"pooling": {"gain": 0.1, "replicas": 8}}, 18),  # 17.9 replicas carry 20's worth
        (12.0, {"pooling": {"gain": 0.1, "replicas": 8}}, 6),  # under the reference: as the targets say
        (40.0, {"pooling": {"gain": 0.1}}, 15),  # measured on one replica: 14.8 carry 20's worth
    ],
)
def test_predictive_pooling_runs_a_large_fleet_hotter(
    waiting: float, pooling: dict[str, object], expected: int
) -> None:
    policy = {"type": "predictive", "headroom": 0, "tolerance": 0, **pooling}
    decider = _decider(maxReplicas=50, behavior=FREE, policy=policy)
    assert _run(decider, [waiting] * 4, 10)[-1] == expected


@pytest.mark.parametrize(
    ("name", "waiting", "current", "expected"),
    [
        # Waiting against a target of 2 with no headroom: the need is waiting / 2 replicas.
        ("a need 12 % over two replicas holds", 4.48, 2, 2),  # past the 10 % band, under half a replica
        ("half a replica over two adds one", 5.0, 2, 3),
        ("a whole replica over adds it", 6.2, 2, 4),
        ("the band decides at twenty replicas", 43.8, 20, 20),  # 9.5 % over: within tolerance
        ("and past it, the ceiling", 44.6, 20, 23),  # 11.5 % over: 22.3, rounded up
        ("a need under the count still scales in", 2.9, 2, 2),  # ceil(1.45) = 2
        ("as the ceiling allows", 2.9, 4, 2),
    ],
)
def test_predictive_holds_a_rise_of_less_than_half_a_replica(
    name: str, waiting: float, current: int, expected: int
) -> None:
    decider = _decider(maxReplicas=50, behavior=FREE, policy={"type": "predictive", "headroom": 0})
    assert _run(decider, [waiting], current)[-1] == expected


def test_predictive_without_tolerance_moves_on_any_rise() -> None:
    policy = {"type": "predictive", "headroom": 0, "tolerance": 0}
    assert _run(_decider(maxReplicas=50, behavior=FREE, policy=policy), [4.48], 2)[-1] == 3


@pytest.mark.parametrize(
    ("least", "waiting", "expected"),
    [
        (0.0, 4.48, 3),  # no hold: past the 10 % band over two replicas is enough
        (1.0, 5.0, 2),  # a need of 2.5 rises half a replica, under the one asked
        (1.0, 6.2, 4),  # 3.1 rises more than one
    ],
)
def test_predictive_holds_rises_under_min_rise_replicas(least: float, waiting: float, expected: int) -> None:
    policy = {"type": "predictive", "headroom": 0, "minRiseReplicas": least}
    assert _run(_decider(maxReplicas=50, behavior=FREE, policy=policy), [waiting], 2)[-1] == expected


@pytest.mark.parametrize(
    ("cold_start", "policy", "expected"),
    [
        (300, {}, 0.6),  # the reference horizon, 315 s
        (120, {}, 0.6 * math.sqrt(150 / 315)),  # a faster start leaves a step less time to spend the SLO
        (60, {}, 0.6 * math.sqrt(150 / 315)),  # but the signals' own noise does not shrink with it
        (0, {}, 0.6 * math.sqrt(150 / 315)),
        (930, {}, 0.6 * math.sqrt(945 / 315)),  # three times the horizon: sqrt(3) times the headroom
        (930, {"headroom": 0.6}, 0.6),  # a configured headroom is taken as given
        (930, {"horizonSeconds": 315}, 0.6),  # the horizon, not the cold start, decides
    ],
)
def test_predictive_default_headroom_follows_the_square_root_of_the_horizon(
    cold_start: int, policy: dict[str, float], expected: float
) -> None:
    decider = _decider(coldStartSeconds=cold_start, policy={"type": "predictive", **policy})
    assert decider.policy.headroom == pytest.approx(expected)  # type: ignore[attr-defined]
    decider.set_cold_start(cold_start + 300.0)  # the daemon's measured cold start moves it too
    if not policy:
        assert decider.policy.headroom == pytest.approx(0.6 * math.sqrt((cold_start + 315) / 315))  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("key", "where"),
    [
        ("maxGrowth", "trend.maxGrowth"),
        ("trendWindowSeconds", "trend.windowSeconds"),
        ("poolingGain", "pooling.gain"),
        ("learnHeadroom", "learnedHeadroom"),
    ],
)
def test_a_key_that_moved_into_a_block_says_where(key: str, where: str) -> None:
    from policies.policy_file import PolicyFileError

    with pytest.raises(PolicyFileError) as caught:
        parse_policy_document(workload_doc(policy={"type": "predictive", key: 1}))
    assert len(caught.value.problems) == 1
    assert caught.value.problems[0].startswith(f"workloads[0].policy: {key} moved to {where}")


TTFT = {"name": "time_to_first_token_p90_seconds", "target": {"type": "Value", "value": 1.5}}
CUSTOM_P90 = {
    "name": "ttft",
    "query": "histogram_quantile(0.9, sum by (le) (rate(vllm:time_to_first_token_seconds_bucket[1m])))",
    "target": {"type": "Value", "value": 1.5},
}
QUEUE = {"name": "queue", "query": "sum(q) / count(q)", "target": {"type": "AverageValue", "value": 2}}


@pytest.mark.parametrize(
    ("name", "metric", "value", "expected", "reason"),
    [
        ("built-in quantile, NaN: no request, no load", TTFT, math.nan, 1, Reason.BOUNDS),
        ("custom histogram_quantile, NaN: no load", CUSTOM_P90, math.nan, 1, Reason.BOUNDS),
        ("quantile with no series: still no value", TTFT, None, 8, Reason.METRICS_UNAVAILABLE),
        ("another metric's NaN: still no value", QUEUE, math.nan, 8, Reason.METRICS_UNAVAILABLE),
        ("quantile with a value: as it says", TTFT, 3.0, 8, Reason.BOUNDS),
    ],
)
def test_an_idle_latency_quantile_is_no_load(
    name: str, metric: dict[str, object], value: float | None, expected: int, reason: str
) -> None:
    decider = _decider(maxReplicas=8, metrics=[metric], behavior={"scaleDown": {"stabilizationWindowSeconds": 0}})
    decision = decider.decide(Observation(0.0, 8, {str(metric["name"]): value}, 8))
    assert (decision.desired, decision.reason) == (expected, reason)


@pytest.mark.parametrize(
    ("replicas", "missing", "current", "is_held"),
    [
        (None, (), 4, True),  # no value at all
        (3, ("kv_cache_usage_perc",), 4, True),  # some missing, the rest scale down
        (4, ("kv_cache_usage_perc",), 4, False),  # some missing, the rest hold the count
        (6, ("kv_cache_usage_perc",), 4, False),  # a missing metric never blocks a scale-up
        (3, (), 4, False),  # nothing missing: a scale-down goes ahead
    ],
)
def test_the_decider_holds_by_the_missing_metric_rule(
    replicas: int | None, missing: tuple[str, ...], current: int, is_held: bool
) -> None:
    """One rule, applied by the decider to every policy's proposal, a plug-in's too (``base.held``)."""
    from policies.base import Proposal, held

    assert held(Proposal(replicas, "steady", {}, missing), current) is is_held


def test_a_deciders_state_leaves_by_snapshot_and_enters_by_restore() -> None:
    """What a reload carries over: the behavior history, failures, cold starts and zero always; the policy's own
    state only into a policy of the same type; under ``coldStartSeconds: auto`` the measured cold start applies."""
    from dataclasses import replace

    old = _decider(coldStartSeconds="auto", policy={"type": "predictive"})
    for t in range(0, 300, 15):
        old.decide(Observation(float(t), 4, {"num_requests_waiting": 8.0 + t / 15}))
    held = old.snapshot()
    held = replace(held, failures=2, cold_starts=(200.0,) * 10)
    same = _decider(coldStartSeconds="auto", policy={"type": "predictive"})
    same.restore(held)
    after = same.snapshot()
    assert after.behavior is held.behavior and after.failures == 2 and after.cold_starts == (200.0,) * 10
    assert same.ctx.cold_start_seconds == pytest.approx(200.0)  # the samples' p90, re-applied
    assert same.policy.state is held.policy_state  # the trend's samples carry over
    other = _decider(policy={"type": "threshold"})
    other.restore(held)
    assert other.policy.state is not held.policy_state  # a policy of another type starts afresh
    assert other.snapshot().behavior is held.behavior
