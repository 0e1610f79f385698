"""One tick's observations for every workload, with as few Prometheus requests as possible.

A metric with its own ``query`` is sent as is, each distinct query once however many workloads share it.
A built-in metric without one is batched: one query per metric name covers every workload of either kind, its
pods grouped by the owner their names say on the server, each workload's series what its default query gives
(``metrics.queries.batched_query``, ``default_query``). So a tick over ten thousand workloads costs a handful of
requests. Two more date the samples: one the pods' (``stalenessSeconds`` for built-in metrics: a stale pod is left
out of the batches, and a workload whose every pod is stale held), one the selectors of every custom query
(``metrics.freshness``). They are asked at once, ``QUERY_CONCURRENCY`` at a time: Prometheus evaluates them on
cores the daemon leaves idle while it waits (a tick's three at 10,000 workloads answered in 0.35 s where one after
another took 0.5). A tick whose dates find a stale pod asks the batches again, without the stale pods.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from autoscaler.concurrency import each
from autoscaler.logs import get_logger
from autoscaler.metrics.freshness import LABEL, selectors
from autoscaler.metrics.freshness import freshness_query as custom_freshness_query
from autoscaler.metrics.queries import (
    KIND,
    OWNER,
    aggregate,
    batch_key,
    batched_query,
    freshness_query,
    metric_queries,
    pod_owners,
)
from autoscaler.metrics.source import Failure, MetricSource, QueryResult, VectorResult
from policies.activation import replica_activity
from policies.base import no_requests
from policies.metric_names import ACTIVITY_METRICS
from policies.policy_file import PolicyFile, Workload

log = get_logger("autoscaler.observer")
QUERY_CONCURRENCY = 4
Owned = dict[tuple[str, str, str], list[tuple[dict[str, str], float]]]  # a batch's series by (namespace, kind, name)


@dataclass(frozen=True, slots=True)
class WorkloadMetrics:
    values: dict[str, float | None]
    failures: dict[str, QueryResult] = field(default_factory=dict)
    activation: float | None = None  # with an ``activation`` block: its query's value
    activity: float | None = None  # and the sum of ACTIVITY_METRICS over its pods; None unless all have one

    @property
    def all_failed(self) -> bool:
        return bool(self.values) and all(v is None for v in self.values.values())


class Observer:
    def __init__(self, document: PolicyFile, source: MetricSource) -> None:
        self.source = source
        self.workloads = {w.key: w for w in document.workloads}
        self.queries = {w.key: metric_queries(w) for w in document.workloads}  # also validates every metric
        self.custom = {w.key: {m.name: m.query for m in w.metrics if m.query} for w in document.workloads}
        self.batched = {w.key: [m.name for m in w.metrics if not m.query] for w in document.workloads}
        self.activations = {w.key: w.activation.query for w in document.workloads if w.activation is not None}
        for key in self.activations:
            self.batched[key] = list(dict.fromkeys([*self.batched[key], *ACTIVITY_METRICS]))
        self.extras = {w.key: w.extra_signals for w in document.workloads if w.extra_signals}
        for key, extra in self.extras.items():
            self.batched[key] = list(dict.fromkeys([*self.batched[key], *extra]))
        kinds: dict[str, dict[str, list[str]]] = {}  # by batch key: kind to namespaces
        for workload in document.workloads:
            target = workload.target
            for name in self.batched[workload.key]:
                kinds.setdefault(batch_key(name), {}).setdefault(target.kind, []).append(target.namespace)
        self.staleness = float(document.prometheus.staleness_seconds)
        self.batches = {key: batched_query(key, spaces) for key, spaces in kinds.items()}
        # The same without the pods whose samples are stale, asked instead on a tick that finds some: the costlier
        # query (twice Prometheus's time at 20,000 pods) only then.
        self.fresh_batches = {key: batched_query(key, spaces, self.staleness) for key, spaces in kinds.items()}
        every = sorted({n for spaces in kinds.values() for each in spaces.values() for n in each})
        self.freshness = freshness_query(every, self.staleness) if every else None
        self._custom_ages()
        self.last_latencies: list[float] = []  # one per request of the last collect
        # (namespace, kind, name), as a batch's index keys a workload: the age of the newest sample of a workload's
        # stale pods, at the last collect; only workloads with a stale pod are here
        self.stale: dict[tuple[str, str, str], float] = {}
        # Each workload's key in a batch's index and in ``stale``, made once: a tick asks it for every metric.
        self._owner = {w.key: (w.target.namespace, w.target.kind, w.target.name) for w in document.workloads}

    def _custom_ages(self) -> None:
        """The selectors each custom query reads, for the one request a tick that dates them (``metrics.freshness``)."""
        chosen: dict[str, int] = {}  # each selector once, by its index in the dating query
        self.custom_selectors: dict[str, list[int]] = {}
        for query in self._custom_queries():
            found = selectors(query)
            if found is None:
                log.warning("custom-query-age-unknown", query=query, detail="promql-parser cannot read it")
                continue
            self.custom_selectors[query] = [chosen.setdefault(f, len(chosen)) for f in found]
        self.selector_names = list(chosen)
        self.custom_freshness = custom_freshness_query(self.selector_names) if chosen else None

    def requests_per_tick(self) -> int:
        fresh = (self.freshness is not None) + (self.custom_freshness is not None)
        return len(self.batches) + len(self._custom_queries()) + fresh

    def _dated(self, query: str, result: QueryResult, newest: dict[int, float], now: float) -> QueryResult:
        """A custom query's value held as stale when a selector it reads has no sample within ``stalenessSeconds``
        (its newest is older)."""
        if not result.ok:
            return result
        dated = [(now - newest[i], i) for i in self.custom_selectors.get(query, []) if i in newest]
        age, index = max(dated, default=(0.0, 0))  # the stalest selector; one with no sample is no evidence of age
        if age <= self.staleness:
            return result
        selector = self.selector_names[index]
        detail = f"the newest sample of {selector} is {age:.0f} s old (stalenessSeconds {self.staleness:g})"
        return QueryResult(None, Failure.STALE, detail, latency_s=result.latency_s)

    def _custom_queries(self) -> list[str]:
        own = [q for per in self.custom.values() for q in per.values() if q]
        return list(dict.fromkeys([*own, *self.activations.values()]))

    def _vectors(self, queries: list[str], now: float) -> list[tuple[VectorResult, Owned]]:
        """Each query's answer and its series by workload (``_index``), ``QUERY_CONCURRENCY`` at once: an answer is
        indexed in its thread, while the others are still awaited."""

        def ask(query: str) -> tuple[VectorResult, Owned]:
            vector = self.source.query_vector(query, now)
            return vector, self._index(vector)

        return each(ask, queries, QUERY_CONCURRENCY, "query")

    def collect(self, now: float) -> dict[str, WorkloadMetrics]:
        custom = dict(self.source.query(self._custom_queries(), now))
        dates = [query for query in (self.custom_freshness, self.freshness) if query is not None]
        answers = self._vectors([*dates, *self.batches.values()], now)
        dated = answers.pop(0)[0] if self.custom_freshness is not None else None
        fresh = answers.pop(0)[0] if self.freshness is not None else None
        if dated is not None:
            newest = {int(x.labels[LABEL]): x.value for x in dated.samples if x.labels.get(LABEL, "").isdigit()}
            custom = {q: self._dated(q, r, newest, now) for q, r in custom.items()}
        if fresh is not None and fresh.samples:  # asked again with the stale pods left out
            answers = self._vectors(list(self.fresh_batches.values()), now)
        vectors = {key: vector for key, (vector, _) in zip(self.batches, answers, strict=True)}
        owned = {key: index for key, (_, index) in zip(self.batches, answers, strict=True)}
        self.last_latencies = [r.latency_s for r in custom.values()] + [v.latency_s for v in vectors.values()]
        self.stale = {}
        if fresh is not None:
            self.last_latencies.append(fresh.latency_s)
            for sample in fresh.samples:
                namespace, age = sample.labels.get("namespace", ""), now - sample.value
                for stateful, owner in pod_owners(sample.labels.get("pod", "")):
                    whose = (namespace, "StatefulSet" if stateful else "Deployment", owner)
                    self.stale[whose] = min(age, self.stale.get(whose, age))
        observed: dict[str, WorkloadMetrics] = {}
        for key, workload in self.workloads.items():
            values: dict[str, float | None] = {}
            failures: dict[str, QueryResult] = {}
            for metric in workload.metrics:
                if metric.query:
                    result = custom[metric.query]
                else:
                    result = self._from_batch(workload, metric.name, vectors, owned)
                values[metric.name] = result.value
                if not result.ok and not no_requests(metric, result.value):  # no load, not a failure (metric_value)
                    failures[metric.name] = result
                    log.warning(
                        "metric-unavailable",
                        workload=key,
                        metric=metric.name,
                        reason=str(result.failure),
                        detail=result.detail,
                        query=self.queries[key][metric.name],
                    )
            for name in self.extras.get(key, ()):  # no value only pauses what it feeds: no failure, no warning
                values[name] = self._from_batch(workload, name, vectors, owned).value
            observed[key] = WorkloadMetrics(values, failures)
            if key in self.activations:
                observed[key] = self._with_activation(workload, observed[key], custom, vectors, owned)
        return observed

    def _with_activation(
        self,
        workload: Workload,
        metrics: WorkloadMetrics,
        custom: Mapping[str, QueryResult],
        vectors: dict[str, VectorResult],
        owned: dict[str, Owned],
    ) -> WorkloadMetrics:
        """The activation query's value, and the replicas' activity: no series for a pod that has one (a
        zero-replica fleet, a scrape that failed) is no value, never "no requests"."""
        gateway = custom[self.activations[workload.key]]
        if not gateway.ok:
            metrics.failures["activation"] = gateway
            log.warning(
                "metric-unavailable",
                workload=workload.key,
                metric="activation",
                reason=str(gateway.failure),
                detail=gateway.detail,
                query=self.activations[workload.key],
            )
        activity = replica_activity(self._from_batch(workload, name, vectors, owned).value for name in ACTIVITY_METRICS)
        return replace(metrics, activation=gateway.value, activity=activity)

    @staticmethod
    def _index(vector: VectorResult) -> Owned:
        """A batch's series by workload (``batched_query`` answers one a workload, or one a bucket)."""
        index: Owned = {}
        for sample in vector.samples:
            labels = sample.labels
            owner = (labels.get("namespace", ""), labels.get(KIND, ""), labels.get(OWNER, ""))
            index.setdefault(owner, []).append((labels, sample.value))
        return index

    def _from_batch(
        self, workload: Workload, name: str, vectors: dict[str, VectorResult], owned: dict[str, Owned]
    ) -> QueryResult:
        """A workload's value of built-in metric ``name`` from its batch's answer; without one, why not: every pod
        stale, or no series."""
        batch = batch_key(name)
        vector = vectors[batch]
        if vector.failure is not None:
            return QueryResult(None, vector.failure, vector.detail, latency_s=vector.latency_s)
        owner = self._owner[workload.key]
        mine = owned[batch].get(owner, [])
        age = self.stale.get(owner) if not mine and self.stale else None
        if age is not None:  # its stale pods were left out, and no other has a series
            detail = f"the newest sample of the workload's pods is {age:.0f} s old"
            detail += f" (stalenessSeconds {self.staleness:g})"
            return QueryResult(None, Failure.STALE, detail, latency_s=vector.latency_s)
        return self._aggregate(workload, name, mine, vector)

    @staticmethod
    def _aggregate(
        workload: Workload, name: str, mine: list[tuple[dict[str, str], float]], vector: VectorResult
    ) -> QueryResult:
        value = aggregate(name, mine, workload.histogram_reading(name))
        if value is None:
            detail = "no series for the workload's pods" if not mine else "the histogram has no observations"
            return QueryResult(None, Failure.EMPTY, detail, latency_s=vector.latency_s)
        return QueryResult(value, None, "", latency_s=vector.latency_s)
