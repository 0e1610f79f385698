"""One workload's decision: policy, then behavior, in the order of the HPA's ``reconcileAutoscaler``.

The daemon, ``replay`` and the simulator all decide through :class:`WorkloadDecider`; there is no
second copy of this logic anywhere.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from policies.activation import ZeroState, as_one_replica, idle_for, woken
from policies.base import Observation, Policy, WorkloadContext, held
from policies.behavior import BehaviorState, Limit, normalize
from policies.cold_start import ColdStartEstimator
from policies.spec import Fallback, ResolvedBehavior


class Reason:
    """The machine-readable ``reason`` words of the decision log and ``replay --out``."""

    SCALE_UP = "scale-up"
    SCALE_DOWN = "scale-down"
    WITHIN_TOLERANCE = "within-tolerance"
    STEADY = "steady"
    STABILIZED = "stabilized"
    RATE_LIMITED = "rate-limited"
    BOUNDS = "bounds"
    METRICS_UNAVAILABLE = "metrics-unavailable"
    FALLBACK = "fallback"
    SCALING_DISABLED = "scaling-disabled"
    SCALED_TO_ZERO = "scaled-to-zero"
    ACTIVATED = "activated"


@dataclass(frozen=True, slots=True)
class Decision:
    now: float
    current: int
    recommended: int
    desired: int
    reason: str
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def changes(self) -> bool:
        return self.desired != self.current


@dataclass(frozen=True)
class DeciderState:
    """What a decider carries across a reload of its file and, through the daemon's state ConfigMap, a restart:
    the behavior history (the very object, not a copy), the failures toward the fallback, the measured cold
    starts, the zero it set, and its policy's own state with the policy type it belongs to."""

    behavior: BehaviorState
    failures: int = 0
    cold_starts: tuple[float, ...] = ()
    zero: ZeroState = field(default_factory=ZeroState)
    policy_type: str | None = None
    policy_state: Any = None


