"""The built-in workload sized for a trace, a replica model and an SLO, as ``simulate`` sizes it when no
policy file is given: the targets by load tests of the replica (``sizing.builtin_shares``), and the default's
block, which follows the work at a utilization the load test starts and the error budget moves
(``with_error_budget``)."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

from policies.policy_file import PolicyFile, parse_policy_document
from simulations.contenders import policy_contender, workload_variant
from simulations.follower_plan import Plan
from simulations.replica_model import ReplicaModel
from simulations.report import percent
from simulations.runner import RunResult, run
from simulations.sizing import (
    DEFAULT_HOLD_S,
    REFERENCE_SLO_TARGET,
    REFERENCE_SLO_TTFT_S,
    Shares,
    at_least_builtin,
    builtin_shares,
    follower_plan,
    held_decode_tokens_per_s,
    load_test_needed,
    tighter_than_reference,
)
from simulations.traces import PROMPT_LOGNORMAL, Trace

Note = Callable[[str, str], None]
"""Told a note and how it ends: a load test's note ends in ``""`` before the test and is finished after it."""


def quiet(_text: str, _end: str) -> None:
    """The ``Note`` that says nothing: what a caller that prints no notes (a notebook, a test) passes by default."""


PROMPT_TOKENS_SHARE = 0.5


RUNNING_SHARE = 0.5


BUILTIN_INTERVAL_S = 15


BUILTIN_MAX_REPLICAS = 32


# How far ``compare`` may raise the built-in workload's bound for a trace no fleet of 32 carries: 1,024
# GPUs of the built-in replica.
BUILTIN_GROW_TO = 256


def builtin_document(
    model: ReplicaModel,
    trace: Trace | None = None,
    share: float = 1.0,
    prompt_share: float = 1.0,
    replica_share: float = 1.0,
) -> dict[str, Any]:
    """The built-in workload, its targets sized for ``model``'s replica, the trace's requests and the SLO,
    as a user would size them for their own.

    * Prompt tokens per second, at half the replica's prefill throughput: a flow that, unlike queue
      lengths, does not swell when replicas slow down, so the steadiest signal to forecast; the other half
      of the replica's compute goes to decoding and to the chunks of prompts that arrive together.
    * Running requests at half of what a replica holds at once (``max_num_seqs``, or as many of the
      trace's mean requests as its KV cache fits): the limit of a decode-heavy load, whose prompts are short
      but whose sequences stay long in the cache.
    * Two waiting requests per replica: the backlog, whatever its cause.

    The first two are for an SLO of 2 s and requests of the built-in length distribution; a replica takes
    ``share`` of them for a tighter SLO, and ``prompt_share`` of the prompt-token one besides for the
    trace's own requests (``sizing.builtin_shares``). Of ``share``, ``replica_share`` is for a replica that
    carries less than the built-in one within the SLO. Where it carries less because it holds fewer
    sequences, its running target already says so: its batch counts as the built-in replica's times that
    share, or its own if larger, so that the share does not shrink it twice (with ``max_num_seqs=4`` every
    policy climbed to ``maxReplicas`` where 35 fixed replicas met the SLO).

    No KV-cache metric: the built-in one is the busiest replica's usage, and one long prompt fills a
    replica's cache whatever the fleet's load, so as a ``Value`` target it grows with the fleet it sizes.

    The policy is ``predictive``, its block left to ``with_error_budget``.
    """
    # Without a trace, about the mean request of the Azure conversation trace (1,155 + 211 tokens).
    footprint = float(np.mean(trace.prompt_tokens) + np.mean(trace.output_tokens)) if trace is not None else 1_400.0
    holds = model.sequences_held(footprint)
    if replica_share < 1.0:
        holds = max(holds, min(holds / replica_share, ReplicaModel().sequences_held(footprint)))
    cold_start = max(1, round(model.cold_start_s))
    policy: dict[str, Any] = {"type": "predictive"}
    return {
        "interval": BUILTIN_INTERVAL_S,
        "workloads": [
            {
                "target": {"kind": "Deployment", "namespace": "llm-serving", "name": "vllm-llama3-70b"},
                "minReplicas": 2,
                "maxReplicas": BUILTIN_MAX_REPLICAS,
                "coldStartSeconds": cold_start,
                "metrics": [
                    {
                        "name": "prompt_tokens_per_second",
                        "target": {
                            "type": "AverageValue",
                            "value": prompt_share * share * PROMPT_TOKENS_SHARE * model.prefill_tokens_per_s,
                        },
                    },
                    {
                        "name": "num_requests_running",
                        "target": {"type": "AverageValue", "value": round(max(1.0, share * RUNNING_SHARE * holds), 2)},
                    },
                    {"name": "num_requests_waiting", "target": {"type": "AverageValue", "value": 2}},
                ],
                "policy": policy,
            }
        ],
    }


