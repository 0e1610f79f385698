"""The controller's safety rules with a fake metric source and actuator and an injected clock: no server,
no binary (the same rules against the real servers are in tests/integration)."""

from __future__ import annotations

import math
import types
from array import array
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from structlog.testing import capture_logs

from autoscaler.actuators.base import ActuatorError, Owner, Ownership, ReadFailure, ScaleState, WriteResult, target_key
from autoscaler.actuators.dryrun import DryRunActuator
from autoscaler.controller import Controller
from autoscaler.metrics.source import QueryResult, RangeSeries, RangeVector, Sample, Series, VectorResult
from autoscaler.state import HEARTBEAT_S
from policies.policy_file import TargetRef, load_policy_file, parse_policy_document
from tests.helpers import workload_doc

ROOT = Path(__file__).resolve().parents[1]


class FakeSource:
    """Every metric has its own query, ``waiting:<workload name>``; the value is what the test set."""

    def __init__(self) -> None:
        self.values: dict[str, float] = {}

    def query(self, queries: Iterable[str], now: float) -> Mapping[str, QueryResult]:
        return {q: QueryResult(self.values.get(q.split(":", 1)[1])) for q in queries}

    def query_vector(self, query: str, now: float) -> VectorResult:
        return VectorResult([])

    def query_range(self, query: str, start: float, end: float, step: float) -> RangeSeries:
        return RangeSeries([])


@dataclass
class FakeActuator:
    states: dict[str, ScaleState] = field(default_factory=dict)
    ownership: dict[str, Ownership] = field(default_factory=dict)
    broken: set[str] = field(default_factory=set)
    writes: list[tuple[str, int]] = field(default_factory=list)
    events: list[tuple[str, str]] = field(default_factory=list)
    kinds: list[str] = field(default_factory=list)  # each Event's type, Normal or Warning
    dry_run: bool = False

    def read(self, target: TargetRef) -> ScaleState:
        return self.states[target.name]

    def read_many(self, targets: list[TargetRef]) -> dict[tuple[str, str, str], ScaleState | ActuatorError]:
        return {target_key(t): self.states.get(t.name) or ActuatorError(ReadFailure.NOT_FOUND, "gone") for t in targets}

    def scale(self, target: TargetRef, state: ScaleState, replicas: int) -> WriteResult:
        self.writes.append((target.name, replicas))
        self.states[target.name] = ScaleState(replicas, state.ready, "v2", state.annotations)
        return WriteResult(True, "applied", attempts=1)

    def owners(self, target: TargetRef, fresh: bool = False) -> Ownership:
        if target.name in self.broken:
            raise RuntimeError("a bug in one workload's path")
        return self.ownership.get(target.name, Ownership())

    def event(self, target: TargetRef, kind: str, reason: str, message: str) -> None:
        self.events.append((target.name, reason))
        self.kinds.append(kind)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Elector:
    def __init__(self, leading: bool) -> None:
        self.leading = leading

    def is_leader(self) -> bool:
        return self.leading


def controller(
    actuator: Any,
    source: FakeSource,
    names: tuple[str, ...] = ("a",),
    clock: Clock | None = None,
    elector: Any = None,
    **extra: Any,
) -> Controller:
    workloads = []
    for name in names:
        settings: dict[str, Any] = {
            "target": {"namespace": "llm", "name": name},
            "minReplicas": 2,
            "maxReplicas": 8,
            "metrics": [
                {"name": "waiting", "query": f"waiting:{name}", "target": {"type": "AverageValue", "value": 2}}
            ],
            **extra,
        }
        doc = workload_doc(**settings)
        workloads += doc["workloads"]
    document = parse_policy_document({**doc, "interval": 15, "workloads": workloads})
    ticking = clock or Clock()
    return Controller(None, document, source, actuator, clock=ticking, decision_clock=ticking, elector=elector)


@pytest.fixture
def source() -> FakeSource:
    fake = FakeSource()
    fake.values = {"a": 12.0, "b": 12.0}
    return fake


def state(replicas: int, **annotations: str) -> ScaleState:
    return ScaleState(replicas, replicas, "v1", annotations)


def test_a_load_step_scales_within_the_bounds(source: FakeSource) -> None:
    actuator = FakeActuator({"a": state(2)})
    source.values["a"] = 1000.0
    line = controller(actuator, source).tick()[0]
    assert actuator.writes == [("a", 6)] and line["applied"]  # 100 % per 15 s, then up to maxReplicas 8
    assert actuator.events == [("a", "SuccessfulRescale")]


def test_a_count_above_max_is_brought_to_max(source: FakeSource) -> None:
    actuator = FakeActuator({"a": state(12)})
    controller(actuator, source).tick()
    assert actuator.writes == [("a", 8)]


