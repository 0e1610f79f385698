"""Prometheus's ``histogram_quantile`` (``policies/histogram.py``), as the daemon and the simulator read it."""

from __future__ import annotations

import math

import pytest

from policies.histogram import PROMPT_TOKEN_BUCKETS, count_above, edge_at_or_below, histogram_quantile, lognormal_spread


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


def _lognormal_buckets(sigma: float, median: float = 1000.0, count: float = 10_000.0) -> dict[float, float]:
    """vLLM's prompt-token buckets filled by a lognormal's cumulative counts."""
    buckets = {
        b: count * 0.5 * (1 + math.erf(math.log(b / median) / sigma / math.sqrt(2))) for b in PROMPT_TOKEN_BUCKETS
    }
    return {**buckets, math.inf: count}


@pytest.mark.parametrize(("sigma", "read"), [(0.5, 0.517), (1.0, 1.073), (2.0, 2.031)])
def test_the_spread_of_lognormal_prompts_read_off_vllms_buckets(sigma: float, read: float) -> None:
    """A little high on the 1-2-5 buckets (linear interpolation inside a bucket, as Prometheus's), which counts a
    long prompt's misses high rather than low."""
    spread = lognormal_spread(_lognormal_buckets(sigma))
    assert spread == pytest.approx(read, abs=0.001) and spread >= sigma


def test_no_spread_without_prompts_or_with_the_lowest_bucket_at_a_percentile() -> None:
    assert lognormal_spread({b: 0.0 for b in (*PROMPT_TOKEN_BUCKETS, math.inf)}) is None  # an idle hour
    assert lognormal_spread({1.0: 0.0, 2.0: 10.0, math.inf: 10.0}) is not None
    assert lognormal_spread({0.0: 5.0, 2.0: 10.0, math.inf: 10.0}) is None  # a 10th percentile of 0 has no log
    assert lognormal_spread({2.0: 10.0}) is None  # no +Inf bucket


@pytest.mark.parametrize(
    ("seconds", "buckets", "above"),
    [
        (2.0, {0.5: 10.0, 1.0: 60.0, 2.5: 90.0, math.inf: 100.0}, 40.0),  # the edge at or below 2 s is 1.0
        (1.0, {0.5: 10.0, 1.0: 60.0, 2.5: 90.0, math.inf: 100.0}, 40.0),  # an edge at the SLO is taken
        (2.5, {0.5: 10.0, 1.0: 60.0, 2.5: 90.0, math.inf: 100.0}, 10.0),
        (0.1, {0.5: 10.0, 1.0: 60.0, math.inf: 100.0}, 100.0),  # no edge that low: all of them
        (2.0, {1.0: 60.0}, None),  # no +Inf bucket
    ],
)
def test_the_count_above_the_edge_at_or_below(seconds: float, buckets: dict[float, float], above: float | None) -> None:
    assert count_above(seconds, buckets) == above


def test_vllms_ttft_edges_below_an_slo() -> None:
    assert [edge_at_or_below(s) for s in (2.0, 1.0, 0.5, 3.0, 0.0005)] == [1.0, 1.0, 0.5, 2.5, None]
