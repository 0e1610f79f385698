"""The daemon's own Prometheus metrics (prometheus-client), on a registry of its own."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric


class Series:
    """One series' value, a float in a slot. prometheus-client's child of a labelled metric is a lock, a value object
    and the metric's own attributes, about 600 bytes, and its ``labels()`` checks the values on every call: nine a
    workload were 53 MB and 0.2 s of a tick at 10,000 workloads."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0

    def set(self, value: float) -> None:
        self.value = float(value)

    def inc(self, amount: float = 1.0) -> None:
        self.value += amount


class Family:
    """A per-workload gauge or counter: its ``Series`` by label values, exposed as one family when the registry is
    scraped (``collect``, a custom collector as kube-state-metrics' are)."""

    def __init__(
        self, kind: str, name: str, documentation: str, labelnames: list[str], registry: CollectorRegistry
    ) -> None:
        self.kind, self.name, self.documentation, self.labelnames = kind, name, documentation, labelnames
        self.series: dict[tuple[str, ...], Series] = {}
        registry.register(self)

    def labels(self, *values: str) -> Series:
        found = self.series.get(values)
        if found is None:
            found = self.series[values] = Series()
        return found

    def describe(self) -> list[Metric]:
        return [self._family()]

    def collect(self) -> Iterator[Metric]:
        family = self._family()
        for values, series in list(self.series.items()):  # a copy: a tick may add a series while a scrape reads
            family.add_metric(list(values), series.value)
        yield family

    def _family(self) -> GaugeMetricFamily | CounterMetricFamily:
        kind = GaugeMetricFamily if self.kind == "gauge" else CounterMetricFamily
        return kind(self.name, self.documentation, labels=self.labelnames)


class Telemetry:
    """Every series the daemon exports; the names are the contract the dashboard and the alert rules read."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        labels = ["workload"]
        self.desired = Family(
            "gauge", "vllm_autoscaler_desired_replicas", "Replica count decided at the last tick", labels, r
        )
        self.current = Family(
            "gauge", "vllm_autoscaler_current_replicas", "spec.replicas read at the last tick", labels, r
        )
        self.ready = Family("gauge", "vllm_autoscaler_ready_replicas", "readyReplicas read at the last tick", labels, r)
        self.min_replicas = Family("gauge", "vllm_autoscaler_min_replicas", "The workload's minReplicas", labels, r)
        self.max_replicas = Family("gauge", "vllm_autoscaler_max_replicas", "The workload's maxReplicas", labels, r)
        self.recommended = Family(
            "gauge",
            "vllm_autoscaler_recommended_replicas",
            "The policy's raw recommendation before behavior",
            labels,
            r,
        )
        self.heading = Family(
            "gauge",
            "vllm_autoscaler_heading_replicas",
            "In dry-run: the count the policy is heading for (its stabilized recommendation within the bounds)",
            labels,
            r,
        )
        self.owner_desired = Family(
            "gauge",
            "vllm_autoscaler_owner_desired_replicas",
            "The other autoscaler's desiredReplicas (HPA status), read in shadow mode beside our own",
            labels,
            r,
        )
        self.owner_current = Family(
            "gauge",
            "vllm_autoscaler_owner_current_replicas",
            "The other autoscaler's currentReplicas (HPA status), read in shadow mode",
            labels,
            r,
        )
        self.metric_value = Family(
            "gauge",
            "vllm_autoscaler_metric_value",
            "Each workload metric's value at the last tick",
            ["workload", "metric"],
            r,
        )
        self.decisions = Family(
            "counter", "vllm_autoscaler_decisions_total", "Decisions by reason", ["workload", "reason"], r
        )
        self.scale_writes = Family(
            "counter", "vllm_autoscaler_scale_writes_total", "Scale writes by outcome", ["workload", "outcome"], r
        )
        self.query_errors = Family(
            "counter",
            "vllm_autoscaler_metric_query_errors_total",
            "Metric queries without a value",
            ["workload", "metric", "reason"],
            r,
        )
        self._process(r)

    def _process(self, r: CollectorRegistry) -> None:
        """What is not per workload: the queries, the ticks, the Lease, the policy file; and the cold starts and
        the slo's counted budget, per workload but read over time rather than tick by tick."""
        labels = ["workload"]
        self.query_latency = Histogram(
            "vllm_autoscaler_metric_query_seconds",
            "Prometheus query latency",
            registry=r,
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
        )
        self.tick_duration = Histogram(
            "vllm_autoscaler_tick_seconds",
            "Duration of one tick over every workload",
            registry=r,
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
        )
        self.leader = Gauge(
            "vllm_autoscaler_leader", "1 while this replica holds the lease (or needs none)", registry=r
        )
        self.leader_transitions = Family(
            "counter",
            "vllm_autoscaler_leader_transitions_total",
            "This replica's leadership changes: acquired, or lost (not renewed in time, or taken over)",
            ["event"],
            r,
        )
        self.cold_start = Histogram(
            "vllm_autoscaler_cold_start_seconds",
            "From a scale-up write to readyReplicas reaching the new count",
            labels,
            registry=r,
            buckets=(15, 30, 60, 120, 180, 300, 450, 600, 900, 1200, 1800),
        )
        self.slo_first_tokens = Family(
            "counter",
            "vllm_autoscaler_slo_first_tokens_total",
            "First tokens the slo's error budget counted (a workload whose policy counts one)",
            labels,
            r,
        )
        self.slo_misses = Family(
            "counter",
            "vllm_autoscaler_slo_misses_total",
            "First tokens estimated beyond the slo's ttftSeconds of their own prefill (policies.predictive.budget)",
            labels,
            r,
        )
        self.slo_target = Family(
            "gauge", "vllm_autoscaler_slo_target", "The share of requests the slo asks to meet it", labels, r
        )
        self.policy_reloads = Family(
            "counter", "vllm_autoscaler_policy_reloads_total", "Policy file reloads by result", ["result"], r
        )
