"""``vllm-autoscaler simulate``: parse, call the simulator's comparison, print its report (docs/simulation.md)."""

from __future__ import annotations

import argparse
import json
import sys
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from policies.policy_file import (
    PolicyFile,
    PolicyFileError,
    parse_policy_document,
)
from policies.registry import policy_class
from policies.spec import Slo

if TYPE_CHECKING:
    from simulations.compare import Comparison
    from simulations.replica_model import ReplicaModel
    from simulations.traces import Trace

from autoscaler.cli.common import (
    DEFAULT_SLO_TARGET,
    DEFAULT_SLO_TTFT_S,
    EXIT_BAD_INPUT,
    EXIT_FAILED,
    EXIT_OK,
    QUIET,
    _error,
    _finite,
    _jobs,
    _load,
    _no_plotting,
    _note,
    _seconds,
    _seed,
    _unwritable,
    _window,
    _write_failed,
)


class _StderrNote:
    """Notes on stderr, a note that ends in ``""`` continued by the next (a load test's, around the test)."""

    def __init__(self) -> None:
        self.continuing = False

    def __call__(self, text: str, end: str) -> None:
        if not QUIET["on"]:
            print(text if self.continuing else f"vllm-autoscaler: note: {text}", end=end, file=sys.stderr, flush=True)
        self.continuing = end == ""


def cmd_simulate(args: argparse.Namespace) -> int:
    """Parse, resolve the replica, the trace and the workload (``_resolved``), compare, and print and write what
    was asked (``_emit``)."""
    from simulations import report as reporting
    from simulations.builtin import BUILTIN_GROW_TO
    from simulations.compare import DEFAULT_POLICY_TYPES, compare
    from simulations.runner import long_run_hint
    from simulations.traces import TraceError

    document = None
    if args.config:
        document = _load(args.config)
        if document is None:
            return EXIT_BAD_INPUT
        if len(document.workloads) > 1:
            print(f"vllm-autoscaler: simulating the first workload, {document.workloads[0].key}", file=sys.stderr)
    if (refused := _refused(args, document)) is not None:
        return refused
    try:
        model, trace, document, sizing = _resolved(args, document)
        workload = document.workloads[0]
        if hint := long_run_hint(trace, model):
            _note(hint)
        types = list(dict.fromkeys(args.policy or ([workload.policy_type] if args.config else DEFAULT_POLICY_TYPES)))
        comparison = compare(
            trace,
            model,
            document,
            types,
            args.slo_ttft,
            args.slo_target,
            args.tune,
            progress=not QUIET["on"],
            grow_to=None if args.config else BUILTIN_GROW_TO,
            workers=args.jobs,
        )
        if comparison.workload.max_replicas != workload.max_replicas:
            _note(
                f"no fixed fleet of up to {workload.max_replicas} replicas met the SLO, so "
                f"the built-in workload ran with maxReplicas {comparison.workload.max_replicas}"
            )
            document = document.model_copy(update={"workloads": [comparison.workload]})
    except BrokenProcessPool:
        _error("a simulation worker process died (killed, perhaps for memory); nothing was written")
        return EXIT_FAILED
    except (TraceError, ValueError, KeyError, PolicyFileError) as exc:
        message = exc.args[0] if isinstance(exc, KeyError) else str(exc)
        _error(message)
        return EXIT_BAD_INPUT
    window = {} if args.window is None else {"window_s": list(args.window)}
    data = reporting.report(comparison, {"seed": args.seed, "time_scale": args.time_scale, **window, **sizing})
    return _emit(args, data, comparison, document, model, types)


def _refused(args: argparse.Namespace, document: PolicyFile | None) -> int | None:
    """``EXIT_BAD_INPUT``, said in one line, for arguments that cannot run, before any expensive work; None when
    they can (and the SLO resolved into ``args``)."""
    if (args.slo_target is not None and not 0 < args.slo_target <= 1) or (
        args.slo_ttft is not None and args.slo_ttft <= 0
    ):
        _error("--slo-target must be in (0, 1] and --slo-ttft positive")
        return EXIT_BAD_INPUT
    args.slo_ttft, args.slo_target = _simulated_slo(args, document)
    try:  # an unknown --policy is said at once
        for policy_type in args.policy or []:
            policy_class(policy_type)
    except KeyError as exc:
        _error(exc.args[0])
        return EXIT_BAD_INPUT
    if args.cold_start is not None and args.cold_start < 0:
        _error("--cold-start must be a number of seconds, 0 or more")
        return EXIT_BAD_INPUT
    if problem := _unwritable(args.out, args.plot, args.write_config, args.record_metrics) or _no_plotting(args.plot):
        _error(problem)
        return EXIT_BAD_INPUT
    return None


