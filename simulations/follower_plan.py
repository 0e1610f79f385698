"""The follower's plan for a trace: the utilization it starts at and the fleet it never goes below.

A follower of the work holds ``max(floor, ceil(held / u))`` replicas, ``held`` the most work of its scale-down
window, read a minute late (the rates are the minute past's), and a replica it orders serves a cold start later
(``held_work``, ``fluid_fleet``). Replayed over the trace's minutes (``sizing.minute_work``), each minute runs its
ready replicas at some load. What share of first tokens miss the SLO at a load comes from the replica: a steady load
test of the trace's requests, at several multiples of the rate it sustains (``MissCurve``); and from the traffic: by
what one fixed fleet over the trace itself misses, its minutes are as heavy as a steady load ``burstiness`` times
their size (its arrivals come in bursts a steady test does not have, its rises carry a queue from one minute to the
next, and a minute's overload lasts a minute where a steady test's lasts its whole span).

The plan is the ``(u, floor)`` whose replayed fleet holds the fewest replica-minutes while its replayed misses spend
no more than the budget's aim (``utilization.AIM``): for each floor, the hottest ``u`` that does, by bisection.
Where the traffic swings within a cold start, following it buys replicas for rises that have passed before they
serve, and a fixed fleet, which spends its budget at the peaks alone, is cheaper: the floor then holds that fleet.
Where it swings over hours, the floor is low and the follower saves. Worked example: work of 5 replicas with a
minute of 8 every ten, a 300 s cold start and window: a follower orders for each spike after it has passed and holds
that through its window, meeting the aim only far below the replica's knee; 14 fixed replicas run the spikes near it
for less, and the plan is that floor at a utilization of 1 (tests/test_follower_plan.py;
docs/decisions/predictive-utilization.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from policies.predictive.utilization import AIM, PRIOR_MISSES

LOADS = (0.5, 0.7, 0.85, 1.0, 1.15, 1.3, 1.45, 1.6, 1.8, 2.0, 2.5)  # times the rate the steady test sustains
LATE_MINUTES = 1  # the work is read over the minute past
BISECTIONS = 25
LEAST = 0.01


@dataclass(frozen=True)
class MissCurve:
    """The share of first tokens that miss at a load (a replica's share of its compute in use), measured at
    ``loads`` (rising): linear between them and from none at no load, and every one beyond the last."""

    loads: np.ndarray
    shares: np.ndarray

    def at(self, load: np.ndarray) -> np.ndarray:
        xs = np.concatenate([[0.0], self.loads])
        ys = np.concatenate([[0.0], np.maximum.accumulate(self.shares)])
        share: np.ndarray = np.where(load > xs[-1], 1.0, np.interp(load, xs, ys))
        return share

    def heavier(self, factor: float) -> MissCurve:
        """The curve of a load ``factor`` times as heavy as its own: what a minute of it misses at a load."""
        return MissCurve(self.loads / factor, self.shares)


def burstiness(curve: MissCurve, load: np.ndarray, missed: np.ndarray, arrived: np.ndarray) -> float:
    """How many times as heavy as a steady load of the same size a fixed fleet's minutes over the trace (their
    ``load``, ``arrived`` requests) were, by what the fleet ``missed``: its arrivals' bursts, and the queue a rise
    carries over, make more misses than a steady test's; a minute's overload, which a steady test holds for its
    whole span, fewer. Found as the factor at which ``curve`` gives those minutes the misses they had, taken toward
    1 as the learner's prior weighs (``PRIOR_MISSES`` allowed misses, spent as aimed), so that a run of few misses
    cannot swing it."""
    observed = float(missed.sum())
    low, high = 1 / 16, 16.0
    for _ in range(BISECTIONS):
        middle = math.sqrt(low * high)
        if float(np.sum(curve.heavier(middle).at(load) * arrived)) < observed:
            low = middle
        else:
            high = middle
    weight = observed / (observed + PRIOR_MISSES * AIM)
    return float(math.sqrt(low * high) ** weight)


def held_work(work: np.ndarray, cold_start_s: float, hold_s: float) -> np.ndarray:
    """What a follower of ``work`` holds in each minute whatever its utilization: the scale-down window's most work,
    a minute late. Before the trace it held what its first cold start needs, as if it had run before."""
    ahead = max(1, math.ceil(cold_start_s / 60))
    back = max(1, math.ceil(hold_s / 60))
    first = float(work[: ahead + 1].max())
    padded = np.concatenate([np.full(back - 1 + LATE_MINUTES, first), work[: len(work) - LATE_MINUTES]])
    held: np.ndarray = np.lib.stride_tricks.sliding_window_view(padded, back).max(axis=1)
    return held


def fluid_fleet(held: np.ndarray, u: float, floor: int, cold_start_s: float) -> tuple[np.ndarray, np.ndarray]:
    """The replicas a follower at ``u`` over ``floor`` orders in each minute (the ``held_work`` over ``u``, rounded
    up; at least one), and those ready: ordered a cold start before and held since."""
    ahead = max(1, math.ceil(cold_start_s / 60))
    ordered = np.maximum(max(1, floor), np.ceil(held / u - 1e-9))
    before = np.full(ahead, ordered[0])
    ready = np.lib.stride_tricks.sliding_window_view(np.concatenate([before, ordered]), ahead + 1).min(axis=1)
    return ordered, ready


@dataclass(frozen=True)
class Plan:
    """Where predictive's follower starts: ``utilization``, and the replicas it holds however light the work."""

    utilization: float
    floor: int


