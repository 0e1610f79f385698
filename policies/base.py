"""What every policy sees and returns, and the interface a policy implements.

A policy turns one observation into a raw replica proposal. It does no I/O and never reads the clock:
``Observation.now`` is the only time it knows. Anything it remembers between ticks lives in its
``state`` attribute, a plain dataclass, so that a replay is deterministic and a reload can carry it over.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

from pydantic import BaseModel

from policies.metric_names import TTFT_P90
from policies.spec import Activation, Capacity, MetricSpec, ResolvedBehavior, Slo

MAX_METRIC_VALUE = 1e12
"""Larger than any fleet's signal (a million replicas with a million waiting requests each): a value past it
is a broken exporter or query, held like NaN instead of carried into the arithmetic (where 1e306 overflowed
to infinity and then raised OverflowError converting it to a count)."""


def usable(value: float | None) -> bool:
    """The one rule for a metric value a decision may use: finite, and within ``MAX_METRIC_VALUE``."""
    return value is not None and math.isfinite(value) and abs(value) <= MAX_METRIC_VALUE


@dataclass(frozen=True, slots=True)
class Observation:
    """One tick's inputs. A metric maps to ``None`` when it had no value (empty, NaN, error, stale)."""

    now: float
    current_replicas: int
    metrics: Mapping[str, float | None]
    ready_replicas: int | None = None
    # With an ``activation`` block: its query's value, and the replicas' own activity (running plus waiting
    # requests plus prompt tokens per second; 0 only when no request is anywhere in them).
    activation: float | None = None
    activity: float | None = None

    def value(self, name: str) -> float | None:
        value = self.metrics.get(name)
        return value if usable(value) else None

    @property
    def capacity_basis(self) -> int:
        """The replicas that carry today's load: ready ones when known (as the HPA counts for ``Value``)."""
        return self.current_replicas if self.ready_replicas is None else self.ready_replicas


@dataclass(frozen=True)
class WorkloadContext:
    """Per-workload facts a policy may need besides its own parameters."""

    metrics: tuple[MetricSpec, ...]
    min_replicas: int
    max_replicas: int
    interval: float
    cold_start_seconds: float
    behavior: ResolvedBehavior
    activation: Activation | None = None  # set: the workload may go to zero (``min_replicas`` is its floor awake)
    slo: Slo | None = None
    capacity: Capacity | None = None  # set: predictive learns it from this seed (``Workload.learns_capacity``)


@dataclass(frozen=True, slots=True)
class Proposal:
    """A raw recommendation. ``replicas is None`` means: hold, and leave no trace in the windows. ``missing``: the
    metrics the policy had no value for; the decider applies the missing-metric rule to them (``held``)."""

    replicas: int | None
    reason: str
    details: Mapping[str, Any] = field(default_factory=dict)
    missing: tuple[str, ...] = ()


class Policy(Protocol):
    """The interface of a policy, every member of it; ``PolicyBase`` gives the optional ones their defaults, and
    ``policies.registry`` puts it under a plug-in that does not subclass it, so callers never probe for one."""

    Params: ClassVar[type[BaseModel]]
    type: ClassVar[str]
    tuning_knob: ClassVar[str | None]
    coarse_intervals: ClassVar[int]
    params: BaseModel | None
    ctx: WorkloadContext | None
    state: Any

    @property
    def history_seconds(self) -> float: ...

    @property
    def detail_seconds(self) -> float: ...

    def resolved(self) -> dict[str, Any]: ...

    def recommend(self, observation: Observation) -> Proposal: ...

    def catch_up(self, observation: Observation) -> None: ...

    @property
    def catch_up_signals(self) -> frozenset[str] | None: ...

    def apart(self) -> Policy | None: ...

    def absorb(self, older: Policy) -> None: ...


