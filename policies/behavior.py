"""The HPA v2 ``behavior`` normalizer: stabilization windows, scale-event rate limits and bounds.

This reproduces ``normalizeDesiredReplicasWithBehaviors`` and the functions it calls in
kubernetes/kubernetes ``pkg/controller/podautoscaler/horizontal.go``, including details that change
decisions at the edges:

* window and period cutoffs are strict (``timestamp.After(now - window)``);
* the recommendation history is seeded with the current count the first time a target is seen, stores
  the *raw* recommendation, and reuses the last entry older than both windows instead of appending;
* a policy's period starts from ``current - added + deleted`` within that period, counting events of both
  directions, and scale events are stored with the HPA's "mark outdated, replace the last outdated one"
  bookkeeping (an outdated event still counts for the other direction's longer period until replaced);
* ``Percent`` rounds up when scaling up and truncates when scaling down.

State is an explicit object and ``now`` is an argument, so the same inputs always give the same result.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from enum import StrEnum
from typing import NamedTuple

from policies.spec import PolicyType, ResolvedBehavior, ScalingRules, SelectPolicy


class TimedRecommendation(NamedTuple):
    """A raw recommendation and when it was made: a tuple, unpacked in ``stabilize``'s loop (twice as fast as a
    dataclass's attributes at a window of 21) and left untracked by the garbage collector."""

    replicas: int
    at: float


@dataclass(slots=True)
class ScaleEvent:
    change: int
    at: float
    outdated: bool = False


@dataclass
class BehaviorState:
    """What the HPA keeps per target between syncs: raw recommendations and scale events."""

    recommendations: list[TimedRecommendation] = field(default_factory=list)
    scale_up_events: list[ScaleEvent] = field(default_factory=list)
    scale_down_events: list[ScaleEvent] = field(default_factory=list)

    def record_initial(self, current: int, now: float) -> None:
        """Seed the window with the current count the first time the target is seen."""
        if not self.recommendations:
            self.recommendations.append(TimedRecommendation(current, now))

    def store_scale_event(self, behavior: ResolvedBehavior, previous: int, new: int, now: float) -> None:
        """Record an applied rescale (``storeScaleEvent``); call it only once the write took effect."""
        if new == previous:
            return
        if new > previous:
            events, rules, change = self.scale_up_events, behavior.up, new - previous
        else:
            events, rules, change = self.scale_down_events, behavior.down, previous - new
        cutoff = now - _longest_period(rules)
        outdated_index = -1
        for index, event in enumerate(events):
            if event.at < cutoff:
                event.outdated = True
            if event.outdated:
                outdated_index = index
        replacement = ScaleEvent(change, now)
        if outdated_index >= 0:
            events[outdated_index] = replacement
        else:
            events.append(replacement)

    def history_size(self) -> int:
        return len(self.recommendations) + len(self.scale_up_events) + len(self.scale_down_events)


class Limit(StrEnum):
    """Why the normalized count differs from the stabilized recommendation, if it does."""

    NONE = "none"
    RATE = "rate-limited"
    BOUNDS = "bounds"


@dataclass(frozen=True, slots=True)
class Normalized:
    stabilized: int
    desired: int
    limit: Limit


def _longest_period(rules: ScalingRules) -> int:
    return max((p.period_seconds for p in rules.policies or []), default=0)


def _changes_in_period(events: list[ScaleEvent], period: int, now: float) -> int:
    cutoff = now - period
    return sum(event.change for event in events if event.at > cutoff)


@functools.lru_cache(maxsize=1024)
def _recommendation(replicas: int, at: float) -> TimedRecommendation:
    """One tuple for every workload that recommends ``replicas`` at ``at`` (a tick decides them all at one time): a
    full window a workload was 21 tuples of its own, 13 MB at 10,000 workloads (docs/decisions/daemon-scale.md)."""
    return TimedRecommendation(replicas, at)