class WorkloadDecider:
    """Decision state of one workload: the policy's state and the behavior history. ``snapshot()`` and
    ``restore()`` are the only way that state leaves it and enters it (a reload, the daemon's state ConfigMap)."""

    def __init__(
        self, ctx: WorkloadContext, policy: Policy, fallback: Fallback | None = None, auto_cold_start: bool = False
    ) -> None:
        self.ctx = ctx
        self.policy = policy
        self.fallback = fallback or Fallback()
        self.behavior_state = BehaviorState()
        self.failures = 0
        self.cold_starts = ColdStartEstimator()
        self.auto_cold_start = auto_cold_start  # coldStartSeconds: auto, the measured cold start replaces the default
        self.zero = ZeroState()

    def snapshot(self) -> DeciderState:
        """The decider's state, as ``restore`` takes it back (here or in a decider built from a reloaded file)."""
        return DeciderState(
            self.behavior_state,
            self.failures,
            tuple(self.cold_starts.samples),
            replace(self.zero),
            self.policy.type,
            self.policy.state,
        )

    def restore(self, state: DeciderState) -> None:
        """Carry on from ``state``: its behavior history, failures, cold starts (re-applied under
        ``coldStartSeconds: auto``) and zero; its policy state only for a policy of the same type."""
        self.behavior_state = state.behavior
        self.failures = state.failures
        self.cold_starts = ColdStartEstimator(state.cold_starts)
        self.zero = replace(state.zero)
        if state.policy_type == self.policy.type and state.policy_state is not None:
            self.policy.state = state.policy_state
        self.cold_start_measured()

    @property
    def behavior(self) -> ResolvedBehavior:
        return self.ctx.behavior

    def set_cold_start(self, seconds: float) -> None:
        """Use the replicas' real cold start from now on: the daemon's measurement under
        ``coldStartSeconds: auto``, or the simulated replicas' own."""
        self.ctx = replace(self.ctx, cold_start_seconds=seconds)
        self.policy.ctx = self.ctx

    def cold_start_measured(self, seconds: float | None = None) -> float | None:
        """Add a measured cold start (or none: re-apply what was measured, after a reload or a restart);
        under ``coldStartSeconds: auto`` decide with the samples' 90th percentile once there are enough.
        Returns that percentile, None before."""
        if seconds is not None:
            self.cold_starts.add(seconds)
        p90 = self.cold_starts.p90()
        if p90 is not None and self.auto_cold_start:
            self.set_cold_start(p90)
        return p90

    def decide(self, observation: Observation) -> Decision:
        now, current = observation.now, observation.current_replicas
        lo, hi = self.ctx.min_replicas, self.ctx.max_replicas
        self.behavior_state.record_initial(current, now)
        activation = self.ctx.activation
        if current == 0:
            if activation is None or not self.zero.asleep:
                return Decision(now, current, 0, 0, Reason.SCALING_DISABLED)  # zero by hand: left alone
            return self._at_zero(observation)
        self.zero.asleep = False  # awake, whoever woke it
        if current > hi:
            return Decision(now, current, hi, hi, Reason.BOUNDS)
        if current < lo:
            return Decision(now, current, lo, lo, Reason.BOUNDS)
        if activation is not None:
            idle = idle_for(self.zero, activation, observation)
            if idle is not None and idle >= activation.idle_seconds:
                return Decision(now, current, 0, 0, Reason.SCALED_TO_ZERO, {"idle_seconds": idle})

        proposal = self.policy.recommend(observation)
        details: dict[str, Any] = {"policy": dict(proposal.details)}
        if held(proposal, current):
            self.failures += 1
            details["consecutive_failures"] = self.failures
            if self.fallback.replicas is None or self.failures < self.fallback.failure_threshold:
                return Decision(now, current, current, current, Reason.METRICS_UNAVAILABLE, details)
            raw, base_reason = min(max(self.fallback.replicas, lo), hi), Reason.FALLBACK
        else:
            assert proposal.replicas is not None  # held() holds every None
            self.failures = 0
            raw, base_reason = max(proposal.replicas, 0), proposal.reason

        result = normalize(self.behavior_state, self.behavior, current, raw, lo, hi, now)
        details["stabilized"] = result.stabilized
        if result.limit == Limit.RATE:
            reason = Reason.RATE_LIMITED
        elif result.limit == Limit.BOUNDS:
            reason = Reason.BOUNDS
        elif base_reason == Reason.FALLBACK:
            reason = Reason.FALLBACK
        elif result.stabilized != raw:
            reason = Reason.STABILIZED
        elif result.desired > current:
            reason = Reason.SCALE_UP
        elif result.desired < current:
            reason = Reason.SCALE_DOWN
        else:
            reason = base_reason
        return Decision(now, current, raw, result.desired, reason, details)

    def _at_zero(self, observation: Observation) -> Decision:
        """A zero this controller set: wake on the activation signal (``policies.activation``)."""
        assert self.ctx.activation is not None
        now, hi = observation.now, self.ctx.max_replicas
        wake = woken(self.ctx.activation, observation)
        details: dict[str, Any] = {"activation": observation.activation}
        if wake is None:
            return Decision(now, 0, 0, 0, Reason.METRICS_UNAVAILABLE, details)
        if not wake:
            return Decision(now, 0, 0, 0, Reason.SCALED_TO_ZERO, details)
        proposal = self.policy.recommend(as_one_replica(observation))
        details["policy"] = dict(proposal.details)
        raw = max(proposal.replicas or 1, 1, self.ctx.min_replicas)
        return Decision(now, 0, raw, min(raw, hi), Reason.ACTIVATED, details)

    def applied(self, decision: Decision) -> None:
        """The decision's count was written (or, offline, took effect): remember it for the rate limits,
        and a zero of this controller's own, the only one it wakes."""
        if decision.changes:
            self.behavior_state.store_scale_event(self.behavior, decision.current, decision.desired, decision.now)
            if decision.desired == 0:
                self.zero = ZeroState(asleep=True)