class PolicyBase:
    """The optional members of a policy, with what they mean when a policy leaves them out.

    * ``tuning_knob``: the one setting ``simulate --tune`` searches, named as a policy file names it; None: ``--tune``
      refuses the policy with a one-line error.
    * ``history_seconds``: how much of the past the policy's state is built from; a starting daemon passes that much
      of Prometheus's history through ``recommend`` before its first decision (``autoscaler.warm_up``). 0: none.
    * ``detail_seconds``: the recent part of it read a tick at a time; what is older is read ``coarse_intervals``
      ticks apart and passed through ``catch_up``. By default all of it, a tick at a time.
    * ``catch_up(observation)``: a tick of the history before ``detail_seconds``, for the state that reaches back
      that far; by default ``recommend``, its proposal discarded.
    * ``catch_up_signals``: the recorded series ``catch_up`` reads beside the counts (asked for and ready) that
      every tick of history carries; the warm-up reads no other before ``detail_seconds``. None, the default: all.
    * ``apart()`` and ``absorb(older)``: a copy of the policy with no state, that the history before
      ``detail_seconds`` is caught up in apart from the recent part, and the taking in of what it learned. The
      warm-up then passes the recent part first, so that the policy decides from then on, and the older part
      as it is read, in later ticks. None, the default: the history is passed through the policy in order, and
      it decides once all of it is.
    * ``resolved()``: the settings the policy runs with, its defaults worked out, for a report; by default none.
    """

    Params: ClassVar[type[BaseModel]]
    type: ClassVar[str]
    tuning_knob: ClassVar[str | None] = None
    coarse_intervals: ClassVar[int] = 1
    params: BaseModel | None = None
    ctx: WorkloadContext | None = None
    state: Any = None

    @property
    def history_seconds(self) -> float:
        return 0.0

    @property
    def detail_seconds(self) -> float:
        return self.history_seconds

    def resolved(self) -> dict[str, Any]:
        return {}

    def recommend(self, observation: Observation) -> Proposal:
        raise NotImplementedError

    def catch_up(self, observation: Observation) -> None:
        self.recommend(observation)

    @property
    def catch_up_signals(self) -> frozenset[str] | None:
        return None

    def apart(self) -> Policy | None:
        return None

    def absorb(self, older: Policy) -> None:
        raise NotImplementedError


def is_latency_quantile(spec: MetricSpec) -> bool:
    """A latency quantile: the built-in TTFT p90, or a query of ``histogram_quantile``."""
    if spec.query is None:
        return spec.name == TTFT_P90
    return "histogram_quantile" in spec.query


def no_requests(spec: MetricSpec, raw: float | None) -> bool:
    """A latency quantile that is NaN: its histogram has series but no request in the window (Prometheus's
    ``histogram_quantile`` of zero counts), which is no load, not a missing metric."""
    return raw is not None and math.isnan(raw) and is_latency_quantile(spec)


def metric_value(spec: MetricSpec, observation: Observation) -> float | None:
    """The one rule for a metric's value at a tick: usable, or none; and 0 where there were no requests
    (``no_requests``): held as missing, an idle latency quantile kept an idle fleet at its size for good.
    An empty result (no series) is still no value. Table-tested in tests/test_policies.py
    (test_an_idle_latency_quantile_is_no_load)."""
    raw = observation.metrics.get(spec.name)
    if no_requests(spec, raw):
        return 0.0
    return raw if usable(raw) else None


def observed_metrics(
    ctx: WorkloadContext, observation: Observation
) -> tuple[list[tuple[MetricSpec, float]], list[str]]:
    """The workload's metrics that have a usable value this tick, with it, and the names of those without."""
    present: list[tuple[MetricSpec, float]] = []
    missing: list[str] = []
    for spec in ctx.metrics:
        value = metric_value(spec, observation)
        if value is None:
            missing.append(spec.name)
        else:
            present.append((spec, value))
    return present, missing


def held(proposal: Proposal, current: int) -> bool:
    """The HPA's missing-metric rule, written once as ``computeReplicasForMetrics`` writes it, and applied once, by
    the decider (``pipeline.WorkloadDecider``) to every policy's proposal: with no value at all, or with some
    missing and the rest proposing fewer replicas than now, hold (which leaves no trace in the windows); a missing
    metric never blocks a scale-up. Table-tested in tests/test_policies.py (test_missing_metrics_follow_the_hpa)."""
    return proposal.replicas is None or (bool(proposal.missing) and proposal.replicas < current)
