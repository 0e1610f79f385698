"""A policy judged on a set of traces, not on one: ``python -m lab.matrix`` (from the repository root).

One trace is one sample (docs/decisions/predictive-headroom.md): a default that meets the SLO by a few requests
on the built-in day misses it on the next day of the same traffic. This benchmark runs, on every scenario of
a set, the built-in workload's default ``predictive`` and a variant of it (``--set key=value``, the policy
block's parameters, as in a policy file; ``--behavior JSON``, the workload's behavior), against the fixed
fleet that meets the SLO there (``static-best``), each scenario sized and searched exactly as
``vllm-autoscaler simulate`` does it.

* ``short`` (the default set): the built-in generator's seeds 0-9 at cold starts of 60, 120 and 300 s; the
  Azure conversation hour at 60 to 600 s; the ServeGen file's first two days (10-minute windows, about 3
  requests/s) at 60 and 300 s; the built-in day at a 99.9 % target, with a 1 s SLO and with a 1 s cold
  start; a 3-hour ramp; a flat hour (constant-rate Poisson arrivals, the Azure hour's lengths) at 60 and
  300 s: 44 scenarios.
* ``long``: a two-day trace (1 million requests), a sparse week (0.3 requests/s) and the ServeGen file's
  three consecutive days with no gap in the recording (days 11 to 13, 1.4 million requests), at 300 s.
* ``recorded``: the ServeGen file's other days, each at 60 and 300 s, as the short set runs its first two:
  recorded traffic only, a day at a time. Days with gaps in the recording are left out
  (``servegen_whole_days``): 7 of the 12, 14 scenarios.
* ``bursty``: four of those days with the Azure hour's minute-to-minute bursts inside their windows and its
  requests' lengths (``bursty_day``), and a whole day whose rate follows a daily cosine, peak to trough 4:1,
  with the same bursts (``diurnal_bursty_day``), each at 60 and 300 s: 10 scenarios. ServeGen's days are
  smooth within a window, and its service's day is nearly flat; recorded request traces are neither, and
  issue 36 is checked on recorded days of request traces.
* ``tight``: recorded traffic under SLOs tighter than the 2 s the built-in targets are sized for: ServeGen days 3
  (at 60 s), 7 (300 s), 11 and 13 (120 s) and the Azure hour (120 s) at 1 s, ServeGen day 5 at 1.5 s (300 s): 6
  scenarios. The check's SLOs are not named, and at 1 s a light minute's rare miss behind a long prompt is a
  larger share of the budget (docs/decisions/error-budget-count.md).

``--replica KEY=VALUE`` runs every scenario of the set on another replica model (``simulate --replica``'s keys),
sized and cached apart.

``--check`` also runs keda-sum, the clairvoyant and the ``reactive`` follower (``clairvoyant.reactive``: the work
of the minute just past, told exactly, at its cheapest utilization), and judges the default, the variant and the
follower by issue 36's check (``check_failures``): where the follower fails it too, no rule that sizes the
fleet in proportion to the present load passes (docs/decisions/baselines.md). ``--reactive-at U`` also runs that
follower told one utilization ``U`` for every scenario, no search:
what a margin known before the traffic, the same on every run, gives (``reactive_fixed``).

The built-in document, the fixed fleet's search and the default's run of each scenario are cached in
``--cache`` (they do not depend on the variant); delete it when the simulator, the sizing or the default
changes. Scenarios run one per core.
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import multiprocessing as mp
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

import simulations.jobs as simulation_jobs
from policies.policy_file import parse_policy_document
from simulations.builtin import sized_builtin
from simulations.clairvoyant import clairvoyant, minute_past, reactive
from simulations.clairvoyant import contender as follower_contender
from simulations.compare import footing
from simulations.contenders import keda_contender, policy_contender, policy_variant
from simulations.replica_model import ReplicaModel, parse_overrides
from simulations.results import write_dated
from simulations.runner import RunResult, run
from simulations.traces import Trace, load_trace, read_rate, synthetic_day
from simulations.tuning import tune

TRACES = Path(__file__).resolve().parent.parent.parent / "shared" / "traces"
SERVEGEN = "servegen_m-mid_rate_600s.csv"
AZURE = "azure_llm_2023_conv.csv"
BURSTY_DAYS = (2, 6, 10, 12)  # ServeGen's days 3, 7, 11 and 13 (zero-based), whole ones of the recorded set
SERVEGEN_RATE_SCALE = 4 / 1790  # its first day's mean to about 3 requests/s
SERVEGEN_DAY_WINDOWS = 144
CACHE = Path(tempfile.gettempdir()) / "vllm-autoscaler-matrix"


@dataclass(frozen=True)
class Scenario:
    name: str
    trace: Callable[[], Trace]
    cold_start_s: float
    slo_ttft: float = 2.0
    slo_target: float = 0.99
    replica: tuple[str, ...] = ()  # ``KEY=VALUE`` overrides of the replica model, as ``simulate --replica``


def _rate_trace(name: str, lines: list[str], rate_scale: float = 1.0, lengths: Trace | None = None) -> Trace:
    """A rate-per-window trace from the lines of its CSV (header first), read as ``--trace`` reads one
    (with ``--lengths-from``, given ``lengths``)."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / name
        path.write_text("\n".join(lines) + "\n")
        return read_rate(path, seed=0, rate_scale=rate_scale, lengths=lengths)


