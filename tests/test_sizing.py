"""The built-in workload's targets for the trace's requests and the user's SLO: a load test of the replica
model."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import simulations.sizing as sizing
from autoscaler.cli import main
from policies.predictive import default_headroom
from simulations.builtin import builtin_document, builtin_policy
from simulations.replica_model import ReplicaModel
from simulations.sizing import (
    LEAST_SHARE,
    MIX_SPREAD,
    MOST_MIX_RATIO,
    LoadTest,
    builtin_shares,
    headroom_scale,
    mix_share,
    pooling_gain,
    sustained_rate,
)
from simulations.traces import Trace, load_trace


def slo_share(model: ReplicaModel, trace: Trace, slo_ttft: float, slo_target: float) -> float:
    return builtin_shares(model, trace, slo_ttft, slo_target).slo


@pytest.fixture
def short_load_test(monkeypatch: pytest.MonkeyPatch) -> None:
    """Four replicas for ten minutes: the same search, at a tenth of the cost."""
    monkeypatch.setattr(sizing, "LOAD_TEST_REPLICAS", 4)
    monkeypatch.setattr(sizing, "LOAD_TEST_S", 600.0)


def chat_requests(prompt_median: float = 1000, output_median: float = 200, builtin: bool = True) -> Trace:
    """Requests like the built-in distribution's (and said to be drawn from it, unless ``builtin`` is
    false, so that only the SLO is tested)."""
    rng = np.random.default_rng(7)
    prompt = np.clip(rng.lognormal(np.log(prompt_median), 0.5, 500), 1, None).astype(np.int64)
    output = np.clip(rng.lognormal(np.log(output_median), 0.6, 500), 1, None).astype(np.int64)
    return Trace("chat", np.arange(500.0), prompt, output, builtin_lengths=builtin)


def test_the_reference_slo_and_looser_ones_keep_the_targets_without_a_load_test(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def no_load_test(*_: object, **__: object) -> float:
        raise AssertionError("no load test is needed at 2 s or beyond")

    monkeypatch.setattr(sizing, "sustained_rate", no_load_test)
    for slo, target in ((2.0, 0.99), (5.0, 0.99), (60.0, 0.5), (2.0, 0.95)):
        assert slo_share(ReplicaModel(), chat_requests(), slo, target) == 1.0


@pytest.mark.usefixtures("short_load_test")
def test_the_rate_found_meets_the_slo_and_one_a_tenth_higher_does_not() -> None:
    model = ReplicaModel()
    test = LoadTest.of(model, chat_requests())
    rate = sustained_rate(test, model, 1.0, 0.99)
    assert 0 < rate < test.most
    assert test.meets(model, rate, 1.0, 0.99)
    assert not test.meets(model, rate * 1.1, 1.0, 0.99)


def test_every_rate_of_a_load_test_serves_the_same_requests_in_the_same_order() -> None:
    test = LoadTest.of(ReplicaModel(), chat_requests())
    slow, fast = test.at(test.most / 8), test.at(test.most / 2)
    assert fast.requests > 3 * slow.requests
    assert np.array_equal(fast.prompt_tokens[: slow.requests], slow.prompt_tokens)
    assert np.allclose(fast.arrival_s[: slow.requests] * 4, slow.arrival_s)
    assert fast.arrival_s[-1] <= test.span == sizing.LOAD_TEST_S


def test_a_load_test_of_tiny_requests_is_shortened_to_a_bounded_count() -> None:
    tiny = Trace("tiny", np.arange(100.0), np.ones(100, dtype=np.int64), np.ones(100, dtype=np.int64))
    test = LoadTest.of(ReplicaModel(), tiny)
    assert test.span < sizing.LOAD_TEST_S
    assert test.at(test.most).requests <= 1.01 * sizing.LOAD_TEST_MOST_REQUESTS


@pytest.mark.usefixtures("short_load_test")
def test_a_tighter_slo_takes_a_smaller_share_of_the_targets() -> None:
    model, requests = ReplicaModel(), chat_requests()
    shares = [slo_share(model, requests, slo, 0.99) for slo in (0.5, 1.0, 1.5)]
    assert LEAST_SHARE <= shares[0] < shares[1] < shares[2] < 1.0


@pytest.mark.usefixtures("short_load_test")
def test_a_higher_slo_target_takes_a_smaller_share_of_the_targets() -> None:
    assert slo_share(ReplicaModel(), chat_requests(), 2.0, 0.999) < 1.0


@pytest.mark.usefixtures("short_load_test")
def test_a_faster_prefill_makes_the_same_slo_less_tight() -> None:
    """At 1 s, prompts of 1,000 tokens leave little room for queueing at 1,000 tokens/s of prefill and
    much more at 4,000: the share is not a function of the SLO alone."""
    requests = chat_requests()
    slow = slo_share(ReplicaModel(), requests, 1.0, 0.99)
    fast = slo_share(ReplicaModel(prefill_tokens_per_s=4000), requests, 1.0, 0.99)
    assert slow < fast


def test_an_slo_no_load_meets_floors_the_share(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sizing, "sustained_rate", lambda *a, below=None, **k: 0.0 if below else 3.0)
    assert slo_share(ReplicaModel(), chat_requests(), 0.01, 0.99) == LEAST_SHARE
    monkeypatch.setattr(sizing, "sustained_rate", lambda *a, **k: 0.0)  # not even the reference SLO
    assert slo_share(ReplicaModel(), chat_requests(), 0.01, 0.99) == 1.0


def test_the_share_scales_the_prompt_and_running_targets_and_the_prompt_share_the_prompt_one() -> None:
    model = ReplicaModel(prefill_tokens_per_s=3000, kv_cache_tokens=60_000)
    trace = Trace("t", np.array([0.0, 1.0]), np.array([900, 1100]), np.array([100, 300]))

    def targets(*shares: float) -> dict[str, float]:
        metrics = builtin_document(model, trace, *shares)["workloads"][0]["metrics"]
        return {m["name"]: m["target"]["value"] for m in metrics}

    assert targets(0.5) == {"prompt_tokens_per_second": 750, "num_requests_running": 12.5, "num_requests_waiting": 2}
    assert targets(0.5, 0.8) == {
        "prompt_tokens_per_second": 600,
        "num_requests_running": 12.5,
        "num_requests_waiting": 2,
    }


def test_a_recorded_trace_is_load_tested_under_the_slo_its_targets_stand_for(monkeypatch: pytest.MonkeyPatch) -> None:
    """Its requests are not the built-in distribution's, which the prompt-token target is sized for."""
    calls: list[float] = []

    def rate(test: LoadTest, model: ReplicaModel, slo_ttft: float, *_: object, **__: object) -> float:
        calls.append(slo_ttft)
        return 1.0 if test.prompts.mean() < 600 else 2.0  # the built-in distribution's mean is about 1,155

    monkeypatch.setattr(sizing, "sustained_rate", rate)
    shares = builtin_shares(ReplicaModel(), chat_requests(prompt_median=300, builtin=False), 2.0, 0.99)
    assert calls == [2.0, 2.0] and shares.slo == 1.0 and shares.mix < 1.0
    # Under a looser SLO, both are tested under it; under a tighter one, under the reference (and the
    # trace's requests under the user's SLO as well, for the ``slo`` share).
    calls.clear()
    builtin_shares(ReplicaModel(), chat_requests(builtin=False), 5.0, 0.99)
    assert calls == [5.0, 5.0]
    calls.clear()
    builtin_shares(ReplicaModel(), chat_requests(builtin=False), 1.0, 0.99)
    assert calls == [2.0, 1.0, 2.0]