def test_pause_holds_and_paused_replicas_sets_a_bounded_count(source: FakeSource) -> None:
    actuator = FakeActuator({"a": state(2, **{"vllm-autoscaler.io/paused": "true"})})
    assert controller(actuator, source).tick()[0]["reason"] == "paused"
    assert actuator.writes == []
    actuator.states["a"] = state(4, **{"vllm-autoscaler.io/paused-replicas": "20"})
    controller(actuator, source).tick()
    assert actuator.writes == [("a", 8)]


@pytest.mark.parametrize(
    ("ownership", "reason", "event"),
    [
        (Ownership((Owner("HorizontalPodAutoscaler h", 2, 4),)), "foreign-autoscaler", "ForeignAutoscaler"),
        (Ownership((), ("listing horizontalpodautoscalers failed: 403",)), "owner-unknown", "OwnerUnknown"),
    ],
)
def test_an_owned_or_unknown_target_is_refused_with_one_event(
    source: FakeSource, ownership: Ownership, reason: str, event: str
) -> None:
    actuator = FakeActuator({"a": state(2)}, {"a": ownership})
    daemon = controller(actuator, source)
    assert [daemon.tick()[0]["reason"] for _ in range(3)] == [reason] * 3
    assert actuator.writes == [] and actuator.events == [("a", event)]


def test_dry_run_writes_nothing_and_shadows_an_owner(source: FakeSource) -> None:
    fake = FakeActuator({"a": state(2)}, {"a": Ownership((Owner("HorizontalPodAutoscaler h", 2, 4),))})
    line = controller(DryRunActuator(fake), source).tick()[0]
    assert (line["desired"], line["owner_desired"], line["shadow"], line["write"]) == (6, 4, True, "dry-run")
    assert fake.writes == [] and fake.events == []


@pytest.mark.parametrize(("owner_desired", "agrees"), [(10, False), (4, False), (8, True)])
def test_dry_run_says_every_tick_what_it_would_set_beside_the_owner(
    source: FakeSource, owner_desired: int, agrees: bool
) -> None:
    """Shadow mode is a comparison: a would-scale line every tick, agreeing or not, with the owner's current
    and desired counts, the count it would set now and the count its policy heads for (past the rate limit)."""
    fake = FakeActuator({"a": state(2)}, {"a": Ownership((Owner("HorizontalPodAutoscaler h", 2, owner_desired),))})
    source.values["a"] = 1000.0  # far past maxReplicas: the policy heads for 8, the rate limit allows 6 now
    daemon = controller(DryRunActuator(fake), source)
    fake.states["a"] = state(8 if agrees else 2)
    with capture_logs() as logs:
        daemon.tick()
        daemon.tick()
    lines = [e for e in logs if e["event"] == "would-scale"]
    assert len(lines) == 2
    for line in lines:
        assert (line["owner_current"], line["owner_desired"], line["heading"]) == (2, owner_desired, 8)
        assert line["agrees"] is agrees and line["write"] == "dry-run"
    assert fake.writes == [] and fake.events == []
    assert daemon.telemetry.registry.get_sample_value("vllm_autoscaler_heading_replicas", {"workload": "llm/a"}) == 8


def test_each_tick_leaves_a_record_in_the_hpas_terms(source: FakeSource) -> None:
    """What ``status`` and the state ConfigMap show: the per-replica average of an ``AverageValue`` metric, the
    policy's proposal and the three conditions; a condition keeps its transition time while its status holds."""
    actuator = FakeActuator({"a": state(2)})
    source.values["a"] = 1000.0  # the policy asks for 500 replicas: 8 at most, 6 this tick (the rate limit)
    clock = Clock()
    daemon = controller(actuator, source, clock=clock)
    daemon.tick()
    record = daemon.records["deployment_llm_a.json"]
    assert record.metrics["waiting"] == {"value": 1000.0, "target": 2.0, "type": "AverageValue", "average": 500.0}
    assert (record.recommended, record.desired) == (500, 6)
    reasons = {c.type: (c.status, c.reason) for c in record.conditions}
    assert reasons == {
        "AbleToScale": ("True", "SucceededRescale"),
        "ScalingActive": ("True", "ValidMetricFound"),
        "ScalingLimited": ("True", "TooManyReplicas"),
    }
    clock.now += 15
    source.values["a"] = 14.0  # 7 replicas' worth at 8: nothing held back, the scale-down window holds 8
    daemon.tick()
    after = {c.type: c for c in daemon.records["deployment_llm_a.json"].conditions}
    assert after["ScalingActive"].last_transition_time == 1000.0  # still True
    assert (after["ScalingLimited"].status, after["ScalingLimited"].last_transition_time) == ("False", 1015.0)


