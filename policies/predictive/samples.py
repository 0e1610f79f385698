"""Timed readings kept over a window, as the trend keeps its demand and the follower its queue."""

from __future__ import annotations

from array import array
from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field


@dataclass
class Samples:
    """Readings oldest first: their times, rising, and their values, in two arrays of doubles. 16 bytes a reading,
    where a deque of pairs took about 90: the trend's ten minutes at 15 s ticks held 3.8 kB a workload that way, 38 MB
    of a daemon of 10,000 (tracemalloc; docs/decisions/daemon-scale.md). A reading at or before the last one's time
    replaces its value (the clock a policy is given does not go back)."""

    times: array[float] = field(default_factory=lambda: array("d"))
    values: array[float] = field(default_factory=lambda: array("d"))

    @property
    def samples(self) -> list[tuple[float, float]]:
        """The readings as ``(time, value)`` pairs, oldest first."""
        return list(zip(self.times, self.values, strict=True))

    def add(self, now: float, value: float) -> None:
        if self.times and now <= self.times[-1]:
            self.values[-1] = value
        else:
            self.times.append(now)
            self.values.append(value)

    def drop_before(self, cutoff: float) -> None:
        """Forget the readings older than ``cutoff``."""
        old = bisect_left(self.times, cutoff)
        if old:
            del self.times[:old]
            del self.values[:old]

    def last_at_or_before(self, at: float) -> float | None:
        """The value of the newest reading no later than ``at``; None where every reading is later, or none is kept."""
        newest = bisect_right(self.times, at) - 1
        return self.values[newest] if newest >= 0 else None
