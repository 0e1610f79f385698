"""The built-in workload's targets for the trace's requests and the user's SLO: a load test of the replica
model."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import simulations.follower_plan as follower_plan
import simulations.sizing as sizing
from autoscaler.cli import main
from simulations.builtin import builtin_document, sized_builtin
from simulations.follower_plan import MissCurve, Plan
from simulations.replica_model import ReplicaModel
from simulations.runner import Contender, RunResult
from simulations.sizing import (
    LEAST_SHARE,
    MIX_SPREAD,
    MOST_MIX_RATIO,
    LoadTest,
    builtin_shares,
    mix_share,
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
def test_the_rate_found_meets_the_slo_and_the_bisection_s_next_rate_does_not() -> None:
    """The bisection ends between a rate that meets the SLO and one a step of ``most / 2**steps`` higher that
    does not. (Not a tenth higher: with whole engine steps of 2 s the attainment near a 1 s SLO is not
    monotone in the rate, and a rate a fifth higher may meet it again.)"""
    model = ReplicaModel()
    test = LoadTest.of(model, chat_requests())
    rate = sustained_rate(test, model, 1.0, 0.99)
    assert 0 < rate < test.most
    assert test.meets(model, rate, 1.0, 0.99)
    assert not test.meets(model, rate + test.most / 2**sizing.LOAD_TEST_STEPS, 1.0, 0.99)


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
    assert long_prompts.mix < 1.0 and short_outputs.mix > 1.05
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
    assert "builtin_target_shares" not in model
    assert {m["name"]: m["target"]["value"] for m in model["metrics"]}["prompt_tokens_per_second"] == 500


@pytest.mark.usefixtures("short_load_test")
@pytest.mark.parametrize("target", ["0.99", "0.999", "0.95"])
def test_the_default_block_holds_only_what_following_the_work_uses(tmp_path: Path, target: str) -> None:
    """Given only an slo, the block written is the follower's: its utilization and the budget's count, whatever the
    target; no headroom or pooling, which only a block without ``utilization`` sizes with."""
    trace = ten_minutes_of_requests(tmp_path)
    out = tmp_path / "r.json"
    assert main(["simulate", "--trace", str(trace), "--slo-target", target, "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    assert not {"builtin_headroom_scale", "builtin_pooling_gain"} & set(data["model"])
    predictive = next(r for r in data["results"] if r["policy"] == "predictive")
    settings = predictive["settings"]
    assert not {"headroom", "pooling", "blendedHeadroom"} & set(settings)
    assert set(settings["errorBudget"]) == {"prefillTokensPerSecond", "requestOverheadSeconds", "promptLengthSigma"}
    assert "learnedHeadroom" not in settings
    # the floor only where the plan holds one; the requests it was planned on, the trace's
    written = set(settings["utilization"]) - {"floorReplicas"}
    assert written == {"start", "prefillTokensPerSecond", "decodeTokensPerSecond", "plannedRequests"}
    assert settings["utilization"]["plannedRequests"] == data["requests"]
    assert settings["utilization"].get("floorReplicas", 0) == data["model"]["builtin_floor_replicas"]


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


def _minutes(counts: list[int]) -> Trace:
    """A trace of ``counts[m]`` equal requests spread over minute ``m``."""
    arrivals = np.concatenate([m * 60 + np.arange(n) * 60 / n for m, n in enumerate(counts)])
    return Trace("minutes", arrivals, np.full(len(arrivals), 1000), np.full(len(arrivals), 100))


def test_the_typical_fleet_is_the_work_weighted_median_minute_over_the_utilization() -> None:
    """Ten minutes of 60 requests and ten of 600, each request 1 s of prefill and 1 s of decode: 2 and 20 replicas
    of work; the busy minutes carry 10/11 of the work, so the typical minute is theirs: 20 / 0.5 = 40 replicas."""
    trace = _minutes([60] * 10 + [600] * 10)
    assert list(sizing.minute_work(trace, 1000.0, 100.0)) == pytest.approx([2.0] * 10 + [20.0] * 10)
    work = sizing.minute_work(trace, 1000.0, 100.0)
    assert sizing.typical_fleet(work, 0.5) == 40
    assert sizing.typical_fleet(work, 1.0) == 20
    assert sizing.typical_fleet(sizing.minute_work(_minutes([1]), 1000.0, 100.0), 0.5) == 1  # never fewer than one


def test_the_start_is_load_tested_at_the_fleet_the_trace_needs(monkeypatch: pytest.MonkeyPatch) -> None:
    """The first test's fleet is ``LOAD_TEST_REPLICAS``; each next one is the fleet the trace's typical minute needs
    at the utilization the last found, until one repeats. Replicas behind one router pool their bursts, so a trace
    that needs more than the first test's fleet starts hotter than that test alone would have it."""
    monkeypatch.setattr(sizing, "LOAD_TEST_S", 600.0)
    monkeypatch.setattr(sizing, "plan", lambda *_: None)  # the steady test's share, as where no plan meets the aim
    monkeypatch.setattr(sizing, "smallest_fixed_fleet", lambda *_: None)  # and no fixed fleet is cheaper
    model = ReplicaModel()
    trace = _minutes([2400] * 20)  # 40 requests a second, some 50 replicas of work
    fleets: list[int] = []
    real = sizing.LoadTest.of.__func__  # type: ignore[attr-defined]

    def spy(cls: type[LoadTest], model: ReplicaModel, trace: Trace | None, replicas: int | None = None) -> LoadTest:
        fleets.append(replicas or sizing.LOAD_TEST_REPLICAS)
        return real(cls, model, trace, replicas)  # type: ignore[no-any-return]

    monkeypatch.setattr(sizing.LoadTest, "of", classmethod(spy))
    start = sizing.follower_plan(model, trace, 2.0, 0.99).utilization
    assert fleets[0] == sizing.LOAD_TEST_REPLICAS and len(fleets) in (2, 3) and fleets[1] > 30
    decode = sizing.held_decode_tokens_per_s(model, trace)
    work = sizing.minute_work(trace, model.prefill_tokens_per_s, decode)
    assert fleets[-1] == sizing.typical_fleet(work, start) or len(fleets) == 3
    monkeypatch.setattr(sizing, "START_TESTS", 1)
    assert start > sizing.follower_plan(model, trace, 2.0, 0.99).utilization * 1.05