def _servegen_lines() -> list[str]:
    return (TRACES / SERVEGEN).read_text().splitlines()


def _servegen_windows(lines: list[str], day: int, days: int = 1) -> list[str]:
    """The rows of days ``day`` (zero-based) to ``day + days - 1`` among the file's ``lines`` (header first)."""
    return lines[1 + day * SERVEGEN_DAY_WINDOWS : 1 + (day + days) * SERVEGEN_DAY_WINDOWS]


def servegen_day(day: int, days: int = 1) -> Trace:
    """Days ``day`` (zero-based) to ``day + days - 1`` of the ServeGen file (``read_rate`` times a trace
    from its first request)."""
    lines = _servegen_lines()
    return _rate_trace(
        f"servegen_day{day + 1}.csv", [lines[0], *_servegen_windows(lines, day, days)], SERVEGEN_RATE_SCALE
    )


def servegen_whole_days() -> list[int]:
    """The ServeGen file's days (zero-based) with requests in every window. The others have gaps in the
    recording, windows of no requests at all after which the whole load returns within one window: an
    outage of the recording, not traffic a policy should be judged on."""
    lines = _servegen_lines()
    return [
        day
        for day in range((len(lines) - 1) // SERVEGEN_DAY_WINDOWS)
        if all(float(line.split(",")[1]) > 0 for line in _servegen_windows(lines, day))
    ]


def minute_profile(trace: Trace) -> np.ndarray:
    """The arrivals per whole minute of ``trace`` over their mean: its minute-level bursts, as multipliers."""
    minutes = int(trace.arrival_s[-1] // 60)
    counts = np.bincount((trace.arrival_s // 60).astype(int), minlength=minutes)[:minutes].astype(float)
    return np.asarray(counts / float(counts.mean()))


def _with_azure_bursts(name: str, minute_rates: list[float], rate_scale: float = 1.0) -> Trace:
    """A trace whose rate each minute is ``minute_rates``' times that minute's multiplier in the Azure
    conversation hour (``minute_profile``, repeated hour after hour), its requests drawing the Azure hour's
    prompt and output lengths."""
    azure = load_trace(TRACES / AZURE)
    profile = minute_profile(azure)
    rows = ["window_start_s,rate_rps"]
    rows += [f"{minute * 60},{rate * profile[minute % len(profile)]}" for minute, rate in enumerate(minute_rates)]
    return _rate_trace(name, rows, rate_scale, azure)


def bursty_day(day: int) -> Trace:
    """ServeGen's day ``day`` (zero-based) with the Azure conversation hour's bursts (``_with_azure_bursts``):
    each minute's rate is its 10-minute window's times that minute's multiplier. ServeGen records a rate per
    10-minute window, smooth within it; recorded request traces burst from one minute to the next (the Azure
    hour: a minute's arrivals spread 0.68 to 1.42 times their mean, 5th to 95th percentile)."""
    windows = [float(line.split(",")[1]) for line in _servegen_windows(_servegen_lines(), day)]
    minutes = [rate for rate in windows for _ in range(10)]
    return _with_azure_bursts(f"bursty_day{day + 1}.csv", minutes, SERVEGEN_RATE_SCALE)


def diurnal_bursty_day(mean_rps: float = 3.0) -> Trace:
    """A whole day (not compressed) whose rate follows a daily cosine, peak to trough 4:1, peak at 15:00,
    at ``mean_rps`` on average, with the Azure hour's minute bursts and request lengths (``_with_azure_bursts``)."""
    shape = 1.0 + 0.6 * np.cos(2 * np.pi * (np.arange(1440) / 1440 - 15 / 24))
    return _with_azure_bursts("diurnal_bursty_day.csv", [mean_rps * float(s) for s in shape])


def flat_hour(rate: float = 5.0) -> Trace:
    """An hour of Poisson arrivals at a constant ``rate``, with the Azure hour's request lengths: the load
    where nothing can be saved, on which issue 36 allows 5 % over the fixed fleet."""
    rows = ["window_start_s,rate_rps", *(f"{minute * 60},{rate}" for minute in range(60))]
    return _rate_trace("flat_hour.csv", rows, lengths=load_trace(TRACES / AZURE))


def _ramp() -> Trace:
    """An hour at 1 request/s, a rise to 8 over 30 minutes, an hour and a half at 8."""
    rows = ["window_start_s,rate_rps"]
    for start in range(0, 3 * 3600, 60):
        rate = 1.0 if start < 3600 else min(8.0, 1.0 + 7.0 * (start - 3600) / 1800)
        rows.append(f"{start},{rate}")
    return _rate_trace("ramp.csv", rows)


def scenarios(which: str) -> list[Scenario]:
    if which == "recorded":
        return [
            Scenario(f"servegen{day + 1}@{cold}", partial(servegen_day, day), cold)
            for day in servegen_whole_days()
            if day > 1  # the short set runs the first two
            for cold in (60, 300)
        ]
    if which == "bursty":
        days = [
            Scenario(f"bursty{day + 1}@{cold}", partial(bursty_day, day), cold)
            for day in BURSTY_DAYS
            for cold in (60, 300)
        ]
        return days + [Scenario(f"diurnal@{cold}", diurnal_bursty_day, cold) for cold in (60, 300)]
    if which == "tight":
        at_1s = ((2, 60), (6, 300), (10, 120), (12, 120))  # (ServeGen day, cold start)
        return [
            *(
                Scenario(f"servegen{day + 1}@{cold},slo1s", partial(servegen_day, day), cold, slo_ttft=1.0)
                for day, cold in at_1s
            ),
            Scenario("azure@120,slo1s", partial(load_trace, TRACES / AZURE), 120, slo_ttft=1.0),
            Scenario("servegen5@300,slo1.5s", partial(servegen_day, 4), 300, slo_ttft=1.5),
        ]
    if which == "long":
        return [
            Scenario("two-days@300", partial(synthetic_day, 3, 5.8, 48.0, 12), 300),
            Scenario("sparse-week@300", partial(synthetic_day, 3, 0.3, 168.0, 7), 300),
            Scenario("servegen11-13@300", partial(servegen_day, 10, 3), 300),
        ]
    found: list[Scenario] = []
    for seed in range(10):
        for cold in (60, 120, 300):
            found.append(Scenario(f"day{seed}@{cold}", partial(synthetic_day, seed), cold))
    azure = TRACES / AZURE
    for cold in (60, 120, 300, 600):
        found.append(Scenario(f"azure@{cold}", partial(load_trace, azure), cold))
    for day in (0, 1):
        for cold in (60, 300):
            found.append(Scenario(f"servegen{day + 1}@{cold}", partial(servegen_day, day), cold))
    found += [
        Scenario("day0@300,99.9%", synthetic_day, 300, slo_target=0.999),
        Scenario("day0@120,slo1s", synthetic_day, 120, slo_ttft=1.0),
        Scenario("day0@1", synthetic_day, 1),
        Scenario("ramp@300", _ramp, 300),
        *(Scenario(f"flat@{cold}", flat_hour, cold) for cold in (60, 300)),
    ]
    return found


@dataclass
class Baseline:
    document: dict[str, Any]
    initial: int
    static_replicas: int | None
    static_gpu_hours: float
    oracle_gpu_hours: float
    default_gpu_hours: float
    default_slo: float
    # With ``--check``: the baselines the check names (computed once, then cached with the rest).
    keda_gpu_hours: float | None = None
    keda_slo: float | None = None
    clairvoyant_gpu_hours: float | None = None
    clairvoyant_slo: float | None = None
    reactive_gpu_hours: float | None = None
    reactive_slo: float | None = None
    reactive_utilization: float | None = None  # the margin its search found: what the run's traffic needed


def scenario_model(scenario: Scenario) -> ReplicaModel:
    return parse_overrides([*scenario.replica, f"cold_start_s={scenario.cold_start_s}"])


def _baseline(scenario: Scenario, trace: Trace, model: ReplicaModel) -> Baseline:
    document, _ = sized_builtin(model, trace, scenario.slo_ttft, scenario.slo_target)
    workload = document.workloads[0]
    base = footing(trace, model, document, workload, scenario.slo_ttft, scenario.slo_target)
    contender = policy_contender(document, workload, model)
    default = run(trace, model, contender, base.initial, scenario.slo_ttft, timeline=False)
    raw = document.model_dump(by_alias=True, exclude_none=True, mode="json")
    return Baseline(
        raw,
        base.initial,
        base.static_replicas,
        base.static_run.gpu_hours,
        base.bound.gpu_hours,
        default.gpu_hours,
        default.slo_attainment,
    )


def _check_baselines(baseline: Baseline, scenario: Scenario, trace: Trace, model: ReplicaModel) -> Baseline:
    """``baseline`` with what it lacks of keda-sum's run, the clairvoyant's cheapest that meets the SLO, as
    simulate runs them, and the reactive follower's cheapest (``clairvoyant.reactive``)."""
    document = parse_policy_document(baseline.document, "<matrix>")
    workload = document.workloads[0]
    args = (trace, model, document, workload, baseline.initial, scenario.slo_ttft, scenario.slo_target)
    if baseline.clairvoyant_gpu_hours is None:
        keda = run(trace, model, keda_contender(document, workload, model, False), baseline.initial, scenario.slo_ttft)
        floor = clairvoyant(*args)
        baseline = replace(
            baseline,
            keda_gpu_hours=keda.gpu_hours,
            keda_slo=keda.slo_attainment,
            clairvoyant_gpu_hours=floor.gpu_hours,
            clairvoyant_slo=floor.slo_attainment,
        )
    if baseline.reactive_utilization is None:
        follower = reactive(*args)
        assert follower.tuned is not None  # every follower's run carries its utilization
        baseline = replace(
            baseline,
            reactive_gpu_hours=follower.gpu_hours,
            reactive_slo=follower.slo_attainment,
            reactive_utilization=follower.tuned["utilization"],
        )
    return baseline


_JOBS: list[tuple[Scenario, dict[str, Any], Path]] = []  # set before the workers fork: scenarios hold closures


def _cached_path(scenario: Scenario, cache: Path) -> Path:
    key = scenario.name + "".join(f"|{override}" for override in scenario.replica)
    return cache / f"{hashlib.sha256(key.encode()).hexdigest()[:16]}.json"


def cached_baseline(scenario: Scenario, trace: Trace, model: ReplicaModel, cache: Path) -> Baseline:
    """The scenario's built-in document, fixed fleet and default run, read from ``cache`` where a run left
    them, else computed and left there."""
    cached = _cached_path(scenario, cache)
    if cached.exists():
        return Baseline(**json.loads(cached.read_text()))
    cache.mkdir(parents=True, exist_ok=True)
    baseline = _baseline(scenario, trace, model)
    cached.write_text(json.dumps(asdict(baseline)))
    return baseline


def _one(index: int) -> dict[str, Any]:
    scenario, settings, cache = _JOBS[index]
    started = time.monotonic()
    trace = scenario.trace()
    model = scenario_model(scenario)
    baseline = cached_baseline(scenario, trace, model, cache)
    cached = _cached_path(scenario, cache)
    if settings.get("check") and None in (baseline.clairvoyant_gpu_hours, baseline.reactive_utilization):
        baseline = _check_baselines(baseline, scenario, trace, model)
        cached.write_text(json.dumps(asdict(baseline)))
    row: dict[str, Any] = {
        "scenario": scenario.name,
        "static_replicas": baseline.static_replicas,
        "min_replicas": baseline.document["workloads"][0]["minReplicas"],
        "static_gpu_hours": round(baseline.static_gpu_hours, 1),
        "oracle_gpu_hours": round(baseline.oracle_gpu_hours, 1),
        "default_gpu_hours": round(baseline.default_gpu_hours, 1),
        "default_slo": round(baseline.default_slo, 4),
    }
    if settings.get("check"):
        keda, floor, follower = baseline.keda_gpu_hours, baseline.clairvoyant_gpu_hours, baseline.reactive_gpu_hours
        assert keda is not None and floor is not None and follower is not None
        row.update(
            keda_gpu_hours=round(keda, 1),
            keda_slo=round(baseline.keda_slo or 0.0, 4),
            clairvoyant_gpu_hours=round(floor, 1),
            reactive_gpu_hours=round(follower, 1),
            reactive_slo=round(baseline.reactive_slo or 0.0, 4),
            reactive_setting={"utilization": baseline.reactive_utilization},  # in --out, as a tuned run's
        )
    raw = copy.deepcopy(baseline.document)
    if "behavior" in settings:
        raw["workloads"][0]["behavior"] = settings["behavior"]
    document = parse_policy_document(raw, "<matrix>")
    workload = document.workloads[0]
    variant_doc, variant = policy_variant(document, workload, {**dict(workload.policy), **settings.get("policy", {})})
    if "reactive_at" in settings:  # beside the searched follower: its document, not the variant's behavior
        plain = parse_policy_document(baseline.document, "<matrix>")
        need = minute_past(trace, model, float(plain.interval))
        told = follower_contender(plain, plain.workloads[0], need, settings["reactive_at"], "reactive")
        _record(row, "reactive_fixed", run(trace, model, told, baseline.initial, scenario.slo_ttft, timeline=False))
    if settings.keys() - {"tune", "check", "reactive_at"}:
        contender = policy_contender(variant_doc, variant, model)
        _record(row, "variant", run(trace, model, contender, baseline.initial, scenario.slo_ttft, timeline=False))
    if settings.get("tune"):
        for policy_type in ("predictive", "threshold"):
            result = tune(
                trace,
                model,
                variant_doc,
                variant,
                policy_type,
                baseline.initial,
                scenario.slo_ttft,
                scenario.slo_target,
                lambda _: None,
            )
            _record(row, f"tuned_{policy_type}", result)
    row["elapsed_s"] = round(time.monotonic() - started, 1)
    return row


def _record(row: dict[str, Any], prefix: str, result: RunResult) -> None:
    row[f"{prefix}_gpu_hours"] = round(result.gpu_hours, 1)
    row[f"{prefix}_slo"] = round(result.slo_attainment, 4)
    if result.tuned is not None:
        row[f"{prefix}_setting"] = result.tuned  # in --out: what tuning found, as simulate's report names it


PREFIXES = ("default", "variant", "tuned_predictive", "tuned_threshold", "reactive", "reactive_fixed")
CHECKED = ("default", "variant", "reactive", "reactive_fixed")  # judged by the check where the run has its baselines


def _verdict(row: dict[str, Any], target: float, prefix: str) -> str:
    if f"{prefix}_gpu_hours" not in row:
        return ""
    meets = row[f"{prefix}_slo"] >= target
    cheaper = row[f"{prefix}_gpu_hours"] < row["static_gpu_hours"]
    if meets and not cheaper and row["static_replicas"] == row["min_replicas"]:
        return "floor"  # the fixed fleet is the workload's least: no policy can hold fewer
    return "miss" if not meets else ("win" if cheaper else "dear")


def summary(rows: list[dict[str, Any]], targets: dict[str, float]) -> dict[str, dict[str, int]]:
    """Per contender, over the scenarios a fixed fleet meets: how many it meets for less (``win``), meets
    for more (``dear``; ``floor`` where the fixed fleet is ``minReplicas``), misses (``miss``). With ``--check``,
    how many runs pass and fail the check, and of the failures how many the reactive follower fails too."""
    counts: dict[str, dict[str, int]] = {}
    for prefix in PREFIXES:
        tally = {"win": 0, "dear": 0, "floor": 0, "miss": 0}
        for row in rows:
            if row["static_replicas"] is not None and (verdict := _verdict(row, targets[row["scenario"]], prefix)):
                tally[verdict] += 1
        if any(tally.values()):
            counts[prefix] = tally
    checked = [row for row in rows if "clairvoyant_gpu_hours" in row]
    failing = {
        prefix: {row["scenario"] for row in checked if check_failures(row, targets[row["scenario"]], prefix)}
        for prefix in CHECKED
        if checked and all(f"{prefix}_gpu_hours" in row for row in checked)
    }
    for prefix, failed in failing.items():
        counts[f"{prefix}_check"] = {"pass": len(checked) - len(failed), "fail": len(failed)}
        if prefix != "reactive" and "reactive" in failing:  # failures no rule in proportion to the present load passes
            counts[f"{prefix}_check"]["reactive_fails_too"] = len(failed & failing["reactive"])
    tuned = [row for row in rows if "tuned_predictive_gpu_hours" in row]
    if tuned:
        # The second test: tuned predictive at no more GPU-hours than tuned threshold, where it meets.
        counts["tuned_predictive_vs_threshold"] = {"no_dearer": 0, "dearer": 0, "misses": 0}
        for row in tuned:
            target = targets[row["scenario"]]
            if row["tuned_predictive_slo"] < target:
                key = "misses"
            elif row["tuned_threshold_slo"] < target:
                key = "no_dearer"
            else:
                key = "no_dearer" if row["tuned_predictive_gpu_hours"] <= row["tuned_threshold_gpu_hours"] else "dearer"
            counts["tuned_predictive_vs_threshold"][key] += 1
    return counts


MUCH_TO_SAVE = 0.15  # the clairvoyant saves at least this share of the fixed fleet's cost: "much"
NOTHING_TO_SAVE = 0.05  # it saves less: "nothing can be saved", and a policy may cost at most this much more


def check_failures(row: dict[str, Any], target: float, prefix: str = "default") -> list[str]:
    """What issue 36's check says of one contender's run where it fails (none: it passes), each as a few words:
    wherever the fixed fleet meets the SLO it meets it too; wherever keda-sum meets it, it costs no more; where
    the clairvoyant follower saves much over the fixed fleet, it saves at least half of that; where nothing can
    be saved, it costs at most ``NOTHING_TO_SAVE`` more than the fixed fleet."""
    cost, meets = row[f"{prefix}_gpu_hours"], row[f"{prefix}_slo"] >= target
    static, clairvoyant = row["static_gpu_hours"], row.get("clairvoyant_gpu_hours")
    failures = []
    if row["static_replicas"] is not None and not meets:
        failures.append("misses where the fixed fleet meets")
    if row.get("keda_slo", 0.0) >= target and cost > row["keda_gpu_hours"]:
        failures.append(f"dearer than keda-sum ({row['keda_gpu_hours']})")
    if row["static_replicas"] is None or clairvoyant is None:
        return failures
    possible = static - clairvoyant
    if possible >= MUCH_TO_SAVE * static and static - cost < possible / 2:
        failures.append(f"saves {(static - cost) / possible:.0%} of the clairvoyant's saving")
    elif possible < NOTHING_TO_SAVE * static and cost > (1 + NOTHING_TO_SAVE) * static:
        failures.append(f"{cost / static - 1:.0%} over the fixed fleet with nothing to save")
    return failures


def _setting(text: str) -> tuple[str, Any]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"{text!r}: expected key=value")
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.matrix", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--set",
        dest="settings",
        type=_setting,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a policy parameter",
    )
    parser.add_argument("--behavior", type=json.loads, help="the workload's behavior block, as JSON")
    parser.add_argument("--tune", action="store_true", help="also tune predictive and threshold (as simulate --tune)")
    parser.add_argument(
        "--check",
        action="store_true",
        help="also run keda-sum, the clairvoyant and the reactive follower, and judge by issue 36's check",
    )
    parser.add_argument(
        "--reactive-at",
        type=float,
        metavar="U",
        help="with --check, also run the reactive follower at this one utilization on every scenario (no search)",
    )
    parser.add_argument("--scenarios", choices=["short", "long", "recorded", "bursty", "tight"], default="short")
    parser.add_argument("--only", default="", help="run only the scenarios whose name contains this")
    parser.add_argument(
        "--replica",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a replica model parameter for every scenario, as simulate --replica (sized and cached apart)",
    )
    parser.add_argument("--cache", type=Path, default=CACHE)
    parser.add_argument("--jobs", type=int, default=mp.cpu_count())
    parser.add_argument("--out", type=Path, help="the rows as JSON")
    parser.add_argument("--report", type=Path, metavar="DIR", help="also write a dated Markdown report there")
    parser.add_argument(
        "--label", default="", help="the report's name after its set's (matrix-SET-LABEL), so variants do not overwrite"
    )
    args = parser.parse_args(argv)
    try:
        parse_overrides(args.replica)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.reactive_at is not None and not (args.check and 0 < args.reactive_at <= 1):
        print(
            "error: --reactive-at: a utilization in (0, 1], with --check (its runs are judged by the check)",
            file=sys.stderr,
        )
        return 2
    args.cache.mkdir(parents=True, exist_ok=True)
    chosen = [replace(s, replica=tuple(args.replica)) for s in scenarios(args.scenarios) if args.only in s.name]
    settings: dict[str, Any] = {"policy": dict(args.settings)} if args.settings else {}
    if args.behavior is not None:
        settings["behavior"] = args.behavior
    if args.tune:
        settings["tune"] = True
    if args.check:
        settings["check"] = True
    if args.reactive_at is not None:
        settings["reactive_at"] = args.reactive_at
    simulation_jobs.PARALLEL_MIN_REQUESTS = 10**12  # one scenario per process, each of them serial
    _JOBS[:] = [(s, settings, args.cache) for s in chosen]
    targets = {s.name: s.slo_target for s in chosen}
    rows: list[dict[str, Any]] = []
    header = f"{'scenario':<18} {'static':>12} " + " ".join(f"{p.replace('tuned_', 'tuned '):>20}" for p in PREFIXES)
    print(header)
    with mp.get_context("fork").Pool(max(1, args.jobs)) as pool:
        for row in pool.imap(_one, range(len(_JOBS))):
            rows.append(row)
            static = f"{row['static_replicas']}, {row['static_gpu_hours']}" if row["static_replicas"] else "none"
            cells = [f"{row['scenario']:<18} {static:>12}"]
            for prefix in PREFIXES:
                if f"{prefix}_gpu_hours" in row:
                    verdict = _verdict(row, targets[row["scenario"]], prefix)
                    cells.append(f"{row[f'{prefix}_gpu_hours']:>7} {row[f'{prefix}_slo']:.4f} {verdict:<5}")
                else:
                    cells.append(" " * 20)  # each run under its own header
            print(" ".join(cells), flush=True)
    print(json.dumps({"settings": settings, "summary": summary(rows, targets)}))
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1) + "\n")
    if args.report:
        given = sys.argv[1:] if argv is None else argv
        print(f"wrote {write_report(args.report, rows, targets, settings, args, given)}", file=sys.stderr)
    return 0


