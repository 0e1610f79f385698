"""The error budget's outer loop: hotter step by step while budget is left, cooler at once as it burns."""

from __future__ import annotations

import pytest

from policies.predictive.spending import MOST_SCALE, SpendingLoop, most


def calm(loop: SpendingLoop, start: float, minutes: int) -> None:
    for tick in range(minutes * 4):  # a tick each 15 s
        loop.update(start + tick * 15.0, used=0.1, hour_burn=0.1)


def test_a_calm_day_runs_hotter_a_step_each_ten_minutes() -> None:
    loop = SpendingLoop()
    calm(loop, 0.0, 10)
    assert loop.scale == 1.0  # the first ten minutes are evidence, not yet a step
    calm(loop, 600.0, 100)
    assert loop.scale == pytest.approx(1.05**10)


def test_an_hour_that_burns_its_share_cools_at_once_and_waits_before_the_next_step() -> None:
    loop = SpendingLoop(scale=1.05**10, moved_at=0.0)
    assert loop.update(6000.0, used=0.3, hour_burn=2.0) == "cooler"
    assert loop.scale == pytest.approx(1.05**10 * 0.8)
    assert loop.update(6015.0, used=0.3, hour_burn=2.0) is None  # once a step while it lasts
    assert loop.update(6015.0 + 600, used=0.3, hour_burn=2.0) == "cooler"
    assert loop.update(6030.0 + 600, used=0.1, hour_burn=0.1) is None  # no step hotter right after
    assert loop.update(6015.0 + 1200, used=0.1, hour_burn=0.1) == "hotter"


@pytest.mark.parametrize(("used", "burn"), [(0.6, 0.1), (0.1, 0.6), (0.9, 0.9)])
def test_between_the_two_it_holds(used: float, burn: float) -> None:
    loop = SpendingLoop(scale=1.2, moved_at=0.0)
    assert loop.update(10_000.0, used=used, hour_burn=burn) is None and loop.scale == 1.2


def test_the_scale_stays_within_its_bounds() -> None:
    loop = SpendingLoop()
    calm(loop, 0.0, 24 * 60)
    assert loop.scale == MOST_SCALE
    for step in range(40):
        loop.update(100_000.0 + step * 600, used=1.5, hour_burn=5.0)
    assert loop.scale == 1.0  # never cooler than sized


def test_no_hotter_than_the_budget_earned() -> None:
    """An hour into a day's window the loop may run 1.04 times hotter, half a day in 1.5 times: a calm first hour
    has earned an hour's budget, not a day's."""
    assert (most(1 / 24), most(0.5), most(1.0), most(3.0)) == pytest.approx((1 + 1 / 24, 1.5, 2.0, 2.0))
    loop = SpendingLoop()
    for tick in range(4 * 120):  # two calm hours
        loop.update(tick * 15.0, used=0.1, hour_burn=0.1, earned=tick * 15.0 / 86_400)
    assert 1.0 < loop.scale <= most(7200 / 86_400)
