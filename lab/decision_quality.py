"""What the default ``predictive`` costs on the simulated replica, beside the baselines, on recorded traffic:
``vllm-autoscaler simulate --policy predictive``, untuned, the built-in workload given only an SLO; written to
``docs/results/DATE-decision-quality.md``.

    python lab/decision_quality.py [--date YYYY-MM-DD]

Eight cases of the kinds the policy is judged on (replica batch sizes as in the case): two diurnal days, three
days of ServeGen's recorded rates (``--rate-scale``, lengths from the Azure conversation trace), the flat
recorded hour of the Azure conversation trace, two more recorded days on a faster replica with a 600 s cold start,
two on a large replica with a 60 s cold start, and the hour on a small replica and on one of much KV cache; a day of
recorded rates replayed in an hour (``--time-scale 24``: load that moves fast against the cold start); and the
generator's built-in day of surges as a stress row that decides nothing. GPU-hours at SLO attainment; static-best
is the cheapest
fixed fleet that meets the SLO in hindsight, reactive a follower told the load of the minute past exactly and
clairvoyant one that knows the load to come, each at the cheapest utilization that meets the SLO in hindsight.

A second table holds ten more cases (``MORE_CASES``): other windows and rate scales, SLOs of 1.5 s, 3 s for 99.5 %
and 2 s for 95 %, cold starts of 120, 180, 240 and 900 s, days replayed at 6, 12 and 24 times their speed, the hour
at twice its speed, two days on a small replica, the Mooncake trace, and the hour re-timed into stretches at 2.5 and
0.6 times its speed (written to a temporary file). A third runs the recorded windows of both
with the policy ``simulate`` planned on the window beside them (``PLANNED_ON``), as a user deploys what a recording
planned onto the traffic that follows it, beside the other plan a recording allows: the fewest fixed replicas that
met the SLO over that window, run on the traffic after it. About fifty minutes in all on two cores.
"""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT.parent / "shared" / "traces"
RATES = ["--trace", str(TRACES / "servegen_m-mid_rate_600s.csv"), "--format", "rate"]
LENGTHS = ["--lengths-from", str(TRACES / "azure_llm_2023_conv.csv")]
FASTER = ["--replica", "prefill_tokens_per_s=4000", "--replica", "kv_cache_tokens=300000", "--cold-start", "600"]
LARGE = ["--replica", "prefill_tokens_per_s=20000", "--replica", "kv_cache_tokens=600000"]
HOUR = ["--trace", str(TRACES / "azure_llm_2023_conv.csv")]
CASES = (
    ("two diurnal days (24-sequence batch)", [*RATES, "--window", ":2d", "--rate-scale", "0.00385", *LENGTHS], 24),
    (
        "three recorded days of rates, its second week (64-sequence batch)",
        [*RATES, "--window", "7d:10d", "--rate-scale", "0.002", *LENGTHS],
        64,
    ),
    ("a flat conversation hour (128-sequence batch)", HOUR, 128),
    (
        "two recorded days of rates, days 3 to 5, a faster replica (128-sequence batch, 4,000 prompt tokens/s, "
        "300,000 KV tokens) and a 600 s cold start",
        [*RATES, "--window", "3d:5d", "--rate-scale", "0.004", *LENGTHS, *FASTER],
        128,
    ),
    (
        "two recorded days of rates, days 11 to 13, a large replica (256-sequence batch, 20,000 prompt tokens/s, "
        "600,000 KV tokens) and a 60 s cold start",
        [*RATES, "--window", "11d:13d", "--rate-scale", "0.009", *LENGTHS, *LARGE, "--cold-start", "60"],
        256,
    ),
    (
        "the conversation hour on a small replica (16-sequence batch, 2,000 prompt tokens/s)",
        [*HOUR, "--replica", "prefill_tokens_per_s=2000"],
        16,
    ),
    (
        "the conversation hour on a replica of much KV cache (256-sequence batch, 2,000 prompt tokens/s, 600,000 KV "
        "tokens) and a 60 s cold start",
        [*HOUR, "--replica", "prefill_tokens_per_s=2000", "--replica", "kv_cache_tokens=600000", "--cold-start", "60"],
        256,
    ),
)
# Recorded rates replayed fast: a day of them in an hour, so the load moves 24 times as fast against the cold start
# (judged, as the seven are).
FAST: tuple[tuple[str, list[str], int], ...] = (
    (
        "a recorded day of rates replayed in an hour, its second day at 24 times the speed (24-sequence batch)",
        [*RATES, "--window", "1d:2d", "--rate-scale", "0.00016", "--time-scale", "24", *LENGTHS],
        24,
    ),
)
# More cases: other windows, SLOs, targets, cold starts and speeds, and another trace, reported apart.
FAST_LONG_START = [
    "--replica",
    "prefill_tokens_per_s=8000",
    "--replica",
    "kv_cache_tokens=200000",
    "--cold-start",
    "900",
]
SLO_3S = ["--slo-ttft", "3", "--slo-target", "0.995"]
SMALL_SLOW_START = ["--replica", "prefill_tokens_per_s=2000", "--cold-start", "240"]
MOONCAKE = ["--trace", str(TRACES / "mooncake_synthetic.jsonl")]
MORE_CASES: tuple[tuple[str, list[str], int], ...] = (
    (
        "two recorded days of rates, days 5 to 7, at a 1.5 s SLO and a 180 s cold start (48-sequence batch)",
        [*RATES, "--window", "5d:7d", "--rate-scale", "0.003", *LENGTHS, "--cold-start", "180", "--slo-ttft", "1.5"],
        48,
    ),
    (
        "a recorded day of rates replayed in two hours, day 9 at 12 times the speed (32-sequence batch)",
        [*RATES, "--window", "9d:10d", "--rate-scale", "0.0004", "--time-scale", "12", *LENGTHS],
        32,
    ),
    (
        "the conversation hour at a 95 % target and a 120 s cold start (64-sequence batch)",
        [*HOUR, "--cold-start", "120", "--slo-target", "0.95"],
        64,
    ),
    ("the conversation hour replayed in half an hour (128-sequence batch)", [*HOUR, "--time-scale", "2"], 128),
    (
        "two recorded days of rates, days 12 to 14, a fast replica (256-sequence batch, 8,000 prompt tokens/s, "
        "200,000 KV tokens) and a 900 s cold start",
        [*RATES, "--window", "12d:14d", "--rate-scale", "0.004", *LENGTHS, *FAST_LONG_START],
        256,
    ),
    ("the Mooncake trace, 17 minutes of long prompts (64-sequence batch)", MOONCAKE, 64),
    (
        "a recorded day of rates replayed in an hour, day 2 at 24 times the speed, at a 3 s SLO for 99.5 % "
        "(24-sequence batch)",
        [*RATES, "--window", "2d:3d", "--rate-scale", "0.00016", "--time-scale", "24", *LENGTHS, *SLO_3S],
        24,
    ),
    (
        "a recorded day of rates replayed in four hours, its first day at 6 times the speed (64-sequence batch)",
        [*RATES, "--window", "0d:1d", "--rate-scale", "0.0006", "--time-scale", "6", *LENGTHS],
        64,
    ),
    (
        "two recorded days of rates, days 8 to 10, a small replica (16-sequence batch, 2,000 prompt tokens/s) and a "
        "240 s cold start",
        [*RATES, "--window", "8d:10d", "--rate-scale", "0.002", *LENGTHS, *SMALL_SLOW_START],
        16,
    ),
)
# The conversation hour made burstier: its requests as recorded, re-timed into six-minute stretches of its own time
# played alternately at 2.5 and 0.6 times its speed (``write_stretched_hour``, into a temporary file at the run).
STRETCHED = Path(tempfile.gettempdir()) / "vllm-autoscaler-lab" / "conversation-hour-in-stretches.csv"
STRETCH_S, STRETCH_SPEEDS = 360.0, (2.5, 0.6)
MORE_CASES += (
    (
        "the conversation hour in six-minute stretches at 2.5 and 0.6 times its speed, a 240 s cold start "
        "(48-sequence batch)",
        ["--trace", str(STRETCHED), "--cold-start", "240"],
        48,
    ),
)
# The window each recorded case's policy is planned on in the third table: the one before it, or after the first.
PLANNED_ON = {":2d": "2d:4d", "7d:10d": "4d:7d", "3d:5d": "1d:3d", "11d:13d": "9d:11d", "1d:2d": "0d:1d"}
PLANNED_ON |= {"5d:7d": "3d:5d", "9d:10d": "8d:9d", "12d:14d": "10d:12d", "2d:3d": "1d:2d", "0d:1d": "1d:2d"}
PLANNED_ON |= {"8d:10d": "6d:8d"}
# The generator's built-in day of surges: a stress test, reported, deciding nothing (docs/decisions/builtin-sizing.md).
STRESS: tuple[tuple[str, list[str], int], ...] = (
    ("the built-in synthetic day of surges (stress: decides nothing)", [], 256),
)
SHOWN = ("predictive", "keda-sum", "static-best", "reactive", "clairvoyant")


