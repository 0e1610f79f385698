"""The daemon's own Prometheus metrics (prometheus-client), on a registry of its own."""

from __future__ import annotations

from typing import Generic, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

M = TypeVar("M", Counter, Gauge, Histogram)


class Labelled(Generic[M]):
    """A labelled metric whose children are kept once made: prometheus-client checks and joins the label values on
    every ``labels()``, about 2 us, and a tick asks nine a workload (0.2 s of a tick of 10,000)."""

    def __init__(self, metric: M) -> None:
        self.metric: M = metric
        self.made: dict[tuple[str, ...], M] = {}

    def labels(self, *values: str) -> M:
        child = self.made.get(values)
        if child is None:
            child = self.made[values] = self.metric.labels(*values)
        return child


class Telemetry:
    """Every series the daemon exports; the names are the contract the dashboard and the alert rules read."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        labels = ["workload"]
        self.desired = Labelled(
            Gauge("vllm_autoscaler_desired_replicas", "Replica count decided at the last tick", labels, registry=r)
        )
        self.current = Labelled(
            Gauge("vllm_autoscaler_current_replicas", "spec.replicas read at the last tick", labels, registry=r)
        )
        self.ready = Labelled(
            Gauge("vllm_autoscaler_ready_replicas", "readyReplicas read at the last tick", labels, registry=r)
        )
        self.min_replicas = Labelled(
            Gauge("vllm_autoscaler_min_replicas", "The workload's minReplicas", labels, registry=r)
        )
        self.max_replicas = Labelled(
            Gauge("vllm_autoscaler_max_replicas", "The workload's maxReplicas", labels, registry=r)
        )
        self.recommended = Labelled(
            Gauge(
                "vllm_autoscaler_recommended_replicas",
                "The policy's raw recommendation before behavior",
                labels,
                registry=r,
            )
        )
        self.heading = Labelled(
            Gauge(
                "vllm_autoscaler_heading_replicas",
                "In dry-run: the count the policy is heading for (its stabilized recommendation within the bounds)",
                labels,
                registry=r,
            )
        )
        self.owner_desired = Labelled(
            Gauge(
                "vllm_autoscaler_owner_desired_replicas",
                "The other autoscaler's desiredReplicas (HPA status), read in shadow mode beside our own",
                labels,
                registry=r,
            )
        )
        self.owner_current = Labelled(
            Gauge(
                "vllm_autoscaler_owner_current_replicas",
                "The other autoscaler's currentReplicas (HPA status), read in shadow mode",
                labels,
                registry=r,
            )
        )
        self.metric_value = Labelled(
            Gauge(
                "vllm_autoscaler_metric_value",
                "Each workload metric's value at the last tick",
                ["workload", "metric"],
                registry=r,
            )
        )
        self.decisions = Labelled(
            Counter("vllm_autoscaler_decisions_total", "Decisions by reason", ["workload", "reason"], registry=r)
        )
        self.scale_writes = Labelled(
            Counter(
                "vllm_autoscaler_scale_writes_total", "Scale writes by outcome", ["workload", "outcome"], registry=r
            )
        )
        self.query_errors = Labelled(
            Counter(
                "vllm_autoscaler_metric_query_errors_total",
                "Metric queries without a value",
                ["workload", "metric", "reason"],
                registry=r,
            )
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
        self.leader_transitions = Labelled(
            Counter(
                "vllm_autoscaler_leader_transitions_total",
                "This replica's leadership changes: acquired, or lost (not renewed in time, or taken over)",
                ["event"],
                registry=r,
            )
        )
        self.cold_start = Labelled(
            Histogram(
                "vllm_autoscaler_cold_start_seconds",
                "From a scale-up write to readyReplicas reaching the new count",
                labels,
                registry=r,
                buckets=(15, 30, 60, 120, 180, 300, 450, 600, 900, 1200, 1800),
            )
        )
        self.slo_first_tokens = Labelled(
            Counter(
                "vllm_autoscaler_slo_first_tokens_total",
                "First tokens the slo's error budget counted (a workload whose policy counts one)",
                labels,
                registry=r,
            )
        )
        self.slo_misses = Labelled(
            Counter(
                "vllm_autoscaler_slo_misses_total",
                "First tokens estimated beyond the slo's ttftSeconds of their own prefill (policies.predictive.budget)",
                labels,
                registry=r,
            )
        )
        self.slo_target = Labelled(
            Gauge("vllm_autoscaler_slo_target", "The share of requests the slo asks to meet it", labels, registry=r)
        )
        self.policy_reloads = Labelled(
            Counter("vllm_autoscaler_policy_reloads_total", "Policy file reloads by result", ["result"], registry=r)
        )
