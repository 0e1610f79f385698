"""predictive's ``utilization``: the fleet sized as a follower of its work, at a utilization the budget moves."""

from __future__ import annotations

from typing import Any

import pytest

from policies.base import Observation
from policies.metric_names import (
    BUDGET_SIGNALS,
    FIRST_TOKENS_RATE,
    GENERATION_TOKENS,
    TTFT_SECONDS_RATE,
    WAITING,
    WORK_SIGNALS,
)
from policies.policy_file import PolicyFileError, parse_policy_document
from policies.predictive.utilization import (
    AIM,
    DRAIN_S,
    EMPTY,
    LEAST,
    MOST,
    UtilizationLearner,
    work_in_replicas,
)
from tests.helpers import workload_doc

SLO = {"ttftSeconds": 2, "target": 0.99}
BLOCK = {"start": 0.5, "prefillTokensPerSecond": 4000, "decodeTokensPerSecond": 1000}
POLICY = {
    "type": "predictive",
    "errorBudget": {"prefillTokensPerSecond": 1000, "promptLengthSigma": 0.5},
    "utilization": BLOCK,
}


@pytest.mark.parametrize(
    ("prompt", "generation", "waiting", "firsts", "work"),
    [
        (4000.0, 0.0, None, None, 1.0),  # a replica's prefill throughput is one replica's work
        (0.0, 1000.0, 0.0, 2.0, 1.0),  # and so is its generation throughput at the batch it holds
        (2000.0, 500.0, None, 2.0, 1.0),
        # 60 requests waiting, at the minute's mean request (half a replica-second each), to be done within DRAIN_S
        (2000.0, 500.0, 60.0, 2.0, 1.0 + 60 * 0.5 / DRAIN_S),
        (2000.0, 500.0, 60.0, 0.0, 1.0),  # no first token: no mean request to weigh the queue by
    ],
)
def test_the_work_is_the_tokens_at_the_replicas_throughputs_and_the_queue_to_drain(
    prompt: float, generation: float, waiting: float | None, firsts: float | None, work: float
) -> None:
    assert work_in_replicas(prompt, generation, waiting, firsts, 4000.0, 1000.0) == pytest.approx(work)


@pytest.mark.parametrize(
    ("waiting", "before", "horizon", "work"),
    [
        (60.0, 60.0, 300.0, 1.0 + 60 * 0.5 / 300),  # a steady queue: none arrived beyond what was served
        (60.0, 0.0, 300.0, 1.0 + 60 * 0.5 / DRAIN_S + 60 * 0.5 / 300),  # grown: as much more arrived
        (0.0, 120.0, 300.0, 0.0),  # drained: what was served came from the queue, none arrived
        (60.0, 60.0, 30.0, 1.0 + 60 * 0.5 / DRAIN_S),  # a horizon under the minute: the queue within the minute
    ],
)
def test_the_queue_a_minute_back_tells_what_arrived_and_the_queue_is_done_within_the_horizon(
    waiting: float, before: float, horizon: float, work: float
) -> None:
    """The queue's change over the minute is what arrived beyond (or was served from it within) the tokens
    processed; the queue itself is done within the horizon a replica ordered now serves after."""
    got = work_in_replicas(2000.0, 500.0, waiting, 2.0, 4000.0, 1000.0, waiting_before=before, horizon=horizon)
    assert got == pytest.approx(work)


def test_a_queue_that_drains_orders_no_replicas_for_itself() -> None:
    """The module's worked example: 8 replicas' work served at 16 first tokens a second (half a replica-second
    each) while the queue went from 400 to 200: 6.7 replicas of work over a 255 s horizon, where the queue read as
    the minute's work alone made it 9.7."""
    work = work_in_replicas(32000.0, 0.0, 200.0, 16.0, 4000.0, 1000.0, waiting_before=400.0, horizon=255.0)
    assert work == pytest.approx(8 - 200 * 0.5 / 60 + 200 * 0.5 / 255) and round(work, 1) == 6.7
    assert round(work_in_replicas(32000.0, 0.0, 200.0, 16.0, 4000.0, 1000.0), 1) == 9.7


def _world(learner: UtilizationLearner, at_one: float, elasticity: float = 8.0, hours: float = 24.0) -> None:
    """Ticks of 15 s, 60 first tokens each, of which ``at_one * u ** elasticity`` miss at the utilization in use."""
    for tick in range(int(hours * 240)):
        share = min(at_one * learner.utilization**elasticity, 1.0)
        learner.observe(tick * 15.0, 60.0, share * 60.0)