def write_report(
    folder: Path,
    rows: list[dict[str, Any]],
    targets: dict[str, float],
    settings: dict[str, Any],
    args: Any,
    argv: list[str],
) -> Path:
    """The rows as a dated Markdown table (GPU-hours and SLO attainment per contender, and the verdict), then the
    summary."""
    shown = [p for p in PREFIXES if any(f"{p}_gpu_hours" in r for r in rows)]
    given = {k: v for k, v in settings.items() if k not in ("check", "reactive_at")}
    variant = f"the variant: `{json.dumps(given)}`" if given else "no variant, the default alone"
    checked = any("clairvoyant_gpu_hours" in r for r in rows)
    judged = [p for p in CHECKED if p in shown] if checked else []
    extra = ["keda-sum", "clairvoyant"] if checked else []
    lines = [
        f"Scenarios: `{args.scenarios}`"
        + (f", only `{args.only}`" if args.only else "")
        + (f", the replica with `{' '.join(args.replica)}`" if args.replica else "")
        + f"; {variant}. "
        "Each cell: GPU-hours, SLO attainment and the verdict against the fixed fleet (win: meets it for less; "
        "dear: meets it for more; miss). The fixed fleets' searches and the default's runs were computed, or read from "
        f"`--cache` ({args.cache}) where a run had left them (delete it when the simulator changes).",
        "",
        "| scenario | static-best | "
        + " | ".join(
            [*extra, *(p.replace("_", " ") for p in shown), *(f"check ({p.replace('_', ' ')})" for p in judged)]
        )
        + " |",
        "|---" * (2 + len(extra) + len(shown) + len(judged)) + "|",
    ]
    if checked:
        lines[0] += (
            " The check is issue 36's (`check_failures`): it meets the SLO wherever the fixed fleet does, costs no "
            "more than keda-sum wherever that meets it, saves at least half the clairvoyant's saving where that is "
            f"{MUCH_TO_SAVE:.0%} or more of the fixed fleet's cost, and costs at most {NOTHING_TO_SAVE:.0%} more "
            f"than the fixed fleet where the clairvoyant saves less than {NOTHING_TO_SAVE:.0%}. `reactive` is a "
            "follower that knows exactly the work of the minute just past and forecasts nothing, at its cheapest "
            "setting that meets the SLO (`clairvoyant.reactive`): where it fails the check too, no rule that sizes the "
            "fleet in proportion to the present load passes, however it is tuned; the summary counts those runs "
            "among each contender's failures (`reactive_fails_too`)."
        )
    if "reactive_at" in settings:
        lines[0] += (
            f" `reactive fixed` is the same follower told one utilization, {settings['reactive_at']}, on every run: "
            "a margin known before the traffic, the same on every run."
        )
    for row in rows:
        static = f"{row['static_replicas']}, {row['static_gpu_hours']}" if row["static_replicas"] else "none"
        cells = (
            [f"{row['keda_gpu_hours']} ({row['keda_slo']:.4f})", f"{row['clairvoyant_gpu_hours']}"] if checked else []
        )
        cells += [
            f"{row[f'{p}_gpu_hours']} ({row[f'{p}_slo']:.4f})"
            + (f" {_verdict(row, targets[row['scenario']], p)}" if row["static_replicas"] else "")
            if f"{p}_gpu_hours" in row
            else ""
            for p in shown
        ]
        cells += ["; ".join(check_failures(row, targets[row["scenario"]], p)) or "pass" for p in judged]
        lines.append(f"| {row['scenario']} | {static} | " + " | ".join(cells) + " |")
    lines += ["", f"Summary: `{json.dumps(summary(rows, targets))}`"]
    command = " ".join(["python -m lab.matrix", *argv])
    name = f"matrix-{args.scenarios}" + (f"-{args.label}" if args.label else "")
    return write_dated(folder, name, "The policy matrix", command, lines)


if __name__ == "__main__":
    sys.exit(main())