def plan(work: np.ndarray, curve: MissCurve, cold_start_s: float, hold_s: float, slo_target: float) -> Plan | None:
    """The cheapest ``(u, floor)`` whose replay over ``work`` spends no more than the budget's aim (the module's
    docstring), the floors tried up to the fleet that runs the busiest minute at the curve's lightest load; None
    where none meets it."""
    weights = work / work.sum()
    aim = AIM * (1 - slo_target)
    held = held_work(work, cold_start_s, hold_s)

    def meets(u: float, floor: int) -> bool:
        _, ready = fluid_fleet(held, u, floor, cold_start_s)
        return float(np.sum(weights * curve.at(work / ready))) <= aim

    def hottest(floor: int) -> float | None:
        if meets(1.0, floor):
            return 1.0
        if not meets(LEAST, floor):
            return None
        low, high = LEAST, 1.0
        for _ in range(BISECTIONS):
            middle = (low + high) / 2
            low, high = (middle, high) if meets(middle, floor) else (low, middle)
        return low

    best: tuple[float, Plan] | None = None
    for floor in range(0, math.ceil(float(work.max()) / float(curve.loads[0])) + 1):
        u = hottest(floor)
        if u is None:
            continue
        replica_minutes = float(fluid_fleet(held, u, floor, cold_start_s)[0].sum())
        if best is None or replica_minutes < best[0] - 1e-9:
            best = (replica_minutes, Plan(u, floor))
    return None if best is None else best[1]


def fixed_candidates(
    work: np.ndarray, found: Plan, cold_start_s: float, hold_s: float, busiest: int, held: float = 0.0
) -> range:
    """The fixed fleets that might beat ``found``: from the ``busiest`` fleet, the one the trace's busiest window
    needs where the budget's misses are spent on it (the oracle's bound's ``busiest_fleet``, where static-best's
    search starts: fewer cannot meet the target), to those that hold fewer replica-minutes than the follower ``found``
    replays to (more cannot win). Empty where the follower holds fewer on average than that, as on days whose peak is
    hours long. A run of the plan's policy that ``held`` more replicas on average than the replay reads says more might.
    Worked example: the docstring's spikes (5 replicas of work, 8 every ten minutes, all of it needed), planned as a
    floor of 14 at a ``u`` of 1: fleets of 8 to 13 might beat it, if the trace's own minutes miss less than the
    replay reads them to (tests/test_follower_plan.py)."""
    ordered, _ = fluid_fleet(held_work(work, cold_start_s, hold_s), found.utilization, found.floor, cold_start_s)
    return range(max(1, busiest), math.ceil(max(float(ordered.mean()), held) - 1e-9))
