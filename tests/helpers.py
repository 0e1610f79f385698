"""Small builders shared by the unit tests."""

from __future__ import annotations

from typing import Any

from policies.spec import Behavior, ResolvedBehavior, ScalingPolicy, ScalingRules


def rules(
    policies: list[tuple[str, int, int]] | None = None,
    window: int | None = None,
    select: str | None = None,
) -> ScalingRules:
    data: dict[str, Any] = {}
    if policies is not None:
        data["policies"] = [ScalingPolicy(type=t, value=v, periodSeconds=p) for t, v, p in policies]
    if window is not None:
        data["stabilizationWindowSeconds"] = window
    if select is not None:
        data["selectPolicy"] = select
    return ScalingRules(**data)


def behavior(up: ScalingRules | None = None, down: ScalingRules | None = None) -> ResolvedBehavior:
    return Behavior(scaleUp=up, scaleDown=down).resolved()


def workload_doc(**overrides: Any) -> dict[str, Any]:
    """A valid policy document with one workload; keyword arguments replace workload keys."""
    workload: dict[str, Any] = {
        "target": {"kind": "Deployment", "namespace": "llm-serving", "name": "vllm"},
        "minReplicas": 1,
        "maxReplicas": 10,
        "metrics": [{"name": "num_requests_waiting", "target": {"type": "AverageValue", "value": 2}}],
    }
    workload.update(overrides)
    return {"interval": 15, "workloads": [workload]}
