"""What one replica sustains within the SLO, learned online: a factor on the configured (or load-tested)
``capacity.promptTokensPerSecond``, moved by what each minute of traffic shows.

Once a minute (the TTFT histogram's rate window) the learner judges the minute just past from two things the
daemon reads anyway: the prompt tokens per second each ready replica carried, as a share ``u`` of the
capacity it believes, and the TTFT quantile at the SLO's target from vLLM's histogram.

* A minute that met the SLO above the capacity (``u > 1``) shows the replica carries at least that much:
  the factor rises toward ``u``.
* A minute that missed it at ``LEAST_LOAD <= u < 1`` shows it carries less: the factor falls.
* Any other minute says nothing: below ``LEAST_LOAD`` a slow first token is a long prompt's own prefill,
  not load; a miss above the capacity, or a minute that met it below, is what the belief already says.

The SLO counts the time to first token beyond a request's own prefill (what no scaling removes), and the
histogram counts the whole of it; so the quantile is judged beyond its ``floor``, the lowest a light minute
(below ``LEAST_LOAD``) has shown.

Bounded so that no odd minute swings it: a minute moves the factor by at most ``STEP``, the factor stays
within ``[LEAST_FACTOR, MOST_FACTOR]`` of the seed, and no minute is judged within a window of the fleet being
short (fewer ready replicas than asked for): its misses, and the backlog drained after, are the fleet's lag,
not the replica's capacity. The factor is the policy's state: a reload keeps it, a restart starts from the
seed. Worked example: seed 1,000 tokens/s, factor 1; a minute at 1,200 tokens/s a replica whose
p99 met the SLO raises the factor to 1.05 (not 1.2); it takes 14 such minutes in a row to reach the bound 2.
Table-tested in tests/test_capacity.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

WINDOW_S = 60.0  # the histogram's rate window: one judgement a window, none overlapping
STEP = 0.05
LEAST_FACTOR = 0.5
MOST_FACTOR = 2.0
LEAST_LOAD = 0.5


@dataclass
class CapacityLearner:
    """The learned factor on the seeded capacity, and when the fleet was last short or last judged."""

    factor: float = 1.0
    judged_at: float | None = None
    short_at: float | None = None  # the last tick at which the fleet had fewer ready replicas than it asked for
    floor: float | None = None  # the lowest quantile of a light minute: the requests' own prefill, which the SLO allows

    def observe(
        self,
        now: float,
        load_per_replica: float | None,
        seed: float,
        latency: float | None,
        slo_seconds: float,
        steady: bool,
    ) -> str | None:
        """Judge the minute ending at ``now``; returns ``"raised"``, ``"lowered"`` or ``"held"`` when it judged,
        None when it could not (too soon, a fleet short within the window, no value)."""
        if not steady:
            self.short_at = now
            return None
        if self.short_at is not None and now - self.short_at < WINDOW_S:
            return None
        if self.judged_at is not None and now - self.judged_at < WINDOW_S:
            return None
        if load_per_replica is None or latency is None or math.isnan(latency) or seed <= 0:
            return None
        self.judged_at = now
        share = load_per_replica / (seed * self.factor)
        if share < LEAST_LOAD:
            self.floor = latency if self.floor is None else min(self.floor, latency)
        latency -= self.floor or 0.0
        if latency <= slo_seconds and share > 1:
            self.factor *= min(share, 1 + STEP)
        elif latency > slo_seconds and LEAST_LOAD <= share < 1:
            self.factor *= max(share, 1 - STEP)
        else:
            return "held"
        self.factor = min(max(self.factor, LEAST_FACTOR), MOST_FACTOR)
        return "raised" if share > 1 else "lowered"
