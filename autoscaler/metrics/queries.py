"""The default PromQL of each built-in metric name, selecting a Deployment's pods (docs/contract.md)."""

from __future__ import annotations

import functools
import math
import re

from policies.histogram import (
    SPREAD_QUANTILES,
    SPREAD_Z,
    count_above,
    edge_at_or_below,
    histogram_quantile,
    lognormal_spread,
)
from policies.metric_names import (
    ACTIVITY_METRICS,
    BUILTIN_METRIC_NAMES,
    FIRST_TOKENS_OVER_SLO,
    FIRST_TOKENS_RATE,
    PROMPT_SPREAD,
    PROMPT_SPREAD_WINDOW_S,
    TTFT_P90,
    TTFT_SECONDS_RATE,
    TTFT_SLO,
    canonical,
)
from policies.policy_file import Workload

_RE2_SPECIAL = re.compile(r"([\\.+*?()|\[\]{}^$])")


def promql_string(value: str) -> str:
    """A PromQL double-quoted string literal: nothing in ``value`` can end it early."""
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def regex_literal(value: str) -> str:
    """``value`` matched literally inside an RE2 regular expression."""
    return _RE2_SPECIAL.sub(r"\\\1", value)


def namespace_selector(namespaces: list[str]) -> str:
    """A label matcher for the pods of ``namespaces``, each matched literally."""
    return "namespace=~" + promql_string("|".join(regex_literal(n) for n in sorted(set(namespaces))))


POD_SUFFIX = {"Deployment": "-[a-z0-9]+-[a-z0-9]+", "StatefulSet": "-[0-9]+"}
"""What follows the target's name in its pods' names: a Deployment's ReplicaSet hash and pod suffix, a
StatefulSet's ordinal."""


def pod_selector(workload: Workload) -> str:
    """The target's pods: its name and the kind's ``POD_SUFFIX``."""
    target = workload.target
    pods = regex_literal(target.name) + POD_SUFFIX[target.kind]
    return f"namespace={promql_string(target.namespace)},pod=~{promql_string(pods)}"


# Each built-in metric as (aggregation, series expression over the pod selector ``{S}``).
_SERIES = {
    "num_requests_waiting": ("sum", "vllm:num_requests_waiting{S}"),
    "num_requests_running": ("sum", "vllm:num_requests_running{S}"),
    "kv_cache_usage_perc": ("max", None),
    "time_to_first_token_p90_seconds": ("sum", "rate(vllm:time_to_first_token_seconds_bucket{S}[1m])"),
    "prompt_tokens_per_second": ("sum", "rate(vllm:prompt_tokens_total{S}[1m])"),
    "generation_tokens_per_second": ("sum", "rate(vllm:generation_tokens_total{S}[1m])"),
    TTFT_SECONDS_RATE: ("sum", "rate(vllm:time_to_first_token_seconds_sum{S}[1m])"),
    FIRST_TOKENS_RATE: ("sum", "rate(vllm:time_to_first_token_seconds_count{S}[1m])"),
    PROMPT_SPREAD: ("sum", "rate(vllm:request_prompt_tokens_bucket{S}[" + f"{PROMPT_SPREAD_WINDOW_S}s])"),
}
HISTOGRAMS = (TTFT_P90, PROMPT_SPREAD)  # read by ``le``, then made one value (``aggregate``)


def _expression(name: str, selector: str, grouping: str) -> str:
    """The PromQL of a built-in metric over ``selector``, grouped by ``grouping`` labels.

    The KV-cache gauge reads, per pod, the current name where the pod has it and otherwise the name
    before vLLM 0.12; the TTFT quantile is left to the caller (over ``le`` buckets).
    """
    key = batch_key(name)
    aggregation, series = _SERIES[key]
    labels = ", ".join(grouping.split(",")) if grouping else ""
    if key == "kv_cache_usage_perc":
        by_pod = ", ".join(dict.fromkeys(["pod", *[g for g in labels.split(", ") if g]]))
        return (
            f"max by ({by_pod}) (vllm:kv_cache_usage_perc{{{selector}}}) "
            f"or max by ({by_pod}) (vllm:gpu_cache_usage_perc{{{selector}}})"
        )
    body = (series or "").replace("{S}", f"{{{selector}}}")
    return f"{aggregation} by ({labels}) ({body})" if labels else f"{aggregation}({body})"


