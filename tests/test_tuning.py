"""``simulate --tune`` (``simulations.tuning``): the searches, their runs and their names."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

from simulations.builtin import builtin_policy
from simulations.compare import compare
from simulations.replica_model import ReplicaModel
from simulations.runner import Contender, RunResult
from simulations.traces import Trace, synthetic_day

if TYPE_CHECKING:
    from policies.policy_file import PolicyFile


def with_pooling(document: PolicyFile, gain: float) -> PolicyFile:
    """A predictive block as a user may write it, with a ``pooling`` block of ``gain`` (none at 0): the built-in
    one carries none, the default that follows its work using none."""
    from simulations.contenders import policy_variant

    if not gain:
        return document
    workload = document.workloads[0]
    return policy_variant(document, workload, {**workload.policy, "pooling": {"gain": gain, "replicas": 8}})[0]


def test_tuning_tries_the_same_capacities_for_threshold_and_predictive() -> None:
    from simulations.tuning import knob_variant

    document = builtin_policy()
    workload = document.workloads[0]
    _, scaled = knob_variant(document, workload, "threshold", {"target": 250.0})  # half the built-in 500
    assert [m.target.value for m in scaled.metrics] == [250.0, pytest.approx(workload.metrics[1].target.value / 2), 1.0]
    _, hot = knob_variant(document, workload, "predictive", {"headroom": -0.5})
    assert hot.policy["headroom"] == -0.5 and hot.metrics == workload.metrics
    _, both = knob_variant(document, workload, "predictive", {"target": 250.0, "headroom": 0.0, "maxGrowth": 0.0})
    assert both.metrics == scaled.metrics
    assert both.policy == {"type": "predictive", "headroom": 0.0, "trend": {"maxGrowth": 0.0}}


def test_a_target_named_as_the_files_keeps_the_files_targets() -> None:
    """Tuning names a target to four decimals; the file's own, so named, must run the file's targets, or the
    run as given and the file written from its name would differ in the other metrics' scaled targets."""
    from simulations.contenders import policy_variant
    from simulations.tuning import knob_variant

    document = builtin_policy(ReplicaModel(prefill_tokens_per_s=987.654321))
    workload = document.workloads[0]
    first = workload.metrics[0].target.value
    assert first != round(first, 4)
    _, named = knob_variant(document, workload, "threshold", {"target": round(first, 4)})
    _, given = policy_variant(document, workload, {"type": "threshold"})
    assert named.metrics == given.metrics


# Scales that make the other targets land anywhere, not on thousandths: both policies round them up to
# thousandths as the HPA does (a scaled 10.71 can be 4.284000000000001, which is 4.285 to it).
@pytest.mark.parametrize("scale", [0.5, 0.7371, 1.0, 1.9183, 3.0])
def test_predictive_at_headroom_0_without_trend_hold_or_pooling_decides_as_threshold(scale: float) -> None:
    """What makes tuned predictive cost no more than tuned threshold: at headroom 0, without the trend, the
    hold and the pooling, it makes threshold's decisions at the same targets, to the replica."""
    from policies.base import Observation
    from simulations.tuning import knob_variant

    document = with_pooling(builtin_policy(ReplicaModel(prefill_tokens_per_s=8123.4567)), 0.1)
    workload = document.workloads[0]
    target = round(workload.metrics[0].target.value * scale, 4)
    as_threshold = {"headroom": 0.0, "maxGrowth": 0.0, "minRiseReplicas": 0.0, "poolingGain": 0.0}
    deciders = [
        doc.decider(wl)
        for doc, wl in (
            knob_variant(document, workload, "threshold", {"target": target}),
            knob_variant(document, workload, "predictive", {"target": target, **as_threshold}),
        )
    ]
    rng = np.random.default_rng(3)
    current, seen = [2, 2], set()
    drift = 0.0
    for i in range(2000):
        drift = 0.95 * drift + float(rng.normal(0, 0.2))  # a load wandering about 40k prompt tokens/s
        level = 40_000 * math.exp(drift)
        values = {
            "prompt_tokens_per_second": level,
            "num_requests_running": level / 400 * float(rng.uniform(0.5, 1.5)),  # on a par with the prompts
            "num_requests_waiting": float(rng.choice([0.0, rng.exponential(3)])),
        }
        if i % 97 == 0:
            values.pop("num_requests_running")  # a metric missing now and then
        for k, decider in enumerate(deciders):
            decision = decider.decide(Observation(15.0 * i, current[k], values))
            decider.applied(decision)
            current[k] = decision.desired
        assert current[0] == current[1], (i, values)
        seen.add(current[0])
    assert len(seen) > 5  # the fleet moved both ways, through the tolerance band and past it