def _resolved(
    args: argparse.Namespace, document: PolicyFile | None
) -> tuple[ReplicaModel, Trace, PolicyFile, dict[str, Any]]:
    """The replica (the file's cold start unless ``--cold-start``), the trace (its window, its time scale), and the
    workload: the file's, sized from a load test where it gives only an SLO, or the built-in one sized for the
    trace; with how it was sized, for the report."""
    from simulations.builtin import sized_builtin, with_measured_capacity
    from simulations.replica_model import parse_overrides
    from simulations.traces import load_trace

    cold = args.cold_start
    if cold is None and document is not None and document.workloads[0].cold_start_seconds != "auto":
        cold = document.workloads[0].cold_start_seconds
    base = None
    if args.replica_file:
        from simulations.calibration import load_replica_file

        base = load_replica_file(args.replica_file)
    model = parse_overrides([*([f"cold_start_s={cold}"] if cold is not None else []), *args.replica], base)
    trace = load_trace(args.trace, args.format, args.seed, args.rate_scale, args.lengths_from)
    if args.window is not None:
        trace = trace.window(*args.window)
    sizing: dict[str, Any] = {}
    if document is None:
        document, sizing = sized_builtin(model, trace, args.slo_ttft, args.slo_target, _StderrNote())
    elif document.workloads[0].needs_capacity:
        document, sizing = with_measured_capacity(document, model, trace, args.slo_ttft, args.slo_target, _StderrNote())
    document = _with_slo(document, args.slo_ttft, args.slo_target)
    if args.time_scale != 1.0:
        trace = trace.scaled(args.time_scale)
    return model, trace, document, sizing


def _emit(
    args: argparse.Namespace,
    data: dict[str, Any],
    comparison: Comparison,
    document: PolicyFile,
    model: ReplicaModel,
    types: list[str],
) -> int:
    """The report printed (a table, or ``-o json``) with the built-in low-traffic model beside the built-in day, then
    each file asked for written; the exit status of ``--write-config`` when it was asked."""
    from simulations import report as reporting

    if args.output != "json":
        print(reporting.table(data), flush=True)
    if _builtin_scenarios(args):
        idle = _idle_model(model, document, args)
        data["scale_to_zero"] = reporting.report(idle, {"seed": args.seed})
        if args.output != "json":
            print("\nA low-traffic model with idle hours, allowed to scale to zero (minReplicas 0, activation):")
            print(reporting.table(data["scale_to_zero"]))
    if args.output == "json":
        print(json.dumps(data, indent=2))
    if not QUIET["on"]:
        print(f"(simulated in {comparison.elapsed_s:.1f} s)", file=sys.stderr)
    written = args.out
    try:
        if args.out:
            reporting.dump(args.out, data)
        if args.plot:
            written = args.plot
            reporting.plot(args.plot, comparison)
        if args.record_metrics:
            written = args.record_metrics
            _record_simulated(args.record_metrics, document, comparison)
        if args.write_config:
            written = args.write_config
            return _write_config(args.write_config, document, comparison, data, types)
    except OSError as exc:
        return _write_failed(exc, written)
    return EXIT_OK


def _simulated_slo(args: argparse.Namespace, document: PolicyFile | None) -> tuple[float, float]:
    """The SLO a simulation judges by: each flag given, else the file's ``slo`` block, else 2 s for 99 %."""
    slo = document.workloads[0].slo if document is not None else None
    ttft = args.slo_ttft if args.slo_ttft is not None else (slo.ttft_seconds if slo else DEFAULT_SLO_TTFT_S)
    target = args.slo_target if args.slo_target is not None else (slo.target if slo else DEFAULT_SLO_TARGET)
    return ttft, target


