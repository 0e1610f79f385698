"""The replica-fidelity report: each published sweep in ``lab/sweeps/`` calibrated on its light and mid-load
runs, as ``vllm-autoscaler calibrate`` fits them, and its heavy runs predicted; written to
``docs/results/DATE-replica-fidelity.md``. A run's load is its concurrency limit (``--max-concurrency``), or
for a burst without one the requests it sent at once.

    python lab/fidelity.py [--date YYYY-MM-DD]

The bands are those a fit must hold to: up to about twice the knee, request throughput within 15 % and median
TPOT within 25 %; far past it, throughput within 25 %, median TPOT and p99 TTFT within 35 %.
"""

from __future__ import annotations

import argparse
import datetime
import time
from dataclasses import dataclass
from pathlib import Path

from simulations.calibration import BenchRun, fit, load_run, simulate_run, with_step_costs
from simulations.replica_model import ReplicaModel

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Sweep:
    folder: str
    title: str
    kv_cache_tokens: float
    fit_up_to: int  # runs of up to this load are the light and mid load the fit sees
    near_up_to: int  # runs of up to this load are "up to about twice the knee"
    max_num_batched_tokens: int = 2048
    max_num_seqs: int = 256
    gpus: int = 1
    # The prefill speed the source's heavy runs show once the server is hot, where it differs from the light
    # runs' (``lab/sweeps/README.md``): the report shows the fitted replica at that speed too, not counted.
    hot_prefill_tokens_per_s: float | None = None


SWEEPS = (
    Sweep(
        "qwen2-7b-a100-kv465k",
        "Qwen2-7B-Instruct, one A100 80GB, 464,848 KV tokens (compute-bound knee)",
        464_848,
        75,
        500,
    ),
    Sweep(
        "qwen2-7b-a100-kv94k", "Qwen2-7B-Instruct, one A100 80GB, about 93,800 KV tokens (KV-bound)", 93_792, 75, 100
    ),
    Sweep("qwen2.5-32b-2xa100-kv67k", "Qwen2.5-32B, two A100 80GB, about 67,300 KV tokens (KV-bound)", 67_338, 20, 50),
    Sweep(
        "devstral2-123b-4xrtxpro6000-kv1424k",
        "Devstral-2-123B (NVFP4), four RTX PRO 6000 at 250 W, about 1,423,900 KV tokens "
        "(prefill-bound, 16k-token prompts)",
        1_423_900,
        8,
        32,
        max_num_batched_tokens=65_536,
        max_num_seqs=128,
        gpus=4,
        hot_prefill_tokens_per_s=65_536 / 35.6,  # a full step past a minute of sustained prefill
    ),
)


def knee(runs: list[tuple[int, float]]) -> int:
    """The smallest load whose request throughput reaches 90 % of the sweep's largest."""
    top = max(throughput for _, throughput in runs)
    return min(n for n, throughput in runs if throughput >= 0.9 * top)


def band(near: bool, key: str) -> float:
    return {
        "request_throughput": 0.15 if near else 0.25,
        "median_tpot_ms": 0.25 if near else 0.35,
        "p99_ttft_ms": 0.35,
    }[key]


def section(sweep: Sweep) -> tuple[str, int, int]:
    files = sorted((ROOT / "lab" / "sweeps" / sweep.folder).glob("*.json"))
    runs: list[tuple[str, BenchRun]] = [(path.name, load_run(str(path))) for path in files]
    base = ReplicaModel(
        name=sweep.folder,
        kv_cache_tokens=sweep.kv_cache_tokens,
        max_num_batched_tokens=sweep.max_num_batched_tokens,
        max_num_seqs=sweep.max_num_seqs,
        gpus_per_replica=sweep.gpus,
    )
    started = time.monotonic()
    fitted = fit([(name, run) for name, run in runs if run.load <= sweep.fit_up_to], base)
    elapsed = time.monotonic() - started
    model = fitted.model
    lines = [
        f"### {sweep.title}",
        "",
        f"Files: `lab/sweeps/{sweep.folder}/`. Fitted on the runs of load up to {sweep.fit_up_to} in "
        f"{elapsed:.0f} s: prefill {model.prefill_tokens_per_s:,.0f} tokens/s, decode {model.decode_tokens_per_s:.1f} "
        f"tokens/s alone, KV read {model.kv_read_s_per_token * 1e9:.1f} ns a token, overhead "
        f"{model.request_overhead_s * 1e3:.0f} ms.",
        "",
    ]
    lines += [f"- warning: {warning}" for warning in fitted.warnings]
    table, passed, checked, simulated_runs = rows(model, runs, sweep)
    measured_knee = knee([(run.load, run.request_throughput) for _, run in runs])
    lines += [
        "",
        *table,
        "",
        f"Knee (the smallest load at 90 % of the sweep's top request throughput): measured at {measured_knee}, "
        f"simulated at {knee(simulated_runs)}. A figure marked `.` is shown, not judged. Heavy runs in band: "
        f"{passed} of {checked}.",
        "",
    ]
    if sweep.hot_prefill_tokens_per_s:
        hot_p = sweep.hot_prefill_tokens_per_s
        hot = with_step_costs(
            model, model.weight_read_s, 1.0 / hot_p, model.kv_read_s_per_token, model.request_overhead_s
        )
        table, hot_passed, _, _ = rows(hot, runs, sweep)
        lines += [
            f"The same replica with only its prefill at the speed the source's hot steps show ({hot_p:,.0f} tokens/s, "
            "the weight read kept; `lab/sweeps/README.md`), not counted above:",
            "",
            *table,
            "",
            f"Heavy runs in band at that speed: {hot_passed} of {checked}.",
            "",
        ]
    return "\n".join(lines), passed, checked


