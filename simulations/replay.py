"""Open-loop replay: recorded observations through the daemon's own decision code, one tick per timestamp."""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from policies.base import Observation
from policies.pipeline import Decision
from policies.policy_file import PolicyFile
from simulations.recorded import REPLICAS, RecordedMetricsError, Tick, format_timestamp

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
    known = {w.key: {m.name for m in w.metrics} | {REPLICAS} for w in policy.workloads}
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
            if metric == REPLICAS and (value is None or value < 0 or not float(value).is_integer()):
                raise RecordedMetricsError(f"{label}:{line}: replicas must be a whole number >= 0, not {value}")


def replay(policy: PolicyFile, ticks: list[Tick]) -> list[ReplayRow]:
    """Decide every workload at every tick. The count decided at a tick is the next tick's current count
    unless the file records ``replicas`` there; without any, the first count is ``minReplicas``."""
    deciders = {w.key: policy.decider(w) for w in policy.workloads}
    current = {w.key: w.min_replicas for w in policy.workloads}
    rows: list[ReplayRow] = []
    for tick in ticks:
        for workload in policy.workloads:
            recorded = tick.values.get(workload.key, {})
            observed = recorded.get(REPLICAS)
            count = int(observed) if observed is not None else current[workload.key]
            metrics = {m.name: recorded.get(m.name) for m in workload.metrics}
            decider = deciders[workload.key]
            decision = decider.decide(Observation(tick.timestamp, count, metrics))
            decider.applied(decision)
            current[workload.key] = decision.desired
            rows.append(ReplayRow(tick.label, workload.key, decision, metrics))
    return rows


def write_decisions(handle: TextIO, rows: list[ReplayRow]) -> None:
    writer = csv.writer(handle, lineterminator="\n")
    writer.writerow(DECISION_HEADER)
    for row in rows:
        d = row.decision
        writer.writerow([row.label, row.workload, d.current, d.recommended, d.desired, d.reason])


def plot_decisions(path: str | Path, policy: PolicyFile, rows: list[ReplayRow]) -> None:
    """One panel per workload: each metric (right axis) and current, recommended, desired replicas."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = [w.key for w in policy.workloads]
    fig, axes = plt.subplots(len(keys), 1, figsize=(11, 3.6 * len(keys)), squeeze=False, sharex=True)
    for ax, key in zip(axes[:, 0], keys, strict=True):
        mine = [r for r in rows if r.workload == key]
        times = [r.decision.now for r in mine]
        start = times[0] if times else 0.0
        minutes = [(t - start) / 60 for t in times]
        for attr, style in (("current", ":"), ("recommended", "--"), ("desired", "-")):
            ax.step(minutes, [getattr(r.decision, attr) for r in mine], style, where="post", label=f"{attr} replicas")
        ax.set_ylabel("replicas")
        ax.set_title(f"{key}  (t0 = {format_timestamp(start)})")
        right = ax.twinx()
        for name in mine[0].metrics if mine else []:
            values = [r.metrics.get(name) for r in mine]
            right.plot(minutes, [float("nan") if v is None else v for v in values], alpha=0.45, label=name)
        right.set_ylabel("metric value")
        lines, labels = ax.get_legend_handles_labels()
        more, more_labels = right.get_legend_handles_labels()
        ax.legend(lines + more, labels + more_labels, loc="upper left", fontsize="small")
    axes[-1, 0].set_xlabel("minutes")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
