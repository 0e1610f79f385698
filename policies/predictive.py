"""``predictive``: size the fleet for the load one cold start ahead.

Demand is measured in replicas, per metric, by ``demand_in_replicas``:

* an ``AverageValue`` metric (a fleet total such as waiting requests) needs ``total / target`` replicas;
* a ``Value`` metric (a level such as KV-cache usage, shared by the replicas that are Ready) carries
  ``level * ready`` replica-levels of load and so needs ``level * ready / target`` replicas.

The workload's demand ``d`` at a tick is the largest of its metrics'. Two things can outrun a replica
that takes ``horizon`` seconds (by default ``coldStartSeconds + interval``) to serve:

* bursts, which arrive faster than any replica starts: only capacity held in advance absorbs them, the
  ``headroom`` (a fraction of ``d``; by default 0.6 at a horizon of 315 s, scaled with the square root
  of the horizon down to 150 s, see ``headroom``);
* a sustained rise, which headroom absorbs only while it is small: the least-squares trend of the demand
  over the last ``trend.windowSeconds`` (by default twice the horizon), extrapolated over the horizon and
  capped at ``trend.maxGrowth`` times ``d``. It counts only when it is significant and rises in both halves of
  the window (``TrendState.growth``), so a load that wanders or has just stepped up is not extrapolated.

The proposal is ``d * (1 + headroom)``, raised by the part of the trend's growth that the headroom does
not already cover; so the policy scales out ahead of a ramp but never scales in on a forecast: a scale-in
needs the present demand to allow it. A negative headroom runs replicas hotter than the metrics' targets.

A proposal within ``tolerance`` of the current count keeps it, as in the HPA, and so does a need less than
``minRiseReplicas`` (by default half a replica) above it unless the tolerance upward is 0: a small fleet
would otherwise add a replica, and hold it for the scale-down window, on every flicker of a light load's
signals. With ``minRiseReplicas`` 0, no trend (``trend.maxGrowth`` 0) and no pooling, on ``AverageValue``
metrics, the policy decides as ``threshold`` does with every target divided by ``1 + headroom``; at
headroom 0 it makes threshold's decisions exactly, to the replica, because its demand is the HPA's own
quotient in milli-units (``demand_in_replicas``). ``--tune`` relies on it.

Targets are per replica, but a fleet pools its queue: the more replicas share the arrivals, the fewer
wait behind a long prompt, and each carries more at the same SLO (square-root staffing). With
a ``pooling`` block's ``gain`` ``g`` and ``replicas`` ``r`` (the fleet the targets were measured on), a fleet of
``n >= r`` replicas carries ``1 + g * log2(n / r)`` times the targets per replica, and the policy asks
for the fleet that carries the proposal at that rate (``pooled_replicas``), and the tolerance applies to
that fleet; below ``r`` the targets hold as they are. Off without the block: only a load test of two
fleet sizes tells the gain.

With a ``learnedHeadroom`` block the headroom is blended with one learned from the demand's own rises within a
horizon (``RiseHistory``, ``blended_headroom``): recorded days whose load rises slowly need far less than
the default, a day of rare surges more; off by default (docs/findings.md, "One trace is one sample"). With
its ``budget``, what it learned to do without is handed back as the slo's error budget burns, counted from
vLLM's TTFT histogram (``policies.error_budget``): a surge after calm hours spends budget once, and the next
meets the configured headroom. The block needs a replica's idle prefill speed, which no default here knows;
``simulate`` writes it, with the budget, into the predictive block it sizes for a file given only an slo
(``simulations.builtin.with_error_budget``).

Measured on recorded traces (docs/simulation.md): minute-level LLM load mostly wanders and steps, so
the SLO is decided by headroom, and a trend is worth extrapolating only on sustained ramps.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from policies.base import Observation, Proposal, WorkloadContext, missing_metric_hold, observed_metrics, usable
from policies.capacity import CapacityLearner
from policies.error_budget import (
    PROMPT_LENGTH_SIGMA,
    BudgetLedger,
    ledger_window,
    mean_beyond_prefill,
    prefill_tail,
    returned,
)
from policies.metric_names import FIRST_TOKENS_RATE, PROMPT_SPREAD, TTFT_SECONDS_RATE, TTFT_SLO
from policies.replica_calculator import demand_in_replicas
from policies.rise_history import RiseHistory
from policies.spec import Seconds, StrictModel, refuse_moved
from policies.spending import HOUR_S, SpendingLoop
from policies.threshold import tolerance_for

SIGNIFICANCE = 3.0
PROMPT_TOKENS = "prompt_tokens_per_second"  # the flow a learned capacity scales (policies.capacity)
DEFAULT_HEADROOM = 0.6
REFERENCE_HORIZON_S = 315.0  # the default cold start (300 s) and interval (15 s)
LEARNED_SHARE = 0.8  # of the 90th-percentile rise less one: the headroom --tune found was about 0.7 of it
SHORTEST_HORIZON_S = 150.0  # below it, the one-minute signals' own noise, not the drift, sets the headroom


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


class ErrorBudgetParams(StrictModel):
    """The learned headroom handed back as the slo's error budget burns (``policies.error_budget``)."""

    prefill_tokens_per_second: float = Field(
        alias="prefillTokensPerSecond",
        gt=0,
        description="an idle replica's prefill speed: a request's own prefill is its prompt over it",
    )
    prompt_length_sigma: float | None = Field(
        default=None,
        alias="promptLengthSigma",
        ge=0,
        le=4,
        description="the spread of the prompts' lengths, the standard deviation of their natural log (simulate "
        "writes the trace's); unset, read from vLLM's prompt-length histogram, or 1.0 while it has none",
    )

    spend: bool = Field(
        default=False,
        description="run the fleet hotter while the budget is left and cooler as it burns (policies.spending)",
    )

    @model_validator(mode="before")
    @classmethod
    def _moved(cls, data: Any) -> Any:
        where = "the workload's slo.windowSeconds (the budget counts over it, a day at least)"
        return refuse_moved(data, {"windowSeconds": where, "window_seconds": where})