SURGE = [300] * 4 + [900] * 2 + [300] * 4  # 6.4 replicas of work, 19.2 for two minutes
SWING = [int(450 - 350 * np.cos(2 * np.pi * m / 90)) for m in range(90)]  # 100 to 800 a minute over 90 minutes


def test_the_smallest_fixed_fleet_that_meets_the_target_is_found_by_bisection(monkeypatch: pytest.MonkeyPatch) -> None:
    """On the surge, 20 fixed replicas meet 99 % (99.26 %) and 19 do not (85.9 %); none of 16 to 19 does. A fleet
    known to miss tells of those below it, one known to meet of those above: they are not run."""
    trace, model = _minutes(SURGE), ReplicaModel()
    assert sizing.smallest_fixed_fleet(trace, model, range(16, 30), 2.0, 0.99) == 20
    assert sizing.smallest_fixed_fleet(trace, model, range(16, 20), 2.0, 0.99) is None
    assert sizing.smallest_fixed_fleet(trace, model, range(16, 16), 2.0, 0.99) is None
    fleets: list[int] = []
    real = sizing.run

    def spy(trace: Trace, model: ReplicaModel, contender: Contender, *args: Any, **kwargs: Any) -> RunResult:
        fleets.append(contender.static or 0)
        return real(trace, model, contender, *args, **kwargs)

    monkeypatch.setattr(sizing, "run", spy)
    assert sizing.smallest_fixed_fleet(trace, model, range(16, 20), 2.0, 0.99, {19: False}) is None
    assert sizing.smallest_fixed_fleet(trace, model, range(16, 30), 2.0, 0.99, {19: False, 21: True}) == 20
    assert fleets == [20]


def test_where_a_fixed_fleet_holds_fewer_replica_minutes_than_the_plan_it_is_the_plan() -> None:
    """A surge within a cold start: the plan, whatever it is, holds no fewer on average than the fixed fleet the
    simulator finds meets the target, so that fleet is the floor, at a utilization of 1. The whole budget, as
    static-best is found: the run is exact, where the aim's margin is for the replay's reading. At 99.2 % that is
    20 replicas (99.26 %), where the aim (99.32 %) would take more."""
    trace, model = _minutes(SURGE), ReplicaModel()
    found = sizing.follower_plan(model, trace, 2.0, 0.992)
    assert found == Plan(1.0, 20)
    assert sizing.smallest_fixed_fleet(trace, model, range(1, 64), 2.0, 0.992) == 20
    assert sizing.smallest_fixed_fleet(trace, model, range(1, 64), 2.0, 1 - sizing.AIM * 0.008) > 20


