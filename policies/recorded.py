"""The recorded-metrics file (docs/contract.md): ``timestamp,workload,metric,value`` in long format.

``replay`` reads it and ``record`` writes it. Reading is strict and names the line of the first bad row:
a user feeding a day of production data must know exactly which row to look at.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TextIO

from policies.base import Observation
from policies.policy_file import Workload

HEADER = ["timestamp", "workload", "metric", "value"]
REPLICAS = "replicas"  # the target's spec.replicas: the count asked for
READY_REPLICAS = "ready_replicas"  # how many of them were ready
ACTIVATION = "activation"  # a workload with an activation block: its query's value
ACTIVITY = "activity"  # and its replicas' activity (policies.activation)


class RecordedMetricsError(ValueError):
    """Bad recorded-metrics input; the message names the file and line."""


def parse_timestamp(text: str) -> float:
    """Unix seconds (integer or decimal) or RFC 3339."""
    text = text.strip()
    try:
        value = float(text)
    except ValueError:
        pass
    else:
        if not math.isfinite(value):
            raise ValueError(f"timestamp {text!r} is not finite")
        return value
    try:
        moment = datetime.fromisoformat(text.replace("z", "Z"))
    except ValueError:
        raise ValueError(f"timestamp {text!r} is neither Unix seconds nor RFC 3339") from None
    if moment.tzinfo is None:
        raise ValueError(f"timestamp {text!r} has no time zone (RFC 3339 needs one, e.g. 'Z')")
    return moment.timestamp()


def format_timestamp(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


@dataclass
class Tick:
    """Every value recorded at one timestamp. A NaN stays NaN: no value for most metrics, no load for a latency
    quantile (``policies.base.metric_value`` decides which)."""

    timestamp: float
    label: str
    values: dict[str, dict[str, float]] = field(default_factory=dict)
    lines: dict[tuple[str, str], int] = field(default_factory=dict)


def read_ticks(source: str | Path | TextIO, name: str | None = None) -> list[Tick]:
    """Group rows into ticks, one per distinct timestamp, in order; raises :class:`RecordedMetricsError`."""
    if isinstance(source, (str, Path)):
        label = name or str(source)
        try:
            with open(source, newline="", encoding="utf-8") as handle:
                return _read(handle, label)
        except OSError as exc:
            raise RecordedMetricsError(f"{label}: cannot read: {exc}") from None
    return _read(source, name or "<metrics>")


def _read(handle: TextIO, label: str) -> list[Tick]:
    reader = csv.reader(handle)
    header = next(reader, None)
    if header is None or [h.strip() for h in header] != HEADER:
        raise RecordedMetricsError(f"{label}:1: the header must be {','.join(HEADER)} (found {header})")
    ticks: list[Tick] = []
    for row in reader:
        line = reader.line_num
        if not row or all(not cell.strip() for cell in row):
            continue
        if len(row) != 4:
            raise RecordedMetricsError(f"{label}:{line}: expected 4 columns, found {len(row)}")
        stamp_text, workload, metric, value_text = (cell.strip() for cell in row)
        try:
            stamp = parse_timestamp(stamp_text)
        except ValueError as exc:
            raise RecordedMetricsError(f"{label}:{line}: {exc}") from None
        if not workload or not metric:
            raise RecordedMetricsError(f"{label}:{line}: workload and metric must not be empty")
        try:
            value = float(value_text)
        except ValueError:
            raise RecordedMetricsError(f"{label}:{line}: value {value_text!r} is not a number") from None
        if ticks and stamp < ticks[-1].timestamp:
            raise RecordedMetricsError(
                f"{label}:{line}: timestamp {stamp_text} is earlier than {ticks[-1].label} on an earlier line; "
                "rows must be in time order"
            )
        if not ticks or stamp > ticks[-1].timestamp:
            ticks.append(Tick(stamp, stamp_text))
        tick = ticks[-1]
        if (workload, metric) in tick.lines:
            raise RecordedMetricsError(
                f"{label}:{line}: {workload} {metric} at {stamp_text} repeats line {tick.lines[(workload, metric)]}"
            )
        tick.values.setdefault(workload, {})[metric] = value
        tick.lines[(workload, metric)] = line
    return ticks


def write_rows(handle: TextIO, rows: Iterable[tuple[float, str, str, float]]) -> int:
    writer = csv.writer(handle, lineterminator="\n")
    writer.writerow(HEADER)
    count = 0
    for stamp, workload, metric, value in rows:
        writer.writerow([format_timestamp(stamp), workload, metric, repr(float(value))])
        count += 1
    return count


def observed_rows(
    workload: str, observed: Iterable[tuple[float, int, int, dict[str, float | None]]], start: float
) -> list[tuple[float, str, str, float]]:
    """A simulated fleet's ticks as recorded-metrics rows (``start`` is the first tick's Unix time): what
    ``record`` would have read from Prometheus had the fleet been real."""
    rows = []
    for now, replicas, ready, metrics in observed:
        stamp = start + now
        rows.append((stamp, workload, REPLICAS, float(replicas)))
        rows.append((stamp, workload, READY_REPLICAS, float(ready)))
        rows += [(stamp, workload, name, value) for name, value in metrics.items() if value is not None]
    return rows


def decided_names(workload: Workload) -> list[str]:
    """The series a workload's policy decides from: its metrics, and what it reads beyond them."""
    return [m.name for m in workload.metrics] + list(workload.extra_signals)


def recorded_observation(
    workload: Workload, values: Mapping[str, float], now: float, current: int, names: Sequence[str] | None = None
) -> Observation:
    """One tick's observation of ``workload`` from the series recorded for it at that tick (by their
    recorded-metrics names), with ``current`` as the count asked for: what ``replay`` decides from and what a
    starting daemon passes its policy (``autoscaler.warm_up``). ``names``, the workload's ``decided_names``, may be
    given by a caller that passes many ticks (the names are worked out from the policy block each time)."""
    names = decided_names(workload) if names is None else names
    ready = values.get(READY_REPLICAS)
    return Observation(
        now,
        current,
        {name: values.get(name) for name in names},
        None if ready is None else round(ready),
        values.get(ACTIVATION),
        values.get(ACTIVITY),
    )
