"""``pid``: a discrete PID controller on the primary metric's normalised error.

The error is the primary metric's load per replica against its setpoint, normalised:
``e = demand / current - 1``, where ``demand`` is the replicas the load needs at the setpoint (see
``demand_in_replicas``): for waiting requests under an ``AverageValue`` target, ``e`` is "waiting per
replica over target, minus one". Errors within ``tolerance`` count as zero (a deadband, like the HPA's).

It runs in *velocity form*: each tick moves the replica count by a fraction of itself,

    u = current * (1 + kp * (e - e_prev) + ki * e * dt + kd * (d - d_prev) / dt / current)

with ``d`` the change of demand since the previous tick (derivative on the measurement, not on the
error, so a setpoint change does not kick), and ``dt`` the real time since the previous tick. With
``kp = kd = 0`` and ``ki = 1 / interval``, one tick lands on ``ceil(demand)``, the HPA's proposal: lower
``ki`` is slower and smoother, ``kp`` reacts to the error's change, ``kd`` to the load's acceleration.

``current`` is the controller's own output, unrounded, while the cluster runs what it proposed: a
replica count is whole, and a controller that starts each tick from the whole count loses every move
smaller than a replica downward (``ceil`` keeps it) and turns every one upward into a whole replica.
(Measured: docs/decisions/pid-output.md.) When the cluster runs
another count (the behavior's windows and rate limits, the bounds, a person), the controller starts
again from it, so it cannot wind up past what was applied; integration also stops while the fleet is
pinned at a bound and the error pushes further out, and a gap in the ticks (a missed scrape, a restart)
counts as at most four intervals. An output within ``tolerance`` of the current count keeps it, as in
the HPA.

Other metrics of the workload are floors: their HPA proposals (``threshold`` rule) are taken when larger,
so a KV cache near saturation is never ignored, and the HPA's missing-metric rule applies to the set.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, Literal

from pydantic import Field

from policies.base import Observation, PolicyBase, Proposal, WorkloadContext, observed_metrics
from policies.replica_calculator import demand_in_replicas, metric_proposal
from policies.spec import MetricSpec, StrictModel
from policies.threshold import tolerance_for

MAX_GAP_INTERVALS = 4.0


class PIDParams(StrictModel):
    type: Literal["pid"] = Field(
        default="pid", description="a PID loop in velocity form on the primary metric's normalised error"
    )
    kp: float = Field(default=0.2, ge=0, description="reacts to the change of the error")
    ki: float = Field(default=1 / 30, ge=0, description="per second: how fast a lasting error is integrated")
    kd: float = Field(default=0.0, ge=0, description="seconds: reacts to the load's acceleration")
    tolerance: float = Field(
        default=0.1, ge=0, lt=1, description="a proposal within this fraction of the count keeps it (the HPA's 10 %)"
    )
    metric: str | None = Field(default=None, description="primary metric name; the first metric by default")
    setpoint: float | None = Field(default=None, gt=0, description="overrides the primary metric's target")


@dataclass
class PIDState:
    last_at: float | None = None
    last_error: float = 0.0
    last_demand: float = 0.0
    last_demand_change: float = 0.0
    integral: float = 0.0
    output: float | None = None  # the last output, unrounded
    proposed: int | None = None  # and the count it proposed


class PIDPolicy(PolicyBase):
    type: ClassVar[str] = "pid"
    tuning_knob: ClassVar[str] = "setpoint"  # what `simulate --tune` searches: the primary metric's setpoint
    Params = PIDParams
    params: PIDParams
    ctx: WorkloadContext

    def __init__(self, params: PIDParams, ctx: WorkloadContext) -> None:
        self.params = params
        self.ctx = ctx
        self.state = PIDState()
        self.tolerance = tolerance_for(ctx, params.tolerance)
        names = [m.name for m in ctx.metrics]
        if params.metric is not None and params.metric not in names:
            raise ValueError(f"metric {params.metric!r} is not one of the workload's metrics {names}")
        primary_name = params.metric or names[0]
        self.primary: MetricSpec = next(m for m in ctx.metrics if m.name == primary_name)

    def _step(self, observation: Observation, value: float) -> tuple[int, float]:
        p, s, current = self.params, self.state, observation.current_replicas
        base = s.output if s.output is not None and s.proposed == current else float(current)
        demand = demand_in_replicas(self.primary, value, observation.capacity_basis, p.setpoint)
        error = demand / base - 1.0
        if self.tolerance.within(demand / current):
            error = 0.0
        if s.last_at is None:
            dt, last_error, demand_change, last_change = self.ctx.interval, error, 0.0, 0.0
        else:
            dt = observation.now - s.last_at
            if dt <= 0:
                dt = self.ctx.interval
            dt = min(dt, MAX_GAP_INTERVALS * self.ctx.interval)
            last_error, demand_change, last_change = s.last_error, demand - s.last_demand, s.last_demand_change
        pinned = (current >= self.ctx.max_replicas and error > 0) or (current <= self.ctx.min_replicas and error < 0)
        integral_step = 0.0 if pinned else p.ki * error * dt
        step = p.kp * (error - last_error) + integral_step + p.kd * (demand_change - last_change) / dt / base
        s.last_at, s.last_error, s.last_demand, s.last_demand_change = observation.now, error, demand, demand_change
        s.integral += integral_step
        output = max(0.0, base * (1.0 + step))
        if self.tolerance.within(output / current):
            replicas = current
        else:
            replicas = max(0, math.ceil(output - 1e-9))  # 1e-9 absorbs float noise in a whole output
        s.output, s.proposed = output, replicas
        return replicas, error

    def recommend(self, observation: Observation) -> Proposal:
        current = observation.current_replicas
        proposals: dict[str, int] = {}
        present, missing = observed_metrics(self.ctx, observation)
        details: dict[str, object] = {"proposals": proposals, "missing": missing}
        for spec, value in present:
            if spec is self.primary:
                proposals[spec.name], details["error"] = self._step(observation, value)
                details["output"] = self.state.output
            else:
                proposals[spec.name] = metric_proposal(
                    spec, value, current, observation.capacity_basis, self.tolerance
                ).replicas
        best = max(proposals.values(), default=None)
        if best is None:
            return Proposal(None, "metrics-unavailable", details, tuple(missing))
        return Proposal(best, "within-tolerance" if best == current else "steady", details, tuple(missing))
