"""The simulator's front door: one request in, one comparison out, as ``vllm-autoscaler simulate`` runs it and as a
notebook can.

``simulate(request)`` resolves what the command line leaves open (the replica from its file and overrides, the
cold start from the flag or the file, the SLO from the flags, the file or 2 s for 99 %), loads and windows the
trace, sizes the workload where the file gives only an SLO or there is no file (``builtin.sized_builtin``,
``builtin.with_measured_capacity``), compares the policies with the baselines (``compare.compare``) and builds the
report (``report.report``), with the built-in low-traffic model beside the built-in day when nothing was chosen::

    from simulations.request import SimulationRequest, simulate
    done = simulate(SimulationRequest(trace="azure_conv.csv", slo_ttft=1.0))
    done.report["results"][0]["gpu_hours"]

Bad input raises ``traces.TraceError``, ``ValueError``, ``KeyError`` or ``PolicyFileError``, each with a message
fit for one line; the command line prints it and exits 2 (docs/contract.md).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import yaml

from policies.policy_file import PolicyFile, parse_policy_document
from policies.recorded import observed_rows
from policies.spec import Slo
from simulations.builtin import (
    BUILTIN_GROW_TO,
    Note,
    builtin_policy,
    idle_model_document,
    quiet,
    sized_builtin,
    with_measured_capacity,
)
from simulations.compare import DEFAULT_POLICY_TYPES, Comparison, Footing, compare, footing
from simulations.contenders import policy_contender
from simulations.deployable import deployable
from simulations.engine import COMPILED, SIM_EXTRA
from simulations.fleet import warm
from simulations.jobs import Shared, beside, worker_count
from simulations.replica_model import ReplicaModel, parse_overrides
from simulations.report import percent, report
from simulations.runner import floor_to, long_run_hint, lull_hint, run
from simulations.traces import Trace, load_trace, synthetic_idle

DEFAULT_SLO_TTFT_S = 2.0  # where neither the request nor the file's slo block gives one
DEFAULT_SLO_TARGET = 0.99
DEFAULT_SLO_WINDOW_S = 3600


@dataclass(frozen=True)
class SimulationRequest:
    """What to simulate; every field is optional, and the empty request is the built-in scenarios (the README's
    first command). ``document`` is a parsed policy file (its first workload is simulated); without one the
    built-in workload is sized for the trace."""

    document: PolicyFile | None = None
    trace: str | None = None  # a file; None: the built-in synthetic day
    trace_format: str | None = None
    seed: int = 0
    rate_scale: float = 1.0
    lengths_from: str | None = None
    window: tuple[float, float] | None = None  # seconds from the trace's first request, before time_scale
    time_scale: float = 1.0
    cold_start: float | None = None  # over the file's coldStartSeconds
    slo_ttft: float | None = None
    slo_target: float | None = None
    replica_file: str | None = None
    replica: tuple[str, ...] = ()  # KEY=VALUE overrides over the file
    policies: tuple[str, ...] = ()  # None given: the file's policy type, or every built-in type without a file
    tune: bool = False
    jobs: int | None = None

    @property
    def builtin_scenarios(self) -> bool:
        """Nothing chosen: the built-in day, and beside it the built-in low-traffic model."""
        chosen = (self.trace, self.document, self.window, self.lengths_from, self.trace_format)
        return all(c is None for c in chosen) and not self.policies and not self.tune and self.time_scale == 1.0

    def slo(self) -> tuple[float, float]:
        """The SLO a simulation judges by: each field given, else the file's ``slo`` block, else 2 s for 99 %."""
        given = self.document.workloads[0].slo if self.document is not None else None
        ttft = self.slo_ttft if self.slo_ttft is not None else (given.ttft_seconds if given else DEFAULT_SLO_TTFT_S)
        target = self.slo_target if self.slo_target is not None else (given.target if given else DEFAULT_SLO_TARGET)
        return ttft, target


@dataclass
class Simulation:
    """What ``simulate`` found: the comparison, the document as simulated (sized, its SLO set, its bound as it
    ran), the policy types compared, the report (``report.report``'s dict, with ``scale_to_zero`` for the
    built-in scenarios) and that low-traffic model's own comparison."""

    comparison: Comparison
    document: PolicyFile
    policy_types: list[str]
    report: dict[str, Any] = field(default_factory=dict)
    idle: Comparison | None = None
    elapsed_s: float = 0.0  # from the trace's reading to the end: the sizing, the fixed fleet's search and the runs


