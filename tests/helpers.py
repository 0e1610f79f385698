"""Small builders shared by the unit tests."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from policies.spec import Behavior, ResolvedBehavior, ScalingPolicy, ScalingRules
from simulations.fleet import Fleet
from simulations.traces import Trace


def rules(
    policies: list[tuple[str, int, int]] | None = None,
    window: int | None = None,
    select: str | None = None,
) -> ScalingRules:
    data: dict[str, Any] = {}
    if policies is not None:
        data["policies"] = [ScalingPolicy(type=t, value=v, periodSeconds=p) for t, v, p in policies]
    if window is not None:
        data["stabilizationWindowSeconds"] = window
    if select is not None:
        data["selectPolicy"] = select
    return ScalingRules(**data)


def behavior(up: ScalingRules | None = None, down: ScalingRules | None = None) -> ResolvedBehavior:
    return Behavior(scaleUp=up, scaleDown=down).resolved()


def workload_doc(**overrides: Any) -> dict[str, Any]:
    """A valid policy document with one workload; keyword arguments replace workload keys."""
    workload: dict[str, Any] = {
        "target": {"kind": "Deployment", "namespace": "llm-serving", "name": "vllm"},
        "minReplicas": 1,
        "maxReplicas": 10,
        "metrics": [{"name": "num_requests_waiting", "target": {"type": "AverageValue", "value": 2}}],
    }
    workload.update(overrides)
    return {"interval": 15, "workloads": [workload]}


def policy_file(folder: Path, **overrides: Any) -> Path:
    """``workload_doc(**overrides)`` written as a policy file in ``folder``."""
    path = folder / "policy.yaml"
    path.write_text(yaml.safe_dump(workload_doc(**overrides)))
    return path


def drain(fleet: Fleet) -> None:
    """Step ``fleet`` from time 0 until every request of its trace has arrived and left."""
    now = 0.0
    while not fleet.done or now < fleet.trace.arrival_s[-1]:
        fleet.step(now)
        now += fleet.model.step_s


def assert_report_consistent(data: dict[str, Any]) -> None:
    """What any report must hold whatever the trace: every request accounted for, fleets within bounds, GPU
    time at least the smallest fleet's, static-best costing its size, the oracle under every run that meets."""
    model, n = data["model"], data["requests"]
    hours = data["duration_s"] * model["gpus_per_replica"] / 3600
    runs = {r["policy"]: r for r in data["results"]}
    assert set(runs) >= {"keda-avg", "keda-sum", "static-best", "oracle"}
    for name, r in runs.items():
        if name == "oracle":
            continue
        assert r["completed_requests"] + r["dropped_requests"] == n, name
        assert 0 <= r["slo_attainment"] <= 1 - r["dropped_requests"] / n + 1e-9, name
        assert model["min_replicas"] <= r["max_replicas"] <= model["max_replicas"], name
        assert r["gpu_hours"] >= model["min_replicas"] * hours - 5e-5, name  # the report rounds to 4 decimals
        assert r["queue_wait_p99_s"] is None or r["queue_wait_p99_s"] >= 0, name
        if r["slo_attainment"] >= model["slo_target"]:
            assert runs["oracle"]["gpu_hours"] <= r["gpu_hours"], name
        # No replica's cache holds more than one cache of unbounded size shared by all would.
        assert ("prefix_cache_hits" in r) == ("prefix_reuse" in data), name
        assert 0 <= r.get("prefix_cache_hits", 0) <= data.get("prefix_reuse", 0) + 1e-4, name
    # A busiest window of 2w holds at most two of w, so the ratio to the mean only falls as the window grows.
    busiest = list(data["load"]["busiest_prompt_tokens_over_mean"].values())
    assert all(a >= b - 0.01 for a, b in pairwise(busiest)), busiest
    static = model["static_best_replicas"]
    if static is not None:
        assert runs["static-best"]["gpu_hours"] == pytest.approx(static * hours, rel=1e-3, abs=1e-4)
        assert runs["static-best"]["slo_attainment"] >= model["slo_target"]


def poisson_trace(rate: float, n: int, prompt: int, output: int, seed: int = 1) -> Trace:
    """``n`` requests of fixed lengths, Poisson arrivals at ``rate`` per second from 0."""
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(1 / rate, n))
    return Trace("poisson", arrivals - arrivals[0], np.full(n, prompt), np.full(n, output))


def child_processes(pid: int) -> set[int]:
    """The processes whose parent is ``pid`` (from /proc)."""
    found = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.add(int(entry))
    return found


@contextmanager
def deliverable(sent: signal.Signals) -> Iterator[None]:
    """``sent`` neither ignored nor blocked here and in what a process started here inherits, as from a terminal:
    a shell without job control starts a background job (``pytest ... &`` from a script) with Ctrl-C ignored, and
    the suite's workers and their children inherit it (measured: SigIgn 0x1001006 in every worker, 0x1001000 when the
    suite runs in the foreground)."""
    ignored = signal.getsignal(sent) == signal.SIG_IGN
    if ignored:
        signal.signal(sent, signal.default_int_handler if sent == signal.SIGINT else signal.SIG_DFL)
    mask = signal.pthread_sigmask(signal.SIG_UNBLOCK, [sent])
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        if ignored:
            signal.signal(sent, signal.SIG_IGN)