def default_query(name: str, workload: Workload) -> str | None:
    """One workload's query for a built-in metric: its pods, aggregated to one value."""
    if batch_key(name) not in _SERIES:
        return None
    selector = pod_selector(workload)
    if name in (TTFT_P90, TTFT_SLO):
        return f"histogram_quantile({workload.histogram_reading(name):g}, {_expression(name, selector, 'le')})"
    if name == FIRST_TOKENS_OVER_SLO:
        return _over_slo(selector, workload.histogram_reading(name), "sum")
    if name == PROMPT_SPREAD:  # histogram.lognormal_spread, in PromQL
        low, high = (f"ln(histogram_quantile({q:g}, {_expression(name, selector, 'le')}))" for q in SPREAD_QUANTILES)
        return f"({high} - {low}) / {SPREAD_Z:g}"
    if batch_key(name) == "kv_cache_usage_perc":
        return f"max({_expression(name, selector, '')})"
    return _expression(name, selector, "")


def _over_slo(selector: str, seconds: float, aggregation: str) -> str:
    """The rate of first tokens above the TTFT histogram's largest edge at or below ``seconds``
    (``histogram.count_above``) over ``selector``'s pods, aggregated by ``aggregation`` (``sum`` or ``sum by
    (...)``): the ``+Inf`` bucket's rate less that edge's, the edge vLLM's (``TTFT_BUCKETS``) as ``prometheus_client``
    writes ``le``. No value where the edge has no series (another bucket layout): the budget is then not bounded."""
    sides = [
        f"{aggregation} (rate(vllm:time_to_first_token_seconds_bucket{{{selector},le={le}}}[1m]))"
        for le in _les(seconds)
    ]
    return " - ".join(sides)


def _les(seconds: float) -> list[str]:
    """The ``le`` labels the first tokens above ``seconds`` are read from: ``+Inf``, less the edge at or below."""
    edge = edge_at_or_below(seconds)
    return [promql_string(le) for le in ["+Inf", *([] if edge is None else [repr(edge)])]]


def metric_queries(workload: Workload) -> dict[str, str]:
    """Each metric's query: its own, or the default for its name; a metric with neither is an error, and so is
    a workload with no metrics (an slo and no capacity: ``simulate`` measures one, the daemon cannot)."""
    if workload.needs_capacity:
        raise ValueError(
            f"{workload.key}: capacity: needed to run a workload with an slo and no metrics (what one replica "
            "sustains within it: simulate --write-config measures it)"
        )
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


def activity_query(workload: Workload) -> str:
    """The replicas' activity as one query: running plus waiting plus prompt tokens per second; empty (no
    value) while any of them has no series."""
    return " + ".join(f"({default_query(name, workload)})" for name in ACTIVITY_METRICS)


_OWNED_COUNTS = {
    "spec": {"Deployment": "kube_deployment_spec_replicas", "StatefulSet": "kube_statefulset_replicas"},
    "ready": {
        "Deployment": "kube_deployment_status_replicas_ready",
        "StatefulSet": "kube_statefulset_status_replicas_ready",
    },
}
"""kube-state-metrics' counts by target kind: the count asked for (``spec.replicas``) and the ready one."""


def _count_query(count: str, workload: Workload) -> str:
    kind = workload.target.kind
    return (
        f"max({_OWNED_COUNTS[count][kind]}{{namespace={promql_string(workload.target.namespace)},"
        f"{kind.lower()}={promql_string(workload.target.name)}}})"
    )


def spec_replicas_query(workload: Workload) -> str:
    """The count the target asked for (``spec.replicas``), from kube-state-metrics."""
    return _count_query("spec", workload)


def replicas_query(workload: Workload) -> str:
    """The ready replica count, from kube-state-metrics unless the workload sets ``replicasQuery``."""
    return workload.replicas_query or _count_query("ready", workload)


# -- batched queries: one request per built-in metric, whatever the number of workloads -------------------


