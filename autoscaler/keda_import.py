"""``import-keda``: a KEDA ScaledObject with Prometheus triggers as this project's policy file."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import yaml

from policies.policy_file import PolicyFileError, parse_policy_document

KEDA_PAUSED = "autoscaling.keda.sh/paused"
KEDA_PAUSED_REPLICAS = "autoscaling.keda.sh/paused-replicas"
# sum(x)/count(x), avg(x), avg by (...)(x): a per-pod average.
PER_POD_AVERAGE = re.compile(r"(?is)(\bavg\s*(by|without)?\s*(\([^)]*\))?\s*\()|(\bsum\s*\(.*\)\s*/\s*count\s*\()")
KV_METRIC = re.compile(r"vllm:(gpu|kv)_cache_usage_perc")
VLLM_METRIC = re.compile(r"\bvllm:")


class KedaImportError(ValueError):
    """Input that is not a ScaledObject this command can convert."""


@dataclass
class Conversion:
    policy: dict[str, Any]
    warnings: list[str] = field(default_factory=list)
    corrections: dict[str, list[str]] = field(default_factory=dict)  # metric name: what was changed and why

    def yaml(self) -> str:
        """The policy file, each correction as a comment above the metric it changed, the warnings on top
        (so ``> policy.yaml`` keeps them)."""
        text = yaml.safe_dump(self.policy, sort_keys=False, default_flow_style=None, width=110)
        lines = text.splitlines()
        for name, notes in self.corrections.items():
            at = next((i for i, line in enumerate(lines) if line.strip() == f"- name: {name}"), None)
            if at is None:
                continue
            indent = lines[at][: len(lines[at]) - len(lines[at].lstrip())]
            lines[at:at] = [f"{indent}# import-keda corrected: {note}" for note in notes]
        head = [f"# import-keda: {w}" for w in self.warnings]
        return "\n".join([*head, *lines]) + "\n"


def _closing(text: str, start: int) -> int | None:
    """The index of the parenthesis closing the one at ``start``."""
    depth = 0
    for i in range(start, len(text)):
        depth += {"(": 1, ")": -1}.get(text[i], 0)
        if depth == 0:
            return i
    return None


def fleet_total(query: str) -> str | None:
    """A per-pod average's fleet total: ``avg(X)`` and ``avg by (...) (X)`` become ``sum(X)``,
    ``sum(X) / count(Y)`` becomes ``sum(X)``; None for a query of another shape (left as written)."""
    text = query.strip()
    average = re.match(r"(?is)avg\s*(?:(?:by|without)\s*\([^)]*\)\s*)?\(", text)
    if average:
        end = _closing(text, average.end() - 1)
        if end == len(text) - 1:
            return f"sum({text[average.end() : end].strip()})"
        return None
    ratio = re.match(r"(?is)sum\s*\(", text)
    if ratio:
        end = _closing(text, ratio.end() - 1)
        rest = text[end + 1 :] if end is not None else ""
        if end is not None and re.match(r"(?is)\s*/\s*count\s*\(", rest):
            return text[: end + 1]
    return None


def _query_name(query: str) -> str | None:
    """The vLLM metric a query reads, without the ``vllm:`` prefix (``num_requests_waiting``)."""
    found = re.search(r"vllm:([A-Za-z_][A-Za-z0-9_]*)", query)
    return found.group(1).removesuffix("_total").removesuffix("_bucket") if found else None


def _metric_name(raw: str, index: int, taken: set[str]) -> str:
    name = re.sub(r"[^A-Za-z0-9_:.\-]", "_", raw or f"trigger_{index}")
    if not re.match(r"^[A-Za-z_]", name):
        name = f"m_{name}"
    base, n = name, 2
    while name in taken:
        name, n = f"{base}_{n}", n + 1
    taken.add(name)
    return name


def _number(value: Any, what: str) -> float:
    try:
        return float(str(value).strip())
    except ValueError:
        raise KedaImportError(f"{what}: {value!r} is not a number") from None


def convert(document: dict[str, Any], as_is: bool = False) -> Conversion:
    """The ScaledObject as a policy file. By default the article's mistakes are corrected (a per-pod average
    under ``AverageValue`` becomes the fleet total, a KV-cache fraction becomes a ``Value`` target), each
    correction said; ``as_is`` keeps KEDA's semantics for a side-by-side shadow run."""
    if not isinstance(document, dict) or document.get("kind") != "ScaledObject":
        raise KedaImportError("expected a KEDA ScaledObject (kind: ScaledObject)")
    warnings: list[str] = []
    meta = document.get("metadata") or {}
    spec = document.get("spec") or {}
    name = meta.get("name", "<unnamed>")
    namespace = meta.get("namespace") or "default"
    if not meta.get("namespace"):
        warnings.append("metadata.namespace is not set; assuming 'default'")
    ref = spec.get("scaleTargetRef") or {}
    if not ref.get("name"):
        raise KedaImportError("spec.scaleTargetRef.name is required")
    kind = ref.get("kind", "Deployment")
    if kind not in ("Deployment", "StatefulSet"):
        raise KedaImportError(f"spec.scaleTargetRef.kind {kind!r}: only Deployment and StatefulSet are supported")
    lo, hi, to_zero = _bounds(spec, warnings)
    triggers = _Triggers(as_is, to_zero, lo, warnings)
    for index, trigger in enumerate(spec.get("triggers") or []):
        parse = TRIGGERS.get(str(trigger.get("type")))
        if parse is None:
            warnings.append(
                f"spec.triggers[{index}]: type {trigger.get('type')!r} is not supported; only "
                f"{', '.join(sorted(TRIGGERS))} triggers are converted"
            )
            continue
        parse(triggers, index, trigger)
    if not triggers.metrics:
        raise KedaImportError("no prometheus trigger to convert")
    servers = triggers.servers
    if len(set(servers)) > 1:
        warnings.append(
            f"the triggers use several Prometheus servers ({', '.join(sorted(set(servers)))}); using {servers[0]}"
        )
    workload: dict[str, Any] = {
        "target": {"kind": kind, "namespace": namespace, "name": ref["name"]},
        "minReplicas": 0 if to_zero else lo,
        "maxReplicas": hi,
        "metrics": triggers.metrics,
        "policy": {"type": "threshold", "tolerance": 0.1},
    }
    if to_zero:
        chosen = triggers.activation or triggers.first
        workload["activation"] = _activation(spec, chosen, len(spec.get("triggers") or []), warnings)
    if ref.get("apiVersion") and ref["apiVersion"] != "apps/v1":
        workload["target"]["apiVersion"] = ref["apiVersion"]
    _carry_over(spec, meta, kind, workload, warnings)
    policy: dict[str, Any] = {"interval": 15}
    if servers:
        policy["prometheus"] = {"url": servers[0]}
    policy["workloads"] = [workload]
    try:
        parse_policy_document(policy, f"ScaledObject {namespace}/{name}")
    except PolicyFileError as exc:
        raise KedaImportError("the converted policy is invalid: " + "; ".join(exc.problems)) from None
    warnings.append(
        f"delete ScaledObject {namespace}/{name} (and its HPA keda-hpa-{name}) before running the "
        "controller: it refuses targets that another autoscaler owns"
    )
    return Conversion(policy, warnings, triggers.corrections)


