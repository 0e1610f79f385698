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
from autoscaler.metrics.source import MetricSource
from autoscaler.record import PROMETHEUS_FAILURES, series_queries
from policies.base import Policy
from policies.policy_file import Workload
from simulations.recorded import REPLICAS, recorded_observation

log = get_logger("autoscaler.warm_up")
MAX_POINTS = 10_000  # Prometheus refuses a range query of more than 11,000 points a series


@dataclass
class WarmUp:
    """What one workload's warm-up read: the samples its policy saw, and the series Prometheus failed to
    answer (a series with no data yet is no failure: a new workload has no past)."""

    samples: int = 0
    failed: list[str] = field(default_factory=list)


def history_seconds(policy: Policy) -> float:
    """How much of the past a policy's state is built from (its ``history_seconds``; 0 when it keeps none)."""
    return float(getattr(policy, "history_seconds", 0.0))


def warm_up(
    workload: Workload, policy: Policy, source: MetricSource, wall: float, to_now: float, interval: float
) -> WarmUp:
    """Pass the workload's last ``history_seconds`` through ``policy.recommend``, a tick an ``interval`` apart
    (wider where that would pass ``MAX_POINTS``). ``wall`` is the wall clock now and ``to_now`` what turns a
    wall-clock time into the decision clock. A sample without the count asked for is skipped: it is what a
    policy's demand is measured against."""
    seconds = history_seconds(policy)
    outcome = WarmUp()
    if seconds <= 0:
        return outcome
    step = max(interval, seconds / MAX_POINTS)
    rows: dict[float, dict[str, float]] = {}
    for name, query in series_queries(workload).items():
        series = source.query_range(query, wall - seconds, wall - step, step)  # the first tick reads now
        if series.failure in PROMETHEUS_FAILURES:
            outcome.failed.append(f"{name}: {series.failure}")
        if series.failure is not None:  # or no data yet: a new workload has no past
            continue
        for stamp, value in series.samples:
            rows.setdefault(stamp, {})[name] = value
    for stamp in sorted(rows):
        row = rows[stamp]
        if (current := row.get(REPLICAS)) is None:
            continue
        policy.recommend(recorded_observation(workload, row, stamp + to_now, round(current)))
        outcome.samples += 1
    return outcome
