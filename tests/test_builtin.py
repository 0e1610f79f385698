"""The built-in workload (``simulations.builtin``), sized for the replica, the trace and the SLO."""

from __future__ import annotations

import numpy as np
import pytest

from simulations.builtin import builtin_policy
from simulations.follower_plan import Plan
from simulations.replica_model import ReplicaModel
from simulations.traces import Trace


def test_the_builtin_workload_is_sized_for_the_replica_and_the_trace() -> None:
    trace = Trace("t", np.array([0.0, 1.0]), np.array([900, 1100]), np.array([100, 300]))
    targets = {
        m.name: m.target.value
        for m in builtin_policy(ReplicaModel(prefill_tokens_per_s=3000, kv_cache_tokens=60_000), trace)
        .workloads[0]
        .metrics
    }
    # Half the prefill throughput; half of the 50 mean requests (1,000 + 200 tokens) the KV cache holds.
    assert targets == {"prompt_tokens_per_second": 1500, "num_requests_running": 25, "num_requests_waiting": 2}


# replica, share of the targets, of which the replica's, running target. The trace's mean request is 1,200
# tokens: the built-in replica's 30,000-token cache holds 25 of them.
RUNNING_TARGET_CASES = [
    # The built-in batch: the share scales half of it, whatever part of the share is the replica's.
    ({}, 0.6, 0.6, 0.6 * 25 / 2),
    ({"prefill_tokens_per_s": 600}, 0.6, 0.6, 0.6 * 25 / 2),
    # A batch of 4 already says the replica holds less: it counts as 4 / 0.6, and the share takes that
    # back to the 4 the replica holds, not to 0.6 of them.
    ({"max_num_seqs": 4}, 0.6, 0.6, 4 / 2),
    # The part of the share that is the SLO's (0.7) still shrinks it.
    ({"max_num_seqs": 4}, 0.42, 0.6, 0.7 * 4 / 2),
    # Never counted as more than the built-in replica's batch.
    ({"max_num_seqs": 20}, 0.5, 0.5, 0.5 * 25 / 2),
    # A larger cache than the built-in one's keeps its own batch (a fast replica's share is 1).
    ({"kv_cache_tokens": 60_000}, 1.0, 1.0, 50 / 2),
]


@pytest.mark.parametrize(("replica", "share", "replica_share", "running"), RUNNING_TARGET_CASES)
def test_a_replica_that_holds_fewer_sequences_is_not_shrunk_twice_for_it(
    replica: dict[str, float], share: float, replica_share: float, running: float
) -> None:
    trace = Trace("t", np.array([0.0, 1.0]), np.array([900, 1100]), np.array([100, 300]))
    document = builtin_policy(ReplicaModel(**replica), trace, share=share, replica_share=replica_share)
    targets = {m.name: m.target.value for m in document.workloads[0].metrics}
    assert targets["num_requests_running"] == pytest.approx(round(running, 2))


def test_the_builtin_default_counts_the_slos_error_budget_with_the_replicas_idle_prefill_speed() -> None:
    from policies.policy_file import parse_policy_document
    from simulations.builtin import builtin_document, with_error_budget

    model = ReplicaModel(prefill_tokens_per_s=2500)
    raw = with_error_budget(builtin_document(model), model, 1.5, 0.995, Plan(0.5, 0))
    workload = parse_policy_document(raw, "<built-in>").workloads[0]
    assert workload.slo is not None and (workload.slo.ttft_seconds, workload.slo.target) == (1.5, 0.995)
    # 2,048 / (2,048/2,500 + 1/20 - 1/2,500): the prompt tokens a second an idle replica prefills in full engine
    # steps of 2,048, a weight read each.
    # Sized without a trace, for the built-in lengths, whose spread it is told; no learned headroom beside it.
    assert workload.policy["errorBudget"] == {
        "prefillTokensPerSecond": 2357.3,
        "requestOverheadSeconds": 0.05,  # the replica's, a request's own time as the SLO judges it
        "promptLengthSigma": 0.5,
    }
    assert "learnedHeadroom" not in workload.policy
    assert model.engine_prefill_s(np.array([2048.0])) == pytest.approx([2048 / 2357.3], abs=1e-4)
    assert with_error_budget(raw, model, 1.5, 0.995, Plan(0.5, 0)) == raw


def test_the_budget_is_told_the_spread_of_the_traces_prompt_lengths() -> None:
    """What ``prefill_tail`` reads the long prompts' share of the misses by: the standard deviation of the log of
    the trace's prompt lengths (the built-in distribution's is 0.5; prompts of one length have none)."""
    from simulations.builtin import builtin_document, with_error_budget
    from simulations.traces import synthetic_day
    from tests.helpers import poisson_trace

    model = ReplicaModel()
    for trace, sigma in ((synthetic_day(0, 1.0, 0.25, 1), 0.5), (poisson_trace(1.0, 600, 500, 50), 0.0)):
        raw = with_error_budget(builtin_document(model, trace), model, 2.0, 0.99, Plan(0.5, 0), trace)
        budget = raw["workloads"][0]["policy"]["errorBudget"]
        assert budget["promptLengthSigma"] == pytest.approx(sigma, abs=0.02)


def test_a_policy_other_than_predictive_keeps_its_block() -> None:
    from simulations.builtin import builtin_document, with_error_budget

    raw = builtin_document(ReplicaModel())
    raw["workloads"][0]["policy"] = {"type": "threshold"}
    assert with_error_budget(raw, ReplicaModel(), 2.0, 0.99, Plan(0.5, 0)) == raw