def test_the_mix_share_leaves_the_load_tests_own_spread_and_is_bounded() -> None:
    assert mix_share(1.0) == mix_share(MIX_SPREAD) == mix_share(1 / MIX_SPREAD) == 1.0
    assert mix_share(0.5) == pytest.approx((0.5 / MIX_SPREAD) ** 0.5)
    assert mix_share(1.5) == pytest.approx((1.5 * MIX_SPREAD) ** 0.5)
    assert mix_share(100.0) == pytest.approx(MOST_MIX_RATIO**0.5)
    assert mix_share(0.0) == LEAST_SHARE
    ratios = np.linspace(0.0, 3.0, 301)
    assert np.all(np.diff([mix_share(r) for r in ratios]) >= 0)


@pytest.mark.usefixtures("short_load_test")
def test_long_prompts_take_a_smaller_prompt_share_and_short_outputs_a_larger_one() -> None:
    """Four times the prompt: each prefill holds up those behind it for longer. A tenth of the output:
    less of each replica goes to decoding. Neither changes the running target's share."""
    model = ReplicaModel()
    long_prompts = builtin_shares(model, chat_requests(prompt_median=4000, builtin=False), 2.0, 0.99)
    short_outputs = builtin_shares(model, chat_requests(output_median=20, builtin=False), 2.0, 0.99)
    assert long_prompts.mix < 0.9 and short_outputs.mix > 1.05
    assert long_prompts.slo == short_outputs.slo == 1.0


