"""The fleet sized as a follower of its work, at a utilization the error budget moves.

**The work.** What the fleet is asked for, in replicas' worth of compute, from the counters vLLM exports over the
last minute: ``prompt / P + generation / D`` replica-seconds a second, ``P`` a replica's prefill throughput and
``D`` its generation throughput at the largest batch it holds (``work_in_replicas``). A fleet that is short only
serves what it can, so the tokens it processed understate what it is asked for: what its queue grew by over that
minute arrived beyond them (and what it shrank by was served from it), at the minute's mean request; and the queue
itself is work to be done within the horizon, the cold start and a tick after which a replica ordered now serves.
Without a reading of the queue a minute back (a daemon just started), the whole queue is the minute's (``DRAIN_S``).
Worked example: a fleet that served 8 replicas' work while its queue went from 400 requests to 200, half a
replica-second each, was asked for ``8 - 200 * 0.5 / 60 = 6.3``, and its queue is ``200 * 0.5 / 255 = 0.4`` more over
a 255 s horizon: 6.7, where the queue read as the minute's work alone made it ``8 + 1.7 = 9.7`` and ordered replicas
that start after it has drained (tests/test_utilization.py).

**The utilization.** The policy holds ``work / u`` replicas. ``u`` starts where a load test of a few fixed replicas
under steady traffic of the workload's requests meets the SLO (``simulate`` writes it), and then follows the
budget's count (``policies.predictive.budget``): the share of first tokens missed rises steeply with ``u``, about
as ``u ** ELASTICITY``. So each hour's counted misses, divided by the ``u ** ELASTICITY`` it ran at, estimate the
constant ``a`` in ``share = a * u ** ELASTICITY``, and over the last day (with the start as a prior worth
``PRIOR_MISSES`` allowed misses, spent as aimed) the learner takes the ``u`` at which ``a * u ** ELASTICITY`` spends
``AIM`` of the budget.

No hotter than the budget earned: ``u`` rises above ``start`` only as a day's traffic is counted, in proportion (an
hour in, a 24th of the way to ``MOST``); it may fall below at once. A one-hour flat trace whose count ran calm in its
first minutes warmed from 0.74 to 0.78 and met a burst short (98.3 %); so capped, 99.2 %. And no hotter than the
count outweighs what the start was planned on: where ``simulate`` planned it on a recording of ``weight`` requests,
the start weighs that many first tokens against the count when it would warm (``warm``), and only the prior's
``PRIOR_MISSES`` when it would cool. On two days whose first was calm and whose second burst (a small replica, 240 s
cold start), the start planned on both warmed to 0.87 over the first and missed on the second (98.96 %); so
weighed, the plan's follower met (99.35 %) at 0.89 times the fixed fleet (docs/decisions/predictive-utilization.md).

Worked example (the prior and the cap aside): a 99 % target (1 % allowed), start 0.5, and a day that missed 2 % at 0.5
throughout: ``a`` is ``0.02 / 0.5 ** 8`` and ``u`` becomes ``(0.85 * 0.01 / a) ** (1 / 8) = 0.5 * 0.425 ** 0.125 =
0.45``; a day that missed 0.1 % takes it to ``0.5 * 8.5 ** 0.125 = 0.65`` (tests/test_utilization.py).

Why: a follower of the work told exactly what arrived in the minute past, at the utilization that meets the SLO in
hindsight, costs 0.88 to 1.02 times the cheapest fixed fleet on recorded traffic, and the utilization it needs varies
from 0.45 to 0.65 with the replica, the traffic and the cold start; no constant fits them all
(docs/decisions/predictive-utilization.md).
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field

ELASTICITY = 8.0  # measured 7.4 to 9.0: the miss share against the utilization, on three recorded cases
AIM = 0.85  # of the budget: what is left is for what the last day did not show
PRIOR_MISSES = 100.0  # the start weighs as much as the first tokens that allow this many misses
MEMORY_S = 86_400.0  # the last day's count
BUCKET_S = 3_600.0
DRAIN_S = 60.0  # the minute the rates are read over, and the queue looked back over
LEAST = 0.05
MOST = 1.0  # a replica cannot do more than its compute


def work_in_replicas(
    prompt_tokens_per_second: float,
    generation_tokens_per_second: float,
    waiting: float | None,
    first_tokens_per_second: float | None,
    prefill_tokens_per_second: float,
    decode_tokens_per_second: float,
    waiting_before: float | None = None,
    horizon: float = DRAIN_S,
) -> float:
    """The replicas' worth of compute the fleet is asked for (the module's docstring): the last minute's tokens at
    the replica's throughputs, and its queue at the minute's mean request: with ``waiting_before`` (the requests
    waiting a minute before), the queue's growth over the minute and the queue to be done within ``horizon`` (the
    minute at least); without, the whole queue within the minute."""
    work = prompt_tokens_per_second / prefill_tokens_per_second
    work += generation_tokens_per_second / decode_tokens_per_second
    if not first_tokens_per_second or first_tokens_per_second <= 0 or work <= 0:
        return work
    each = work / first_tokens_per_second
    if waiting_before is None:
        return work + (waiting or 0.0) * each / DRAIN_S
    now = waiting or 0.0
    arrived = max(work + (now - waiting_before) * each / DRAIN_S, 0.0)
    return arrived + now * each / max(horizon, DRAIN_S)


SLOTS = int(MEMORY_S // BUCKET_S)
EMPTY = -(2**62)  # a slot no hour has counted in (a decision clock's hours may be negative: history replayed)


@dataclass
class UtilizationLearner:
    """The utilization the budget's count calls for, from the last day's hours, a slot an hour in a ring (``hours``
    says which hour a slot holds): each hour's counted misses, and its first tokens times ``u ** ELASTICITY`` at
    the time they were counted, and alone. About 1.4 kB a learner (tracemalloc, a day of ticks): 14 MB at 10,000
    workloads, where a dict of lists held 5 kB."""

    start: float
    allowed: float  # the share of first tokens the slo allows to miss
    weight: float = 0.0  # the requests the start was planned on: first tokens it weighs against warming
    utilization: float = 0.0
    hours: array[int] = field(default_factory=lambda: array("q", [EMPTY] * SLOTS))
    misses: array[float] = field(default_factory=lambda: array("d", [0.0] * SLOTS))
    exposure: array[float] = field(default_factory=lambda: array("d", [0.0] * SLOTS))
    tokens: array[float] = field(default_factory=lambda: array("d", [0.0] * SLOTS))  # the first tokens alone
    first: float | None = None  # the first tick counted: what the budget has been earned over
    last: float | None = None  # the last tick the utilization was worked out at
    # The other slots' sums within the day, worked out once an hour: a tick adds its own slot alone.
    _summed_for: int = -1
    _other_misses: float = 0.0
    _other_exposure: float = 0.0

    def most(self, now: float) -> float:
        """The hottest the learner may run: from ``start`` toward ``MOST`` as a day is counted (a budget is earned
        as its traffic is counted, and a calm first hour has earned an hour's, not a day's). Cooler it may go at
        once."""
        earned = 0.0 if self.first is None else min((now - self.first) / MEMORY_S, 1.0)
        return self.start + (MOST - self.start) * earned

    def __post_init__(self) -> None:
        if not self.utilization:
            self.utilization = self.start

    def fits(self, start: float, allowed: float, weight: float = 0.0) -> bool:
        """Whether this learner is the one for ``start``, ``allowed`` and ``weight`` (a reload may change any)."""
        return self.start == start and self.allowed == allowed and self.weight == weight

    def absorb(self, older: UtilizationLearner) -> None:
        """Take in ``older``'s hours, counted before this learner's first tick (a starting daemon's day read apart
        from its last minutes: ``autoscaler.warm_up``), and work the utilization out from them all. This learner's
        own minutes are weighed as run at the utilization ``older`` ended at, as a reading in order would have
        weighed them (the minutes it ran at its start, until the day was in, as well: they are minutes against a
        day); an hour both counted is summed, one only ``older`` holds taken unless a later hour holds its slot.
        A day caught up so learns what a reading in order learns, within 1 % (tests/test_warm_up.py)."""
        if not older.fits(self.start, self.allowed, self.weight) or older.first is None:
            return
        ran_at = older.utilization**ELASTICITY
        for slot in range(SLOTS):
            self.exposure[slot] = self.tokens[slot] * ran_at
        for slot, hour in enumerate(older.hours):
            if hour == EMPTY or self.hours[slot] > hour:
                continue
            self._claim(slot, hour)
            self.misses[slot] += older.misses[slot]
            self.exposure[slot] += older.exposure[slot]
            self.tokens[slot] += older.tokens[slot]
        self.first = older.first if self.first is None else min(self.first, older.first)
        self._summed_for = -1
        self._settle(max(self.last or older.first, older.last or older.first))

    def observe(self, now: float, first_tokens: float, misses: float) -> float:
        """Count a tick's first tokens and estimated misses at the utilization in use, and return the new one."""
        hour = int(now // BUCKET_S)
        slot = hour % SLOTS
        self._claim(slot, hour)
        self.misses[slot] += misses
        self.exposure[slot] += first_tokens * self.utilization**ELASTICITY
        self.tokens[slot] += first_tokens
        if self.first is None:
            self.first = now
        return self._settle(now)

    def _claim(self, slot: int, hour: int) -> None:
        """``slot`` for ``hour``: emptied when it held another (a new hour: the one a day before leaves it)."""
        if self.hours[slot] != hour:
            self.hours[slot], self.misses[slot], self.exposure[slot], self.tokens[slot] = hour, 0.0, 0.0, 0.0

    def _settle(self, now: float) -> float:
        """The utilization the day's count calls for at ``now``, within its bounds."""
        hour = int(now // BUCKET_S)
        slot = hour % SLOTS
        if self._summed_for != hour:
            others = [i for i in range(SLOTS) if i != slot and self.hours[i] > hour - SLOTS]
            self._other_misses = sum(self.misses[i] for i in others)
            self._other_exposure = sum(self.exposure[i] for i in others)
            self._summed_for = hour
        own = self.hours[slot] == hour
        missed = self._other_misses + own * self.misses[slot]
        exposure = self._other_exposure + own * self.exposure[slot]
        prior = PRIOR_MISSES / self.allowed
        cool = self._best(missed, exposure, prior)
        warm = self._best(missed, exposure, self.weight) if self.weight > prior else cool
        self.last = now
        self.utilization = min(max(min(cool, warm), LEAST), self.most(now))
        return self.utilization

    def _best(self, missed: float, exposure: float, prior: float) -> float:
        """The ``u`` at which ``a * u ** ELASTICITY`` spends ``AIM`` of the budget, ``a`` from the count's
        ``missed`` over its ``exposure`` and the start's ``prior`` first tokens, spent as aimed."""
        share_at_one = (missed + AIM * self.allowed * prior) / (exposure + prior * self.start**ELASTICITY)
        return float((AIM * self.allowed / share_at_one) ** (1 / ELASTICITY))
