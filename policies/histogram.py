"""Prometheus's ``histogram_quantile``, the one copy: the daemon's batched queries sum each pod's buckets and
take it here, and the simulated replicas expose vLLM's own TTFT histogram (``TTFT_BUCKETS``) and are read
through it, so a policy sees a quantile from the same buckets and the same interpolation in both."""

from __future__ import annotations

import math

TTFT_BUCKETS: tuple[float, ...] = (
    *(0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75),
    *(1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0),
)
"""The finite ``le`` edges of ``vllm:time_to_first_token_seconds`` (vLLM's ``vllm/v1/metrics/loggers.py``)."""

PROMPT_TOKEN_BUCKETS: tuple[float, ...] = tuple(
    float(m * 10**e) for e in range(6) for m in (1, 2, 5) if m * 10**e <= 131_072
)
"""The finite ``le`` edges of ``vllm:request_prompt_tokens``: vLLM's 1-2-5 series up to the model's length
(``build_1_2_5_buckets(max_model_len)``), here a 128k-token model's."""

SPREAD_QUANTILES = (0.1, 0.9)
SPREAD_Z = 2.5631  # the standard normal's 90th percentile less its 10th


def histogram_quantile(q: float, buckets: dict[float, float]) -> float | None:
    """Prometheus's ``histogram_quantile`` over cumulative bucket counts keyed by upper bound."""
    if not buckets or math.inf not in buckets:
        return None
    bounds = sorted(buckets)
    counts = [buckets[b] for b in bounds]
    total = counts[-1]
    if total <= 0:
        return math.nan  # as Prometheus's: no observation in the window (policies.base.metric_value)
    rank = q * total
    index = next(i for i, c in enumerate(counts) if c >= rank)
    if bounds[index] == math.inf:
        return bounds[-2] if len(bounds) > 1 else None
    lower = bounds[index - 1] if index > 0 else 0.0
    below = counts[index - 1] if index > 0 else 0.0
    in_bucket = counts[index] - below
    if in_bucket <= 0:
        return bounds[index]
    return lower + (bounds[index] - lower) * (rank - below) / in_bucket


def edge_at_or_below(seconds: float, edges: tuple[float, ...] = TTFT_BUCKETS) -> float | None:
    """The largest of ``edges`` at or below ``seconds``; None when every edge is above it."""
    below = [edge for edge in edges if edge <= seconds]
    return max(below) if below else None


def count_above(seconds: float, buckets: dict[float, float]) -> float | None:
    """Of a histogram's cumulative counts keyed by upper bound (``+Inf`` the total), those above its largest edge at
    or below ``seconds`` (``edge_at_or_below``): every observation above ``seconds`` is among them. The whole
    count where no edge is that low; None without the ``+Inf`` bucket. Worked example: vLLM's TTFT buckets and a
    2 s SLO count the first tokens above 1.0 s, the next edge being 2.5 (tests/test_histogram.py)."""
    if math.inf not in buckets:
        return None
    edge = edge_at_or_below(seconds, tuple(b for b in buckets if b != math.inf))
    return buckets[math.inf] - (buckets[edge] if edge is not None else 0.0)


def lognormal_spread(buckets: dict[float, float]) -> float | None:
    """The standard deviation of the log of a histogram's observations, read as lognormal from its 10th and 90th
    percentiles (``histogram_quantile``, as Prometheus interpolates): ``(ln q90 - ln q10) / 2.563``. On vLLM's
    1-2-5 prompt-token buckets it gives 0.515 for ServeGen's prompts (their own 0.501), 1.01 for the Azure
    conversation hour's (0.985), 2.77 for Mooncake's (2.70): a little high, which counts misses high
    (docs/decisions/error-budget-count.md). ``None`` without observations or with one of the
    percentiles at 0."""
    low, high = (histogram_quantile(q, buckets) for q in SPREAD_QUANTILES)
    if low is None or high is None or math.isnan(low) or math.isnan(high) or low <= 0 or high <= 0:
        return None
    return (math.log(high) - math.log(low)) / SPREAD_Z