def ten_minutes_of_requests(tmp_path: Path) -> Path:
    """An Azure-format trace of 60 requests of 1,000 + 100 tokens, one every 10 s."""
    trace = tmp_path / "t.csv"
    trace.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        + "".join(f"2023-11-16 18:{m // 6:02d}:{m % 6 * 10:02d}.0000000,1000,100\n" for m in range(60))
    )
    return trace


@pytest.mark.usefixtures("short_load_test")
def test_simulate_sizes_the_builtin_workload_for_the_slo_it_is_given(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = ten_minutes_of_requests(tmp_path)

    shares: dict[str, dict[str, float]] = {}

    def targets(slo: str) -> dict[str, float]:
        out = tmp_path / f"r{slo}.json"
        assert main(["simulate", "--trace", str(trace), "--slo-ttft", slo, "--out", str(out)]) == 0
        model = json.loads(out.read_text())["model"]
        shares[slo] = model["builtin_target_shares"]
        return {m["name"]: m["target"]["value"] for m in model["metrics"]}

    reference = targets("2")
    assert "sizing the built-in workload's targets for the trace's requests by a load test" in capsys.readouterr().err
    tight = targets("0.5")
    assert "for the trace's requests and an SLO of 0.5 s for 99%" in capsys.readouterr().err
    requests = load_trace(str(trace), None, 0, 1.0, None)
    mix = builtin_shares(ReplicaModel(), requests, 2.0, 0.99).mix
    assert mix != 1.0 and reference["prompt_tokens_per_second"] == pytest.approx(500 * mix)
    assert shares["2"] == {"prompt_tokens_per_second": round(mix, 4), "num_requests_running": 1.0}
    assert shares["0.5"]["num_requests_running"] < 1.0
    assert tight["prompt_tokens_per_second"] < reference["prompt_tokens_per_second"]
    assert tight["num_requests_running"] < reference["num_requests_running"]
    assert tight["num_requests_waiting"] == reference["num_requests_waiting"] == 2


def test_a_policy_files_targets_are_left_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With --config the targets are the user's: no load test, and no shares in the report."""

    def no_load_test(*_: object, **__: object) -> float:
        raise AssertionError("a policy file's targets are not sized")

    monkeypatch.setattr(sizing, "sustained_rate", no_load_test)
    policy, trace, out = tmp_path / "p.yaml", tmp_path / "t.csv", tmp_path / "r.json"
    policy.write_text(json.dumps(builtin_document(ReplicaModel())))
    trace.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        + "".join(f"2023-11-16 18:{m:02d}:00.0000000,4000,100\n" for m in range(20))
    )
    assert (
        main(["simulate", "--config", str(policy), "--trace", str(trace), "--policy", "threshold", "--out", str(out)])
        == 0
    )
    model = json.loads(out.read_text())["model"]
    assert "builtin_target_shares" not in model and "builtin_headroom_scale" not in model
    assert {m["name"]: m["target"]["value"] for m in model["metrics"]}["prompt_tokens_per_second"] == 500


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        (0.99, 1.0),  # the reference: the policy's own default
        (0.995, 1.1072),
        (0.999, 1.3284),
        (0.98, 0.8828),
        (0.95, 0.7071),
        (0.5, 0.0),  # half the requests may miss: nothing held for bursts
        (0.3, 0.0),  # never negative
        (1.0, 1.5987),  # every request: the quantile of 99.99 %, not an infinite fleet
    ],
)
def test_headroom_scale_is_the_targets_normal_quantile_over_the_references(target: float, expected: float) -> None:
    assert headroom_scale(target) == pytest.approx(expected, abs=1e-4)


