"""The ``simulate`` command end to end (``autoscaler.cli``): its options, errors and reports."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from autoscaler.cli import main
from autoscaler.testing.servers import wait_for
from policies.policy_file import parse_policy_document
from simulations.builtin import builtin_policy
from simulations.replica_model import ReplicaModel
from simulations.report import load_line
from simulations.traces import synthetic_day
from tests.helpers import assert_report_consistent, child_processes, deliverable, policy_file, workload_doc


def test_a_load_beyond_max_replicas_is_named_in_the_verdict(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    heavy = tmp_path / "heavy.jsonl"
    heavy.write_text(
        "".join(f'{{"timestamp": {i * 100}, "input_length": 20000, "output_length": 10}}\n' for i in range(600))
    )
    config = policy_file(tmp_path, maxReplicas=32)
    assert main(["simulate", "--config", str(config), "--trace", str(heavy)]) == 0
    captured = capsys.readouterr()
    says = "no run meets the SLO target (99%), not even 32 fixed replicas; the oracle's busiest minute takes"
    assert says in captured.out
    assert "more than maxReplicas" in captured.out
    assert "maxReplicas" not in captured.err  # a file's bounds are the user's: the comparison keeps them


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--cold-start", "inf"], "argument --cold-start: 'inf' is not a finite number"),
        (["--slo-ttft", "nan"], "argument --slo-ttft: 'nan' is not a finite number"),
        (["--seed", "-1"], "argument --seed: '-1' is not a whole number"),
        (["--cold-start", "-5"], "--cold-start must be a number of seconds, 0 or more"),
        (["--replica", "prefill_tokens_per_s=inf"], "--replica prefill_tokens_per_s: Input should be a finite number"),
        (["--trace", "."], ".: not a file"),
        (["--window", "2h:1h"], "argument --window: '2h:1h': the window ends before it starts"),
        (["--window", "90m"], "argument --window: '90m' is not START:END, each a duration"),
        (["--window", "1x:2h"], "argument --window: '1x:2h' is not START:END"),
        (["--window", "2d:"], "no request arrives within the --window"),
    ],
)
def test_options_that_mean_nothing_are_refused(args: list[str], says: str, capsys: pytest.CaptureFixture[str]) -> None:
    try:
        code = main(["simulate", *args])
    except SystemExit as exc:  # argparse refuses the option's type itself
        code = exc.code
    assert code == 2 and says in capsys.readouterr().err


def test_a_binary_file_is_not_a_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    binary = tmp_path / "weights.csv"
    binary.write_bytes(b"TIMESTAMP,ContextTokens,GeneratedTokens\n\xb3\x00\xff")
    assert main(["simulate", "--trace", str(binary)]) == 2
    assert "weights.csv: cannot read it as a text trace ('utf-8' codec can't decode" in capsys.readouterr().err


def test_the_report_gives_the_settings_each_policy_ran_with(tmp_path: Path) -> None:
    """The default headroom follows the cold start, so the report says which one a run used."""
    out = tmp_path / "r.json"
    assert (
        main(["simulate", "--time-scale", "8", "--cold-start", "600", "--policy", "predictive", "--out", str(out)]) == 0
    )
    data = json.loads(out.read_text())
    # The built-in day's requests are the built-in distribution's, and 2 s is the reference SLO.
    assert data["model"]["builtin_target_shares"] == {"prompt_tokens_per_second": 1.0, "num_requests_running": 1.0}
    assert data["model"]["builtin_replica_share"] == 1.0  # the built-in replica
    assert "builtin_pooling_gain" not in data["model"]  # the default follows its work: no pooling gain to size
    runs = {r["policy"]: r for r in data["results"]}
    settings = runs["predictive"]["settings"]
    # Where the run ended: the utilization the budget moved it to, and the share of the day's budget spent.
    learned, used = settings.pop("learnedUtilization"), settings.pop("budgetUsed")
    # The plan: the eightfold day swings within its 600 s cold start, so following it would buy replicas for rises
    # gone before they serve; the follower holds a fixed fleet as its floor and runs hot above it.
    start, floor = settings["utilization"]["start"], settings["utilization"]["floorReplicas"]
    assert 0.05 <= learned <= 1.0 and used >= 0 and 0.05 < start <= 1.0
    assert floor == data["model"]["builtin_floor_replicas"] > 0
    assert settings == {
        "type": "predictive",
        "tolerance": 0.1,
        "minRiseReplicas": 0.5,
        # the built-in replica's idle speed and overhead, the built-in lengths' spread
        "errorBudget": {"prefillTokensPerSecond": 976.6, "requestOverheadSeconds": 0.05, "promptLengthSigma": 0.5},
        # the plan's, at the replica's prefill and its generation at the batch of the built-in lengths it holds
        "utilization": {
            "start": start,
            "prefillTokensPerSecond": 1000.0,
            "decodeTokensPerSecond": 309.3,
            "floorReplicas": floor,
            "plannedRequests": data["requests"],  # the day's, which the start weighs against warming
        },
        "horizonSeconds": 615.0,
        "trend": {"windowSeconds": 1230.0, "maxGrowth": 0.5},
    }
    assert runs["keda-sum"]["settings"]["type"] == "threshold" and "settings" not in runs["static-best"]


def test_the_same_seed_gives_the_same_report(tmp_path: Path) -> None:
    outs = []
    for name in ("a.json", "b.json"):
        path = tmp_path / name
        assert main(["simulate", "--seed", "4", "--window", ":30m", "--policy", "threshold", "--out", str(path)]) == 0
        outs.append(json.loads(path.read_text()))
    assert outs[0] == outs[1]
    policies = {r["policy"] for r in outs[0]["results"]}
    assert policies == {"threshold", "keda-avg", "keda-sum", "reactive", "clairvoyant", "static-best", "oracle"}


def test_simulate_on_a_real_trace(shared_trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out, png = tmp_path / "r.json", tmp_path / "r.png"
    code = main(
        [
            "simulate",
            "--trace",
            str(shared_trace / "mooncake_synthetic.jsonl"),
            "--policy",
            "predictive",
            "--cold-start",
            "60",
            "--replica",
            "prefill_tokens_per_s=20000",
            "--out",
            str(out),
            "--plot",
            str(png),
        ]
    )
    assert code == 0
    data = json.loads(out.read_text())
    assert data["requests"] == 3993 and data["model"]["cold_start_s"] == 60
    assert data["model"]["prefill_tokens_per_s"] == 20000 and data["model"]["prefix_caching"] is True
    # About two thirds of the trace's prompt tokens repeat an earlier prompt's prefix.
    assert 0.6 < data["prefix_reuse"] < 0.7
    assert png.read_bytes()[:4] == b"\x89PNG"
    assert_report_consistent(data)
    printed = capsys.readouterr().out.splitlines()
    assert printed[1] == load_line(data["load"]) and printed[1].startswith("load: 3.91 requests/s")


def test_simulate_rejects_a_metric_it_cannot_provide(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    policy = tmp_path / "p.yaml"
    policy.write_text(
        "workloads:\n- target: {namespace: a, name: b}\n  maxReplicas: 4\n  metrics:\n"
        "  - {name: gpu_temperature, query: 'max(DCGM_FI_DEV_GPU_TEMP)', target: {value: 80}}\n"
    )
    assert main(["simulate", "--config", str(policy), "--time-scale", "8"]) == 2
    assert "cannot provide metric 'gpu_temperature'" in capsys.readouterr().err


def test_the_policy_sees_the_simulated_cold_start(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "r.json"
    trace = tmp_path / "t.csv"
    trace.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        + "".join(f"2023-11-16 18:{m:02d}:00.0000000,500,50\n" for m in range(30))
    )
    policy = policy_file(tmp_path, coldStartSeconds=300)
    args = ["simulate", "--config", str(policy), "--trace", str(trace), "--cold-start", "42", "--policy", "predictive"]
    assert main([*args, "--out", str(out)]) == 0
    from simulations.contenders import policy_contender

    document = builtin_policy()  # a file's coldStartSeconds (300) gives way to the replicas' own
    contender = policy_contender(document, document.workloads[0], ReplicaModel(cold_start_s=42))
    assert contender.decider is not None and contender.decider.policy.horizon == 42 + document.interval  # type: ignore[attr-defined]
    assert json.loads(out.read_text())["model"]["cold_start_s"] == 42


def test_simulate_runs_a_window_of_the_trace(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    assert main(["simulate", "--window", "1h:90m", "--policy", "threshold", "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    day = synthetic_day()
    within = (day.arrival_s >= 3600) & (day.arrival_s < 5400)
    assert data["requests"] == int(within.sum()) and data["duration_s"] < 1800
    assert data["trace"].endswith("[1h:90m]") and data["model"]["window_s"] == [3600, 5400]
    assert_report_consistent(data)


def test_a_report_on_a_few_requests_is_consistent(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A trace of seconds, with a prompt longer than the cache: the oracle counts the span the runs count,
    and the verdict does not divide by a cost of zero."""
    short = tmp_path / "short.csv"
    short.write_text(
        "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
        "5,m,100,10,110,x\n1,m,100,0,100,x\n3,m,200000,10,200010,x\n"
    )
    out = tmp_path / "r.json"
    assert main(["simulate", "--trace", str(short), "--policy", "predictive", "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    assert_report_consistent(data)
    assert data["model"]["static_best_replicas"] == 2
    single = tmp_path / "single.csv"
    single.write_text("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n5,m,100,10,110,x\n")
    policy = policy_file(tmp_path)  # the built-in workload's load tests were run on the three requests above
    assert main(["simulate", "--config", str(policy), "--trace", str(single), "--policy", "predictive"]) == 0
    assert "the trace spans no time" in capsys.readouterr().out


def test_ctrl_c_during_a_simulation_is_one_line_and_exit_130(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import simulations.request as front_door

    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(front_door, "compare", interrupted)
    assert main(["simulate", "--time-scale", "8"]) == 130
    captured = capsys.readouterr()
    # Before it, only the notes on how the built-in workload was sized.
    *notes, last = captured.err.strip().splitlines()
    assert last == "vllm-autoscaler: interrupted" and captured.out == ""
    assert all(line.startswith("vllm-autoscaler: note:") for line in notes)


def test_an_output_that_cannot_be_written_is_refused_before_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "no" / "plot.png"
    assert main(["simulate", "--time-scale", "8", "--plot", str(missing)]) == 2
    captured = capsys.readouterr()
    assert f"{missing}: no such directory" in captured.err and captured.out == ""
    assert main(["simulate", "--time-scale", "8", "--out", str(tmp_path)]) == 2
    assert "is a directory" in capsys.readouterr().err
    if Path("/dev/full").exists():  # passes that check, fails on the write: the table stays printed
        policy = policy_file(tmp_path)
        args = ["simulate", "--config", str(policy), "--window", ":10m", "--policy", "threshold"]
        assert main([*args, "--out", "/dev/full"]) == 1
        captured = capsys.readouterr()
        assert "cannot write /dev/full: No space left on device" in captured.err and "static-best" in captured.out


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        ([], (5.0, 0.95)),  # the file's slo block
        (["--slo-ttft", "1.5"], (1.5, 0.95)),  # each flag given wins
        (["--slo-target", "0.9"], (5.0, 0.9)),
    ],
)
def test_simulate_judges_by_the_files_slo_unless_a_flag_says(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str], expected: tuple[float, float]
) -> None:
    config = policy_file(tmp_path, slo={"ttftSeconds": "5s", "target": 0.95})
    assert main(["-q", "simulate", "--config", str(config), "--time-scale", "8", "-o", "json", *flags]) == 0
    model = json.loads(capsys.readouterr().out)["model"]
    assert (model["slo_ttft_s"], model["slo_target"]) == expected