# With a budget, the rises of the last hour over a prior of 20 minutes: a surge after calm hours spends budget
# and the budget hands the headroom back. Without one, a day's: an hour's memory missed such a surge, and
# nothing handed the headroom back (docs/findings.md, "The learned headroom, returned to the default as the
# counted budget burns").
BUDGET_LEARNING = {"priorSeconds": 1_200.0, "memorySeconds": 3_600.0}


class LearnedHeadroomParams(StrictModel):
    """The headroom blended with the one the demand's own rises call for (``RiseHistory``); off unless given
    (docs/findings.md, "One trace is one sample"). With ``budget``, handed back to the configured headroom as
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
    budget: ErrorBudgetParams | None = Field(
        default=None, description="hand the learned headroom back as the slo's error budget burns; needs an slo"
    )

    @model_validator(mode="before")
    @classmethod
    def _budget_learning(cls, data: Any) -> Any:
        if not isinstance(data, dict) or data.get("budget") is None:
            return data
        field_names = {"priorSeconds": "prior_seconds", "memorySeconds": "memory_seconds"}
        unset = {k: v for k, v in BUDGET_LEARNING.items() if k not in data and field_names[k] not in data}
        return {**data, **unset}


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

    @model_validator(mode="before")
    @classmethod
    def _moved(cls, data: Any) -> Any:
        return refuse_moved(data, MOVED_KEYS)


def with_settings(block: dict[str, Any], settings: dict[str, float]) -> dict[str, Any]:
    """A policy block with ``tune``'s settings applied, as ``tune`` names them: ``maxGrowth`` sets the trend's,
    ``poolingGain`` the pooling's (0 turns it off); any other key is a top-level one."""
    out = {**block, **{k: v for k, v in settings.items() if k not in ("maxGrowth", "poolingGain")}}
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