def _bounds(spec: dict[str, Any], warnings: list[str]) -> tuple[int, int, bool]:
    """``minReplicaCount``, ``maxReplicaCount`` and whether the ScaledObject goes to zero; what of its timing is
    not mapped, said."""
    lo = int(spec.get("minReplicaCount", 0))  # KEDA's default is 0: a ScaledObject scales to zero unless told
    hi = int(spec.get("maxReplicaCount", 100))
    idle = spec.get("idleReplicaCount")
    to_zero = lo == 0 or idle is not None
    if idle is not None and int(idle) != 0:
        raise KedaImportError(f"spec.idleReplicaCount {idle}: KEDA supports only 0 there")
    if idle is not None and lo > 0:
        warnings.append(
            f"spec.idleReplicaCount 0 with minReplicaCount {lo}: KEDA woke straight to {lo}; here a wake orders "
            f"the policy's proposal (at least 1), and awake the floor is 1, not {lo}"
        )
    for key, why in (
        ("cooldownPeriod", "it only governs scaling to zero, and this ScaledObject never goes there"),
        ("initialCooldownPeriod", "the controller never scales to zero in its first ticks anyway"),
    ):
        if key in spec and (key == "initialCooldownPeriod" or not to_zero):
            warnings.append(f"spec.{key} is not mapped: {why}")
    if "pollingInterval" in spec:
        warnings.append(
            "spec.pollingInterval is not mapped: between 1 and N replicas the HPA re-read the metrics "
            "every 15 s; the policy ticks every `interval` (15 s)"
        )
    return lo, hi, to_zero


@dataclass
class _Triggers:
    """What the triggers add up to as they are parsed, one after another."""

    as_is: bool
    to_zero: bool
    lo: int
    warnings: list[str]
    metrics: list[dict[str, Any]] = field(default_factory=list)
    activation: tuple[int, str, float] | None = None  # (trigger, its query, its activation threshold)
    first: tuple[int, str, float] | None = None
    corrections: dict[str, list[str]] = field(default_factory=dict)
    servers: list[str] = field(default_factory=list)
    taken: set[str] = field(default_factory=set)