def _with_slo(document: PolicyFile, ttft: float, target: float) -> PolicyFile:
    """The document whose first workload says the SLO it is simulated for, so that ``--write-config`` writes it."""
    given = document.workloads[0].slo
    slo = Slo(ttftSeconds=ttft, target=target, windowSeconds=given.window_seconds if given else 3600)
    workload = document.workloads[0].model_copy(update={"slo": slo})
    return document.model_copy(update={"workloads": [workload, *document.workloads[1:]]})


def _builtin_scenarios(args: argparse.Namespace) -> bool:
    """``simulate`` with nothing chosen runs the built-in scenarios: the built-in day, then the idle model."""
    chosen = (args.trace, args.config, args.window, args.policy, args.lengths_from, args.format)
    return all(c is None or c == [] for c in chosen) and not args.tune and args.time_scale == 1.0


def _idle_model(model: ReplicaModel, document: PolicyFile, args: argparse.Namespace) -> Comparison:
    """The built-in low-traffic model with idle hours (``builtin.idle_model_document``), compared as the day is."""
    from simulations.builtin import idle_model_document
    from simulations.compare import compare
    from simulations.traces import synthetic_idle

    idle = idle_model_document(document)
    return compare(
        synthetic_idle(args.seed), model, idle, ["predictive"], args.slo_ttft, args.slo_target, progress=not QUIET["on"]
    )


SIMULATED_START = 1_767_225_600.0  # 2026-01-01T00:00:00Z: recorded stamps of a simulated run start here


def _record_simulated(path: str, document: PolicyFile, comparison: Comparison) -> None:
    """``simulate --record-metrics``: the fleet run once more under the workload's own policy, its metrics
    tick by tick written as ``record`` would have read them, for ``replay``."""
    from policies.recorded import observed_rows, write_rows
    from simulations.contenders import policy_contender
    from simulations.runner import run

    contender = policy_contender(document, comparison.workload, comparison.model)
    contender.observed = []
    run(comparison.trace, comparison.model, contender, comparison.initial_replicas, comparison.slo_ttft, False)
    rows = observed_rows(comparison.workload.key, contender.observed, SIMULATED_START)
    with open(path, "w", newline="", encoding="utf-8") as handle:
        count = write_rows(handle, rows)
    print(f"vllm-autoscaler: wrote {count} rows of {len(contender.observed)} ticks to {path}", file=sys.stderr)


def _write_config(
    path: str, document: PolicyFile, comparison: Comparison, data: dict[str, Any], types: list[str]
) -> int:
    """``simulate --write-config``: the cheapest compared policy that met the SLO, as a policy file for
    ``run``, with a comment saying what it was measured on. Baselines are not policies one deploys: a
    cheaper fixed fleet is said on standard error, beside the file."""
    from simulations import report as reporting
    from simulations.deployable import deployable
    from simulations.runner import floor_to

    meeting = [r for r in comparison.results if r.policy in types and r.meets(comparison.slo_target)]
    if not meeting:
        _error(f"no policy met the SLO target ({reporting.percent(comparison.slo_target)}); nothing written to {path}")
        return EXIT_FAILED
    best = min(meeting, key=lambda r: r.gpu_hours)
    raw = deployable(document, best, comparison.model.cold_start_s)
    parse_policy_document(raw, path)  # what is written must load as it was simulated
    tuned = ", ".join(f"{k}={v}" for k, v in (best.tuned or {}).items())
    static = next((r for r in comparison.results if r.policy == "static-best"), None)
    header = [
        f"Written by `vllm-autoscaler simulate` for {comparison.workload.key}: {best.policy}"
        + (f" (tuned: {tuned})" if tuned else ""),
        f"met the SLO (time to first token beyond own prefill <= {comparison.slo_ttft:g} s for "
        f"{reporting.percent(comparison.slo_target)} of requests) at {floor_to(best.slo_attainment, 4):.4f} "
        f"for {best.gpu_hours:.2f} GPU-h",
        f"on {data['trace']} ({data['requests']} requests over {data['duration_s'] / 3600:.2f} h), with a "
        f"simulated cold start of {comparison.model.cold_start_s:g} s.",
    ]
    if static is not None and comparison.static_best_replicas:
        header.append(f"static-best: {static.gpu_hours:.2f} GPU-h ({comparison.static_best_replicas} replicas).")
    text = "".join(f"# {line}\n" for line in header) + yaml.safe_dump(raw, sort_keys=False, width=110)
    Path(path).write_text(text, encoding="utf-8")
    if static is not None and static.meets(comparison.slo_target) and static.gpu_hours < best.gpu_hours:
        print(
            f"vllm-autoscaler: note: {comparison.static_best_replicas} fixed replicas cost less "
            f"({static.gpu_hours:.2f} GPU-h against {best.gpu_hours:.2f}); {path} holds {best.policy}, the cheapest "
            "policy that met the SLO",
            file=sys.stderr,
        )
    print(f"vllm-autoscaler: wrote {best.policy} to {path}", file=sys.stderr)
    return EXIT_OK


