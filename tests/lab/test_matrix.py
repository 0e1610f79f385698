"""The policy matrix benchmark's verdicts (``simulations/matrix.py``); its runs are the simulator's own."""

from __future__ import annotations

import csv
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from lab.matrix import (
    BURSTY_DAYS,
    SERVEGEN,
    SERVEGEN_DAY_WINDOWS,
    bursty_day,
    check_failures,
    diurnal_bursty_day,
    flat_hour,
    scenarios,
    servegen_day,
    servegen_whole_days,
    summary,
    write_report,
)
from simulations.sizing import tighter_than_reference


def _row(name: str, static: int | None, variant: tuple[float, float] | None = None, least: int = 2) -> dict[str, Any]:
    row: dict[str, Any] = {
        "scenario": name,
        "static_replicas": static,
        "min_replicas": least,
        "static_gpu_hours": 100.0,
        "default_gpu_hours": 90.0,
        "default_slo": 0.995,
    }
    if variant is not None:
        row.update(variant_gpu_hours=variant[0], variant_slo=variant[1])
    return row


def test_summary_counts_only_where_a_fixed_fleet_meets_the_slo() -> None:
    rows = [
        _row("a", 10, (80.0, 0.995)),  # meets for less
        _row("b", 10, (120.0, 0.995)),  # meets for more
        _row("c", 10, (80.0, 0.98)),  # misses
        _row("d", None, (80.0, 0.98)),  # no fixed fleet meets: not counted
        _row("e", 2, (120.0, 0.995)),  # the fixed fleet is the least the workload allows
        _row("f", 10, (80.0, 0.9985)),  # a 99.9 % target
    ]
    targets = {r["scenario"]: 0.99 for r in rows} | {"f": 0.999}
    counts = summary(rows, targets)
    assert counts["default"] == {"win": 4, "dear": 0, "floor": 0, "miss": 1}  # 0.995 misses 99.9 %
    assert counts["variant"] == {"win": 1, "dear": 1, "floor": 1, "miss": 2}


def test_summary_without_a_variant_counts_the_default_alone() -> None:
    assert set(summary([_row("a", 10)], {"a": 0.99})) == {"default"}


def test_scenario_names_are_unique() -> None:
    for which in ("short", "long", "bursty", "tight"):
        names = [s.name for s in scenarios(which)]
        assert len(names) == len(set(names))


def test_the_tight_set_runs_recorded_traffic_under_slos_tighter_than_the_targets_are_sized_for(
    shared_trace: Path,
) -> None:
    tight = scenarios("tight")
    assert tight and all(tighter_than_reference(s.slo_ttft, s.slo_target) for s in tight)
    assert {s.name.split("@")[0] for s in tight} <= {f"servegen{day + 1}" for day in servegen_whole_days()} | {"azure"}


def test_the_recorded_set_runs_every_servegen_day_without_a_gap_but_the_short_sets(shared_trace: Path) -> None:
    with (shared_trace / SERVEGEN).open() as handle:
        rates = [float(row["total_rate_rps"]) for row in csv.DictReader(handle)]
    days = [rates[start : start + SERVEGEN_DAY_WINDOWS] for start in range(0, len(rates), SERVEGEN_DAY_WINDOWS)]
    gapless = [day for day, windows in enumerate(days) if min(windows) > 0]
    assert servegen_whole_days() == gapless
    assert 0 < len(gapless) < len(days)  # the file has days with gaps, which the set leaves out
    names = [s.name for s in scenarios("recorded")]
    assert len(names) == len(set(names))
    assert set(names) == {f"servegen{day + 1}@{cold}" for day in gapless if day > 1 for cold in (60, 300)}
    assert not set(names) & {s.name for s in scenarios("short")}
    assert {10, 11, 12} <= set(gapless)  # the long set's three consecutive days


