"""``vllm-autoscaler status``: one row per workload, like ``kubectl get hpa``, from the state the leader keeps
in the cluster (``autoscaler.state``), so it works from a laptop with a kubeconfig."""

from __future__ import annotations

import json
import time
from typing import Any

from autoscaler.state import WorkloadRecord

COLUMNS = ("WORKLOAD", "TARGET", "POLICY", "METRICS", "MIN", "MAX", "CURRENT", "READY", "DESIRED", "LAST SCALE")
SHADOW = ("HEADING", "OWNER DESIRED")  # after DESIRED, when a record comes from a dry-run (shadow) controller
WIDE = ("PROPOSAL", "LIMIT", "CONDITIONS", "COLD START", "OWNER")


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


def _metric(name: str, shown: dict[str, Any]) -> str:
    """``name value/target``, and for an ``AverageValue`` target the fleet total per current replica, as
    ``kubectl get hpa`` prints it: ``503/500 (avg)``."""
    if shown.get("type") == "AverageValue":
        return f"{name} {_number(shown.get('average'))}/{_number(shown.get('target'))} (avg)"
    return f"{name} {_number(shown.get('value'))}/{_number(shown.get('target'))}"


def _limit(record: WorkloadRecord) -> str:
    """What held the count back from the proposal: a bound or a rate limit (``ScalingLimited``), or the
    stabilization window; ``-`` for nothing."""
    limited = next((c for c in record.conditions if c.type == "ScalingLimited" and c.status == "True"), None)
    if limited is not None:
        return limited.reason
    if record.stabilized is not None and record.recommended is not None and record.stabilized != record.recommended:
        return f"stabilized at {record.stabilized}"
    return "-"


def row(record: WorkloadRecord, now: float, shadow: bool = False) -> tuple[str, ...]:
    """The cells of one workload: ``COLUMNS``, then ``SHADOW``'s when ``shadow``, then ``WIDE``'s."""
    metrics = ", ".join(_metric(name, m) for name, m in sorted(record.metrics.items()))
    last = record.last_scale
    scaled = "-" if last is None else f"{_age(now - last.at)} ago {last.from_replicas}->{last.to} ({last.reason})"
    cold = "-" if record.cold_start_seconds is None else f"{record.cold_start_seconds:.0f}s"
    if len(record.cold_starts) >= 3:
        cold += f" (measured, {len(record.cold_starts)})"
    owner = ", ".join(record.owners) or "-"
    if record.owners and record.owner_desired is not None:
        owner += f" (wants {record.owner_desired})"
    conditions = ", ".join(f"{c.type}={c.status} {c.reason}" for c in record.conditions) or "-"
    cells = [
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
    ]
    if shadow:
        agrees = "" if record.agrees is None else (" (agrees)" if record.agrees else " (differs)")
        cells += [_number(record.heading) if record.dry_run else "-", _number(record.owner_desired) + agrees]
    return (*cells, _number(record.recommended), _limit(record), conditions, cold, owner)


def table(records: dict[str, WorkloadRecord], now: float | None = None, wide: bool = False) -> str:
    """The rows under a header; beside a dry-run controller's records the count it heads for and the owner's
    desired count; ``wide`` adds the policy's proposal, the limit on it, the conditions, the cold start and
    the owner."""
    moment = time.time() if now is None else now
    shadow = any(r.dry_run for r in records.values())
    header = (*COLUMNS, *(SHADOW if shadow else ()), *WIDE)
    width = len(header) - (0 if wide else len(WIDE))
    rows = [header[:width]] + [row(records[key], moment, shadow)[:width] for key in sorted(records)]
    widths = [max(len(r[i]) for r in rows) for i in range(width)]
    return "\n".join(
        "   ".join(cell.ljust(width) for cell, width in zip(r, widths, strict=True)).rstrip() for r in rows
    )


def as_json(records: dict[str, WorkloadRecord]) -> str:
    """The stable shape of ``status -o json``: ``{"workloads": [record, ...]}``, records as the leader wrote them."""
    return json.dumps(
        {"workloads": [records[k].model_dump(by_alias=True, exclude_none=True) for k in sorted(records)]}, indent=2
    )
