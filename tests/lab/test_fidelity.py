"""The fidelity report's reading of a sweep: a run's load and the knee, on the published files themselves."""

from __future__ import annotations

from pathlib import Path

import pytest

from lab.fidelity import SWEEPS, knee
from simulations.calibration import load_run

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("folder", "knee_at", "loads"),
    [
        # bursts without a concurrency limit: the requests a burst served (924 of 1,000 in the last)
        ("qwen2-7b-a100-kv465k", 200, [1, 10, 20, 30, 50, 75, 100, 200, 500, 924]),
        # a closed loop: the concurrency limit, not the 128 requests every run served
        ("devstral2-123b-4xrtxpro6000-kv1424k", 16, [1, 2, 4, 8, 16, 24, 32, 48, 56, 72]),
    ],
)
def test_a_runs_load_and_the_knee_are_read_from_the_files(folder: str, knee_at: int, loads: list[int]) -> None:
    runs = [load_run(str(path)) for path in sorted((ROOT / "lab" / "sweeps" / folder).glob("*.json"))]
    assert [run.load for run in runs] == loads
    assert knee([(run.load, run.request_throughput) for run in runs]) == knee_at


def test_every_sweep_fits_below_the_runs_it_judges() -> None:
    for sweep in SWEEPS:
        assert sweep.fit_up_to < sweep.near_up_to, sweep.folder
        assert (ROOT / "lab" / "sweeps" / sweep.folder).is_dir(), sweep.folder