def test_given_only_an_slo_simulate_measures_the_capacity_and_runs_the_builtin_default(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A file with an slo and no metrics or capacity runs exactly as the built-in workload sized for the same
    SLO does, and --write-config writes the capacity it measured, which run then takes."""
    # 95 %: the first half hour of the built-in day's surges, which the default meets at 97 % (not 99 %).
    raw = workload_doc(slo={"ttftSeconds": 2, "target": 0.95}, minReplicas=2, maxReplicas=32)
    del raw["workloads"][0]["metrics"]
    config = tmp_path / "slo.yaml"
    config.write_text(yaml.safe_dump(raw))
    written = tmp_path / "written.yaml"
    common = ["-q", "simulate", "--window", ":30m", "--cold-start", "60", "--slo-target", "0.95", "-o", "json"]
    assert main([*common, "--config", str(config), "--write-config", str(written)]) == 0
    given = {r["policy"]: r for r in json.loads(capsys.readouterr().out)["results"]}
    assert main([*common, "--policy", "predictive"]) == 0
    builtin = {r["policy"]: r for r in json.loads(capsys.readouterr().out)["results"]}
    assert given["predictive"]["gpu_hours"] == builtin["predictive"]["gpu_hours"]
    workload = yaml.safe_load(written.read_text())["workloads"][0]
    assert "metrics" not in workload and workload["capacity"]["promptTokensPerSecond"] > 0
    assert workload["policy"]["type"] == "predictive"
    # The built-in's error budget, counted with the simulated replica's idle prefill speed and the spread of the
    # trace's prompt lengths, goes with it.
    budget = workload["policy"]["errorBudget"]
    assert budget == {"prefillTokensPerSecond": 976.6, "requestOverheadSeconds": 0.05, "promptLengthSigma": 0.5}
    # Only what the default that follows its work uses: no headroom or pooling.
    assert set(workload["policy"]) == {"type", "errorBudget", "utilization"}
    assert (
        parse_policy_document(yaml.safe_load(written.read_text())).workloads[0].metrics[0].target.value
        == (workload["capacity"]["promptTokensPerSecond"])
    )


ROOT = Path(__file__).resolve().parents[1]


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.parametrize(
    ("sent", "code", "said"), [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated")]
)
def test_a_stopped_simulation_leaves_no_worker_behind(
    shared_trace: Path, tmp_path: Path, sent: signal.Signals, code: int, said: str
) -> None:
    """``simulate --tune`` on a long trace runs worker processes, one per core (``--jobs 2`` here); Ctrl-C or
    SIGTERM to the command ends it and every worker within 2 s, with one line and 130 or 143."""
    command = [
        sys.executable,
        "-m",
        "autoscaler",
        "simulate",
        "--config",
        str(policy_file(tmp_path)),
        *("--trace", str(shared_trace / "servegen_m-mid_rate_600s.csv"), "--format", "rate"),
        *("--window", ":1d", "--rate-scale", "0.001"),
        *("--tune", "--jobs", "2", "-q"),
    ]
    with deliverable(sent):
        process = subprocess.Popen(
            command, cwd=ROOT, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
    try:
        workers = wait_for(lambda: child_processes(process.pid), 120, "the simulation's worker processes")
        assert len(workers) <= 2
        process.send_signal(sent)
        sent_at = time.monotonic()
        wait_for(lambda: process.poll() is not None and not _group_alive(process.pid), 10, "every process to end")
        assert time.monotonic() - sent_at <= 2.0
        assert process.returncode == code
        assert process.stderr is not None
        assert process.stderr.read().decode().strip().splitlines()[-1] == f"vllm-autoscaler: {said}"
    finally:
        if _group_alive(process.pid):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def test_jobs_must_be_a_count(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--jobs", "0"]) == 2
    assert "--jobs: '0' is not a whole number, 1 or more" in capsys.readouterr().err
