"""Closed-loop runs: a fleet under a trace, driven by a contender (a policy, a KEDA baseline, a static
fleet), and what each run costs and serves."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from policies.base import Observation
from policies.cold_start import WritesToReady
from policies.pipeline import WorkloadDecider
from policies.recorded import ACTIVATION, ACTIVITY
from simulations import engine
from simulations.fleet import Fleet
from simulations.replica_model import ReplicaModel
from simulations.signals import Signals, ZeroSignals
from simulations.traces import Trace


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
    zero: ZeroSignals | None = None  # for a workload that may go to zero (an ``activation`` block)
    # Scale-ups timed to readiness as the daemon times them, for ``coldStartSeconds: auto``.
    cold_start: WritesToReady = field(default_factory=WritesToReady)

    def settings(self) -> dict[str, Any] | None:
        """The policy block the decider runs, with any defaults the policy works out (``resolved``)."""
        if self.decider is None:
            return None
        policy = self.decider.policy
        params = policy.params
        settings: dict[str, Any] = (
            {} if params is None else params.model_dump(by_alias=True, exclude_none=True, mode="json")
        )
        settings.update(policy.resolved())
        return settings

    def desired(self, fleet: Fleet, now: float) -> int:
        if self.static is not None:
            return self.static
        assert self.decider is not None and self.signals is not None
        activation, activity = self.zero(fleet, now) if self.zero is not None else (None, None)
        ready = fleet.ready_replicas(now)
        if (seconds := self.cold_start.observe(now, fleet.spec_replicas, ready)) is not None:
            self.decider.cold_start_measured(seconds)
        observation = Observation(now, fleet.spec_replicas, self.signals(fleet, now), ready, activation, activity)
        if self.observed is not None:
            metrics = dict(observation.metrics)
            if self.zero is not None:
                metrics.update({ACTIVATION: activation, ACTIVITY: activity})
            self.observed.append((now, fleet.spec_replicas, ready, metrics))
        decision = self.decider.decide(observation)
        self.decider.applied(decision)
        if decision.changes:
            self.cold_start.written(now, decision.current, decision.desired)
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
    zero: ZeroFigures | None = None  # a run whose fleet went to zero
    # With ``by_minute``: per minute of arrivals from the trace's first, the requests that missed the SLO and all.
    missed_by_minute: np.ndarray | None = None
    arrived_by_minute: np.ndarray | None = None

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
        if self.zero is not None:
            data["zero"] = self.zero.to_json()
        return data


@dataclass
class ZeroFigures:
    """What going to zero saved and cost: the time the fleet spent at zero, how often it woke, and the time
    to first token of the requests that arrived while no replica was ready after a zero (the ones that
    woke it, and those behind them), which wait at the gateway for a cold start."""

    seconds_at_zero: float
    wakes: int
    woken_requests: int
    wake_ttft_p50_s: float | None
    wake_ttft_max_s: float | None

    def to_json(self) -> dict[str, Any]:
        return {
            "seconds_at_zero": round(self.seconds_at_zero, 1),
            "wakes": self.wakes,
            "woken_requests": self.woken_requests,
            "wake_ttft_p50_s": _round(self.wake_ttft_p50_s),
            "wake_ttft_max_s": _round(self.wake_ttft_max_s),
        }


class ZeroTracker:
    """Follows a run's fleet through its zeros, a tick at a time: the seconds at zero, and the spans from a
    zero to the first ready replica after it (the requests arriving in them waited for a cold start)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.spans: list[tuple[float, float]] = []
        self.since: float | None = None  # the start of the span open now

    def tick(self, fleet: Fleet, now: float, interval: float, end: float) -> None:
        if fleet.spec_replicas == 0:
            self.seconds += max(0.0, min(interval, end - now))
            if self.since is None:
                self.since = now
        elif self.since is not None and fleet.ready_replicas(now) > 0:
            self.spans.append((self.since, now))
            self.since = None

    def figures(self, fleet: Fleet, end: float) -> ZeroFigures | None:
        if not self.spans and self.since is None:
            return None
        spans = [*self.spans, *([(self.since, math.inf)] if self.since is not None else [])]
        woken = np.zeros(len(fleet.arrival), dtype=bool)
        for start, stop in spans:
            woken[np.searchsorted(fleet.arrival, start) : np.searchsorted(fleet.arrival, stop)] = True
        served = woken & ~np.isnan(fleet.first_token)
        ttft = (fleet.first_token - fleet.arrival)[served]
        return ZeroFigures(
            self.seconds,
            len(self.spans),
            int(woken.sum()),
            _quantile(ttft, 0.5),
            float(ttft.max()) if len(ttft) else None,
        )


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


