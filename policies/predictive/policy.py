"""``PredictivePolicy``: the mechanisms of this package put together, tick by tick (the package's docstring gives
the rule)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, ClassVar, cast

from policies.base import (
    Observation,
    Policy,
    PolicyBase,
    Proposal,
    WorkloadContext,
    metric_value,
    observed_metrics,
    usable,
)
from policies.metric_names import (
    FIRST_TOKENS_OVER_SLO,
    FIRST_TOKENS_RATE,
    GENERATION_TOKENS,
    PROMPT_SPREAD,
    TTFT_SECONDS_RATE,
    TTFT_SLO,
    WAITING,
)
from policies.predictive.budget import (
    BudgetLedger,
    ledger_window,
    mean_beyond_prefill,
    over_slo_share,
    prefill_tail,
    returned,
)
from policies.predictive.capacity import CapacityLearner
from policies.predictive.forecast import TrendState, default_horizon
from policies.predictive.headroom import LEARNED_SHARE, default_headroom
from policies.predictive.params import ErrorBudgetParams, PredictiveParams, prompt_spread
from policies.predictive.pooling import pooled_replicas
from policies.predictive.rises import RiseHistory
from policies.predictive.samples import Samples
from policies.predictive.utilization import DRAIN_S, UtilizationLearner, work_in_replicas
from policies.replica_calculator import demand_in_replicas
from policies.threshold import tolerance_for

PROMPT_TOKENS = "prompt_tokens_per_second"  # the flow a learned capacity scales (policies.predictive.capacity)


@dataclass
class PredictiveState:
    """What the policy remembers between ticks (and across a reload of its file): the demand's recent
    samples for the trend, and with ``learnedHeadroom`` its past rises."""

    trend: TrendState = field(default_factory=TrendState)
    rises: RiseHistory | None = None
    capacity: CapacityLearner = field(default_factory=CapacityLearner)
    budget: BudgetLedger | None = None
    utilization: UtilizationLearner | None = None
    waiting: Samples = field(default_factory=Samples)  # the follower's queue over the last minute and a tick


class PredictivePolicy(PolicyBase):
    type: ClassVar[str] = "predictive"
    tuning_knob: ClassVar[str] = "headroom"  # what `simulate --tune` searches: the headroom over the demand
    Params = PredictiveParams
    params: PredictiveParams
    ctx: WorkloadContext
    state: PredictiveState

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
        does not shorten. Measured: docs/decisions/predictive-headroom.md."""
        prior = self.prior_headroom
        if self.params.learned_headroom is None or self.state.rises is None or prior <= 0:
            return prior
        blended = self.blended_headroom(prior)
        return blended + max(prior - blended, 0.0) * self.budget_returned

    @property
    def budget_used(self) -> float | None:
        """The share of the slo's error budget spent over the ledger's window; None without an ``errorBudget`` (a
        reload that removed it leaves the ledger behind, unread) or an slo."""
        if self.params.error_budget is None or self.state.budget is None or self.ctx.slo is None:
            return None
        return self.state.budget.used(self.ctx.slo.target)

    @property
    def budget_returned(self) -> float:
        """How far the learned headroom is handed back to the configured one (``error_budget.returned``); 0
        without an ``errorBudget`` or an slo."""
        used = self.budget_used
        return 0.0 if used is None else returned(used)

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

        Off by default: it pays on long traces and misses on rare surges (docs/decisions/predictive-headroom.md)."""
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
        ``learnedHeadroom``, ``headroom`` is the prior and ``blendedHeadroom`` the headroom it holds now; with
        ``utilization``, only what it uses, and ``learnedUtilization`` the utilization it holds now."""
        settings: dict[str, Any] = {
            "horizonSeconds": self.horizon,
            "trend": {"windowSeconds": self.trend_window, "maxGrowth": self.params.trend.max_growth},
        }
        used = self.budget_used
        if self.follows:
            settings["learnedUtilization"] = round(self._learner().utilization, 4)  # as the budget has moved it
            return settings if used is None else {**settings, "budgetUsed": round(used, 4)}
        settings["headroom"] = round(self.prior_headroom, 4)
        if self.params.learned_headroom is not None:
            settings["blendedHeadroom"] = round(self.headroom, 4)  # as the history stands now
        if used is not None:
            settings["budgetUsed"] = round(used, 4)
        if self.learns:
            settings["capacityFactor"] = round(self.state.capacity.factor, 4)  # as learned so far
        return settings

    @property
    def follows(self) -> bool:
        """Whether the fleet is sized as a follower of its work (``utilization``, with an slo whose budget moves it)."""
        return self.params.utilization is not None and self.ctx.slo is not None

    @property
    def history_seconds(self) -> float:
        """How much of the past this policy's state is built from, what a starting daemon replays into it
        (``autoscaler.warm_up``): what it needs tick by tick (``detail_seconds``), and with an ``errorBudget`` the
        window the budget is counted over (``error_budget.ledger_window``: the slo's, a day at least)."""
        slo = self.ctx.slo
        if self.params.error_budget is None or slo is None:
            return self.detail_seconds
        return max(self.detail_seconds, ledger_window(float(slo.window_seconds)))

    @property
    def detail_seconds(self) -> float:
        """The recent part of ``history_seconds`` the state needs tick by tick: the trend's window and the rises'
        memory. Before it, the budget's ledger alone reads the past, and a tick counts up to ``coarse_intervals``
        of first tokens, so ``autoscaler.warm_up`` reads that part so much coarser: 1,620 ticks in place of 5,760
        for an slo counted over a day with an hour's memory, the same misses counted (tests/test_warm_up.py)."""
        learned = self.params.learned_headroom
        if learned is None or self.follows:  # a follower of the work keeps no rises
            return self.trend_window
        return max(self.trend_window, learned.memory_seconds)

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

    def _count_budget(
        self, observation: Observation, budget: ErrorBudgetParams, details: dict[str, object] | None
    ) -> None:
        """Add this tick's first tokens and estimated misses to the ledger: the last minute's rates over the time
        since the last tick (at most four intervals: a gap is not a minute's rate held for an hour). ``details``,
        the decision's, is given the count; ``None`` when catching up, whose proposal nobody reads."""
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
        mean = mean_beyond_prefill(
            observation.value(TTFT_SECONDS_RATE), firsts, prompt, speed, budget.request_overhead_seconds
        )
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
        most = over_slo_share(observation.value(FIRST_TOKENS_OVER_SLO), firsts)
        misses = ledger.count(observation.now, firsts * elapsed, mean, slo.ttft_seconds, tail, most)
        if details is not None:
            details.update(
                budget_used=round(ledger.used(slo.target), 4), slo_first_tokens=firsts * elapsed, slo_misses=misses
            )
        if self.follows:  # the budget moves the utilization
            self._learner().observe(observation.now, firsts * elapsed, misses)

    def _learner(self) -> UtilizationLearner:
        """The utilization learner for this block and slo (a reload that changes either starts a new one)."""
        given, slo = self.params.utilization, self.ctx.slo
        assert given is not None and slo is not None
        learner = self.state.utilization
        weight = float(given.planned_requests)
        if learner is None or not learner.fits(given.start, 1 - slo.target, weight):
            self.state.utilization = learner = UtilizationLearner(given.start, 1 - slo.target, weight)
        return learner

    def _follow(self, observation: Observation) -> Proposal:
        """With ``utilization``: the work over the utilization the budget has moved
        (``policies.predictive.utilization``), never under ``floorReplicas``, kept within ``tolerance`` as the
        forecast's need is."""
        given = self.params.utilization
        assert given is not None
        prompt, generation = observation.value(PROMPT_TOKENS), observation.value(GENERATION_TOKENS)
        missing = tuple(name for name, v in ((PROMPT_TOKENS, prompt), (GENERATION_TOKENS, generation)) if v is None)
        details: dict[str, object] = {"missing": list(missing)}
        assert self.params.error_budget is not None
        self._count_budget(observation, self.params.error_budget, details)
        if prompt is None or generation is None:
            return Proposal(None, "metrics-unavailable", details, missing)
        waiting = observation.value(WAITING)
        work = work_in_replicas(
            prompt,
            generation,
            waiting,
            observation.value(FIRST_TOKENS_RATE),
            given.prefill_tokens_per_second,
            given.decode_tokens_per_second,
            self._waiting_before(waiting, observation.now),
            self.horizon,
        )
        utilization = self._learner().utilization
        growth = self._growth(work, observation.now)
        need = max((work + growth) / utilization, float(given.floor_replicas))
        details.update(
            work=work, forecast=work + growth, horizon=self.horizon, utilization=round(utilization, 4), need=need
        )
        if given.floor_replicas:
            details["floor"] = given.floor_replicas
        # The floor is kept whatever the tolerance: a count of 29 under a floor of 30 is within it, and held there it
        # ran a trace's two hours one replica under the plan (tests/test_utilization.py).
        replicas = max(self._within(need, observation.current_replicas), given.floor_replicas)
        reason = "within-tolerance" if replicas == observation.current_replicas else "steady"
        return Proposal(replicas, reason, details)

    def _waiting_before(self, waiting: float | None, now: float) -> float | None:
        """The requests waiting a minute (``DRAIN_S``) before ``now``, the last reading kept at least that old and no
        more than a tick older; None without one (a daemon just started, or a reading missed). ``waiting`` is kept
        for the ticks after."""
        readings = self.state.waiting
        readings.drop_before(now - DRAIN_S - self.ctx.interval)
        before = readings.last_at_or_before(now - DRAIN_S)
        if waiting is not None:
            readings.add(now, waiting)
        return before

    def _growth(self, demand: float, now: float) -> float:
        """Add ``demand`` to the trend and return the rise it extrapolates over the horizon (never negative), at most
        ``trend.maxGrowth`` times ``demand``: what both sizings, the forecast's and the follower's, add."""
        self.state.trend.update(demand, now, self.trend_window)
        return min(self.state.trend.growth(self.horizon, self.trend_window), self.params.trend.max_growth * demand)

    def _within(self, need: float, current: int) -> int:
        """The count for ``need``: the current one within ``tolerance`` of it, or with a rise of less than
        ``minRiseReplicas``; else ``need`` rounded up."""
        small_rise = self.tolerance.up > 0 and 0 < need - current < self.params.min_rise_replicas
        if current > 0 and (self.tolerance.within(need / current) or small_rise):
            return current
        return math.ceil(need - 1e-9)

    @property
    def horizon(self) -> float:
        if self.params.horizon_seconds is not None:
            return self.params.horizon_seconds
        return default_horizon(self.ctx.cold_start_seconds, self.ctx.interval)

    def catch_up(self, observation: Observation) -> None:
        """A tick older than ``detail_seconds``: what reaches back that far, the learned capacity and the budget's
        ledger (and its loop or the utilization it moves), as ``recommend`` would move them: a follower counts the
        budget at every tick, the forecast's sizing at a tick with a metric. The trend and the rises would forget it
        before the first decision; skipping them took a day's replay from 62 to 24 ms a workload, and the count
        without the details nobody reads to 16 (``autoscaler.bench``, docs/decisions/daemon-scale.md)."""
        self._learn(observation)
        if (budget := self.params.error_budget) is None:
            return
        if self.follows or self._any_metric(observation):
            self._count_budget(observation, budget, None)

    def apart(self) -> Policy | None:
        """A follower's older history is its budget's count alone, and a count can be summed (``absorb``): it is
        caught up apart, so that the policy decides once its trend's minutes are read (``autoscaler.warm_up``).
        A learned capacity follows the ticks in order, so is not."""
        return cast(Policy, PredictivePolicy(self.params, self.ctx)) if self.follows and not self.learns else None

    def absorb(self, older: Policy) -> None:
        """Take in the budget's count of ``older``, ``apart``'s copy given the history before this one's."""
        assert isinstance(older, PredictivePolicy)
        if (ledger := older.state.budget) is not None:
            if self.state.budget is None:
                self.state.budget = BudgetLedger(ledger.window)
            self.state.budget.absorb(ledger)
        if (learned := older.state.utilization) is not None:
            self._learner().absorb(learned)

    @property
    def catch_up_signals(self) -> frozenset[str] | None:
        """What ``catch_up`` reads beside the counts: a follower's budget is counted from the first tokens' histogram
        and the prompt tokens (their spread, where the budget is not told it), a learned capacity from the TTFT
        quantile; the forecast's sizing asks for a metric, so reads them all (None)."""
        if not self.follows:
            return None
        read = {FIRST_TOKENS_RATE, TTFT_SECONDS_RATE, PROMPT_TOKENS, PROMPT_SPREAD, FIRST_TOKENS_OVER_SLO}
        return frozenset(read | {TTFT_SLO} if self.learns else read)

    def _any_metric(self, observation: Observation) -> bool:
        """Whether any of the workload's metrics has a value this tick (``observed_metrics``'s ``present``, without
        the lists: a day's catch-up asks it at every tick)."""
        return any(metric_value(spec, observation) is not None for spec in self.ctx.metrics)

    def recommend(self, observation: Observation) -> Proposal:
        if self.follows:
            return self._follow(observation)
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
            return Proposal(None, "metrics-unavailable", details, tuple(missing))
        demand = max(demands.values())
        growth = self._growth(demand, observation.now)
        if (learned := self.params.learned_headroom) is not None:
            rises = self.state.rises
            if rises is None or not rises.fits(self.horizon, learned.memory_seconds):
                self.state.rises = rises = RiseHistory(self.horizon, learned.memory_seconds)
            rises.update(demand, observation.now)
        if (budget := self.params.error_budget) is not None:
            self._count_budget(observation, budget, details)
        forecast = demand + growth
        headroom = self.headroom
        unpooled = demand * (1 + headroom) + max(0.0, growth - max(headroom, 0.0) * demand)
        pooling = self.params.pooling
        need = unpooled if pooling is None else pooled_replicas(unpooled, pooling.gain, pooling.replicas)
        details.update(forecast=forecast, horizon=self.horizon, headroom=headroom, need=need)
        replicas = self._within(need, current)
        return Proposal(replicas, "within-tolerance" if replicas == current else "steady", details, tuple(missing))
