"""The replicas' cold start as measured, for ``coldStartSeconds: auto``.

The daemon times each scale-up, from the write to ``readyReplicas`` reaching the new count, and adds it
here; once ``MIN_SAMPLES`` are in, the decider looks ahead by their 90th percentile (a slow start should not
be planned for as a typical one). Pure, and owned by the decider, so a reload of the policy file keeps what
was measured; the daemon also keeps the samples in the cluster for a restart (autoscaler.state).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

import numpy as np

SAMPLES = 20  # the most recent scale-ups: a fleet's start time drifts with images, nodes, weights
MIN_SAMPLES = 3


class ColdStartEstimator:
    def __init__(self, samples: Iterable[float] = ()) -> None:
        self.samples: deque[float] = deque(samples, maxlen=SAMPLES)

    def add(self, seconds: float) -> None:
        self.samples.append(max(float(seconds), 0.0))

    def p90(self) -> float | None:
        """The 90th percentile of the samples, or None before ``MIN_SAMPLES``."""
        if len(self.samples) < MIN_SAMPLES:
            return None
        return float(np.percentile(np.asarray(self.samples), 90))