LULL_MINUTES = 30  # a stretch this long with almost no request: longer than any cold start simulated here
LULL_SHARE = 0.05  # of the trace's median minute: "almost no request"
BUSY_MINUTE = 30  # a median minute under this many requests is a light trace, whose idle stretches are its own


def lulls(trace: Trace) -> tuple[float, list[tuple[int, int]]]:
    """A busy trace's median minute, and its stretches of ``LULL_MINUTES`` or more with under ``LULL_SHARE`` of it
    (the first minute of each and the one after its last, as ``Trace.minutes`` counts them); none in a light
    trace."""
    per_minute = np.bincount(trace.minutes)
    busy = float(np.median(per_minute))
    if busy < BUSY_MINUTE:
        return busy, []
    quiet = np.concatenate([[False], per_minute < LULL_SHARE * busy, [False]]).astype(np.int8)
    edges = np.diff(quiet)
    starts, ends = np.flatnonzero(edges == 1).tolist(), np.flatnonzero(edges == -1).tolist()
    return busy, [(a, b) for a, b in zip(starts, ends, strict=True) if b - a >= LULL_MINUTES]


def lull_hint(trace: Trace) -> str | None:
    """What to say of a busy trace that holds stretches with almost no request between busy ones (``lulls``): a
    follower scales in over them and meets the traffic that returns after each short for a cold start, where a fixed
    fleet does not. ServeGen's rate file holds such stretches where it records no client at all (84 of its 2,016
    windows, ``active_clients`` 0), more likely gaps in the recording than traffic that stopped."""
    busy, long = lulls(trace)
    if not long:
        return None
    first, last = max(long, key=lambda stretch: stretch[1] - stretch[0])
    which = f"{len(long)} stretches" if len(long) > 1 else "a stretch"
    return (
        f"the trace holds {which} of {LULL_MINUTES} minutes or more with almost no request (under {LULL_SHARE:.0%} "
        f"of its median minute of {busy:,.0f}), {'the longest ' if len(long) > 1 else ''}"
        f"{(last - first) / 60:.1f} h from {first / 60:.1f} h: a policy that scales in over one meets the traffic "
        "after it short for a cold start, where a fixed fleet does not; if they are gaps in the recording rather than "
        "traffic that stopped, --window simulates the stretches between them"
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
    interval = np.searchsorted(starts, arrival, side="right") - 1  # -1 before the first start, or with none
    keep = interval >= 0
    interval, values = interval[keep], values[keep]
    if (interval[1:] < interval[:-1]).any():  # a trace's requests come in the order they arrive
        order = np.argsort(interval, kind="stable")
        interval, values = interval[order], values[order]
    return engine.nearest_rank_by_group(values, interval, len(starts), 0.9).tolist()  # type: ignore[no-any-return]


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
    by_minute: bool = False,
) -> RunResult:
    """Simulate the trace; the contender acts until the last arrival, then the fleet only finishes its work.

    GPU time is counted over the trace's duration, for every replica that exists (ready, starting or
    draining). With ``miss_budget``, the run stops early once more requests than that have certainly missed
    the SLO (served late, or still waiting past their deadline); its result then says it did not meet it.
    ``stop`` is asked every simulated minute whether the run is still wanted; if not, it ends the same way.
    ``by_minute``: the result counts each minute's misses and arrivals (``RunResult.missed_by_minute``).
    Over 60 lines: the step loop, whose locals a helper per part would pass back and forth millions of times a run.
    """
    fleet = Fleet(model, trace, initial_replicas)
    end = float(trace.arrival_s[-1])
    now, next_tick = 0.0, 0.0
    gpu_seconds_at_end: float | None = None
    events = 0
    max_replicas = initial_replicas
    series: dict[str, list[float]] = {"t": [], "replicas": [], "ready": [], "arrivals": []}
    last_arrivals = 0
    zeros = ZeroTracker() if contender.zero is not None else None
    while now <= end or (not fleet.done and now < end + tail_limit_s):
        # After the last arrival the contender stops, except to wake a fleet at zero that requests wait for.
        tick_due = now >= next_tick - 1e-9
        if tick_due and (now <= end or (zeros is not None and fleet.gateway_open > 0 and fleet.spec_replicas == 0)):
            before = fleet.spec_replicas
            target = contender.desired(fleet, now)
            if target != before:
                fleet.scale_to(target, now)
                events += 1
            max_replicas = max(max_replicas, fleet.spec_replicas)
            if zeros is not None:
                zeros.tick(fleet, now, contender.interval, end)
            next_tick += contender.interval
            if timeline:
                series["t"].append(now)
                series["replicas"].append(fleet.existing)
                series["ready"].append(fleet.ready_replicas(now))
                series["arrivals"].append((fleet.next_arrival - last_arrivals) / contender.interval)
                last_arrivals = fleet.next_arrival
        # The fleet steps on until the loop has something to do: a tick, a check, the last arrival passed, the end.
        ticking = now <= end or zeros is not None
        now = fleet.advance(now, next_tick if ticking else math.inf, end, end + tail_limit_s, STOP_CHECK_S)
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
                contender.name, math.inf, 0.0, None, None, None, 0, trace.requests, events, max_replicas,
                contender.tuned, {}, abandoned=True,
            )  # fmt: skip
        if gpu_seconds_at_end is None and now > end:
            overshoot = now - end
            gpu_seconds_at_end = fleet.replica_seconds - fleet.existing * overshoot
    if gpu_seconds_at_end is None:
        gpu_seconds_at_end = fleet.replica_seconds
    if timeline:
        series["ttft_beyond_prefill_p90"] = p90_by_arrival(
            ttft_beyond_prefill(fleet), fleet.arrival, np.asarray(series["t"])
        )
    result = _result(trace, model, contender, fleet, slo_ttft, gpu_seconds_at_end, events, max_replicas, by_minute)
    result.timeline = series if timeline else {}
    result.zero = zeros.figures(fleet, end) if zeros is not None else None
    return result


