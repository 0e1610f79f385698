"""A starting daemon's policy rebuilt from the history Prometheus holds (``autoscaler.warm_up``)."""

from __future__ import annotations

import re
from array import array
from collections.abc import Iterable, Mapping
from typing import Any

import pytest

from autoscaler.metrics.queries import owned_query
from autoscaler.metrics.source import Failure, QueryResult, RangeSeries, RangeVector, Series, VectorResult
from autoscaler.record import series_queries
from autoscaler.warm_up import (
    BATCH_POINTS,
    MAX_POINTS,
    FleetHistory,
    WarmUp,
    history_seconds,
    owned_series,
    spans,
    warm_up,
)
from policies.base import Observation
from policies.metric_names import FIRST_TOKENS_OVER_SLO, FIRST_TOKENS_RATE, TTFT_SECONDS_RATE
from policies.policy_file import Workload, parse_policy_document
from policies.predictive import PredictivePolicy
from policies.predictive.budget import PROMPT_LENGTH_SIGMA, miss_share, prefill_tail
from policies.recorded import READY_REPLICAS, REPLICAS
from tests.helpers import workload_doc

WALL = 1_800_000_000.0
TO_NOW = -1_799_990_000.0  # the decision clock reads 10,000 at WALL


class RangeSource:
    """Range queries answered from per-series functions of time, by the series' recorded-metrics name."""

    def __init__(
        self,
        workload: Workload,
        series: Mapping[str, Any],
        failing: Iterable[str] = (),
        failure: Failure = Failure.TIMEOUT,
    ) -> None:
        self.by_query = {query: name for name, query in series_queries(workload).items()}
        for name, owned_name in owned_series(workload).items():  # read with other workloads' (owned_query)
            target = workload.target
            owned = owned_query(owned_name, [target.namespace], target.kind, workload.histogram_reading(name))
            self.by_query[owned] = name
        self.labels = {"namespace": workload.target.namespace, "owner": workload.target.name}
        self.series, self.failing, self.failure = series, set(failing), failure
        self.asked: list[tuple[str, float, float, float]] = []

    def query(self, queries: Iterable[str], now: float) -> Mapping[str, QueryResult]:
        return {}

    def query_vector(self, query: str, now: float) -> VectorResult:
        return VectorResult([])

    def query_range(self, query: str, start: float, end: float, step: float) -> RangeSeries:
        name = self.by_query[query]
        self.asked.append((name, start, end, step))
        if name in self.failing:
            return RangeSeries([], self.failure, str(self.failure))
        at = self.series.get(name)
        if at is None:
            return RangeSeries([], Failure.EMPTY, "the query returned no series")
        stamps = [start + i * step for i in range(int((end - start) // step) + 1)]
        return RangeSeries([(t, float(at(t))) for t in stamps])

    def query_ranges(self, query: str, start: float, end: float, step: float) -> RangeVector:
        single = self.query_range(query, start, end, step)
        if single.failure is not None:
            return RangeVector([], single.failure, single.detail)
        stamps, values = array("d", (t for t, _ in single.samples)), array("d", (v for _, v in single.samples))
        return RangeVector([Series(self.labels, stamps, values)])


def _workload(policy: dict[str, Any]) -> Workload:
    metrics = [{"name": "prompt_tokens_per_second", "target": {"type": "AverageValue", "value": 500}}]
    return parse_policy_document(workload_doc(metrics=metrics, maxReplicas=40, policy=policy)).workloads[0]


def _predictive(workload: Workload) -> PredictivePolicy:
    policy = parse_policy_document(workload_doc(metrics=[m.model_dump(by_alias=True) for m in workload.metrics]))
    decider = policy.decider(workload)
    assert isinstance(decider.policy, PredictivePolicy)
    return decider.policy


def _rising(t: float) -> float:
    """Prompt tokens a second rising by 1,000 every 10 minutes: a sustained ramp."""
    return 2000.0 + 1000.0 * (t - WALL) / 600.0


def test_history_rebuilds_the_trend_a_restart_would_forget() -> None:
    """A daemon restarted in the middle of a ramp: warmed, its first decision already extrapolates the ramp
    (the forecast is above the present demand); started cold, it sees no trend for two horizons."""
    workload = _workload({"type": "predictive"})
    warmed, cold = _predictive(workload), _predictive(workload)
    source = RangeSource(
        workload, {"prompt_tokens_per_second": _rising, REPLICAS: lambda t: 6, READY_REPLICAS: lambda t: 6}
    )
    outcome = warm_up(workload, warmed, source, WALL, TO_NOW, 15.0)
    window = warmed.trend_window
    assert outcome.failed == [] and outcome.samples == int(window // 15)
    assert {(start, end, step) for _, start, end, step in source.asked} == {(WALL - window, WALL - 15, 15.0)}
    first = Observation(WALL + 15 + TO_NOW, 6, {"prompt_tokens_per_second": _rising(WALL + 15)}, 6)
    demand = _rising(WALL + 15) / 500
    assert warmed.recommend(first).details["forecast"] > demand
    assert cold.recommend(first).details["forecast"] == demand


def test_a_learned_headroom_reads_its_memory_within_the_points_prometheus_allows() -> None:
    workload = _workload({"type": "predictive", "learnedHeadroom": {"memorySeconds": 86_400}})
    policy = _predictive(workload)
    assert history_seconds(policy) == 86_400
    source = RangeSource(workload, {"prompt_tokens_per_second": lambda t: 3000, REPLICAS: lambda t: 8})
    outcome = warm_up(workload, policy, source, WALL, TO_NOW, 5.0)
    assert {step for *_, step in source.asked} == {86_400 / MAX_POINTS}  # 5 s would be 17,280 points
    assert outcome.samples >= MAX_POINTS - 1
    assert policy.state.rises is not None and policy.state.rises.seconds > 80_000


def test_a_failed_series_is_reported_and_samples_without_the_count_are_skipped() -> None:
    workload = _workload({"type": "predictive"})
    policy = _predictive(workload)
    failing = RangeSource(workload, {"prompt_tokens_per_second": _rising}, [REPLICAS], Failure.HTTP_ERROR)
    outcome = warm_up(workload, policy, failing, WALL, TO_NOW, 15.0)
    assert outcome.samples == 0 and outcome.failed == ["replicas: http-error"]
    assert [name for name, *_ in failing.asked] == list(series_queries(workload))  # the others were read
    assert not policy.state.trend.samples  # without the count nothing is judged against it


@pytest.mark.parametrize("failure", [Failure.TIMEOUT, Failure.UNREACHABLE])
def test_a_prometheus_that_does_not_answer_is_asked_nothing_more(failure: Failure) -> None:
    """Each query would wait out its timeout: a workload's fourteen would hold the tick for minutes."""
    workload = _workload({"type": "predictive"})
    policy = _predictive(workload)
    source = RangeSource(workload, {"prompt_tokens_per_second": _rising}, [REPLICAS], failure)
    outcome = warm_up(workload, policy, source, WALL, TO_NOW, 15.0)
    assert [name for name, *_ in source.asked] == ["prompt_tokens_per_second", REPLICAS]
    assert outcome.failed == [f"replicas: {failure}", "not asked: 1 more query"]


def test_a_policy_that_keeps_no_history_reads_none() -> None:
    workload = _workload({"type": "threshold"})
    decider = parse_policy_document(workload_doc()).decider(workload)
    source = RangeSource(workload, {})
    assert history_seconds(decider.policy) == 0
    assert warm_up(workload, decider.policy, source, WALL, TO_NOW, 15.0).samples == 0
    assert source.asked == []


@pytest.mark.parametrize("window", [None, 172_800])
def test_a_budget_reads_its_window_of_the_histograms_sum_and_count_back(window: int | None) -> None:
    """A restart does not forget the misses that spent the budget: the TTFT histogram's rates are read back with
    the rest over the budget's window (the slo's, a day at least), and the ledger holds it as before."""
    budget = {"learnedHeadroom": {}, "errorBudget": {"prefillTokensPerSecond": 1000}}
    metrics = [{"name": "prompt_tokens_per_second", "target": {"type": "AverageValue", "value": 500}}]
    slo = {"ttftSeconds": 2, "target": 0.99, **({"windowSeconds": window} if window else {})}
    document = workload_doc(metrics=metrics, maxReplicas=40, slo=slo, policy={"type": "predictive", **budget})
    workload = parse_policy_document(document).workloads[0]
    policy = parse_policy_document(document).decider(workload).policy
    seconds = window or 86_400
    assert isinstance(policy, PredictivePolicy) and history_seconds(policy) == seconds
    series = {
        "prompt_tokens_per_second": lambda t: 3000,  # 6 first tokens a second of 500 tokens: 0.5 s own prefill
        FIRST_TOKENS_RATE: lambda t: 6.0,
        TTFT_SECONDS_RATE: lambda t: 6.0 * (0.5 + 2.6),  # 2.6 s beyond: half of them miss, and a few more
        REPLICAS: lambda t: 8,
    }
    source = RangeSource(workload, series)
    outcome = warm_up(workload, policy, source, WALL, TO_NOW, 15.0)
    assert outcome.failed == [] and {FIRST_TOKENS_RATE, TTFT_SECONDS_RATE} <= {name for name, *_ in source.asked}
    ledger = policy.state.budget
    assert ledger is not None and ledger.first_tokens > 0.95 * 6.0 * seconds
    spent = miss_share(2.6, 2.0, prefill_tail(2.0, 0.5, PROMPT_LENGTH_SIGMA)) / 0.01
    assert ledger.used(0.99) == pytest.approx(spent, rel=0.01) and policy.headroom == pytest.approx(0.6)


def test_a_budgets_day_before_the_rises_memory_is_read_coarser_and_counts_the_same(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An slo counted over a day: before the last hour (the rises' memory) only the ledger reads the past, a tick
    counting up to four intervals of first tokens, so the day is read a minute apart, and the hour 15 s apart, and
    the state is the one a tick-by-tick replay builds."""
    import math

    budget = {"learnedHeadroom": {}, "errorBudget": {"prefillTokensPerSecond": 1000}}
    metrics = [{"name": "prompt_tokens_per_second", "target": {"type": "AverageValue", "value": 500}}]
    document = workload_doc(
        metrics=metrics,
        maxReplicas=40,
        slo={"ttftSeconds": 2, "target": 0.99, "windowSeconds": 86_400},
        policy={"type": "predictive", **budget},
    )
    workload = parse_policy_document(document).workloads[0]

    def firsts(t: float) -> float:
        return 6.0 + 3.0 * math.sin(2 * math.pi * (t - WALL) / 7200)

    series = {
        "prompt_tokens_per_second": lambda t: 500 * firsts(t),
        FIRST_TOKENS_RATE: firsts,
        TTFT_SECONDS_RATE: lambda t: firsts(t) * (0.5 + 0.4 * firsts(t)),  # busier minutes wait longer
        REPLICAS: lambda t: 8,
    }
    warmed = []
    for detail in (None, 86_400.0):  # as the policy says; the whole day tick by tick
        policy = parse_policy_document(document).decider(workload).policy
        assert isinstance(policy, PredictivePolicy) and policy.detail_seconds == 3600
        if detail is not None:  # what the policy would say without the distinction
            monkeypatch.setattr(PredictivePolicy, "detail_seconds", property(lambda _, whole=detail: whole))
        source = RangeSource(workload, series)
        outcome = warm_up(workload, policy, source, WALL, TO_NOW, 15.0)
        warmed.append((policy, outcome, source))
    (coarse, coarse_outcome, coarse_source), (fine, fine_outcome, _) = warmed
    assert {(start, step) for name, start, _, step in coarse_source.asked if name == REPLICAS} == {
        (WALL - 86_400, 60.0),
        (WALL - 3600, 15.0),
    }
    assert coarse_outcome.samples == (86_400 - 3600) // 60 + 3600 // 15 and fine_outcome.samples == 86_400 // 15
    assert coarse.state.budget is not None and fine.state.budget is not None
    assert coarse.state.budget.first_tokens == pytest.approx(fine.state.budget.first_tokens, rel=0.01)
    assert coarse.state.budget.misses == pytest.approx(fine.state.budget.misses, rel=0.01)
    assert coarse.headroom == pytest.approx(fine.headroom, rel=0.01)


FOLLOWER = {
    "type": "predictive",
    "errorBudget": {"prefillTokensPerSecond": 1000, "promptLengthSigma": 0.5},
    "utilization": {"start": 0.7, "prefillTokensPerSecond": 1000, "decodeTokensPerSecond": 300},
}
FOLLOWER_METRICS = [
    {"name": "num_requests_waiting", "target": {"type": "AverageValue", "value": 2}},
    {"name": "kv_cache_usage_perc", "target": {"type": "Value", "value": 0.85}},
]


def _follower() -> tuple[dict[str, Any], Workload, dict[str, Any]]:
    """The follower's file, its workload, and two hours' swing of traffic whose busier minutes miss more."""
    import math

    document = workload_doc(
        metrics=FOLLOWER_METRICS, maxReplicas=40, slo={"ttftSeconds": 2, "target": 0.99}, policy=FOLLOWER
    )

    def firsts(t: float) -> float:
        return 6.0 + 3.0 * math.sin(2 * math.pi * (t - WALL) / 7200)

    series = {
        "prompt_tokens_per_second": lambda t: 500 * firsts(t),
        "generation_tokens_per_second": lambda t: 200 * firsts(t),
        "num_requests_waiting": lambda t: max(0.0, firsts(t) - 7),
        "kv_cache_usage_perc": lambda t: firsts(t) / 10,
        FIRST_TOKENS_RATE: firsts,
        TTFT_SECONDS_RATE: lambda t: firsts(t) * (0.5 + 0.4 * firsts(t)),
        REPLICAS: lambda t: 8,
        READY_REPLICAS: lambda t: 8,
    }
    return document, parse_policy_document(document).workloads[0], series


def test_a_followers_day_before_its_trend_reads_only_what_its_catch_up_counts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The default a file given only an slo is written with: before its trend's window only the budget's series and
    the counts are read (``catch_up_signals``), and the state is the one reading every series builds (the budget,
    the utilization it moved, the trend); a follower counts its budget whether a metric is there or not."""
    document, workload, series = _follower()
    warmed = []
    for signals in ("declared", None):  # as the policy says; every series
        policy = parse_policy_document(document).decider(workload).policy
        assert isinstance(policy, PredictivePolicy) and policy.follows
        if signals is None:
            monkeypatch.setattr(PredictivePolicy, "catch_up_signals", property(lambda _: None))
        source = RangeSource(workload, series)
        assert warm_up(workload, policy, source, WALL, TO_NOW, 15.0).failed == []
        warmed.append((policy, source))
    (lean, lean_source), (whole, whole_source) = warmed
    before = {name for name, start, *_ in lean_source.asked if start < WALL - policy.detail_seconds}
    assert before == {
        REPLICAS,
        READY_REPLICAS,
        FIRST_TOKENS_RATE,
        TTFT_SECONDS_RATE,
        FIRST_TOKENS_OVER_SLO,
        "prompt_tokens_per_second",
    }
    assert len(whole_source.asked) == len(lean_source.asked) + 3
    assert lean.state.budget is not None and whole.state.budget is not None
    assert lean.state.budget.first_tokens == whole.state.budget.first_tokens > 0.95 * 6 * 86_400
    assert lean.state.budget.misses == whole.state.budget.misses > 0
    assert lean.state.utilization is not None and whole.state.utilization is not None
    assert lean.state.utilization.utilization == whole.state.utilization.utilization != 0.7
    assert lean.state.trend.samples == whole.state.trend.samples


def test_a_follower_decides_once_its_minutes_are_read_and_takes_its_day_in_after(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A follower's day is its budget's count, which sums: its trend's minutes are read and passed first, and it is
    listed (it decides) while its day is still to be read; the day is then caught up apart and taken in, to the
    budget and the utilization a reading in order builds (within the minutes counted at the start's utilization)."""
    document, workload, series = _follower()
    apart = parse_policy_document(document).decider(workload).policy
    assert isinstance(apart, PredictivePolicy) and apart.apart() is not None
    source = RangeSource(workload, series)
    history = FleetHistory([(workload, apart)], WALL, TO_NOW, 15.0)
    listed: list[tuple[str, WarmUp]] = []
    while not listed:
        history.read_next(source)
        listed = history.finished()
    recent = WALL - apart.detail_seconds
    assert all(start >= recent for _, start, *_ in source.asked) and not history.done
    assert apart.state.budget is not None and apart.state.budget.span < apart.detail_seconds
    assert len(apart.state.trend.samples) > 0 and history.undecided == 0
    while not history.done:
        history.read_next(source)
    assert history.finished() == [] and history.members == {}
    monkeypatch.setattr(PredictivePolicy, "apart", lambda _: None)
    in_order = parse_policy_document(document).decider(workload).policy
    assert warm_up(workload, in_order, RangeSource(workload, series), WALL, TO_NOW, 15.0).failed == []
    for policy in (apart, in_order):
        assert isinstance(policy, PredictivePolicy) and policy.state.budget is not None
        assert policy.state.utilization is not None
    assert apart.state.budget.span > 80_000
    assert apart.state.budget.first_tokens == pytest.approx(in_order.state.budget.first_tokens, rel=0.002)
    assert apart.state.budget.misses == pytest.approx(in_order.state.budget.misses, rel=0.002)
    assert apart.state.utilization.utilization == pytest.approx(in_order.state.utilization.utilization, rel=0.01)
    assert apart.state.trend.samples == in_order.state.trend.samples


class FleetSource:
    """Range queries of many workloads (``owned_query``): for each workload of the namespaces a query names, its
    prompt tokens (100 a second times its number, the digits of its name) and its counts (8). Refuses as Prometheus
    does (``--query.max-samples``) a query of more namespaces than ``most``, or of ``refused`` at all."""

    def __init__(self, workloads: list[Workload], most: int = 1000, refused: Iterable[str] = ()) -> None:
        self.workloads, self.most, self.refused = workloads, most, set(refused)
        self.asked: list[str] = []

    def query(self, queries: Iterable[str], now: float) -> Mapping[str, QueryResult]:
        return {}

    def query_vector(self, query: str, now: float) -> VectorResult:
        return VectorResult([])

    @staticmethod
    def _value(query: str, name: str) -> float:
        return 100.0 * int(name.rsplit("-", 1)[1]) if "prompt_tokens" in query else 8.0

    def query_ranges(self, query: str, start: float, end: float, step: float) -> RangeVector:
        self.asked.append(query)
        spaces = re.search(r'namespace=~"([^"]*)"', query)
        assert spaces is not None
        named = spaces.group(1).split("|")
        if len(named) > self.most or self.refused & set(named):
            return RangeVector([], Failure.HTTP_ERROR, "query processing would load too many samples into memory")
        stamps = array("d", [start + i * step for i in range(int((end - start) // step) + 1)])
        return RangeVector(
            [
                Series(
                    {"namespace": w.target.namespace, "owner": w.target.name},
                    stamps,
                    array("d", [self._value(query, w.target.name)] * len(stamps)),
                )
                for w in self.workloads
                if w.target.namespace in named
            ]
        )

    def query_range(self, query: str, start: float, end: float, step: float) -> RangeSeries:
        self.asked.append(query)
        name = re.search(r'(?:pod=~|deployment=)"([a-z0-9-]+?)(?:-\[|")', query)
        assert name is not None
        stamps = [start + i * step for i in range(int((end - start) // step) + 1)]
        return RangeSeries([(t, self._value(query, name.group(1))) for t in stamps])


def _fleet(namespaces: int, each: int, policy: dict[str, Any]) -> list[Workload]:
    """``namespaces`` x ``each`` workloads like ``_workload``'s, named ``vllm-<number>``, a copy of one parsed."""
    one = _workload(policy)
    return [
        one.model_copy(update={"target": one.target.model_copy(update={"namespace": f"ns-{n}", "name": f"vllm-{i}"})})
        for i, n in enumerate(n for n in range(namespaces) for _ in range(each))
    ]


def test_a_fleet_is_read_by_series_and_namespaces_and_each_workload_gets_its_own() -> None:
    """Each series is asked once for as many namespaces as ``BATCH_POINTS`` allows, and each workload's policy is
    passed its own values: the trend of workload ``vllm-7`` holds 700 tokens a second over its target of 500."""
    fleet = _fleet(3, 4, {"type": "predictive"})
    policies = [_predictive(w) for w in fleet]
    source = FleetSource(fleet)
    history = FleetHistory(list(zip(fleet, policies, strict=True)), WALL, TO_NOW, 15.0)
    while not history.done:
        history.read_next(source)
    finished = dict(history.finished())
    assert len(source.asked) == 3  # the prompt tokens, the count asked for and the ready count, for all twelve
    assert [finished[w.key] for w in fleet] == [WarmUp(samples=int(policies[0].trend_window // 15))] * 12
    for number, policy in enumerate(policies):
        assert {round(demand, 6) for _, demand in policy.state.trend.samples} == {number * 100 / 500}


def test_a_query_prometheus_finds_too_large_is_asked_again_in_halves_then_by_workload() -> None:
    fleet = _fleet(4, 2, {"type": "predictive"})
    policies = [_predictive(w) for w in fleet]
    source = FleetSource(fleet, most=2, refused=["ns-3"])
    history = FleetHistory(list(zip(fleet, policies, strict=True)), WALL, TO_NOW, 15.0)
    while not history.done:
        history.read_next(source)
    finished = dict(history.finished())
    assert all(outcome.failed == [] and outcome.samples > 0 for outcome in finished.values()) and len(finished) == 8
    # Each series: four namespaces refused; ns-0 and ns-1 answered; ns-2 and ns-3 refused, ns-2 answered, ns-3
    # refused, each of its two workloads by name refused, and so asked with its own query.
    assert len(source.asked) == 3 * (1 + 1 + 1 + 1 + 1 + 2 + 2)
    for number, policy in enumerate(policies):
        assert {round(demand, 6) for _, demand in policy.state.trend.samples} == {number * 100 / 500}


def test_ten_thousand_workloads_read_a_day_in_about_a_hundred_queries() -> None:
    """The module's worked example: the budget's day of eight series for 10,000 workloads in 100 namespaces, a
    query a series for every eight namespaces over the 23 hours read a minute apart and every fifty over the
    hour read a tick apart."""
    metrics = [
        {"name": "num_requests_waiting", "target": {"type": "AverageValue", "value": 2}},
        {"name": "kv_cache_usage_perc", "target": {"type": "Value", "value": 0.85}},
    ]
    document = workload_doc(
        metrics=metrics,
        slo={"ttftSeconds": 2, "target": 0.99},
        policy={
            "type": "predictive",
            "learnedHeadroom": {},
            "errorBudget": {"prefillTokensPerSecond": 1000, "promptLengthSigma": 0.5},
        },
    )
    one = parse_policy_document(document).workloads[0]
    policy = parse_policy_document(document).decider(one).policy
    assert len(series_queries(one)) == 8 and spans(policy, 15.0) == [(86_400, 3600, 60.0), (3600, 0.0, 15.0)]
    fleet = [
        one.model_copy(
            update={"target": one.target.model_copy(update={"namespace": f"ns-{i % 100}", "name": f"m-{i}"})}
        )
        for i in range(10_000)
    ]
    history = FleetHistory([(w, policy) for w in fleet], WALL, TO_NOW, 15.0)
    assert len(history.reads) == 8 * (13 + 2)
    # The follower written for a file given only an slo: its nine series over the hour, six over the day.
    follower = parse_policy_document(
        workload_doc(metrics=metrics, slo={"ttftSeconds": 2, "target": 0.99}, policy=FOLLOWER)
    )
    one = follower.workloads[0]
    policy = follower.decider(one).policy
    assert len(series_queries(one)) == 9 and spans(policy, 15.0) == [(86_400, 630, 60.0), (630, 0.0, 15.0)]
    fleet = [
        one.model_copy(
            update={"target": one.target.model_copy(update={"namespace": f"ns-{i % 100}", "name": f"m-{i}"})}
        )
        for i in range(10_000)
    ]
    assert len(FleetHistory([(w, policy) for w in fleet], WALL, TO_NOW, 15.0).reads) == 6 * 13 + 9 * 1


def test_a_namespace_too_large_for_one_query_is_read_in_parts_by_name() -> None:
    """A thousand workloads in one namespace, a day each 15 s apart: 5.8 million points a series, read in five
    parts of at most ``BATCH_POINTS`` (208 workloads), each naming its targets (``pod=~``, ``deployment=~``), every
    workload in one part."""
    fleet = _fleet(1, 1000, {"type": "predictive", "learnedHeadroom": {"memorySeconds": 86_400}})
    policy = _predictive(fleet[0])
    history = FleetHistory([(w, policy) for w in fleet], WALL, TO_NOW, 15.0)
    counts = [r for r in history.reads if r.name == REPLICAS]
    tokens = [r for r in history.reads if r.name == "prompt_tokens_per_second"]
    assert len(counts) == len(tokens) == 5 and spans(policy, 15.0) == [(86_400, 0.0, 15.0)]
    assert all('deployment=~"(' in r.query for r in counts) and all('pod=~"(' in r.query for r in tokens)
    assert sorted(k for r in counts for k in r.keys) == sorted(w.key for w in fleet)
    assert all(len(r.keys) * 86_400 / 15 <= BATCH_POINTS for r in counts)
