"""Prometheus's ``histogram_quantile`` (``policies/histogram.py``), as the daemon and the simulator read it."""

from __future__ import annotations

import math

import pytest

from policies.histogram import histogram_quantile


@pytest.mark.parametrize(
    ("buckets", "expected"),
    [
        ({0.1: 2.0, 0.5: 6.0, 1.0: 9.0, float("inf"): 10.0}, 1.0),  # rank 9 ends exactly at the 1.0 bucket
        ({0.1: 0.0, 0.5: 10.0, float("inf"): 10.0}, 0.1 + 0.4 * 0.9),  # linear inside the bucket
        ({0.5: 5.0, float("inf"): 10.0}, 0.5),  # in +Inf: the highest finite bound
        ({0.5: 0.0, float("inf"): 0.0}, math.nan),  # no observations: NaN, as Prometheus gives
        ({0.5: 1.0}, None),  # no +Inf bucket
    ],
)
def test_histogram_quantile_follows_prometheus(buckets: dict[float, float], expected: float | None) -> None:
    result = histogram_quantile(0.9, buckets)
    if expected is not None and math.isnan(expected):
        assert result is not None and math.isnan(result)
    else:
        assert result == (pytest.approx(expected) if expected is not None else None)
