"""Closed-loop runs (``simulations.runner``): what a run counts, its timeline, and when it stops."""

from __future__ import annotations

import math

import numpy as np
import pytest

from simulations.builtin import builtin_policy
from simulations.fleet import Fleet
from simulations.replica_model import ReplicaModel
from simulations.runner import (
    Contender,
    long_run_hint,
    lull_hint,
    p90_by_arrival,
    run,
    slo_met,
    ttft_beyond_prefill,
)
from simulations.signals import signals_for
from simulations.traces import Trace, synthetic_day
from tests.helpers import drain, poisson_trace


def test_a_run_counts_what_it_did_not_complete_as_dropped() -> None:
    """Requests still decoding when the run stops, or never served, are dropped in the report."""
    trace = poisson_trace(0.5, 200, 800, 500)
    contender = Contender("two", static=2)
    whole = run(trace, ReplicaModel(), contender, 2, 2.0, timeline=False)
    cut = run(trace, ReplicaModel(), contender, 2, 2.0, timeline=False, tail_limit_s=10.0)
    assert whole.dropped_requests == 0 and whole.completed_requests == trace.requests
    assert cut.dropped_requests > 0 and cut.completed_requests + cut.dropped_requests == trace.requests


NAN = float("nan")


@pytest.mark.parametrize(
    ("values", "arrival", "starts", "expected"),
    [
        ([float(v) for v in range(10)], [0.5] * 10, [0.0], [8.0]),  # nearest rank: the 9th of ten
        ([float(v) for v in range(20)][::-1], [0.5] * 20, [0.0], [17.0]),  # the 18th of twenty, in any order
        ([5.0], [3.0], [0.0, 2.0], [NAN, 5.0]),  # an interval without arrivals; the last runs to the end
        ([1.0, 2.0, 7.0], [-1.0, 0.5, 1.5], [0.0, 1.0], [2.0, 7.0]),  # arrivals before the first tick left out
        ([1.0, math.inf], [0.0, 0.1], [0.0], [math.inf]),  # one of two never served: over 10 %
        ([], [], [0.0, 1.0], [NAN, NAN]),
        ([1.0], [0.0], [], []),
    ],
)
def test_the_p90_by_arrival(
    values: list[float], arrival: list[float], starts: list[float], expected: list[float]
) -> None:
    got = p90_by_arrival(np.array(values), np.array(arrival), np.array(starts))
    assert got == pytest.approx(expected, nan_ok=True)


def test_the_timeline_shows_what_the_slo_judges() -> None:
    """The plot's TTFT panel: per tick, the 90th percentile of the requests arriving until the next one of
    their time to first token beyond their own prefill, the quantity ``slo_met`` holds to the SLO."""
    trace = poisson_trace(1.2, 600, 900, 150)
    fixed = run(trace, ReplicaModel(), Contender("two", static=2), 2, 2.0)
    series = fixed.timeline
    assert len(series["ttft_beyond_prefill_p90"]) == len(series["t"])
    fleet = Fleet(ReplicaModel(), trace, 2)
    drain(fleet)
    beyond = ttft_beyond_prefill(fleet)
    assert ((beyond <= 2.0 + 1e-9) == slo_met(fleet, 2.0)).all()
    ticks = np.array(series["t"])
    for i, start in enumerate(ticks):
        end = ticks[i + 1] if i + 1 < len(ticks) else np.inf
        inside = beyond[(fleet.arrival >= start) & (fleet.arrival < end)]
        want = np.quantile(inside, 0.9, method="inverted_cdf") if len(inside) else NAN
        assert series["ttft_beyond_prefill_p90"][i] == pytest.approx(want, nan_ok=True, abs=1e-9)
    assert np.nanmax(series["ttft_beyond_prefill_p90"]) > 2.0  # two replicas fall behind at times


