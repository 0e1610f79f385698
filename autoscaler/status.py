"""``vllm-autoscaler status``: one row per workload, like ``kubectl get hpa``, from the state the leader keeps
in the cluster (``autoscaler.state``), so it works from a laptop with a kubeconfig."""

from __future__ import annotations

import json
import time
from typing import Any

from autoscaler.state import WorkloadRecord

COLUMNS = ("WORKLOAD", "TARGET", "POLICY", "METRICS", "MIN", "MAX", "CURRENT", "READY", "DESIRED", "LAST SCALE")
WIDE = ("COLD START", "OWNER")


def _age(seconds: float) -> str:
    seconds = max(seconds, 0.0)
    for unit, size in (("d", 86_400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"


def _number(value: Any) -> str:
    if value is None:
        return "<unknown>"
    return f"{value:g}" if isinstance(value, float) else str(value)


def row(record: WorkloadRecord, now: float) -> tuple[str, ...]:
    metrics = ", ".join(
        f"{name} {_number(m.get('value'))}/{_number(m.get('target'))}" for name, m in sorted(record.metrics.items())
    )
    last = record.last_scale
    scaled = "-" if last is None else f"{_age(now - last.at)} ago {last.from_replicas}->{last.to} ({last.reason})"
    cold = "-" if record.cold_start_seconds is None else f"{record.cold_start_seconds:.0f}s"
    if len(record.cold_starts) >= 3:
        cold += f" (measured, {len(record.cold_starts)})"
    owner = ", ".join(record.owners) or "-"
    if record.owners and record.owner_desired is not None:
        owner += f" (wants {record.owner_desired})"
    return (
        record.workload,
        record.target,
        record.policy,
        metrics or "-",
        _number(record.min_replicas),
        _number(record.max_replicas),
        _number(record.current),
        _number(record.ready),
        _number(record.desired) + ("" if record.reason is None else f" ({record.reason})"),
        scaled,
        cold,
        owner,
    )


def table(records: dict[str, WorkloadRecord], now: float | None = None, wide: bool = False) -> str:
    """The rows under a header; ``wide`` adds the cold start and the owner (or shadow) columns."""
    moment = time.time() if now is None else now
    width = len(COLUMNS) + (len(WIDE) if wide else 0)
    rows = [(*COLUMNS, *WIDE)[:width]] + [row(records[key], moment)[:width] for key in sorted(records)]
    widths = [max(len(r[i]) for r in rows) for i in range(width)]
    return "\n".join(
        "   ".join(cell.ljust(width) for cell, width in zip(r, widths, strict=True)).rstrip() for r in rows
    )


def as_json(records: dict[str, WorkloadRecord]) -> str:
    """The stable shape of ``status -o json``: ``{"workloads": [record, ...]}``, records as the leader wrote them."""
    return json.dumps(
        {"workloads": [records[k].model_dump(by_alias=True, exclude_none=True) for k in sorted(records)]}, indent=2
    )