def with_error_budget(
    document: dict[str, Any],
    model: ReplicaModel,
    slo_ttft: float,
    slo_target: float,
    planned: Plan,
    trace: Trace | None = None,
) -> dict[str, Any]:
    """The built-in document (``builtin_document``) with the SLO it is sized for and predictive's block as the
    default runs it: the fleet a follower of its work (``utilization``: a replica's prefill and decode speeds, and
    the utilization it starts from and the replicas it holds however light the work: ``planned``, as
    ``follower_plan`` plans it), the
    utilization moved by the slo's error budget, whose misses are counted with ``model``'s idle prefill speed and
    request overhead and the spread of the trace's prompt lengths, or of the built-in lengths without a trace
    (``errorBudget``; docs/decisions/predictive-utilization.md). Only what that block uses is written: the
    targets' headroom and a pooling gain size a block without ``utilization``, so neither is here."""
    workload = document["workloads"][0]
    policy = workload["policy"]
    if policy.get("type") != "predictive":
        return document
    spread = PROMPT_LOGNORMAL[1] if trace is None else trace.prompt_length_sigma
    budget = {
        "prefillTokensPerSecond": round(model.idle_prefill_tokens_per_s, 1),
        "requestOverheadSeconds": round(model.request_overhead_s, 3),
        "promptLengthSigma": round(spread, 2),
    }
    utilization: dict[str, Any] = {
        "start": round(planned.utilization, 4),
        "prefillTokensPerSecond": round(model.prefill_tokens_per_s, 1),
        "decodeTokensPerSecond": round(held_decode_tokens_per_s(model, trace), 1),
    }
    if planned.floor:
        utilization["floorReplicas"] = planned.floor
    if trace is not None:
        utilization["plannedRequests"] = trace.requests
    slo = {"ttftSeconds": slo_ttft, "target": slo_target}
    sized = {**policy, "errorBudget": budget, "utilization": utilization}
    changed = {**workload, "slo": workload.get("slo", slo), "policy": sized}
    return {**document, "workloads": [changed, *document["workloads"][1:]]}


def builtin_policy(model: ReplicaModel | None = None, trace: Trace | None = None, **sizing: float) -> PolicyFile:
    """``builtin_document`` for ``model`` (the built-in replica without one) and the trace's requests,
    validated as a policy file; ``sizing`` are its shares (``builtin_document``)."""
    return parse_policy_document(builtin_document(model or ReplicaModel(), trace, **sizing), "<built-in>")


RunsIn = Callable[[PolicyFile], PolicyFile]
"""The file the built-in document's block runs in: the built-in itself (``as_is``), or a file given only an slo
(``with_measured_capacity``)."""


def as_is(document: PolicyFile) -> PolicyFile:
    return document


