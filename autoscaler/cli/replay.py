"""``vllm-autoscaler replay``: decide over a recorded-metrics file as the daemon would have."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from autoscaler.cli.common import (
    EXIT_BAD_INPUT,
    EXIT_OK,
    QUIET,
    _error,
    _load,
    _no_plotting,
    _unwritable,
    _write_failed,
)
from policies.recorded import RecordedMetricsError, read_ticks


def cmd_replay(args: argparse.Namespace) -> int:
    from simulations.replay import (
        DECISION_HEADER,
        check_names,
        decision_fields,
        plot_decisions,
        replay,
        scale_events,
        write_decisions,
    )

    document = _load(args.config)
    if document is None:
        return EXIT_BAD_INPUT
    if unmeasured := next((w for w in document.workloads if w.needs_capacity), None):
        _error(f"{args.config}: {unmeasured.key}: capacity: needed to replay a workload with an slo and no metrics")
        return EXIT_BAD_INPUT
    if problem := _unwritable(args.out, args.plot) or _no_plotting(args.plot):
        _error(problem)
        return EXIT_BAD_INPUT
    try:
        ticks = read_ticks(args.metrics)
        check_names(document, ticks, args.metrics)
    except RecordedMetricsError as exc:
        _error(str(exc))
        return EXIT_BAD_INPUT
    rows = replay(document, ticks)
    written = args.out
    try:
        if args.out and args.out != "-":
            with open(args.out, "w", newline="", encoding="utf-8") as handle:
                write_decisions(handle, rows)
        elif args.output != "json":
            write_decisions(sys.stdout, rows)
        if args.output == "json":
            decisions = [dict(zip(DECISION_HEADER, decision_fields(r), strict=True)) for r in rows]
            summary = {"ticks": len(ticks), "scale_events": scale_events(rows), "decisions": decisions}
            print(json.dumps(summary, indent=2))
        if args.plot:
            written = args.plot
            plot_decisions(args.plot, document, rows)
    except OSError as exc:
        return _write_failed(exc, written)
    if not QUIET["on"]:
        print(
            f"replayed {len(ticks)} ticks for {len(document.workloads)} workload(s): {scale_events(rows)} scale events",
            file=sys.stderr,
        )
    return EXIT_OK


def add_parser(sub: Any) -> None:
    """The ``replay`` command's arguments."""
    p = sub.add_parser("replay", help="open-loop replay of recorded metrics through the decision code")
    p.add_argument("--config", required=True, metavar="FILE")
    p.add_argument("--metrics", required=True, metavar="RECORDED.csv")
    p.add_argument("--out", metavar="DECISIONS.csv", help="default: standard output")
    p.add_argument("--plot", metavar="FILE.png")
    p.add_argument("-o", "--output", choices=["csv", "json"], default="csv", help="standard output's format")
    p.set_defaults(func=cmd_replay)
