"""Counting SLO misses from the TTFT histogram's sum and count (``policies/error_budget.py``)."""

from __future__ import annotations

import math

import pytest

from policies.error_budget import SCALE, mean_beyond_prefill, miss_share


@pytest.mark.parametrize(
    ("ttft", "firsts", "prompt", "expected"),
    [
        (12.0, 4.0, 2000.0, 2.5),  # 4 first tokens a second, 3 s each, of which 0.5 s is their own prefill
        (2.0, 4.0, 2000.0, 0.0),  # every one at its own prefill: nothing beyond
        (1.0, 4.0, 4000.0, -0.75),  # a counter's window edge can read more prefill than the first tokens had
        (1.0, 0.0, 0.0, None),  # no first token in the window
        (None, 4.0, 2000.0, None),
        (math.nan, 4.0, 2000.0, None),
        (1.0, 4.0, None, None),
    ],
)
def test_the_mean_beyond_prefill_is_the_histograms_mean_less_the_prompts_own_prefill(
    ttft: float | None, firsts: float, prompt: float | None, expected: float | None
) -> None:
    assert mean_beyond_prefill(ttft, firsts, prompt, prefill_tokens_per_second=1000.0) == expected


@pytest.mark.parametrize(
    ("mean", "slo", "share"),
    [
        (-0.3, 2.0, 0.0),  # nothing beyond prefill is no miss
        (0.0, 2.0, 0.0),
        (SCALE * 2.0, 2.0, 0.5),  # a mean of 1.2 times the SLO: half
        (SCALE * 1.0, 1.0, 0.5),  # the same for a tighter SLO, in its own units
    ],
)
def test_the_miss_share_of_a_minute(mean: float, slo: float, share: float) -> None:
    assert miss_share(mean, slo) == pytest.approx(share)


def test_the_miss_share_rises_with_the_mean_and_falls_with_the_slo() -> None:
    means = [0.05, 0.1, 0.2, 0.5, 1.0, 3.0, 10.0]
    shares = [miss_share(m, 2.0) for m in means]
    assert shares == sorted(shares) and shares[0] > 0.0 and shares[-1] < 1.0
    assert 0.005 < miss_share(0.2, 2.0) < 0.02  # a tenth of the SLO: about 1 %
    assert miss_share(0.2, 1.0) > miss_share(0.2, 2.0)
