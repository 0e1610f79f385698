"""The simulator's front door (``simulations/request.py``): one request in, one comparison out, the same as
``vllm-autoscaler simulate`` prints for the same flags."""

from __future__ import annotations

import json
from typing import Any

import pytest

import simulations.request
from autoscaler.cli import main
from policies.policy_file import parse_policy_document
from simulations.builtin import builtin_document
from simulations.replica_model import ReplicaModel
from simulations.request import SimulationRequest, chosen_policy, resolve, simulate
from simulations.traces import Trace


def test_a_request_is_what_the_command_prints(capsys: pytest.CaptureFixture[str]) -> None:
    done = simulate(SimulationRequest(time_scale=8.0, policies=("threshold",)))
    assert main(["simulate", "--time-scale", "8", "--policy", "threshold", "-o", "json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    got = {r["policy"]: (r["gpu_hours"], r["slo_attainment"]) for r in done.report["results"]}
    assert got == {r["policy"]: (r["gpu_hours"], r["slo_attainment"]) for r in printed["results"]}
    assert done.policy_types == ["threshold"] and done.idle is None  # a choice was made: no built-in idle model


def test_the_slo_comes_from_the_request_then_the_file_then_the_default() -> None:
    document = parse_policy_document(
        {
            **builtin_document(ReplicaModel()),
            "workloads": [
                {**builtin_document(ReplicaModel())["workloads"][0], "slo": {"ttftSeconds": 1.5, "target": 0.95}}
            ],
        },
        "<test>",
    )
    assert SimulationRequest().slo() == (2.0, 0.99)
    assert SimulationRequest(document=document).slo() == (1.5, 0.95)
    assert SimulationRequest(document=document, slo_ttft=3.0).slo() == (3.0, 0.95)


def test_the_empty_request_is_the_builtin_scenarios() -> None:
    assert SimulationRequest().builtin_scenarios
    assert not SimulationRequest(policies=("pid",)).builtin_scenarios
    assert not SimulationRequest(time_scale=2.0).builtin_scenarios


def test_the_chosen_policy_is_the_cheapest_that_met_the_slo_as_a_file_that_loads() -> None:
    done = simulate(SimulationRequest(policies=("threshold", "pid"), slo_target=0.85))
    meeting = [r for r in done.comparison.results if r.policy in done.policy_types and r.meets(0.85)]
    assert len(meeting) == 2  # the built-in day at 85 %: both meet it, threshold for less
    choice = chosen_policy(done)
    assert choice is not None and choice.policy == min(meeting, key=lambda r: r.gpu_hours).policy == "threshold"
    assert choice.text.startswith("# Written by `vllm-autoscaler simulate`")
    assert choice.cheaper_static is None  # it undercuts the fixed fleet there


def test_no_policy_that_met_the_slo_is_no_choice() -> None:
    done = simulate(SimulationRequest(time_scale=8.0, policies=("threshold",)))  # eight times as fast: it misses
    assert chosen_policy(done) is None


def test_without_numba_the_simulation_says_it_runs_uncompiled(monkeypatch: pytest.MonkeyPatch) -> None:
    """The ``[sim]`` extra is not installed: a note says so, and what would speed the run up."""
    notes: list[str] = []
    monkeypatch.setattr("simulations.request.COMPILED", False)
    simulate(SimulationRequest(time_scale=8.0, policies=("threshold",)), lambda text, end: notes.append(text))
    assert any("numba is not installed" in n and "vllm-autoscaler[sim]" in n for n in notes)


@pytest.mark.parametrize(("seconds", "said"), [(17.0, True), (0.7, False)])
def test_a_first_compile_is_said(monkeypatch: pytest.MonkeyPatch, seconds: float, said: bool) -> None:
    """The first run after an install compiles the simulator for some seconds before anything else: a note says so,
    where loading it from numba's cache, about a second, is not worth one."""
    notes: list[str] = []
    monkeypatch.setattr("simulations.request._compile", lambda: seconds)
    simulate(SimulationRequest(time_scale=8.0, policies=("threshold",)), lambda text, end: notes.append(text))
    assert any(n.startswith("compiled the simulator in 17 s") for n in notes) == said


def test_the_builtin_workload_is_sized_for_the_trace_as_it_is_replayed(monkeypatch: pytest.MonkeyPatch) -> None:
    """At ``--time-scale 24`` a day runs in an hour: the minutes the follower's plan replays and the fleet it
    load-tests are of the hour, so the sizing reads the trace already scaled, the one the run replays."""
    sized: list[float] = []
    real = simulations.request.sized_builtin

    def spy(model: ReplicaModel, trace: Trace, *args: Any, **kwargs: Any) -> Any:
        sized.append(trace.duration_s)
        return real(model, trace, *args, **kwargs)

    monkeypatch.setattr(simulations.request, "sized_builtin", spy)
    whole = resolve(SimulationRequest(), 2.0, 0.99)[1]
    _, trace, _, _ = resolve(SimulationRequest(time_scale=24.0), 2.0, 0.99)
    assert trace.duration_s == pytest.approx(whole.duration_s / 24)
    assert sized == [pytest.approx(whole.duration_s), pytest.approx(trace.duration_s)]


@pytest.mark.parametrize("given_only_an_slo", [False, True])
def test_the_fixed_fleets_search_beside_the_plan_finds_what_it_finds_after_it(
    monkeypatch: pytest.MonkeyPatch, given_only_an_slo: bool
) -> None:
    """On a long trace with two cores, the fixed fleet's search runs in a worker while the follower is planned
    (``jobs.beside``), for the built-in workload or a file that gives only an SLO; the report is the one the search
    after the plan gives, as with one process."""
    import simulations.jobs as jobs

    document = None
    if given_only_an_slo:
        raw = {"target": {"kind": "Deployment", "namespace": "llm", "name": "vllm"}, "minReplicas": 1}
        raw |= {"maxReplicas": 24, "slo": {"ttftSeconds": 2, "target": 0.99}}
        document = parse_policy_document({"workloads": [raw]}, "<test>")
    request = SimulationRequest(document=document, time_scale=8.0, policies=("predictive",))
    alone = simulate(SimulationRequest(document=document, time_scale=8.0, policies=("predictive",), jobs=1))
    monkeypatch.setattr(jobs, "PARALLEL_MIN_REQUESTS", 0)
    monkeypatch.setattr(jobs.os, "cpu_count", lambda: 2)
    besides: list[object] = []
    real = simulations.request.beside

    def spy(work: Any) -> Any:
        besides.append(work)
        return real(work)

    monkeypatch.setattr(simulations.request, "beside", spy)
    forked = simulate(request)
    assert len(besides) == 1
    assert forked.report == alone.report
