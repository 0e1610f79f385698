"""The error budget as an outer loop that spends it: how much hotter than sized the fleet runs.

The sized targets and headroom are a guess made before the traffic was seen; the budget counted from vLLM's TTFT
histogram (``policies.predictive.budget``) says what they bought. ``predictive`` divides the replicas it needs by the
loop's ``scale``: at 1 the fleet is as sized, at 1.25 it runs a quarter hotter.

* **Hotter, step by step.** At most once a ``STEP_S`` (two cold starts' evidence at the default 300 s), while
  less than ``HOTTER_BELOW`` of the window's budget is spent and the last hour burned less than ``HOTTER_BELOW``
  of its own share, ``scale`` rises by ``STEP``: a rate a surge outruns in hours, not minutes.
* **Cooler, at once.** When the last hour burned its share or more, or the window's budget is spent, ``scale``
  falls by ``BACKOFF`` at the next tick and again each ``STEP_S`` while it lasts; a step hotter waits a
  ``STEP_S`` after it.
* No hotter than the budget earned so far (``most``): up to ``MOST_SCALE`` once the ledger spans the window, in
  proportion before. On the built-in two-hour day of surges, a loop that could reach 1.34 in its calm first hour
  met the next surge with too few replicas (95.6 % against 99 %).
* Held within ``[LEAST_SCALE, MOST_SCALE]``: never cooler than sized. The count errs high on purpose (a count
  that errs low costs the SLO), so below the sizing the loop answered misses that were not there: on three
  recorded days it cost 1.37 times static-best where the sizing alone cost 1.06. What the sizing gets wrong the
  learned headroom and its hand-back answer (``policies.predictive.budget.returned``).

Worked example: a calm day spending a tenth of its budget goes from 1 to 1.05 after ten minutes and to 1.63 after
about 100 minutes; one hour that misses twice its share brings it back to 1.3 at once, and to 1 at the least
(tests/test_spending.py).
The record: docs/decisions/error-budget-loop.md.
"""

from __future__ import annotations

from dataclasses import dataclass

STEP = 0.05
BACKOFF = 0.8
STEP_S = 600.0
HOTTER_BELOW = 0.5
LEAST_SCALE = 1.0
MOST_SCALE = 2.0
HOUR_S = 3600.0


@dataclass
class SpendingLoop:
    """How much hotter than sized the fleet runs, and when it last moved."""

    scale: float = 1.0
    moved_at: float | None = None
    cooled_at: float | None = None

    def update(self, now: float, used: float, hour_burn: float, earned: float = 1.0) -> str | None:
        """Move ``scale`` for the budget ``used`` over the window and the last hour's ``hour_burn`` (its misses over
        the ones it was allowed), no hotter than the budget ``earned`` allows (``most``); returns ``"hotter"``,
        ``"cooler"`` or None."""
        if hour_burn >= 1.0 or used >= 1.0:
            if self.cooled_at is not None and now - self.cooled_at < STEP_S:
                return None
            self.scale = max(LEAST_SCALE, self.scale * BACKOFF)
            self.cooled_at = self.moved_at = now
            return "cooler"
        if used < HOTTER_BELOW and hour_burn < HOTTER_BELOW:
            if self.moved_at is not None and now - self.moved_at < STEP_S:
                return None
            if self.moved_at is None:  # the first step waits a STEP_S of evidence too
                self.moved_at = now
                return None
            if self.scale >= most(earned):
                return None
            self.scale = min(most(earned), self.scale * (1 + STEP))
            self.moved_at = now
            return "hotter"
        return None


def most(earned: float) -> float:
    """The hottest the loop may run with ``earned`` of the window's budget counted (the share of the window its
    ledger spans): a budget is earned as its traffic is counted, and an hour of calm at the start of a day has
    earned an hour's, not a day's. Worked example: a day's window an hour in allows 1.04, half a day in 1.5."""
    return 1.0 + (MOST_SCALE - 1.0) * min(max(earned, 0.0), 1.0)
