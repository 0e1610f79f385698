"""The replicas' cold start as measured, for ``coldStartSeconds: auto``.

The daemon and the simulator time each scale-up with one ``WritesToReady``, from the write to ``readyReplicas``
reaching the new count, and add it here; once ``MIN_SAMPLES`` are in, the decider looks ahead by their 90th
percentile (a slow start should not be planned for as a typical one). Pure, and owned by the decider, so a reload of
the policy file keeps what was measured; the daemon also keeps the samples in the cluster for a restart
(autoscaler.state).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

SAMPLES = 20  # the most recent scale-ups: a fleet's start time drifts with images, nodes, weights
MIN_SAMPLES = 3


class ColdStartEstimator:
    """The last ``SAMPLES`` cold starts (a list: a bounded deque takes 380 bytes empty, two a workload)."""

    def __init__(self, samples: Iterable[float] = ()) -> None:
        self.samples: list[float] = list(samples)[-SAMPLES:]

    def add(self, seconds: float) -> None:
        self.samples.append(max(float(seconds), 0.0))
        del self.samples[:-SAMPLES]

    def p90(self) -> float | None:
        """The 90th percentile of the samples, or None before ``MIN_SAMPLES``."""
        if len(self.samples) < MIN_SAMPLES:
            return None
        return float(np.percentile(np.asarray(self.samples), 90))


@dataclass
class WritesToReady:
    """One workload's scale-up in flight: when the write of ``count`` replicas took effect, until ``readyReplicas``
    reaches it, measured at tick resolution. The daemon keeps ``pending`` in its state ConfigMap across a restart.
    Worked example: 2 -> 4 written at 100 s, ready 2, 3, then 4 at the tick of 415 s: 315 s
    (tests/test_cold_start.py)."""

    pending: tuple[float, int] | None = None  # (when written, the count written)

    def written(self, now: float, current: int, desired: int) -> None:
        """A write of ``desired`` over ``current`` took effect at ``now``: a scale-up starts a measurement, any other
        write ends the one in flight."""
        self.pending = (now, desired) if desired > current else None

    def observe(self, now: float, replicas: int, ready: int | None) -> float | None:
        """The seconds from the write to this tick when ``ready`` has reached the count written, else None; a count
        below it (scaled down, or by hand) abandons the measurement."""
        if self.pending is None:
            return None
        written_at, count = self.pending
        if replicas < count:
            self.pending = None
            return None
        if ready is None or ready < count:
            return None
        self.pending = None
        return max(now - written_at, 0.0)
