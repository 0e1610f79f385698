"""The ``clairvoyant`` baseline: a follower that knows the load to come, under the same cold start, tick and
behavior as the workload, swept to its cheapest setting that meets the SLO. It is the achievable floor beside
the oracle's bound: the oracle starts replicas instantly and packs them perfectly, so it sits below what any
fleet of real replicas can reach; the clairvoyant is such a fleet, with only the forecast made perfect.

At a tick at ``t`` it asks for the fleet that the work arriving over ``[t, t + cold start + interval]``
needs at its busiest minute, each replica run at ``utilization`` of its capacity: what it orders now is ready
when that work comes, and what it keeps covers the work that arrives before a replica ordered now could
serve. A request's work is the least replica time it can take (``ReplicaModel.min_work_s``), the oracle's
measure. ``utilization`` is searched by bisection (in log space, 1/20 to 1) for the cheapest run that meets
the SLO target; the workload's behavior (windows and rate limits) and bounds apply as to every contender.

``reactive`` is the same follower without the forecast: at ``t`` it knows exactly the work that arrived over
the minute before (no scrape, no rate window, no lag) and asks for that, swept the same way, more finely. What
it cannot reach, no rule that sizes the fleet in proportion to the present load can, however well it measures
and however it is tuned; what lies between it and the clairvoyant only a forecast of the load saves
(docs/decisions/baselines.md).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial
from typing import Any, ClassVar

import numpy as np
from pydantic import BaseModel

from policies.base import Observation, PolicyBase, Proposal
from policies.pipeline import WorkloadDecider
from policies.policy_file import PolicyFile, Workload
from simulations.replica_model import ReplicaModel
from simulations.runner import Contender, RunResult, allowed_misses, run
from simulations.traces import Trace
from simulations.tuning import cheapest_meeting

WINDOW_S = 60  # the work's rate over a minute: the scale of the signals every policy reads
LEAST_UTILIZATION = 0.05
STEPS = 5  # to about 10 % of the utilization: the floor is a yardstick, not a setting to deploy
REACTIVE_STEPS = 7  # to about 2.5 %: what it cannot reach is a claim about every rule in proportion to the present


def _work_per_second(trace: Trace, model: ReplicaModel) -> np.ndarray:
    """The replica seconds of work arriving in each second of the trace (``ReplicaModel.min_work_s``)."""
    prompt = trace.least_prefill_tokens if model.prefix_caching else trace.prompt_tokens.astype(float)
    work = model.min_work_s(prompt, trace.output_tokens.astype(float))
    end = math.ceil(float(trace.arrival_s[-1])) + 1
    return np.bincount(trace.arrival_s.astype(np.int64), weights=work, minlength=end)


def busiest_ahead(trace: Trace, model: ReplicaModel, interval: float) -> np.ndarray:
    """For each tick ``i`` (at ``i * interval``): the replicas' worth of work in the busiest minute that
    begins within the next cold start and interval."""
    per_second = _work_per_second(trace, model)
    end = len(per_second)
    rate = np.convolve(per_second, np.ones(WINDOW_S) / WINDOW_S)[WINDOW_S - 1 :]  # the minute from s on
    ahead = math.ceil(model.cold_start_s + interval)
    ticks = math.ceil(end / interval) + 1
    need = np.zeros(ticks)
    for i in range(ticks):
        start = int(i * interval)
        window = rate[start : start + ahead + 1]
        need[i] = window.max() if len(window) else 0.0
    return need


def minute_past(trace: Trace, model: ReplicaModel, interval: float) -> np.ndarray:
    """For each tick ``i`` (at ``i * interval``): the replicas' worth of work that arrived in the minute before
    it, counted from the trace's start."""
    per_second = _work_per_second(trace, model)
    arrived = np.concatenate([[0.0], np.cumsum(per_second)])  # arrived[s]: the work of seconds [0, s)
    ticks = math.ceil(len(per_second) / interval) + 1
    now = np.minimum((np.arange(ticks) * interval).astype(np.int64), len(per_second))
    need: np.ndarray = (arrived[now] - arrived[np.maximum(now - WINDOW_S, 0)]) / WINDOW_S
    return need


class _Params(BaseModel):
    utilization: float


class FollowerPolicy(PolicyBase):
    """A policy of the simulator alone (it reads the trace): the fleet a ``need`` per tick asks for
    (``busiest_ahead``, ``minute_past``) at a ``utilization``."""

    Params: ClassVar[type[BaseModel]] = _Params
    type: ClassVar[str] = "follower"

    def __init__(self, need: np.ndarray, interval: float, utilization: float) -> None:
        self.need, self.interval, self.utilization = need, interval, utilization
        self.params = _Params(utilization=utilization)
        self.state = None

    def recommend(self, observation: Observation) -> Proposal:
        index = min(round(observation.now / self.interval), len(self.need) - 1)
        need = float(self.need[index]) / self.utilization
        return Proposal(max(1, math.ceil(need - 1e-9)), "steady", {"need": need})


def contender(
    document: PolicyFile, workload: Workload, need: np.ndarray, utilization: float, name: str = "clairvoyant"
) -> Contender:
    interval = float(document.interval)
    ctx = workload.context(interval)
    policy = FollowerPolicy(need, interval, utilization)
    decider = WorkloadDecider(ctx, policy)
    return Contender(name, interval, decider, lambda fleet, now: {}, tuned={"utilization": utilization})


def cheapest_follower(
    kind: str,
    trace: Trace,
    model: ReplicaModel,
    document: PolicyFile,
    workload: Workload,
    initial: int,
    slo_ttft: float,
    slo_target: float,
    stop: Any = None,
) -> RunResult:
    """The follower ``kind`` (``FOLLOWERS``: its need per tick, and how finely it is searched) at the cheapest
    ``utilization`` whose run meets the SLO target, by the bisection ``--tune`` searches with
    (``tuning.cheapest_meeting``); the safest run if none does."""
    need_for, steps = FOLLOWERS[kind]
    need = need_for(trace, model, float(document.interval))
    budget = allowed_misses(trace, slo_target)

    def attempt(utilization: float, full: bool = False) -> RunResult:
        ran = contender(document, workload, need, round(utilization, 4), kind)
        return run(trace, model, ran, initial, slo_ttft, miss_budget=None if full else budget, stop=stop)

    return cheapest_meeting(
        lambda x, full: attempt(math.exp(x), full), math.log(LEAST_UTILIZATION), 0.0, steps, slo_target
    )[1]


FOLLOWERS: dict[str, tuple[Callable[[Trace, ReplicaModel, float], np.ndarray], int]] = {
    "clairvoyant": (busiest_ahead, STEPS),
    "reactive": (minute_past, REACTIVE_STEPS),
}
clairvoyant = partial(cheapest_follower, "clairvoyant")
reactive = partial(cheapest_follower, "reactive")