def pod_pattern(workload: Workload) -> re.Pattern[str]:
    """The same pods as ``pod_selector``, matched client-side (PromQL regexes are fully anchored)."""
    return re.compile(re.escape(workload.target.name) + POD_SUFFIX[workload.target.kind])


_GROUP = re.compile("[a-z0-9]+")


def pod_owners(pod: str) -> list[tuple[bool, str]]:
    """The workloads whose ``pod_pattern`` matches ``pod``, as ``(is a StatefulSet, name)``: a Deployment's pod is its
    name and two groups of ``[a-z0-9]`` (ReplicaSet and pod), a StatefulSet's its name and an ordinal. One pod name
    can read both ways (``web-0-1`` is Deployment ``web``'s and StatefulSet ``web-0``'s); each is listed, as each
    pattern would match it (tests/test_metric_source.py holds the two to each other)."""
    owners = []
    parts = pod.rsplit("-", 2)
    if len(parts) == 3 and parts[0] and _GROUP.fullmatch(parts[1]) and _GROUP.fullmatch(parts[2]):
        owners.append((False, parts[0]))
    head, dash, ordinal = pod.rpartition("-")
    if dash and head and ordinal.isascii() and ordinal.isdigit():
        owners.append((True, head))
    return owners


def batched_query(name: str, kinds: dict[str, list[str]], staleness: float | None = None) -> str:
    """One query for metric ``name`` over the targets of each kind in its namespaces (``kinds``: kind to namespaces):
    one series per target, labelled ``namespace``, ``owner`` (its name) and ``kind``, each what its own query
    (``default_query``) gives over its pods, but a histogram left by ``le`` (``aggregate`` makes it one value, at each
    workload's own quantile). With ``staleness``, the pods whose newest sample is older (``freshness_query``) are left
    out, so that a workload's value is its fresh pods' alone. The pods are grouped by owner on the server: 10,000
    workloads' pods answered client-side cost a 2 MB answer and a tenth of a second of grouping by name per metric
    (docs/decisions/daemon-scale.md); the kinds are one request, a Deployment and a StatefulSet of one name apart."""
    if batch_key(name) not in _SERIES:
        raise ValueError(f"no batched query for {name!r}")
    parts = []
    for kind, namespaces in sorted(kinds.items()):
        selector = namespace_selector(namespaces)
        stale = None if staleness is None else freshness_query(namespaces, staleness)
        parts.append(f'label_replace({_by_owner(name, selector, kind, stale)}, "{KIND}", "{kind}", "", "")')
    return " or ".join(parts)


def _by_owner(name: str, selector: str, kind: str, stale: str | None = None) -> str:
    """Built-in metric ``name`` over ``selector``'s pods, by namespace and owner (and ``le`` for a histogram), the
    pods of ``stale`` left out."""
    key = batch_key(name)
    histogram = key in HISTOGRAMS
    if key == "kv_cache_usage_perc":  # a pod's fallback to the gauge's older name is matched pod by pod
        by_pod = _expression(name, selector, "namespace,pod")
    else:  # a sum of the pods' series, summed by owner at once: a sum by pod first cost Prometheus a sixth more
        by_pod = (_SERIES[key][1] or "").replace("{S}", f"{{{selector}}}")
    if stale is not None:
        by_pod = f"({by_pod}) unless on (namespace, pod) ({stale})"
    # A pod's owner from its name, as ``pod_owners`` reads it: the greedy group leaves the kind's suffix.
    owned = f'label_replace({by_pod}, "{OWNER}", "$1", "pod", {promql_string("(.+)" + POD_SUFFIX[kind])})'
    aggregation = "max" if key == "kv_cache_usage_perc" else "sum"
    return f"{aggregation} by (namespace, {OWNER}{', le' if histogram else ''}) ({owned})"


FRESHNESS = "freshness"


def freshness_query(namespaces: list[str], staleness: float) -> str:
    """The pods whose newest vLLM sample is older than ``staleness`` seconds, each with that sample's time, labelled
    by namespace and pod (a pod may answer a series for each of its label sets: ``Observer`` takes the newest). An
    instant query stamps every value with the evaluation time; ``timestamp()`` of a plain selector gives the sample's
    own, so a frozen exporter shows. One gauge vLLM always exports dates the pod: every sample of a scrape has the
    scrape's time (a second gauge, and grouping by pod first, cost Prometheus two fifths more for the same answer).
    Only stale pods are answered (``time()`` is the evaluation time): a pod not in the answer is fresh, and 20,000
    fresh pods cost no 2 MB answer a tick."""
    return f"timestamp(vllm:num_requests_waiting{{{namespace_selector(namespaces)}}}) < (time() - {staleness:g})"


