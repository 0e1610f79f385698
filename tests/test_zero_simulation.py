"""Scale to zero in the closed-loop simulator: the gateway holds requests while no replica is ready, GPU time
stops at zero, the report gives the time at zero and the wake-up's first tokens, and keda-sum goes to zero as
KEDA does (its cooldownPeriod) where the file allows zero."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from autoscaler.cli import main
from policies.policy_file import PolicyFile, parse_policy_document
from simulations.contenders import keda_contender, policy_contender
from simulations.replica_model import parse_overrides
from simulations.runner import RunResult, run
from simulations.traces import Trace
from tests.helpers import assert_report_consistent, workload_doc

COLD_S, IDLE_S, INTERVAL_S = 120.0, 240, 15.0
MODEL = parse_overrides([f"cold_start_s={COLD_S}"])


def sessions(gap_s: float = 3000.0, seed: int = 3) -> Trace:
    """Two ten-minute sessions at 0.4 requests/s, ``gap_s`` apart: the second arrives at a fleet at zero."""
    rng = np.random.default_rng(seed)
    first = np.cumsum(rng.exponential(2.5, 240))
    first = first[first < 600]
    second = first + 600 + gap_s
    arrivals = np.concatenate([first, second])
    n = len(arrivals)
    return Trace("sessions", arrivals - arrivals[0], np.full(n, 800), np.full(n, 100))


def document(**workload: Any) -> PolicyFile:
    settings: dict[str, Any] = {
        "minReplicas": 0,
        "maxReplicas": 4,
        "metrics": [{"name": "num_requests_waiting", "target": {"type": "AverageValue", "value": 2}}],
        "activation": {"query": "sum(gateway_open)", "threshold": 0, "idleSeconds": IDLE_S},
        "policy": {"type": "predictive"},
        **workload,
    }
    return parse_policy_document(workload_doc(**settings))


def simulate(trace: Trace, doc: PolicyFile, keda: bool = False) -> RunResult:
    workload = doc.workloads[0]
    contender = keda_contender(doc, workload, MODEL, False) if keda else policy_contender(doc, workload, MODEL)
    return run(trace, MODEL, contender, 1, 2.0)


def first_zero(result: RunResult) -> float:
    t, replicas = result.timeline["t"], result.timeline["replicas"]
    return next(at for at, n in zip(t, replicas, strict=True) if n == 0)


def test_zero_comes_only_after_the_idle_time() -> None:
    trace = sessions()
    result = simulate(trace, document())
    last_of_first = float(trace.arrival_s[trace.arrival_s < 1000].max())
    assert result.zero is not None
    assert first_zero(result) >= last_of_first + IDLE_S  # no request since, at the gateway or in a replica
    assert first_zero(result) <= last_of_first + IDLE_S + 60 + 2 * INTERVAL_S  # the rate's minute, two ticks


def test_the_first_request_after_the_gap_wakes_the_fleet_within_one_interval() -> None:
    trace = sessions()
    result = simulate(trace, document())
    woke_at = float(trace.arrival_s[trace.arrival_s > 1000].min())
    t, replicas = result.timeline["t"], result.timeline["replicas"]
    ordered = next(at for at, n in zip(t, replicas, strict=True) if at >= woke_at and n > 0)
    assert ordered - woke_at <= INTERVAL_S
    assert result.zero is not None and result.zero.wakes == 1
    # The requests that woke it waited at the gateway for a cold start, and count against the SLO: those that came
    # during it waited for its rest, served in order once a replica was ready.
    assert result.zero.wake_ttft_p50_s is not None and result.zero.wake_ttft_p50_s >= COLD_S / 2
    assert result.zero.wake_ttft_max_s is not None and result.zero.wake_ttft_max_s >= COLD_S
    assert result.slo_attainment < 1.0 and result.dropped_requests == 0


def test_gpu_time_stops_at_zero() -> None:
    trace = sessions()
    zero = simulate(trace, document())
    kept = simulate(trace, document(minReplicas=1, activation=None))
    assert zero.zero is not None and kept.zero is None
    at_zero_h = zero.zero.seconds_at_zero * MODEL.gpus_per_replica / 3600  # the kept fleet's one replica then
    # What the kept fleet paid at zero, less what waking cost after (a backlog the cold start let build).
    assert at_zero_h * 0.5 <= kept.gpu_hours - zero.gpu_hours <= at_zero_h
    replica_s = sum(result * INTERVAL_S for result in zero.timeline["replicas"])
    assert zero.gpu_hours == pytest.approx(replica_s * MODEL.gpus_per_replica / 3600, rel=0.05)  # sampled once a tick


def test_no_gap_longer_than_the_idle_time_no_zero() -> None:
    result = simulate(sessions(gap_s=IDLE_S - 60), document())
    assert result.zero is None and min(result.timeline["replicas"]) >= 1


def test_keda_sum_goes_to_zero_after_its_cooldown_period() -> None:
    trace = sessions()
    ours = simulate(trace, document(activation={"query": "q", "threshold": 0, "idleSeconds": 900}))
    keda = simulate(trace, document(activation={"query": "q", "threshold": 0, "idleSeconds": 900}), keda=True)
    last_of_first = float(trace.arrival_s[trace.arrival_s < 1000].max())
    assert last_of_first + 300 <= first_zero(keda) < last_of_first + 300 + 60  # cooldownPeriod 300 s
    assert first_zero(ours) >= last_of_first + 900
    assert keda.zero is not None and keda.zero.wakes == 1


def test_the_report_of_a_run_at_zero_is_consistent(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    trace_file = tmp_path / "sessions.csv"
    trace = sessions()
    stamps = 1_764_547_200.0 + trace.arrival_s
    rows = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    rows += [f"{s:.3f},{p},{o}" for s, p, o in zip(stamps, trace.prompt_tokens, trace.output_tokens, strict=True)]
    trace_file.write_text("\n".join(rows) + "\n")
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps(workload_doc(**document().workloads[0].model_dump(by_alias=True, mode="json"))))
    code = main(
        ["-q", "simulate", "--config", str(policy), "--trace", str(trace_file), "--cold-start", "120", "-o", "json"]
    )
    assert code == 0
    data = json.loads(capsys.readouterr().out)
    assert_report_consistent(data)
    runs = {r["policy"]: r for r in data["results"]}
    assert runs["predictive"]["zero"]["wakes"] == 1 and runs["keda-sum"]["zero"]["wakes"] == 1
    assert "zero" not in runs["static-best"]


def test_on_recorded_traffic_zero_follows_the_idle_gaps_and_each_wake_is_within_an_interval(
    shared_trace: Any,
) -> None:
    """A recorded day (ServeGen's first, its rates scaled to about one request in four minutes): Poisson arrivals
    leave idle gaps through the night. Every zero comes after ``idleSeconds`` with no arrival, and every
    request that arrives at zero is answered by a scale-up within one interval."""
    from simulations.traces import read_rate

    idle_s, model = 420, parse_overrides(["cold_start_s=90"])
    trace = read_rate(shared_trace / "servegen_m-mid_rate_600s.csv", seed=4, rate_scale=0.004 / 1790).window(0, 86_400)
    doc = document(activation={"query": "sum(gateway_open)", "threshold": 0, "idleSeconds": idle_s})
    result = run(trace, model, policy_contender(doc, doc.workloads[0], model), 1, 2.0)
    t, replicas = np.asarray(result.timeline["t"]), np.asarray(result.timeline["replicas"])
    zeros = t[1:][(replicas[1:] == 0) & (replicas[:-1] > 0)]
    assert result.zero is not None and len(zeros) >= 3 and result.zero.wakes >= 3
    arrivals = trace.arrival_s
    for at in zeros:
        assert not ((arrivals > at - idle_s) & (arrivals <= at)).any(), at  # idle for idleSeconds before it
    before = np.searchsorted(t, arrivals, side="right") - 1  # the last tick at or before each arrival
    asleep = arrivals[(before >= 0) & (replicas[np.maximum(before, 0)] == 0)]
    assert len(asleep) >= 3
    for arrival in asleep:  # a tick within one interval (and the step that counts the arrival) wakes it
        window = (t >= arrival) & (t <= arrival + INTERVAL_S + model.step_s)
        assert replicas[window].max(initial=0) > 0, arrival
    assert 0 < result.zero.seconds_at_zero < trace.duration_s and result.dropped_requests == 0
    assert result.zero.wake_ttft_p50_s is not None and result.zero.wake_ttft_p50_s >= 90 - INTERVAL_S
