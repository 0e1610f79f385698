"""How many requests missed a TTFT SLO, estimated from what vLLM exports, without a per-request log.

The SLO judges each request's time to first token beyond its own prefill on an idle replica (what no scaling
can remove; docs/contract.md). vLLM's TTFT histogram cannot separate the two, and its buckets around a 2 s SLO
(1, 2.5, 5 s) are too coarse to count misses by (docs/findings.md, "A capacity learned from the TTFT
histogram"). Its ``_sum`` and ``_count`` can: with the prompt-token counter, a minute's

    mean beyond prefill = (rate(ttft _sum) - rate(prompt tokens) / idle prefill speed) / rate(ttft _count)

is exact when own prefill is linear in the prompt, as the simulator's is (``ReplicaModel.idle_prefill_s``).

The share of that minute's first tokens beyond the SLO ``S`` is then about ``m**1.75 / (m**1.75 + (1.2 S)**1.75)``
for a mean ``m``: a log-logistic tail, the shape and scale chosen on six runs of one-hour, two-hour and day-long
traces at SLOs of 1 and 2 s, where it put each run's misses between 1 % below and 18 % above the judged
count, and checked on four runs it was not chosen on: 8 % below to 81 % above, high where prompts' lengths
have a lighter tail than the Azure hour's (``python -m simulations.miss_estimate``, docs/findings.md
"Counting the misses from the histogram's sum"). A minute whose mean is a tenth of a 2 s SLO misses about
1 %, one whose mean is 1.2 times the SLO half.

The whole mean is read, light minutes' included. Part of it is a delay every request pays (the engine's step
in progress), and a floor under it (the 5th percentile of the last hour's minute means) took the light minutes'
overcount away at a 2 s SLO, but at 1 s it hid misses they do have (a request behind a long prompt): the count
fell to 0.57 of the judged misses on a ServeGen day, and the default missed the SLO on three of five recorded
runs at 1 s where the fixed fleet met it; counted from the whole mean it met all five (docs/findings.md, "The floor
taken out: light minutes miss at a tight SLO"). A count that errs high costs GPU-hours; one that errs low, the SLO.

``BudgetLedger`` adds them up over the slo's window, and a day at least (``ledger_window``), so that
``predictive`` with ``learnedHeadroom.budget`` can hand back, as the budget burns, the headroom it learned to
do without (``returned``).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field


def mean_beyond_prefill(
    ttft_seconds_per_second: float | None,
    first_tokens_per_second: float | None,
    prompt_tokens_per_second: float | None,
    prefill_tokens_per_second: float,
) -> float | None:
    """The mean time to first token beyond own prefill over a window, from the rates of the TTFT histogram's
    ``_sum`` and ``_count`` and of the prompt-token counter; ``None`` without a first token or a value."""
    rates = (ttft_seconds_per_second, first_tokens_per_second, prompt_tokens_per_second)
    if any(r is None or math.isnan(r) for r in rates) or not first_tokens_per_second or first_tokens_per_second <= 0:
        return None
    assert ttft_seconds_per_second is not None and prompt_tokens_per_second is not None
    own = prompt_tokens_per_second / prefill_tokens_per_second
    return (ttft_seconds_per_second - own) / first_tokens_per_second


SHAPE = 1.75
SCALE = 1.2


def miss_share(mean_beyond: float, slo_seconds: float) -> float:
    """The share of a window's first tokens beyond ``slo_seconds`` of their own prefill, from the window's
    mean beyond it (the module's docstring has the rule and its evidence)."""
    x: float = max(0.0, mean_beyond) ** SHAPE
    half: float = (SCALE * slo_seconds) ** SHAPE  # the mean's power at which half miss
    return x / (x + half)


LEAST_WINDOW_S = 86_400.0


def ledger_window(slo_window_seconds: float) -> float:
    """The seconds the budget is counted over: the slo's window, and a day at least. The hand-back guards against
    surges that come after calm hours, and an hour's count has forgotten the last surge by the next: on the
    two-day trace of such surges a day's count met the SLO at 0.9951 where an hour's met it at 0.9925, and with
    a count that read calm hours as calmer an hour's missed it (0.9878; docs/findings.md, "A floor under the
    count, and a day's budget", "The floor taken out: light minutes miss at a tight SLO")."""
    return max(slo_window_seconds, LEAST_WINDOW_S)


USED_FROM = 0.5  # of the budget: below it, the learned headroom is left as it is
USED_TO = 1.0  # at the whole budget, the headroom is the configured one


@dataclass
class BudgetLedger:
    """The first tokens and the estimated misses of the last ``window`` seconds, tick by tick."""

    window: float
    entries: deque[tuple[float, float, float]] = field(default_factory=deque)  # (when, first tokens, misses)
    first_tokens: float = 0.0
    misses: float = 0.0

    def count(self, now: float, first_tokens: float, mean_beyond: float, slo_seconds: float) -> float:
        """Record ``first_tokens`` whose mean beyond prefill was ``mean_beyond``, and the misses estimated for them
        (``miss_share`` of that mean); return those misses."""
        misses = first_tokens * miss_share(mean_beyond, slo_seconds)
        self.record(now, first_tokens, misses)
        return misses

    def record(self, now: float, first_tokens: float, misses: float) -> None:
        self.entries.append((now, first_tokens, misses))
        self.first_tokens += first_tokens
        self.misses += misses
        while self.entries and self.entries[0][0] <= now - self.window:
            _, tokens, missed = self.entries.popleft()
            self.first_tokens -= tokens
            self.misses -= missed

    @property
    def last(self) -> float | None:
        return self.entries[-1][0] if self.entries else None

    def used(self, target: float) -> float:
        """The share of the window's budget (``1 - target`` of its first tokens, at least one request) spent."""
        return max(self.misses, 0.0) / max((1.0 - target) * self.first_tokens, 1.0)


def returned(used: float) -> float:
    """How far a learned headroom goes back to the configured one, 0 to 1, as the budget is ``used``: not at
    all under half of it, all the way at the whole of it. Measured: docs/findings.md, "The learned headroom,
    returned to the default as the counted budget burns"."""
    return min(max((used - USED_FROM) / (USED_TO - USED_FROM), 0.0), 1.0)
