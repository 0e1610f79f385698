"""``predictive``'s block in the policy file, and the blocks of its optional mechanisms."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from policies.base import usable
from policies.predictive.budget import (
    PROMPT_LENGTH_SIGMA,
)
from policies.spec import Seconds, StrictModel, refuse_moved


class TrendParams(StrictModel):
    """The trend a sustained rise is extrapolated by (``TrendState.growth``); on by default."""

    window_seconds: Seconds | None = Field(
        default=None, alias="windowSeconds", gt=0, description="unset: twice the horizon, at least 8 intervals"
    )
    max_growth: float = Field(default=0.5, alias="maxGrowth", ge=0, description="the growth's cap, times the demand")


class PoolingParams(StrictModel):
    """A fleet's pooled capacity (``pooled_replicas``); off unless given: only a load test of two fleet sizes
    tells the gain (docs/simulation.md, "the fleet's pooling")."""

    gain: float = Field(gt=0, le=1, description="capacity per replica gained per doubling of the fleet")
    replicas: float = Field(default=1.0, ge=1, description="the fleet size the targets were measured on")


def budget_block(policy: dict[str, Any]) -> Any:
    """A predictive block's raw ``errorBudget``, by its key or its field's name (the model takes both); None
    without one."""
    return policy.get("errorBudget", policy.get("error_budget"))


class ErrorBudgetParams(StrictModel):
    """How the slo's misses are counted from vLLM's TTFT histogram (``policies.predictive.budget``): the budget that
    moves a ``utilization`` block's utilization, or hands a ``learnedHeadroom`` back as it burns."""

    prefill_tokens_per_second: float = Field(
        alias="prefillTokensPerSecond",
        gt=0,
        description="an idle replica's prefill speed: a request's own prefill is its prompt over it",
    )
    request_overhead_seconds: float = Field(
        default=0.0,
        alias="requestOverheadSeconds",
        ge=0,
        le=60,
        description="the time to first token an idle replica adds to any request's prefill (HTTP, tokenisation, "
        "scheduling; calibrate fits it): part of a request's own time, not a wait",
    )
    prompt_length_sigma: float | None = Field(
        default=None,
        alias="promptLengthSigma",
        ge=0,
        le=4,
        description="the spread of the prompts' lengths, the standard deviation of their natural log (simulate "
        "writes the trace's); unset, read from vLLM's prompt-length histogram, or 1.0 while it has none",
    )

    @model_validator(mode="before")
    @classmethod
    def _moved(cls, data: Any) -> Any:
        if isinstance(data, dict) and "spend" in data:
            raise ValueError(
                "spend was removed: the budget moves the utilization of a block with utilization, which sizes by the "
                "work (docs/decisions/error-budget-loop.md)"
            )
        where = "the workload's slo.windowSeconds (the budget counts over it, a day at least)"
        return refuse_moved(data, {"windowSeconds": where, "window_seconds": where})


# With a budget, the rises of the last hour over a prior of 20 minutes: a surge after calm hours spends budget
# and the budget hands the headroom back. Without one, a day's: an hour's memory missed such a surge, and
# nothing handed the headroom back (docs/decisions/predictive-headroom.md).
BUDGET_LEARNING = {"priorSeconds": 1_200.0, "memorySeconds": 3_600.0}
_LEARNING_FIELDS = {"priorSeconds": "prior_seconds", "memorySeconds": "memory_seconds"}


class LearnedHeadroomParams(StrictModel):
    """The headroom blended with the one the demand's own rises call for (``RiseHistory``); off unless given
    (docs/decisions/predictive-headroom.md). Beside an ``errorBudget``, handed back to the configured headroom as
    the slo's error budget burns, and learned over a shorter past by default (``BUDGET_LEARNING``)."""

    prior_seconds: Seconds = Field(
        default=43_200.0,
        alias="priorSeconds",
        gt=0,
        description="how much history the configured headroom weighs as; with a budget 1,200 by default",
    )
    memory_seconds: Seconds = Field(
        default=86_400.0,
        alias="memorySeconds",
        gt=0,
        description="how long a rise is remembered; with a budget 3,600 by default",
    )

    @model_validator(mode="before")
    @classmethod
    def _moved(cls, data: Any) -> Any:
        return refuse_moved(data, {"budget": "errorBudget, a key of the predictive block beside learnedHeadroom"})


class UtilizationParams(StrictModel):
    """Size the fleet as a follower of its work at a utilization the slo's error budget moves
    (``policies.predictive.utilization``); off unless given. It replaces the targets, the headroom, the pooling, the
    learned headroom's blend (the trend and the tolerance still apply), and needs an ``errorBudget`` (how the misses
    are counted) and an slo."""

    start: float = Field(
        gt=0,
        le=1,
        description="the utilization to start from, the share of a replica's compute the follower runs at: simulate "
        "plans it from a load test of these requests and the trace (1 where it plans a fixed fleet as the floor)",
    )
    prefill_tokens_per_second: float = Field(
        alias="prefillTokensPerSecond", gt=0, description="a replica's prefill throughput, prompt tokens a second"
    )
    decode_tokens_per_second: float = Field(
        alias="decodeTokensPerSecond",
        gt=0,
        description="a replica's generation throughput, tokens a second, at the largest batch of these requests "
        "it holds",
    )
    floor_replicas: int = Field(
        default=0,
        alias="floorReplicas",
        ge=0,
        description="replicas held however light the work: where the traffic swings within a cold start, a fixed "
        "fleet is cheaper than following it (simulate plans it from the trace; 0: none)",
    )
    planned_requests: int = Field(
        default=0,
        alias="plannedRequests",
        ge=0,
        description="the requests of the recording the start was planned on: the follower runs hotter than its "
        "start only as far as the budget's count outweighs them, and cooler at once (simulate writes it; 0: as the "
        "count says)",
    )


