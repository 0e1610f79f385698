"""The contenders (``simulations.contenders``): the KEDA baselines as KEDA and the HPA run them."""

from __future__ import annotations

import numpy as np

from simulations import engine
from simulations.builtin import builtin_policy
from simulations.contenders import keda_contender
from simulations.fleet import Fleet
from simulations.replica_model import ReplicaModel
from simulations.signals import keda_signals
from simulations.traces import Trace


def test_keda_avg_reproduces_the_articles_under_scaling() -> None:
    """4 pods with 8 waiting each: the article's per-pod average keeps 4 replicas; the sum asks for 16."""
    model = ReplicaModel()
    trace = Trace("idle", np.zeros(32), np.full(32, 10), np.ones(32, dtype=np.int64))
    document = builtin_policy()
    workload = document.workloads[0].model_copy(update={"max_replicas": 32})
    fleet = Fleet(model, trace, 4)
    engine.enqueue_all(fleet.arrays, np.arange(32, dtype=np.int64) // 8, np.arange(32, dtype=np.int64))
    fleet._scrape(0.0)
    for average, expected in ((True, 4), (False, 16)):
        contender = keda_contender(document, workload, model, average)
        assert keda_signals(average)(fleet, 0.0)["waiting"] == (8.0 if average else 32.0)
        decision = contender.decider.decide(  # type: ignore[union-attr]
            __import__("policies.base", fromlist=["Observation"]).Observation(0.0, 4, contender.signals(fleet, 0.0), 4)
        )  # type: ignore[misc]
        assert decision.recommended == expected


def test_a_workload_that_learns_its_capacity_sees_the_ttft_quantile_at_its_slo() -> None:
    """The simulated replicas' histogram read at the slo's target, as the daemon's query reads it; the KEDA
    baselines of such a workload scale on the triggers' metrics, not on its capacity."""
    from policies.metric_names import TTFT_SLO
    from simulations.contenders import policy_contender, workload_variant

    model = ReplicaModel()
    document = builtin_policy()
    capacity = {"promptTokensPerSecond": 500, "runningRequests": 10, "learn": True}
    changes = {"slo": {"ttftSeconds": 2, "target": 0.95}, "capacity": capacity, "metrics": []}
    learning_doc, learning = workload_variant(document, document.workloads[0], changes)
    assert learning.learns_capacity
    fleet, now = _two_requests_served(model)
    signals = policy_contender(learning_doc, learning, model).signals(fleet, now)  # type: ignore[misc]
    assert signals[TTFT_SLO] == fleet.ttft_quantile(0.95, now) and signals[TTFT_SLO] > 0
    keda = keda_contender(learning_doc, learning, model, average=False)
    assert [m.name for m in keda.decider.ctx.metrics] == ["waiting", "kv"]  # type: ignore[union-attr]


def test_a_workload_that_spends_its_budget_sees_the_histograms_sum_and_count_rates() -> None:
    """What the daemon's batched queries read, from the simulated replicas' scrapes: the rates of the TTFT
    histogram's sum and count over the last minute."""
    from policies.metric_names import FIRST_TOKENS_OVER_SLO, FIRST_TOKENS_RATE, TTFT_SECONDS_RATE
    from simulations.contenders import policy_contender, workload_variant

    model = ReplicaModel()
    document = builtin_policy()
    budget = {
        "learnedHeadroom": {"priorSeconds": 1200, "memorySeconds": 3600},
        "errorBudget": {"prefillTokensPerSecond": 976.6},
    }
    changes = {"slo": {"ttftSeconds": 2, "target": 0.99}, "policy": {"type": "predictive", **budget}}
    spending_doc, spending = workload_variant(document, document.workloads[0], changes)
    fleet, now = _two_requests_served(model)
    signals = policy_contender(spending_doc, spending, model).signals(fleet, now)  # type: ignore[misc]
    assert signals[FIRST_TOKENS_RATE] == fleet.rate("ttft_count", now) and signals[FIRST_TOKENS_RATE] > 0
    assert signals[TTFT_SECONDS_RATE] == fleet.rate("ttft_sum", now) and signals[TTFT_SECONDS_RATE] > 0
    assert signals[FIRST_TOKENS_OVER_SLO] == fleet.first_tokens_over(2.0, now) == 0.0  # two short prompts


def _two_requests_served(model: ReplicaModel) -> tuple[Fleet, float]:
    """Two short requests on two replicas, 40 s on: a first token each in the replicas' histograms."""
    fleet = Fleet(model, Trace("two", np.array([0.0, 1.0]), np.array([100, 100]), np.array([1, 1])), 2)
    now = 0.0
    while now < 40:
        fleet.step(now)
        now += model.step_s
    return fleet, now
