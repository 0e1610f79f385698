"""The oracle's lower bound (``simulations.oracle``): never above a run that meets the SLO."""

from __future__ import annotations

import numpy as np

from simulations.builtin import builtin_policy
from simulations.compare import compare
from simulations.oracle import oracle_bound
from simulations.replica_model import ReplicaModel
from simulations.traces import Trace, synthetic_day


def test_the_oracle_never_costs_more_than_a_policy_that_meets_the_slo() -> None:
    trace = synthetic_day(seed=5, hours=1.0, mean_rps=1.5)
    comparison = compare(
        trace, ReplicaModel(cold_start_s=120), builtin_policy(), ["threshold", "predictive"], 2.0, 0.95, progress=False
    )
    meeting = [r for r in comparison.results if r.meets(0.95)]
    assert meeting, "some contender must meet the SLO for the test to mean anything"
    assert all(comparison.oracle_gpu_hours <= r.gpu_hours for r in meeting)


def _least_replica_seconds(trace: Trace, model: ReplicaModel, failed: list[int], slo_ttft: float = 2.0) -> float:
    """Replica time meeting the oracle's constraints 1-3 (one replica, 60 s windows) when ``failed`` miss."""
    arrival, prompt, output = trace.arrival_s, trace.prompt_tokens.astype(float), trace.output_tokens.astype(float)
    end, prefill = float(arrival[-1]), prompt / model.prefill_tokens_per_s
    count = max(1, int(np.ceil(end / 60)))
    window = np.minimum(arrival // 60, count - 1).astype(int)
    deadline = arrival + model.idle_prefill_s(prompt) + slo_ttft
    due = (deadline <= end) & ~np.isin(np.arange(len(arrival)), failed)
    inside = due & ((deadline // 60).astype(int) == window)
    done = due & (deadline + model.latest_finish_s(output) <= end)
    owed = np.where(done, model.min_work_s(prompt, output), np.where(due, prefill, 0.0))
    floor = np.maximum(np.clip(end - 60 * np.arange(count), 0, 60), np.bincount(window[inside], prefill[inside], count))
    shortfall = np.cumsum((np.bincount(window, owed, count) - floor)[::-1]).max()
    return float(floor.sum() + max(0.0, shortfall))


def test_the_oracle_is_below_the_least_time_whichever_request_fails() -> None:
    """With 100-199 requests one may fail at 99 %: the bound must stay under the best choice of it, which is
    not always the longest prompt."""
    model, rng = ReplicaModel(), np.random.default_rng(7)
    for _ in range(25):
        n = int(rng.integers(100, 200))
        arrival = np.sort(rng.uniform(0, rng.uniform(60, 300), n))
        prompt = np.maximum(1, rng.lognormal(6.5, rng.uniform(0.2, 2.0), n)).astype(int)
        trace = Trace("t", arrival - arrival[0], prompt, np.maximum(1, rng.lognormal(4, 1, n)).astype(int))
        least = min(_least_replica_seconds(trace, model, [i]) for i in range(n))
        bound = oracle_bound(trace, model, 1, 2.0, 0.99).gpu_hours * 3600 / model.gpus_per_replica
        assert bound <= least + 1e-9
