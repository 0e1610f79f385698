"""A starting daemon's policies rebuilt from Prometheus's history, so that a restart forgets nothing.

``predictive`` decides from what it has seen: the demand's trend over the last two horizons and, with
``learnedHeadroom``, a day of its rises. A daemon that starts empty-handed decides without a trend for
ten minutes after every restart, rollout or failover, and with a learned headroom relearns the day. So
before a workload's first decision the daemon reads the series ``record`` would write for it over the
policy's ``history_seconds`` and passes them through the policy's ``recommend``, one tick per sample,
discarding what it proposes: only the policy's state is rebuilt; nothing is written, and the behavior
history, which the state ConfigMap carries, is left alone. A history that cannot be read leaves the policy
to learn as it goes, as it did before (logged as ``warm-up-incomplete``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from autoscaler.logs import get_logger
from autoscaler.metrics.source import Failure, MetricSource
from autoscaler.record import PROMETHEUS_FAILURES, series_queries
from policies.base import Policy
from policies.policy_file import Workload
from policies.recorded import REPLICAS, recorded_observation

log = get_logger("autoscaler.warm_up")
MAX_POINTS = 10_000  # Prometheus refuses a range query of more than 11,000 points a series
NOT_ANSWERING = {Failure.TIMEOUT, Failure.UNREACHABLE}  # Prometheus, not the query: nothing more is asked of it


@dataclass
class WarmUp:
    """What one workload's warm-up read: the samples its policy saw, and the series Prometheus failed to
    answer (a series with no data yet is no failure: a new workload has no past)."""

    samples: int = 0
    failed: list[str] = field(default_factory=list)


def history_seconds(policy: Policy) -> float:
    """How much of the past a policy's state is built from (its ``history_seconds``; 0 when it keeps none)."""
    return float(policy.history_seconds)


def spans(policy: Policy, interval: float) -> list[tuple[float, float, float]]:
    """The parts of a policy's history to read, oldest first, as ``(seconds back from, seconds back to, step)``:
    its last ``detail_seconds`` (by default the whole history) a tick an ``interval`` apart, what is older
    ``coarse_intervals`` ticks apart; each wider where that would pass ``MAX_POINTS``."""
    seconds = history_seconds(policy)
    detail = min(float(policy.detail_seconds), seconds)
    coarse = int(policy.coarse_intervals) * interval
    parts = []
    if seconds > detail:
        parts.append((seconds, detail, max(coarse, (seconds - detail) / MAX_POINTS)))
    if detail > 0:
        parts.append((detail, 0.0, max(interval, detail / MAX_POINTS)))
    return parts


class HistoryRead:
    """One workload's history, read one range query at a time (``read_next``) so that a controller can spread
    the reading over ticks, then passed through the policy it was planned for (``replay``). The parts are fixed
    when it starts: reading them over several ticks leaves a gap of those ticks before the first live one, which
    the policy's state takes as it takes a missed scrape."""

    def __init__(self, workload: Workload, policy: Policy, wall: float, to_now: float, interval: float) -> None:
        self.workload, self.policy, self.wall, self.to_now = workload, policy, wall, to_now
        self.parts = [
            (name, query, part) for name, query in series_queries(workload).items() for part in spans(policy, interval)
        ]
        self.next = 0
        self.rows: dict[float, dict[str, float]] = {}
        self.failed: dict[str, str] = {}

    @property
    def done(self) -> bool:
        return self.next >= len(self.parts)

    def read_next(self, source: MetricSource) -> None:
        """Ask the next part; a query Prometheus does not answer (a timeout, unreachable) ends the reading: the
        rest would each wait their timeout out, and what was read is replayed as it is."""
        name, query, (back_from, back_to, step) = self.parts[self.next]
        self.next += 1
        # Each part ends a step before the next begins; the first tick reads now.
        series = source.query_range(query, self.wall - back_from, self.wall - back_to - step, step)
        if series.failure in PROMETHEUS_FAILURES:  # not "no data": a new workload has no past
            self.failed.setdefault(name, series.failure)
        for stamp, value in series.samples:
            self.rows.setdefault(stamp, {})[name] = value
        if series.failure in NOT_ANSWERING and not self.done:
            left = len(self.parts) - self.next
            self.failed["not asked"] = f"{left} more {'query' if left == 1 else 'queries'}"
            self.next = len(self.parts)

    def replay(self) -> WarmUp:
        """Pass what was read through the policy's ``recommend``, a tick per sample. A sample without the count asked
        for is skipped: it is what a policy's demand is measured against."""
        outcome = WarmUp(failed=[f"{name}: {why}" for name, why in self.failed.items()])
        for stamp in sorted(self.rows):
            row = self.rows[stamp]
            if (current := row.get(REPLICAS)) is None:
                continue
            self.policy.recommend(recorded_observation(self.workload, row, stamp + self.to_now, round(current)))
            outcome.samples += 1
        return outcome


def warm_up(
    workload: Workload, policy: Policy, source: MetricSource, wall: float, to_now: float, interval: float
) -> WarmUp:
    """Pass the workload's last ``history_seconds`` through ``policy.recommend``, a tick an ``interval`` apart,
    or coarser before its ``detail_seconds`` (``spans``), all read at once (``HistoryRead``). ``wall`` is the wall
    clock now and ``to_now`` what turns a wall-clock time into the decision clock."""
    history = HistoryRead(workload, policy, wall, to_now, interval)
    while not history.done:
        history.read_next(source)
    return history.replay()
