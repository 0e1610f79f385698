"""lab/held_out.py: the bars a probe's report is judged by, and probes that ``simulate`` parses."""

from __future__ import annotations

from typing import Any

import pytest

from lab.decision_quality import case_request
from lab.held_out import PROBES, failed_bars


def runs(mine: tuple[float, float], keda: tuple[float, float], best: float, clairvoyant: float) -> dict[str, Any]:
    """A report's results by policy: predictive and keda-sum as (GPU-hours, attainment), static-best meeting."""
    return {
        "predictive": {"gpu_hours": mine[0], "slo_attainment": mine[1]},
        "keda-sum": {"gpu_hours": keda[0], "slo_attainment": keda[1]},
        "static-best": {"gpu_hours": best, "slo_attainment": 0.995},
        "clairvoyant": {"gpu_hours": clairvoyant, "slo_attainment": 0.992},
    }


@pytest.mark.parametrize(
    ("kind", "results", "failed"),
    [
        ("days", runs((80, 0.992), (300, 0.9), 100, 70), []),
        ("days", runs((80, 0.985), (300, 0.9), 100, 70), ["misses the SLO"]),
        ("days", runs((90, 0.992), (85, 0.991), 100, 70), ["costs more than keda-sum, which meets the SLO"]),
        ("days", runs((90, 0.992), (300, 0.9), 100, 60), ["saves under 15% where the clairvoyant saves 35%"]),
        ("days", runs((84, 0.992), (300, 0.9), 100, 60), []),  # 16 % where the clairvoyant saves 40 %
        ("flat hour", runs((114, 0.991), (90, 0.95), 100, 98), []),
        ("flat hour", runs((116, 0.991), (90, 0.95), 100, 98), ["over 1.15 times static-best"]),
        ("flat hour", runs((100, 0.98), (90, 0.95), 100, 98), ["misses the SLO"]),
        ("bursty hour", runs((100, 0.96), (90, 0.95), 100, 98), []),  # misses, as no causal rule could meet it
        ("bursty hour", runs((100, 0.94), (90, 0.95), 100, 98), ["attains less than keda-sum"]),
        ("bursty hour", runs((101, 0.99), (90, 0.95), 100, 98), ["costs more than static-best"]),
    ],
)
def test_a_probe_is_judged_by_the_bars_of_its_kind(kind: str, results: dict[str, Any], failed: list[str]) -> None:
    assert failed_bars(kind, results, 0.99) == failed


def test_a_flat_hour_that_static_best_misses_too_is_not_held_to_the_slo() -> None:
    results = runs((100, 0.98), (90, 0.95), 100, 98)
    results["static-best"]["slo_attainment"] = 0.985
    assert failed_bars("flat hour", results, 0.99) == []


@pytest.mark.parametrize(("title", "kind", "case", "batch"), PROBES)
def test_every_probe_is_a_simulate_command(title: str, kind: str, case: list[str], batch: int) -> None:
    request = case_request(case, batch)
    assert request.slo_ttft is not None and request.slo_target is not None
    assert kind in ("days", "flat hour", "bursty hour")