@pytest.mark.parametrize("elasticity", [4.0, 8.0, 12.0])
@pytest.mark.parametrize("missed_at_start", [0.02, 0.001])
def test_a_day_takes_the_utilization_to_where_the_misses_spend_the_aim(
    missed_at_start: float, elasticity: float
) -> None:
    """The module's worked example, in a world whose misses grow as ``u ** elasticity``: a day that would miss 2 %
    at the start of 0.5 ends near 0.45 (where 0.85 % miss), one that would miss 0.1 % near 0.65; in a world
    steeper or flatter than the assumed ELASTICITY too: it sets the step, not where the steps end."""
    learner = UtilizationLearner(start=0.5, allowed=0.01)
    at_one = missed_at_start / 0.5**elasticity
    _world(learner, at_one, elasticity, hours=48)  # the second day's window holds none of the first's steps
    aimed = (AIM * 0.01 / at_one) ** (1 / elasticity)
    assert learner.utilization == pytest.approx(aimed, rel=0.03)


def test_the_start_holds_until_the_first_tokens_outweigh_it() -> None:
    """Before any first token the learner runs at its start, and first tokens that miss as aimed keep it there; a
    few minutes without a miss move it little: the start weighs as the first tokens that allow PRIOR_MISSES."""
    learner = UtilizationLearner(start=0.5, allowed=0.01)
    assert learner.utilization == 0.5
    learner.observe(0.0, 1_000.0, AIM * 0.01 * 1_000.0)
    assert learner.utilization == pytest.approx(0.5)
    for tick in range(1, 25):  # 24,000 first tokens, no miss
        learner.observe(tick * 15.0, 1_000.0, 0.0)
    assert 0.5 < learner.utilization < 0.7  # against 10,000 first tokens of prior; MOST without it


def test_a_day_is_remembered_and_then_forgotten() -> None:
    """A day that missed twice the budget, then a calm one: a day later the bad day is out of the window."""
    learner = UtilizationLearner(start=0.5, allowed=0.01)
    for tick in range(24 * 240):
        learner.observe(tick * 15.0, 60.0, 0.02 * 60.0)
    cool = learner.utilization
    for tick in range(24 * 240):
        learner.observe(86_400.0 + tick * 15.0, 60.0, 0.0)
    assert cool < 0.45 and learner.utilization > 0.75 and max(learner.hours) - min(learner.hours) == 23


def test_the_utilization_stays_within_its_bounds() -> None:
    learner = UtilizationLearner(start=0.5, allowed=0.01)
    _world(learner, 0.0, hours=48)
    assert learner.utilization == MOST
    burning = UtilizationLearner(start=0.06, allowed=0.01)
    assert burning.observe(0.0, 1e6, 1e6) == LEAST  # a million first tokens, every one late: 0.033 unbounded


def test_a_block_needs_the_budget_that_counts_its_misses() -> None:
    alone = {"type": "predictive", "utilization": BLOCK}
    with pytest.raises(PolicyFileError, match=r"utilization: needs errorBudget"):
        parse_policy_document(workload_doc(policy=alone, slo=SLO))
    bad_blocks = ({**BLOCK, "start": 0}, {**BLOCK, "start": 1.5}, {**BLOCK, "decodeTokensPerSecond": -1})
    for bad in (*bad_blocks, {**BLOCK, "floorReplicas": -1}):
        with pytest.raises(PolicyFileError, match=r"policy.utilization"):
            parse_policy_document(workload_doc(policy={**POLICY, "utilization": bad}, slo=SLO))


def test_the_work_signals_are_read_beside_the_budgets() -> None:
    workload = parse_policy_document(workload_doc(policy=POLICY, slo=SLO)).workloads[0]
    names = {m.name for m in workload.metrics}
    expected = [n for n in dict.fromkeys((*BUDGET_SIGNALS, *WORK_SIGNALS)) if n not in names]
    assert list(workload.extra_signals) == expected


def _decider(**policy: Any) -> Any:
    metrics = [{"name": "prompt_tokens_per_second", "target": {"type": "AverageValue", "value": 100}}]
    document = parse_policy_document(
        workload_doc(maxReplicas=100, policy={**POLICY, **policy}, slo=SLO, metrics=metrics)
    )
    return document.decider(document.workloads[0])


