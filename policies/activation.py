"""Scale to zero and back (docs/policy-file.md#scale-to-zero).

The split is KEDA's: the ``activation`` block decides 0 <-> 1, the policy decides 1 <-> N, so a policy never
sees a fleet of zero. At zero the replicas' metrics have no series, so only the activation query (the
gateway's view of the model) can tell that a request waits.

To zero: only after ``idleSeconds`` of ticks that each saw the activation value at or below its threshold
*and* no request in any replica (running, waiting, or prompt tokens in the last minute). A tick without a
value for either is not idle and starts the count again: a Prometheus outage is not idleness. Example: with
``idleSeconds: 600`` and a 15 s interval, 41 idle ticks in a row (0 s to 600 s) take it to zero; one tick
with a failed query at 300 s means zero comes at 900 s at the earliest (tests/test_activation.py).

From zero: only a zero this controller set (``ZeroState.asleep``); a zero set by hand is left alone, as the
HPA leaves it. The first tick whose activation value exceeds the threshold orders the policy's proposal for
that demand, at least one replica, past the scale-up window and rate limits (there is nothing to limit at
zero), within ``maxReplicas``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

from policies.base import Observation, usable
from policies.spec import Activation


@dataclass
class ZeroState:
    """What the decider remembers about zero: whether this controller set it, and since when it is idle."""

    asleep: bool = False
    idle_since: float | None = None


def replica_activity(parts: Iterable[float | None]) -> float | None:
    """The replicas' activity from the values of ``metric_names.ACTIVITY_METRICS``: their sum, or no value while
    any of them has none (no pod reports, a query failed), which is never "no requests"."""
    values = list(parts)
    if any(v is None for v in values):
        return None
    return float(sum(v for v in values if v is not None))


def idle(activation: Activation, observation: Observation) -> bool:
    """No request at the gateway (at or below the threshold) nor in any replica; a missing value is not idle."""
    gateway, replicas = observation.activation, observation.activity
    return usable(gateway) and usable(replicas) and gateway <= activation.threshold and replicas <= 0  # type: ignore[operator]


def idle_for(state: ZeroState, activation: Activation, observation: Observation) -> float | None:
    """Update the idle clock with this tick; how long the workload has been idle, or None when it is not."""
    if not idle(activation, observation):
        state.idle_since = None
        return None
    if state.idle_since is None:
        state.idle_since = observation.now
    return observation.now - state.idle_since


def woken(activation: Activation, observation: Observation) -> bool | None:
    """At zero: does the activation value exceed the threshold? None when there is no value."""
    value = observation.activation
    if not usable(value):
        return None
    assert value is not None
    return value > activation.threshold


def as_one_replica(observation: Observation) -> Observation:
    """The observation a policy sizes a wake-up from: the one replica activation guarantees, as if there
    (a policy divides by the current count, and zero has no ratio)."""
    return replace(observation, current_replicas=1, ready_replicas=1)