def test_a_steady_workload_keeps_its_record_with_its_metrics_and_time_new(source: FakeSource) -> None:
    """A tick that changes only the metrics' values and the time keeps the workload's record (refreshed in those
    two); a new recommendation rebuilds it, and so does the heartbeat, with the behavior history's times new."""
    actuator = FakeActuator({"a": state(6)})
    source.values["a"] = 12.0  # 6 replicas' worth: within the tolerance
    clock = Clock()
    daemon = controller(actuator, source, clock=clock)
    daemon.tick()
    first = daemon.records["deployment_llm_a.json"]
    clock.now += 15
    source.values["a"] = 12.5
    daemon.tick()
    kept = daemon.records["deployment_llm_a.json"]
    assert kept is first and (kept.updated_at, kept.metrics["waiting"]["value"]) == (1015.0, 12.5)
    assert daemon._changed == []
    clock.now += 15
    source.values["a"] = 16.0  # 8 replicas' worth: a new count
    daemon.tick()
    rebuilt = daemon.records["deployment_llm_a.json"]
    assert rebuilt is not first and rebuilt.desired == 8 and daemon._changed == ["deployment_llm_a.json"]
    while clock.now < 1000.0 + HEARTBEAT_S:  # every record built afresh at the first tick, and again then
        clock.now += 15
        daemon.tick()
    latest = daemon.records["deployment_llm_a.json"]
    assert latest is not rebuilt and max(at for _, at in latest.behavior["recommendations"]) == clock.now


def test_records_built_at_one_tick_share_their_behaviors_pairs(source: FakeSource) -> None:
    """Two workloads that recommended the same counts at the same ticks hold one list a pair in their records' behavior
    (``dump_behavior``): 21 pairs of its own a workload were 22 MB at 10,000 workloads."""
    actuator = FakeActuator({"a": state(2), "b": state(2)})
    source.values = {"a": 4.0, "b": 4.0}
    clock = Clock()
    daemon = controller(actuator, source, names=("a", "b"), clock=clock)
    for _ in range(3):
        daemon.tick()
        clock.now += 15
    daemon._built_at = -math.inf  # every record built again at the next tick, as at the heartbeat
    daemon.tick()
    a, b = (daemon.records[f"deployment_llm_{n}.json"].behavior["recommendations"] for n in "ab")
    assert a == b and all(x is y for x, y in zip(a, b, strict=True))
    assert [at for _, at in a] == [1000.0, 1000.0, 1015.0, 1030.0, 1045.0]  # the first seeded with the count seen


def _the_projects(thing: object) -> bool:
    """Whether ``thing`` is an object of the project's own types, or a frame of its code, the test kit's aside."""
    if isinstance(thing, types.FrameType):
        path = Path(thing.f_code.co_filename).resolve()
        return path.is_relative_to(ROOT) and not path.is_relative_to(ROOT / "autoscaler" / "testing")
    module = type(thing).__module__
    return module.partition(".")[0] in {"autoscaler", "policies", "simulations"} and not module.startswith(
        "autoscaler.testing"
    )


def test_ticks_that_scale_and_hold_leave_no_cycle_behind(source: FakeSource) -> None:
    """The daemon freezes what a tick leaves alive (``daemon.settle``): a cycle that became garbage once frozen would
    stay until the hourly thaw. None does: with the collector off, a quarter of an hour of ticks that scale up, hold,
    scale down and build every record again at the heartbeat leave nothing of the project's for a collection to find.
    Only what the ticks made: an earlier test of the same worker may leave a thread running (a fault proxy's handler
    on a kept-alive connection, CI found), whose objects become garbage when it ends; every object alive before the
    ticks is held until the count, and the test kit's own are not counted."""
    import gc

    actuator = FakeActuator({"a": state(2), "b": state(4)})
    clock = Clock()
    daemon = controller(actuator, source, names=("a", "b"), clock=clock)
    daemon.tick()
    gc.collect()
    gc.disable()
    before = gc.get_objects()  # none of these can become garbage while the ticks run
    try:
        for step in range(60):
            clock.now += 15
            source.values["a"] = 16.0 if step < 30 else 2.0
            daemon.tick()
        assert actuator.writes and daemon.records["deployment_llm_a.json"].current == 2
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
        ours = [type(thing).__name__ for thing in gc.garbage if _the_projects(thing)]
        assert not ours
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        del before
        gc.enable()