def _signals(prompt: float, mean_beyond: float = 0.0, waiting: float = 0.0) -> dict[str, float | None]:
    firsts = prompt / 500  # prompts of 500 tokens: 0.5 s of own prefill at 1,000 tokens/s
    return {
        "prompt_tokens_per_second": prompt,
        GENERATION_TOKENS: firsts * 100,
        WAITING: waiting,
        FIRST_TOKENS_RATE: firsts,
        TTFT_SECONDS_RATE: firsts * (0.5 + mean_beyond),
    }


def test_the_policy_holds_the_work_over_the_utilization() -> None:
    """20,000 prompt tokens a second (5 replicas' prefill) and 4,000 generated (4 replicas' decoding) are 9
    replicas of work: at 0.5, 18 replicas."""
    decider = _decider()
    decision = decider.decide(Observation(0.0, 10, _signals(20_000.0), ready_replicas=10))
    assert decision.recommended == 18
    assert decision.details["policy"]["work"] == pytest.approx(9.0) and decision.details["policy"][
        "utilization"
    ] == pytest.approx(0.5, rel=0.01)


@pytest.mark.parametrize(
    ("floor", "current", "fleet"), [(0, 10, 18), (12, 10, 18), (24, 10, 24), (19, 18, 19), (24, 23, 24)]
)
def test_the_floor_holds_the_fleet_however_light_the_work(floor: int, current: int, fleet: int) -> None:
    """9 replicas of work at 0.5 ask for 18; a floor under that changes nothing, one over it is held, also where
    the count is within the tolerance under it (a fleet of 23 under a floor of 24 rises to it)."""
    decider = _decider(utilization={**BLOCK, "floorReplicas": floor})
    decision = decider.decide(Observation(0.0, current, _signals(20_000.0), ready_replicas=current))
    assert decision.recommended == fleet
    assert decision.details["policy"].get("floor", 0) == floor


def test_a_queue_asks_for_more_and_a_missing_counter_holds() -> None:
    decider = _decider()
    queued = decider.decide(Observation(0.0, 10, _signals(20_000.0, waiting=240.0), ready_replicas=10))
    # 240 requests at the minute's mean of 9 / 40 replica-seconds, to be done within a minute: 0.9 more
    assert queued.details["policy"]["work"] == pytest.approx(9.9) and queued.recommended == 20
    blind = _signals(20_000.0)
    blind[GENERATION_TOKENS] = None
    held = decider.decide(Observation(15.0, 18, blind, ready_replicas=18))
    assert held.recommended == 18 and held.details["policy"]["missing"] == [GENERATION_TOKENS]


def test_the_queue_a_minute_back_is_the_policys_own_reading() -> None:
    """The first tick has no reading a minute back: its queue is the minute's work (as above). A minute on, the
    same queue arrived beyond nothing and is done within the horizon (300 s cold start and a 15 s tick); a
    reading missed on the way leaves the one a minute back in place, and a gap of more than a tick past it none."""
    decider = _decider()
    each = 9 / 40  # replica-seconds of the minute's mean request
    for now, waiting, work in [
        (0.0, 240.0, 9 + 240 * each / 60),
        (15.0, None, 9.0),
        (60.0, 240.0, 9 + 240 * each / 315),
        (75.0, 120.0, 9 - 120 * each / 60 + 120 * each / 315),  # the 240 of 15 s was not read: the one at 0 s
        (300.0, 120.0, 9 + 120 * each / 60),  # none from 225 s to 240 s: the whole queue within the minute
    ]:
        signals = _signals(20_000.0, waiting=0.0)
        signals[WAITING] = waiting
        decision = decider.decide(Observation(now, 20, signals, ready_replicas=20))
        assert decision.details["policy"]["work"] == pytest.approx(work), now


def test_a_calm_budget_runs_the_fleet_hotter_and_a_burning_one_cooler() -> None:
    """Six hours whose first tokens come at their own prefill take the utilization above its start and the fleet
    below 18; six hours a whole SLO late take it below its start and the fleet above."""
    fleets = {}
    for late in (0.0, 2.0):
        decider = _decider()
        for tick in range(6 * 240):
            decision = decider.decide(Observation(tick * 15.0, 18, _signals(20_000.0, late), ready_replicas=18))
        fleets[late] = (decision.recommended, decider.policy.resolved()["learnedUtilization"])
    assert fleets[0.0][0] < 18 < fleets[2.0][0]
    assert fleets[2.0][1] < 0.5 < fleets[0.0][1]


