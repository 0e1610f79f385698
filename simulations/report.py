"""What `simulate` prints and writes: the comparison table, the JSON report, the plot."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from simulations.clairvoyant import FOLLOWERS  # tuned in hindsight on the trace itself: yardsticks, not deployable
from simulations.compare import Comparison
from simulations.runner import floor_to
from simulations.traces import Trace

BASELINES = ("keda-avg", "keda-sum", "static-best", "reactive", "clairvoyant", "oracle")
PLOT_CEILING_S = 3600.0  # the longest a run waits for its last requests (``runner.run``'s tail)
# The windows ``load`` gives the busiest prompt tokens of, and their names in the table: a second (the
# SLO's scale), a scrape window, a cold start, an hour (the scale of a diurnal swing).
BUSIEST_WINDOWS = {"1s": (1, "second"), "60s": (60, "minute"), "300s": (300, "5 min"), "3600s": (3600, "hour")}


def report(comparison: Comparison, extra_model: dict[str, Any]) -> dict[str, Any]:
    c = comparison
    results = [r.to_json() for r in c.results]
    results.append(
        {
            "policy": "oracle",
            "gpu_hours": round(c.oracle_gpu_hours, 4),
            "slo_attainment": c.slo_target,
            "ttft_p50_s": None,
            "ttft_p99_s": None,
            "queue_wait_p99_s": None,
            "completed_requests": c.trace.requests,
            "dropped_requests": 0,
            "scale_events": None,
            "max_replicas": c.oracle_max_replicas,
            "lower_bound": True,
        }
    )
    model = c.model.model_dump()
    model.update(extra_model)
    model.update(
        slo_ttft_s=c.slo_ttft,
        slo_target=c.slo_target,
        min_replicas=c.workload.min_replicas,
        max_replicas=c.workload.max_replicas,
        initial_replicas=c.initial_replicas,
        static_best_replicas=c.static_best_replicas,
        workload=c.workload.key,
        metrics=[m.model_dump(mode="json", exclude_none=True) for m in c.workload.metrics],
    )
    data: dict[str, Any] = {
        "trace": c.trace.name,
        "duration_s": round(c.trace.duration_s, 3),
        "requests": c.trace.requests,
        "model": model,
        "results": results,
    }
    relative_costs(results, c.slo_target)
    data["load"] = load(c.trace)
    if c.trace.prefix is not None:
        # What one cache of unbounded size, shared by the fleet, would hold: the most any routing can reach.
        least = float(c.trace.least_prefill_tokens.sum())
        data["prefix_reuse"] = round(1.0 - least / float(c.trace.prompt_tokens.sum()), 4)
    return data


def relative_costs(results: list[dict[str, Any]], target: float) -> None:
    """Each run's GPU-hours over static-best's, the reactive follower's and the clairvoyant's
    (``vs_static_best``, ``vs_reactive``, ``vs_clairvoyant``), where those met the SLO target: what a policy
    costs against the fixed fleet, against what a rule without a forecast could do, and against the
    achievable floor."""
    runs = {r["policy"]: r for r in results}
    for name, key in (
        ("static-best", "vs_static_best"),
        ("reactive", "vs_reactive"),
        ("clairvoyant", "vs_clairvoyant"),
    ):
        base = runs.get(name)
        if base is None or base["slo_attainment"] < target or base["gpu_hours"] <= 0:
            continue
        for r in results:
            if not r.get("lower_bound") and r["gpu_hours"] < math.inf:
                r[key] = round(r["gpu_hours"] / base["gpu_hours"], 3)


def floor_line(data: dict[str, Any]) -> str:
    """What the followers cost, each tuned in hindsight: the reactive one (the present load told exactly, no
    forecast) and the clairvoyant (the achievable floor); and each policy that met the SLO against them."""
    runs = {r["policy"]: r for r in data["results"]}
    target = data["model"]["slo_target"]
    lines = ""
    for name, what, key in (
        ("reactive", "without a forecast: reactive (the minute past told exactly", "vs_reactive"),
        ("clairvoyant", "floor: clairvoyant (a perfect forecast", "vs_clairvoyant"),
    ):
        follower = runs.get(name)
        if follower is None or key not in follower:
            continue
        line = f"\n{what}, the same cold start and behavior) meets the SLO at {follower['gpu_hours']:.2f} GPU-h"
        others = [
            f"{r['policy']} {r[key]:.2f}x"
            for r in data["results"]
            if r["policy"] not in (*FOLLOWERS, "oracle") and _meets(r, target) and key in r
        ]
        lines += line + (f"; against it {_series(others)}" if others else "")
    return lines


def load(trace: Trace) -> dict[str, Any]:
    """The trace's mean rates and how far its busiest second, minute, five minutes and hour rise above
    them (``Trace.busiest``, in prompt tokens): whether a fleet that follows the load has troughs to save
    in, and whether its bursts are shorter than the signals a policy reads."""
    span = trace.duration_s
    busiest = {key: trace.busiest(window) for key, (window, _) in BUSIEST_WINDOWS.items()}
    # A trace stamped coarsely (Mooncake's conversation trace, every 3 s) puts a stamp's arrivals in one
    # instant: the simulation replays them so, but the busiest second then counts the stamp, not the traffic.
    # Arrivals are in time order, so the gaps between distinct stamps are the positive differences.
    gaps = np.diff(trace.arrival_s)
    gaps = gaps[gaps > 0]
    return {
        "mean_requests_per_s": round(trace.requests / span, 4) if span > 0 else None,
        "mean_prompt_tokens_per_s": round(float(trace.prompt_tokens.sum()) / span, 1) if span > 0 else None,
        "busiest_prompt_tokens_over_mean": {k: round(v, 2) for k, v in busiest.items() if v is not None},
        "least_arrival_gap_s": round(float(gaps.min()), 6) if len(gaps) else None,
    }


def load_line(shape: dict[str, Any]) -> str:
    if shape["mean_requests_per_s"] is None:
        return "load: every request arrives at once"
    busiest = [(BUSIEST_WINDOWS[k][1], v) for k, v in reversed(shape["busiest_prompt_tokens_over_mean"].items())]
    line = (
        f"load: {shape['mean_requests_per_s']:.3g} requests/s, {shape['mean_prompt_tokens_per_s']:,.0f} prompt "
        "tokens/s on average"
    )
    if busiest:
        ratios = _series([f"{v:.3g}" for _, v in busiest])
        verb = "carries" if len(busiest) == 1 else "carry"
        line += f"; the busiest {_series([n for n, _ in busiest])} {verb} {ratios} times that"
    gap = shape["least_arrival_gap_s"]
    if "1s" in shape["busiest_prompt_tokens_over_mean"] and gap is not None and gap >= 1:
        line += f" (arrivals are stamped {gap:g} s apart or more: the second's figure is one stamp's)"
    return line


def _series(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _fmt(value: Any, digits: int = 2) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _meets(result: dict[str, Any], target: float) -> bool:
    """``RunResult.meets`` for a result of the JSON report."""
    return bool(result["slo_attainment"] >= target)


def table(data: dict[str, Any]) -> str:
    target = data["model"]["slo_target"]
    header = ["policy", "gpu_hours", "slo", "meets", "ttft_p50", "ttft_p99", "wait_p99", "events", "max_rep", "tuned"]
    rows = [header]
    for r in data["results"]:
        meets = "bound" if r.get("lower_bound") else ("yes" if _meets(r, target) else "no")
        tuned = ",".join(f"{k}={v}" for k, v in (r.get("tuned") or {}).items())
        name = r["policy"] + (
            f" ({data['model']['static_best_replicas']})"
            if r["policy"] == "static-best" and data["model"]["static_best_replicas"]
            else ""
        )
        rows.append(
            [
                name,
                _fmt(r["gpu_hours"]),
                _fmt(floor_to(r["slo_attainment"], 4), 4),
                meets,
                _fmt(r["ttft_p50_s"]),
                _fmt(r["ttft_p99_s"]),
                _fmt(r["queue_wait_p99_s"]),
                _fmt(r["scale_events"]),
                _fmt(r["max_replicas"]),
                tuned or "-",
            ]
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    m = data["model"]
    title = (
        f"{data['trace']}: {data['requests']} requests over {data['duration_s'] / 3600:.2f} h; "
        f"SLO: TTFT beyond own prefill <= {m['slo_ttft_s']} s for {percent(m['slo_target'])} of requests; "
        f"cold start {m['cold_start_s']:.0f} s; replicas {m['min_replicas']}-{m['max_replicas']}"
    )
    zero = zero_lines(data)
    body = "\n".join(lines)
    return title + "\n" + load_line(data["load"]) + "\n" + body + "\n" + verdict(data) + floor_line(data) + zero


def zero_lines(data: dict[str, Any]) -> str:
    """For each run whose fleet went to zero: the time it spent there, the GPU-hours against the fixed
    fleet, and what the requests that arrived at zero waited for a first token (a cold start, about)."""
    runs = {r["policy"]: r for r in data["results"]}
    static = runs.get("static-best")
    out = []
    for r in data["results"]:
        zero = r.get("zero")
        if not zero:
            continue
        line = (
            f"{r['policy']} at zero {zero['seconds_at_zero'] / max(data['duration_s'], 1e-9):.0%} of the time, "
            f"woke {zero['wakes']} time{'s' if zero['wakes'] != 1 else ''}"
        )
        if static is not None and static["gpu_hours"] > 0:
            line += f", {r['gpu_hours']:.2f} GPU-h against static-best's {static['gpu_hours']:.2f}"
        if zero["woken_requests"]:
            line += (
                f"; the {zero['woken_requests']} requests that arrived while it woke waited "
                f"{_fmt(zero['wake_ttft_p50_s'], 0)} s (median), {_fmt(zero['wake_ttft_max_s'], 0)} s at most, "
                "for a first token"
            )
        out.append("scale to zero: " + line)
    return "".join("\n" + line for line in out)


def percent(fraction: float) -> str:
    """A target as a percentage, to the digit it has: 99%, 99.5%, 99.9% (never a 99.5% target as 100%)."""
    return f"{fraction * 100:g}%"


def percent_of(fraction: float) -> str:
    """A measured share as a percentage: 65%, 0.6%."""
    return f"{fraction * 100:.2g}%"


def verdict(data: dict[str, Any]) -> str:
    """The table's answer in one line: the cheapest run that meets the SLO target, against the best fixed
    fleet (the question a user asks before trusting a policy with a GPU fleet). Over 60 lines: one branch per
    case the line must name (no run meets, a policy wins, only a baseline meets, every policy missed), each
    tested in tests/test_report.py."""
    target = data["model"]["slo_target"]
    runs = [r for r in data["results"] if not r.get("lower_bound") and r["policy"] not in FOLLOWERS]
    meeting = [r for r in runs if _meets(r, target)]
    if not meeting:
        most = data["model"]["max_replicas"]
        line = f"verdict: no run meets the SLO target ({percent(target)}), not even {most} fixed replicas"
        bound = next((r for r in data["results"] if r.get("lower_bound")), None)
        if bound is not None and bound.get("max_replicas", 0) > most:
            line += (
                f"; the oracle's busiest minute takes {bound['max_replicas']}, more than maxReplicas: raise it "
                "(--config) or the replica's throughput (--replica)"
            )
        elif bound is not None:
            line += f"; the oracle's {bound['max_replicas']} at the busiest minute is a lower bound"
            if "prefix_reuse" in data:
                # The bound's shared, unbounded cache is what the fleet is furthest from when prompts outgrow
                # each replica's cache (the Mooncake trace on the built-in replica: 65 % against under 1 %).
                hits = max((r.get("prefix_cache_hits", 0.0) for r in runs), default=0.0)
                line += (
                    f" that finds every repeated prompt prefix cached ({percent_of(data['prefix_reuse'])} of "
                    f"the prompt tokens; the fleet's caches served at most {percent_of(hits)})"
                )
            line += ": raise maxReplicas (--config) or the replica's capacity (--replica)"
        return line
    static = next(r for r in runs if r["policy"] == "static-best")
    if static["gpu_hours"] <= 0:
        return "verdict: the trace spans no time, so every run costs nothing"
    zeroed = [r for r in runs if r.get("zero")]
    if data["model"].get("min_replicas") == 0 and zeroed:
        best = min(zeroed, key=lambda r: r["gpu_hours"])
        return (
            f"verdict: going to zero, {best['policy']} cost {best['gpu_hours']:.2f} GPU-h, "
            f"{1.0 - best['gpu_hours'] / static['gpu_hours']:.0%} under static-best's {static['gpu_hours']:.2f}; "
            f"the requests that arrived at zero waited a cold start, so it met the SLO for "
            f"{floor_to(best['slo_attainment'], 4):.2%} of requests: zero is for models whose first requests can wait"
        )
    least = min(r["gpu_hours"] for r in meeting)
    cheapest = [r for r in meeting if r["gpu_hours"] == least]
    if static in cheapest:
        fixed = data["model"]["static_best_replicas"]
        if fixed == data["model"].get("min_replicas"):
            # No policy can hold fewer replicas than the floor, so a tie is the best any can do: tuning
            # cannot help, and only the floor decides the cost.
            return (
                f"verdict: cheapest at the SLO is static-best, {least:.2f} GPU-h ({fixed} fixed replicas, the "
                "workload's minReplicas): the load never needs more than the floor, so no policy can cost less "
                "unless minReplicas is lowered (--config)"
            )
        line = f"verdict: cheapest at the SLO is static-best, {least:.2f} GPU-h ({fixed} fixed replicas)"
        tuned = any(r.get("tuned") for r in runs)
        policies = [r for r in runs if r["policy"] not in BASELINES]
        matched = [r["policy"] for r in cheapest if r in policies]  # a plan that holds the fixed fleet ties it
        line += f", matched by {_series(matched)}: " if matched else ": "
        if policies and not any(_meets(r, target) for r in policies):
            # Costing more and missing call for different things: a miss where a fixed fleet meets is the
            # load outrunning what the signals show (docs/decisions/baselines.md), and the fleet that
            # meets it is the fixed one, which a user can hold with the floor.
            line += "every policy missed the SLO" + (", tuned too" if tuned else " with the settings given")
            if not tuned:
                line += "; --tune finds the cheapest setting of each that meets it, if any does"
            return line + f"; minReplicas {fixed} holds the fixed fleet that does"
        line += "no policy beat a fixed fleet here"
        if not tuned:
            # The defaults are sized for bursty traffic; on steadier traffic a tuned policy may still win.
            line += " with the settings given; --tune finds each policy's cheapest setting for this traffic"
        return line
    names = [r["policy"] for r in cheapest]
    line = f"verdict: cheapest at the SLO {'is' if len(names) == 1 else 'are'} {_series(names)}, {least:.2f} GPU-h"
    if static not in meeting:
        return line + f"; no fixed fleet of up to {data['model']['max_replicas']} replicas meets it"
    return line + f", {1.0 - least / static['gpu_hours']:.1%} under static-best's {static['gpu_hours']:.2f}"


def plot(path: str | Path, comparison: Comparison) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig = plt.figure(figsize=(12, 13))
    grid = fig.add_gridspec(4, 1, height_ratios=[1, 1, 1, 1.3])
    load = fig.add_subplot(grid[0])
    reps = fig.add_subplot(grid[1], sharex=load)
    ttft = fig.add_subplot(grid[2], sharex=load)
    _cost_against_attainment(fig.add_subplot(grid[3]), comparison)
    first = comparison.results[0].timeline
    minutes = [t / 60 for t in first.get("t", [])]
    load.plot(minutes, first.get("arrivals", []), color="grey")
    load.set_ylabel("arrivals / s")
    load.set_title(f"{comparison.trace.name}: load, replicas and time to first token by policy")
    for result in comparison.results:
        series = result.timeline
        if not series:
            continue
        t = [x / 60 for x in series["t"]]
        reps.step(t, series["replicas"], where="post", label=result.policy)
        # What the SLO judges, by arrival; a request never served counts as the longest a run waits for it.
        p90 = [min(v, PLOT_CEILING_S) for v in series["ttft_beyond_prefill_p90"]]
        ttft.step(t, p90, where="post", label=result.policy, alpha=0.8)
    reps.set_ylabel("replicas (existing)")
    reps.legend(fontsize="small", ncol=3)
    ttft.set_ylabel("TTFT beyond own\nprefill, p90 (s)")
    ttft.set_yscale("symlog", linthresh=1.0)
    ttft.axhline(comparison.slo_ttft, color="red", linestyle=":", linewidth=1, label="SLO")
    ttft.set_xlabel("minutes")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _cost_against_attainment(ax: Any, comparison: Comparison) -> None:
    """One point per policy: GPU-hours against SLO attainment, the target drawn, static-best (a square), the
    reactive follower (a triangle: what no forecast could beat), the clairvoyant (a diamond: the floor a
    forecast could reach) and the oracle's cost (a lower bound, not a
    policy) marked, so the cheapest policy that meets the SLO is the lowest point right of the line."""
    baseline_marks = {"static-best": ("s", "black"), "reactive": ("v", "dimgrey"), "clairvoyant": ("D", "dimgrey")}
    for result in comparison.results:
        if result.policy.startswith("oracle") or result.abandoned:
            continue
        marker, color = baseline_marks.get(result.policy, ("o", None))
        ax.scatter(result.slo_attainment, result.gpu_hours, marker=marker, s=60, color=color, zorder=3)
        ax.annotate(
            result.policy,
            (result.slo_attainment, result.gpu_hours),
            textcoords="offset points",
            xytext=(6, 4),
            fontsize="small",
        )
    if comparison.oracle_gpu_hours:
        ax.axhline(comparison.oracle_gpu_hours, color="grey", linestyle="--", linewidth=1)
        ax.annotate(
            "oracle (lower bound)",
            (ax.get_xlim()[0], comparison.oracle_gpu_hours),
            xytext=(4, 4),
            textcoords="offset points",
            fontsize="small",
            color="grey",
        )
    ax.axvline(comparison.slo_target, color="red", linestyle=":", linewidth=1)
    ax.set_xlabel(
        f"SLO attainment (share of requests within {comparison.slo_ttft:g} s; target {comparison.slo_target:g})"
    )
    ax.set_ylabel("GPU-hours")
    ax.grid(alpha=0.3)


def dump(path: str | Path, data: dict[str, Any]) -> None:
    Path(path).write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