def test_a_dry_run_record_compares_with_the_owner(source: FakeSource) -> None:
    fake = FakeActuator({"a": state(2)}, {"a": Ownership((Owner("HorizontalPodAutoscaler h", 2, 4),))})
    source.values["a"] = 1000.0
    daemon = controller(DryRunActuator(fake), source)
    daemon.tick()
    record = daemon.records["deployment_llm_a.json"]
    assert (record.dry_run, record.desired, record.heading, record.owner_current, record.owner_desired) == (
        True,
        6,
        8,
        2,
        4,
    )
    assert record.agrees is False
    assert {c.type: c.reason for c in record.conditions}["AbleToScale"] == "DryRun"


class BudgetSource(FakeSource):
    """vLLM's prompt tokens and TTFT histogram for a budget to count: 4 first tokens a second, each 0.5 s of own
    prefill, then ``beyond`` seconds more."""

    def __init__(self, beyond: float) -> None:
        super().__init__()
        self.beyond = beyond

    def query(self, queries: Iterable[str], now: float) -> Mapping[str, QueryResult]:
        def value(q: str) -> float | None:
            if "time_to_first_token_seconds_sum" in q:
                return 4.0 * (0.5 + self.beyond)
            if "time_to_first_token_seconds_count" in q:
                return 4.0
            return 2000.0 if "prompt_tokens_total" in q else None

        return {q: QueryResult(value(q)) for q in queries}

    def query_vector(self, query: str, now: float) -> VectorResult:
        """Workload ``a``'s series, as a batched query (``metrics.queries.batched_query``) gives it; no stale pod."""
        if query.startswith("timestamp("):  # the stale pods (``freshness_query``)
            return VectorResult([])
        found = next(iter(self.query([query], now).values())).value
        return VectorResult(
            [] if found is None else [Sample({"namespace": "llm", "kind": "Deployment", "owner": "a"}, found)]
        )


def test_a_budget_the_policy_counts_is_exported_for_the_burn_alert() -> None:
    """The first tokens and estimated misses a policy counted into its budget, as the counters the
    ``VllmAutoscalerErrorBudgetBurn`` rule divides (tests/fixtures/alerts-test.yaml)."""
    budget = {"prefillTokensPerSecond": 1000, "promptLengthSigma": 0.5}
    policy = {"type": "predictive", "learnedHeadroom": {}, "errorBudget": budget}
    metrics = [{"name": "prompt_tokens_per_second", "target": {"type": "AverageValue", "value": 100}}]
    document = parse_policy_document(
        workload_doc(
            target={"namespace": "llm", "name": "a"},
            maxReplicas=100,
            policy=policy,
            slo={"ttftSeconds": 2, "target": 0.99},
            metrics=metrics,
        )
    )
    clock = Clock()
    daemon = Controller(
        None, document, BudgetSource(2.6), FakeActuator({"a": state(20)}), clock=clock, decision_clock=clock
    )
    for runtime in daemon.runtime.values():
        runtime.warmed = True
    for _ in range(4):
        daemon.tick()
        clock.now += 15
    sample = daemon.telemetry.registry.get_sample_value
    firsts = sample("vllm_autoscaler_slo_first_tokens_total", {"workload": "llm/a"})
    misses = sample("vllm_autoscaler_slo_misses_total", {"workload": "llm/a"})
    assert firsts == pytest.approx(4 * 4.0 * 15) and 0.45 < misses / firsts < 0.6  # at 1.3 times the slo, half miss
    assert sample("vllm_autoscaler_slo_target", {"workload": "llm/a"}) == 0.99


def test_a_replica_that_does_not_lead_never_writes(source: FakeSource) -> None:
    actuator = FakeActuator({"a": state(2)})
    line = controller(actuator, source, elector=Elector(False)).tick()[0]
    assert line["write"] == "not-leader" and actuator.writes == []


def test_one_workloads_fault_never_stalls_another(source: FakeSource) -> None:
    actuator = FakeActuator({"a": state(2), "b": state(2)}, broken={"a"})
    lines = controller(actuator, source, names=("a", "b")).tick()
    assert lines[0]["reason"] == "workload-failed"
    assert actuator.writes == [("b", 6)]


def test_healthz_fails_when_no_tick_completes_within_three_intervals(source: FakeSource) -> None:
    clock = Clock()
    daemon = controller(FakeActuator({"a": state(2)}), source, clock=clock)
    assert daemon.healthy()[0]
    clock.now += 3 * 15 + 31
    ok, why = daemon.healthy()
    assert not ok and "no tick has completed" in why
    daemon.tick()
    assert daemon.healthy()[0]
    clock.now += 3 * 15 + 31
    assert not daemon.healthy()[0]