def stabilize(state: BehaviorState, behavior: ResolvedBehavior, current: int, desired: int, now: float) -> int:
    """``stabilizeRecommendationWithBehaviors``: clamp ``current`` into [min of up window, max of down window].

    Stores ``desired`` (the raw recommendation) in the history.
    """
    up_cutoff = now - behavior.up_window
    down_cutoff = now - behavior.down_window
    old_cutoff = min(up_cutoff, down_cutoff)  # older than both windows
    up_recommendation = down_recommendation = desired
    old_index = -1
    for index, (replicas, at) in enumerate(state.recommendations):
        if at > up_cutoff and replicas < up_recommendation:
            up_recommendation = replicas
        if at > down_cutoff and replicas > down_recommendation:
            down_recommendation = replicas
        if at < old_cutoff:
            old_index = index
    recommendation = min(max(current, up_recommendation), down_recommendation)
    entry = _recommendation(desired, now)
    if old_index >= 0:
        state.recommendations[old_index] = entry
    else:
        state.recommendations.append(entry)
    return recommendation


def scale_up_limit(state: BehaviorState, rules: ScalingRules, current: int, now: float) -> int:
    """The largest count the scale-up policies allow now (``calculateScaleUpLimitWithScalingRules``)."""
    if rules.select_policy == SelectPolicy.DISABLED:
        return current
    choose_min = rules.select_policy == SelectPolicy.MIN
    result: int | None = None
    for policy in rules.policies or []:
        added = _changes_in_period(state.scale_up_events, policy.period_seconds, now)
        deleted = _changes_in_period(state.scale_down_events, policy.period_seconds, now)
        start = current - added + deleted
        if policy.type == PolicyType.PODS:
            proposed = start + policy.value
        else:
            proposed = math.ceil(float(start) * (1 + float(policy.value) / 100))
        if result is None:
            result = proposed
        else:
            result = min(result, proposed) if choose_min else max(result, proposed)
    return current if result is None else result


def scale_down_limit(state: BehaviorState, rules: ScalingRules, current: int, now: float) -> int:
    """The smallest count the scale-down policies allow now (``calculateScaleDownLimitWithBehaviors``)."""
    if rules.select_policy == SelectPolicy.DISABLED:
        return current
    choose_min_change = rules.select_policy == SelectPolicy.MIN
    result: int | None = None
    for policy in rules.policies or []:
        added = _changes_in_period(state.scale_up_events, policy.period_seconds, now)
        deleted = _changes_in_period(state.scale_down_events, policy.period_seconds, now)
        start = current - added + deleted
        if policy.type == PolicyType.PODS:
            proposed = start - policy.value
        else:
            proposed = int(float(start) * (1 - float(policy.value) / 100))
        if result is None:
            result = proposed
        else:
            result = max(result, proposed) if choose_min_change else min(result, proposed)
    return current if result is None else result


def limit_rate(
    state: BehaviorState,
    behavior: ResolvedBehavior,
    current: int,
    desired: int,
    min_replicas: int,
    max_replicas: int,
    now: float,
) -> tuple[int, Limit]:
    """``convertDesiredReplicasWithBehaviorRate``: apply the scale-event rate limits, then the bounds."""
    if desired > current:
        limit = max(scale_up_limit(state, behavior.up, current, now), current)
        if max_replicas > limit:
            allowed, why = limit, Limit.RATE
        else:
            allowed, why = max_replicas, Limit.BOUNDS
        if desired > allowed:
            return allowed, why
    elif desired < current:
        limit = min(scale_down_limit(state, behavior.down, current, now), current)
        if min_replicas < limit:
            allowed, why = limit, Limit.RATE
        else:
            allowed, why = min_replicas, Limit.BOUNDS
        if desired < allowed:
            return allowed, why
    return desired, Limit.NONE


def normalize(
    state: BehaviorState,
    behavior: ResolvedBehavior,
    current: int,
    desired: int,
    min_replicas: int,
    max_replicas: int,
    now: float,
) -> Normalized:
    """Stabilize a raw recommendation, then limit its rate and bound it: the HPA's behavior, in full."""
    stabilized = stabilize(state, behavior, current, desired, now)
    final, limit = limit_rate(state, behavior, current, stabilized, min_replicas, max_replicas, now)
    return Normalized(stabilized=stabilized, desired=final, limit=limit)