@pytest.mark.parametrize("cold_start", [60.0, 300.0, 900.0])
def test_the_builtin_workload_holds_the_scaled_default_headroom(cold_start: float) -> None:
    model = ReplicaModel(cold_start_s=cold_start)
    assert "headroom" not in builtin_document(model)["workloads"][0]["policy"]
    policy = builtin_document(model, headroom_scale=1.5)["workloads"][0]["policy"]
    assert policy["headroom"] == pytest.approx(1.5 * default_headroom(cold_start + 15), abs=1e-4)
    # And the policy runs with it.
    for scale in (1.0, 1.5):
        document = builtin_policy(model, headroom_scale=scale)
        resolved = document.decider(document.workloads[0]).policy.resolved()  # type: ignore[attr-defined]
        assert resolved["headroom"] == pytest.approx(scale * default_headroom(cold_start + 15), abs=1e-4)


@pytest.mark.usefixtures("short_load_test")
def test_simulate_scales_the_builtin_headroom_for_the_slo_target(tmp_path: Path) -> None:
    trace = ten_minutes_of_requests(tmp_path)
    headroom: dict[str, float] = {}
    for target in ("0.99", "0.999"):
        out = tmp_path / f"r{target}.json"
        assert main(["simulate", "--trace", str(trace), "--slo-target", target, "--out", str(out)]) == 0
        data = json.loads(out.read_text())
        assert data["model"]["builtin_headroom_scale"] == round(headroom_scale(float(target)), 4)
        predictive = next(r for r in data["results"] if r["policy"] == "predictive")
        headroom[target] = predictive["settings"].get("headroom")
    # At 99 % the block leaves the headroom to the policy's default; the follower of the work it now runs with
    # uses none, so only what --tune searches from is written (docs/decisions/predictive-utilization.md).
    assert headroom["0.99"] is None
    assert headroom["0.999"] == pytest.approx(0.6 * headroom_scale(0.999), abs=1e-4)


def test_a_tighter_slo_measures_no_pooling_gain(monkeypatch: pytest.MonkeyPatch) -> None:
    """Its share of the targets already stands for the fleet's pooling (the square root of the ratio)."""

    def no_load_test(*_: object, **__: object) -> float:
        raise AssertionError("no pooling test under a tighter SLO")

    monkeypatch.setattr(sizing, "sustained_rate", no_load_test)
    assert pooling_gain(ReplicaModel(), chat_requests(), 1.0, 0.99) == 0.0
    assert pooling_gain(ReplicaModel(), chat_requests(), 2.0, 0.999) == 0.0


@pytest.mark.usefixtures("short_load_test")
def test_a_larger_fleet_carries_more_per_replica_and_the_gain_says_how_much(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sizing, "POOLED_REPLICAS", 12)
    monkeypatch.setattr(sizing, "MOST_POOLING_GAIN", 0.3)  # wide enough to find the gain inside it
    model, requests = ReplicaModel(), chat_requests()
    gain = pooling_gain(model, requests, 2.0, 0.99)
    assert 0.02 < gain < sizing.MOST_POOLING_GAIN
    small = LoadTest.of(model, requests)
    large = LoadTest.of(model, requests, 12)
    assert (small.fleet, large.fleet) == (4, 12)
    per_replica = sustained_rate(small, model, 2.0, 0.99) / 4
    # Searched between the smaller fleet's rate per replica, which the larger one carries, and the most
    # gain allowed, which it does not.
    assert large.meets(model, 12 * per_replica, 2.0, 0.99)
    assert not large.meets(model, 12 * per_replica * (1 + sizing.MOST_POOLING_GAIN * np.log2(3)), 2.0, 0.99)
    assert pooling_gain(model, requests, 2.0, 0.99) == gain  # seeded: the same answer
    monkeypatch.setattr(sizing, "MOST_POOLING_GAIN", gain / 2)
    assert pooling_gain(model, requests, 2.0, 0.99) == gain / 2  # capped


