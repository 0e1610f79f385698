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
