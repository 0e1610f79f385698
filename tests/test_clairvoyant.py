"""The clairvoyant baseline (``simulations.clairvoyant``): it asks ahead for the work to come, meets the SLO at
its swept setting, and sits between the oracle's bound and the fixed fleet; the report gives every run's
cost against it and never names it as the policy to deploy."""

from __future__ import annotations

import numpy as np
import pytest

from simulations.builtin import builtin_policy
from simulations.clairvoyant import busiest_ahead
from simulations.compare import compare
from simulations.replica_model import ReplicaModel
from simulations.report import report, table, verdict
from simulations.traces import Trace, synthetic_day
from tests.helpers import assert_report_consistent


def test_it_asks_for_a_burst_a_cold_start_and_an_interval_ahead() -> None:
    model = ReplicaModel(cold_start_s=120)
    arrivals = np.concatenate([[0.0], np.full(50, 1000.0), [3000.0]])
    n = len(arrivals)
    trace = Trace("burst", arrivals, np.full(n, 1000), np.full(n, 100))
    need = busiest_ahead(trace, model, 15.0)
    ticks = np.arange(len(need)) * 15.0
    asked = ticks[need > need.max() / 2]
    # A minute holding the burst begins from 941 s on, and is seen a cold start and an interval before it
    # (the tick at 810 s), until the burst has come (990 s).
    assert asked.min() == pytest.approx(810.0) and asked.max() == pytest.approx(990.0)
    work = float(model.min_work_s(np.full(50, 1000.0), np.full(50, 100.0)).sum())
    assert need.max() == pytest.approx(work / 60)


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
    assert "clairvoyant" not in verdict(data)
    assert "floor: clairvoyant" in table(data)