def simulate(request: SimulationRequest, note: Note = quiet, progress: bool = False) -> Simulation:
    """Resolve, size, compare and report (the module's docstring); ``note`` is told what the sizing does,
    ``progress`` draws a bar on a terminal."""
    ttft, target = request.slo()
    if not COMPILED:
        note(f"numba is not installed, so the simulator runs uncompiled, some 20 times slower: {SIM_EXTRA}", "\n")
    elif (seconds := _compile()) >= COMPILE_NOTE_S:
        note(f"compiled the simulator in {seconds:.0f} s, once: numba keeps it for the runs after this one", "\n")
    started = time.monotonic()
    model, trace = inputs(request)
    grow_to = None if request.document else BUILTIN_GROW_TO
    document, sizing, base = _sized_while_searching(request, model, trace, ttft, target, grow_to, note)
    for hint in (long_run_hint(trace, model), lull_hint(trace)):
        if hint:
            note(hint, "\n")
    workload = document.workloads[0]
    chosen = request.policies or ([workload.policy_type] if request.document else DEFAULT_POLICY_TYPES)
    types = list(dict.fromkeys(chosen))
    comparison = compare(
        trace,
        model,
        document,
        types,
        ttft,
        target,
        request.tune,
        progress=progress,
        grow_to=grow_to,
        workers=request.jobs,
        base=base,
    )
    if comparison.workload.max_replicas != workload.max_replicas:
        note(
            f"no fixed fleet of up to {workload.max_replicas} replicas met the SLO, so the built-in workload ran with "
            f"maxReplicas {comparison.workload.max_replicas}",
            "\n",
        )
        document = document.model_copy(update={"workloads": [comparison.workload]})
    window = {} if request.window is None else {"window_s": list(request.window)}
    data = report(comparison, {"seed": request.seed, "time_scale": request.time_scale, **window, **sizing})
    done = Simulation(comparison, document, types, data)
    if request.builtin_scenarios:
        idle = idle_model_document(document)
        done.idle = compare(synthetic_idle(request.seed), model, idle, ["predictive"], ttft, target, progress=progress)
        data["scale_to_zero"] = report(done.idle, {"seed": request.seed})
    done.elapsed_s = time.monotonic() - started
    return done


COMPILE_NOTE_S = 5.0  # a compile this long is said: it was the first run since an install (or a change)


def _compile() -> float:
    """Compile the simulator now, or load it from numba's cache (about a second): the seconds it took."""
    started = time.perf_counter()
    warm()
    return time.perf_counter() - started


def resolve(
    request: SimulationRequest, ttft: float, target: float, note: Note = quiet
) -> tuple[ReplicaModel, Trace, PolicyFile, dict[str, Any]]:
    """The replica (the file's cold start unless the request gives one), the trace (its window, its time scale), and
    the workload: the file's, sized from a load test where it gives only an SLO, or the built-in one sized for the
    trace as it is run (the predictive follower's plan and the fleet it load-tests are of the trace replayed at its
    time scale); with how it was sized, for the report."""
    model, trace = inputs(request)
    return model, trace, *sized_for(request, model, trace, ttft, target, note)


def inputs(request: SimulationRequest) -> tuple[ReplicaModel, Trace]:
    """``resolve``'s replica and trace."""
    document = request.document
    cold = request.cold_start
    if cold is None and document is not None and document.workloads[0].cold_start_seconds != "auto":
        cold = document.workloads[0].cold_start_seconds
    base = None
    if request.replica_file:
        from simulations.calibration import load_replica_file

        base = load_replica_file(request.replica_file)
    model = parse_overrides([*([f"cold_start_s={cold}"] if cold is not None else []), *request.replica], base)
    trace = load_trace(request.trace, request.trace_format, request.seed, request.rate_scale, request.lengths_from)
    if request.window is not None:
        trace = trace.window(*request.window)
    if request.time_scale != 1.0:  # before the sizing: the plan's minutes and fleet are the run's
        trace = trace.scaled(request.time_scale)
    return model, trace


def sized_for(
    request: SimulationRequest, model: ReplicaModel, trace: Trace, ttft: float, target: float, note: Note = quiet
) -> tuple[PolicyFile, dict[str, Any]]:
    """``resolve``'s workload and how it was sized."""
    document = request.document
    sizing: dict[str, Any] = {}
    if document is None:
        document, sizing = sized_builtin(model, trace, ttft, target, note)
    elif document.workloads[0].needs_capacity:
        document, sizing = with_measured_capacity(document, model, trace, ttft, target, note)
    return with_slo(document, ttft, target), sizing


