"""One tick's observations for every workload: each distinct query sent once, however many share it."""

from __future__ import annotations

from dataclasses import dataclass, field

from autoscaler.logs import get_logger
from autoscaler.metrics.queries import metric_queries
from autoscaler.metrics.source import MetricSource, QueryResult
from autoscaler.policy_file import PolicyFile

log = get_logger("autoscaler.observer")


@dataclass(frozen=True)
class WorkloadMetrics:
    values: dict[str, float | None]
    failures: dict[str, QueryResult] = field(default_factory=dict)
    latency_s: float = 0.0

    @property
    def all_failed(self) -> bool:
        return bool(self.values) and all(v is None for v in self.values.values())


class Observer:
    def __init__(self, document: PolicyFile, source: MetricSource) -> None:
        self.source = source
        self.queries = {w.key: metric_queries(w) for w in document.workloads}

    def distinct_queries(self) -> list[str]:
        return list(dict.fromkeys(q for per in self.queries.values() for q in per.values()))

    def collect(self, now: float) -> dict[str, WorkloadMetrics]:
        results = self.source.query(self.distinct_queries(), now)
        observed: dict[str, WorkloadMetrics] = {}
        for key, per_metric in self.queries.items():
            values: dict[str, float | None] = {}
            failures: dict[str, QueryResult] = {}
            for name, query in per_metric.items():
                result = results[query]
                values[name] = result.value
                if not result.ok:
                    failures[name] = result
                    log.warning(
                        "metric-unavailable",
                        workload=key,
                        metric=name,
                        reason=str(result.failure),
                        detail=result.detail,
                        query=query,
                    )
            latency = max((results[q].latency_s for q in per_metric.values()), default=0.0)
            observed[key] = WorkloadMetrics(values, failures, latency)
        return observed