def _result(
    trace: Trace,
    model: ReplicaModel,
    contender: Contender,
    fleet: Fleet,
    slo_ttft: float,
    gpu_seconds: float,
    events: int,
    max_replicas: int,
    by_minute: bool = False,
) -> RunResult:
    """What a finished run cost and served, from its fleet's per-request record; with ``by_minute``, each minute's
    misses and arrivals as well."""
    met = slo_met(fleet, slo_ttft)
    served = ~np.isnan(fleet.first_token)
    ttft = (fleet.first_token - fleet.arrival)[served]
    waited = ~np.isnan(fleet.admitted)
    completed = int((~np.isnan(fleet.finished)).sum())
    hits = None if trace.prefix is None else 1.0 - float(fleet.computed.sum() / fleet.prompt.sum())
    result = RunResult(
        policy=contender.name,
        gpu_hours=gpu_seconds * model.gpus_per_replica / 3600.0,
        slo_attainment=float(met.sum()) / trace.requests,
        ttft_p50_s=_quantile(ttft, 0.5),
        ttft_p99_s=_quantile(ttft, 0.99),
        queue_wait_p99_s=_quantile((fleet.admitted - fleet.arrival)[waited], 0.99),
        completed_requests=completed,
        dropped_requests=trace.requests - completed,
        scale_events=events,
        max_replicas=max_replicas,
        tuned=contender.tuned,
        timeline={},
        settings=contender.settings(),
        prefix_cache_hits=hits,
    )
    if by_minute:
        minute = trace.minutes  # the fleet's arrivals are the trace's
        result.missed_by_minute = np.bincount(minute, weights=~met)
        result.arrived_by_minute = np.bincount(minute).astype(np.float64)
    return result


# -- the oracle ---------------------------------------------------------------------------------------
