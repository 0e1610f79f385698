"""``predictive``: size the fleet for the load one cold start ahead.

Demand is measured in replicas, per metric, by ``demand_in_replicas``:

* an ``AverageValue`` metric (a fleet total such as waiting requests) needs ``total / target`` replicas;
* a ``Value`` metric (a level such as KV-cache usage, shared by the replicas that are Ready) carries
  ``level * ready`` replica-levels of load and so needs ``level * ready / target`` replicas.

The workload's demand ``d`` at a tick is the largest of its metrics'. Two things can outrun a replica
that takes ``horizon`` seconds (by default ``coldStartSeconds + interval``) to serve:

* bursts, which arrive faster than any replica starts: only capacity held in advance absorbs them, the
  ``headroom`` (a fraction of ``d``; by default 0.6 at a horizon of 315 s, scaled with the square root
  of the horizon down to 150 s, see ``headroom``);
* a sustained rise, which headroom absorbs only while it is small: the least-squares trend of the demand
  over the last ``trend.windowSeconds`` (by default twice the horizon), extrapolated over the horizon and
  capped at ``trend.maxGrowth`` times ``d``. It counts only when it is significant and rises in both halves of
  the window (``TrendState.growth``), so a load that wanders or has just stepped up is not extrapolated.

The proposal is ``d * (1 + headroom)``, raised by the part of the trend's growth that the headroom does
not already cover; so the policy scales out ahead of a ramp but never scales in on a forecast: a scale-in
needs the present demand to allow it. A negative headroom runs replicas hotter than the metrics' targets.

A proposal within ``tolerance`` of the current count keeps it, as in the HPA, and so does a need less than
``minRiseReplicas`` (by default half a replica) above it unless the tolerance upward is 0: a small fleet
would otherwise add a replica, and hold it for the scale-down window, on every flicker of a light load's
signals. With ``minRiseReplicas`` 0, no trend (``trend.maxGrowth`` 0) and no pooling, on ``AverageValue``
metrics, the policy decides as ``threshold`` does with every target divided by ``1 + headroom``; at
headroom 0 it makes threshold's decisions exactly, to the replica, because its demand is the HPA's own
quotient in milli-units (``demand_in_replicas``). ``--tune`` relies on it.

Targets are per replica, but a fleet pools its queue: the more replicas share the arrivals, the fewer
wait behind a long prompt, and each carries more at the same SLO (square-root staffing). With
a ``pooling`` block's ``gain`` ``g`` and ``replicas`` ``r`` (the fleet the targets were measured on), a fleet of
``n >= r`` replicas carries ``1 + g * log2(n / r)`` times the targets per replica, and the policy asks
for the fleet that carries the proposal at that rate (``pooled_replicas``), and the tolerance applies to
that fleet; below ``r`` the targets hold as they are. Off without the block: only a load test of two
fleet sizes tells the gain.

With a ``learnedHeadroom`` block the headroom is blended with one learned from the demand's own rises within a
horizon (``RiseHistory``, ``blended_headroom``): recorded days whose load rises slowly need far less than
the default, a day of rare surges more; off by default (docs/decisions/predictive-headroom.md). Beside an
``errorBudget``, what it learned to do without is handed back as the slo's error budget burns, counted from
vLLM's TTFT histogram (``policies.predictive.budget``): a surge after calm hours spends budget once, and the next
meets the configured headroom. The count needs a replica's idle prefill speed, which no default here knows;
``simulate`` writes it into the predictive block it sizes for a file given only an slo
(``simulations.builtin.with_error_budget``), beside ``utilization``.

With a ``utilization`` block (what ``simulate`` sizes for a file given only an slo) the fleet is sized otherwise: as
a follower of its work, the last minute's tokens at the replica's throughputs and its queue, over a utilization that
starts at a load test's and then follows the budget's count of the last day
(``policies.predictive.utilization``; docs/decisions/predictive-utilization.md). The targets, the headroom, the
pooling and the learned headroom's blend are then not used; the trend and the tolerance are.

Measured on recorded traces (docs/simulation.md): minute-level LLM load mostly wanders and steps, so
the SLO is decided by headroom, and a trend is worth extrapolating only on sustained ramps.
"""

from __future__ import annotations

from policies.predictive.forecast import TrendState, default_horizon
from policies.predictive.headroom import DEFAULT_HEADROOM, default_headroom
from policies.predictive.params import (
    BUDGET_LEARNING,
    MOVED_KEYS,
    ErrorBudgetParams,
    LearnedHeadroomParams,
    PoolingParams,
    PredictiveParams,
    TrendParams,
    prompt_spread,
    with_settings,
)
from policies.predictive.policy import PROMPT_TOKENS, PredictivePolicy, PredictiveState
from policies.predictive.pooling import pooled_capacity, pooled_replicas

__all__ = [
    "BUDGET_LEARNING",
    "DEFAULT_HEADROOM",
    "MOVED_KEYS",
    "PROMPT_TOKENS",
    "ErrorBudgetParams",
    "LearnedHeadroomParams",
    "PoolingParams",
    "PredictiveParams",
    "PredictivePolicy",
    "PredictiveState",
    "TrendParams",
    "TrendState",
    "default_headroom",
    "default_horizon",
    "pooled_capacity",
    "pooled_replicas",
    "prompt_spread",
    "with_settings",
]
