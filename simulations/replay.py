"""Open-loop replay: recorded observations through the daemon's own decision code, one tick per timestamp."""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from policies.pipeline import Decision
from policies.policy_file import PolicyFile
from policies.recorded import (
    ACTIVATION,
    ACTIVITY,
    READY_REPLICAS,
    REPLICAS,
    RecordedMetricsError,
    Tick,
    recorded_observation,
)

DECISION_HEADER = [
    "timestamp",
    "workload",
    "current_replicas",
    "recommended_replicas",
    "desired_replicas",
    "reason",
]


@dataclass(frozen=True)
class ReplayRow:
    label: str
    workload: str
    decision: Decision
    metrics: dict[str, float | None]


def check_names(policy: PolicyFile, ticks: list[Tick], label: str) -> None:
    """Every row must name a workload of the policy file and one of its metrics (or ``replicas``)."""
    known = {
        w.key: {m.name for m in w.metrics}
        | {REPLICAS, READY_REPLICAS}
        | ({ACTIVATION, ACTIVITY} if w.activation else set())
        | set(w.extra_signals)
        for w in policy.workloads
    }
    for tick in ticks:
        for (workload, metric), line in tick.lines.items():
            if workload not in known:
                raise RecordedMetricsError(
                    f"{label}:{line}: unknown workload {workload!r}; the policy file has {', '.join(sorted(known))}"
                )
            if metric not in known[workload]:
                raise RecordedMetricsError(
                    f"{label}:{line}: {workload} has no metric {metric!r}; "
                    f"expected one of {', '.join(sorted(known[workload]))}"
                )
            value = tick.values[workload][metric]
            if metric in (REPLICAS, READY_REPLICAS) and (value < 0 or not float(value).is_integer()):
                raise RecordedMetricsError(f"{label}:{line}: {metric} must be a whole number >= 0, not {value}")


def replay(policy: PolicyFile, ticks: list[Tick]) -> list[ReplayRow]:
    """Decide every workload at every tick. The count decided at a tick is the next tick's current count
    unless the file records ``replicas`` there; without any, the first count is ``minReplicas`` (1 for a
    workload that may go to zero: it goes there by itself)."""
    deciders = {w.key: policy.decider(w) for w in policy.workloads}
    current = {w.key: w.awake_min_replicas for w in policy.workloads}
    rows: list[ReplayRow] = []
    for tick in ticks:
        for workload in policy.workloads:
            recorded = tick.values.get(workload.key, {})
            observed = recorded.get(REPLICAS)
            count = int(observed) if observed is not None else current[workload.key]
            decider = deciders[workload.key]
            observation = recorded_observation(workload, recorded, tick.timestamp, count)
            decision = decider.decide(observation)
            decider.applied(decision)
            current[workload.key] = decision.desired
            rows.append(ReplayRow(tick.label, workload.key, decision, dict(observation.metrics)))
    return rows


def scale_events(rows: list[ReplayRow]) -> int:
    """The writes the daemon would have made: each time a workload's decided count moves from the count
    it held (the recorded one at first, then its own), not every tick where it differs from the recording."""
    held: dict[str, int] = {}
    events = 0
    for row in rows:
        before = held.get(row.workload, row.decision.current)
        if row.decision.desired != before:
            events += 1
        held[row.workload] = row.decision.desired
    return events


def decision_fields(row: ReplayRow) -> list[str | int]:
    """One decision as the columns of ``DECISION_HEADER``: the CSV's row and ``-o json``'s object."""
    d = row.decision
    return [row.label, row.workload, d.current, d.recommended, d.desired, d.reason]


def write_decisions(handle: TextIO, rows: list[ReplayRow]) -> None:
    writer = csv.writer(handle, lineterminator="\n")
    writer.writerow(DECISION_HEADER)
    writer.writerows(decision_fields(row) for row in rows)


def plot_decisions(path: str | Path, policy: PolicyFile, rows: list[ReplayRow]) -> None:
    """Per workload, a panel of current, recommended and desired replicas, then one panel per metric, each
    on its own axis (a KV fraction and a queue length share no scale), over wall-clock time (UTC)."""
    import datetime

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt

    panels: list[tuple[str, str | None]] = []
    for workload in policy.workloads:
        panels.append((workload.key, None))
        panels += [(workload.key, m.name) for m in workload.metrics]
    heights = [3.0 if metric is None else 1.6 for _, metric in panels]
    fig, axes = plt.subplots(
        len(panels), 1, figsize=(11, sum(heights) + 0.6), squeeze=False, sharex=True, height_ratios=heights
    )
    for ax, (key, metric) in zip(axes[:, 0], panels, strict=True):
        mine = [r for r in rows if r.workload == key]
        times = [datetime.datetime.fromtimestamp(r.decision.now, tz=datetime.UTC) for r in mine]
        if metric is None:
            for attr, style in (("current", ":"), ("recommended", "--"), ("desired", "-")):
                ax.step(times, [getattr(r.decision, attr) for r in mine], style, where="post", label=f"{attr}")
            ax.set_ylabel("replicas")
            ax.set_title(key)
            ax.legend(loc="upper left", fontsize="small")
        else:
            values = [r.metrics.get(metric) for r in mine]
            ax.plot(times, [float("nan") if v is None else v for v in values], color="tab:purple", lw=1)
            ax.set_ylabel(metric, fontsize="small", rotation=0, ha="right", va="center")
    stamp = mdates.DateFormatter("%Y-%m-%d %H:%M", tz=datetime.UTC)  # type: ignore[no-untyped-call]
    axes[-1, 0].xaxis.set_major_formatter(stamp)
    axes[-1, 0].set_xlabel("time (UTC)")
    fig.autofmt_xdate()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