def test_where_a_fixed_fleet_is_the_plan_the_policy_is_not_run() -> None:
    """The surge's plan is a fixed fleet, found by fixed runs: the policy's run, a check of the follower's plan, is
    not made."""
    trace, model = _minutes(SURGE), ReplicaModel()

    def unwanted(planned: Plan, initial: int, most: int) -> RunResult:
        raise AssertionError("the policy was run")

    assert sizing.follower_plan(model, trace, 2.0, 0.99, check=unwanted) == sizing.follower_plan(
        model, trace, 2.0, 0.99
    )


def _ran(missed: float, minutes: int = 120, arrived: float = 1000.0) -> RunResult:
    """A run of ``minutes`` of ``arrived`` requests each, ``missed`` of them late."""
    result = RunResult("predictive", 1.0, 1 - missed / arrived, None, None, None, 0, 0, 0, 0)
    result.missed_by_minute, result.arrived_by_minute = np.full(minutes, missed), np.full(minutes, arrived)
    return result


@pytest.mark.parametrize(("missed", "hotter"), [(3.0, True), (12.0, False), (0.0, None)])
def test_a_plan_whose_policy_missed_more_than_the_replay_read_is_planned_cooler(
    missed: float, hotter: bool | None
) -> None:
    """Flat work of 10 replicas, a curve with a knee at half the compute: the replay plans 20 replicas (a
    utilization near 0.53), where a minute misses 0.5 % of its requests. A run that missed 0.3 % takes the curve
    lighter and the plan hotter; one that missed 1.2 %, cooler; the run returned is the new plan's. One that missed
    none leaves it (the prior holds a count of few misses near the replay's)."""
    work = np.full(120, 10.0)
    curve = MissCurve(np.array([0.25, 0.5, 0.75]), np.array([0.0, 0.005, 0.1]))
    found = follower_plan.plan(work, curve, 300.0, 300.0, 0.99)
    assert found is not None
    runs: list[Plan] = []

    def check(planned: Plan, initial: int, most: int) -> RunResult:
        runs.append(planned)
        assert initial == most == math.ceil(10 / planned.utilization - 1e-9)  # the replay's flat fleet
        return _ran(missed if len(runs) == 1 else 0.0)

    again, ran = sizing.checked_plan(work, curve, found, 300.0, 300.0, 0.99, check)
    if hotter is None:
        assert again == found and runs == [found]
        return
    assert (again.utilization > found.utilization) is hotter and again.utilization != found.utilization
    assert runs == [found, again] and ran.missed_by_minute is not None and not ran.missed_by_minute.any()


def test_a_follower_whose_run_missed_the_target_gives_way_to_the_fewest_fixed_replicas_that_meet_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A run of the plan's policy that missed the SLO bounds nothing: the fixed fleets are tried up to the most it
    held, from the fleet the oracle's busiest window needs (the least a fixed fleet that meets the target can be,
    which is where static-best's search starts), and the fewest that meets the target is the plan."""
    from simulations.oracle import oracle_bound

    trace, model = _minutes(SWING), ReplicaModel()
    tried: list[range] = []
    real = sizing.smallest_fixed_fleet

    def spy(trace: Trace, model: ReplicaModel, candidates: range, *args: Any) -> int | None:
        tried.append(candidates)
        return real(trace, model, candidates, *args)

    monkeypatch.setattr(sizing, "smallest_fixed_fleet", spy)

    def missed(planned: Plan, initial: int, most: int) -> RunResult:
        result = _ran(20.0, 90)  # 2 % of its requests, where 1 % are allowed
        result.max_replicas = 40
        return result

    found = sizing.follower_plan(model, trace, 2.0, 0.99, check=missed)
    busiest = oracle_bound(trace, model, 0, 2.0, 0.99).busiest
    assert tried[-1] == range(math.ceil(busiest - 1e-9), 40)
    assert found == Plan(1.0, real(trace, model, range(1, 64), 2.0, 0.99))


