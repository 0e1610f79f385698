"""``predictive``: size the fleet for the load one cold start ahead.

Demand is measured in replicas, per metric, by ``demand_in_replicas``:

* an ``AverageValue`` metric (a fleet total such as waiting requests) needs ``total / target`` replicas;
* a ``Value`` metric (a level such as KV-cache usage, shared by the replicas that are Ready) carries
  ``level * ready`` replica-levels of load and so needs ``level * ready / target`` replicas.

The workload's demand at a tick is the largest of its metrics'. Double exponential smoothing (Holt: an
EWMA of the level with weight ``alpha`` and of the trend, per second, with weight ``beta``, both over the
real time between ticks) forecasts it ``horizon`` seconds ahead, by default ``coldStartSeconds +
interval``: a replica asked for now is ready when that load arrives. A noisy trend extrapolated over
minutes can explode, so the forecast grows by at most ``maxGrowth`` times the level (0.5 by default).
The proposal covers ``max(forecast, demand now) * (1 + headroom)``, so the policy scales out ahead of a
rising load but never scales in on a forecast alone: a scale-in needs the present load to allow it too.
A proposal within
``tolerance`` of the current count keeps it, as in the HPA.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, Literal

from pydantic import Field

from policies.base import Observation, Proposal, WorkloadContext
from policies.replica_calculator import demand_in_replicas
from policies.spec import StrictModel
from policies.threshold import tolerance_for


class PredictiveParams(StrictModel):
    type: Literal["predictive"] = "predictive"
    alpha: float = Field(default=0.5, gt=0, le=1)
    beta: float = Field(default=0.3, ge=0, le=1)
    headroom: float = Field(default=0.2, ge=0, le=10)
    tolerance: float = Field(default=0.1, ge=0, lt=1)
    horizon_seconds: float | None = Field(default=None, alias="horizonSeconds", ge=0)
    max_growth: float = Field(default=0.5, alias="maxGrowth", ge=0)


@dataclass
class HoltState:
    last_at: float | None = None
    level: float = 0.0
    trend: float = 0.0

    def update(self, demand: float, now: float, alpha: float, beta: float) -> None:
        if self.last_at is None:
            self.level, self.trend, self.last_at = demand, 0.0, now
            return
        dt = now - self.last_at
        if dt <= 0:
            self.level = alpha * demand + (1 - alpha) * self.level
            return
        previous = self.level
        self.level = alpha * demand + (1 - alpha) * (previous + self.trend * dt)
        self.trend = beta * (self.level - previous) / dt + (1 - beta) * self.trend
        self.last_at = now

    def forecast(self, horizon: float, max_growth: float) -> float:
        """The level ``horizon`` seconds ahead, growing by at most ``max_growth`` times the level."""
        return min(max(0.0, self.level + self.trend * horizon), self.level * (1.0 + max_growth))


class PredictivePolicy:
    type: ClassVar[str] = "predictive"
    Params = PredictiveParams

    def __init__(self, params: PredictiveParams, ctx: WorkloadContext) -> None:
        self.params = params
        self.ctx = ctx
        self.state = HoltState()
        self.tolerance = tolerance_for(ctx, params.tolerance)

    @property
    def horizon(self) -> float:
        if self.params.horizon_seconds is not None:
            return self.params.horizon_seconds
        return self.ctx.cold_start_seconds + self.ctx.interval

    def recommend(self, observation: Observation) -> Proposal:
        current = observation.current_replicas
        demands: dict[str, float] = {}
        missing: list[str] = []
        for spec in self.ctx.metrics:
            value = observation.value(spec.name)
            if value is None:
                missing.append(spec.name)
            else:
                demands[spec.name] = demand_in_replicas(spec, value, observation.capacity_basis)
        details: dict[str, object] = {"demand": demands, "missing": missing}
        if not demands:
            return Proposal(None, "metrics-unavailable", details)
        demand = max(demands.values())
        self.state.update(demand, observation.now, self.params.alpha, self.params.beta)
        forecast = self.state.forecast(self.horizon, self.params.max_growth)
        need = max(forecast, demand) * (1 + self.params.headroom)
        details.update(forecast=forecast, horizon=self.horizon, need=need)
        if current > 0 and self.tolerance.within(need / current):
            replicas = current
        else:
            replicas = math.ceil(need - 1e-9)
        if missing and replicas < current:
            return Proposal(None, "metrics-unavailable", details)
        return Proposal(replicas, "within-tolerance" if replicas == current else "steady", details)
