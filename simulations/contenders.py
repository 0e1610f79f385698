"""The contenders a comparison runs: a policy file's workload (or a variant of it) as the daemon would run
it, and the KEDA setups it replaces."""

from __future__ import annotations

from typing import Any

from policies.policy_file import PolicyFile, Workload, parse_policy_document
from simulations.replica_model import ReplicaModel
from simulations.runner import Contender
from simulations.signals import gateway_activation, keda_activation, keda_signals, signals_for

KEDA_COOLDOWN_S = 300  # ScaledObject cooldownPeriod's default
ARTICLE_BEHAVIOR = {
    "scaleUp": {"stabilizationWindowSeconds": 0, "policies": [{"type": "Percent", "value": 100, "periodSeconds": 15}]},
    "scaleDown": {
        "stabilizationWindowSeconds": 600,
        "policies": [{"type": "Percent", "value": 25, "periodSeconds": 60}],
    },
}


def workload_dict(workload: Workload) -> dict[str, Any]:
    return workload.model_dump(by_alias=True, exclude_none=True, mode="json")


def policy_variant(
    document: PolicyFile, workload: Workload, policy: dict[str, Any], metrics: list[dict[str, Any]] | None = None
) -> tuple[PolicyFile, Workload]:
    """The workload with another policy block (and optionally other metrics), validated like a file."""
    return workload_variant(document, workload, {"policy": policy, **({} if metrics is None else {"metrics": metrics})})


def workload_variant(document: PolicyFile, workload: Workload, changes: dict[str, Any]) -> tuple[PolicyFile, Workload]:
    """The workload with ``changes`` to its keys (as a file names them), validated like a file."""
    raw = {**workload_dict(workload), **changes}
    if "metrics" in changes and "capacity" not in changes:
        raw.pop("capacity", None)  # metrics given replace the ones a capacity built
    doc = parse_policy_document({"interval": document.interval, "workloads": [raw]}, "<variant>")
    return doc, doc.workloads[0]


def policy_contender(
    document: PolicyFile,
    workload: Workload,
    model: ReplicaModel,
    name: str | None = None,
    tuned: dict[str, float] | None = None,
) -> Contender:
    """The workload's decider, looking ahead by the simulated replicas' cold start; under ``coldStartSeconds: auto``
    by the one it measures, as the daemon's does (``Contender.cold_start``): the configured default until three
    scale-ups have been timed to readiness."""
    decider = document.decider(workload)
    if workload.cold_start_seconds != "auto":
        decider.set_cold_start(model.cold_start_s)
    signals = signals_for([*(m.name for m in workload.metrics), *workload.extra_signals], workload)
    zero = gateway_activation if workload.activation is not None else None
    return Contender(name or workload.policy_type, float(document.interval), decider, signals, tuned=tuned, zero=zero)


def keda_contender(document: PolicyFile, workload: Workload, model: ReplicaModel, average: bool) -> Contender:
    raw = workload_dict(workload)
    raw.update(
        # The queries are the triggers' own; the simulator evaluates them itself (keda_signals).
        metrics=[
            {
                "name": "waiting",
                "target": {"type": "AverageValue", "value": 2.0},
                "query": (
                    'sum(vllm:num_requests_waiting{app="vllm"}) / count(vllm:num_requests_waiting{app="vllm"})'
                    if average
                    else 'sum(vllm:num_requests_waiting{app="vllm"})'
                ),
            },
            {
                "name": "kv",
                "target": {"type": "AverageValue" if average else "Value", "value": 0.85},
                "query": 'max(vllm:gpu_cache_usage_perc{app="vllm"})',
            },
        ],
        policy={"type": "threshold", "tolerance": 0.1},
        behavior=ARTICLE_BEHAVIOR,
    )
    raw.pop("fallback", None)
    raw.pop("capacity", None)  # the triggers' metrics replace the ones a capacity built
    if workload.activation is not None:
        # KEDA's zero: the activation query as one more trigger, its activationThreshold the same; to zero
        # when no trigger is active for cooldownPeriod (300 s by default); waking to 1, the HPA on from there.
        raw["activation"] = {**raw["activation"], "idleSeconds": KEDA_COOLDOWN_S}
    doc = parse_policy_document({"interval": document.interval, "workloads": [raw]}, "<keda>")
    name = "keda-avg" if average else "keda-sum"
    zero = keda_activation if workload.activation is not None else None
    return Contender(name, model.hpa_sync_s, doc.decider(doc.workloads[0]), keda_signals(average), zero=zero)
