"""A fleet's pooled capacity: the more replicas share the arrivals, the more each carries at the same SLO."""

from __future__ import annotations

import math


def pooled_capacity(fleet: float, gain: float, reference: float) -> float:
    """How many times the targets each replica of a fleet of ``fleet`` carries, pooling at ``gain`` a
    doubling beyond ``reference`` replicas (the targets' own fleet)."""
    return 1 + gain * math.log2(max(fleet, reference) / reference)


def pooled_replicas(need: float, gain: float, reference: float) -> float:
    """The fleet ``n`` that carries ``need`` replicas' worth of load at the targets when each of its
    replicas carries ``pooled_capacity(n)`` times them (``n >= reference``; below it, ``need``)."""
    if gain <= 0 or need <= reference:
        return need
    n = need  # f(n) = n * pooled_capacity(n) - need is convex and rising above the reference: Newton from above
    for _ in range(50):
        f = n * pooled_capacity(n, gain, reference) - need
        step = f / (pooled_capacity(n, gain, reference) + gain / math.log(2))
        n = max(reference, n - step)
        if abs(step) < 1e-9 * need:
            break
    return n
