"""Closed-loop runs: a fleet under a trace, driven by a contender (a policy, a KEDA baseline, a static
fleet), and what each run costs and serves."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from pydantic import BaseModel

from policies.base import Observation
from policies.metric_names import KV_CACHE_ALIASES, described
from policies.pipeline import WorkloadDecider
from simulations.fleet import Fleet, Scrape, group_runs
from simulations.replica_model import ReplicaModel
from simulations.traces import Trace

Signals = Callable[[Fleet, float], dict[str, float | None]]


def _gauge(scrape: Scrape | None, value: Callable[[Scrape], float]) -> float | None:
    """A ``sum``/``max`` over pods: no pods up means an empty result, which is no value."""
    if scrape is None or scrape.up == 0:
        return None
    result = value(scrape)
    return None if math.isnan(result) else result


def builtin_signal(name: str) -> Callable[[Fleet, float], float | None] | None:
    """The value of a built-in metric name of docs/contract.md, as its default query would return it."""
    if name == "num_requests_waiting":
        return lambda f, now: _gauge(f.latest_scrape(now), lambda s: s.waiting)
    if name == "num_requests_running":
        return lambda f, now: _gauge(f.latest_scrape(now), lambda s: s.running)
    if name in KV_CACHE_ALIASES:
        return lambda f, now: _gauge(f.latest_scrape(now), lambda s: s.kv_max)
    if name == "time_to_first_token_p90_seconds":
        return lambda f, now: s.ttft_p90 if (s := f.latest_scrape(now)) is not None else None
    if name == "prompt_tokens_per_second":
        return lambda f, now: f.rate("prompt_tokens_total", now)
    if name == "generation_tokens_per_second":
        return lambda f, now: f.rate("generation_tokens_total", now)
    return None


def signals_for(names: list[str]) -> Signals:
    getters = {}
    for name in names:
        getter = builtin_signal(name)
        if getter is None:
            raise ValueError(
                f"the simulator cannot provide metric {name!r}: it serves the built-in names {described()}"
            )
        getters[name] = getter
    return lambda fleet, now: {name: get(fleet, now) for name, get in getters.items()}


def keda_signals(average_per_pod: bool) -> Signals:
    """What KEDA's Prometheus scaler hands the HPA for the design article's two triggers.

    An empty result or NaN becomes 0 (``ignoreNullValues``, KEDA's default).
    """

    def read(fleet: Fleet, now: float) -> dict[str, float | None]:
        scrape = fleet.latest_scrape(now)
        up = scrape.up if scrape is not None else 0
        if scrape is None or up == 0:
            return {"waiting": 0.0, "kv": 0.0}
        waiting = scrape.waiting / up if average_per_pod else scrape.waiting
        return {"waiting": waiting, "kv": 0.0 if math.isnan(scrape.kv_max) else scrape.kv_max}

    return read


@dataclass
class Contender:
    """One entry of the comparison: a decider on a tick interval, or a static fleet."""

    name: str
    interval: float = 15.0
    decider: WorkloadDecider | None = None
    signals: Signals | None = None
    static: int | None = None
    tuned: dict[str, float] | None = None
    # When a list: each tick's (time, spec replicas, ready replicas, metrics) as the policy saw them.
    observed: list[tuple[float, int, int, dict[str, float | None]]] | None = None

    def settings(self) -> dict[str, Any] | None:
        """The policy block the decider runs, with any defaults the policy works out (``resolved``)."""
        if self.decider is None:
            return None
        policy = self.decider.policy
        params = getattr(policy, "params", None)
        settings: dict[str, Any] = (
            params.model_dump(by_alias=True, exclude_none=True, mode="json") if isinstance(params, BaseModel) else {}
        )
        resolved = getattr(policy, "resolved", None)
        if callable(resolved):
            settings.update(resolved())
        return settings

    def desired(self, fleet: Fleet, now: float) -> int:
        if self.static is not None:
            return self.static
        assert self.decider is not None and self.signals is not None
        observation = Observation(now, fleet.spec_replicas, self.signals(fleet, now), fleet.ready_replicas(now))
        if self.observed is not None:
            self.observed.append((now, fleet.spec_replicas, fleet.ready_replicas(now), dict(observation.metrics)))
        decision = self.decider.decide(observation)
        self.decider.applied(decision)
        return decision.desired


@dataclass
class RunResult:
    """One run's figures. ``dropped_requests`` is every request not completed: aborted by a scale-in, never
    served, or still decoding when the run ended (``tail_limit_s`` after the last arrival)."""

    policy: str
    gpu_hours: float
    slo_attainment: float
    ttft_p50_s: float | None
    ttft_p99_s: float | None
    queue_wait_p99_s: float | None
    completed_requests: int
    dropped_requests: int
    scale_events: int
    max_replicas: int
    tuned: dict[str, float] | None = None
    timeline: dict[str, list[float]] = field(default_factory=dict)
    abandoned: bool = False
    settings: dict[str, Any] | None = None
    # With prefix caching: the part of the trace's prompt tokens that their replicas held (none for a
    # request never admitted), at most the trace's ``prefix_reuse``.
    prefix_cache_hits: float | None = None

    def meets(self, target: float) -> bool:
        return self.slo_attainment >= target

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "policy": self.policy,
            "gpu_hours": round(self.gpu_hours, 4),
            "slo_attainment": floor_to(self.slo_attainment, 5),
            "ttft_p50_s": _round(self.ttft_p50_s),
            "ttft_p99_s": _round(self.ttft_p99_s),
            "queue_wait_p99_s": _round(self.queue_wait_p99_s),
            "completed_requests": self.completed_requests,
            "dropped_requests": self.dropped_requests,
            "scale_events": self.scale_events,
            "max_replicas": self.max_replicas,
        }
        if self.tuned is not None:
            data["tuned"] = self.tuned
        if self.settings is not None:
            data["settings"] = self.settings
        if self.prefix_cache_hits is not None:
            data["prefix_cache_hits"] = round(self.prefix_cache_hits, 4)
        return data


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def floor_to(value: float, digits: int) -> float:
    """``value`` cut, not rounded, to ``digits`` decimals: an SLO attainment of 0.989996 must not read 0.99,
    which would meet a target of 99 % that the run missed."""
    scale = 10**digits
    return float(math.floor(value * scale + 1e-9) / scale)


def _quantile(values: np.ndarray, q: float) -> float | None:
    return float(np.quantile(values, q)) if len(values) else None


MISS_CHECK_S = 600
STOP_CHECK_S = 60  # divides MISS_CHECK_S
LONG_RUN_STEPS = 1_000_000  # 1 to 5 min of one core per run on this project's machine (60-300 us a step)


def long_run_hint(trace: Trace, model: ReplicaModel) -> str | None:
    """What to say before a comparison whose runs each take more than ``LONG_RUN_STEPS`` steps."""
    steps = trace.duration_s / model.step_s
    if steps <= LONG_RUN_STEPS:
        return None
    return (
        f"the trace spans {trace.duration_s / 86400:.1f} days, {steps / 1e6:.1f} million steps of "
        f"{model.step_s:g} s for each run (every policy, baseline and static-best candidate); "
        "--window START:END simulates part of it (7d:14d, its second week); --time-scale N replays it N times "
        "faster, and its load then changes N times faster against the cold start"
    )


def allowed_misses(trace: Trace, slo_target: float) -> int:
    """How many of the trace's requests may miss the SLO while the run still meets ``slo_target``."""
    return math.floor((1.0 - slo_target) * trace.requests)


def certain_misses(fleet: Fleet, now: float, slo_ttft: float) -> int:
    """Requests that have missed the SLO whatever happens next: served late, or unserved past the deadline."""
    arrived = fleet.next_arrival
    own = fleet.model.idle_prefill_s(fleet.computed[:arrived])
    first = fleet.first_token[:arrived]
    waited = np.where(np.isnan(first), now, first) - fleet.arrival[:arrived] - own
    return int(np.count_nonzero(waited > slo_ttft + 1e-9))


def ttft_beyond_prefill(fleet: Fleet) -> np.ndarray:
    """Each request's time to first token less its own prefill on an idle replica, what the SLO judges;
    infinite for a request dropped or never served. Its own prefill is of the tokens it had to prefill:
    with prefix caching, those after the prefix its replica held (a request not yet admitted counts all
    of them, the most it can have)."""
    beyond: np.ndarray = fleet.first_token - fleet.arrival - fleet.model.idle_prefill_s(fleet.computed)
    beyond[np.isnan(beyond) | fleet.dropped] = np.inf
    return beyond


def slo_met(fleet: Fleet, slo_ttft: float) -> np.ndarray:
    """Time to first token, less the request's own prefill on an idle replica, within ``slo_ttft``."""
    met: np.ndarray = ttft_beyond_prefill(fleet) <= slo_ttft + 1e-9
    return met


def p90_by_arrival(values: np.ndarray, arrival: np.ndarray, starts: np.ndarray) -> list[float]:
    """The 90th percentile (nearest rank) of ``values`` over the requests arriving in each interval from
    ``starts[i]`` to ``starts[i + 1]`` (the last to the end); NaN for an interval with no arrival."""
    result = np.full(len(starts), np.nan)
    interval = np.searchsorted(starts, arrival, side="right") - 1  # -1 before the first start, or with none
    keep = interval >= 0
    interval, values = interval[keep], values[keep]
    if not len(values):
        return result.tolist()
    order = np.lexsort((values, interval))
    first, sizes = group_runs(interval[order])
    ranks = first + np.ceil(0.9 * sizes).astype(np.int64) - 1
    result[interval[order][first]] = values[order][ranks]
    return result.tolist()


def run(
    trace: Trace,
    model: ReplicaModel,
    contender: Contender,
    initial_replicas: int,
    slo_ttft: float,
    timeline: bool = True,
    tail_limit_s: float = 3600.0,
    miss_budget: int | None = None,
    stop: Callable[[], bool] | None = None,
) -> RunResult:
    """Simulate the trace; the contender acts until the last arrival, then the fleet only finishes its work.

    GPU time is counted over the trace's duration, for every replica that exists (ready, starting or
    draining). With ``miss_budget``, the run stops early once more requests than that have certainly missed
    the SLO (served late, or still waiting past their deadline); its result then says it did not meet it.
    ``stop`` is asked every simulated minute whether the run is still wanted; if not, it ends the same way.
    """
    fleet = Fleet(model, trace, initial_replicas)
    end = float(trace.arrival_s[-1])
    dt = model.step_s
    now, next_tick = 0.0, 0.0
    gpu_seconds_at_end: float | None = None
    events = 0
    max_replicas = initial_replicas
    series: dict[str, list[float]] = {"t": [], "replicas": [], "ready": [], "arrivals": []}
    last_arrivals = 0
    while now <= end or (not fleet.done and now < end + tail_limit_s):
        if now <= end and now >= next_tick - 1e-9:
            before = fleet.spec_replicas
            target = contender.desired(fleet, now)
            if target != before:
                fleet.scale_to(target, now)
                events += 1
            max_replicas = max(max_replicas, fleet.spec_replicas)
            next_tick += contender.interval
            if timeline:
                series["t"].append(now)
                series["replicas"].append(fleet.existing)
                series["ready"].append(fleet.ready_replicas(now))
                series["arrivals"].append((fleet.next_arrival - last_arrivals) / contender.interval)
                last_arrivals = fleet.next_arrival
        fleet.step(now)
        now += dt
        second = int(now)
        if second % STOP_CHECK_S == 0 and (
            (stop is not None and stop())
            or (
                miss_budget is not None
                and second % MISS_CHECK_S == 0
                and certain_misses(fleet, now, slo_ttft) > miss_budget
            )
        ):
            return RunResult(
                contender.name,
                math.inf,
                0.0,
                None,
                None,
                None,
                0,
                trace.requests,
                events,
                max_replicas,
                contender.tuned,
                {},
                abandoned=True,
            )
        if gpu_seconds_at_end is None and now > end:
            overshoot = now - end
            gpu_seconds_at_end = fleet.replica_seconds - fleet.existing * overshoot
    if gpu_seconds_at_end is None:
        gpu_seconds_at_end = fleet.replica_seconds
    met = slo_met(fleet, slo_ttft)
    if timeline:
        series["ttft_beyond_prefill_p90"] = p90_by_arrival(
            ttft_beyond_prefill(fleet), fleet.arrival, np.asarray(series["t"])
        )
    served = ~np.isnan(fleet.first_token)
    ttft = (fleet.first_token - fleet.arrival)[served]
    waited = ~np.isnan(fleet.admitted)
    completed = int((~np.isnan(fleet.finished)).sum())
    hits = None if trace.prefix is None else 1.0 - float(fleet.computed.sum() / fleet.prompt.sum())
    return RunResult(
        policy=contender.name,
        gpu_hours=gpu_seconds_at_end * model.gpus_per_replica / 3600.0,
        slo_attainment=float(met.sum()) / trace.requests,
        ttft_p50_s=_quantile(ttft, 0.5),
        ttft_p99_s=_quantile(ttft, 0.99),
        queue_wait_p99_s=_quantile((fleet.admitted - fleet.arrival)[waited], 0.99),
        completed_requests=completed,
        dropped_requests=trace.requests - completed,
        scale_events=events,
        max_replicas=max_replicas,
        tuned=contender.tuned,
        timeline=series if timeline else {},
        settings=contender.settings(),
        prefix_cache_hits=hits,
    )


# -- the oracle ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class OracleBound:
    gpu_hours: float
    replicas_per_window: np.ndarray
    window_s: float

    @property
    def busiest(self) -> float:
        """The (fractional) fleet its busiest window needs: a fixed fleet must carry it too."""
        return float(self.replicas_per_window.max())


def oracle_bound(
    trace: Trace, model: ReplicaModel, min_replicas: int, slo_ttft: float, slo_target: float, window_s: float = 60.0
) -> OracleBound:
    """A lower bound on the GPU-hours of any policy whose runs meet ``slo_target``.

    Runs count GPU time from the first arrival to the last (``run``), so the bound counts the same span,
    in windows of ``window_s`` (the last one partial). Every token a replica processes costs
    ``1 / prefill_tokens_per_s`` of compute and every engine step reads the weights once for at most
    ``max_num_seqs`` decoding sequences, so each request costs at least ``ReplicaModel.min_work_s``
    replica-seconds wherever it runs. A policy whose run meets the SLO target fails at most
    ``allowed_misses`` requests, which then owe nothing; for the others, any policy, even one that knows
    the future and starts replicas instantly, must provide in each window:

    1. at least ``minReplicas`` replicas;
    2. the prefill compute of every request whose arrival and SLO deadline (arrival + its prefill on an
       idle replica + ``slo_ttft``) both fall inside the window;
    3. from each window on, the work that requests arriving from that window on must have received by
       the last arrival (work cannot be done before its request arrives): the prefill of each request due
       before then, and all of its work if it must also have finished, which a request that meets the SLO
       does at the latest ``latest_finish_s`` after its deadline (a decoding sequence gets a token every
       engine step, however busy its replica).

    With fractional replicas and no cold start, the least replica time meeting 1-3 for a given set of
    failures is the larger of: the sum of each window's larger of 1 and 2; and, for each window, that
    sum over the windows before it plus all the work owed from it on. The bound takes each of these at
    the failures that lower it most: for the first, the requests whose prefill most lowers the windows
    that 2 decides (a greedy that is exact, since each window's gain shrinks with each failure); for the
    others, the requests that owe the most. Fractional replicas, no cold start, no scheduling loss,
    perfect packing and the most favourable failures only make it smaller than anything a real policy
    can reach, hence a bound.

    With prefix caching, a request's prefill is taken at its least (``PrefixBlocks.least_prefill``: after
    the longest prefix any earlier request had, as from one unbounded cache), and its deadline at its
    latest (its whole prompt's prefill): no replica prefills less, and whatever it prefills, a run that
    meets the SLO for it has done so by then.
    """
    arrival, prompt, output = trace.arrival_s, trace.prompt_tokens.astype(float), trace.output_tokens.astype(float)
    computed = trace.least_prefill_tokens if model.prefix_caching else prompt
    prefill_s = computed / model.prefill_tokens_per_s
    end = float(arrival[-1])
    count = max(1, math.ceil(end / window_s))
    length = np.clip(end - np.arange(count) * window_s, 0.0, window_s)
    k = np.minimum((arrival // window_s).astype(np.int64), count - 1)
    deadline = arrival + model.idle_prefill_s(prompt) + slo_ttft
    due = deadline <= end
    inside = due & ((deadline // window_s).astype(np.int64) == k)
    prefill_in = np.bincount(k[inside], weights=prefill_s[inside], minlength=count)
    finished = due & (deadline + model.latest_finish_s(output) <= end)
    owed = np.where(finished, model.min_work_s(computed, output), np.where(due, prefill_s, 0.0))
    work_in = np.bincount(k, weights=owed, minlength=count)
    least = min_replicas * length
    floor = np.maximum(least, prefill_in)
    may_fail = allowed_misses(trace, slo_target)
    by_window = float(floor.sum()) - _top_sum(
        _prefill_gains(k[inside], prefill_s[inside], prefill_in - least), may_fail
    )
    # For each window j: the floors before it plus the work owed from it on.
    before = np.concatenate([[0.0], np.cumsum(floor)[:-1]])
    from_here = np.cumsum(work_in[::-1])[::-1]
    by_suffix = float((before + from_here).max()) - _top_sum(owed, may_fail)
    total = max(by_window, by_suffix)
    per_window = np.divide(floor, length, out=np.full(count, float(min_replicas)), where=length > 0)
    return OracleBound(total * model.gpus_per_replica / 3600.0, per_window, window_s)


def _top_sum(values: np.ndarray, count: int) -> float:
    """The sum of the ``count`` largest ``values``."""
    if count <= 0 or not len(values):
        return 0.0
    if count >= len(values):
        return float(values.sum())
    return float(np.partition(values, len(values) - count)[len(values) - count :].sum())


def _prefill_gains(window: np.ndarray, prefill_s: np.ndarray, excess: np.ndarray) -> np.ndarray:
    """What failing each request lowers its window's floor by, failing the window's longest prefills
    first: its prefill, up to what is left of the window's excess over ``minReplicas`` (in no particular
    order: only the largest ones are summed)."""
    if not len(window):
        return np.zeros(0)
    order = np.lexsort((-prefill_s, window))
    w, p = window[order], prefill_s[order]
    cumulative = np.cumsum(p)
    first = np.repeat(*group_runs(w))
    done_before = cumulative - p - (cumulative[first] - p[first])  # the window's longer prefills
    gains: np.ndarray = np.clip(np.maximum(excess[w], 0.0) - done_before, 0.0, p)
    return gains
