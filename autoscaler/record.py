"""``record``: range queries for every workload's metrics and replica count, in the recorded-metrics format."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TextIO

from autoscaler.logs import get_logger
from autoscaler.metrics.queries import (
    activity_query,
    default_query,
    metric_queries,
    replicas_query,
    spec_replicas_query,
)
from autoscaler.metrics.source import Failure, MetricSource
from policies.policy_file import PolicyFile, Workload
from policies.recorded import ACTIVATION, ACTIVITY, READY_REPLICAS, REPLICAS, write_rows

log = get_logger("autoscaler.record")
PROMETHEUS_FAILURES = {Failure.HTTP_ERROR, Failure.TIMEOUT, Failure.UNREACHABLE, Failure.BAD_RESPONSE}


@dataclass
class RecordOutcome:
    rows: int = 0
    failed: list[str] = field(default_factory=list)
    empty: list[str] = field(default_factory=list)


def series_queries(workload: Workload) -> dict[str, str]:
    """The PromQL of every series a workload is decided from, by its recorded-metrics name: its metrics, the
    count asked for (``replicas``: replay decides from it) and the ready count, what its policy reads beyond
    its metrics (``Workload.extra_signals``) and its activation, where it has them. ``record`` writes them; a
    starting daemon replays them (``autoscaler.warm_up``)."""
    wanted = dict(metric_queries(workload))
    wanted[REPLICAS] = spec_replicas_query(workload)
    wanted[READY_REPLICAS] = replicas_query(workload)
    for name in workload.extra_signals:
        wanted[name] = default_query(name, workload) or ""
    if workload.activation is not None:
        wanted[ACTIVATION] = workload.activation.query
        wanted[ACTIVITY] = activity_query(workload)
    return wanted


def record(
    document: PolicyFile, source: MetricSource, start: float, end: float, step: float, out: TextIO
) -> RecordOutcome:
    """Write every series; a Prometheus failure is reported in ``failed`` (the command exits 1)."""
    outcome = RecordOutcome()
    rows: list[tuple[float, str, str, float]] = []
    for workload in document.workloads:
        for name, query in series_queries(workload).items():
            series = source.query_range(query, start, end, step)
            where = f"{workload.key} {name}"
            if series.failure is not None:
                # Prometheus failing is an error (exit 1); a query with no data only a warning.
                failed = series.failure in PROMETHEUS_FAILURES
                (outcome.failed if failed else outcome.empty).append(f"{where}: {series.failure}: {series.detail}")
                report = log.error if failed else log.warning
                report(
                    "record-failed" if failed else "record-no-values",
                    workload=workload.key,
                    metric=name,
                    reason=str(series.failure),
                    detail=series.detail,
                    query=query,
                )
                continue
            for stamp, value in series.samples:
                whole = name in (REPLICAS, READY_REPLICAS)
                rows.append((stamp, workload.key, name, float(round(value)) if whole else value))
    rows.sort(key=lambda r: (r[0], r[1], r[2]))
    outcome.rows = write_rows(out, rows)
    return outcome
