"""The runs of a comparison as jobs: each one contender's run on the shared trace, serial on a short trace and
in worker processes (one per core unless ``simulate --jobs`` says, forked so that they inherit the trace) on a
long one; results are the same either way. A job no longer wanted (a lost bet, Ctrl-C, SIGTERM, an error)
stops within a simulated minute, and a worker still there ``STOP_GRACE_S`` later is killed."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing.synchronize import Event as EventType
from typing import Any, TypeVar

from policies.policy_file import PolicyFile, Workload
from simulations.clairvoyant import FOLLOWERS, cheapest_follower
from simulations.contenders import keda_contender, policy_contender, policy_variant
from simulations.fleet import warm
from simulations.replica_model import ReplicaModel
from simulations.runner import Contender, RunResult, run
from simulations.traces import Trace
from simulations.tuning import policy_block, tune


@dataclass(frozen=True)
class Shared:
    trace: Trace
    model: ReplicaModel
    document: PolicyFile
    workload: Workload
    initial: int
    slo_ttft: float
    slo_target: float
    workers: int | None = None  # processes for a long trace's runs: one per core unless given


_SHARED: Shared | None = None
T = TypeVar("T")
PARALLEL_MIN_REQUESTS = 50_000
STOP_GRACE_S = 1.5  # a run told to stop ends within a simulated minute, some milliseconds
# While worker processes run, set by the parent when the runs still going are no longer wanted (a lost
# bet, Ctrl-C, an error); made before they are forked, so that they all share it.
_STOP: EventType | None = None


def _quiet(_: str) -> None:
    """A worker's tuning search ticks no progress bar (the parent's ticks once per job)."""


def _job(job: tuple[str, Any], shared: Shared | None = None) -> RunResult:
    """One contender's run; in a worker process the shared inputs come from the parent by fork."""
    s = shared or _SHARED
    assert s is not None
    kind, arg = job
    stop = _STOP.is_set if _STOP is not None else None
    if kind == "static":
        replicas, budget = arg
        contender = Contender("static-best", static=replicas)
        return run(s.trace, s.model, contender, replicas, s.slo_ttft, miss_budget=budget, stop=stop)
    if kind == "keda":
        contender = keda_contender(s.document, s.workload, s.model, arg)
        return run(s.trace, s.model, contender, s.initial, s.slo_ttft, stop=stop)
    if kind in FOLLOWERS:
        return cheapest_follower(
            kind, s.trace, s.model, s.document, s.workload, s.initial, s.slo_ttft, s.slo_target, stop=stop
        )
    if kind == "tune":
        return tune(
            s.trace, s.model, s.document, s.workload, arg, s.initial, s.slo_ttft, s.slo_target, _quiet, stop=stop
        )
    doc, wl = policy_variant(s.document, s.workload, policy_block(s.workload, arg))
    return run(s.trace, s.model, policy_contender(doc, wl, s.model), s.initial, s.slo_ttft, stop=stop)


def worker_count(shared: Shared, jobs: int) -> int:
    """Worker processes for ``jobs`` runs on a long trace: one per core, or ``shared.workers``, and no more
    than there are jobs; none (1) on a short trace."""
    if shared.trace.requests < PARALLEL_MIN_REQUESTS or "fork" not in mp.get_all_start_methods():
        return 1
    return max(1, min(jobs, shared.workers or os.cpu_count() or 1))


def _leave_interrupts_to_the_parent() -> None:
    """Ctrl-C reaches every process of the terminal's group, and SIGTERM may: the workers ignore both, and the
    parent stops their runs (``_STOP``) as it unwinds, so the user sees one message, not a traceback per
    worker, and no worker outlives it (``_end_workers``)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


@contextmanager
def _interrupts_held() -> Iterator[None]:
    """Ctrl-C and SIGTERM held back while the pool forks its workers, then raised as they came: one that lands
    between a fork and the pool's note of it would leave a worker nobody stops, waiting for work for ever
    (tests/test_jobs.py). Off the main thread, where no signal is handled, nothing is held."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    held = (signal.SIGINT, signal.SIGTERM)
    previous = {sent: signal.signal(sent, lambda number, _: caught.append(number)) for sent in held}
    try:
        yield
    finally:
        for sent, handler in previous.items():
            signal.signal(sent, handler)
        if caught:
            signal.raise_signal(caught[0])  # handled now as it would have been then


