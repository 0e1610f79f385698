"""The report (``simulations.report``): the table, the verdict and the load line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from simulations.report import load, load_line
from simulations.runner import RunResult
from simulations.traces import Trace, load_trace


def test_the_report_never_rounds_a_miss_up_to_the_target() -> None:
    """1 - 1/250,001 is 0.999996: rounded to five decimals it would read 1.0, a target of 100 % met."""
    result = RunResult("p", 1.0, 1 - 1 / 250_001, None, None, None, 250_000, 1, 0, 1)
    assert result.to_json()["slo_attainment"] == 0.99999
    assert RunResult("p", 1.0, 0.99, None, None, None, 99, 1, 0, 1).to_json()["slo_attainment"] == 0.99


def test_the_load_gives_the_burstiness_at_the_slos_scale_and_the_cold_starts(shared_trace: Path) -> None:
    """The Azure hour's busiest five minutes carry 1.8 times its mean prompt tokens, its busiest second 5.5
    times: a load that follows its mean has little to save, and its bursts are seconds long."""
    trace = load_trace(shared_trace / "azure_llm_2023_conv.csv")
    shape = load(trace)
    assert shape["mean_requests_per_s"] == pytest.approx(19366 / trace.duration_s, abs=1e-4)
    busiest = shape["busiest_prompt_tokens_over_mean"]
    assert list(busiest) == ["1s", "60s", "300s"]  # the trace is shorter than an hour
    assert busiest["300s"] == pytest.approx(1.77, abs=0.01) and busiest["1s"] == pytest.approx(5.5, abs=0.1)
    assert load_line(shape) == (
        "load: 5.53 requests/s, 6,386 prompt tokens/s on average; the busiest 5 min, minute and second carry "
        "1.77, 2 and 5.5 times that"
    )
    assert load_line(load(Trace("t", np.array([2.0, 2.0]), np.array([5, 5]), np.array([1, 1])))) == (
        "load: every request arrives at once"
    )
    # Stamped every 3 s: the busiest second is one stamp's arrivals, and the line says so.
    arrivals = np.sort(np.append(np.arange(0.0, 120.0, 3.0), 60.0))  # two requests at 60 s
    stamped = Trace("t", arrivals, np.full(41, 10), np.ones(41, dtype=np.int64))
    assert load(stamped)["least_arrival_gap_s"] == 3.0
    assert load_line(load(stamped)).endswith(
        "the busiest minute and second carry 1 and 5.71 times that "
        "(arrivals are stamped 3 s apart or more: the second's figure is one stamp's)"
    )
    two_seconds = Trace("t", np.array([0.0, 0.5, 2.0]), np.array([5, 5, 5]), np.array([1, 1, 1]))
    assert load_line(load(two_seconds)).endswith("; the busiest second carries 1.33 times that")


def test_the_verdict_names_the_cheapest_run_at_the_slo() -> None:
    from simulations.report import verdict

    def data(*runs: tuple[str, float, float]) -> dict[str, Any]:
        results = [{"policy": p, "gpu_hours": g, "slo_attainment": a} for p, g, a in runs]
        results.append({"policy": "oracle", "gpu_hours": 1.0, "slo_attainment": 0.99, "lower_bound": True})
        return {"model": {"slo_target": 0.99, "max_replicas": 32, "static_best_replicas": 15}, "results": results}

    beaten = data(("threshold", 80.0, 0.95), ("predictive", 90.0, 0.995), ("static-best", 120.0, 0.993))
    expected = "verdict: cheapest at the SLO is predictive, 90.00 GPU-h, 25.0% under static-best's 120.00"
    assert verdict(beaten) == expected
    tied = data(("threshold", 90.0, 0.991), ("predictive", 90.0, 0.991), ("static-best", 120.0, 0.993))
    assert verdict(tied).startswith("verdict: cheapest at the SLO are threshold and predictive, 90.00 GPU-h")
    only_dynamic = data(("predictive", 130.0, 0.995), ("static-best", 120.0, 0.98))
    assert verdict(only_dynamic).endswith("130.00 GPU-h; no fixed fleet of up to 32 replicas meets it")
    unbeaten = data(("predictive", 130.0, 0.995), ("static-best", 120.0, 0.993))
    assert verdict(unbeaten).endswith(
        "(15 fixed replicas): no policy beat a fixed fleet here with the settings given; "
        "--tune finds each policy's cheapest setting for this traffic"
    )
    # A policy whose plan holds the fixed fleet costs what it costs: the verdict says it matched.
    matched = data(("threshold", 130.0, 0.995), ("predictive", 120.0, 0.993), ("static-best", 120.0, 0.993))
    assert verdict(matched) == (
        "verdict: cheapest at the SLO is static-best, 120.00 GPU-h (15 fixed replicas), matched by predictive: no "
        "policy beat a fixed fleet here with the settings given; --tune finds each policy's cheapest setting for "
        "this traffic"
    )
    unbeaten["results"][0]["tuned"] = {"headroom": 0.08}
    assert verdict(unbeaten).endswith("(15 fixed replicas): no policy beat a fixed fleet here")
    # Missing is not costing more: the verdict says which, and what meets the SLO there.
    missed = data(("threshold", 80.0, 0.95), ("predictive", 100.0, 0.985), ("static-best", 120.0, 0.993))
    assert verdict(missed).endswith(
        "(15 fixed replicas): every policy missed the SLO with the settings given; --tune finds the cheapest "
        "setting of each that meets it, if any does; minReplicas 15 holds the fixed fleet that does"
    )
    missed["results"][1]["tuned"] = {"headroom": 2.5}
    assert verdict(missed).endswith(
        "(15 fixed replicas): every policy missed the SLO, tuned too; minReplicas 15 holds the fixed fleet that does"
    )
    # The KEDA baselines are not policies of this controller: their misses beside a policy that meets at
    # more cost than the fixed fleet leave the verdict as it was.
    keda_missed = data(("keda-sum", 70.0, 0.96), ("predictive", 130.0, 0.995), ("static-best", 120.0, 0.993))
    assert verdict(keda_missed).endswith(
        "no policy beat a fixed fleet here with the settings given; "
        "--tune finds each policy's cheapest setting for this traffic"
    )
    nothing_meets = data(("predictive", 130.0, 0.9), ("static-best", 120.0, 0.98))
    nothing_meets["results"][-1]["max_replicas"] = 20
    assert verdict(nothing_meets) == (
        "verdict: no run meets the SLO target (99%), not even 32 fixed replicas; the oracle's 20 at the busiest "
        "minute is a lower bound: raise maxReplicas (--config) or the replica's capacity (--replica)"
    )
    # Where the trace repeats prompt prefixes, the bound counts them all cached, which a fleet whose prompts
    # outgrow its caches is far from: the verdict says by how much.
    nothing_meets["prefix_reuse"] = 0.6512
    nothing_meets["results"][0]["prefix_cache_hits"] = 0.0058
    nothing_meets["results"][1]["prefix_cache_hits"] = 0.0031
    assert verdict(nothing_meets).endswith(
        "is a lower bound that finds every repeated prompt prefix cached (65% of the prompt tokens; the fleet's "
        "caches served at most 0.58%): raise maxReplicas (--config) or the replica's capacity (--replica)"
    )
    at_the_floor = data(("predictive", 130.0, 0.995), ("static-best", 120.0, 0.993))
    at_the_floor["model"]["min_replicas"] = 15
    assert verdict(at_the_floor).endswith(
        "(15 fixed replicas, the workload's minReplicas): the load never needs more than the floor, so no "
        "policy can cost less unless minReplicas is lowered (--config)"
    )


def test_a_target_between_whole_percents_is_printed_to_its_digit() -> None:
    """A 99.5 % target printed as 100 % would read as a target no policy can meet."""
    from simulations.report import percent

    assert [percent(x) for x in (0.99, 0.995, 0.999, 1.0)] == ["99%", "99.5%", "99.9%", "100%"]
