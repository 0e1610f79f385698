"""``simulate --write-config`` (``simulations.deployable``): the written file runs as it was simulated."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autoscaler.cli import main
from policies.predictive import with_settings
from policies.spec import Slo
from simulations.builtin import builtin_policy
from simulations.replica_model import ReplicaModel
from simulations.runner import RunResult
from simulations.traces import synthetic_day
from tests.helpers import policy_file


def test_the_written_policy_file_runs_the_cheapest_policy_as_it_was_simulated(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--write-config`` closes the loop from a comparison to ``run``: the file loads, names the cheapest
    policy that met the SLO with the setting it was tuned to, and simulated again gives the same result."""
    from simulations.traces import write_azure

    trace = tmp_path / "half-hour.csv"
    write_azure(synthetic_day(seed=4, mean_rps=1.5, hours=0.5, bursts=2), trace)
    written, first, again = tmp_path / "tuned.yaml", tmp_path / "first.json", tmp_path / "again.json"
    common = ["simulate", "--trace", str(trace), "--cold-start", "120"]
    tuning = ["--tune", "--policy", "threshold", "--policy", "predictive"]
    assert main([*common, *tuning, "--write-config", str(written), "--out", str(first)]) == 0
    runs = {r["policy"]: r for r in json.loads(first.read_text())["results"]}
    meeting = [runs[p] for p in ("threshold", "predictive") if runs[p]["slo_attainment"] >= 0.99]
    assert meeting, "the test needs a policy that meets the SLO"
    best = min(meeting, key=lambda r: r["gpu_hours"])
    text = written.read_text()
    assert text.startswith(f"# Written by `vllm-autoscaler simulate` for llm-serving/vllm-llama3-70b: {best['policy']}")
    assert f"wrote {best['policy']} to {written}" in capsys.readouterr().err
    from policies.policy_file import load_policy_file

    document = load_policy_file(str(written))
    workload = document.workloads[0]
    assert workload.policy_type == best["policy"] and workload.cold_start_seconds == 120
    assert workload.slo == Slo(ttftSeconds=2, target=0.99)  # what it was sized for, from the flags' defaults
    for knob, value in best["tuned"].items():
        if knob == "target":  # the file's own target, if it was the one, to the four decimals tuning names
            assert workload.metrics[0].target.value == pytest.approx(value, abs=5e-5)
        elif workload.policy_type == "predictive":  # applying the setting again changes nothing in the file
            assert with_settings(dict(workload.policy), {knob: value}) == workload.policy
        else:
            assert workload.policy[knob] == value
    assert main([*common, "--config", str(written), "--out", str(again)]) == 0
    rerun = next(r for r in json.loads(again.read_text())["results"] if r["policy"] == best["policy"])
    assert (rerun["gpu_hours"], rerun["slo_attainment"]) == (best["gpu_hours"], best["slo_attainment"])


def test_no_policy_file_is_written_when_no_policy_met_the_slo(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    written = tmp_path / "tuned.yaml"
    # One replica cannot carry the built-in day's load: nothing meets the SLO.
    policy = policy_file(tmp_path, maxReplicas=1)
    args = ["simulate", "--config", str(policy), "--window", ":20m", "--policy", "threshold"]
    assert main([*args, "--write-config", str(written)]) == 1
    assert "no policy met the SLO target (99%); nothing written to" in capsys.readouterr().err
    assert not written.exists()


def test_the_written_file_runs_predictive_at_threshold_capacity_as_tuning_found_it() -> None:
    """Tuning may find predictive's cheapest setting in threshold's decisions: its targets scaled, headroom
    0 and its extras off. The file written from it scales the targets as the run did."""
    from policies.policy_file import parse_policy_document
    from simulations.deployable import deployable
    from simulations.tuning import knob_variant

    document = builtin_policy(ReplicaModel(prefill_tokens_per_s=987.654321))
    workload = document.workloads[0]
    setting = {"target": 404.8088, "headroom": 0.0, "maxGrowth": 0.5, "minRiseReplicas": 0.0, "poolingGain": 0.0}
    tuned = RunResult("predictive", 1.0, 1.0, None, None, None, 1, 0, 0, 1, setting)
    written = parse_policy_document(deployable(document, tuned, cold_start_s=300.0)).workloads[0]
    _, ran = knob_variant(document, workload, "predictive", setting)
    assert written.metrics == ran.metrics and written.metrics[0].target.value == 404.8088
    scale = 404.8088 / workload.metrics[0].target.value
    assert written.metrics[1].target.value == pytest.approx(workload.metrics[1].target.value * scale)
    # As the policy file names them: the trend's cap in its block, the pooling off (no block).
    assert written.policy == {
        "type": "predictive",
        "headroom": 0.0,
        "minRiseReplicas": 0.0,
        "trend": {"maxGrowth": 0.5},
    }


def test_the_written_file_keeps_the_other_workloads_and_a_measured_cold_start() -> None:
    from policies.policy_file import parse_policy_document
    from simulations.deployable import deployable

    raw = builtin_policy().workloads[0].model_dump(by_alias=True, exclude_none=True, mode="json")
    first = {**raw, "coldStartSeconds": "auto"}
    second = {**raw, "target": {"namespace": "llm-serving", "name": "other"}}
    document = parse_policy_document({"interval": 30, "workloads": [first, second]})
    tuned = RunResult("predictive", 1.0, 1.0, None, None, None, 1, 0, 0, 1, {"headroom": 0.25, "maxGrowth": 0.0})
    written = parse_policy_document(deployable(document, tuned, cold_start_s=95.0))
    assert written.interval == 30 and len(written.workloads) == 2
    assert written.workloads[0].policy == {"type": "predictive", "headroom": 0.25, "trend": {"maxGrowth": 0.0}}
    assert written.workloads[0].cold_start_seconds == "auto"  # the daemon measures it; the run's 95 s was one guess
    assert written.workloads[1] == document.workloads[1]
    assert written.workloads[0].metrics == document.workloads[0].metrics