def _sized_while_searching(
    request: SimulationRequest,
    model: ReplicaModel,
    trace: Trace,
    ttft: float,
    target: float,
    grow_to: int | None,
    note: Note,
) -> tuple[PolicyFile, dict[str, Any], Footing | None]:
    """``sized_for``, and, where it plans the follower on a long trace, the fixed fleet's search (``footing``,
    which the plan leaves alone: it reads only the workload's bounds) in a worker meanwhile: the plan's runs take one
    core and would leave the other idle (docs/decisions/simulator-speed.md). None for the search where it was not
    run: ``compare`` runs it."""
    bounds = request.document or builtin_policy(model)
    workload = bounds.workloads[0]
    searching = Shared(trace, model, bounds, workload, workload.max_replicas, ttft, target, request.jobs)
    if not (request.document is None or workload.needs_capacity) or worker_count(searching, 2) < 2:
        return (*sized_for(request, model, trace, ttft, target, note), None)
    search = partial(footing, trace, model, bounds, workload, ttft, target, grow_to=grow_to, workers=1)
    with beside(search) as found:
        document, sizing = sized_for(request, model, trace, ttft, target, note)
        return document, sizing, found()


def with_slo(document: PolicyFile, ttft: float, target: float) -> PolicyFile:
    """The document whose first workload says the SLO it is simulated for, so that ``--write-config`` writes it."""
    given = document.workloads[0].slo
    slo = Slo(ttftSeconds=ttft, target=target, windowSeconds=given.window_seconds if given else DEFAULT_SLO_WINDOW_S)
    workload = document.workloads[0].model_copy(update={"slo": slo})
    return document.model_copy(update={"workloads": [workload, *document.workloads[1:]]})


@dataclass(frozen=True)
class PolicyChoice:
    """What ``--write-config`` writes: the cheapest compared policy that met the SLO as a policy file's text, with
    a comment saying what it was measured on, and, where a fixed fleet cost less, that fleet (a baseline is not a
    policy one deploys, so it is said beside the file, not written)."""

    policy: str
    text: str
    cheaper_static: tuple[int, float, float] | None  # (replicas, its GPU-hours, the policy's)


def chosen_policy(done: Simulation) -> PolicyChoice | None:
    """The policy file ``--write-config`` writes for ``done``; None when no compared policy met the SLO."""
    comparison = done.comparison
    meeting = [r for r in comparison.results if r.policy in done.policy_types and r.meets(comparison.slo_target)]
    if not meeting:
        return None
    best = min(meeting, key=lambda r: r.gpu_hours)
    raw = deployable(done.document, best, comparison.model.cold_start_s)
    parse_policy_document(raw, "<written>")  # what is written must load as it was simulated
    tuned = ", ".join(f"{k}={v}" for k, v in (best.tuned or {}).items())
    static = next((r for r in comparison.results if r.policy == "static-best"), None)
    data = done.report
    header = [
        f"Written by `vllm-autoscaler simulate` for {comparison.workload.key}: {best.policy}"
        + (f" (tuned: {tuned})" if tuned else ""),
        f"met the SLO (time to first token beyond own prefill <= {comparison.slo_ttft:g} s for "
        f"{percent(comparison.slo_target)} of requests) at {floor_to(best.slo_attainment, 4):.4f} "
        f"for {best.gpu_hours:.2f} GPU-h",
        f"on {data['trace']} ({data['requests']} requests over {data['duration_s'] / 3600:.2f} h), with a "
        f"simulated cold start of {comparison.model.cold_start_s:g} s.",
    ]
    if static is not None and comparison.static_best_replicas:
        header.append(f"static-best: {static.gpu_hours:.2f} GPU-h ({comparison.static_best_replicas} replicas).")
    text = "".join(f"# {line}\n" for line in header) + yaml.safe_dump(raw, sort_keys=False, width=110)
    cheaper = None
    if static is not None and static.meets(comparison.slo_target) and static.gpu_hours < best.gpu_hours:
        cheaper = (comparison.static_best_replicas or 0, static.gpu_hours, best.gpu_hours)
    return PolicyChoice(best.policy, text, cheaper)


SIMULATED_START = 1_767_225_600.0  # 2026-01-01T00:00:00Z: recorded stamps of a simulated run start here


def recorded_rows(done: Simulation) -> tuple[list[tuple[float, str, str, float]], int]:
    """``--record-metrics``: the fleet run once more under the workload's own policy, its metrics tick by tick as
    ``record`` would have read them (for ``replay``); with the number of ticks."""
    comparison = done.comparison
    contender = policy_contender(done.document, comparison.workload, comparison.model)
    contender.observed = []
    run(comparison.trace, comparison.model, contender, comparison.initial_replicas, comparison.slo_ttft, False)
    return observed_rows(comparison.workload.key, contender.observed, SIMULATED_START), len(contender.observed)