def simulate(args: list[str], batch: int) -> dict[str, object]:
    command = [sys.executable, "-m", "autoscaler", "simulate", *args, "--replica", f"max_num_seqs={batch}"]
    done = subprocess.run([*command, "--policy", "predictive", "-o", "json"], capture_output=True, text=True, cwd=ROOT)
    if done.returncode != 0:
        raise SystemExit(f"simulate exited {done.returncode}: {done.stderr.strip()[-500:]}")
    report: dict[str, object] = json.loads(done.stdout)
    return report


def case_request(case: list[str], batch: int) -> Any:
    """The ``SimulationRequest`` of ``simulate`` run on ``case`` with its batch, as this lab parses it."""
    from autoscaler.cli import build_parser
    from autoscaler.cli.simulate import simulation_request

    parsed = build_parser().parse_args(["simulate", *case, "--replica", f"max_num_seqs={batch}", "-q"])
    return simulation_request(parsed, None)


def planned_window(case: list[str]) -> str:
    """The window ``PLANNED_ON`` names for ``case``'s: the recording its plan is made on in the third table."""
    return PLANNED_ON[case[case.index("--window") + 1]]


def planned_on(case: list[str]) -> list[str]:
    """``case`` with its ``--window`` the one its plan is made on (``planned_window``)."""
    window = case.index("--window") + 1
    return [*case[:window], planned_window(case), *case[window + 1 :]]