def test_the_cold_start_is_measured_from_the_write_to_ready(source: FakeSource) -> None:
    clock = Clock()
    actuator = FakeActuator({"a": state(2)})
    daemon = controller(actuator, source, clock=clock, coldStartSeconds="auto")
    for _ in range(3):
        actuator.states["a"] = state(2)
        daemon.runtime["llm/a"].decider.behavior_state.__init__()  # type: ignore[misc]
        daemon.tick()  # scale to 6; the new pods are not ready yet
        actuator.states["a"] = ScaleState(6, 2, "v3")
        clock.now += 120
        daemon.tick()
        actuator.states["a"] = ScaleState(6, 6, "v4")
        clock.now += 60
        daemon.tick()
        clock.now += 600
    decider = daemon.runtime["llm/a"].decider
    assert list(decider.cold_starts.samples) == [180.0, 180.0, 180.0]
    assert decider.ctx.cold_start_seconds == 180.0  # auto: decided with the measured p90


def test_a_reload_keeps_the_measured_cold_start(source: FakeSource) -> None:
    daemon = controller(FakeActuator({"a": state(2)}), source, coldStartSeconds="auto")
    decider = daemon.runtime["llm/a"].decider
    for seconds in (100.0, 110.0, 120.0):
        decider.cold_start_measured(seconds)
    measured = decider.ctx.cold_start_seconds
    assert measured == pytest.approx(118.0)
    daemon.apply_document(daemon.document)  # what a changed policy file does
    reloaded = daemon.runtime["llm/a"].decider
    assert reloaded is not decider and reloaded.ctx.cold_start_seconds == measured


ZERO = {"minReplicas": 0, "activation": {"query": "activation:gateway", "threshold": 0}}


def test_dry_run_beside_an_owner_that_went_to_zero_decides_the_wake_up(source: FakeSource) -> None:
    keda = Ownership((Owner("ScaledObject keda/eval", 0, 0),))
    fake = FakeActuator({"a": state(0)}, {"a": keda})
    daemon = controller(DryRunActuator(fake), source, **ZERO)
    assert daemon.tick()[0]["reason"] == "metrics-unavailable"  # no activation value: held where it is
    source.values["gateway"] = 0.0
    assert daemon.tick()[0]["reason"] == "scaled-to-zero"  # no request at the gateway: it would stay there
    source.values["gateway"] = 2.0
    line = daemon.tick()[0]
    # The fake's waiting metric (12, at AverageValue 2) has a value at zero: the wake-up orders its 6 at once.
    assert (line["reason"], line["desired"], line["write"], line["activation"]) == ("activated", 6, "dry-run", 2.0)
    assert fake.writes == [] and fake.events == []


def test_live_a_zero_it_did_not_set_is_left_alone_with_the_gateway_busy(source: FakeSource) -> None:
    actuator = FakeActuator({"a": state(0)})
    source.values["gateway"] = 5.0
    assert controller(actuator, source, **ZERO).tick()[0]["reason"] == "scaling-disabled"
    assert actuator.writes == []


def test_without_the_replicas_activity_it_never_goes_to_zero(source: FakeSource) -> None:
    """The fake source has no series for the built-in activity queries: no value is never idleness."""
    actuator = FakeActuator({"a": state(1)})
    source.values.update(a=0.0, gateway=0.0)
    clock = Clock()
    daemon = controller(actuator, source, clock=clock, **ZERO)
    for _ in range(100):
        daemon.tick()
        clock.now += 15
    assert 0 not in [replicas for _, replicas in actuator.writes]


class HistorySource(FakeSource):
    """Range queries counted; each answers three samples of the value the test set, or raises."""

    def __init__(self, broken: bool = False, clock: Clock | None = None, seconds: float = 0.0) -> None:
        super().__init__()
        self.ranges: list[str] = []
        self.broken = broken
        self.clock, self.seconds = clock, seconds  # each answer takes this long on the clock

    def query_range(self, query: str, start: float, end: float, step: float) -> RangeSeries:
        self.ranges.append(query)
        if self.clock is not None:
            self.clock.now += self.seconds
        if self.broken:
            raise RuntimeError("a bug in the history's path")
        value = self.values.get(query.split(":", 1)[1], 3.0) if query.startswith("waiting:") else 3.0
        return RangeSeries([(end - 2 * step, value), (end - step, value), (end, value)])

    def query_ranges(self, query: str, start: float, end: float, step: float) -> RangeVector:
        """A query of many workloads (their counts, from kube-state-metrics): 3 for every workload of llm."""
        single = self.query_range(query, start, end, step)
        stamps, values = array("d", (t for t, _ in single.samples)), array("d", (v for _, v in single.samples))
        return RangeVector([Series({"namespace": "llm", "owner": name}, stamps, values) for name in "abcdefgh"])