def test_a_bursty_day_keeps_its_servegen_days_windows_and_bursts_within_them(shared_trace: Path) -> None:
    assert set(BURSTY_DAYS) <= set(servegen_whole_days())
    bursty, smooth = bursty_day(BURSTY_DAYS[0]), servegen_day(BURSTY_DAYS[0])
    hours = [np.bincount((t.arrival_s // 10_800).astype(int), minlength=8)[:8] for t in (bursty, smooth)]
    assert np.allclose(hours[0], hours[1], rtol=0.1)  # the day's shape, three hours at a time
    per_minute = [np.bincount((t.arrival_s // 60).astype(int))[:1440] for t in (bursty, smooth)]
    spread = [float(np.std(counts[1:] / counts[:-1])) for counts in per_minute]
    assert spread[0] > 1.3 * spread[1]  # and the Azure hour's minute-to-minute bursts inside them
    assert bursty.builtin_lengths is False


def test_the_diurnal_day_runs_a_whole_day_four_to_one_with_bursts(shared_trace: Path) -> None:
    day = diurnal_bursty_day()
    assert 23.9 < day.arrival_s[-1] / 3600 <= 24
    hours = np.bincount((day.arrival_s // 3600).astype(int), minlength=24)[:24]
    assert int(np.argmax(hours)) in (14, 15) and int(np.argmin(hours)) in (2, 3)
    assert 3.0 < hours.max() / hours.min() < 5.0
    assert abs(day.requests / 86_400 - 3.0) < 0.3


def test_the_flat_hour_holds_its_rate_minute_after_minute(shared_trace: Path) -> None:
    hour = flat_hour(5.0)
    minutes = np.bincount((hour.arrival_s // 60).astype(int))[:59]
    assert abs(minutes.mean() / 60 - 5.0) < 0.2
    assert minutes.std() < 2 * np.sqrt(minutes.mean())  # Poisson's spread, no bursts
    assert {"flat@60", "flat@300"} <= {s.name for s in scenarios("short")}


def test_the_report_says_what_made_it_and_every_row(tmp_path: Path) -> None:
    import argparse
    import datetime

    rows = [_row("a", 10, (80.0, 0.995)), _row("d", None, (80.0, 0.98))]
    args = argparse.Namespace(scenarios="short", only="", cache=tmp_path, label="", replica=[])
    argv = ["--set", "headroom=0.5", "--report", str(tmp_path)]
    path = write_report(tmp_path, rows, {"a": 0.99, "d": 0.99}, {"policy": {"headroom": 0.5}}, args, argv)
    assert path.name == f"{datetime.date.today().isoformat()}-matrix-short.md"
    labelled = argparse.Namespace(**{**vars(args), "label": "half"})
    assert write_report(tmp_path, rows, {"a": 0.99, "d": 0.99}, {}, labelled, argv).name.endswith("-short-half.md")
    text = path.read_text()
    assert f"Written by `python -m lab.matrix --set headroom=0.5 --report {tmp_path}` (vllm-autoscaler " in text
    assert "\nMachine: " in text
    assert "| a | 10, 100.0 | 90.0 (0.9950) win | 80.0 (0.9950) win |" in text
    assert "| d | none | 90.0 (0.9950) | 80.0 (0.9800) |" in text  # no verdict where no fixed fleet meets


def _checked(
    default: tuple[float, float], keda: tuple[float, float], clairvoyant: float, static: int | None = 10
) -> dict[str, Any]:
    return {
        **_row("x", static),
        "default_gpu_hours": default[0],
        "default_slo": default[1],
        "keda_gpu_hours": keda[0],
        "keda_slo": keda[1],
        "clairvoyant_gpu_hours": clairvoyant,
    }


@pytest.mark.parametrize(
    ("default", "keda", "clairvoyant", "failures"),
    [
        # the fixed fleet costs 100; a diurnal day whose clairvoyant saves 40: at most 80 to pass
        ((80.0, 0.995), (70.0, 0.95), 60.0, []),
        ((85.0, 0.995), (70.0, 0.95), 60.0, ["saves 38% of the clairvoyant's saving"]),
        ((80.0, 0.98), (70.0, 0.95), 60.0, ["misses where the fixed fleet meets"]),
        # keda-sum met the SLO: no dearer than it
        ((80.0, 0.995), (75.0, 0.992), 60.0, ["dearer than keda-sum (75.0)"]),
        # a flat hour: the clairvoyant saves 3 %, so at most 5 % over the fixed fleet
        ((104.0, 0.995), (120.0, 0.95), 97.0, []),
        ((106.0, 0.995), (120.0, 0.95), 97.0, ["6% over the fixed fleet with nothing to save"]),
        # between: only the first two conditions
        ((120.0, 0.995), (130.0, 0.95), 90.0, []),
    ],
)
def test_issue_36s_check(
    default: tuple[float, float], keda: tuple[float, float], clairvoyant: float, failures: list[str]
) -> None:
    assert check_failures(_checked(default, keda, clairvoyant), 0.99) == failures


def test_no_fixed_fleet_meets_no_condition_but_keda_sums() -> None:
    assert check_failures(_checked((200.0, 0.9), (150.0, 0.992), 60.0, static=None), 0.99) == [
        "dearer than keda-sum (150.0)"
    ]


def test_the_summary_counts_the_check() -> None:
    rows = [
        _checked((80.0, 0.995), (70.0, 0.95), 60.0),
        {**_checked((85.0, 0.995), (70.0, 0.95), 60.0), "scenario": "y"},
    ]
    assert summary(rows, {"x": 0.99, "y": 0.99})["default_check"] == {"pass": 1, "fail": 1}


def test_the_reactive_follower_is_judged_by_the_same_check_beside_the_default(tmp_path: Path) -> None:
    """Where the follower of the minute just past fails a condition too, no rule in proportion to the present passes:
    the report and the summary judge it by ``check_failures`` as they judge the default."""
    import argparse

    rows = [
        {**_checked((85.0, 0.995), (70.0, 0.95), 60.0), "reactive_gpu_hours": 82.0, "reactive_slo": 0.991},
        {
            **_checked((85.0, 0.995), (70.0, 0.95), 60.0),
            "scenario": "y",
            "reactive_gpu_hours": 78.0,
            "reactive_slo": 0.99,
        },
    ]
    targets = {"x": 0.99, "y": 0.99}
    assert summary(rows, targets)["reactive_check"] == {"pass": 1, "fail": 1}
    assert summary(rows, targets)["default_check"] == {"pass": 0, "fail": 2, "reactive_fails_too": 1}
    args = argparse.Namespace(scenarios="short", only="", cache=tmp_path, label="", replica=[])
    text = write_report(tmp_path, rows, targets, {"check": True}, args, ["--check"]).read_text()
    assert "| check (default) | check (reactive) |" in text
    assert (
        "| x | 10, 100.0 | 70.0 (0.9500) | 60.0 | 85.0 (0.9950) win | 82.0 (0.9910) win | saves 38% of the "
        "clairvoyant's saving | saves 45% of the clairvoyant's saving |"
    ) in text
    assert "| y | 10, 100.0 | 70.0 (0.9500) | 60.0 | 85.0 (0.9950) win | 78.0 (0.9900) win | saves 38%" in text


@pytest.fixture
def quarter_day(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every set made of one scenario, a quarter of a small generator's day at 60 s; ``--check``'s arguments for it,
    with its cache and its rows (``--out``) in ``tmp_path``."""
    from functools import partial

    import lab.matrix as matrix
    import simulations.jobs as simulation_jobs
    from lab.matrix import Scenario
    from simulations.traces import synthetic_day

    tiny = Scenario("quarter@60", partial(synthetic_day, 0, 2.0, 0.25, 1), 60)
    monkeypatch.setattr(matrix, "scenarios", lambda which: [tiny])
    monkeypatch.setattr(simulation_jobs, "PARALLEL_MIN_REQUESTS", simulation_jobs.PARALLEL_MIN_REQUESTS)  # main sets it
    return ["--check", "--jobs", "1", "--cache", str(tmp_path / "cache"), "--out", str(tmp_path / "rows.json")]


def test_the_check_runs_its_baselines_once_and_reads_them_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, quarter_day: list[str]
) -> None:
    """``--check`` runs keda-sum, the clairvoyant and the reactive follower beside the default, caches them with the
    scenario and reads them back on the next run; ``--out`` carries the utilization the follower's search found."""
    import json

    import lab.matrix as matrix
    from lab.matrix import main

    out, cache, args = tmp_path / "rows.json", tmp_path / "cache", quarter_day
    assert main(args) == 0
    [row] = json.loads(out.read_text())
    assert row["reactive_slo"] >= 0.99 and row["reactive_gpu_hours"] >= row["clairvoyant_gpu_hours"]
    assert 0 < row["reactive_setting"]["utilization"] <= 1
    [cached] = cache.iterdir()
    assert json.loads(cached.read_text())["reactive_utilization"] == row["reactive_setting"]["utilization"]

    def never(*_: object, **__: object) -> None:
        raise AssertionError("a cached baseline was run again")

    monkeypatch.setattr(matrix, "reactive", never)
    monkeypatch.setattr(matrix, "clairvoyant", never)
    assert main(args) == 0
    [again] = json.loads(out.read_text())
    assert again == {**row, "elapsed_s": again["elapsed_s"]}


def test_the_follower_told_one_utilization_runs_as_the_searched_one_at_it(
    tmp_path: Path, quarter_day: list[str]
) -> None:
    """``--reactive-at U`` runs the reactive follower at ``U`` on every scenario, no search: told the utilization its
    search found, it makes that run again to the request; the report says what it is and judges it by the check."""
    import json

    from lab.matrix import main

    out, common = tmp_path / "rows.json", quarter_day
    assert main(common) == 0
    [searched] = json.loads(out.read_text())
    found = searched["reactive_setting"]["utilization"]
    assert main([*common, "--reactive-at", str(found), "--report", str(tmp_path), "--label", "told"]) == 0
    [row] = json.loads(out.read_text())
    assert (row["reactive_fixed_gpu_hours"], row["reactive_fixed_slo"]) == (
        searched["reactive_gpu_hours"],
        searched["reactive_slo"],
    )
    assert row["reactive_fixed_setting"] == {"utilization": found}
    assert "variant_gpu_hours" not in row  # a told follower is not a variant of the default
    assert main([*common, "--reactive-at", "0.05"]) == 0
    [lean] = json.loads(out.read_text())
    assert lean["reactive_fixed_gpu_hours"] > row["reactive_fixed_gpu_hours"]  # a twentieth of the work per replica
    [report] = tmp_path.glob("*matrix-short-told.md")
    text = report.read_text()
    assert f"told one utilization, {found}, on every run" in text and "| check (reactive fixed) |" in text
    assert "no variant, the default alone" in text


def test_the_follower_told_one_utilization_needs_the_check_and_a_utilization(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from lab.matrix import main

    for args in (["--reactive-at", "0.4"], ["--check", "--reactive-at", "1.5"], ["--check", "--reactive-at", "0"]):
        assert main([*args, "--only", "nothing"]) == 2
        assert capsys.readouterr().err.startswith("error: --reactive-at: a utilization in (0, 1], with --check")


def test_a_replica_override_sizes_and_caches_each_scenario_apart(tmp_path: Path) -> None:
    """``--replica`` changes every scenario's replica model, as ``simulate --replica`` does; its runs are cached
    apart from the default replica's, and the report says which replica it ran."""
    import argparse

    from lab.matrix import _cached_path, scenario_model

    plain = next(s for s in scenarios("short") if s.name == "flat@60")
    fast = replace(plain, replica=("prefill_tokens_per_s=2500",))
    assert scenario_model(fast).prefill_tokens_per_s == 2500 and scenario_model(fast).cold_start_s == 60
    assert scenario_model(plain).prefill_tokens_per_s != 2500
    assert _cached_path(fast, tmp_path) != _cached_path(plain, tmp_path)
    args = argparse.Namespace(scenarios="short", only="flat", cache=tmp_path, label="fast", replica=list(fast.replica))
    path = write_report(tmp_path, [_row("a", 10, (80.0, 0.995))], {"a": 0.99}, {}, args, [])
    assert "the replica with `prefill_tokens_per_s=2500`" in path.read_text()


def test_a_bad_replica_override_is_a_one_line_error(capsys: pytest.CaptureFixture[str]) -> None:
    from lab.matrix import main

    assert main(["--replica", "warp_factor=9", "--only", "nothing"]) == 2
    assert capsys.readouterr().err.startswith("error: --replica 'warp_factor=9': expected KEY=VALUE with KEY one of")
