"""The learned capacity (policies/predictive/capacity.py): what a minute says, and the bounds on what it may move."""

from __future__ import annotations

import math

import pytest

from policies.predictive.capacity import LEAST_FACTOR, MOST_FACTOR, STEP, WINDOW_S, CapacityLearner

SEED = 1000.0
SLO = 2.0


def _judged(load: float, latency: float | None, factor: float = 1.0, floor: float = 0.0) -> tuple[str | None, float]:
    learner = CapacityLearner(factor=factor, floor=floor)
    verdict = learner.observe(0.0, load, SEED, latency, SLO, steady=True)
    return verdict, learner.factor


@pytest.mark.parametrize(
    ("load", "latency", "verdict", "factor"),
    [
        # met the SLO above the capacity: at least that much, by at most one step
        (1200.0, 1.0, "raised", 1 + STEP),
        (1020.0, 1.0, "raised", 1.02),
        # missed it below the capacity, with load enough to tell: less, by at most one step
        (800.0, 3.0, "lowered", 1 - STEP),
        (980.0, 3.0, "lowered", 0.98),
        # a slow first token at a light load is a long prompt's own prefill, not the load
        (300.0, 3.0, "held", 1.0),
        # what the belief already says
        (800.0, 1.0, "held", 1.0),
        (1500.0, 3.0, "held", 1.0),
    ],
)
def test_a_minute_moves_the_factor_toward_what_it_shows(
    load: float, latency: float, verdict: str, factor: float
) -> None:
    assert _judged(load, latency) == (verdict, pytest.approx(factor))


@pytest.mark.parametrize(
    ("load", "latency"),
    [(None, 1.0), (1200.0, None), (1200.0, math.nan)],
)
def test_no_value_judges_nothing(load: float | None, latency: float | None) -> None:
    learner = CapacityLearner()
    assert learner.observe(0.0, load, SEED, latency, SLO, steady=True) is None
    assert learner.factor == 1.0


def test_the_latency_is_judged_beyond_the_lightest_minutes_floor() -> None:
    """The SLO counts the time beyond a request's own prefill: the lowest quantile a minute has shown (a long
    prompt's prefill at light load) is taken off before it is compared."""
    learner = CapacityLearner()
    learner.observe(0.0, 200.0, SEED, 2.4, SLO, steady=True)  # light load: the floor
    assert learner.observe(60.0, 1200.0, SEED, 4.0, SLO, steady=True) == "raised"  # 1.6 s beyond it


def test_one_judgement_a_minute() -> None:
    learner = CapacityLearner()
    assert learner.observe(0.0, 1200.0, SEED, 1.0, SLO, steady=True) == "raised"
    assert learner.observe(WINDOW_S - 15, 1200.0, SEED, 1.0, SLO, steady=True) is None
    assert learner.observe(WINDOW_S, 1200.0, SEED, 1.0, SLO, steady=True) == "raised"


def test_a_short_fleet_is_not_judged_for_a_window_after() -> None:
    """Replicas still starting: the misses are the fleet's lag, and so is the backlog they then drain."""
    learner = CapacityLearner()
    assert learner.observe(0.0, 800.0, SEED, 9.0, SLO, steady=False) is None
    assert learner.observe(WINDOW_S - 1, 800.0, SEED, 9.0, SLO, steady=True) is None
    assert learner.observe(WINDOW_S, 800.0, SEED, 9.0, SLO, steady=True) == "lowered"


@pytest.mark.parametrize(("load", "latency", "bound"), [(10_000.0, 0.5, MOST_FACTOR), (600.0, 30.0, LEAST_FACTOR)])
def test_the_factor_stays_within_its_bounds(load: float, latency: float, bound: float) -> None:
    learner = CapacityLearner()
    for minute in range(100):
        learner.observe(minute * WINDOW_S, load * learner.factor, SEED, latency, SLO, steady=True)
    assert learner.factor == pytest.approx(bound)


def _learning_policy(learn: bool = True) -> object:
    from policies.policy_file import parse_policy_document
    from tests.helpers import workload_doc

    doc = workload_doc(
        slo={"ttftSeconds": SLO},
        capacity={"promptTokensPerSecond": SEED, "runningRequests": 100, "learn": learn},
        policy={"type": "predictive", "headroom": 0, "trend": {"maxGrowth": 0}, "minRiseReplicas": 0},
        maxReplicas=100,
    )
    del doc["workloads"][0]["metrics"]  # type: ignore[index]
    return parse_policy_document(doc).workloads[0].build_policy(15)


def test_predictive_sizes_the_prompt_load_by_the_capacity_it_learned() -> None:
    """Four replicas carry 6,000 prompt tokens/s within the SLO, 1.5 times the seed a replica: minute by minute
    the factor rises (a step at most a minute), and the fleet asked for shrinks from 6 toward 4."""
    from policies.base import Observation
    from policies.metric_names import TTFT_SLO

    policy = _learning_policy()
    asked = []
    for minute in range(12):
        for tick in range(4):
            now = minute * WINDOW_S + tick * 15
            metrics = {"prompt_tokens_per_second": 6000.0, "num_requests_running": 40.0, "num_requests_waiting": 0.0}
            proposal = policy.recommend(Observation(now, 4, {**metrics, TTFT_SLO: 1.0}, ready_replicas=4))  # type: ignore[attr-defined]
        asked.append(proposal.replicas)
    assert asked[0] == 6 and asked[-1] == 4 and asked == sorted(asked, reverse=True)
    assert policy.state.capacity.factor == pytest.approx(1.5)  # type: ignore[attr-defined]
    fixed = _learning_policy(learn=False)
    metrics = {"prompt_tokens_per_second": 6000.0, TTFT_SLO: 1.0}
    assert fixed.recommend(Observation(0, 4, metrics, ready_replicas=4)).replicas == 6  # type: ignore[attr-defined]
