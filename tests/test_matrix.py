"""The policy matrix benchmark's verdicts (``simulations/matrix.py``); its runs are the simulator's own."""

from __future__ import annotations

from typing import Any

from simulations.matrix import scenarios, summary


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
