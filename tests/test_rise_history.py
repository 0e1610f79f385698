"""The rises a predictive policy learns its headroom from (``policies/predictive/rises.py``), and the blend."""

from __future__ import annotations

import math

import pytest

from policies.base import Observation
from policies.pipeline import WorkloadDecider
from policies.policy_file import parse_policy_document
from policies.predictive.rises import RiseHistory
from tests.helpers import workload_doc

STEP = 15.0


def _fed(demands: list[float], horizon: float = 60.0, memory: float = 86_400.0) -> RiseHistory:
    history = RiseHistory(horizon, memory)
    for i, demand in enumerate(demands):
        history.update(demand, i * STEP)
    return history


@pytest.mark.parametrize(
    ("name", "demands", "expected"),
    [
        ("a flat load never rises", [10.0] * 40, [1.0] * 35),
        # The median of four holds a lone spike back: no rise at all.
        ("a one-scrape spike is noise", [10.0] * 10 + [30.0] + [10.0] * 10, [1.0] * 16),
        # 10 to 15 from tick 10: smoothed, 12.5 at tick 11 and 15 from tick 12, which ticks 7-10 see
        # within their 60 s; the last four samples are still within a horizon of the end.
        (
            "a step is a rise for the horizon before it",
            [10.0] * 10 + [15.0] * 10,
            [1.0] * 6 + [1.25] + [1.5] * 4 + [1.2] + [1.0] * 3,
        ),
        # Under one replica the rise is measured against one: 0.1 to 0.5 is 0.4 of a replica more, not 5x.
        (
            "a light load's rise is against one replica",
            [0.1] * 10 + [0.5] * 10,
            [1.0] * 6 + [1.2] + [1.4] * 4 + [1.2] + [1.0] * 3,
        ),
    ],
)
def test_rises_within_a_horizon(name: str, demands: list[float], expected: list[float]) -> None:
    history = _fed(demands)
    assert [rise for _, rise in history.expiring] == pytest.approx(expected)
    assert history.rises == sorted(history.rises)


def test_the_quantile_is_the_nearest_rank_and_none_before_the_first() -> None:
    assert _fed([10.0] * 4).quantile() is None
    history = RiseHistory(60.0, 86_400.0)
    for i, rise in enumerate([1.0 + k / 10 for k in range(10)]):
        history._keep(i * STEP, rise)
    assert history.quantile(0.9) == pytest.approx(1.9)
    assert history.quantile(0.0) == pytest.approx(1.0)
    assert history.quantile(0.5) == pytest.approx(1.5)


def test_memory_bounds_the_rises_kept() -> None:
    history = _fed([10.0 + (i % 7) for i in range(2_000)], horizon=60.0, memory=3_600.0)
    assert len(history.rises) == len(history.expiring) <= 3_600 / STEP + 2
    assert history.seconds <= 3_600.0
    assert history.rises == sorted(rise for _, rise in history.expiring)


def test_a_repeated_or_late_sample_is_ignored() -> None:
    history = RiseHistory(60.0, 86_400.0)
    for now in (0.0, 15.0, 15.0, 10.0, 30.0):
        history.update(10.0, now)
    assert [t for t, _ in history.pending] == [0.0, 15.0, 30.0]


@pytest.mark.parametrize(
    ("horizon", "memory", "fits"),
    [(315.0, 86_400.0, True), (370.0, 86_400.0, True), (400.0, 86_400.0, False), (315.0, 3_600.0, False)],
)
def test_rises_serve_a_horizon_within_a_fifth(horizon: float, memory: float, fits: bool) -> None:
    assert RiseHistory(315.0, 86_400.0).fits(horizon, memory) is fits


def _decider(policy: dict[str, object]) -> WorkloadDecider:
    document = parse_policy_document(workload_doc(maxReplicas=400, coldStartSeconds=300, policy=policy))
    return document.decider(document.workloads[0])


def _feed(decider: WorkloadDecider, waiting: list[float]) -> None:
    for i, value in enumerate(waiting):
        decision = decider.decide(Observation(i * STEP, 10, {"num_requests_waiting": value}))
        decider.applied(decision)


LEARNING = {"type": "predictive", "learnedHeadroom": {"priorSeconds": 3_600}}


@pytest.mark.parametrize(
    ("name", "policy", "waiting", "expected"),
    [
        # A flat load learns headroom 0; after as much history as the prior weighs, half the prior is left.
        ("flat: the prior halves after its weight", LEARNING, [20.0] * (240 + 21 + 1), 0.3),
        ("off: the prior alone", {"type": "predictive"}, [20.0] * 262, 0.6),
        ("a configured prior is blended too", {**LEARNING, "headroom": 0.3}, [20.0] * 262, 0.15),
        # A load that doubles every 10 minutes for 5: rises of 2 within a 315 s horizon at most ticks, so
        # a learned 0.8 x (2 - 1) = 0.8 weighed as much as the prior 0.6.
        (
            "steps: learns 0.8 of the 90th-percentile rise less one",
            LEARNING,
            ([20.0] * 20 + [40.0] * 20) * 7,
            None,
        ),
    ],
)
def test_the_learned_headroom_blends_with_the_prior(
    name: str, policy: dict[str, object], waiting: list[float], expected: float | None
) -> None:
    decider = _decider(policy)
    _feed(decider, waiting)
    headroom: float = decider.policy.headroom  # type: ignore[attr-defined]
    if expected is not None:
        assert headroom == pytest.approx(expected, abs=0.01)
        return
    rises = decider.policy.state.rises  # type: ignore[attr-defined]
    assert rises.quantile() == pytest.approx(2.0)
    weight, history = 3_600.0, rises.seconds
    assert headroom == pytest.approx((0.6 * weight + 0.8 * history) / (weight + history))


def test_the_learned_headroom_is_held_within_twice_the_prior() -> None:
    decider = _decider(LEARNING)
    _feed(decider, ([20.0] * 20 + [100.0] * 20) * 8)  # rises of 5: learned 3.2, held at 1.2
    rises = decider.policy.state.rises  # type: ignore[attr-defined]
    weight, history = 3_600.0, rises.seconds
    assert decider.policy.headroom == pytest.approx((0.6 * weight + 1.2 * history) / (weight + history))  # type: ignore[attr-defined]


def test_the_rises_survive_a_reload_of_the_policy_file() -> None:
    decider = _decider(LEARNING)
    _feed(decider, [20.0] * 262)
    document = parse_policy_document(workload_doc(maxReplicas=400, coldStartSeconds=300, policy=LEARNING))
    reloaded = document.decider(document.workloads[0], decider)
    assert reloaded.policy.headroom == pytest.approx(decider.policy.headroom)  # type: ignore[attr-defined]
    assert not math.isclose(reloaded.policy.headroom, 0.6)  # type: ignore[attr-defined]


def test_the_settings_give_the_prior_and_the_blend() -> None:
    decider = _decider(LEARNING)
    _feed(decider, [20.0] * 262)
    settings = decider.policy.resolved()  # type: ignore[attr-defined]
    assert settings["headroom"] == 0.6
    assert settings["blendedHeadroom"] == pytest.approx(0.3, abs=0.01)
    assert "blendedHeadroom" not in _decider({"type": "predictive"}).policy.resolved()  # type: ignore[attr-defined]