def test_tuning_finds_a_cheaper_setting_at_the_slo_and_predictive_never_costs_more_than_threshold() -> None:
    trace = synthetic_day(seed=4, mean_rps=1.5, hours=0.5, bursts=2)
    model = ReplicaModel(cold_start_s=120)
    document = builtin_policy(model, trace)
    plain = {
        r.policy: r
        for r in compare(trace, model, document, ["threshold", "predictive"], 2.0, 0.99, progress=False).results
    }
    tuned = {
        r.policy: r
        for r in compare(
            trace, model, document, ["threshold", "predictive"], 2.0, 0.99, tuning=True, progress=False
        ).results
    }
    for name in ("threshold", "predictive"):
        assert tuned[name].meets(0.99), name
        if plain[name].meets(0.99):
            assert tuned[name].gpu_hours <= plain[name].gpu_hours + 1e-9, name
    assert tuned["predictive"].gpu_hours <= tuned["threshold"].gpu_hours + 1e-9
    assert {"headroom", "maxGrowth", "minRiseReplicas"} <= set(tuned["predictive"].tuned or {})
    assert set(tuned["predictive"].tuned or {}) <= {"target", "headroom", "maxGrowth", "minRiseReplicas"}
    assert set(tuned["threshold"].tuned or {}) == {"target"}


def _watch_tuning_runs(monkeypatch: pytest.MonkeyPatch, seen: Callable[[Contender, RunResult], None]) -> None:
    """Has ``seen`` told each contender that ``tune`` runs, with the run's result."""
    import simulations.tuning as tuning_module

    real_run = tuning_module.run

    def watched(trace: Trace, model: ReplicaModel, contender: Contender, *args: Any, **kwargs: Any) -> Any:
        result = real_run(trace, model, contender, *args, **kwargs)
        seen(contender, result)
        return result

    monkeypatch.setattr(tuning_module, "run", watched)


@pytest.mark.parametrize("policy_type", ["threshold", "pid", "predictive"])
def test_every_run_of_a_tuning_search_runs_the_policy_tuned_as_its_setting_names_it(
    monkeypatch: pytest.MonkeyPatch, policy_type: str
) -> None:
    """The built-in workload's own policy is predictive: the search, and the run as the file sets it,
    must run the policy type being tuned all the same. And each run is what its setting, written out by
    ``--write-config``, runs again: the run as given too, whose default headroom at a 60 s cold start
    (0.41404...) tuning names to four decimals."""
    from simulations.tuning import knob_variant, tune

    ran: list[str] = []
    model = ReplicaModel(cold_start_s=60, prefill_tokens_per_s=987.654321)
    document = builtin_policy(model)

    def seen(contender: Contender, _: RunResult) -> None:
        assert contender.decider is not None and contender.tuned is not None
        ran.append(contender.decider.policy.type)
        _, named = knob_variant(document, document.workloads[0], policy_type, contender.tuned)
        again = document.decider(named)
        assert again.policy.params == contender.decider.policy.params  # type: ignore[attr-defined]
        assert again.ctx.metrics == contender.decider.ctx.metrics

    _watch_tuning_runs(monkeypatch, seen)
    trace = synthetic_day(seed=1, mean_rps=0.5, hours=0.1, bursts=0)
    tune(trace, model, document, document.workloads[0], policy_type, 2, 2.0, 0.99, lambda _: None)
    assert len(ran) >= 2 and set(ran) == {policy_type}


