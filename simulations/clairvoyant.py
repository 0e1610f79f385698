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
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np
from pydantic import BaseModel

from policies.base import Observation, Proposal
from policies.pipeline import WorkloadDecider
from policies.policy_file import PolicyFile, Workload
from simulations.replica_model import ReplicaModel
from simulations.runner import Contender, RunResult, allowed_misses, run
from simulations.traces import Trace
from simulations.tuning import cheapest_meeting

WINDOW_S = 60  # the work's rate over a minute: the scale of the signals every policy reads
LEAST_UTILIZATION = 0.05
STEPS = 5  # to about 10 % of the utilization: the floor is a yardstick, not a setting to deploy


def busiest_ahead(trace: Trace, model: ReplicaModel, interval: float) -> np.ndarray:
    """For each tick ``i`` (at ``i * interval``): the replicas' worth of work in the busiest minute that
    begins within the next cold start and interval."""
    prompt = trace.least_prefill_tokens if model.prefix_caching else trace.prompt_tokens.astype(float)
    work = model.min_work_s(prompt, trace.output_tokens.astype(float))
    end = math.ceil(float(trace.arrival_s[-1])) + 1
    per_second = np.bincount(trace.arrival_s.astype(np.int64), weights=work, minlength=end)
    rate = np.convolve(per_second, np.ones(WINDOW_S) / WINDOW_S)[WINDOW_S - 1 :]  # the minute from s on
    ahead = math.ceil(model.cold_start_s + interval)
    ticks = math.ceil(end / interval) + 1
    need = np.zeros(ticks)
    for i in range(ticks):
        start = int(i * interval)
        window = rate[start : start + ahead + 1]
        need[i] = window.max() if len(window) else 0.0
    return need


class _Params(BaseModel):
    utilization: float


class ClairvoyantPolicy:
    """A policy of the simulator alone (it reads the future): the fleet ``busiest_ahead`` asks for."""

    Params: ClassVar[type[BaseModel]] = _Params
    type: ClassVar[str] = "clairvoyant"

    def __init__(self, need: np.ndarray, interval: float, utilization: float) -> None:
        self.need, self.interval, self.utilization = need, interval, utilization
        self.params = _Params(utilization=utilization)
        self.state: Any = None

    def recommend(self, observation: Observation) -> Proposal:
        index = min(round(observation.now / self.interval), len(self.need) - 1)
        need = float(self.need[index]) / self.utilization
        return Proposal(max(1, math.ceil(need - 1e-9)), "steady", {"need": need})


def contender(document: PolicyFile, workload: Workload, need: np.ndarray, utilization: float) -> Contender:
    interval = float(document.interval)
    ctx = workload.context(interval)
    policy = ClairvoyantPolicy(need, interval, utilization)
    decider = WorkloadDecider(ctx, policy)
    return Contender("clairvoyant", interval, decider, lambda fleet, now: {}, tuned={"utilization": utilization})


def clairvoyant(
    trace: Trace,
    model: ReplicaModel,
    document: PolicyFile,
    workload: Workload,
    initial: int,
    slo_ttft: float,
    slo_target: float,
    stop: Any = None,
) -> RunResult:
    """The cheapest ``utilization`` whose run meets the SLO target, by the bisection ``--tune`` searches with
    (``tuning.cheapest_meeting``); the safest run if none does."""
    need = busiest_ahead(trace, model, float(document.interval))
    budget = allowed_misses(trace, slo_target)

    def attempt(utilization: float, full: bool = False) -> RunResult:
        ran = contender(document, workload, need, round(utilization, 4))
        return run(trace, model, ran, initial, slo_ttft, miss_budget=None if full else budget, stop=stop)

    return cheapest_meeting(
        lambda x, full: attempt(math.exp(x), full), math.log(LEAST_UTILIZATION), 0.0, STEPS, slo_target
    )[1]