def test_a_predictive_workload_is_warmed_from_history_once_before_its_first_decision() -> None:
    source = HistorySource()
    source.values = {"a": 12.0}
    actuator = FakeActuator({"a": state(3)})
    ticking = Clock()
    control = controller(actuator, source, clock=ticking, policy={"type": "predictive"})
    control.tick()
    assert len(source.ranges) == 3  # the metric, the count asked for and the ready count
    policy: Any = control.runtime["llm/a"].decider.policy
    assert len(policy.state.trend.samples) == 4  # three from the history, then the first tick's
    ticking.now += 15
    control.tick()
    assert len(source.ranges) == 3


def test_a_history_that_fails_leaves_the_workload_deciding() -> None:
    source = HistorySource(broken=True)
    source.values = {"a": 1000.0}
    actuator = FakeActuator({"a": state(2)})
    with capture_logs() as logs:
        line = controller(actuator, source, policy={"type": "predictive"}).tick()[0]
    assert line["applied"] and actuator.writes == [("a", 6)]  # as the first test: 100 % or 4 pods per 15 s
    assert any(e["event"] == "warm-up-incomplete" and "a bug" in str(e["failed"]) for e in logs)


def test_a_slow_history_is_read_over_several_ticks_and_the_loop_stays_alive() -> None:
    """Range queries of 2 s each, half of a 15 s interval a tick: the first tick asks a's own query, the counts of
    every workload (one query each: ``FleetHistory``) and b's own, and the rest hold (``warming-up``); the second
    reads c to f. No query is asked twice, and a tick ends within the liveness limit (three intervals and 30 s)
    however many workloads wait, where reading them all in the first held it for minutes on a large fleet."""
    ticking = Clock()
    source = HistorySource(clock=ticking, seconds=2.0)
    names = tuple("abcdef")
    source.values = {name: 12.0 for name in names}
    actuator = FakeActuator({name: state(3) for name in names})
    control = controller(actuator, source, names, clock=ticking, policy={"type": "predictive"})
    holding = []
    for _ in range(3):
        started = ticking.now
        lines = control.tick()
        assert ticking.now - started <= 8 and control.healthy()[0]  # the last query begun before 7.5 s were spent
        assert not any(line["applied"] for line in lines if line["reason"] == "warming-up")
        holding.append("".join(line["workload"][-1] for line in lines if line["reason"] == "warming-up"))
        ticking.now += 15
    assert holding == ["cdef", "", ""] and len(source.ranges) == 8


def test_a_reload_reads_a_history_half_read_again_for_the_new_policy() -> None:
    ticking = Clock()
    source = HistorySource(clock=ticking, seconds=2.0)  # the first tick asks a's query, the counts and b's
    names = ("a", "b", "c")
    source.values = {name: 12.0 for name in names}
    actuator = FakeActuator({name: state(3) for name in names})
    control = controller(actuator, source, names, clock=ticking, policy={"type": "predictive"})
    control.tick()
    assert not control.runtime["llm/c"].warmed and len(source.ranges) == 4
    control.apply_document(control.document)
    ticking.now += 15
    control.tick()
    assert control.runtime["llm/c"].warmed and len(source.ranges) == 7  # c's own and the counts asked afresh


def test_workloads_that_read_no_history_or_may_sleep_at_zero_are_warmed_first() -> None:
    ticking = Clock()
    source = HistorySource(clock=ticking, seconds=1.5)  # b's five queries spend the tick's 7.5 s
    source.values = {"a": 12.0, "b": 0.0, "c": 12.0, "gateway": 2.0}
    workloads = [
        workload_doc(
            target={"namespace": "llm", "name": name},
            metrics=[{"name": "waiting", "query": f"waiting:{name}", "target": {"type": "AverageValue", "value": 2}}],
            policy={"type": policy},
            **extra,
        )["workloads"][0]
        for name, policy, extra in (("a", "predictive", {}), ("b", "predictive", ZERO), ("c", "threshold", {}))
    ]
    document = parse_policy_document({**workload_doc(), "interval": 15, "workloads": workloads})
    actuator = FakeActuator({"a": state(3), "b": state(0), "c": state(3)})
    control = Controller(None, document, source, actuator, clock=ticking, decision_clock=ticking)
    first = {line["workload"]: line["reason"] for line in control.tick()}
    assert first["llm/a"] == "warming-up" and "warming-up" not in (first["llm/b"], first["llm/c"])


class CatchingUp:
    """A history still being read for ``keys`` (``FleetHistory``'s face to the controller): each read spends 8 s."""

    def __init__(self, clock: Clock, keys: set[str]) -> None:
        self.clock, self.keys, self.members = clock, keys, {k: None for k in keys}
        self.done, self.undecided = False, 0

    def finished(self) -> list[Any]:
        return []

    def read_next(self, source: Any) -> None:
        self.clock.now += 8

    def catching_up(self, key: str) -> bool:
        return key in self.keys


