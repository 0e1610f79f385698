"""lab/miss_windows.py: the share of a run's misses in the minutes after each stretch with almost no request."""

from __future__ import annotations

import numpy as np
import pytest

from lab.miss_windows import AFTER_MINUTES, after_stretches


def test_the_minutes_after_each_stretch_hold_their_share_of_the_misses_and_the_requests() -> None:
    arrived = np.full(200, 10)
    missed = np.zeros(200, dtype=np.int64)
    missed[60 : 60 + AFTER_MINUTES] = 3  # all but the last 10 of them right after the stretch that ends at 60
    missed[150] = 10  # outside any: 20 minutes after the stretch that ends at 130 are over by 150
    share, requests = after_stretches(missed, arrived, [(30, 60), (100, 130)])
    assert share == pytest.approx(60 / 70)
    assert requests == pytest.approx(2 * AFTER_MINUTES / 200)
    assert after_stretches(missed, arrived, []) == (0.0, 0.0)