@pytest.mark.parametrize("pooling_gain", [0.0, 0.1])
def test_tuning_predictive_tries_headroom_0_as_threshold_runs_its_targets_as_given(
    monkeypatch: pytest.MonkeyPatch, pooling_gain: float
) -> None:
    """Tuned threshold's last run is its targets as given, a capacity the bisection may never land on; so
    predictive's search runs that capacity too, in threshold's decisions, or tuned predictive could cost
    more than tuned threshold (the built-in day at a 1 s cold start: 73.88 against 72.84 GPU-h)."""
    from simulations.tuning import tune

    tried: list[dict[str, float]] = []
    _watch_tuning_runs(monkeypatch, lambda contender, _: tried.append(dict(contender.tuned or {})))
    trace = synthetic_day(seed=1, mean_rps=0.5, hours=0.1, bursts=0)
    document = with_pooling(builtin_policy(), pooling_gain)
    tune(
        trace,
        ReplicaModel(cold_start_s=60),
        document,
        document.workloads[0],
        "predictive",
        2,
        2.0,
        0.99,
        lambda _: None,
    )
    as_threshold = {"headroom": 0.0, "maxGrowth": 0.0, "minRiseReplicas": 0.0}
    assert {**as_threshold, **({"poolingGain": 0.0} if pooling_gain else {})} in tried


@pytest.mark.parametrize("tolerance", [None, 0.05])
def test_predictives_search_in_thresholds_decisions_is_thresholds_search_run_for_run(
    monkeypatch: pytest.MonkeyPatch, tolerance: float | None
) -> None:
    """Both searches step the same targets; predictive at headroom 0 with its extras off makes threshold's
    decisions, so every run of threshold's search comes out the same in predictive's, and tuned predictive,
    which keeps the cheapest of a superset, costs no more. A replica whose targets land between thousandths
    (987.654321 prompt tokens/s): a headroom searched instead came 1.8 % apart on the two-day trace. A
    predictive block with a tolerance of its own takes threshold's in that search."""
    from simulations.contenders import policy_variant
    from simulations.tuning import tune

    runs: dict[str, dict[tuple[Any, ...], tuple[float, float, int]]] = {"threshold": {}, "predictive": {}}

    def seen(contender: Contender, result: RunResult) -> None:
        assert contender.decider is not None and contender.tuned is not None
        target = contender.tuned.get("target")
        runs[contender.decider.policy.type][(target, frozenset(contender.tuned.items()))] = (
            result.gpu_hours,
            result.slo_attainment,
            result.scale_events,
        )

    _watch_tuning_runs(monkeypatch, seen)
    trace = synthetic_day(seed=4, mean_rps=1.5, hours=0.5, bursts=2)
    model = ReplicaModel(cold_start_s=120, prefill_tokens_per_s=987.654321)
    document = with_pooling(builtin_policy(model, trace), 0.1)
    if tolerance is not None:
        block = {**document.workloads[0].policy, "tolerance": tolerance}
        document, _ = policy_variant(document, document.workloads[0], block)
    workload = document.workloads[0]
    tuned = {
        t: tune(trace, model, document, workload, t, 4, 2.0, 0.99, lambda _: None) for t in ("threshold", "predictive")
    }
    as_threshold = {("headroom", 0.0), ("maxGrowth", 0.0), ("minRiseReplicas", 0.0), ("poolingGain", 0.0)}
    if tolerance is not None:
        as_threshold.add(("tolerance", 0.1))
    matched = 0
    for (target, setting), figures in runs["threshold"].items():
        given = {("target", target)} == set(setting) and target == round(workload.metrics[0].target.value, 4)
        twin = frozenset(as_threshold if given else {*as_threshold, ("target", target)})
        assert runs["predictive"][(None if given else target, twin)] == figures, target
        matched += 1
    assert matched >= 9
    assert tuned["threshold"].meets(0.99)
    assert tuned["predictive"].meets(0.99) and tuned["predictive"].gpu_hours <= tuned["threshold"].gpu_hours


