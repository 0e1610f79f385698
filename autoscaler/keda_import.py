"""``import-keda``: a KEDA ScaledObject with Prometheus triggers as this project's policy file."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import yaml

from policies.policy_file import PolicyFileError, parse_policy_document

KEDA_PAUSED = "autoscaling.keda.sh/paused"
KEDA_PAUSED_REPLICAS = "autoscaling.keda.sh/paused-replicas"
# sum(x)/count(x), avg(x), avg by (...)(x): a per-pod average.
PER_POD_AVERAGE = re.compile(r"(?is)(\bavg\s*(by|without)?\s*(\([^)]*\))?\s*\()|(\bsum\s*\(.*\)\s*/\s*count\s*\()")
KV_METRIC = re.compile(r"vllm:(gpu|kv)_cache_usage_perc")


class KedaImportError(ValueError):
    """Input that is not a ScaledObject this command can convert."""


@dataclass
class Conversion:
    policy: dict[str, Any]
    warnings: list[str] = field(default_factory=list)

    def yaml(self) -> str:
        return yaml.safe_dump(self.policy, sort_keys=False, default_flow_style=None, width=110)


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


def convert(document: dict[str, Any]) -> Conversion:
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

    lo = int(spec.get("minReplicaCount", 0))
    hi = int(spec.get("maxReplicaCount", 100))
    if lo < 1:
        warnings.append(f"minReplicaCount {lo}: scale to zero is KEDA's job (0<->1); using minReplicas 1")
        lo = 1
    for key, why in (
        ("cooldownPeriod", "it only governs scaling to zero"),
        ("idleReplicaCount", "scale to zero is not supported"),
        ("initialCooldownPeriod", "it only governs scaling to zero"),
    ):
        if key in spec:
            warnings.append(f"spec.{key} is not mapped: {why}")
    if "pollingInterval" in spec:
        warnings.append(
            "spec.pollingInterval is not mapped: between 1 and N replicas the HPA re-read the metrics "
            "every 15 s; the policy ticks every `interval` (15 s)"
        )

    metrics: list[dict[str, Any]] = []
    servers: list[str] = []
    taken: set[str] = set()
    for index, trigger in enumerate(spec.get("triggers") or []):
        where = f"spec.triggers[{index}]"
        if trigger.get("type") != "prometheus":
            warnings.append(
                f"{where}: type {trigger.get('type')!r} is not supported; only prometheus triggers are converted"
            )
            continue
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
            continue
        if md.get("serverAddress"):
            servers.append(str(md["serverAddress"]))
        for key in ("activationThreshold", "authModes", "namespace", "customHeaders", "unsafeSsl"):
            if key in md:
                warnings.append(
                    f"{where}.metadata.{key} is not mapped; set Prometheus access in the policy file's "
                    "`prometheus` block or the VLLM_AUTOSCALER_PROMETHEUS_* environment"
                )
        if trigger.get("authenticationRef"):
            warnings.append(f"{where}.authenticationRef is not mapped; use prometheus.bearerTokenFile")
        if str(md.get("ignoreNullValues", "true")).lower() == "true" and not any(
            "ignoreNullValues" in w for w in warnings
        ):
            warnings.append(
                "KEDA turned an empty result into 0 (ignoreNullValues); here it is 'no value', which "
                "holds the count instead of scaling down during a Prometheus outage"
            )
        metric_name = _metric_name(str(md.get("metricName") or trigger.get("name") or ""), index, taken)
        if metric_type == "AverageValue" and PER_POD_AVERAGE.search(query):
            warnings.append(
                f"{where} ({metric_name}): the query averages per pod under an AverageValue target, so the HPA "
                f"proposed ceil(average / {threshold:g}), not ceil(total / {threshold:g}): it under-scales by the "
                "replica count (with 4 pods holding 8 waiting each it keeps 4 replicas where 16 were meant). "
                "Query the total (sum) instead, or use metricType Value."
            )
        if metric_type == "AverageValue" and KV_METRIC.search(query) and threshold <= 1:
            warnings.append(
                f"{where} ({metric_name}): a KV-cache usage fraction under an AverageValue target of {threshold:g} "
                "proposes at most ceil(1 / threshold) replicas; a level like this wants metricType Value"
            )
        if "vllm:gpu_cache_usage_perc" in query:
            warnings.append(
                f"{where}: vllm:gpu_cache_usage_perc was removed in vLLM 0.12; the built-in "
                "kv_cache_usage_perc metric reads both names"
            )
        metrics.append({"name": metric_name, "query": query, "target": {"type": metric_type, "value": threshold}})
    if not metrics:
        raise KedaImportError("no prometheus trigger to convert")
    if len(set(servers)) > 1:
        warnings.append(
            f"the triggers use several Prometheus servers ({', '.join(sorted(set(servers)))}); using {servers[0]}"
        )

    workload: dict[str, Any] = {
        "target": {"kind": kind, "namespace": namespace, "name": ref["name"]},
        "minReplicas": lo,
        "maxReplicas": hi,
        "metrics": metrics,
        "policy": {"type": "threshold", "tolerance": 0.1},
    }
    if ref.get("apiVersion") and ref["apiVersion"] != "apps/v1":
        workload["target"]["apiVersion"] = ref["apiVersion"]
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
    return Conversion(policy, warnings)


def convert_text(text: str) -> list[Conversion]:
    """Every ScaledObject in a YAML stream; other documents are skipped."""
    try:
        documents = [d for d in yaml.safe_load_all(text) if d]
    except yaml.YAMLError as exc:
        raise KedaImportError(f"not valid YAML: {exc}") from None
    objects = [d for d in documents if isinstance(d, dict) and d.get("kind") == "ScaledObject"]
    if not objects:
        raise KedaImportError("no ScaledObject in the input")
    return [convert(d) for d in objects]


def merge(conversions: list[Conversion]) -> Conversion:
    """Several ScaledObjects as one policy file with one workload each."""
    first = conversions[0]
    policy = dict(first.policy)
    policy["workloads"] = [w for c in conversions for w in c.policy["workloads"]]
    warnings = [w for c in conversions for w in c.warnings]
    parse_policy_document(policy, "merged")
    return Conversion(policy, warnings)