@functools.cache  # a few names, asked four times a tick a workload
def batch_key(name: str) -> str:
    """Aliases share one batch, and so do the two TTFT quantiles and the first tokens above the slo: one histogram."""
    return TTFT_P90 if name in (TTFT_SLO, FIRST_TOKENS_OVER_SLO) else canonical(name)


def aggregate(name: str, values: list[tuple[dict[str, str], float]], reading: float = 0.9) -> float | None:
    """Combine one workload's per-pod series as its default query would: sum, max, or what a histogram gives at
    ``reading`` (``Workload.histogram_reading``: a quantile, or the first tokens above the slo's seconds)."""
    if not values:
        return None
    key = batch_key(name)
    if key in HISTOGRAMS:
        buckets: dict[float, float] = {}
        for labels, value in values:
            bound = float(labels.get("le", "nan"))
            if not math.isnan(bound):
                buckets[bound] = buckets.get(bound, 0.0) + value
        if name == FIRST_TOKENS_OVER_SLO:
            return count_above(reading, buckets)
        return lognormal_spread(buckets) if name == PROMPT_SPREAD else histogram_quantile(reading, buckets)
    if len(values) == 1:  # a batch's series is a workload's already (``batched_query``)
        return values[0][1]
    return max(v for _, v in values) if key == "kv_cache_usage_perc" else sum(v for _, v in values)


# -- owned queries: one series per workload of several namespaces, for range queries -----------------------

OWNER = "owner"
KIND = "kind"  # a batch's series: the target's kind (``batched_query``)


def owned_query(
    series: str, namespaces: list[str], kind: str, reading: float = 0.9, names: list[str] | None = None
) -> str:
    """One query for ``series`` of every workload of ``kind`` in ``namespaces`` (or only of the targets ``names``,
    within one namespace), one result series per workload labelled ``namespace`` and ``owner`` (the target's name),
    each the value its own query gives (``default_query``, ``spec_replicas_query``, ``replicas_query``,
    ``activity_query``): the pods' series are aggregated by the owner their names say on the server, so that a day
    of history is one series a workload, not one a pod and histogram bucket. ``series`` is a built-in metric name,
    ``spec`` or ``ready`` (the counts), or ``activity``."""
    selector = namespace_selector(namespaces)
    targets = None if names is None else "(" + "|".join(regex_literal(n) for n in sorted(set(names))) + ")"
    if series in _OWNED_COUNTS:
        label = kind.lower()
        chosen = "" if targets is None else f",{label}=~{promql_string(targets)}"
        counts = f"max by (namespace, {label}) ({_OWNED_COUNTS[series][kind]}{{{selector}{chosen}}})"
        return f'label_replace({counts}, "{OWNER}", "$1", "{label}", "(.+)")'
    if series == "activity":
        return " + ".join(f"({owned_query(name, namespaces, kind, names=names)})" for name in ACTIVITY_METRICS)
    if targets is not None:
        selector += f",pod=~{promql_string(targets + POD_SUFFIX[kind])}"
    if series == FIRST_TOKENS_OVER_SLO:  # the +Inf bucket's rate less the edge's, as its own query reads it
        by = f"sum by (namespace, {OWNER})"
        return " - ".join(f"{by} ({_by_owner(series, f'{selector},le={le}', kind)})" for le in _les(reading))
    histogram = batch_key(series) in HISTOGRAMS
    grouped = _by_owner(series, selector, kind)
    if series == PROMPT_SPREAD:  # histogram.lognormal_spread, in PromQL
        low, high = (f"ln(histogram_quantile({q:g}, {grouped}))" for q in SPREAD_QUANTILES)
        return f"({high} - {low}) / {SPREAD_Z:g}"
    if histogram:
        return f"histogram_quantile({reading:g}, {grouped})"
    return grouped
