"""The HPA's per-metric arithmetic for External metrics (``replica_calculator.go``).

Values are converted to milli-units first, as the HPA compares ``resource.Quantity.MilliValue()``: a
decimal value is rounded up to the next thousandth, so ``0.57`` is exactly 570 and the ratio tests do not
suffer from binary floating point.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import ROUND_CEILING, Decimal
from functools import lru_cache

from policies.spec import MetricSpec, TargetType


@lru_cache(maxsize=4096)
def milli(value: float) -> int:
    """``Quantity.MilliValue()`` of a decimal value: thousandths, rounded up. Remembered: the targets are the same
    every tick and the values often are, and the decimal arithmetic was a tenth of a decision."""
    return int((Decimal(repr(float(value))) * 1000).to_integral_value(rounding=ROUND_CEILING))


@dataclass(frozen=True)
class Tolerance:
    """The band ``[1 - down, 1 + up]`` within which a usage ratio keeps the current count."""

    up: float = 0.1
    down: float = 0.1

    def within(self, ratio: float) -> bool:
        return (1.0 - self.down) <= ratio <= (1.0 + self.up)


@dataclass(frozen=True, slots=True)
class MetricProposal:
    replicas: int
    ratio: float
    within_tolerance: bool


def average_value_replicas(total: float, target: float, current: int, tolerance: Tolerance) -> MetricProposal:
    """``GetExternalPerPodMetricReplicas``: a fleet total against a per-replica target."""
    usage, per_replica = milli(total), milli(target)
    ratio = float(usage) / (float(per_replica) * float(current))
    if tolerance.within(ratio):
        return MetricProposal(current, ratio, True)
    return MetricProposal(math.ceil(float(usage) / float(per_replica)), ratio, False)


def value_replicas(level: float, target: float, current: int, basis: int, tolerance: Tolerance) -> MetricProposal:
    """``GetExternalMetricReplicas``: a fleet-level value against a target level.

    ``basis`` is the count the HPA multiplies by (its ready pods); the current count when unknown. While
    replicas are still starting (``basis < current``) the proposal never goes below the current count: the
    load the Ready replicas show says nothing about the ones on their way (the HPA likewise assumes unready
    pods fully loaded before scaling down), and removing them would waste their cold start.
    """
    ratio = float(milli(level)) / float(milli(target))
    if current == 0:
        return MetricProposal(math.ceil(ratio), ratio, False)
    if tolerance.within(ratio):
        return MetricProposal(current, ratio, True)
    proposal = math.ceil(ratio * float(basis))
    if basis < current:
        proposal = max(proposal, current)
    return MetricProposal(proposal, ratio, False)


def metric_proposal(spec: MetricSpec, value: float, current: int, basis: int, tolerance: Tolerance) -> MetricProposal:
    if spec.target.type == TargetType.AVERAGE_VALUE:
        return average_value_replicas(value, spec.target.value, current, tolerance)
    return value_replicas(value, spec.target.value, current, basis, tolerance)


def demand_in_replicas(spec: MetricSpec, value: float, basis: int, target: float | None = None) -> float:
    """How many replicas the load needs at the metric's target, as a real number.

    ``AverageValue``: the query is a fleet total, so demand is ``total / target`` whatever the fleet size.
    ``Value``: the query is a level that the ``basis`` replicas share, so the load is ``level * basis``
    replica-levels and demand is ``level * basis / target``. ``target`` overrides the spec's target.

    In milli-units, as the HPA's ratios are: an ``AverageValue`` demand is the very quotient
    ``average_value_replicas`` takes the ceiling of, so a policy that sizes the fleet from it makes the
    HPA's decisions where it adds nothing of its own (``predictive`` at headroom 0, ``--tune``).
    """
    goal = spec.target.value if target is None else target
    if spec.target.type == TargetType.AVERAGE_VALUE:
        return float(milli(value)) / float(milli(goal))
    return float(milli(value)) * basis / float(milli(goal))