def test_no_pooling_gain_where_the_larger_fleet_does_not_even_keep_the_rate(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sizing, "sustained_rate", lambda *a, **k: 1.0)
    monkeypatch.setattr(LoadTest, "meets", lambda *a, **k: False)
    assert pooling_gain(ReplicaModel(), chat_requests(), 2.0, 0.99) == 0.0


@pytest.mark.usefixtures("short_load_test")
def test_the_pooling_test_takes_the_rate_the_shares_test_found(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under the reference SLO or a looser one, both tests start from the same fleet's rate: found once."""
    monkeypatch.setattr(sizing, "POOLED_REPLICAS", 12)
    model, requests = ReplicaModel(), chat_requests(builtin=False)
    shares = builtin_shares(model, requests, 3.0, 0.99)
    assert shares.reference_rate == sustained_rate(LoadTest.of(model, requests), model, 3.0, 0.99)
    expected = pooling_gain(model, requests, 3.0, 0.99)
    searches: list[float | None] = []
    real = sizing.sustained_rate

    def counted(*args: object, **kwargs: object) -> float:
        searches.append(kwargs.get("above"))  # type: ignore[arg-type]
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(sizing, "sustained_rate", counted)
    assert pooling_gain(model, requests, 3.0, 0.99, shares.reference_rate) == expected
    assert all(above is not None for above in searches)  # only the larger fleet's search, if any


def test_a_replica_with_at_least_the_builtin_ones_capacities_needs_no_replica_load_test(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def no_load_test(*_: object, **__: object) -> float:
        raise AssertionError("a replica no slower than the built-in one needs no load test")

    monkeypatch.setattr(sizing, "sustained_rate", no_load_test)
    elsewhere = ReplicaModel(cold_start_s=60, scrape_interval_s=5, drain=False, gpus_per_replica=8)
    assert sizing.at_least_builtin(elsewhere) and sizing.replica_slack(elsewhere, 2.0, 0.99) == 1.0
    faster = ReplicaModel(prefill_tokens_per_s=8000, decode_tokens_per_s=40, kv_cache_tokens=200_000)
    assert sizing.at_least_builtin(faster) and builtin_shares(faster, chat_requests(), 2.0, 0.99).replica == 1.0
    assert not sizing.at_least_builtin(ReplicaModel(prefill_tokens_per_s=600, decode_tokens_per_s=15))
    assert not sizing.at_least_builtin(ReplicaModel(routing="round-robin"))


@pytest.mark.parametrize(
    ("replica", "least", "most"),
    [
        # A mean prompt (1,155 tokens) takes 1.9 s of the 2 s SLO: 8 replicas sustain 0.40 of the target
        # where the built-in ones sustain 0.83, so the share is about the root of 0.48.
        ({"prefill_tokens_per_s": 600, "decode_tokens_per_s": 15}, 0.6, 0.8),
        # A fast replica keeps the targets: at its saturation, surges need the headroom as they are (README).
        ({"prefill_tokens_per_s": 8000, "decode_tokens_per_s": 40, "kv_cache_tokens": 200_000}, 1.0, 1.0),
    ],
)
def test_a_replica_on_which_the_slo_is_tighter_takes_a_share_of_the_targets(
    replica: dict[str, float], least: float, most: float
) -> None:
    shares = builtin_shares(ReplicaModel(**replica), chat_requests(), 2.0, 0.99)
    assert least <= shares.slo <= most
    assert shares.replica == shares.slo and shares.mix == 1.0


@pytest.mark.usefixtures("short_load_test")
def test_a_slow_replica_on_a_traces_requests_bisects_each_load_test_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The replica's slack and the trace's mix both stand against the built-in lengths on that replica."""
    searches: list[tuple[float, int, tuple[object, ...]]] = []
    real = sizing.sustained_rate

    def counted(test: LoadTest, model: ReplicaModel, *args: object, **kwargs: object) -> float:
        searches.append((model.prefill_tokens_per_s, len(test.prompts), args))
        return real(test, model, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(sizing, "sustained_rate", counted)
    shares = builtin_shares(
        ReplicaModel(prefill_tokens_per_s=600, decode_tokens_per_s=15), chat_requests(builtin=False), 2.0, 0.99
    )
    assert shares.replica < 1 and shares.mix != 1.0
    assert len(searches) == len(set(searches)) == 3  # the trace's requests, the built-in lengths, the built-in replica