def default_horizon(cold_start_seconds: float, interval: float) -> float:
    """How far ahead the policy looks when ``horizonSeconds`` is unset: a replica ordered at this tick
    serves a cold start later, and the next tick may come an interval after that."""
    return cold_start_seconds + interval


def default_headroom(horizon: float) -> float:
    """The headroom when none is configured, for a horizon of ``horizon`` seconds
    (``PredictivePolicy.headroom`` says why)."""
    return DEFAULT_HEADROOM * math.sqrt(max(horizon, SHORTEST_HORIZON_S) / REFERENCE_HORIZON_S)


def pooled_capacity(fleet: float, gain: float, reference: float) -> float:
    """How many times the targets each replica of a fleet of ``fleet`` carries, pooling at ``gain`` a
    doubling beyond ``reference`` replicas (the targets' own fleet)."""
    return 1 + gain * math.log2(max(fleet, reference) / reference)


def pooled_replicas(need: float, gain: float, reference: float) -> float:
    """The fleet ``n`` that carries ``need`` replicas' worth of load at the targets when each of its
    replicas carries ``pooled_capacity(n)`` times them (``n >= reference``; below it, ``need``)."""
    if gain <= 0 or need <= reference:
        return need
    n = need  # f(n) = n * pooled_capacity(n) - need is convex and rising above the reference: Newton from above
    for _ in range(50):
        f = n * pooled_capacity(n, gain, reference) - need
        step = f / (pooled_capacity(n, gain, reference) + gain / math.log(2))
        n = max(reference, n - step)
        if abs(step) < 1e-9 * need:
            break
    return n


@dataclass
class TrendState:
    """The demand samples of the last ``window`` seconds."""

    samples: deque[tuple[float, float]] = field(default_factory=deque)

    def update(self, demand: float, now: float, window: float) -> None:
        if self.samples and now <= self.samples[-1][0]:
            self.samples[-1] = (self.samples[-1][0], demand)
        else:
            self.samples.append((now, demand))
        while self.samples and self.samples[0][0] < now - window:
            self.samples.popleft()

    def growth(self, horizon: float, window: float) -> float:
        """The rise a sustained trend adds over ``horizon`` seconds; 0 when there is none.

        A trend counts only when it is significant (the least-squares slope less three standard errors)
        over the whole window and rises in both of its halves: a load that only wanders has no trend worth
        extrapolating over minutes, and a step (a surge that has already arrived) rises across the window
        but not within its halves, and extrapolating it would buy replicas after the need has come.
        """
        samples = list(self.samples)
        half = len(samples) // 2
        if half < 3 or samples[-1][0] - samples[0][0] < 0.75 * window:
            return 0.0  # too short a history to tell a trend (a trace or a daemon just starting)
        # Each test is one pass or more over the window, once a tick: the later ones only when the earlier hold.
        rise = _rise(samples, shrink=SIGNIFICANCE)
        for part in (samples[:half], samples[half:]):
            if not rise:
                break
            rise = min(rise, _rise(part))
        return rise * horizon


@dataclass
class PredictiveState:
    """What the policy remembers between ticks (and across a reload of its file): the demand's recent
    samples for the trend, and with ``learnedHeadroom`` its past rises."""

    trend: TrendState = field(default_factory=TrendState)
    rises: RiseHistory | None = None
    capacity: CapacityLearner = field(default_factory=CapacityLearner)
    budget: BudgetLedger | None = None
    hour: BudgetLedger | None = None  # the last hour's count, for the spending loop's burn
    spending: SpendingLoop = field(default_factory=SpendingLoop)


