"""The ``vllm-autoscaler`` command line (CONTRACT.md). Exit status 2 means bad input."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence

from autoscaler import __version__
from autoscaler.policy_file import PolicyFile, PolicyFileError, json_schema, load_policy_file
from autoscaler.recorded import RecordedMetricsError, read_ticks

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2


def _error(message: str) -> None:
    print(f"vllm-autoscaler: {message}", file=sys.stderr)


def _load(path: str) -> PolicyFile | None:
    try:
        return load_policy_file(path)
    except PolicyFileError as exc:
        _error(f"{exc.source}: invalid policy file")
        for problem in exc.problems:
            print(f"  {problem}", file=sys.stderr)
        return None


def cmd_validate(args: argparse.Namespace) -> int:
    if args.print_schema:
        print(json.dumps(json_schema(), indent=2))
        return EXIT_OK
    if not args.config:
        _error("validate needs --config FILE (or --print-schema)")
        return EXIT_BAD_INPUT
    try:
        document = load_policy_file(args.config)
    except PolicyFileError as exc:
        for problem in exc.problems:
            print(problem)
        print(f"{exc.source}: {len(exc.problems)} problem(s)", file=sys.stderr)
        return EXIT_BAD_INPUT
    for workload in document.workloads:
        print(
            f"{workload.key}: {workload.policy_type}, {workload.min_replicas}-{workload.max_replicas} replicas, "
            f"metrics {', '.join(m.name for m in workload.metrics)}"
        )
    print(f"{args.config}: valid")
    return EXIT_OK


def cmd_replay(args: argparse.Namespace) -> int:
    from simulations.replay import check_names, plot_decisions, replay, write_decisions

    document = _load(args.config)
    if document is None:
        return EXIT_BAD_INPUT
    try:
        ticks = read_ticks(args.metrics)
        check_names(document, ticks, args.metrics)
    except RecordedMetricsError as exc:
        _error(str(exc))
        return EXIT_BAD_INPUT
    rows = replay(document, ticks)
    if args.out and args.out != "-":
        with open(args.out, "w", newline="", encoding="utf-8") as handle:
            write_decisions(handle, rows)
    else:
        write_decisions(sys.stdout, rows)
    if args.plot:
        plot_decisions(args.plot, document, rows)
    changes = sum(1 for r in rows if r.decision.changes)
    print(
        f"replayed {len(ticks)} ticks for {len(document.workloads)} workload(s): {changes} scale changes",
        file=sys.stderr,
    )
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="vllm-autoscaler",
        description="Autoscale vLLM Deployments on vLLM's own Prometheus metrics.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("validate", help="check a policy file; print each problem with its field path")
    p.add_argument("--config", metavar="FILE")
    p.add_argument("--print-schema", action="store_true", help="print the policy file's JSON Schema and exit")
    p.set_defaults(func=cmd_validate)

    p = sub.add_parser("replay", help="open-loop replay of recorded metrics through the decision code")
    p.add_argument("--config", required=True, metavar="FILE")
    p.add_argument("--metrics", required=True, metavar="RECORDED.csv")
    p.add_argument("--out", metavar="DECISIONS.csv", help="default: standard output")
    p.add_argument("--plot", metavar="FILE.png")
    p.set_defaults(func=cmd_replay)

    for register in EXTRA_COMMANDS:
        register(sub)
    return parser


EXTRA_COMMANDS: list[Callable[[argparse._SubParsersAction[argparse.ArgumentParser]], None]] = []


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return EXIT_BAD_INPUT if exc.code not in (0, None) else EXIT_OK
    result: int = args.func(args)
    return result