def test_a_reload_keeps_what_was_learned_unless_the_start_or_the_slo_moves() -> None:
    decider = _decider()
    for tick in range(240):
        decider.decide(Observation(tick * 15.0, 18, _signals(20_000.0), ready_replicas=18))
    learned = decider.policy.resolved()["learnedUtilization"]
    assert learned > 0.5
    same = _decider()
    same.restore(decider.snapshot())
    assert same.policy.resolved()["learnedUtilization"] == learned
    moved = _decider(utilization={**BLOCK, "start": 0.4})
    moved.restore(decider.snapshot())
    assert moved.policy.resolved()["learnedUtilization"] == 0.4


def test_no_hotter_than_the_budget_earned() -> None:
    """A calm first hour has earned a 24th of the way from the start to MOST; cooler it may go at once."""
    learner = UtilizationLearner(start=0.5, allowed=0.01)
    _world(learner, 0.0, hours=1)
    assert learner.utilization == pytest.approx(learner.most(3585.0)) and learner.utilization < 0.5 + 0.5 / 24
    burnt = UtilizationLearner(start=0.5, allowed=0.01)
    assert burnt.observe(0.0, 10_000.0, 1_000.0) < 0.5


def test_a_start_planned_on_a_recording_warms_only_as_the_count_outweighs_it_and_cools_at_once() -> None:
    """A calm day of 345,600 first tokens (60 a tick) warms a start planned on nothing well above it, and one planned on
    a recording of twice that many requests only part of the way; a day that misses twice the budget cools both
    alike, the recording's weight against warming only (the module's docstring)."""
    calm = {}
    for weight in (0.0, 691_200.0):
        learner = UtilizationLearner(start=0.5, allowed=0.01, weight=weight)
        _world(learner, 0.0, hours=24)
        calm[weight] = learner.utilization
    assert 0.5 < calm[691_200.0] < 0.6 < calm[0.0]
    burning = {}
    for weight in (0.0, 691_200.0):
        learner = UtilizationLearner(start=0.5, allowed=0.01, weight=weight)
        for tick in range(240):
            learner.observe(tick * 15.0, 60.0, 0.02 * 60.0)
        burning[weight] = learner.utilization
    assert burning[691_200.0] == burning[0.0] < 0.5


def test_a_reload_that_changes_the_recording_s_weight_starts_a_new_learner() -> None:
    learner = UtilizationLearner(start=0.5, allowed=0.01, weight=1_000.0)
    assert learner.fits(0.5, 0.01, 1_000.0) and not learner.fits(0.5, 0.01, 2_000.0) and not learner.fits(0.5, 0.01)


def test_a_day_counted_apart_is_taken_in_as_if_counted_in_order() -> None:
    """A starting daemon's day caught up apart from its last minutes (``autoscaler.warm_up``): the minutes' learner
    takes the day's hours in, an hour both counted summed, and works out the utilization the day calls for."""
    older, newer = UtilizationLearner(start=0.5, allowed=0.01), UtilizationLearner(start=0.5, allowed=0.01)
    whole = UtilizationLearner(start=0.5, allowed=0.01)
    for tick in range(24 * 240):  # a day missing twice the budget
        older.observe(tick * 15.0, 60.0, 0.02 * 60.0)
        whole.observe(tick * 15.0, 60.0, 0.02 * 60.0)
    for tick in range(24 * 240, 24 * 240 + 40):  # ten minutes more, the first hour of the next day
        newer.observe(tick * 15.0, 60.0, 0.02 * 60.0)
        whole.observe(tick * 15.0, 60.0, 0.02 * 60.0)
    assert newer.utilization > 0.48  # ten minutes of misses move it little from the start
    slot = (24 * 240 * 15 // 3600) % 24
    hour_before = newer.misses[slot]
    newer.absorb(older)
    assert newer.first == 0.0 and newer.misses[slot] == hour_before  # the next day's hour: only the minutes'
    assert sum(newer.misses) == pytest.approx(sum(older.misses) - older.misses[slot] + hour_before)
    assert newer.utilization == pytest.approx(whole.utilization, rel=0.001) and newer.utilization < 0.37
    other = UtilizationLearner(start=0.6, allowed=0.01)  # another start: another learner, nothing taken
    other.absorb(older)
    assert other.first is None and set(other.hours) == {EMPTY}
