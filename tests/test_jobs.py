"""Runs in worker processes: stopped by Ctrl-C, none left behind."""

from __future__ import annotations

import os
import signal
import time

import pytest

import simulations.jobs as jobs
from simulations.builtin import builtin_policy
from simulations.replica_model import ReplicaModel
from simulations.traces import synthetic_day
from tests.helpers import child_processes, deliverable


@pytest.mark.parametrize("sent", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupt_during_a_workers_fork_leaves_no_worker_behind(
    monkeypatch: pytest.MonkeyPatch, sent: signal.Signals
) -> None:
    """Ctrl-C (or SIGTERM) that lands just after the second worker's fork, before the pool has noted it: the
    interrupt is raised once the workers are started, and every one of them ends. Before, that worker waited for
    work for ever, and the process group outlived the command."""
    trace = synthetic_day(seed=2, mean_rps=1.5, hours=0.5, bursts=2)
    model = ReplicaModel(cold_start_s=120)
    document = builtin_policy(model, trace)
    shared = jobs.Shared(trace, model, document, document.workloads[0], 10, 2.0, 0.99, workers=2)
    monkeypatch.setattr(jobs, "PARALLEL_MIN_REQUESTS", 0)
    fork, forks = os.fork, []

    def interrupted_fork() -> int:
        pid = fork()
        if pid:
            forks.append(pid)
            if len(forks) == 2:
                os.kill(os.getpid(), sent)
        return pid

    class Terminated(Exception):
        pass

    def terminated(*_: object) -> None:
        raise Terminated

    before = child_processes(os.getpid())
    monkeypatch.setattr(os, "fork", interrupted_fork)
    previous = signal.signal(signal.SIGTERM, terminated)
    try:
        with deliverable(sent), pytest.raises(KeyboardInterrupt if sent == signal.SIGINT else Terminated):
            jobs.run_jobs(shared, [("static", (n, None)) for n in (10, 11, 12)], lambda _: None)
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert len(forks) == 2
    deadline = time.monotonic() + 5
    while (left := child_processes(os.getpid()) - before) and time.monotonic() < deadline:
        time.sleep(0.05)
    for pid in left:  # so that a failure here is one, not a suite waiting on a worker holding its pipes
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    assert not left


def test_work_beside_the_caller_runs_in_a_worker_and_stops_when_the_caller_fails(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``beside``: the work runs in another process while the caller goes on, and what it yields waits for the result;
    a caller that fails first stops the work's run (within a simulated minute) and leaves no worker behind."""
    trace = synthetic_day(seed=2, mean_rps=1.5, hours=0.5, bursts=2)
    model = ReplicaModel(cold_start_s=120)
    document = builtin_policy(model, trace)
    shared = jobs.Shared(trace, model, document, document.workloads[0], 10, 2.0, 0.99, workers=1)
    with jobs.beside(lambda: (os.getpid(), jobs.run_jobs(shared, [("static", (10, None))], lambda _: None))) as result:
        pid, (run,) = result()
    assert pid != os.getpid()
    assert run.to_json() == jobs.run_jobs(shared, [("static", (10, None))], lambda _: None)[0].to_json()

    class Failed(Exception):
        pass

    def forever() -> None:
        while not jobs.run_jobs(shared, [("static", (10, None))], lambda _: None)[0].abandoned:
            pass  # each run is whole until the caller leaves; then one stops, ``abandoned``

    before = child_processes(os.getpid())
    started = time.monotonic()
    with pytest.raises(Failed), jobs.beside(forever):
        time.sleep(0.5)
        raise Failed
    assert time.monotonic() - started < 0.5 + jobs.STOP_GRACE_S + 1
    assert not child_processes(os.getpid()) - before
