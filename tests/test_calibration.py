"""``calibrate`` and ``simulations.calibration``: reading ``vllm bench serve`` results, fitting the replica, the
warm-cache trap, the replica file, and the fit's prediction of a published sweep's heavy load."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from autoscaler.cli import main
from simulations import calibration
from simulations.calibration import BenchRun, fit, load_run, simulate_run
from simulations.replica_model import ReplicaModel

TRUTH = ReplicaModel(
    kv_cache_tokens=200_000,
    max_num_batched_tokens=8192,
    prefill_tokens_per_s=12_000,
    decode_tokens_per_s=70,
    kv_read_s_per_token=3e-8,
    request_overhead_s=0.04,
)
SWEEPS = Path(__file__).resolve().parents[1] / "lab" / "sweeps"


def _result(concurrency: int, model: ReplicaModel = TRUTH, prompt: int = 1024, output: int = 128) -> dict[str, Any]:
    """A result file as ``vllm bench serve --save-result`` writes it, for a closed loop of ``concurrency``
    requests on ``model``: the figures are the simulated replica's own, its inter-token latencies its TPOT (the
    simulator times no single token)."""
    n = 4 * concurrency
    data: dict[str, Any] = {
        "request_rate": "inf",
        "burstiness": 1.0,
        "max_concurrency": concurrency,
        "completed": n,
        "duration": 1.0,
        "total_input_tokens": prompt * n,
        "total_output_tokens": output * n,
        **{f"{stat}_{m}_ms": 1.0 for stat in ("mean", "median", "p99") for m in ("ttft", "tpot", "itl")},
        "request_throughput": 1.0,
        "output_throughput": 1.0,
    }
    figures = simulate_run(model, BenchRun.model_validate(data)).figures
    data.update(figures, duration=n / figures["request_throughput"])
    data.update({f"{stat}_itl_ms": figures[f"{stat}_tpot_ms"] for stat in ("mean", "median")})
    return data


def _write(folder: Path, name: str, data: dict[str, Any]) -> str:
    path = folder / name
    path.write_text(json.dumps(data))
    return str(path)


def test_the_fit_finds_the_replica_that_made_the_runs() -> None:
    runs = [(f"c{c}", BenchRun.model_validate(_result(c))) for c in (1, 4, 16)]
    model = fit(runs, TRUTH.model_copy(update={"prefill_tokens_per_s": 5_000.0, "decode_tokens_per_s": 40.0}), 30).model
    assert model.prefill_tokens_per_s == pytest.approx(12_000, rel=0.15)
    assert model.decode_tokens_per_s == pytest.approx(70, rel=0.1)
    assert model.request_overhead_s == pytest.approx(0.04, abs=0.02)
    heavy = simulate_run(model, BenchRun.model_validate(_result(48))).figures
    truth = _result(48)
    assert heavy["request_throughput"] == pytest.approx(truth["request_throughput"], rel=0.1)
    assert heavy["median_tpot_ms"] == pytest.approx(truth["median_tpot_ms"], rel=0.15)


def test_a_long_run_is_replayed_in_coarser_steps_to_the_same_figures(monkeypatch: pytest.MonkeyPatch) -> None:
    slow = TRUTH.model_copy(update={"decode_tokens_per_s": 3.0, "prefill_tokens_per_s": 1_000.0})
    run = BenchRun.model_validate(_result(2, slow, prompt=4096, output=1000))
    assert run.duration > calibration.STEPS_A_RUN * calibration.STEP_S  # long enough for the coarser step
    coarse = simulate_run(slow, run).figures
    monkeypatch.setattr(calibration, "STEPS_A_RUN", 10**9)  # every run in 20 ms steps
    fine = simulate_run(slow, run).figures
    for key, within in (("request_throughput", 0.01), ("median_tpot_ms", 0.01), ("median_ttft_ms", 0.02)):
        assert coarse[key] == pytest.approx(fine[key], rel=within), key


def test_the_first_request_is_warm_and_a_burst_reaches_the_engine_one_request_after_another() -> None:
    """Two 16k-token prompts sent at once, as ``vllm bench serve`` sends them: its test request left the first
    prompt in the cache, so the first computes a block in a step of its own, and the second, a millisecond
    behind, waits for that step and is prefilled in the next. (Were both cold, or sent at the same instant,
    one step would give both their first token together.)"""
    model = ReplicaModel(kv_cache_tokens=1_000_000, max_num_batched_tokens=65_536, prefill_tokens_per_s=2400.0,
                         decode_tokens_per_s=30.0, request_overhead_s=0.2)  # fmt: skip
    data = _result(2, model, prompt=16_384, output=64)
    data.update(completed=2, total_input_tokens=2 * 16_384, total_output_tokens=2 * 64)
    data.update(simulate_run(model, BenchRun.model_validate(data)).figures)
    first = model.request_overhead_s + model.weight_read_s + 16 / model.prefill_tokens_per_s
    second = first + model.weight_read_s + 16_385 / model.prefill_tokens_per_s  # beside the first's decoding
    assert data["p99_ttft_ms"] / 1e3 == pytest.approx(second, rel=0.02)
    assert data["median_ttft_ms"] / 1e3 == pytest.approx((first + second) / 2, rel=0.02)


def test_a_warm_prefix_cache_is_named_and_left_out() -> None:
    """``vllm bench serve`` sends one of its prompts as a test first: a lone request then hits the prefix cache
    and its TTFT is below its prompt's compute. Taken at face value it would give a prefill faster than the GPU."""
    warm = _result(1)
    warm.update(mean_ttft_ms=5.0, median_ttft_ms=5.0, p99_ttft_ms=5.0)
    runs = [("warm.json", BenchRun.model_validate(warm))]
    runs += [(f"c{c}", BenchRun.model_validate(_result(c))) for c in (4, 16)]
    fitted = fit(runs, TRUTH, 20)
    assert [w.split(":")[0] for w in fitted.warnings] == ["warm.json"]
    assert "warm prefix cache" in fitted.warnings[0]
    assert fitted.model.prefill_tokens_per_s < 20_000  # not the cached request's impossible speed


