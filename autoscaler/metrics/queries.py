"""The default PromQL of each built-in metric name, selecting a Deployment's pods (CONTRACT.md)."""

from __future__ import annotations

import math
import re

from autoscaler.policy_file import BUILTIN_METRIC_NAMES, Workload

KV_CACHE_NAMES = ("kv_cache_usage_perc", "gpu_cache_usage_perc")
_RE2_SPECIAL = re.compile(r"([\\.+*?()|\[\]{}^$])")


def promql_string(value: str) -> str:
    """A PromQL double-quoted string literal: nothing in ``value`` can end it early."""
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def regex_literal(value: str) -> str:
    """``value`` matched literally inside an RE2 regular expression."""
    return _RE2_SPECIAL.sub(r"\\\1", value)


def pod_selector(workload: Workload) -> str:
    """The pods a Deployment creates are named ``<name>-<replicaset hash>-<pod suffix>``."""
    target = workload.target
    if target.kind == "StatefulSet":
        pods = f"{regex_literal(target.name)}-[0-9]+"
    else:
        pods = f"{regex_literal(target.name)}-[a-z0-9]+-[a-z0-9]+"
    return f"namespace={promql_string(target.namespace)},pod=~{promql_string(pods)}"


def default_query(name: str, workload: Workload) -> str | None:
    selector = pod_selector(workload)
    if name == "num_requests_waiting":
        return f"sum(vllm:num_requests_waiting{{{selector}}})"
    if name == "num_requests_running":
        return f"sum(vllm:num_requests_running{{{selector}}})"
    if name in KV_CACHE_NAMES:
        # Per pod, the current name if the pod has it, else the name before vLLM 0.12.
        return (
            f"max(max by (pod) (vllm:kv_cache_usage_perc{{{selector}}}) "
            f"or max by (pod) (vllm:gpu_cache_usage_perc{{{selector}}}))"
        )
    if name == "time_to_first_token_p90_seconds":
        return f"histogram_quantile(0.9, sum by (le) (rate(vllm:time_to_first_token_seconds_bucket{{{selector}}}[1m])))"
    if name == "prompt_tokens_per_second":
        return f"sum(rate(vllm:prompt_tokens_total{{{selector}}}[1m]))"
    if name == "generation_tokens_per_second":
        return f"sum(rate(vllm:generation_tokens_total{{{selector}}}[1m]))"
    return None


def metric_queries(workload: Workload) -> dict[str, str]:
    """Each metric's query: its own, or the default for its name; a metric with neither is an error."""
    queries = {}
    for metric in workload.metrics:
        query = metric.query or default_query(metric.name, workload)
        if query is None:
            raise ValueError(
                f"{workload.key}: metric {metric.name!r} has no query and no built-in default "
                f"(built-in names: {', '.join(BUILTIN_METRIC_NAMES)})"
            )
        queries[metric.name] = query
    return queries


def replicas_query(workload: Workload) -> str:
    """The ready replica count, from kube-state-metrics unless the workload sets ``replicasQuery``."""
    if workload.replicas_query:
        return workload.replicas_query
    kind = "statefulset" if workload.target.kind == "StatefulSet" else "deployment"
    metric = (
        "kube_statefulset_status_replicas_ready" if kind == "statefulset" else "kube_deployment_status_replicas_ready"
    )
    return (
        f"max({metric}{{namespace={promql_string(workload.target.namespace)},"
        f"{kind}={promql_string(workload.target.name)}}})"
    )


# -- batched queries: one request per built-in metric, whatever the number of workloads -------------------


def pod_pattern(workload: Workload) -> re.Pattern[str]:
    """The same pods as ``pod_selector``, matched client-side (PromQL regexes are fully anchored)."""
    name = re.escape(workload.target.name)
    suffix = "-[0-9]+" if workload.target.kind == "StatefulSet" else "-[a-z0-9]+-[a-z0-9]+"
    return re.compile(f"{name}{suffix}")


def batched_query(name: str, namespaces: list[str]) -> str:
    """One query for metric ``name`` over every pod of ``namespaces``, by namespace and pod."""
    selector = "namespace=~" + promql_string("|".join(regex_literal(n) for n in sorted(set(namespaces))))
    if name == "num_requests_waiting":
        return f"sum by (namespace, pod) (vllm:num_requests_waiting{{{selector}}})"
    if name == "num_requests_running":
        return f"sum by (namespace, pod) (vllm:num_requests_running{{{selector}}})"
    if name in KV_CACHE_NAMES:
        return (
            f"max by (namespace, pod) (vllm:kv_cache_usage_perc{{{selector}}}) "
            f"or max by (namespace, pod) (vllm:gpu_cache_usage_perc{{{selector}}})"
        )
    if name == "time_to_first_token_p90_seconds":
        return f"sum by (namespace, pod, le) (rate(vllm:time_to_first_token_seconds_bucket{{{selector}}}[1m]))"
    if name == "prompt_tokens_per_second":
        return f"sum by (namespace, pod) (rate(vllm:prompt_tokens_total{{{selector}}}[1m]))"
    if name == "generation_tokens_per_second":
        return f"sum by (namespace, pod) (rate(vllm:generation_tokens_total{{{selector}}}[1m]))"
    raise ValueError(f"no batched query for {name!r}")


def batch_key(name: str) -> str:
    """Aliases share one batch."""
    return "kv_cache_usage_perc" if name in KV_CACHE_NAMES else name


def histogram_quantile(q: float, buckets: dict[float, float]) -> float | None:
    """Prometheus's ``histogram_quantile`` over cumulative bucket counts keyed by upper bound."""
    if not buckets or math.inf not in buckets:
        return None
    bounds = sorted(buckets)
    counts = [buckets[b] for b in bounds]
    total = counts[-1]
    if total <= 0:
        return None
    rank = q * total
    index = next(i for i, c in enumerate(counts) if c >= rank)
    if bounds[index] == math.inf:
        return bounds[-2] if len(bounds) > 1 else None
    lower = bounds[index - 1] if index > 0 else 0.0
    below = counts[index - 1] if index > 0 else 0.0
    in_bucket = counts[index] - below
    if in_bucket <= 0:
        return bounds[index]
    return lower + (bounds[index] - lower) * (rank - below) / in_bucket


def aggregate(name: str, values: list[tuple[dict[str, str], float]]) -> float | None:
    """Combine one workload's per-pod series as its default query would: sum, max, or a quantile."""
    if not values:
        return None
    if batch_key(name) == "kv_cache_usage_perc":
        return max(v for _, v in values)
    if name == "time_to_first_token_p90_seconds":
        buckets: dict[float, float] = {}
        for labels, value in values:
            bound = float(labels.get("le", "nan"))
            if not math.isnan(bound):
                buckets[bound] = buckets.get(bound, 0.0) + value
        return histogram_quantile(0.9, buckets)
    return sum(v for _, v in values)