def test_the_fewest_fixed_replicas_above_a_fleet_are_found_a_quarter_more_at_a_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On the surge, from 12 up: 12, 15, 19 miss and 24 meets, then the bisection between 20 and 24 finds 20 (22,
    21, 20). Up to 18 at most, none: 12, 15 and 18 are tried and nothing above."""
    trace, model = _minutes(SURGE), ReplicaModel()
    fleets: list[int] = []
    real = sizing.fixed_run

    def spy(trace: Trace, model: ReplicaModel, replicas: int, *args: Any, **kwargs: Any) -> RunResult:
        fleets.append(replicas)
        return real(trace, model, replicas, *args, **kwargs)

    monkeypatch.setattr(sizing, "fixed_run", spy)
    assert sizing.fewest_fixed_from(trace, model, 12, 2.0, 0.99) == 20
    assert fleets == [12, 15, 19, 24, 22, 21, 20]
    fleets.clear()
    assert sizing.fewest_fixed_from(trace, model, 12, 2.0, 0.99, most=18) is None
    assert fleets == [12, 15, 18]


def test_a_plan_whose_run_missed_where_no_fleet_it_held_meets_gives_way_to_a_larger_fixed_fleet(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The work that swings over 90 minutes needs 19 fixed replicas. A run of the plan's policy that missed the SLO
    holding no more than 14 leaves the fleets it held (13) to try, and none meets: rather than write a plan known
    to miss, the fleets above are tried (``fewest_fixed_from``, from 14), and 19 fixed is the plan. A run that met
    holding as few is the plan as it was: nothing above is tried."""
    trace, model = _minutes(SWING), ReplicaModel()

    def checked(missed: float) -> Any:
        def check(planned: Plan, initial: int, most: int) -> RunResult:
            result = _ran(missed, 90)
            result.max_replicas = 14
            return result

        return check

    assert sizing.follower_plan(model, trace, 2.0, 0.99, check=checked(20.0)) == Plan(1.0, 19)
    above: list[int] = []
    monkeypatch.setattr(sizing, "fewest_fixed_from", lambda *args: above.append(1))
    met = sizing.follower_plan(model, trace, 2.0, 0.99, check=checked(0.0))
    assert met.utilization < 1.0 and not above


def test_the_builtin_follower_is_checked_by_a_run_of_its_policy_over_the_trace(monkeypatch: pytest.MonkeyPatch) -> None:
    """Work that swings over 90 minutes (100 to 800 requests a minute) is followed, not held by a fixed fleet:
    the plan is run as the built-in predictive over the whole trace, and the plan written is the one checked."""
    trace = _minutes(SWING)
    checked: list[tuple[Plan, RunResult]] = []
    real = sizing.checked_plan

    def spy(*args: Any) -> tuple[Plan, RunResult]:
        checked.append(real(*args))
        return checked[-1]

    monkeypatch.setattr(sizing, "checked_plan", spy)
    _, sized = sized_builtin(ReplicaModel(), trace, 2.0, 0.99)
    [(planned, ran)] = checked
    assert ran.policy == "predictive" and ran.arrived_by_minute is not None
    assert ran.arrived_by_minute.sum() == len(trace.arrival_s) and len(ran.arrived_by_minute) == 90
    assert planned.utilization < 1 and sized["builtin_utilization_start"] == round(planned.utilization, 4)
    assert sized["builtin_floor_replicas"] == planned.floor


@pytest.mark.parametrize("own_policy", [False, True])
def test_a_file_given_only_an_slo_has_the_plan_checked_in_its_own_workload(
    monkeypatch: pytest.MonkeyPatch, own_policy: bool
) -> None:
    """The check runs the block in the file that will run it (its bounds and scale-down window, the capacity
    measured), not in the built-in workload; a file that names its own policy runs none of the plan, so no check."""
    import simulations.builtin as builtin
    from policies.policy_file import Workload, parse_policy_document
    from tests.helpers import workload_doc

    trace = _minutes(SWING)
    raw = workload_doc(slo={"ttftSeconds": 2, "target": 0.99}, minReplicas=3, maxReplicas=40)
    del raw["workloads"][0]["metrics"]
    if own_policy:
        raw["workloads"][0]["policy"] = {"type": "threshold"}
    checked: list[Workload] = []
    real = builtin.policy_contender

    def spy(document: Any, workload: Workload, model: ReplicaModel) -> Contender:
        checked.append(workload)
        return real(document, workload, model)

    monkeypatch.setattr(builtin, "policy_contender", spy)
    document, _ = builtin.with_measured_capacity(parse_policy_document(raw), ReplicaModel(), trace, 2.0, 0.99)
    if own_policy:
        assert not checked and document.workloads[0].policy["type"] == "threshold"
        return
    assert checked and all(w.target.name == "vllm" and w.min_replicas == 3 and w.capacity for w in checked)
    assert checked[-1].policy == document.workloads[0].policy