@pytest.mark.parametrize(
    ("current", "proposed", "catching_up", "desired", "reason"),
    [
        (5, 3, True, 5, "catching-up"),  # a fall waits for the day
        (5, 7, True, 7, "steady"),  # a rise does not
        (5, 3, False, 3, "steady"),  # once the day is in, it falls
        (9, 3, True, 8, "catching-up"),  # above maxReplicas: to it, no further
    ],
)
def test_a_workload_whose_day_is_still_read_rises_but_does_not_fall(
    source: FakeSource, current: int, proposed: int, catching_up: bool, desired: int, reason: str
) -> None:
    """A workload that decides once its last minutes are read, its day still to come (``Policy.apart``): it decides
    on what it has, which may be hotter than the day's count calls for, so a lower count is held until the day is
    in; a higher one is written."""
    from policies.pipeline import Decision

    ticking = Clock()
    actuator = FakeActuator({"a": state(current)})
    control = controller(actuator, source, clock=ticking, policy={"type": "predictive"}, minReplicas=1)
    runtime = control.runtime["llm/a"]
    runtime.warmed = True
    decided_at = []

    def decide(o: Any) -> Decision:
        decided_at.append(o.now)
        return Decision(o.now, current, proposed, proposed, "steady")

    runtime.decider.decide = decide  # type: ignore[method-assign]
    control._history = CatchingUp(ticking, {"llm/a"} if catching_up else set())  # type: ignore[assignment]
    started = ticking.now
    line = control.tick()[0]
    assert (line["desired"], line["reason"], line["recommended"]) == (desired, reason, proposed)
    assert decided_at == [started] and ticking.now > started  # every workload decides: the day is read after
    assert actuator.writes == ([] if desired == current else [("a", desired)])
    if reason == "catching-up":
        assert {c.type: c.reason for c in runtime.conditions}["ScalingLimited"] == "CatchingUp"


def test_a_reload_while_a_day_is_read_reads_the_history_again_keeping_the_behavior(source: FakeSource) -> None:
    """A reload drops a history half read (it was planned for the old policies): a workload still catching its day
    up would decide on its minutes alone from then on, so its new policy starts afresh and reads it all again; its
    behavior history (the stabilization window) is kept, as every reload keeps it."""
    ticking = Clock()
    control = controller(FakeActuator({"a": state(5)}), source, clock=ticking, policy={"type": "predictive"})
    runtime = control.runtime["llm/a"]
    runtime.warmed = True
    runtime.decider.policy.state.trend.update(1.0, 0.0, 600.0)  # type: ignore[attr-defined]
    behavior = runtime.decider.behavior_state
    for catching_up, warmed, trend in ((False, True, 1), (True, False, 0)):
        control._history = CatchingUp(ticking, {"llm/a"} if catching_up else set())  # type: ignore[assignment]
        control.apply_document(control.document)
        runtime = control.runtime["llm/a"]
        assert runtime.warmed is warmed and len(runtime.decider.policy.state.trend.samples) == trend  # type: ignore[attr-defined]
        assert runtime.decider.behavior_state is behavior


def test_a_threshold_workload_reads_no_history(source: FakeSource) -> None:
    history = HistorySource()
    history.values = dict(source.values)
    controller(FakeActuator({"a": state(2)}), history).tick()
    assert history.ranges == []


@pytest.mark.parametrize(
    ("ready", "kind", "reason"),
    [
        (2, ["Warning", "Warning"], ["FailedGetExternalMetric", "FailedComputeMetricsReplicas"]),
        (0, ["Normal"], ["WaitingForReadyReplicas"]),
    ],
)
def test_metrics_that_fail_are_a_warning_unless_no_replica_is_ready(
    source: FakeSource, ready: int, kind: list[str], reason: list[str]
) -> None:
    """With replicas ready a metric without a value is a failure; with none ready (a cold start, a wake from
    zero) vLLM has nothing to export yet, and that is expected. Either is said once, until it changes."""
    actuator = FakeActuator({"a": ScaleState(2, ready, "v1", {})})
    del source.values["a"]
    daemon = controller(actuator, source)
    for _ in range(3):
        daemon.tick()
    assert actuator.events == [("a", r) for r in reason] and actuator.kinds == kind


