"""The follower's plan: its fluid replay over a trace's minutes, the misses at a load, and the cheapest plan."""

from __future__ import annotations

import numpy as np
import pytest

from simulations.follower_plan import (
    MissCurve,
    Plan,
    burstiness,
    fixed_candidates,
    fluid_fleet,
    held_work,
    plan,
)

CURVE = MissCurve(np.array([0.25, 0.5, 0.75]), np.array([0.0, 0.005, 0.1]))  # a knee at half the compute


@pytest.mark.parametrize(
    ("load", "share"),
    [(0.0, 0.0), (0.25, 0.0), (0.375, 0.0025), (0.5, 0.005), (0.75, 0.1), (0.76, 1.0)],
)
def test_the_miss_curve_is_linear_between_its_loads_and_every_one_misses_beyond(load: float, share: float) -> None:
    assert float(CURVE.at(np.array([load]))[0]) == pytest.approx(share)


def test_a_heavier_load_misses_at_a_lighter_one_what_the_curve_says_of_it() -> None:
    assert float(CURVE.heavier(2.0).at(np.array([0.25]))[0]) == pytest.approx(0.005)


def test_the_follower_holds_the_windows_most_work_a_minute_late_and_serves_a_cold_start_later() -> None:
    """Work of 2 replicas steps to 6 in minute 3, back to 2 in minute 5; at u = 0.5, a 120 s cold start and a 180 s
    scale-down window: 4 replicas ordered until minute 3's work is read in minute 4, 12 then until minute 7, when the
    window of minutes 4 to 6 still holds minute 4's 6; ready two minutes after."""
    work = np.array([2.0, 2, 2, 6, 6, 2, 2, 2, 2, 2])
    ordered, ready = fluid_fleet(held_work(work, 120.0, 180.0), 0.5, 0, 120.0)
    assert list(ordered) == [4, 4, 4, 4, 12, 12, 12, 12, 4, 4]
    assert list(ready) == [4, 4, 4, 4, 4, 4, 12, 12, 4, 4]
    floored, _ = fluid_fleet(held_work(work, 120.0, 180.0), 0.5, 8, 120.0)
    assert list(floored) == [8, 8, 8, 8, 12, 12, 12, 12, 8, 8]


def test_before_the_trace_it_held_what_its_first_cold_start_needs() -> None:
    """As if it had run before: a trace whose work rises in its first minutes finds the fleet for it ready."""
    ordered, ready = fluid_fleet(held_work(np.array([1.0, 4, 4, 4]), 120.0, 300.0), 0.5, 0, 120.0)
    assert list(ordered) == list(ready) == [8, 8, 8, 8]


def test_no_misses_leave_the_curve_as_it_is_and_many_move_it() -> None:
    load = np.full(60, 0.5)
    arrived = np.full(60, 1000.0)
    assert burstiness(CURVE, load, np.zeros(60), arrived) == pytest.approx(1.0)
    # the curve gives 300 misses; 6,000 (a tenth of the requests) are what it gives a load 1.5 times as heavy
    heavy = burstiness(CURVE, load, np.full(60, 100.0), arrived)
    assert heavy == pytest.approx(1.5 ** (6000 / (6000 + 85)), rel=0.01)


def test_steady_work_is_followed_with_no_floor() -> None:
    """Flat work: nothing to hold beyond what following holds, at the hottest u the curve allows the aim."""
    found = plan(np.full(120, 10.0), CURVE, 300.0, 300.0, 0.99)
    assert found is not None and found.floor <= 20 and 0.4 < found.utilization <= 0.6


def test_work_that_spikes_within_a_cold_start_is_held_by_a_floor() -> None:
    """Work of 5 replicas with a minute of 8 every ten: a follower orders for each spike a cold start after it has
    passed, holds that through its window, and meets the aim only far below the knee; 14 fixed replicas run the
    spikes near it and cost less. A spike every five minutes is held by the window alone: no floor."""
    spiky = np.tile([5.0] * 9 + [8.0], 12)
    found = plan(spiky, CURVE, 300.0, 300.0, 0.99)
    assert found == Plan(1.0, 14)
    assert list(fluid_fleet(held_work(spiky, 300.0, 300.0), found.utilization, found.floor, 300.0)[0]) == [14] * 120
    held = plan(np.tile([5.0] * 4 + [9.0], 24), CURVE, 300.0, 300.0, 0.99)
    assert held is not None and held.floor == 0


def test_no_plan_where_no_fleet_meets_the_aim() -> None:
    """Every first token misses at any load (an SLO under the replicas' own speed): nothing to plan."""
    never = MissCurve(np.array([0.1]), np.array([1.0]))
    assert plan(np.full(30, 5.0), never, 300.0, 300.0, 0.99) is None
    assert Plan(0.5, 0) == Plan(0.5, 0)


def test_fixed_fleets_are_tried_only_where_one_might_hold_fewer_replica_minutes() -> None:
    """The spikes' plan holds 14 replicas: fleets of 8 (the busiest minute's work, all of it needed) to 13 might beat
    it. A follower of work that swings over hours holds fewer on average than its busiest minute needs: no fixed fleet
    can."""
    spiky = np.tile([5.0] * 9 + [8.0], 12)
    assert fixed_candidates(spiky, Plan(1.0, 14), 300.0, 300.0, 8) == range(8, 14)
    # a run of its policy that held 16.2 on average says fleets of 14 to 16 might too
    assert fixed_candidates(spiky, Plan(1.0, 14), 300.0, 300.0, 8, held=16.2) == range(8, 17)
    # where the budget lets the spikes miss, the oracle's busiest window needs fewer: from there
    assert fixed_candidates(spiky, Plan(1.0, 14), 300.0, 300.0, 6) == range(6, 14)
    day = 11 + 9 * np.sin(np.linspace(0, 2 * np.pi, 1440))
    assert not fixed_candidates(day, Plan(0.8, 0), 300.0, 300.0, 20)
