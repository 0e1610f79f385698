"""The behavior normalizer against the HPA's rules, table-driven like horizontal_test.go."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from policies.behavior import BehaviorState, Limit, ScaleEvent, TimedRecommendation, limit_rate, normalize, stabilize
from tests.helpers import behavior, rules

NOW = 1_000_000.0


@dataclass
class RateCase:
    name: str
    current: int
    desired: int
    expected: int
    limit: Limit = Limit.NONE
    up: list[tuple[str, int, int]] | None = None
    down: list[tuple[str, int, int]] | None = None
    up_select: str | None = None
    down_select: str | None = None
    min_replicas: int = 1
    max_replicas: int = 1000
    up_events: list[tuple[int, float]] = field(default_factory=list)
    down_events: list[tuple[int, float]] = field(default_factory=list)


RATE_CASES = [
    # Scale-up, after TestScalingWithRules.
    RateCase("scaleUp with default behavior", 10, 50, 20, Limit.RATE),
    RateCase(
        "scaleUp with pods policy larger than percent policy",
        10,
        500,
        110,
        Limit.RATE,
        up=[("Pods", 100, 60), ("Percent", 100, 60)],
    ),
    RateCase(
        "scaleUp with percent policy larger than pods policy",
        10,
        500,
        20,
        Limit.RATE,
        up=[("Pods", 2, 60), ("Percent", 100, 60)],
    ),
    RateCase(
        "scaleUp with spec MaxReplicas limitation with large pod policy",
        100,
        1000,
        200,
        Limit.BOUNDS,
        up=[("Pods", 100, 60)],
        max_replicas=200,
    ),
    RateCase(
        "scaleUp with spec MaxReplicas limitation below the policy",
        10,
        1000,
        15,
        Limit.BOUNDS,
        up=[("Percent", 100, 60)],
        max_replicas=15,
    ),
    RateCase("scaleUp with Min select policy", 10, 50, 14, Limit.RATE, up_select="Min"),
    RateCase("scaleUp with Disabled select policy", 10, 50, 10, Limit.RATE, up_select="Disabled"),
    RateCase("scaleUp within the limit", 10, 13, 13, up=[("Pods", 4, 60)]),
    RateCase("scaleUp with percent rounds up", 3, 50, 4, Limit.RATE, up=[("Percent", 10, 60)]),
    RateCase(
        "scaleUp with events in the period",
        10,
        50,
        11,
        Limit.RATE,
        up=[("Pods", 4, 60)],
        up_events=[(3, NOW - 30), (1, NOW - 70)],
    ),
    RateCase(
        "scaleUp budget used up by events", 10, 50, 10, Limit.RATE, up=[("Pods", 4, 60)], up_events=[(4, NOW - 10)]
    ),
    RateCase(
        "scaleUp limit below current is raised to current",
        10,
        50,
        10,
        Limit.RATE,
        up=[("Pods", 2, 60)],
        up_events=[(5, NOW - 10)],
    ),
    RateCase(
        "scaleUp event exactly one period old no longer counts",
        10,
        50,
        14,
        Limit.RATE,
        up=[("Pods", 4, 60)],
        up_events=[(4, NOW - 60)],
    ),
    RateCase(
        "scaleUp period start adds back scale-downs",
        8,
        50,
        14,
        Limit.RATE,
        up=[("Pods", 4, 60)],
        down_events=[(2, NOW - 20)],
    ),
    # Scale-down.
    RateCase("scaleDown with default behavior goes to min", 10, 1, 1),
    RateCase("scaleDown percent truncates", 10, 1, 7, Limit.RATE, down=[("Percent", 25, 60)]),
    RateCase("scaleDown percent truncates 8.1 to 8", 9, 1, 8, Limit.RATE, down=[("Percent", 10, 60)]),
    RateCase(
        "scaleDown with Max select takes the largest change",
        10,
        1,
        5,
        Limit.RATE,
        down=[("Pods", 2, 60), ("Percent", 50, 60)],
    ),
    RateCase(
        "scaleDown with Min select takes the smallest change",
        10,
        1,
        8,
        Limit.RATE,
        down=[("Pods", 2, 60), ("Percent", 50, 60)],
        down_select="Min",
    ),
    RateCase("scaleDown with Disabled select policy", 10, 1, 10, Limit.RATE, down_select="Disabled"),
    RateCase(
        "scaleDown with events in the period",
        8,
        1,
        5,
        Limit.RATE,
        down=[("Percent", 50, 60)],
        down_events=[(2, NOW - 30)],
    ),
    RateCase(
        "scaleDown period start removes scale-ups",
        10,
        1,
        5,
        Limit.RATE,
        down=[("Pods", 2, 60)],
        up_events=[(3, NOW - 30)],
    ),
    RateCase("scaleDown to minReplicas bound", 10, 1, 3, Limit.BOUNDS, down=[("Pods", 10, 60)], min_replicas=3),
    RateCase("scaleDown within the limit", 10, 8, 8, down=[("Pods", 4, 60)]),
    RateCase("no change", 7, 7, 7),
]


@pytest.mark.parametrize("case", RATE_CASES, ids=lambda c: c.name)
def test_rate_limits(case: RateCase) -> None:
    b = behavior(
        up=rules(case.up, select=case.up_select) if case.up or case.up_select else None,
        down=rules(case.down, select=case.down_select) if case.down or case.down_select else None,
    )
    state = BehaviorState(
        scale_up_events=[ScaleEvent(c, t) for c, t in case.up_events],
        scale_down_events=[ScaleEvent(c, t) for c, t in case.down_events],
    )
    desired, limit = limit_rate(state, b, case.current, case.desired, case.min_replicas, case.max_replicas, NOW)
    assert (desired, limit) == (case.expected, case.limit)


@dataclass
class StabilizeCase:
    name: str
    current: int
    desired: int
    history: list[tuple[int, float]]
    expected: int
    up_window: int = 300
    down_window: int = 600


STABILIZE_CASES = [
    # After TestStabilizeRecommendationWithBehaviors.
    StabilizeCase("scale up stabilized", 5, 10, [(8, NOW - 120), (7, NOW - 240)], 7),
    StabilizeCase("scale down stabilized; entry at the window edge is out", 8, 3, [(5, NOW - 300), (4, NOW - 480)], 5),
    StabilizeCase("no change needed", 5, 5, [(5, NOW - 60)], 5),
    StabilizeCase(
        "default windows keep the highest recent",
        4,
        2,
        [(6, NOW - 100), (3, NOW - 200)],
        4,
        up_window=0,
        down_window=300,
    ),
    StabilizeCase("down window expired", 4, 2, [(6, NOW - 301)], 2, up_window=0, down_window=300),
    StabilizeCase("up window 0 ignores history", 4, 9, [(2, NOW - 1)], 9, up_window=0, down_window=300),
    StabilizeCase("between the windows the count holds", 5, 7, [(4, NOW - 10), (9, NOW - 20)], 5, 60, 60),
]


@pytest.mark.parametrize("case", STABILIZE_CASES, ids=lambda c: c.name)
def test_stabilize(case: StabilizeCase) -> None:
    b = behavior(up=rules(window=case.up_window), down=rules(window=case.down_window))
    state = BehaviorState(recommendations=[TimedRecommendation(r, t) for r, t in case.history])
    assert stabilize(state, b, case.current, case.desired, NOW) == case.expected
    assert TimedRecommendation(case.desired, NOW) in state.recommendations


def test_stabilize_reuses_the_last_entry_older_than_both_windows() -> None:
    b = behavior(up=rules(window=0), down=rules(window=60))
    history = [TimedRecommendation(5, NOW - 100), TimedRecommendation(6, NOW - 90), TimedRecommendation(7, NOW - 10)]
    state = BehaviorState(recommendations=list(history))
    stabilize(state, b, 4, 3, NOW)
    assert state.recommendations == [history[0], TimedRecommendation(3, NOW), history[2]]


def test_store_scale_event_replaces_the_last_outdated_event() -> None:
    b = behavior(up=rules([("Pods", 4, 60)]))
    state = BehaviorState(scale_up_events=[ScaleEvent(1, NOW - 200), ScaleEvent(2, NOW - 100), ScaleEvent(3, NOW - 5)])
    state.store_scale_event(b, 4, 6, NOW)
    assert [(e.change, e.at) for e in state.scale_up_events] == [(1, NOW - 200), (2, NOW), (3, NOW - 5)]
    assert state.scale_up_events[0].outdated


def test_initial_recommendation_seeds_the_down_window() -> None:
    b = behavior()
    state = BehaviorState()
    state.record_initial(5, NOW)
    first = normalize(state, b, 5, 2, 1, 10, NOW + 15)
    assert first.desired == 5 and first.stabilized == 5
    later = normalize(state, b, 5, 2, 1, 10, NOW + 301)
    assert later.desired == 2


@pytest.mark.parametrize(
    ("ticks", "expected"),
    [
        # Default behavior, one raw recommendation per 15 s tick, the count applied each time.
        ([(0, 20), (15, 20), (30, 20)], [6, 12, 20]),
        ([(0, 20), (10, 20), (15, 20)], [6, 6, 12]),
    ],
)
def test_default_scale_up_sequence(ticks: list[tuple[int, int]], expected: list[int]) -> None:
    b = behavior()
    state = BehaviorState()
    current = 2
    state.record_initial(current, NOW)
    got = []
    for offset, raw in ticks:
        result = normalize(state, b, current, raw, 1, 100, NOW + offset)
        state.store_scale_event(b, current, result.desired, NOW + offset)
        current = result.desired
        got.append(current)
    assert got == expected
