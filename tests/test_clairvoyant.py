"""The clairvoyant baseline (``simulations.clairvoyant``): it asks ahead for the work to come, meets the SLO at
its swept setting, and sits between the oracle's bound and the fixed fleet; the report gives every run's
cost against it and never names it as the policy to deploy. The reactive follower asks for the work of the
minute just past, and costs more than the clairvoyant where the load moves."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from simulations.builtin import builtin_policy
from simulations.clairvoyant import busiest_ahead, clairvoyant, minute_past, reactive
from simulations.compare import compare
from simulations.replica_model import ReplicaModel
from simulations.report import report, table, verdict
from simulations.traces import Trace, synthetic_day
from tests.helpers import assert_report_consistent


@pytest.mark.parametrize(
    ("need_for", "first", "last"),
    [
        # A minute holding the burst begins from 941 s on, and is seen a cold start and an interval before it
        # (the tick at 810 s), until the burst has come (990 s).
        (busiest_ahead, 810.0, 990.0),
        # The burst's second ends at 1,001 s: the minute before a tick holds it from the tick at 1,005 s to 1,050 s.
        (minute_past, 1005.0, 1050.0),
    ],
)
def test_a_follower_asks_for_a_burst_ahead_of_it_or_the_minute_after_it(
    need_for: Callable[[Trace, ReplicaModel, float], np.ndarray], first: float, last: float
) -> None:
    model = ReplicaModel(cold_start_s=120)
    arrivals = np.concatenate([[0.0], np.full(50, 1000.0), [3000.0]])
    n = len(arrivals)
    trace = Trace("burst", arrivals, np.full(n, 1000), np.full(n, 100))
    need = need_for(trace, model, 15.0)
    ticks = np.arange(len(need)) * 15.0
    asked = ticks[need > need.max() / 2]
    assert asked.min() == pytest.approx(first) and asked.max() == pytest.approx(last)
    work = float(model.min_work_s(np.full(50, 1000.0), np.full(50, 100.0)).sum())
    assert need.max() == pytest.approx(work / 60)


def test_the_reactive_follower_counts_a_request_in_the_four_ticks_of_the_minute_after_it() -> None:
    model = ReplicaModel(cold_start_s=120)
    trace = Trace("one", np.array([0.0, 600.0]), np.full(2, 1000), np.full(2, 100))
    need = minute_past(trace, model, 15.0)
    first = float(model.min_work_s(np.array([1000.0]), np.array([100.0]))[0])
    assert need[0] == 0 and list(need[1:5]) == pytest.approx([first / 60] * 4) and need[5] == 0


def test_the_reactive_follower_meets_the_slo_and_costs_more_than_the_clairvoyant_on_bursts() -> None:
    trace = synthetic_day(seed=3, mean_rps=1.5, hours=0.75, bursts=3)
    model = ReplicaModel(cold_start_s=120)
    document = builtin_policy(model, trace)
    args = (trace, model, document, document.workloads[0], 4, 2.0, 0.99)
    follower, floor = reactive(*args), clairvoyant(*args)
    assert follower.policy == "reactive" and follower.slo_attainment >= 0.99
    assert follower.gpu_hours > floor.gpu_hours
    assert follower.tuned is not None and 0 < follower.tuned["utilization"] <= 1


def test_it_meets_the_slo_between_the_bound_and_the_fixed_fleet() -> None:
    trace = synthetic_day(seed=3, mean_rps=1.5, hours=0.75, bursts=3)
    model = ReplicaModel(cold_start_s=120)
    comparison = compare(trace, model, builtin_policy(model, trace), ["predictive"], 2.0, 0.99, progress=False)
    data = report(comparison, {})
    assert_report_consistent(data)
    runs = {r["policy"]: r for r in data["results"]}
    floor = runs["clairvoyant"]
    assert floor["slo_attainment"] >= 0.99 and 0 < floor["tuned"]["utilization"] <= 1
    assert runs["oracle"]["gpu_hours"] <= floor["gpu_hours"] <= runs["static-best"]["gpu_hours"]
    assert floor["vs_clairvoyant"] == 1.0 and runs["static-best"]["vs_static_best"] == 1.0
    assert runs["predictive"]["vs_clairvoyant"] == pytest.approx(
        runs["predictive"]["gpu_hours"] / floor["gpu_hours"], abs=1e-3
    )
    assert "clairvoyant" not in verdict(data) and "reactive" not in verdict(data)
    assert "floor: clairvoyant" in table(data)
    # Beside it, what a rule without a forecast could have done: the reactive follower, tuned in hindsight.
    follower = runs["reactive"]
    assert follower["slo_attainment"] >= 0.99 and follower["gpu_hours"] >= floor["gpu_hours"]
    assert runs["predictive"]["vs_reactive"] == pytest.approx(
        runs["predictive"]["gpu_hours"] / follower["gpu_hours"], abs=1e-3
    )
    assert "without a forecast: reactive" in table(data)
