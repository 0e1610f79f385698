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
