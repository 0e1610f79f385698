"""The default PromQL of each built-in metric name, selecting a Deployment's pods (CONTRACT.md)."""

from __future__ import annotations

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
