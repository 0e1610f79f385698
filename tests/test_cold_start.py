"""The writes-to-ready tracker (``policies/cold_start.py``) the daemon and the simulator both time scale-ups with,
and ``coldStartSeconds: auto`` simulated by it."""

from __future__ import annotations

import numpy as np
import pytest

from policies.cold_start import WritesToReady
from policies.policy_file import parse_policy_document
from simulations.contenders import policy_contender
from simulations.replica_model import parse_overrides
from simulations.runner import run
from simulations.traces import Trace
from tests.helpers import workload_doc

# (tick, spec replicas, ready, measured): written 2 -> 4 at 100 s.
CASES = {
    "ready at the count": [(115, 4, 2, None), (400, 4, 3, None), (415, 4, 4, 315.0), (430, 4, 4, None)],
    "past the count counts": [(200, 6, 5, 100.0)],
    "scaled down before ready: abandoned": [(200, 3, 3, None), (300, 4, 4, None)],
    "no readiness read yet": [(200, 4, None, None), (215, 4, 4, 115.0)],
}


@pytest.mark.parametrize("ticks", CASES.values(), ids=list(CASES))
def test_a_scale_up_is_timed_from_its_write_to_its_readiness(
    ticks: list[tuple[float, int, int | None, float | None]],
) -> None:
    tracker = WritesToReady()
    tracker.written(100.0, 2, 4)
    for now, replicas, ready, measured in ticks:
        assert tracker.observe(now, replicas, ready) == measured


def test_a_write_that_does_not_scale_up_ends_the_measurement() -> None:
    tracker = WritesToReady()
    tracker.written(100.0, 2, 4)
    tracker.written(130.0, 4, 3)
    assert tracker.pending is None and tracker.observe(500.0, 4, 4) is None


def _steps(seconds: float, low: float, high: float) -> Trace:
    """Load that steps between two rates every half hour: scale-ups to time."""
    rng = np.random.default_rng(3)
    arrivals: list[float] = []
    t = 0.0
    while t < seconds:
        t += rng.exponential(1 / (high if int(t // 1800) % 2 else low))
        arrivals.append(t)
    n = len(arrivals)
    return Trace("steps", np.asarray(arrivals), np.full(n, 300), np.full(n, 100))


def test_cold_start_auto_is_simulated_by_the_scale_ups_it_times() -> None:
    """Under ``auto`` the policy starts from the configured default and moves to what the simulated replicas take
    to be ready (120 s here, plus a tick at most), as the daemon's does; with a number it looks ahead by the
    replicas' own cold start from the start."""
    model = parse_overrides(["cold_start_s=120"])
    trace = _steps(4 * 3600, 2.0, 12.0)
    document = parse_policy_document(workload_doc(coldStartSeconds="auto", policy={"type": "threshold"}))
    contender = policy_contender(document, document.workloads[0], model)
    assert contender.decider is not None
    assert contender.decider.ctx.cold_start_seconds == 300  # the default, before any scale-up is timed
    run(trace, model, contender, 1, 2.0, False)
    samples = contender.decider.snapshot().cold_starts
    assert len(samples) >= 3 and all(120 <= s <= 120 + 2 * 15 for s in samples)
    assert 120 <= contender.decider.ctx.cold_start_seconds <= 150
    fixed = parse_policy_document(workload_doc(coldStartSeconds=300, policy={"type": "threshold"}))
    told = policy_contender(fixed, fixed.workloads[0], model)
    assert told.decider is not None and told.decider.ctx.cold_start_seconds == 120