MOVED_KEYS = {
    "trendWindowSeconds": "trend.windowSeconds",
    "maxGrowth": "trend.maxGrowth",
    "poolingGain": "pooling.gain",
    "poolingReplicas": "pooling.replicas",
    "learnHeadroom": "learnedHeadroom: {} (present means on)",
    "headroomPriorSeconds": "learnedHeadroom.priorSeconds",
    "headroomMemorySeconds": "learnedHeadroom.memorySeconds",
}
"""Keys of predictive's block before its optional settings moved into blocks of their own."""


class PredictiveParams(StrictModel):
    """Top level: what the default decides with. The trend (on by default), the fleet's pooling and the learned
    headroom (off unless given) are blocks of their own, each with the evidence for its default linked."""

    type: Literal["predictive"] = Field(
        default="predictive", description="demand forecast one cold start ahead, plus a headroom"
    )
    headroom: float | None = Field(
        default=None, ge=-0.75, le=10, description="unset: 0.6 * sqrt(max(horizon, 150 s) / 315 s)"
    )
    tolerance: float = Field(
        default=0.1, ge=0, lt=1, description="a proposal within this fraction of the count keeps it (the HPA's 10 %)"
    )
    horizon_seconds: Seconds | None = Field(
        default=None, alias="horizonSeconds", ge=0, description="how far ahead to forecast; unset: the cold start"
    )
    # At two to four replicas the 10 % band is finer than one replica, and at a light load the one-minute
    # signals' noise crossed it every few minutes (docs/policy-file.md, "Policies").
    min_rise_replicas: float = Field(
        default=0.5,
        alias="minRiseReplicas",
        ge=0,
        description="a need less than this many replicas above the count keeps it (unless the tolerance is 0)",
    )
    trend: TrendParams = Field(default=TrendParams(), description="the extrapolated rise; on by default")
    pooling: PoolingParams | None = Field(default=None, description="a fleet's pooled capacity; off unless given")
    learned_headroom: LearnedHeadroomParams | None = Field(
        default=None,
        alias="learnedHeadroom",
        description="a headroom learned from the demand's rises; off unless given",
    )
    utilization: UtilizationParams | None = Field(
        default=None,
        description="size as a follower of the work at a utilization the error budget moves; off unless given",
    )
    error_budget: ErrorBudgetParams | None = Field(
        default=None,
        alias="errorBudget",
        description="count the slo's misses, which move the utilization or hand the learned headroom back; needs "
        "an slo; off unless given",
    )

    @model_validator(mode="before")
    @classmethod
    def _moved(cls, data: Any) -> Any:
        return refuse_moved(data, MOVED_KEYS)

    @model_validator(mode="before")
    @classmethod
    def _budget_learning(cls, data: Any) -> Any:
        """Beside a budget, the headroom is learned over a shorter past unless the block says (``BUDGET_LEARNING``)."""
        if not isinstance(data, dict) or budget_block(data) is None:
            return data
        key = "learnedHeadroom" if "learnedHeadroom" in data else "learned_headroom"
        if not isinstance(learned := data.get(key), dict):
            return data
        unset = {k: v for k, v in BUDGET_LEARNING.items() if k not in learned and _LEARNING_FIELDS[k] not in learned}
        return {**data, key: {**learned, **unset}}

    @model_validator(mode="after")
    def _counted(self) -> PredictiveParams:
        if self.utilization is not None and self.error_budget is None:
            raise ValueError("utilization: needs errorBudget, by whose count of the slo's misses it moves")
        return self


def with_settings(block: dict[str, Any], settings: dict[str, float]) -> dict[str, Any]:
    """A policy block with ``tune``'s settings applied, as ``tune`` names them: ``maxGrowth`` sets the trend's,
    ``poolingGain`` the pooling's (0 turns it off), ``utilizationStart`` the ``utilization`` block's ``start``; any
    other key is a top-level one."""
    nested = ("maxGrowth", "poolingGain", "utilizationStart")
    out = {**block, **{k: v for k, v in settings.items() if k not in nested}}
    if "utilizationStart" in settings:
        out["utilization"] = {**out["utilization"], "start": settings["utilizationStart"]}
    if "maxGrowth" in settings:
        out["trend"] = {**out.get("trend", {}), "maxGrowth": settings["maxGrowth"]}
    if "poolingGain" in settings:
        if settings["poolingGain"] > 0:
            out["pooling"] = {**out.get("pooling", {}), "gain": settings["poolingGain"]}
        else:
            out.pop("pooling", None)
    return out


def prompt_spread(budget: ErrorBudgetParams, seen: float | None = None) -> float:
    """The spread a budget counts its prompts by: as given, else as vLLM's prompt-length histogram shows it
    (``seen``), else the heavy tail a workload not measured is counted by (``error_budget.PROMPT_LENGTH_SIGMA``)."""
    if budget.prompt_length_sigma is not None:
        return budget.prompt_length_sigma
    return seen if seen is not None and usable(seen) and seen >= 0 else PROMPT_LENGTH_SIGMA
