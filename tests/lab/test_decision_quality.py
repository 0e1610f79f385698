"""The decision-quality lab's fixed fleet of a recording (``lab/decision_quality.py``); its runs are the
simulator's own."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from lab.decision_quality import recorded_fleet, write_stretched_hour
from simulations.replica_model import ReplicaModel
from simulations.sizing import fixed_run
from simulations.traces import Trace, load_trace


def busy_minutes() -> Trace:
    """Five minutes of chat-like requests, ten a second: a fleet of several replicas, found in a few runs."""
    rng = np.random.default_rng(3)
    arrivals = np.sort(rng.uniform(0.0, 300.0, 3000))
    prompt = np.clip(rng.lognormal(np.log(1000), 0.5, 3000), 1, None).astype(np.int64)
    output = np.clip(rng.lognormal(np.log(200), 0.6, 3000), 1, None).astype(np.int64)
    return Trace("busy", arrivals, prompt, output, builtin_lengths=True)


def test_the_recording_s_fixed_fleet_is_the_fewest_that_meet_the_slo() -> None:
    trace, model = busy_minutes(), ReplicaModel()
    fleet = recorded_fleet(trace, model, 2.0, 0.99)
    assert fixed_run(trace, model, fleet, 2.0).meets(0.99)
    assert not fixed_run(trace, model, fleet - 1, 2.0).meets(0.99)


def test_the_hour_made_burstier_keeps_its_requests_and_plays_its_stretches_fast_and_slow(tmp_path: Path) -> None:
    """Six-minute stretches of the trace's own time, played at 2.5 then 0.6 times its speed: 100 s in is 40 s in,
    the second stretch starts at 144 s, 40 s into it is 144 + 66.7 s, the third starts at 144 + 600 s."""
    source, out = tmp_path / "hour.csv", tmp_path / "stretched.csv"
    stamps = ["2023-11-16 18:00:00.0000000", "2023-11-16 18:01:40.0000000", "2023-11-16 18:06:00.0000000"]
    stamps += ["2023-11-16 18:06:40.0000000", "2023-11-16 18:12:00.0000000"]
    source.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n" + "".join(f"{t},{i + 1},{i + 2}\n" for i, t in enumerate(stamps))
    )
    write_stretched_hour(source, out)
    trace = load_trace(out, "azure", 0)
    assert trace.arrival_s == pytest.approx([0.0, 40.0, 144.0, 144.0 + 40 / 0.6, 744.0], abs=1e-5)
    assert list(trace.prompt_tokens) == [1, 2, 3, 4, 5] and list(trace.output_tokens) == [2, 3, 4, 5, 6]