@pytest.mark.parametrize(
    ("policy_type", "block", "expected"),
    [
        ("threshold", {}, {"target": 500.0}),
        ("pid", {}, {"setpoint": 500.0}),
        ("pid", {"type": "pid", "metric": "num_requests_waiting"}, {"setpoint": 2.0}),
        ("pid", {"type": "pid", "setpoint": 300}, {"setpoint": 300.0}),
        # worked out for the 300 s cold start
        ("predictive", {}, {"headroom": 0.6, "maxGrowth": 0.5, "minRiseReplicas": 0.5}),
        (
            "predictive",
            {"type": "predictive", "headroom": 0.2, "trend": {"maxGrowth": 1}, "minRiseReplicas": 0},
            {"headroom": 0.2, "maxGrowth": 1.0, "minRiseReplicas": 0.0},
        ),
    ],
)
def test_tuning_names_the_setting_it_was_given_as_it_names_the_ones_it_tries(
    policy_type: str, block: dict[str, Any], expected: dict[str, float]
) -> None:
    from simulations.contenders import policy_contender, policy_variant
    from simulations.tuning import given_setting

    document = builtin_policy()
    document, workload = policy_variant(document, document.workloads[0], block or {"type": policy_type})
    settings = policy_contender(document, workload, ReplicaModel()).settings() or {}
    assert given_setting(workload, policy_type, settings) == expected


def test_tuned_predictive_with_pooling_still_costs_no_more_than_tuned_threshold() -> None:
    """Pooling makes predictive's headroom search another than the threshold's; searched without it too,
    tuned predictive never costs more."""
    trace = synthetic_day(seed=5, mean_rps=4.0, hours=0.5, bursts=2)
    model = ReplicaModel(cold_start_s=120)
    document = with_pooling(builtin_policy(model, trace), 0.1)
    assert document.workloads[0].policy["pooling"]["gain"] == 0.1
    tuned = {
        r.policy: r
        for r in compare(
            trace, model, document, ["threshold", "predictive"], 2.0, 0.99, tuning=True, progress=False
        ).results
    }
    assert tuned["predictive"].meets(0.99) and tuned["threshold"].meets(0.99)
    assert tuned["predictive"].gpu_hours <= tuned["threshold"].gpu_hours + 1e-9
    tuned_keys = {"headroom", "maxGrowth", "minRiseReplicas"}
    assert tuned_keys <= set(tuned["predictive"].tuned or {}) <= {*tuned_keys, "target", "poolingGain"}
    assert tuned["predictive"].max_replicas > 8  # the fleet grew past the pooling's reference


def test_tuning_runs_the_safe_end_last_and_reports_it_when_no_setting_meets_the_slo() -> None:
    from policies.policy_file import parse_policy_document
    from simulations.builtin import builtin_document
    from simulations.tuning import tune

    trace = synthetic_day(seed=1, mean_rps=3.0, hours=0.1, bursts=0)
    model = ReplicaModel(cold_start_s=60)
    raw = builtin_document(model, trace)
    raw["workloads"][0].update(minReplicas=1, maxReplicas=1)  # one replica cannot carry 3 requests/s
    document = parse_policy_document(raw, "<test>")
    workload = document.workloads[0]
    tried: list[str] = []
    result = tune(trace, model, document, workload, "threshold", 1, 2.0, 0.99, tried.append)
    safe = workload.metrics[0].target.value / 8
    given = round(workload.metrics[0].target.value, 4)
    assert len(tried) == 10
    assert tried[-2:] == [f"tune threshold target={round(safe, 4)}", f"tune threshold target={given}"]
    assert not result.meets(0.99) and not result.abandoned
    assert result.tuned == {"target": pytest.approx(safe, abs=1e-4)}
    assert result.completed_requests + result.dropped_requests == trace.requests