def planned_elsewhere(case: list[str], batch: int) -> tuple[dict[str, object], tuple[int, dict[str, Any]]]:
    """``simulate``'s report of the case run with the policy it plans on the window ``PLANNED_ON`` names for it
    (what ``--write-config`` writes from that window, run with ``--config``), and beside it the other plan a
    recording allows: the fewest fixed replicas that meet the SLO over that window, run here (``recorded_fleet``)."""
    from simulations.request import resolve
    from simulations.request import simulate as simulated
    from simulations.sizing import fixed_run

    elsewhere = case_request(planned_on(case), batch)
    ttft, target = elsewhere.slo()
    recorded_model, recorded_trace, document, _ = resolve(elsewhere, ttft, target)
    fleet = recorded_fleet(recorded_trace, recorded_model, ttft, target)
    done = simulated(replace(case_request(case, batch), document=document, slo_ttft=ttft, slo_target=target))
    fixed = fixed_run(done.comparison.trace, done.comparison.model, fleet, ttft)  # the window simulate read
    return done.report, (fleet, {"gpu_hours": fixed.gpu_hours, "slo_attainment": fixed.slo_attainment})


def recorded_fleet(trace: Any, model: Any, ttft: float, target: float) -> int:
    """The fewest fixed replicas that meet the SLO over ``trace``, as static-best is found: from the oracle's busiest
    window up, a quarter more each try until one meets it, then a bisection below that (``fewest_fixed_from``)."""
    from simulations.oracle import oracle_bound
    from simulations.sizing import fewest_fixed_from

    least = max(1, oracle_bound(trace, model, 0, ttft, target).busiest_fleet)
    found = fewest_fixed_from(trace, model, least, ttft, target)
    assert found is not None
    return found


def target_of(case: list[str]) -> float:
    """The SLO target a case is run at: its ``--slo-target``, else the built-in 99 %."""
    return float(case[case.index("--slo-target") + 1]) if "--slo-target" in case else 0.99


def figures(run: dict[str, Any]) -> str:
    return f"{run['gpu_hours']:,.1f} @ {run['slo_attainment']:.4f}"


def cell(run: dict[str, Any]) -> str:
    return f"{figures(run)}, up to {run['max_replicas']}"


def table(cases: tuple[tuple[str, list[str], int], ...]) -> tuple[list[str], list[tuple[float, bool]]]:
    """A row a case, and each case's predictive over static-best with whether predictive missed its target."""
    rows, ratios = [], []
    for title, case, batch in cases:
        report = simulate(case, batch)
        runs = {r["policy"]: r for r in report["results"]}  # type: ignore[attr-defined]
        ratio = runs["predictive"]["gpu_hours"] / runs["static-best"]["gpu_hours"]
        met = "" if runs["predictive"]["slo_attainment"] >= target_of(case) else " (misses)"
        ratios.append((ratio, bool(met)))
        cells = " | ".join(cell(runs[name]) for name in SHOWN)
        rows.append(f"| {title}, {report['requests']:,} requests | {cells} | {ratio:.2f}{met} |")
        print(rows[-1], file=sys.stderr)
    return rows, ratios


def moved_table(
    cases: tuple[tuple[str, list[str], int], ...],
) -> tuple[list[str], list[tuple[float, bool]], list[tuple[float, bool]]]:
    """A row a recorded case, planned on the window beside it (``planned_elsewhere``): predictive and the recording's
    fixed fleet, each over static-best with whether it missed the case's target."""
    rows: list[str] = []
    ratios: list[tuple[float, bool]] = []
    fixed_ratios: list[tuple[float, bool]] = []
    for title, case, batch in cases:
        report, (fleet, fixed) = planned_elsewhere(case, batch)
        runs = {r["policy"]: r for r in report["results"]}  # type: ignore[attr-defined]
        best = runs["static-best"]["gpu_hours"]
        marks = []
        for run, into in ((runs["predictive"], ratios), (fixed, fixed_ratios)):
            missed = run["slo_attainment"] < target_of(case)
            into.append((run["gpu_hours"] / best, missed))
            marks.append(f"{run['gpu_hours'] / best:.2f}{' (misses)' if missed else ''}")
        rows.append(
            f"| {title}, planned on {planned_window(case)}, {report['requests']:,} requests | "
            f"{cell(runs['predictive'])} | {fleet} replicas, {figures(fixed)} | {cell(runs['static-best'])} | "
            f"{' | '.join(marks)} |"
        )
        print(rows[-1], file=sys.stderr)
    return rows, ratios, fixed_ratios


