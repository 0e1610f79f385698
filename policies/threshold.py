"""``threshold``: the Kubernetes HPA's own rule, metric by metric, largest proposal wins."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from policies.base import Observation, PolicyBase, Proposal, WorkloadContext, observed_metrics
from policies.replica_calculator import Tolerance, metric_proposal
from policies.spec import StrictModel


class ThresholdParams(StrictModel):
    type: Literal["threshold"] = Field(
        default="threshold", description="the HPA's rule: each metric's proposal, the largest wins"
    )
    tolerance: float = Field(
        default=0.1, ge=0, lt=1, description="a proposal within this fraction of the count keeps it (the HPA's 10 %)"
    )


def tolerance_for(ctx: WorkloadContext, default: float) -> Tolerance:
    """The policy's tolerance, overridden per direction by ``behavior.scale{Up,Down}.tolerance``."""
    up, down = ctx.behavior.up.tolerance, ctx.behavior.down.tolerance
    return Tolerance(up=default if up is None else up, down=default if down is None else down)


def hpa_proposal(ctx: WorkloadContext, observation: Observation, tolerance: Tolerance) -> Proposal:
    """``computeReplicasForMetrics``: the largest per-metric proposal, with the metrics that had no value for the
    decider's missing-metric rule (``base.held``); with none at all, a hold."""
    current = observation.current_replicas
    best: int | None = None
    present, missing = observed_metrics(ctx, observation)
    per_metric: dict[str, int] = {}
    all_within = True
    for spec, value in present:
        result = metric_proposal(spec, value, current, observation.capacity_basis, tolerance)
        per_metric[spec.name] = result.replicas
        all_within = all_within and result.within_tolerance
        if best is None or result.replicas > best:
            best = result.replicas
    details = {"proposals": per_metric, "missing": missing}
    if best is None:
        return Proposal(None, "metrics-unavailable", details, tuple(missing))
    return Proposal(best, "within-tolerance" if all_within and best == current else "steady", details, tuple(missing))


class ThresholdPolicy(PolicyBase):
    type: ClassVar[str] = "threshold"
    tuning_knob: ClassVar[str] = (
        "target"  # what `simulate --tune` searches: the first metric's target (the others scaled with it)
    )
    Params = ThresholdParams
    params: ThresholdParams
    ctx: WorkloadContext

    def __init__(self, params: ThresholdParams, ctx: WorkloadContext) -> None:
        self.params = params
        self.ctx = ctx
        self.state = None
        self.tolerance = tolerance_for(ctx, params.tolerance)

    def recommend(self, observation: Observation) -> Proposal:
        return hpa_proposal(self.ctx, observation, self.tolerance)
