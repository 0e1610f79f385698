"""The comparison (``simulations.compare``): worker processes, and the built-in bound that grows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autoscaler.cli import main
from simulations.builtin import builtin_policy
from simulations.compare import compare
from simulations.replica_model import ReplicaModel
from simulations.traces import synthetic_day
from tests.helpers import assert_report_consistent


def test_the_built_in_workload_grows_its_bound_for_a_load_no_fleet_of_32_carries(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A trace heavier than the built-in ``maxReplicas`` (or a slower replica) gets a comparison, not a
    table of runs that all hold the bound and miss: the bound doubles until a fixed fleet meets the SLO."""
    heavy = tmp_path / "heavy.jsonl"
    heavy.write_text(
        "".join(f'{{"timestamp": {i * 50}, "input_length": 2000, "output_length": 20}}\n' for i in range(4000))
    )
    out = tmp_path / "report.json"
    assert main(["simulate", "--trace", str(heavy), "--policy", "threshold", "--out", str(out)]) == 0
    captured = capsys.readouterr()
    assert "no fixed fleet of up to 32 replicas met the SLO, so the built-in workload ran with maxReplicas 64" in (
        captured.err
    )
    data = json.loads(out.read_text())
    assert data["model"]["max_replicas"] == 64
    assert 32 < data["model"]["static_best_replicas"] <= 64
    assert_report_consistent(data)


def test_worker_processes_give_the_same_report_and_start_the_policies_during_the_last_search_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import simulations.jobs as jobs_module
    from simulations.compare import static_best
    from simulations.jobs import Shared

    trace = synthetic_day(seed=2, mean_rps=1.5, hours=0.5, bursts=2)
    model = ReplicaModel(cold_start_s=120)
    document = builtin_policy(model, trace)
    alone = compare(trace, model, document, ["threshold", "predictive"], 2.0, 0.99, progress=False)
    n = alone.static_best_replicas
    assert n is not None and n >= 2
    monkeypatch.setattr(jobs_module, "PARALLEL_MIN_REQUESTS", 0)
    monkeypatch.setattr(jobs_module.os, "cpu_count", lambda: 2)
    forked = compare(trace, model, document, ["threshold", "predictive"], 2.0, 0.99, progress=False)
    assert forked.static_best_replicas == n
    assert [r.to_json() for r in forked.results] == [r.to_json() for r in alone.results]

    policies = {r.policy: r.to_json() for r in alone.results}
    shared = Shared(trace, model, document, document.workloads[0], 32, 2.0, 0.99)
    then: list[tuple[str, object]] = [("policy", "threshold"), ("keda", False)]
    # Fleets n+1 and n+2 meet the target, so the last run tries n alone: the bet on it holds.
    found, run_at_n, ahead = static_best(shared, n, n + 3, 0, then=then)
    assert found == n and run_at_n.to_json() == policies["static-best"]
    assert ahead is not None and [r.to_json() for r in ahead] == [policies["threshold"], policies["keda-sum"]]
    # Fleets n and n+1 meet it, so the last run tries n-1 alone, which misses: the runs begun on it are dropped.
    found, run_at_n, ahead = static_best(shared, n - 1, n + 2, 0, then=then)
    assert found == n and run_at_n.to_json() == policies["static-best"] and ahead is None