HEADER = """| traffic | predictive | keda-sum | static-best | reactive | clairvoyant | predictive / static-best |
|---|---|---|---|---|---|---|"""
MOVED_HEADER = (
    "| traffic | predictive | the recording's fixed fleet | static-best | predictive / static-best "
    "| fixed / static-best |\n|---|---|---|---|---|---|"
)


def write_stretched_hour(source: Path, path: Path) -> None:
    """``source``, a trace in the Azure format, re-timed into ``STRETCH_S`` stretches of its own time played
    alternately at ``STRETCH_SPEEDS`` times its speed: its requests and their order as recorded, their load burstier."""
    import numpy as np

    from simulations.traces import read_azure, write_azure

    trace = read_azure(source)
    fast, slow = STRETCH_SPEEDS
    whole = np.floor(trace.arrival_s / STRETCH_S)  # the stretches before each request's: the even ones fast
    played = np.ceil(whole / 2) * STRETCH_S / fast + np.floor(whole / 2) * STRETCH_S / slow
    played += (trace.arrival_s - whole * STRETCH_S) / np.where(whole % 2 == 0, fast, slow)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_azure(replace(trace, arrival_s=played), path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--date", default=datetime.date.today().isoformat())
    args = parser.parse_args()
    write_stretched_hour(TRACES / "azure_llm_2023_conv.csv", STRETCHED)
    rows, ratios = table((*CASES, *FAST))
    stress, _ = table(STRESS)
    more, more_ratios = table(MORE_CASES)
    windowed = tuple(c for c in (*CASES, *FAST, *MORE_CASES) if "--window" in c[1])
    moved, moved_ratios, fixed_ratios = moved_table(windowed)
    text = f"""# The default predictive on recorded traffic, on the simulated replica ({args.date})

Written by `python lab/decision_quality.py`: `vllm-autoscaler simulate --policy predictive`, untuned, the
built-in workload given only an SLO (TTFT beyond the request's own prefill within 2 s for 99 %), cold start
300 s unless the case says, on the built-in replica with the batch size (and changes) of each case. GPU-hours @
SLO attainment, and the most
replicas a run held; static-best is the cheapest fixed fleet that meets the SLO in hindsight, reactive the
follower told the load of the minute past exactly (what no rule without a forecast beats), clairvoyant the one
that knows the load to come, both tuned in hindsight.

{HEADER}
{chr(10).join([*rows, *stress])}

Worst case over the {len(ratios)} recorded ones: {max(r for r, _ in ratios):.2f} times static-best; the SLO missed in
{sum(m for _, m in ratios)} of them.

## More cases

Other windows, rate scales, SLOs and targets (each row's own, 2 s for 99 % unless it says), cold starts and speeds,
the Mooncake trace, and the conversation hour made burstier. Static-best is the bar; where even the followers tuned
in hindsight cost more than it, nothing could be won by following.

{HEADER}
{chr(10).join(more)}

Worst case over these {len(more_ratios)}: {max(r for r, _ in more_ratios):.2f} times static-best; the SLO missed in
{sum(m for _, m in more_ratios)} of them.

## Planned on another window

The recorded windows of both tables, predictive run as `simulate` planned it on the window the row names (the one
before, or after the first): what `--write-config` writes from a recording, deployed on the traffic after it. Beside
it, the other plan a recording allows: the fewest fixed replicas that met the SLO over the same window (its
static-best), run on the traffic after it. The keda-sum, reactive and clairvoyant runs are the rows above.

{MOVED_HEADER}
{chr(10).join(moved)}

Worst case over these {len(moved_ratios)}: {max(r for r, _ in moved_ratios):.2f} times static-best; the SLO missed in
{sum(m for _, m in moved_ratios)} of them. The recording's fixed fleet: {max(r for r, _ in fixed_ratios):.2f} at worst;
the SLO missed in {sum(m for _, m in fixed_ratios)}.
"""
    out = ROOT / "docs" / "results" / f"{args.date}-decision-quality.md"
    out.write_text(text)
    print(f"wrote {out.relative_to(ROOT)}", file=sys.stderr)


if __name__ == "__main__":
    main()