def _prometheus(found: _Triggers, index: int, trigger: dict[str, Any]) -> None:
    """A ``prometheus`` trigger as a metric, the article's two mistakes corrected unless ``as_is``, and what KEDA
    did that this controller does not, said."""
    where, warnings = f"spec.triggers[{index}]", found.warnings
    md = trigger.get("metadata") or {}
    query = " ".join(str(md.get("query", "")).split())
    if not query:
        raise KedaImportError(f"{where}.metadata.query is required")
    if "threshold" not in md:
        raise KedaImportError(f"{where}.metadata.threshold is required")
    threshold = _number(md["threshold"], f"{where}.metadata.threshold")
    metric_type = trigger.get("metricType", "AverageValue")
    if metric_type not in ("AverageValue", "Value"):
        warnings.append(f"{where}: metricType {metric_type!r} is not supported for external metrics; skipped")
        return
    if md.get("serverAddress"):
        found.servers.append(str(md["serverAddress"]))
    for key in ("activationThreshold", "activationTargetQueryValue"):
        if key in md and not found.to_zero:
            warnings.append(
                f"{where}.metadata.{key} is not mapped: it decides KEDA's activation between 0 and 1 "
                f"replicas, and this ScaledObject never goes below minReplicaCount {found.lo}"
            )
        elif key in md and found.activation is None:
            found.activation = (index, query, _number(md[key], f"{where}.metadata.{key}"))
    if found.to_zero and found.first is None:
        found.first = (index, query, 0.0)
    _unmapped_access(md, trigger, where, warnings)
    metric_name = _metric_name(
        str(_query_name(query) or md.get("metricName") or trigger.get("name") or ""), index, found.taken
    )
    metric_type, query, notes = _corrected(query, metric_type, threshold, found.as_is)
    if notes:
        found.corrections[metric_name] = notes
        warnings.extend(f"{where} ({metric_name}) corrected: {note}" for note in notes)
    elif metric_type == "AverageValue" and PER_POD_AVERAGE.search(query):
        warnings.append(
            f"{where} ({metric_name}): the query averages per pod under an AverageValue target, so the HPA "
            f"proposed ceil(average / {threshold:g}), not ceil(total / {threshold:g}): it under-scales by the "
            "replica count (with 4 pods holding 8 waiting each it keeps 4 replicas where 16 were meant). "
            "Query the total (sum) instead, or use metricType Value."
        )
    if metric_type == "AverageValue" and KV_METRIC.search(query) and threshold <= 1 and not notes:
        warnings.append(
            f"{where} ({metric_name}): a KV-cache usage fraction under an AverageValue target of {threshold:g} "
            "proposes at most ceil(1 / threshold) replicas; a level like this wants metricType Value"
        )
    if "vllm:gpu_cache_usage_perc" in query:
        warnings.append(
            f"{where}: vllm:gpu_cache_usage_perc was removed in vLLM 0.12; the built-in "
            "kv_cache_usage_perc metric reads both names"
        )
    found.metrics.append({"name": metric_name, "query": query, "target": {"type": metric_type, "value": threshold}})


TRIGGERS: dict[str, Callable[[_Triggers, int, dict[str, Any]], None]] = {"prometheus": _prometheus}
"""One parser per trigger type, as KEDA keeps one per scaler."""


def _unmapped_access(md: dict[str, Any], trigger: dict[str, Any], where: str, warnings: list[str]) -> None:
    """What of a trigger's access to Prometheus, and of its empty-result rule, does not carry over."""
    for key in ("authModes", "namespace", "customHeaders", "unsafeSsl"):
        if key in md:
            warnings.append(
                f"{where}.metadata.{key} is not mapped; set Prometheus access in the policy file's "
                "`prometheus` block or the VLLM_AUTOSCALER_PROMETHEUS_* environment"
            )
    if trigger.get("authenticationRef"):
        warnings.append(f"{where}.authenticationRef is not mapped; use prometheus.bearerTokenFile")
    if str(md.get("ignoreNullValues", "true")).lower() == "true" and not any("ignoreNullValues" in w for w in warnings):
        warnings.append(
            "KEDA turned an empty result into 0 (ignoreNullValues); here it is 'no value', which "
            "holds the count instead of scaling down during a Prometheus outage"
        )