def test_a_tuned_target_scales_the_capacity_a_workload_gives_in_place_of_metrics() -> None:
    """In the slo form the metrics are built from the capacity: a target tuned on the first of them scales the
    capacity, every figure by the same ratio, and the file written still gives the capacity, not metrics."""
    from policies.policy_file import parse_policy_document
    from simulations.tuning import knob_variant

    raw = {
        "target": {"namespace": "llm-serving", "name": "vllm"},
        "maxReplicas": 10,
        "slo": {"ttftSeconds": 2},
        "capacity": {"promptTokensPerSecond": 500, "runningRequests": 11, "learn": False},
    }
    document = parse_policy_document({"workloads": [raw]})
    _, tuned = knob_variant(document, document.workloads[0], "threshold", {"target": 400.0})
    assert tuned.capacity is not None and tuned.policy_type == "threshold"
    assert (tuned.capacity.prompt_tokens_per_second, tuned.capacity.running_requests) == (400.0, 8.8)
    assert tuned.capacity.waiting_requests == 1.6
    assert [m.target.value for m in tuned.metrics] == [400.0, 8.8, 1.6]
    assert "metrics" not in tuned.model_dump(by_alias=True)


def _follower_document(model: ReplicaModel, start: float) -> Any:
    """The built-in document as a file given only an slo is written: predictive following its work from
    ``start`` (``builtin.with_error_budget``)."""
    from policies.policy_file import parse_policy_document
    from simulations.builtin import builtin_document, with_error_budget
    from simulations.follower_plan import Plan

    raw = with_error_budget(builtin_document(model), model, 2.0, 0.99, Plan(start, 0))
    return parse_policy_document(raw, "<test>")


def test_a_tuned_start_keeps_the_follower_and_moves_its_start_alone() -> None:
    from simulations.tuning import knob_variant

    model = ReplicaModel(cold_start_s=60)
    document = _follower_document(model, 0.7)
    workload = document.workloads[0]
    _, tuned = knob_variant(document, workload, "predictive", {"utilizationStart": 0.45})
    assert tuned.policy["utilization"] == {**workload.policy["utilization"], "start": 0.45}
    assert {k: v for k, v in tuned.policy.items() if k != "utilization"} == {
        k: v for k, v in workload.policy.items() if k != "utilization"
    }
    assert tuned.metrics == workload.metrics
    _, classic = knob_variant(document, workload, "predictive", {"headroom": 0.2})
    assert "utilization" not in classic.policy and classic.policy["headroom"] == 0.2


def test_tuning_a_follower_searches_its_start_with_its_budget_on_and_never_reports_a_dearer_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A file whose predictive follows its work: tuning searches the start, each run following from it (the
    budget moving it), beside the classic sizing's search; the result meets the SLO and costs no more than the
    follower as given where that meets it."""
    from policies.predictive import PredictivePolicy
    from simulations.tuning import FOLLOWER_KNOB, tune

    model = ReplicaModel(cold_start_s=120)
    trace = synthetic_day(seed=4, mean_rps=1.5, hours=0.5, bursts=2)
    document = _follower_document(model, 0.9)  # too hot for these bursts: the search must find a cooler one
    starts: dict[float, RunResult] = {}

    def seen(contender: Contender, result: RunResult) -> None:
        policy = contender.decider.policy if contender.decider is not None else None
        if FOLLOWER_KNOB in (contender.tuned or {}):
            assert isinstance(policy, PredictivePolicy) and policy.follows
            start = (contender.tuned or {})[FOLLOWER_KNOB]
            assert policy.params.utilization is not None and policy.params.utilization.start == start
            starts[start] = result
        else:
            assert isinstance(policy, PredictivePolicy) and not policy.follows

    _watch_tuning_runs(monkeypatch, seen)
    best = tune(trace, model, document, document.workloads[0], "predictive", 6, 2.0, 0.99, lambda _: None)
    assert 0.9 in starts and 1.0 in starts and len(starts) >= 5
    assert best.meets(0.99)
    if starts[0.9].meets(0.99):
        assert best.gpu_hours <= starts[0.9].gpu_hours + 1e-9
    meeting = [r.gpu_hours for r in starts.values() if r.meets(0.99)]
    assert meeting and best.gpu_hours <= min(meeting) + 1e-9
