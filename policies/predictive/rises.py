"""How far the demand has risen within one horizon, learned from the demand a policy has seen.

``predictive`` holds headroom for what the load can do before a replica ordered now serves. The headroom a
trace needs spans 0 to 1 across recorded and synthetic traffic (docs/decisions/predictive-headroom.md): on
recorded days whose load rises by a quarter at most from one 10-minute window to the next, the default
0.6 buys replicas for surges that never come. The rises a workload's own past has shown tell it: over a
whole trace the 90th percentile of the demand's rise within one horizon, less one, tracked the headroom
``--tune`` found.

The demand is smoothed by the median of its last ``SMOOTHING_TICKS`` samples (a lone scrape's noise is no
rise), and a sample's rise is the highest smoothed demand of the horizon after it over its own: one plus the
difference over the sample's demand, or over one replica's at a lighter load (a ratio of noise to nearly
nothing says nothing). Rises are kept for
``memory`` seconds, so the history is bounded and a workload whose traffic changes forgets the old one.
"""

from __future__ import annotations

import bisect
import statistics
from collections import deque
from dataclasses import dataclass, field

SMOOTHING_TICKS = 4
LEAST_DEMAND = 1.0  # replicas: the denominator of a rise is at least one replica's load
QUANTILE = 0.9
HORIZON_TOLERANCE = 0.2


@dataclass
class RiseHistory:
    horizon: float
    memory: float
    recent: deque[float] = field(default_factory=deque)  # the last raw demands, for the median
    pending: deque[tuple[float, float]] = field(default_factory=deque)  # smoothed samples, the last horizon
    expiring: deque[tuple[float, float]] = field(default_factory=deque)  # (when, rise), oldest first
    rises: list[float] = field(default_factory=list)  # the same rises, sorted

    def update(self, demand: float, now: float) -> None:
        """Take the demand at ``now``; samples at or before the last one are ignored."""
        if self.pending and now <= self.pending[-1][0]:
            return
        self.recent.append(demand)
        if len(self.recent) > SMOOTHING_TICKS:
            self.recent.popleft()
        self.pending.append((now, statistics.median(self.recent)))
        while self.pending[0][0] < now - self.horizon:
            start, level = self.pending.popleft()
            ahead = max(value for _, value in self.pending)
            self._keep(start, 1.0 + (ahead - level) / max(level, LEAST_DEMAND))
        while self.expiring and self.expiring[0][0] < now - self.memory:
            _, rise = self.expiring.popleft()
            del self.rises[bisect.bisect_left(self.rises, rise)]

    def fits(self, horizon: float, memory: float) -> bool:
        """Whether these rises serve a policy looking ``horizon`` ahead with this memory. A measured cold
        start (``coldStartSeconds: auto``) moves the horizon a little with every measurement; rises within a
        horizon a fifth shorter or longer are not the ones the policy must absorb."""
        return memory == self.memory and abs(horizon - self.horizon) <= HORIZON_TOLERANCE * self.horizon

    def _keep(self, when: float, rise: float) -> None:
        self.expiring.append((when, rise))
        bisect.insort(self.rises, rise)

    @property
    def seconds(self) -> float:
        """How much history the rises stand for: the time they span, up to ``memory``."""
        if not self.expiring:
            return 0.0
        return min(self.memory, self.expiring[-1][0] - self.expiring[0][0])

    def quantile(self, q: float = QUANTILE) -> float | None:
        """The ``q`` quantile of the rises kept (nearest rank); ``None`` before the first."""
        if not self.rises:
            return None
        index = min(len(self.rises) - 1, max(0, int(q * len(self.rises))))
        return self.rises[index]