def _rise(samples: list[tuple[float, float]], shrink: float = 0.0) -> float:
    """The least-squares slope of ``samples`` moved ``shrink`` standard errors toward zero, if that is a
    rise; else 0."""
    n = len(samples)
    mean_t = sum(t for t, _ in samples) / n
    mean_d = sum(d for _, d in samples) / n
    sxx = sum((t - mean_t) ** 2 for t, _ in samples)
    if sxx <= 0:
        return 0.0
    slope = sum((t - mean_t) * (d - mean_d) for t, d in samples) / sxx
    if slope <= 0 or not shrink:
        return max(0.0, slope)
    residual = sum((d - mean_d - slope * (t - mean_t)) ** 2 for t, d in samples)
    error = math.sqrt(residual / (n - 2) / sxx)
    return max(0.0, slope - shrink * error)


class PredictivePolicy:
    type: ClassVar[str] = "predictive"
    tuning_knob: ClassVar[str] = "headroom"  # what `simulate --tune` searches: the headroom over the demand
    Params = PredictiveParams

    def __init__(self, params: PredictiveParams, ctx: WorkloadContext) -> None:
        self.params = params
        self.ctx = ctx
        self.state = PredictiveState()
        self.tolerance = tolerance_for(ctx, params.tolerance)

    @property
    def trend_window(self) -> float:
        if self.params.trend.window_seconds is not None:
            return self.params.trend.window_seconds
        return max(2 * self.horizon, 8 * self.ctx.interval)

    @property
    def headroom(self) -> float:
        """The configured headroom; by default 0.6 at a horizon of 315 s, scaled with the square root of
        the horizon: the longer a new replica takes, the further a wandering load can rise before it
        serves, and the longer a step the headroom did not absorb keeps requests waiting, each of them
        spending the SLO's miss budget. Below a horizon of 150 s (0.41) it shrinks no further: what the
        fleet must absorb there is the noise of the one-minute signals themselves, which a faster start
        does not shorten. Measured: docs/findings.md, "Measurements behind the code's defaults", ``predictive``."""
        prior = self.prior_headroom
        if self.params.learned_headroom is None or self.state.rises is None or prior <= 0:
            return prior
        blended = self.blended_headroom(prior)
        return blended + max(prior - blended, 0.0) * self.budget_returned

    @property
    def budget_used(self) -> float | None:
        """The share of the slo's error budget spent over the ledger's window; None without a ``budget`` (a
        reload that removed it leaves the ledger behind, unread) or an slo."""
        learned = self.params.learned_headroom
        if learned is None or learned.budget is None or self.state.budget is None or self.ctx.slo is None:
            return None
        return self.state.budget.used(self.ctx.slo.target)

    @property
    def budget_returned(self) -> float:
        """How far the learned headroom is handed back to the configured one (``error_budget.returned``); 0
        without a ``budget`` or an slo."""
        used = self.budget_used
        return 0.0 if used is None else returned(used)

    @property
    def spending_scale(self) -> float:
        """How much hotter than sized the budget's loop runs the fleet (``policies.spending``); 1 without it."""
        learned = self.params.learned_headroom
        if learned is None or learned.budget is None or not learned.budget.spend or self.ctx.slo is None:
            return 1.0
        return self.state.spending.scale

    @property
    def prior_headroom(self) -> float:
        """The configured headroom, or the default for the horizon."""
        if self.params.headroom is not None:
            return self.params.headroom
        return default_headroom(self.horizon)

    def blended_headroom(self, prior: float) -> float:
        """With ``learnedHeadroom``: the prior, weighted as its ``priorSeconds`` of history, blended with
        ``LEARNED_SHARE`` of the 90th-percentile rise within a horizon less one, weighted by the history the
        rises span. The learned part is scaled as the prior is scaled from the horizon's default (a headroom
        raised for a 99.9 % target raises it too) and held within [0, 2 x prior].

        Off by default: it pays on long traces and misses on rare surges (docs/findings.md, "One trace is one
        sample")."""
        rises = self.state.rises
        assert rises is not None
        rise = rises.quantile()
        if rise is None:
            return prior
        learned = LEARNED_SHARE * (rise - 1) * prior / default_headroom(self.horizon)
        learned = min(max(learned, 0.0), 2 * prior)
        assert self.params.learned_headroom is not None
        weight = self.params.learned_headroom.prior_seconds
        history = rises.seconds
        return (prior * weight + learned * history) / (weight + history)

    def resolved(self) -> dict[str, Any]:
        """The settings this policy runs with, its defaults worked out (they follow the cold start); with
        ``learnedHeadroom``, ``headroom`` is the prior and ``blendedHeadroom`` the headroom it holds now."""
        settings: dict[str, Any] = {
            "headroom": round(self.prior_headroom, 4),
            "horizonSeconds": self.horizon,
            "trend": {"windowSeconds": self.trend_window, "maxGrowth": self.params.trend.max_growth},
        }
        if self.params.learned_headroom is not None:
            settings["blendedHeadroom"] = round(self.headroom, 4)  # as the history stands now
        if (used := self.budget_used) is not None:
            settings["budgetUsed"] = round(used, 4)
        if self.spending_scale != 1.0 or (used is not None and self.params.learned_headroom.budget.spend):  # type: ignore[union-attr]
            settings["spendingScale"] = round(self.spending_scale, 4)  # as the budget's loop holds it now
        if self.learns:
            settings["capacityFactor"] = round(self.state.capacity.factor, 4)  # as learned so far
        return settings

    @property
    def history_seconds(self) -> float:
        """How much of the past this policy's state is built from, what a starting daemon replays into it
        (``autoscaler.warm_up``): what it needs tick by tick (``detail_seconds``), and with a ``budget`` the window
        the budget is counted over (``error_budget.ledger_window``: the slo's, a day at least)."""
        learned, slo = self.params.learned_headroom, self.ctx.slo
        if learned is None or learned.budget is None or slo is None:
            return self.detail_seconds
        return max(self.detail_seconds, ledger_window(float(slo.window_seconds)))

    @property
    def detail_seconds(self) -> float:
        """The recent part of ``history_seconds`` the state needs tick by tick: the trend's window and the rises'
        memory. Before it, the budget's ledger alone reads the past, and a tick counts up to ``coarse_intervals``
        of first tokens, so ``autoscaler.warm_up`` reads that part so much coarser: 1,620 ticks in place of 5,760
        for an slo counted over a day with an hour's memory, the same misses counted (tests/test_warm_up.py)."""
        learned = self.params.learned_headroom
        return self.trend_window if learned is None else max(self.trend_window, learned.memory_seconds)

    # The first tokens a tick counts: at most this many intervals' (a gap is not a rate held for an hour).
    coarse_intervals: ClassVar[int] = 4

    @property
    def learns(self) -> bool:
        """Whether the replica's prompt-token capacity is learned: the context carries a capacity only then
        (``Workload.learns_capacity``, the one rule)."""
        return self.ctx.capacity is not None

    def _learn(self, observation: Observation) -> float:
        """The learned factor on the prompt-token capacity after this tick's minute is judged (1 when not
        learning): the load each ready replica carried against the TTFT quantile at the SLO's target."""
        if not self.learns:
            return 1.0
        assert self.ctx.capacity is not None and self.ctx.slo is not None
        ready = observation.ready_replicas
        prompt = observation.value(PROMPT_TOKENS)
        latency = observation.metrics.get(TTFT_SLO)
        self.state.capacity.observe(
            observation.now,
            prompt / ready if prompt is not None and ready else None,
            self.ctx.capacity.prompt_tokens_per_second,
            latency if usable(latency) else None,
            self.ctx.slo.ttft_seconds,
            steady=ready is not None and ready >= observation.current_replicas,
        )
        return self.state.capacity.factor

    def _count_budget(self, observation: Observation, budget: ErrorBudgetParams, details: dict[str, object]) -> None:
        """Add this tick's first tokens and estimated misses to the ledger: the last minute's rates over the time
        since the last tick (at most four intervals: a gap is not a minute's rate held for an hour)."""
        slo = self.ctx.slo
        if slo is None:
            return
        ledger = self.state.budget
        window = ledger_window(float(slo.window_seconds))
        if ledger is None or ledger.window != window:
            self.state.budget = ledger = BudgetLedger(window)
        firsts = observation.value(FIRST_TOKENS_RATE)
        prompt = observation.value(PROMPT_TOKENS)
        speed = budget.prefill_tokens_per_second
        mean = mean_beyond_prefill(observation.value(TTFT_SECONDS_RATE), firsts, prompt, speed)
        last = ledger.last
        if mean is None or not firsts or prompt is None or (last is not None and observation.now <= last):
            return
        spread = prompt_spread(budget, observation.metrics.get(PROMPT_SPREAD))
        tail = prefill_tail(slo.ttft_seconds, prompt / firsts / speed, spread)
        elapsed = (
            self.ctx.interval
            if last is None
            else min(observation.now - last, self.coarse_intervals * self.ctx.interval)
        )
        misses = ledger.count(observation.now, firsts * elapsed, mean, slo.ttft_seconds, tail)
        used = ledger.used(slo.target)
        details.update(budget_used=round(used, 4), slo_first_tokens=firsts * elapsed, slo_misses=misses)
        if budget.spend:
            hour = self.state.hour = self.state.hour or BudgetLedger(HOUR_S)
            hour.record(observation.now, firsts * elapsed, misses)
            self.state.spending.update(observation.now, used, hour.used(slo.target))
            details["spending_scale"] = round(self.state.spending.scale, 4)

    @property
    def horizon(self) -> float:
        if self.params.horizon_seconds is not None:
            return self.params.horizon_seconds
        return default_horizon(self.ctx.cold_start_seconds, self.ctx.interval)

    def recommend(self, observation: Observation) -> Proposal:
        current = observation.current_replicas
        present, missing = observed_metrics(self.ctx, observation)
        factor = self._learn(observation)
        demands = {
            spec.name: demand_in_replicas(
                spec, value / factor if spec.name == PROMPT_TOKENS else value, observation.capacity_basis
            )
            for spec, value in present
        }
        details: dict[str, object] = {"demand": demands, "missing": missing}
        if self.learns:
            details["capacity_factor"] = round(factor, 4)
        if not demands:
            return Proposal(None, "metrics-unavailable", details)
        demand = max(demands.values())
        self.state.trend.update(demand, observation.now, self.trend_window)
        if (learned := self.params.learned_headroom) is not None:
            rises = self.state.rises
            if rises is None or not rises.fits(self.horizon, learned.memory_seconds):
                self.state.rises = rises = RiseHistory(self.horizon, learned.memory_seconds)
            rises.update(demand, observation.now)
            if learned.budget is not None:
                self._count_budget(observation, learned.budget, details)
        growth = min(self.state.trend.growth(self.horizon, self.trend_window), self.params.trend.max_growth * demand)
        forecast = demand + growth
        headroom = self.headroom
        unpooled = demand * (1 + headroom) + max(0.0, growth - max(headroom, 0.0) * demand)
        unpooled /= self.spending_scale
        pooling = self.params.pooling
        need = unpooled if pooling is None else pooled_replicas(unpooled, pooling.gain, pooling.replicas)
        details.update(forecast=forecast, horizon=self.horizon, headroom=headroom, need=need)
        small_rise = self.tolerance.up > 0 and 0 < need - current < self.params.min_rise_replicas
        if current > 0 and (self.tolerance.within(need / current) or small_rise):
            replicas = current
        else:
            replicas = math.ceil(need - 1e-9)
        if (hold := missing_metric_hold(replicas, current, missing, details)) is not None:
            return hold
        return Proposal(replicas, "within-tolerance" if replicas == current else "steady", details)
