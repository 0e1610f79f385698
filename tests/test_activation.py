"""Scale to zero and back, decided by ``policies.activation`` through the one decider (table-driven)."""

from __future__ import annotations

import pytest

from policies.base import Observation
from policies.pipeline import Decision, Reason, WorkloadDecider
from policies.policy_file import PolicyFileError, parse_policy_document
from tests.helpers import workload_doc

ACTIVATION = {"query": 'sum(gateway_queued{model="m"})', "threshold": 0, "idleSeconds": 600}


def _decider(**overrides: object) -> WorkloadDecider:
    settings: dict[str, object] = {"minReplicas": 0, "activation": ACTIVATION, **overrides}
    document = parse_policy_document(workload_doc(**settings))
    return document.decider(document.workloads[0])


def _tick(
    decider: WorkloadDecider,
    now: float,
    current: int,
    waiting: float | None = 0.0,
    gateway: float | None = 0.0,
    activity: float | None = 0.0,
) -> Decision:
    decision = decider.decide(
        Observation(now, current, {"num_requests_waiting": waiting}, current, activation=gateway, activity=activity)
    )
    decider.applied(decision)
    return decision


def _asleep() -> WorkloadDecider:
    decider = _decider()
    for t in range(0, 601, 15):
        decision = _tick(decider, float(t), 1)
    assert decision.reason == Reason.SCALED_TO_ZERO and decision.desired == 0
    return decider


def test_zero_comes_only_after_idle_seconds_of_idle_ticks() -> None:
    decider = _decider()
    desired = [_tick(decider, float(t), 1).desired for t in range(0, 601, 15)]
    assert desired[:-1] == [1] * 40 and desired[-1] == 0  # idle from 0 s; 600 s later, zero


@pytest.mark.parametrize(
    ("name", "gateway", "activity"),
    [
        ("a request at the gateway", 1.0, 0.0),
        ("a request in a replica", 0.0, 2.0),
        ("the activation query failed", None, 0.0),
        ("the replicas' metrics failed", 0.0, None),
    ],
)
def test_one_busy_or_unknown_tick_restarts_the_idle_clock(
    name: str, gateway: float | None, activity: float | None
) -> None:
    decider = _decider()
    for t in range(0, 300, 15):
        _tick(decider, float(t), 1)
    _tick(decider, 300.0, 1, gateway=gateway, activity=activity)  # a metrics outage is not idleness
    desired = {t: _tick(decider, float(t), 1).desired for t in range(315, 916, 15)}
    assert all(d == 1 for t, d in desired.items() if t < 915) and desired[915] == 0


def test_activation_wakes_its_own_zero_at_the_first_tick_that_sees_it() -> None:
    decider = _asleep()
    assert _tick(decider, 615.0, 0, waiting=None).reason == Reason.SCALED_TO_ZERO
    woke = _tick(decider, 630.0, 0, waiting=None, gateway=3.0, activity=None)
    assert (woke.desired, woke.reason) == (1, Reason.ACTIVATED)


def test_activation_orders_the_policys_proposal_for_the_demand_it_sees() -> None:
    # A metric with a value at zero (the gateway's queue, AverageValue 2): 9 waiting need 5 replicas, at once.
    gateway_queue = [{"name": "gateway_waiting", "query": "sum(gateway_queued)", "target": {"value": 2}}]
    decider = _decider(metrics=gateway_queue, maxReplicas=4)
    decider.zero.asleep = True
    woke = decider.decide(Observation(0.0, 0, {"gateway_waiting": 9.0}, 0, activation=9.0))
    assert (woke.recommended, woke.desired, woke.reason) == (5, 4, Reason.ACTIVATED)  # within maxReplicas


def test_a_threshold_above_zero_must_be_exceeded() -> None:
    decider = _decider(activation={**ACTIVATION, "threshold": 2})
    decider.zero.asleep = True
    assert _tick(decider, 0.0, 0, gateway=2.0).desired == 0
    assert _tick(decider, 15.0, 0, gateway=2.5).desired == 1


@pytest.mark.parametrize("gateway", [None, 5.0])
def test_a_zero_set_by_hand_is_left_alone(gateway: float | None) -> None:
    decision = _tick(_decider(), 0.0, 0, gateway=gateway)
    assert (decision.desired, decision.reason) == (0, Reason.SCALING_DISABLED)


def test_no_activation_value_at_zero_holds_there() -> None:
    decider = _asleep()
    assert _tick(decider, 615.0, 0, gateway=None).reason == Reason.METRICS_UNAVAILABLE


def test_awake_the_policy_never_proposes_zero() -> None:
    decider = _decider(behavior={"scaleDown": {"stabilizationWindowSeconds": 0}})
    assert _tick(decider, 0.0, 3, waiting=0.0, gateway=1.0).desired == 1  # the policy's floor awake is 1


def test_a_scale_up_by_hand_from_its_zero_makes_a_later_hand_zero_foreign() -> None:
    decider = _asleep()
    _tick(decider, 615.0, 2, gateway=1.0, activity=1.0)
    assert _tick(decider, 630.0, 0, gateway=5.0).reason == Reason.SCALING_DISABLED


def test_a_reload_keeps_its_zero() -> None:
    decider = _asleep()
    document = parse_policy_document(workload_doc(minReplicas=0, activation=ACTIVATION, maxReplicas=6))
    reloaded = document.decider(document.workloads[0], decider)
    assert _tick(reloaded, 615.0, 0, gateway=1.0).reason == Reason.ACTIVATED


@pytest.mark.parametrize(
    ("overrides", "problem"),
    [
        ({"minReplicas": 0}, "workloads[0].minReplicas: 0 needs an 'activation' block"),
        ({"minReplicas": 1, "activation": ACTIVATION}, "workloads[0].activation: applies only with minReplicas: 0"),
        ({"minReplicas": 0, "activation": {"threshold": 1}}, "workloads[0].activation.query: required field"),
        ({"minReplicas": 0, "activation": {**ACTIVATION, "idleSeconds": "0s"}}, "workloads[0].activation.idleSeconds"),
        ({"minReplicas": 0, "activation": {**ACTIVATION, "threshold": -1}}, "workloads[0].activation.threshold"),
    ],
)
def test_validation_names_the_field(overrides: dict[str, object], problem: str) -> None:
    with pytest.raises(PolicyFileError) as caught:
        parse_policy_document(workload_doc(**overrides))
    assert any(p.startswith(problem) for p in caught.value.problems), caught.value.problems


def test_idle_seconds_take_a_duration() -> None:
    document = parse_policy_document(workload_doc(minReplicas=0, activation={**ACTIVATION, "idleSeconds": "15m"}))
    assert document.workloads[0].activation is not None and document.workloads[0].activation.idle_seconds == 900