def sized_builtin(
    model: ReplicaModel,
    trace: Trace,
    slo_ttft: float,
    slo_target: float,
    note: Note = quiet,
    hold_s: float = DEFAULT_HOLD_S,
    runs_in: RunsIn | None = as_is,
) -> tuple[PolicyFile, dict[str, Any]]:
    """The built-in policy document for the trace, and how it was sized (the report's ``sizing`` fields); it
    spends the SLO's error budget (``with_error_budget``), its follower planned for a scale-down window of
    ``hold_s`` and checked by runs of its block in the file ``runs_in`` makes of it (None: a file that runs a
    policy of its own, and the follower is not run). Over 60 lines: each load test is said to ``note`` before
    and after it runs (they take seconds), between the steps."""
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
    raw = builtin_document(
        model,
        trace,
        share=shares.slo,
        prompt_share=shares.mix,
        replica_share=shares.replica,
    )
    note(
        "planning the follower: the replica's misses at each load by a load test of the fleet the trace needs, "
        "the trace's own by that fleet fixed over it, the follower replayed over the trace's minutes and its policy "
        "run over them, beside the fewest fixed replicas that meet the SLO over it where they might cost less "
        "(simulations/follower_plan.py, sizing.py): ",
        "",
    )

    def written(planned: Plan) -> PolicyFile:
        return parse_policy_document(with_error_budget(raw, model, slo_ttft, slo_target, planned, trace), "<built-in>")

    def check(planned: Plan, initial: int, most: int) -> RunResult:
        assert runs_in is not None
        document = runs_in(written(planned))
        workload = document.workloads[0]
        if most > workload.max_replicas:
            document, workload = workload_variant(document, workload, {"maxReplicas": most})
        return run(trace, model, policy_contender(document, workload, model), initial, slo_ttft, False, by_minute=True)

    planned = follower_plan(model, trace, slo_ttft, slo_target, hold_s, None if runs_in is None else check)
    held = f", never under {planned.floor} replicas" if planned.floor else ""
    note(f"{planned.utilization:.2f} of their compute{held}", "\n")
    document = written(planned)
    sizing: dict[str, Any] = {
        "builtin_target_shares": {
            "prompt_tokens_per_second": round(shares.prompt_tokens, 4),
            "num_requests_running": round(shares.slo, 4),
        },
        "builtin_replica_share": round(shares.replica, 4),
        "builtin_utilization_start": round(planned.utilization, 4),
        "builtin_floor_replicas": planned.floor,
    }
    return document, sizing


IDLE_MODEL_MAX_REPLICAS = 4
IDLE_MODEL_ACTIVATION = {
    # The gateway's open requests for the model, as the simulator counts them (simulations.signals).
    "query": 'sum(gateway_open_requests{model="builtin-idle"})',
    "threshold": 0,
    "idleSeconds": 600,
}


def idle_model_document(document: PolicyFile) -> PolicyFile:
    """The built-in low-traffic model (``traces.synthetic_idle``): the built-in workload's targets, allowed to
    go to zero through an activation block on the gateway's open requests, as ``simulate`` runs it beside
    the built-in day to show what zero saves and what the first requests after it pay. Its follower holds no floor:
    the day's was planned for the day's traffic."""
    workload = document.workloads[0]
    target = {**workload.target.model_dump(by_alias=True, mode="json"), "name": "vllm-builtin-idle"}
    changes: dict[str, Any] = {"target": target, "minReplicas": 0, "maxReplicas": IDLE_MODEL_MAX_REPLICAS}
    policy = dict(workload.policy)
    if isinstance(policy.get("utilization"), dict):
        policy["utilization"] = {k: v for k, v in policy["utilization"].items() if k != "floorReplicas"}
        changes["policy"] = policy
    return workload_variant(document, workload, {**changes, "activation": IDLE_MODEL_ACTIVATION})[0]


def with_measured_capacity(
    document: PolicyFile, model: ReplicaModel, trace: Trace, slo_ttft: float, slo_target: float, note: Note = quiet
) -> tuple[PolicyFile, dict[str, Any]]:
    """A file whose first workload gives only an slo (``Workload.needs_capacity``), with the capacity the built-in
    workload's load test measures for the trace's requests, the replica and the SLO, and, where the file names
    no policy, the built-in's predictive block sized for it: "given only an SLO", the built-in default."""
    workload = document.workloads[0]
    hold = float(workload.behavior.resolved().down_window)
    runs_in = None if workload.names_policy else partial(_measured_in, document)
    builtin, sizing = sized_builtin(model, trace, slo_ttft, slo_target, note, hold, runs_in)
    return _measured_in(document, builtin), sizing


def _measured_in(document: PolicyFile, builtin: PolicyFile) -> PolicyFile:
    """``document``, whose first workload gives only an slo, with the capacity ``builtin``'s targets hold and, where
    it names no policy, ``builtin``'s block: what ``with_measured_capacity`` runs, and the plan is checked in."""
    sized = builtin.workloads[0]
    targets = {m.name: m.target.value for m in sized.metrics}
    capacity = {
        "promptTokensPerSecond": targets["prompt_tokens_per_second"],
        "runningRequests": targets["num_requests_running"],
        "waitingRequests": targets["num_requests_waiting"],
    }
    workload = document.workloads[0]
    changes: dict[str, Any] = {"capacity": capacity}
    if not workload.names_policy:
        changes["policy"] = dict(sized.policy)
    return workload_variant(document, workload, changes)[0]
