"""The policy matrix benchmark's verdicts (``simulations/matrix.py``); its runs are the simulator's own."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from simulations.matrix import SERVEGEN, SERVEGEN_DAY_WINDOWS, scenarios, servegen_whole_days, summary, write_report


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
    for which in ("short", "long"):
        names = [s.name for s in scenarios(which)]
        assert len(names) == len(set(names))


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


def test_the_report_says_what_made_it_and_every_row(tmp_path: Path) -> None:
    import argparse
    import datetime

    rows = [_row("a", 10, (80.0, 0.995)), _row("d", None, (80.0, 0.98))]
    args = argparse.Namespace(scenarios="short", only="", cache=tmp_path)
    argv = ["--set", "headroom=0.5", "--report", str(tmp_path)]
    path = write_report(tmp_path, rows, {"a": 0.99, "d": 0.99}, {"policy": {"headroom": 0.5}}, args, argv)
    assert path.name == f"{datetime.date.today().isoformat()}-matrix-short.md"
    text = path.read_text()
    assert f"Written by `python -m simulations.matrix --set headroom=0.5 --report {tmp_path}` (vllm-autoscaler " in text
    assert "\nMachine: " in text
    assert "| a | 10, 100.0 | 90.0 (0.9950) win | 80.0 (0.9950) win |" in text
    assert "| d | none | 90.0 (0.9950) | 80.0 (0.9800) |" in text  # no verdict where no fixed fleet meets
