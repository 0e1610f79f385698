"""The forecast one cold start ahead: the demand's least-squares trend over the last window, extrapolated over
the horizon only when it is significant and rises in both halves of the window (``TrendState.growth``)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from policies.predictive.samples import Samples

SIGNIFICANCE = 3.0


def default_horizon(cold_start_seconds: float, interval: float) -> float:
    """How far ahead the policy looks when ``horizonSeconds`` is unset: a replica ordered at this tick
    serves a cold start later, and the next tick may come an interval after that."""
    return cold_start_seconds + interval


@dataclass
class TrendState(Samples):
    """The demand samples of the last ``window`` seconds."""

    def update(self, demand: float, now: float, window: float) -> None:
        self.add(now, demand)
        self.drop_before(now - window)

    def growth(self, horizon: float, window: float) -> float:
        """The rise a sustained trend adds over ``horizon`` seconds; 0 when there is none.

        A trend counts only when it is significant (the least-squares slope less three standard errors)
        over the whole window and rises in both of its halves: a load that only wanders has no trend worth
        extrapolating over minutes, and a step (a surge that has already arrived) rises across the window
        but not within its halves, and extrapolating it would buy replicas after the need has come.
        """
        samples = self.samples
        half = len(samples) // 2
        if half < 3 or samples[-1][0] - samples[0][0] < 0.75 * window:
            return 0.0  # too short a history to tell a trend (a trace or a daemon just starting)
        # Each test is one pass or more over the window, once a tick: the later ones only when the earlier hold.
        rise = _rise(samples, shrink=SIGNIFICANCE)
        for part in (samples[:half], samples[half:]):
            if not rise:
                break
            rise = min(rise, _rise(part))
        return rise * horizon


def _rise(samples: list[tuple[float, float]], shrink: float = 0.0) -> float:
    """The least-squares slope of ``samples`` moved ``shrink`` standard errors toward zero, if that is a
    rise; else 0."""
    n = len(samples)
    mean_t = sum(t for t, _ in samples) / n
    mean_d = sum(d for _, d in samples) / n
    sxx = sum((t - mean_t) ** 2 for t, _ in samples)
    if sxx <= 0:
        return 0.0
    slope = sum((t - mean_t) * (d - mean_d) for t, d in samples) / sxx
    if slope <= 0 or not shrink:
        return max(0.0, slope)
    residual = sum((d - mean_d - slope * (t - mean_t)) ** 2 for t, d in samples)
    error = math.sqrt(residual / (n - 2) / sxx)
    return max(0.0, slope - shrink * error)
