"""policies/predictive/samples.py: readings kept over a window, and the newest one no later than a time."""

from __future__ import annotations

import pytest

from policies.predictive.samples import Samples


def test_a_reading_at_the_last_ones_time_replaces_its_value_and_older_ones_are_dropped() -> None:
    kept = Samples()
    for now, value in [(0.0, 1.0), (15.0, 2.0), (15.0, 3.0), (30.0, 4.0), (45.0, 5.0)]:
        kept.add(now, value)
    assert kept.samples == [(0.0, 1.0), (15.0, 3.0), (30.0, 4.0), (45.0, 5.0)]
    kept.drop_before(15.0)  # the reading at the cutoff stays
    assert kept.samples == [(15.0, 3.0), (30.0, 4.0), (45.0, 5.0)]


@pytest.mark.parametrize(("at", "value"), [(10.0, None), (15.0, 3.0), (29.9, 3.0), (30.0, 4.0), (99.0, 5.0)])
def test_the_newest_reading_no_later_than_a_time(at: float, value: float | None) -> None:
    kept = Samples()
    for now, reading in [(15.0, 3.0), (30.0, 4.0), (45.0, 5.0)]:
        kept.add(now, reading)
    assert kept.last_at_or_before(at) == value
    assert Samples().last_at_or_before(at) is None
