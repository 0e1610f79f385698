"""The built-in workload sized for a trace, a replica model and an SLO, as ``simulate`` sizes it when no
policy file is given: the targets by load tests of the replica (``sizing.builtin_shares``), the headroom
for the SLO target (``sizing.headroom_scale``), the fleet's pooling (``sizing.pooling_gain``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from policies.policy_file import PolicyFile
from policies.predictive import pooled_capacity
from simulations.compare import builtin_policy
from simulations.replica_model import ReplicaModel
from simulations.report import percent
from simulations.sizing import (
    LOAD_TEST_REPLICAS,
    POOLED_REPLICAS,
    REFERENCE_SLO_TARGET,
    REFERENCE_SLO_TTFT_S,
    Shares,
    at_least_builtin,
    builtin_shares,
    headroom_scale,
    load_test_needed,
    pooling_gain,
    tighter_than_reference,
)
from simulations.traces import Trace

Note = Callable[[str, str], None]
"""Told a note and how it ends: a load test's note ends in ``""`` before the test and is finished after it."""


def _quiet(_text: str, _end: str) -> None:
    pass


def sized_builtin(
    model: ReplicaModel, trace: Trace, slo_ttft: float, slo_target: float, note: Note = _quiet
) -> tuple[PolicyFile, dict[str, Any]]:
    """The built-in policy document for the trace, and how it was sized (the report's ``sizing`` fields)."""
    shares = Shares()
    if load_test_needed(trace, slo_ttft, slo_target, model):
        tighter = tighter_than_reference(slo_ttft, slo_target)
        reference = f"{REFERENCE_SLO_TTFT_S:g} s for {percent(REFERENCE_SLO_TARGET)}"
        what = (
            (["the trace's requests"] if not trace.builtin_lengths else [])
            + ([f"an SLO of {slo_ttft:g} s for {percent(slo_target)}"] if tighter else [])
            + (["the replica"] if not at_least_builtin(model) else [])
        )
        note(
            f"sizing the built-in workload's targets for {' and '.join(what)} by a load test of the replica "
            "model (simulations/sizing.py): ",
            "",
        )
        shares = builtin_shares(model, trace, slo_ttft, slo_target)
        replica = ""
        if shares.replica < 1:
            replica = f" ({shares.replica:.2f} of them for a replica on which the SLO is tighter)"
        note(
            f"prompt tokens {shares.prompt_tokens:.2f} and running requests {shares.slo:.2f} of their size for "
            f"the built-in request lengths and replica at {reference}{replica}",
            "\n",
        )
    scale = headroom_scale(slo_target)
    if scale != 1.0:
        note(
            f"the built-in workload holds {scale:.2f} of predictive's default headroom for a target of "
            f"{percent(slo_target)} (simulations/sizing.py)",
            "\n",
        )
    gain = 0.0
    # A share below 1 already stands for the fleet's pooling (``sizing.pooling_gain``).
    if not tighter_than_reference(slo_ttft, slo_target) and shares.replica >= 1:
        note(
            f"load-testing how much more a replica carries in a fleet of {POOLED_REPLICAS} than of "
            f"{LOAD_TEST_REPLICAS} (simulations/sizing.py): ",
            "",
        )
        # The looser or reference SLO is the one the shares' load test ran under, if it ran.
        gain = pooling_gain(model, trace, slo_ttft, slo_target, shares.reference_rate)
        pooled = pooled_capacity(POOLED_REPLICAS, gain, LOAD_TEST_REPLICAS)
        note(f"{pooled:.2f} times as much, poolingGain {gain:g} a doubling", "\n")
    document = builtin_policy(model, trace, shares.slo, shares.mix, scale, gain, shares.replica)
    sizing: dict[str, Any] = {
        "builtin_target_shares": {
            "prompt_tokens_per_second": round(shares.prompt_tokens, 4),
            "num_requests_running": round(shares.slo, 4),
        },
        "builtin_replica_share": round(shares.replica, 4),
        "builtin_headroom_scale": round(scale, 4),
        "builtin_pooling_gain": gain,
    }
    return document, sizing
