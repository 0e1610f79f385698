"""The simulator's speed on two days of traffic: ``vllm-autoscaler simulate`` on about 855,000 requests, every
policy and baseline, the built-in workload given only an SLO (its targets sized by a load test), timed as a
user runs it; written to ``docs/results/DATE-simulate-speed.md``.

    python lab/speed.py [--runs 3] [--date YYYY-MM-DD]

The traffic: the first two days of ``../shared/traces/servegen_m-mid_rate_600s.csv`` (ServeGen's recorded
request rate, ten-minute windows), scaled to about 855,000 requests, lengths drawn from the Azure
conversation trace, on the built-in replica with a 24-sequence batch.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT.parent / "shared" / "traces"
TARGET_S = 90.0
COMMAND = [
    "simulate",
    "--trace",
    str(TRACES / "servegen_m-mid_rate_600s.csv"),
    "--format",
    "rate",
    "--window",
    ":2d",
    "--rate-scale",
    "0.00385",
    "--lengths-from",
    str(TRACES / "azure_llm_2023_conv.csv"),
    "--replica",
    "max_num_seqs=24",
    "-o",
    "json",
]


def _cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def host_probe() -> float:
    """Seconds of a fixed loop of the interpreter, the best of three: how fast the host is while it measures (a
    shared host's speed moves by a fifth or more from one hour to the next), to compare reports of other days."""
    best = math.inf
    for _ in range(3):
        started = time.perf_counter()
        sum(i * i for i in range(10_000_000))
        best = min(best, time.perf_counter() - started)
    return best


WARM = [sys.executable, "-c", "from simulations.fleet import warm; warm()"]


def first_compile() -> float:
    """Seconds to compile the simulator with an empty numba cache, what the first run after an install adds once;
    then the cache the runs use is filled, so that they measure the simulation, not the compiling."""
    with tempfile.TemporaryDirectory() as cache:
        started = time.perf_counter()
        subprocess.run(WARM, check=True, cwd=ROOT, env={**os.environ, "NUMBA_CACHE_DIR": cache})
        seconds = time.perf_counter() - started
    subprocess.run(WARM, check=True, cwd=ROOT)
    return seconds


def one_run() -> tuple[float, float, str]:
    """Wall seconds, peak RSS (MiB) of the largest process, and the report's first lines."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "autoscaler", *COMMAND], capture_output=True, text=True, check=False, cwd=ROOT
    )
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"simulate exited {done.returncode}: {done.stderr.strip()[-500:]}")
    peak = max(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, before) / 1024
    return wall, peak, done.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--date", default=datetime.date.today().isoformat())
    args = parser.parse_args()
    walls, peaks = [], []
    reports: list[dict[str, object]] = []
    probes = [host_probe()]
    compiling = first_compile()
    for i in range(args.runs):
        wall, peak, out = one_run()
        walls.append(wall)
        peaks.append(peak)
        reports.append(json.loads(out))
        print(f"run {i + 1}: {wall:.1f} s, peak {peak:.0f} MiB", file=sys.stderr)
    probes.append(host_probe())
    report = reports[-1]
    same = all(r["results"] == report["results"] for r in reports)
    median = statistics.median(walls)
    results = report["results"]
    assert isinstance(results, list)
    rows = "\n".join(
        f"| {r['policy']} | {r['gpu_hours']:,.1f} | {r['slo_attainment']:.4f} | {r['max_replicas']} |" for r in results
    )
    shown = " ".join(c if not c.startswith("/") else os.path.relpath(c, ROOT) for c in COMMAND)
    text = f"""# The simulator's speed on two days of traffic ({args.date})

Written by `python lab/speed.py`. One whole `vllm-autoscaler simulate` process a run, as a user starts it
(trace reading, the load test that sizes the built-in targets, the fixed fleet's search, every policy and
baseline), on {os.cpu_count()} cores ({_cpu()}), Python {platform.python_version()}:

    vllm-autoscaler {shown}

{report["requests"]:,} requests over two days (ServeGen's recorded rate, scaled; Azure conversation lengths), the
built-in replica with a 24-sequence batch, the built-in workload given only an SLO.

| | wall seconds | peak RSS of one process, MiB |
|---|---|---|
| median of {args.runs} | {median:.1f} | {statistics.median(peaks):.0f} |
| min / max | {min(walls):.1f} / {max(walls):.1f} | {min(peaks):.0f} / {max(peaks):.0f} |

The first run after an install also compiles the simulator (numba, an empty cache): {compiling:.1f} s, once; the
runs above load it from the cache.

The host's speed, a fixed loop of the interpreter (`host_probe`) before and after the runs: {probes[0]:.3f} and
{probes[1]:.3f} s.

Target: {TARGET_S:.0f} s. {"Met." if median <= TARGET_S else f"Not met: {median / TARGET_S:.2f} times the target."}

What the runs found ({"the same in every run" if same else "the last run's; the runs differed"}):

| policy | GPU-hours | SLO attainment | most replicas |
|---|---|---|---|
{rows}
"""
    path = ROOT / "docs" / "results" / f"{args.date}-simulate-speed.md"
    path.write_text(text)
    print(f"wrote {path.relative_to(ROOT)}", file=sys.stderr)


if __name__ == "__main__":
    main()