def test_a_slower_cold_start_never_helps_a_reactive_policy() -> None:
    """A load step that a reactive policy must scale up for: the longer replicas take, the more requests miss."""
    rng = np.random.default_rng(11)
    quiet = np.cumsum(rng.exponential(1 / 0.5, 300))
    busy = quiet[-1] + np.cumsum(rng.exponential(1 / 4.0, 6000))
    arrivals = np.concatenate([quiet, busy])
    trace = Trace("step", arrivals - arrivals[0], np.full(len(arrivals), 800), np.full(len(arrivals), 100))
    document = builtin_policy()
    workload = document.workloads[0]
    attainment = []
    for cold in (30, 120, 300, 600):
        contender = Contender(
            "threshold", 15.0, document.decider(workload), signals_for([m.name for m in workload.metrics])
        )
        attainment.append(run(trace, ReplicaModel(cold_start_s=cold), contender, 2, 2.0).slo_attainment)
    assert attainment == sorted(attainment, reverse=True), attainment
    assert attainment[0] > attainment[-1]


def test_static_fleet_costs_its_size() -> None:
    trace = poisson_trace(1.0, 600, 500, 50)
    model = ReplicaModel()
    result = run(trace, model, Contender("static", static=3), 3, 2.0)
    expected = 3 * trace.duration_s * model.gpus_per_replica / 3600
    assert result.gpu_hours == pytest.approx(expected, rel=0.01)


def test_a_trace_of_weeks_is_announced_with_the_way_to_shorten_it() -> None:
    weeks = Trace("weeks", np.array([0.0, 21 * 86400.0]), np.array([10, 10]), np.array([1, 1]))
    hint = long_run_hint(weeks, ReplicaModel())
    assert hint is not None and "21.0 days, 1.8 million steps of 1 s" in hint
    assert "--window START:END" in hint and "--time-scale" in hint
    assert long_run_hint(weeks.scaled(2), ReplicaModel()) is None
    assert long_run_hint(synthetic_day(), ReplicaModel()) is None


def _minutes(per_minute: list[int]) -> Trace:
    """A request every ``60 / n`` s of each minute, ``n`` the minute's count."""
    arrivals = np.concatenate([m * 60 + np.arange(n) * 60 / n for m, n in enumerate(per_minute) if n])
    ones = np.ones(len(arrivals), dtype=np.int64)
    return Trace("minutes", arrivals, ones * 100, ones)


def test_a_busy_trace_with_stretches_of_no_request_is_announced() -> None:
    """Stretches of 30 minutes or more under 5 % of the median minute, between busy ones: the longest is named."""
    gaps = _minutes([100] * 60 + [0] * 40 + [100] * 60 + [2] * 90 + [100] * 60)
    hint = lull_hint(gaps)
    assert hint is not None and "2 stretches of 30 minutes or more" in hint and "median minute of 100" in hint
    assert "the longest 1.5 h from 2.7 h" in hint and "--window" in hint
    one = lull_hint(_minutes([100] * 60 + [0] * 30 + [100] * 60))
    assert one is not None and "a stretch of 30 minutes or more" in one and "0.5 h from 1.0 h" in one
    assert lull_hint(_minutes([100] * 60 + [0] * 29 + [100] * 60)) is None  # shorter than a stretch
    assert lull_hint(_minutes([100] * 60 + [10] * 60 + [100] * 60)) is None  # light, not empty
    assert lull_hint(_minutes([20] * 60 + [0] * 120 + [20] * 60)) is None  # a light trace's idle hours are its own


def test_a_run_no_longer_wanted_stops_at_the_next_simulated_minute() -> None:
    trace = synthetic_day(seed=1, mean_rps=1.0, hours=0.25, bursts=0)
    asked: list[float] = []

    def stop() -> bool:
        asked.append(0.0)
        return len(asked) == 3

    result = run(trace, ReplicaModel(), Contender("static-best", static=4), 4, 2.0, stop=stop)
    assert result.abandoned and len(asked) == 3 and not result.meets(0.5)
    assert not run(trace, ReplicaModel(), Contender("static-best", static=4), 4, 2.0, stop=lambda: False).abandoned