def test_calibrate_writes_a_replica_file_that_simulate_and_check_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    files = [_write(tmp_path, f"c{c}.json", _result(c)) for c in (1, 4, 16)]
    out = tmp_path / "replica.yaml"
    flags = ["--kv-cache-tokens", "200000", "--max-num-batched-tokens", "8192", "--out", str(out)]
    assert main(["calibrate", *files, *flags]) == 0
    printed = capsys.readouterr().out
    assert "TPOT p50" in printed and "c16.json" in printed
    replica = yaml.safe_load(out.read_text())
    assert replica["kv_cache_tokens"] == 200_000 and replica["prefill_tokens_per_s"] > 0
    heavy = _write(tmp_path, "c48.json", _result(48))
    assert main(["calibrate", "--check", "--replica-file", str(out), heavy, "-o", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert rows[0]["file"] == heavy and set(rows[0]["measured"]) == set(rows[0]["simulated"])
    assert set(rows[0]["measured"]) >= {"request_throughput", "median_ttft_ms", "p99_ttft_ms", "median_tpot_ms"}
    assert main(["simulate", "--replica-file", str(out), "--window", ":20m", "--policy", "threshold", "-q"]) in (0, 1)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"drop": "median_tpot_ms"}, "median_tpot_ms: missing"),
        ({"set": ("completed", "many")}, "completed:"),
        ({"text": "not json {"}, "not a JSON result file"),
    ],
)
def test_a_bad_result_file_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], change: dict[str, Any], message: str
) -> None:
    data = _result(1)
    if "drop" in change:
        del data[change["drop"]]
    if "set" in change:
        data[change["set"][0]] = change["set"][1]
    path = tmp_path / "bad.json"
    path.write_text(change.get("text") or json.dumps(data))
    good = _write(tmp_path, "good.json", _result(4))
    assert main(["calibrate", str(path), good, "--kv-cache-tokens", "200000"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(path) in err and message in err, err
    with pytest.raises(ValueError, match=r"bad\.json"):
        load_run(str(path))


def test_calibrate_refuses_what_it_cannot_fit(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    one = _write(tmp_path, "c4.json", _result(4))
    assert main(["calibrate", one, "--kv-cache-tokens", "200000"]) == 2
    assert "two or more concurrencies" in capsys.readouterr().err
    assert main(["calibrate", one]) == 2
    assert "--kv-cache-tokens N, or --server-log FILE" in capsys.readouterr().err
    log = tmp_path / "server.log"
    log.write_text("INFO [kv_cache_utils.py:849] GPU KV cache size: 464,848 tokens\n")
    from simulations.calibration import kv_tokens_from_log

    assert kv_tokens_from_log(str(log)) == 464_848
    replica = tmp_path / "replica.yaml"
    replica.write_text("warp_drive: 1\n")
    assert main(["simulate", "--replica-file", str(replica)]) == 2
    assert "warp_drive: not a replica field" in capsys.readouterr().err


def test_a_published_sweep_is_predicted_past_its_knee_from_its_light_runs() -> None:
    """Qwen2-7B on one A100 80GB (vLLM 0.10.1, 464,848 KV tokens): bursts of 1 to 1,000 requests of 1,024 in and
    out (``lab/sweeps/README.md`` cites it). Fitted on the bursts up to 75, the simulated replica predicts 100
    to 500 (about twice the knee at 200) within 15 % in throughput and 25 % in median TPOT, and 1,000 within
    25 % and 35 %, its p99 TTFT within 35 %."""
    sweep = SWEEPS / "qwen2-7b-a100-kv465k"
    runs = [(path.name, load_run(str(path))) for path in sorted(sweep.glob("*.json"))]
    light = [(name, run) for name, run in runs if run.completed <= 75]
    base = ReplicaModel(kv_cache_tokens=464_848, max_num_batched_tokens=2048, gpus_per_replica=1)
    model = fit(light, base).model
    for name, run in runs:
        if run.completed <= 75:
            continue
        got = simulate_run(model, run).figures
        near = run.completed <= 500
        assert got["request_throughput"] == pytest.approx(run.request_throughput, rel=0.15 if near else 0.25), name
        assert got["median_tpot_ms"] == pytest.approx(run.median_tpot_ms, rel=0.25 if near else 0.35), name
        if not near:
            assert got["p99_ttft_ms"] == pytest.approx(run.p99_ttft_ms, rel=0.35), name


@pytest.mark.parametrize("limit", [3, 1_000])
def test_a_benchmark_replayed_in_one_call_is_the_closed_loop_stepped_a_second_a_call(limit: int) -> None:
    """``engine.replay_bench`` sends each request at its time, once fewer than ``limit`` are in flight and a gap
    after the one before, and steps the replica until all have left: the same, to the bit, as sending them from
    Python and stepping a call at a time."""
    import math

    import numpy as np

    from simulations import engine
    from simulations.fleet import Fleet
    from simulations.traces import Trace

    rng = np.random.default_rng(11)
    n, gap = 60, 0.001
    schedule = np.concatenate([[0.0], np.cumsum(rng.exponential(0.5, n - 1))])
    prompt, output = rng.integers(100, 4000, n), rng.integers(2, 300, n)
    model = ReplicaModel(kv_cache_tokens=30_000, step_s=0.05)

    def fleet() -> Fleet:
        return Fleet(model, Trace("bench", np.full(n, math.inf), prompt, output), 1)

    replayed = fleet()
    stopped = engine.replay_bench(replayed.arrays, schedule, limit, gap, model.request_overhead_s, 1e6)
    stepped, sent, now, sent_at = fleet(), 0, 0.0, -math.inf
    while stepped.left < n:
        while sent < n and schedule[sent] <= now + model.step_s and sent - stepped.left < limit:
            sent_at = max(float(schedule[sent]), now, sent_at + gap)
            stepped.arrival[sent], stepped.engine_arrival[sent] = sent_at, sent_at + model.request_overhead_s
            sent += 1
        stepped.step(now)
        now += model.step_s
    assert stopped == now
    for name in ("arrival", "first_token", "finished", "admitted"):
        np.testing.assert_array_equal(getattr(replayed, name), getattr(stepped, name))
    assert np.isfinite(replayed.finished).all()  # every request served to its end
