"""`simulate`: the configured policies and the baselines on one trace, optionally tuned to the SLO.

Baselines, all with the workload's min and max replicas:

* ``keda-avg``: the design article's ScaledObject as KEDA and the HPA run it: waiting requests averaged
  per pod under an ``AverageValue`` target of 2, the max KV-cache usage under an ``AverageValue`` of 0.85,
  the article's behavior, a 15 s HPA cycle, empty results as 0 (``ignoreNullValues``).
* ``keda-sum``: the corrected configuration: total waiting under ``AverageValue`` 2, max KV-cache usage
  under ``metricType: Value`` 0.85, same behavior and cycle.
* ``static-best``: the smallest fixed fleet that meets the SLO target over the whole trace (bisection).
* ``clairvoyant``: a follower that knows the load to come, same cold start and behavior, swept to its
  cheapest setting that meets the SLO: the achievable floor (``clairvoyant.clairvoyant``).
* ``reactive``: the same follower told the load of the minute past exactly, swept the same way: what a rule
  without a forecast could have done (``clairvoyant.reactive``).
* ``oracle``: a lower bound on GPU-hours at that SLO (see ``oracle.oracle_bound``).
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from policies.policy_file import PolicyFile, Workload
from simulations.clairvoyant import FOLLOWERS
from simulations.contenders import (
    workload_variant,
)
from simulations.jobs import Shared, run_jobs, worker_count
from simulations.oracle import OracleBound, oracle_bound
from simulations.replica_model import ReplicaModel
from simulations.runner import RunResult, allowed_misses
from simulations.signals import signals_for
from simulations.traces import Trace

DEFAULT_POLICY_TYPES = ("threshold", "pid", "predictive")


@dataclass
class Comparison:
    trace: Trace
    model: ReplicaModel
    workload: Workload
    slo_ttft: float
    slo_target: float
    initial_replicas: int
    results: list[RunResult] = field(default_factory=list)
    static_best_replicas: int | None = None
    oracle_gpu_hours: float = 0.0
    oracle_max_replicas: int = 0


class Progress:
    """A one-line progress bar on standard error, shown once a run has taken more than two seconds."""

    def __init__(self, total: int, enabled: bool) -> None:
        self.total, self.done, self.enabled = total, 0, enabled
        self.started = time.monotonic()

    def step(self, label: str) -> None:
        self.done += 1
        elapsed = time.monotonic() - self.started
        if not self.enabled or elapsed < 2.0:
            return
        width = 30
        filled = int(width * self.done / max(self.total, self.done))
        sys.stderr.write(
            f"\r[{'#' * filled}{'.' * (width - filled)}] {self.done}/{max(self.total, self.done)} "
            f"{elapsed:5.1f}s {label:<28}"
        )
        sys.stderr.flush()

    def close(self) -> None:
        if self.enabled and time.monotonic() - self.started >= 2.0:
            sys.stderr.write("\n")


def static_best(
    shared: Shared,
    lo: int,
    hi: int,
    least: int,
    tick: Callable[[str], None] = lambda _: None,
    then: list[tuple[str, Any]] | None = None,
) -> tuple[int | None, RunResult, list[RunResult] | None]:
    """The smallest fixed fleet in ``[lo, hi]`` meeting the SLO target (SLO attainment grows with the fleet).
    Without one, ``None`` and the run at ``hi``.

    The search starts at ``least``, the fleet the oracle's busiest minute needs (a fixed fleet must carry it too). Each
    round runs as many candidate fleets as there are worker processes, spread evenly over what is left, and
    a run that has certainly missed more requests than the target allows stops early.

    ``then`` are the runs that start from the fleet found. When the last round has one fleet left to try,
    just below one that met the target, its run alone would leave the other workers idle: they start
    ``then`` from that fleet meanwhile, betting that it meets the target. If it does, their results come
    third; if not, they are stopped, the third item is ``None``, and the caller runs ``then`` itself.
    """
    budget = allowed_misses(shared.trace, shared.slo_target)
    low, high = min(max(lo, least), hi), hi
    results: dict[int, RunResult] = {}
    ahead: list[RunResult] | None = None
    workers = worker_count(shared, 2)
    while low < high:
        k = min(workers, high - low)
        points = sorted({low + (high - low) * (i + 1) // (k + 1) for i in range(k)})
        jobs: list[tuple[str, Any]] = [("static", (n, budget)) for n in points]
        if then and len(points) == 1 and high in results and workers > 1:
            ran = run_jobs(
                replace(shared, initial=points[0]),
                [*jobs, *then],
                tick,
                first_decides=lambda r: r.meets(shared.slo_target),
            )
            ahead = ran[1:] or None  # the bet on points[0] held: the search ends there
        else:
            ran = run_jobs(shared, jobs, tick)
        for n, result in zip(points, ran[: len(points)], strict=True):
            results[n] = result
        passing = [n for n in points if results[n].meets(shared.slo_target)]
        if passing:
            high = min(passing)
        failing = [n for n in points if n < high and not results[n].meets(shared.slo_target)]
        if failing:
            low = max(failing) + 1
    if low not in results:
        results[low] = run_jobs(shared, [("static", (low, budget))], tick)[0]
    if results[low].meets(shared.slo_target):
        return low, results[low], ahead
    return None, run_jobs(shared, [("static", (hi, None))], tick)[0], None  # the full run at hi, for the report


@dataclass
class Footing:
    """What every comparison of a workload on a trace stands on: the oracle's bound, the smallest fixed fleet
    that meets the SLO (``None`` if none in bounds) with its run, and the fleet every run starts from."""

    bound: OracleBound
    static_replicas: int | None
    static_run: RunResult
    initial: int
    ahead: list[RunResult] | None  # ``static_best``'s bet on the runs started from the fleet found
    max_replicas: int  # the workload's bound it was found under


def footing(
    trace: Trace,
    model: ReplicaModel,
    document: PolicyFile,
    workload: Workload,
    slo_ttft: float,
    slo_target: float,
    tick: Callable[[str], None] = lambda _: None,
    then: list[tuple[str, Any]] | None = None,
    grow_to: int | None = None,
    workers: int | None = None,
) -> Footing:
    """The oracle's bound, then the fixed fleet's search from its busiest minute (``static_best``, which
    may start ``then`` on a bet). Runs start from that fleet, as if the controller had been running before
    the trace began: no policy pays for a cold fleet at t=0; without one, from ``maxReplicas``.

    With ``grow_to``, where no fixed fleet meets the target the search goes on under twice the bound, up to
    ``grow_to`` (``compare``'s docstring says when it stops doubling), the oracle's bound standing and from above
    the fleet it ended on; the footing's ``max_replicas`` is the bound it was found under."""
    searching = Shared(trace, model, document, workload, workload.max_replicas, slo_ttft, slo_target, workers)
    base = _footing(searching, tick, then)
    gap = math.inf
    while base.static_replicas is None and grow_to is not None and searching.workload.max_replicas < grow_to:
        wait = base.static_run.queue_wait_p99_s
        if not (2 * (slo_target - base.static_run.slo_attainment) <= gap or (wait or 0.0) > slo_ttft):
            break
        gap = slo_target - base.static_run.slo_attainment
        grown = {"maxReplicas": min(grow_to, 2 * base.initial)}
        document, workload = workload_variant(searching.document, searching.workload, grown)
        searching = replace(searching, document=document, workload=workload, initial=workload.max_replicas)
        base = _footing(searching, tick, then, above=base)
    return base


def _footing(
    searching: Shared, tick: Callable[[str], None], then: list[tuple[str, Any]] | None, above: Footing | None = None
) -> Footing:
    """``footing`` under the bound of ``searching``'s workload; ``above``: the footing under a lower one."""
    s = searching
    lo, hi = s.workload.min_replicas, s.workload.max_replicas
    bound = above.bound if above is not None else oracle_bound(s.trace, s.model, lo, s.slo_ttft, s.slo_target)
    start = max(bound.busiest_fleet, above.initial + 1) if above is not None else bound.busiest_fleet
    best, best_run, ahead = static_best(s, max(lo, 1), hi, start, tick, then)  # a fixed fleet serves
    return Footing(bound, best, best_run, best if best is not None else hi, ahead, hi)


def compare(
    trace: Trace,
    model: ReplicaModel,
    document: PolicyFile,
    policy_types: list[str],
    slo_ttft: float,
    slo_target: float,
    tuning: bool = False,
    progress: bool = True,
    grow_to: int | None = None,
    workers: int | None = None,
    base: Footing | None = None,
) -> Comparison:
    """Every policy of ``policy_types`` and the baselines on the trace, for the document's first workload.

    ``grow_to``: for the built-in workload, whose bounds are no user's. Where no fixed fleet up to its
    ``maxReplicas`` meets the SLO target, ``maxReplicas`` doubles, up to ``grow_to``, until one does, so
    that a trace heavier than the built-in bound, or a slower replica, still gets a comparison. It stops
    doubling once a doubling has neither halved the largest fixed fleet's shortfall from the target nor
    left it without requests that waited in the queue longer than the SLO: a fleet that misses on its
    replicas' own speed (a 100 % target, an SLO under one prompt's prefill) misses at any size. The
    comparison's ``workload`` has the bound it ran with. ``workers``: processes for a long trace's runs
    (one per core by default). ``base``: the ``footing`` of the trace, found beforehand (``simulate`` finds it
    while it plans the policy), else found here."""
    workload = document.workloads[0]
    signals_for([m.name for m in workload.metrics])  # a metric the simulator cannot provide fails here
    lo, hi = workload.min_replicas, workload.max_replicas
    baselines = 2 + 2 * (workload.activation is None)  # the KEDA pair, the clairvoyant and the reactive follower
    searched = 0 if base is not None else math.ceil(math.log2(max(hi - lo, 1) + 1)) + 1
    total = len(policy_types) * (9 if tuning else 1) + baselines + searched
    bar = Progress(total, progress and sys.stderr.isatty())
    jobs: list[tuple[str, Any]] = [("tune" if tuning else "policy", t) for t in policy_types]
    jobs += [("keda", True), ("keda", False)]
    if workload.activation is None:  # they never go to zero, so they are no floor for a workload that may
        jobs += [("reactive", None), ("clairvoyant", None)]
    # The followers' searches are several runs in one job each: started first, so that none runs alone at the end.
    order = sorted(range(len(jobs)), key=lambda i: jobs[i][0] not in FOLLOWERS)
    submitted = [jobs[i] for i in order]
    # Untuned runs may start during the search's last run (``then``); tuning searches, many runs each, are
    # not started on a bet.
    then = None if tuning else submitted
    if base is None:
        base = footing(trace, model, document, workload, slo_ttft, slo_target, bar.step, then, grow_to, workers)
    if base.max_replicas != workload.max_replicas:
        document, workload = workload_variant(document, workload, {"maxReplicas": base.max_replicas})
    result = Comparison(
        trace, model, workload, slo_ttft, slo_target, base.initial, static_best_replicas=base.static_replicas
    )
    shared = Shared(trace, model, document, workload, base.initial, slo_ttft, slo_target, workers)
    ran = base.ahead if base.ahead is not None else run_jobs(shared, submitted, bar.step)
    result.results.extend(ran[order.index(i)] for i in range(len(jobs)))
    result.results.append(base.static_run)
    result.oracle_gpu_hours = base.bound.gpu_hours
    result.oracle_max_replicas = base.bound.busiest_fleet
    bar.close()
    return result