@pytest.mark.parametrize(("leading", "events"), [(True, [("a", "ForeignAutoscaler")]), (False, [])])
def test_only_the_leader_writes_events(source: FakeSource, leading: bool, events: list[tuple[str, str]]) -> None:
    """The standby decides beside the leader and says so in its log; Events are the leader's, as the HPA's
    are the controller-manager leader's, so no warning is written twice."""
    actuator = FakeActuator({"a": state(2)}, {"a": Ownership((Owner("HorizontalPodAutoscaler h", 2, 4),))})
    controller(actuator, source, elector=Elector(leading)).tick()
    assert actuator.events == events and actuator.writes == []


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b"# padding\n" * 120_000, "(file): over 1 MiB, more than a ConfigMap holds; refused before parsing"),
        (b"interval: 15\n# caf\xe9\n", "(file): not UTF-8 text: byte 0xe9 at offset 18"),
        (None, "prometheus.url: 'not a url' is not an http(s) URL with a host"),
        (None, "workloads[0].maxReplicas: Input should be less than or equal to 2147483647"),
    ],
)
def test_a_reload_that_cannot_be_used_keeps_the_last_good_policy(
    source: FakeSource, tmp_path: Path, content: bytes | None, problem: str
) -> None:
    """Too big, not UTF-8, a URL that is not one, a count past 32 bits: each refused with what it is, once, and
    the last good policy goes on deciding."""
    good = workload_doc(
        target={"namespace": "llm", "name": "a"},
        metrics=[{"name": "waiting", "query": "waiting:a", "target": {"type": "AverageValue", "value": 2}}],
    )
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump(good))
    actuator = FakeActuator({"a": state(2)})
    daemon = Controller(path, load_policy_file(path), source, actuator, clock=Clock(), decision_clock=Clock())
    if content is None:
        broken = (
            {**good, "prometheus": {"url": "not a url"}}
            if "url" in problem
            else workload_doc(target={"namespace": "llm", "name": "a"}, maxReplicas=10**40)
        )
        content = yaml.safe_dump(broken).encode()
    path.write_bytes(content)
    with capture_logs() as logs:
        lines = [daemon.tick()[0] for _ in range(2)]
    rejected = [e for e in logs if e["event"] == "policy-rejected"]
    assert len(rejected) == 1 and any(problem in p for p in rejected[0]["problems"])
    assert rejected[0]["keeping"] == "last good policy"
    assert lines[0]["desired"] == 6 and actuator.writes == [("a", 6)]  # the good policy decided
    assert actuator.events.count(("a", "InvalidPolicy")) == 1


@dataclass
class SlowActuator(FakeActuator):
    """Each scale write takes a while, and the most writes in flight at once is counted."""

    in_flight: int = 0
    most: int = 0

    def scale(self, target: TargetRef, state: ScaleState, replicas: int) -> WriteResult:
        import threading
        import time

        lock = self.__dict__.setdefault("_lock", threading.Lock())
        with lock:
            self.in_flight += 1
            self.most = max(self.most, self.in_flight)
        time.sleep(0.02)
        with lock:
            self.in_flight -= 1
        return super().scale(target, state, replicas)


def test_a_burst_of_scale_ups_is_written_together_within_a_bound(source: FakeSource) -> None:
    """Every workload decides first, then the writes go out ``WRITE_CONCURRENCY`` at a time (how long a burst takes
    is the bench's ``burst_wall_s``), each one written and logged once."""
    from autoscaler.controller import WRITE_CONCURRENCY

    names = tuple(f"w{i}" for i in range(64))
    source.values = dict.fromkeys(names, 12.0)
    actuator = SlowActuator(states={n: state(2) for n in names})
    ctl = controller(actuator, source, names=names)
    lines = ctl.tick()
    assert sorted(actuator.writes) == sorted((n, 6) for n in names)
    assert all(line["applied"] and line["write"] == "applied" for line in lines)
    assert 1 < actuator.most <= WRITE_CONCURRENCY
    assert len(actuator.events) == 64  # one SuccessfulRescale each


def test_one_write_that_raises_fails_alone(source: FakeSource) -> None:
    source.values = {"a": 12.0, "b": 12.0}
    actuator = FakeActuator(states={"a": state(2), "b": state(2)})
    ctl = controller(actuator, source, names=("a", "b"))
    ctl._ownership = _raising_for("a", ctl._ownership)  # type: ignore[method-assign]
    lines = {line["workload"]: line for line in ctl.tick()}
    assert lines["llm/a"]["write"] == "failed" and not lines["llm/a"]["applied"]
    assert lines["llm/b"]["applied"] and actuator.writes == [("b", 6)]


def _raising_for(name: str, check: Any) -> Any:
    def ownership(runtime: Any, state: Any, line: Any, fresh: bool = False) -> Any:
        if fresh and runtime.workload.target.name == name:
            raise RuntimeError("a bug in one workload's write")
        return check(runtime, state, line, fresh)

    return ownership
