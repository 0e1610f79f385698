"""The contenders (``simulations.contenders``): the KEDA baselines as KEDA and the HPA run them."""

from __future__ import annotations

import numpy as np

from simulations.builtin import builtin_policy
from simulations.contenders import keda_contender
from simulations.fleet import Fleet
from simulations.replica_model import ReplicaModel
from simulations.signals import keda_signals
from simulations.traces import Trace


def test_keda_avg_reproduces_the_articles_under_scaling() -> None:
    """4 pods with 8 waiting each: the article's per-pod average keeps 4 replicas; the sum asks for 16."""
    model = ReplicaModel()
    trace = Trace("idle", np.array([0.0, 1.0]), np.array([10, 10]), np.array([1, 1]))
    document = builtin_policy()
    workload = document.workloads[0].model_copy(update={"max_replicas": 32})
    fleet = Fleet(model, trace, 4)
    for replica in fleet.replicas:
        replica.waiting.extend(range(8))
    fleet._scrape(0.0)
    for average, expected in ((True, 4), (False, 16)):
        contender = keda_contender(document, workload, model, average)
        assert keda_signals(average)(fleet, 0.0)["waiting"] == (8.0 if average else 32.0)
        decision = contender.decider.decide(  # type: ignore[union-attr]
            __import__("policies.base", fromlist=["Observation"]).Observation(0.0, 4, contender.signals(fleet, 0.0), 4)
        )  # type: ignore[misc]
        assert decision.recommended == expected