def add_parser(sub: Any) -> None:
    """The ``simulate`` command's arguments."""
    p = sub.add_parser("simulate", help="closed-loop simulation of a vLLM fleet under a request trace")
    p.add_argument("--config", metavar="FILE", help="policy file (default: a built-in Llama-3-70B workload)")
    p.add_argument(
        "--trace",
        metavar="FILE",
        help="request trace (default: a built-in synthetic day); without --config, the built-in targets are "
        "sized for its requests by a load test",
    )
    p.add_argument("--format", choices=["azure", "mooncake", "burstgpt", "rate", "synthetic"])
    p.add_argument("--out", metavar="REPORT.json")
    p.add_argument("--plot", metavar="FILE.png")
    p.add_argument("--tune", action="store_true", help="find each policy's cheapest setting that meets the SLO")
    p.add_argument(
        "--write-config",
        metavar="POLICY.yaml",
        help="write the policy file of the cheapest policy that met the SLO, with the setting it ran with "
        "(tuned, with --tune), for `run`; exit 1 and write nothing if none met it",
    )
    p.add_argument(
        "--record-metrics",
        metavar="RECORDED.csv",
        help="also write the simulated fleet's metrics under the workload's own policy, tick by tick, as "
        "`record` writes them (for `replay`)",
    )
    p.add_argument(
        "--time-scale",
        type=_finite,
        default=1.0,
        help="2 = replay twice as fast (its load then changes twice as fast against the cold start)",
    )
    p.add_argument(
        "--window",
        type=_window,
        metavar="START:END",
        help="simulate only the requests that arrive in this part of the trace, timed from its first request "
        "before --time-scale (7d:14d is its second week; :6h, 30d:)",
    )
    p.add_argument("--cold-start", type=_seconds, metavar="SECONDS", help="overrides coldStartSeconds (300, 5m)")
    p.add_argument(
        "--slo-ttft",
        type=_seconds,
        metavar="SECONDS",
        help="time to first token beyond the request's own prefill (default: the file's slo.ttftSeconds, else 2); "
        "without --config, a tighter SLO than 2 s for 99%% sizes the built-in targets by a load test",
    )
    p.add_argument(
        "--slo-target",
        type=_finite,
        metavar="FRACTION",
        help="share of requests (default: the file's slo.target, else 0.99)",
    )
    p.add_argument("--seed", type=_seed, default=0)
    p.add_argument(
        "--jobs", type=_jobs, metavar="N", help="worker processes for a long trace's runs (default: one per core)"
    )
    p.add_argument("--policy", action="append", metavar="TYPE", help="policy type to compare (repeatable)")
    p.add_argument(
        "--replica-file",
        metavar="replica.yaml",
        help="the replica `calibrate --out` fitted to your server (default: the built-in Llama-3-70B replica)",
    )
    p.add_argument(
        "--replica", action="append", default=[], metavar="KEY=VALUE", help="replica model parameter (over the file)"
    )
    p.add_argument("--rate-scale", type=_finite, default=1.0, help="multiply a rate file's rates")
    p.add_argument("--lengths-from", metavar="FILE", help="draw a rate file's request lengths from this trace")
    p.add_argument(
        "-o", "--output", choices=["table", "json"], default="table", help="json: the report, as --out writes it"
    )
    p.set_defaults(func=cmd_simulate)
