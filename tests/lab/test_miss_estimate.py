"""The measurement of the histogram's miss count against the judged misses (``simulations/miss_estimate.py``)."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path

import numpy as np
import pytest

import lab.miss_estimate as miss_estimate
from lab.matrix import Scenario
from lab.miss_estimate import Case, Minute, minute_counters, read_minutes, table
from simulations.fleet import Fleet
from simulations.replica_model import ReplicaModel
from simulations.traces import synthetic_day
from tests.helpers import poisson_trace


def test_each_minute_counts_the_first_tokens_its_scrapes_count() -> None:
    """The judged requests of a minute are those whose first token came between its two scrapes: the same ones
    the histogram's count rose by. A light load misses nothing, and the estimate says so."""
    model = ReplicaModel()
    fleet = Fleet(model, poisson_trace(1.0, 300, 500, 50), 2)
    counted, now = [], 0.0
    while not fleet.done or now < fleet.trace.arrival_s[-1]:
        fleet.step(now)
        if now % 60 == 0 and (minute := minute_counters(fleet, now)) is not None:
            counted.append(minute)
        now += model.step_s
    speed = 1.0 / float(model.idle_prefill_s(np.array([1.0]))[0])
    minutes = read_minutes(fleet, counted, 2.0, speed, fleet.trace.prompt_length_sigma)
    assert minutes and [m.first_tokens for m in minutes] == [int(c[3]) for c in counted if c[3] > 0]
    assert sum(m.misses for m in minutes) == 0
    assert sum(m.estimated_misses for m in minutes) < 0.01 * sum(m.first_tokens for m in minutes)


def test_the_table_gathers_minutes_by_their_estimated_mean() -> None:
    lines = table([Minute(0.05, 0.0, 100, 0), Minute(0.15, 1.0, 100, 2), Minute(3.0, 90.0, 100, 80)])
    assert lines[2:] == [
        "| up to 0.1 | 1 | 100 | 0.00% | 0.00% |",
        "| 0.1 to 0.2 | 1 | 100 | 2.00% | 1.00% |",
        "| over 2 | 1 | 100 | 80.00% | 90.00% |",
    ]


def test_the_command_writes_a_dated_report_from_the_matrixs_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tiny = Scenario("quarter@60", partial(synthetic_day, 0, 2.0, 0.25, 1), 60)
    monkeypatch.setattr(miss_estimate, "scenarios", lambda which: [tiny])
    monkeypatch.setattr(miss_estimate, "CHOSEN_ON", (Case("short", "quarter@60", 0.0),))
    monkeypatch.setattr(miss_estimate, "HELD_OUT", (Case("short", "quarter@60", 0.2, slo=1.0),))
    monkeypatch.setattr(miss_estimate, "UNDER_DEFAULT", (Case("short", "quarter@60", None, slo=1.5),))
    args = ["--cache", str(tmp_path / "cache"), "--report", str(tmp_path)]
    assert miss_estimate.main(args) == 0
    assert len(list((tmp_path / "cache").iterdir())) == 1  # sized once, then read back
    report = next(tmp_path.glob("*-miss-estimate.md")).read_text()
    assert "python -m lab.miss_estimate --cache" in report and "Held out" in report
    assert report.count("**quarter@60**") == 1 and report.count("**quarter@60 judged at 1 s**") == 1
    assert "**quarter@60 judged at 1.5 s**, headroom default" in report and "Under the default" in report
    assert "| quarter@60 judged at 1.5 s | default | 1.5 |" in report
    assert report.count("| quarter@60") == 3  # a line of the summary each


def test_a_case_without_a_headroom_runs_the_default_as_it_is(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The third group measures the count where the default spends its budget: its own learned headroom and budget,
    the run the matrix caches as the default's, not the fixed headroom of the other two groups."""
    tiny = Scenario("quarter@60", partial(synthetic_day, 0, 2.0, 0.25, 1), 60)
    monkeypatch.setattr(miss_estimate, "scenarios", lambda which: [tiny])
    cache = tmp_path / "cache"
    own = miss_estimate.measure_case(Case("short", "quarter@60", None), cache)
    fixed = miss_estimate.measure_case(Case("short", "quarter@60", 0.0), cache)
    baseline = json.loads(next(cache.iterdir()).read_text())
    assert own.attainment == pytest.approx(baseline["default_slo"])
    assert own.first_tokens > 0 and own.attainment != fixed.attainment