def rows(
    model: ReplicaModel, runs: list[tuple[str, BenchRun]], sweep: Sweep
) -> tuple[list[str], int, int, list[tuple[int, float]]]:
    """The table of ``runs`` measured beside ``model``'s replay, the heavy runs judged by their band; with the
    heavy runs in band, those judged, and each run's load and simulated throughput."""
    lines = [
        "| run (load) | role | req/s measured / simulated | median TPOT ms | p99 TTFT ms | in band |",
        "|---|---|---|---|---|---|",
    ]
    checked = passed = 0
    simulated_runs: list[tuple[int, float]] = []
    for name, run in runs:
        got = simulate_run(model, run).figures
        at = run.load
        simulated_runs.append((at, got["request_throughput"]))
        role = "fit" if at <= sweep.fit_up_to else ("heavy" if at <= sweep.near_up_to else "far past")
        cells = []
        ok = True
        for key in ("request_throughput", "median_tpot_ms", "p99_ttft_ms"):
            measured, simulated = float(getattr(run, key)), got[key]
            ratio = simulated / measured
            judged = role != "fit" and (key != "p99_ttft_ms" or role == "far past")
            if judged and abs(ratio - 1.0) > band(role == "heavy", key):
                ok = False
            cells.append(f"{measured:,.3g} / {simulated:,.3g} ({ratio:.2f}){'' if judged else ' .'}")
        verdict = "-" if role == "fit" else ("yes" if ok else "**no**")
        if role != "fit":
            checked += 1
            passed += ok
        lines.append(
            f"| {name.removesuffix('.json')} ({run.completed} served"
            + (f", at most {run.max_concurrency} at once" if run.max_concurrency else "")
            + f") | {role} | "
            + " | ".join(cells)
            + f" | {verdict} |"
        )
    return lines, passed, checked, simulated_runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--date", default=datetime.date.today().isoformat())
    args = parser.parse_args()
    sections, passed, checked = [], 0, 0
    for sweep in SWEEPS:
        text, p, c = section(sweep)
        sections.append(text)
        passed, checked = passed + p, checked + c
    out = ROOT / "docs" / "results" / f"{args.date}-replica-fidelity.md"
    header = f"""# The simulated replica against published vLLM sweeps ({args.date})

Written by `python lab/fidelity.py`. Each sweep is a published set of `vllm bench serve` runs of one server,
from two independent sources (the sources and how the figures were taken:
[lab/sweeps/README.md](../../lab/sweeps/README.md)). The replica is fitted, as `vllm-autoscaler calibrate` fits
it, on the sweep's light and mid-load runs only, with the server's own flags (KV cache, `max_num_batched_tokens`,
`max_num_seqs`), and then predicts the heavy runs it never saw. A run's load is its concurrency limit, or for a
burst without one the requests it sent at once. Bands: up to about twice the knee, request throughput within
15 % and median TPOT within 25 %; far past it, throughput within 25 %, median TPOT and p99 TTFT within 35 %.

In all: {passed} of {checked} heavy runs in band.

Median TTFT is not judged: in the first source's sweeps the same seeded prompts were sent run after run, and the
server's log shows prefix-cache hit rates of 20 to 57 %, so light runs' first tokens come from the cache (the fit
names them and leaves their TTFT out). A run's first request is simulated warm, as `vllm bench serve`'s test
request leaves it. The built-in replica (Llama-3-70B on four A10G) has no published sweep:
its parameters are stated from the hardware in `simulations/replica_model.py`.

"""
    out.write_text(header + "\n".join(sections))
    print(f"wrote {out.relative_to(ROOT)}: {passed} of {checked} heavy runs in band")


if __name__ == "__main__":
    main()
