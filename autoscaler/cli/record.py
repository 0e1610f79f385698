"""``vllm-autoscaler record``: write a workload's metrics from Prometheus as a recorded-metrics file."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from autoscaler.cli.common import (
    EXIT_BAD_INPUT,
    EXIT_FAILED,
    EXIT_OK,
    _error,
    _load,
    _settings,
    _unwritable,
    _write_failed,
)
from policies.spec import parse_duration


def _when(text: str) -> float:
    """Unix seconds, RFC 3339, ``now``, or ``now-2h``-style offsets."""
    from policies.recorded import parse_timestamp

    text = text.strip()
    if text.startswith("now"):
        rest = text[3:].strip()
        offset = 0 if not rest else parse_duration(rest.lstrip("-").strip())
        if rest and not rest.startswith("-"):
            raise ValueError(f"{text!r}: only offsets into the past, such as now-1h")
        return time.time() - float(offset)
    return parse_timestamp(text)


def cmd_record(args: argparse.Namespace) -> int:
    from autoscaler.logs import configure
    from autoscaler.metrics.prometheus import PrometheusSource
    from autoscaler.record import record

    document = _load(args.config)
    if document is None:
        return EXIT_BAD_INPUT
    settings = _settings(args)
    if settings is None:
        return EXIT_BAD_INPUT
    configure(settings.log_format, settings.log_level)
    try:
        start, end = _when(args.start), _when(args.end)
        step = float(parse_duration(args.step)) if args.step else float(document.interval)
        from autoscaler.metrics.queries import metric_queries

        for workload in document.workloads:
            metric_queries(workload)
    except ValueError as exc:
        _error(str(exc))
        return EXIT_BAD_INPUT
    if end <= start or step <= 0:
        _error("--end must be after --start, and --step positive")
        return EXIT_BAD_INPUT
    if problem := _unwritable(args.out):
        _error(problem)
        return EXIT_BAD_INPUT
    source = PrometheusSource(settings.prometheus(document))
    try:
        if args.out in (None, "-"):
            outcome = record(document, source, start, end, step, sys.stdout)
        else:
            with open(args.out, "w", newline="", encoding="utf-8") as handle:
                outcome = record(document, source, start, end, step, handle)
    except OSError as exc:
        return _write_failed(exc, args.out)
    for line in outcome.empty:
        print(f"vllm-autoscaler: no values: {line}", file=sys.stderr)
    if outcome.failed:
        for line in outcome.failed:
            _error(f"Prometheus failed: {line}")
        return EXIT_FAILED
    print(f"recorded {outcome.rows} rows", file=sys.stderr)
    return EXIT_OK


def add_parser(sub: Any) -> None:
    """The ``record`` command's arguments."""
    p = sub.add_parser("record", help="range-query Prometheus into a recorded-metrics file for replay")
    p.add_argument("--config", required=True, metavar="FILE")
    p.add_argument("--start", required=True, metavar="T", help="Unix seconds, RFC 3339, or now-1h")
    p.add_argument("--end", required=True, metavar="T")
    p.add_argument("--step", metavar="S", help="seconds or a duration such as 15s (default: the interval)")
    p.add_argument("--out", required=True, metavar="RECORDED.csv")
    p.add_argument("--prometheus-url", metavar="URL", help="overrides the file and the environment")
    p.set_defaults(func=cmd_record)
