"""The decision-quality lab's fixed fleet of a recording (``lab/decision_quality.py``); its runs are the
simulator's own."""

from __future__ import annotations

import numpy as np

from lab.decision_quality import recorded_fleet
from simulations.replica_model import ReplicaModel
from simulations.sizing import fixed_run
from simulations.traces import Trace


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