def _corrected(query: str, metric_type: str, threshold: float, as_is: bool) -> tuple[str, str, list[str]]:
    """The metric type and query with the article's mistakes corrected (unless ``as_is``), and what was."""
    notes: list[str] = []
    if not as_is and metric_type == "AverageValue" and KV_METRIC.search(query) and threshold <= 1:
        metric_type = "Value"
        notes.append(
            f"metricType Value, not AverageValue: a KV-cache usage fraction is a level; under AverageValue "
            f"{threshold:g} the HPA proposed at most ceil(1 / {threshold:g}) replicas whatever the load"
        )
    elif not as_is and metric_type == "AverageValue" and PER_POD_AVERAGE.search(query):
        total = fleet_total(query)
        if total is not None:
            notes.append(
                f"the query sums over pods ({total}) where KEDA's averaged per pod ({query}): under "
                f"AverageValue {threshold:g} the HPA divides the value by the target, so the average "
                "under-scaled by the replica count (4 pods with 8 waiting each kept 4 replicas, not 16)"
            )
            query = total
    return metric_type, query, notes


def _carry_over(
    spec: dict[str, Any], meta: dict[str, Any], kind: str, workload: dict[str, Any], warnings: list[str]
) -> None:
    """The HPA behavior and the fallback, carried over; KEDA's pause annotations, said in this controller's."""
    behavior = ((spec.get("advanced") or {}).get("horizontalPodAutoscalerConfig") or {}).get("behavior")
    if behavior:
        workload["behavior"] = behavior
    fallback = spec.get("fallback")
    if fallback:
        workload["fallback"] = {
            "failureThreshold": int(fallback.get("failureThreshold", 3)),
            "replicas": int(fallback["replicas"]),
        }
        mode = fallback.get("behavior", "static")
        if mode != "static":
            warnings.append(f"spec.fallback.behavior {mode!r} is not mapped; the fallback goes to its fixed count")
    annotations = meta.get("annotations") or {}
    if str(annotations.get(KEDA_PAUSED, "")).lower() == "true":
        warnings.append(f'the ScaledObject is paused: annotate the {kind} with vllm-autoscaler.io/paused: "true"')
    if KEDA_PAUSED_REPLICAS in annotations:
        warnings.append(
            f"the ScaledObject is paused at {annotations[KEDA_PAUSED_REPLICAS]} replicas: annotate the "
            f'{kind} with vllm-autoscaler.io/paused-replicas: "{annotations[KEDA_PAUSED_REPLICAS]}"'
        )


def _activation(
    spec: dict[str, Any], trigger: tuple[int, str, float] | None, triggers: int, warnings: list[str]
) -> dict[str, Any]:
    """KEDA's 0 <-> 1 as an ``activation`` block: the trigger's query and activation threshold, the
    cooldownPeriod as the idle time (KEDA's default 300 s), each difference in semantics said."""
    assert trigger is not None  # there is at least one prometheus trigger by now
    index, query, threshold = trigger
    idle = int(spec.get("cooldownPeriod", 300))
    warnings.append(
        f"scale to zero: activation reads spec.triggers[{index}]'s query above {threshold:g}"
        + (f"; KEDA woke on any of the {triggers} triggers" if triggers > 1 else "")
        + f"; idleSeconds {idle} from cooldownPeriod, counted only while no request is at the gateway or in any "
        "replica (KEDA counted from the last active trigger, even with requests still running)"
    )
    if VLLM_METRIC.search(query):
        warnings.append(
            f"scale to zero: spec.triggers[{index}]'s query reads vLLM's own metrics, which have no series while "
            "no replica exists, so it can never wake the workload (KEDA read it as 0): set activation.query to "
            "the gateway's queued or arriving requests (docs/policy-file.md#scale-to-zero)"
        )
    return {"query": query, "threshold": threshold, "idleSeconds": max(idle, 1)}


def convert_text(text: str, as_is: bool = False) -> list[Conversion]:
    """Every ScaledObject in a YAML stream; other documents are skipped."""
    try:
        documents = [d for d in yaml.safe_load_all(text) if d]
    except yaml.YAMLError as exc:
        raise KedaImportError(f"not valid YAML: {exc}") from None
    objects = [d for d in documents if isinstance(d, dict) and d.get("kind") == "ScaledObject"]
    if not objects:
        raise KedaImportError("no ScaledObject in the input")
    return [convert(d, as_is) for d in objects]


def merge(conversions: list[Conversion]) -> Conversion:
    """Several ScaledObjects as one policy file with one workload each."""
    first = conversions[0]
    policy = dict(first.policy)
    policy["workloads"] = [w for c in conversions for w in c.policy["workloads"]]
    warnings = [w for c in conversions for w in c.warnings]
    corrections = {k: v for c in conversions for k, v in c.corrections.items()}
    parse_policy_document(policy, "merged")
    return Conversion(policy, warnings, corrections)