def _end_workers(grace_s: float) -> None:
    """Wait up to ``grace_s`` for the worker processes to end, then kill those still there."""
    deadline = time.monotonic() + grace_s
    for process in mp.active_children():
        process.join(max(deadline - time.monotonic(), 0.0))
    for process in mp.active_children():
        process.kill()
        process.join(1.0)


def _collect(
    jobs: list[tuple[str, Any]],
    outcomes: Iterator[RunResult],
    tick: Callable[[str], None],
    first_decides: Callable[[RunResult], bool] | None,
) -> list[RunResult]:
    """The jobs' results in order, drawn from ``outcomes`` (lazy, so a job not reached is not run or
    waited for), stopping after the first unless ``first_decides`` holds for it."""
    results: list[RunResult] = []
    for job, result in zip(jobs, outcomes, strict=True):
        results.append(result)
        tick(str(job[1]))
        if first_decides is not None and len(results) == 1 and not first_decides(result):
            break
    return results


_BESIDE: Callable[[], Any] | None = None  # ``beside``'s work, set before its worker is forked


def _beside() -> Any:
    assert _BESIDE is not None
    return _BESIDE()


@contextmanager
def _workers(
    count: int, shared: Shared | None = None, work: Callable[[], Any] | None = None
) -> Iterator[ProcessPoolExecutor]:
    """A pool of ``count`` worker processes, forked at its first submit, that inherit ``shared`` (``run_jobs``' runs)
    or ``work`` (``beside``'s). Whatever still runs when it closes is not wanted: each run ends within a simulated
    minute of it (``_STOP``), and a worker still there ``STOP_GRACE_S`` later is killed."""
    global _SHARED, _STOP, _BESIDE
    warm()  # compiled here once, inherited by the workers
    context = mp.get_context("fork")
    stop = context.Event()
    _SHARED, _STOP, _BESIDE = shared, stop, work
    pool = ProcessPoolExecutor(count, context, initializer=_leave_interrupts_to_the_parent)
    try:
        yield pool
    finally:
        stop.set()
        pool.shutdown(wait=False, cancel_futures=True)
        _end_workers(STOP_GRACE_S)
        pool.shutdown(wait=True)
        _SHARED, _STOP, _BESIDE = None, None, None


@contextmanager
def beside(work: Callable[[], T]) -> Iterator[Callable[[], T]]:
    """``work`` run in a worker process while the caller goes on in its own, on a core it would leave idle: what is
    yielded waits for its result. The worker inherits ``work`` by fork, and a run it makes stops, as a job's does,
    once the caller leaves without the result (an error, Ctrl-C). The caller runs no ``run_jobs`` of its own
    meanwhile, whose end stops every worker. ``simulate`` finds the fixed fleet's search so while it plans the
    follower: on two days, the plan's runs (some 20 s) no longer wait for a core."""
    with _workers(1, work=work) as pool:
        with _interrupts_held():  # the submit forks the worker
            future = pool.submit(_beside)
        yield future.result


def run_jobs(
    shared: Shared,
    jobs: list[tuple[str, Any]],
    tick: Callable[[str], None],
    first_decides: Callable[[RunResult], bool] | None = None,
) -> list[RunResult]:
    """The contenders' runs are independent: on a long trace they run in parallel worker processes,
    which inherit the trace by fork; results are the same either way.

    With ``first_decides``, the others are worth running only if it holds for the first job's result:
    when it does not, they are stopped and only the first result is returned.
    """
    workers = worker_count(shared, len(jobs))
    if workers < 2:
        return _collect(jobs, (_job(job, shared) for job in jobs), tick, first_decides)
    with _workers(workers, shared=shared) as pool:
        with _interrupts_held():  # the first submit forks the workers
            futures = [pool.submit(_job, job) for job in jobs]  # started in this order
        return _collect(jobs, (future.result() for future in futures), tick, first_decides)
