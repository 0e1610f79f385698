"""``vllm-autoscaler simulate``: parse, call the simulator's comparison, print its report (docs/simulation.md)."""

from __future__ import annotations

import argparse
import json
import sys
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import TYPE_CHECKING, Any

from policies.policy_file import (
    PolicyFile,
    PolicyFileError,
)
from policies.registry import policy_class

if TYPE_CHECKING:
    from simulations.request import Simulation, SimulationRequest

from autoscaler.cli.common import (
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
    """Parse into a ``SimulationRequest``, call the simulator's front door (``simulations.request.simulate``),
    print its report and write the files asked for."""
    from simulations.request import simulate
    from simulations.traces import TraceError

    document = None
    if args.config:
        document = _load(args.config)
        if document is None:
            return EXIT_BAD_INPUT
        if len(document.workloads) > 1:
            print(f"vllm-autoscaler: simulating the first workload, {document.workloads[0].key}", file=sys.stderr)
    if (refused := _refused(args)) is not None:
        return refused
    request = simulation_request(args, document)
    try:
        done = simulate(request, _StderrNote(), progress=not QUIET["on"])
    except BrokenProcessPool:
        _error("a simulation worker process died (killed, perhaps for memory); nothing was written")
        return EXIT_FAILED
    except (TraceError, ValueError, KeyError, PolicyFileError) as exc:
        _error(exc.args[0] if isinstance(exc, KeyError) else str(exc))
        return EXIT_BAD_INPUT
    return _emit(args, done)


def simulation_request(args: argparse.Namespace, document: PolicyFile | None) -> SimulationRequest:
    """The ``SimulationRequest`` that ``simulate``'s parsed arguments ask for (the lab builds its runs by it)."""
    from simulations.request import SimulationRequest

    return SimulationRequest(
        document=document,
        trace=args.trace,
        trace_format=args.format,
        seed=args.seed,
        rate_scale=args.rate_scale,
        lengths_from=args.lengths_from,
        window=args.window,
        time_scale=args.time_scale,
        cold_start=args.cold_start,
        slo_ttft=args.slo_ttft,
        slo_target=args.slo_target,
        replica_file=args.replica_file,
        replica=tuple(args.replica),
        policies=tuple(args.policy or ()),
        tune=args.tune,
        jobs=args.jobs,
    )


def _refused(args: argparse.Namespace) -> int | None:
    """``EXIT_BAD_INPUT``, said in one line, for arguments that cannot run, before any expensive work; None when
    they can."""
    if (args.slo_target is not None and not 0 < args.slo_target <= 1) or (
        args.slo_ttft is not None and args.slo_ttft <= 0
    ):
        _error("--slo-target must be in (0, 1] and --slo-ttft positive")
        return EXIT_BAD_INPUT
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


def _emit(args: argparse.Namespace, done: Simulation) -> int:
    """The report printed (a table, or ``-o json``), the built-in low-traffic model's beside the built-in day's,
    then each file asked for written; the exit status of ``--write-config`` when it was asked."""
    from simulations import report as reporting

    data = done.report
    if args.output == "json":
        print(json.dumps(data, indent=2))
    else:
        print(reporting.table(data), flush=True)
        if "scale_to_zero" in data:
            print("\nA low-traffic model with idle hours, allowed to scale to zero (minReplicas 0, activation):")
            print(reporting.table(data["scale_to_zero"]))
    if not QUIET["on"]:
        print(f"(simulated in {done.elapsed_s:.1f} s)", file=sys.stderr)
    written = args.out
    try:
        if args.out:
            reporting.dump(args.out, data)
        if args.plot:
            written = args.plot
            reporting.plot(args.plot, done.comparison)
        if args.record_metrics:
            written = args.record_metrics
            _record_metrics(args.record_metrics, done)
        if args.write_config:
            written = args.write_config
            return _write_config(args.write_config, done)
    except OSError as exc:
        return _write_failed(exc, written)
    return EXIT_OK


def _record_metrics(path: str, done: Simulation) -> None:
    """``simulate --record-metrics``: the simulator's rows (``request.recorded_rows``), written as ``record`` writes."""
    from policies.recorded import write_rows
    from simulations.request import recorded_rows

    rows, ticks = recorded_rows(done)
    with open(path, "w", newline="", encoding="utf-8") as handle:
        count = write_rows(handle, rows)
    print(f"vllm-autoscaler: wrote {count} rows of {ticks} ticks to {path}", file=sys.stderr)


def _write_config(path: str, done: Simulation) -> int:
    """``simulate --write-config``: the file the simulator chose (``request.chosen_policy``), or exit 1 and write
    nothing when no policy met the SLO."""
    from simulations.report import percent
    from simulations.request import chosen_policy

    choice = chosen_policy(done)
    if choice is None:
        _error(f"no policy met the SLO target ({percent(done.comparison.slo_target)}); nothing written to {path}")
        return EXIT_FAILED
    Path(path).write_text(choice.text, encoding="utf-8")
    if choice.cheaper_static is not None:
        replicas, static, best = choice.cheaper_static
        _note(
            f"{replicas} fixed replicas cost less ({static:.2f} GPU-h against {best:.2f}); {path} holds "
            f"{choice.policy}, the cheapest policy that met the SLO"
        )
    print(f"vllm-autoscaler: wrote {choice.policy} to {path}", file=sys.stderr)
    return EXIT_OK


def add_parser(sub: Any) -> None:
    """The ``simulate`` command's arguments (over 60 lines: one declaration per flag, nothing else)."""
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
