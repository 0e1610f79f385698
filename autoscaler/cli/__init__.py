"""The ``vllm-autoscaler`` command line (docs/contract.md): the parser, and one module per command beside it
(``validate``, ``replay``, ``simulate``, ``calibrate``, ``record``, ``run``, ``status``, ``import_keda``), each of which
parses, calls and prints; what they share is in ``common``. Exit status 2 means bad input."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from collections.abc import Sequence
from typing import Any

from autoscaler import __version__
from autoscaler.cli.common import (
    EXIT_BAD_INPUT,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_TERMINATED,
    QUIET,
    Terminated,
    _error,
    _finite,
    _jobs,
    _raise_terminated,
    _seconds,
    _seed,
    _window,
)
from autoscaler.cli.import_keda import cmd_import_keda
from autoscaler.cli.record import cmd_record
from autoscaler.cli.replay import cmd_replay
from autoscaler.cli.run import cmd_run
from autoscaler.cli.simulate import cmd_simulate
from autoscaler.cli.status import cmd_status
from autoscaler.cli.validate import cmd_validate


def _common_flags(parser: argparse.ArgumentParser, default: Any) -> None:
    parser.add_argument(
        "-v",
        "--verbose",
        "--debug",
        dest="debug",
        action="store_true",
        default=default,
        help="show the traceback of an unexpected error",
    )
    parser.add_argument(
        "-q", "--quiet", action="store_true", default=default, help="no notes and no progress on standard error"
    )


def _parented(common: argparse.ArgumentParser) -> type[argparse.ArgumentParser]:
    """A subcommand parser class that inherits ``common``'s flags."""

    class Subcommand(argparse.ArgumentParser):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs["parents"] = [common, *kwargs.get("parents", [])]
            super().__init__(*args, **kwargs)

    return Subcommand


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="vllm-autoscaler",
        description="Autoscale vLLM Deployments on vLLM's own Prometheus metrics.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    _common_flags(parser, default=False)
    # The same flags after the command too (`simulate ... -q`); SUPPRESS keeps a flag given before it.
    common = argparse.ArgumentParser(add_help=False)
    _common_flags(common, default=argparse.SUPPRESS)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_parented(common))

    p = sub.add_parser("validate", help="check a policy file; print each problem with its field path")
    p.add_argument("--config", metavar="FILE")
    p.add_argument("--print-schema", action="store_true", help="print the policy file's JSON Schema and exit")
    p.add_argument("-o", "--output", choices=["text", "json"], default="text")
    p.set_defaults(func=cmd_validate)

    p = sub.add_parser("replay", help="open-loop replay of recorded metrics through the decision code")
    p.add_argument("--config", required=True, metavar="FILE")
    p.add_argument("--metrics", required=True, metavar="RECORDED.csv")
    p.add_argument("--out", metavar="DECISIONS.csv", help="default: standard output")
    p.add_argument("--plot", metavar="FILE.png")
    p.add_argument("-o", "--output", choices=["csv", "json"], default="csv", help="standard output's format")
    p.set_defaults(func=cmd_replay)

    p = sub.add_parser("run", help="the controller daemon")
    p.add_argument("--config", required=True, metavar="FILE")
    p.add_argument("--dry-run", action="store_true", help="decide and log, never write to the cluster")
    p.add_argument("--once", action="store_true", help="one tick for every workload, then exit")
    p.add_argument("--kubeconfig", metavar="FILE", help="default: in-cluster, else ~/.kube/config")
    p.add_argument("--prometheus-url", metavar="URL", help="overrides the file and the environment")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("record", help="range-query Prometheus into a recorded-metrics file for replay")
    p.add_argument("--config", required=True, metavar="FILE")
    p.add_argument("--start", required=True, metavar="T", help="Unix seconds, RFC 3339, or now-1h")
    p.add_argument("--end", required=True, metavar="T")
    p.add_argument("--step", metavar="S", help="seconds or a duration such as 15s (default: the interval)")
    p.add_argument("--out", required=True, metavar="RECORDED.csv")
    p.add_argument("--prometheus-url", metavar="URL", help="overrides the file and the environment")
    p.set_defaults(func=cmd_record)

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

    from autoscaler.cli import calibrate

    calibrate.add_parser(sub)

    p = sub.add_parser("status", help="each workload's counts, metrics, last scale and cold start, from the cluster")
    p.add_argument("--kubeconfig", metavar="FILE", help="default: in-cluster, else ~/.kube/config")
    p.add_argument(
        "--namespace",
        help="the controller's namespace (default: the daemon's own, VLLM_AUTOSCALER_LEASE_NAMESPACE, else the "
        "pod's, else vllm-autoscaler)",
    )
    p.add_argument("--config", metavar="FILE", help="show only this policy file's workloads")
    p.add_argument(
        "--url",
        metavar="URL",
        help="read a running daemon's /status (its metrics port) instead of the cluster's state: a dry-run daemon "
        "writes no state",
    )
    p.add_argument("-o", "--output", choices=["table", "wide", "json"], default="table")
    p.set_defaults(func=cmd_status)

    p = sub.add_parser("import-keda", help="print the policy file equivalent to a KEDA ScaledObject")
    p.add_argument("scaledobject", metavar="SCALEDOBJECT.yaml", help="a file, or - for standard input")
    p.add_argument(
        "--as-is",
        action="store_true",
        help="keep KEDA's semantics, mistakes included (for a side-by-side shadow run); default: corrected",
    )
    p.set_defaults(func=cmd_import_keda)

    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return EXIT_BAD_INPUT if exc.code not in (0, None) else EXIT_OK
    from policies.registry import broken_plugins

    QUIET["on"] = bool(args.quiet)
    for name, error in broken_plugins().items():
        _error(f"warning: policy plug-in {name!r} failed to load, so type {name!r} is unavailable: {error}")
    on_main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _raise_terminated) if on_main_thread else None
    try:
        result: int = args.func(args)
    except KeyboardInterrupt:  # Ctrl-C during a long simulate, replay or record: no traceback
        _error("interrupted")
        return EXIT_INTERRUPTED
    except Terminated:
        _error("terminated")
        return EXIT_TERMINATED
    except BrokenPipeError:  # `... | head`: the reader has what it wanted
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_OK
    except Exception as exc:
        if args.debug:
            raise
        detail = str(exc).splitlines()[0][:300] if str(exc) else ""
        _error(f"internal error: {type(exc).__name__}: {detail} (--debug shows the traceback)")
        return EXIT_FAILED
    finally:
        if on_main_thread:
            signal.signal(signal.SIGTERM, previous)
    return result
