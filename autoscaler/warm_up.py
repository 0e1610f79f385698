"""A starting daemon's policies rebuilt from Prometheus's history, so that a restart forgets nothing.

``predictive`` decides from what it has seen: the demand's trend over the last two horizons and, with
``learnedHeadroom``, a day of its rises. A daemon that starts empty-handed decides without a trend for
ten minutes after every restart, rollout or failover, and with a learned headroom relearns the day. So
before a workload's first decision the daemon reads the series ``record`` would write for it over the
policy's ``history_seconds`` and passes them through the policy's ``recommend``, one tick per sample,
discarding what it proposes: only the policy's state is rebuilt; nothing is written, and the behavior
history, which the state ConfigMap carries, is left alone. A history that cannot be read leaves the policy
to learn as it goes, as it did before (logged as ``warm-up-incomplete``).

The history is read by series and namespaces, not by workload (``FleetHistory``): a series its own query
would read from the built-in metrics or kube-state-metrics is asked once for every workload of up to
``BATCH_POINTS`` worth of namespaces, aggregated to one series a workload on the server
(``metrics.queries.owned_query``), a namespace of more workloads than that in parts by the targets' names; only a
custom query is asked per workload. Worked example: 10,000
workloads in 100 namespaces, each read from eight such series over a day (23 hours a minute apart, eight
namespaces a query; the last hour a tick apart, fifty), ask 8 x (13 + 2) = 120 queries where they asked
160,000, one for each workload, series and part (tests/test_warm_up.py).
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field

from autoscaler.logs import get_logger
from autoscaler.metrics.queries import OWNER, owned_query
from autoscaler.metrics.source import Failure, MetricSource, RangeSeries, RangeVector
from autoscaler.record import PROMETHEUS_FAILURES, series_queries
from policies.base import Policy
from policies.policy_file import Workload
from policies.recorded import ACTIVITY, READY_REPLICAS, REPLICAS, decided_names, recorded_observation

log = get_logger("autoscaler.warm_up")
MAX_POINTS = 10_000  # Prometheus refuses a range query of more than 11,000 points a series
BATCH_POINTS = 1_200_000
"""The points one query for several namespaces may ask (workloads x steps). Its answer takes about 67 bytes a point
while it is read (``PrometheusSource.query_ranges``; the client's own parse took 262: ``autoscaler.bench``'s
``range_parse_*``), so this bounds what the warm-up adds to the daemon's memory to about 80 MB (the shipped limit
is 512 MiB); 23 hours a minute apart are 1,380 points a workload, about 870 workloads a query."""
NOT_ANSWERING = {Failure.TIMEOUT, Failure.UNREACHABLE}  # Prometheus, not the query: nothing more is asked of it
TOO_MANY_SAMPLES = "too many samples"  # Prometheus's --query.max-samples refused it: asked again in halves
Part = tuple[float, float, float]  # seconds back from, seconds back to, step


@dataclass
class WarmUp:
    """What one workload's warm-up read: the samples its policy saw, and the series Prometheus failed to
    answer (a series with no data yet is no failure: a new workload has no past)."""

    samples: int = 0
    failed: list[str] = field(default_factory=list)


def history_seconds(policy: Policy) -> float:
    """How much of the past a policy's state is built from (its ``history_seconds``; 0 when it keeps none)."""
    return float(policy.history_seconds)


def spans(policy: Policy, interval: float) -> list[Part]:
    """The parts of a policy's history to read, oldest first, as ``(seconds back from, seconds back to, step)``:
    its last ``detail_seconds`` (by default the whole history) a tick an ``interval`` apart, what is older
    ``coarse_intervals`` ticks apart; each wider where that would pass ``MAX_POINTS``."""
    seconds = history_seconds(policy)
    detail = min(float(policy.detail_seconds), seconds)
    coarse = int(policy.coarse_intervals) * interval
    parts = []
    if seconds > detail:
        parts.append((seconds, detail, max(coarse, (seconds - detail) / MAX_POINTS)))
    if detail > 0:
        parts.append((detail, 0.0, max(interval, detail / MAX_POINTS)))
    return parts


def _coarse(policy: Policy, part: Part) -> bool:
    """Whether ``part`` is history before the policy's ``detail_seconds``, passed through its ``catch_up``."""
    return part[0] > float(policy.detail_seconds)


def read_over(name: str, policy: Policy, part: Part) -> bool:
    """Whether series ``name`` is read over ``part``: every series within ``detail_seconds``; before it, the counts
    and what the policy's ``catch_up`` reads (``catch_up_signals``). A follower's day is 4 of the default's 8."""
    wanted = policy.catch_up_signals
    return not _coarse(policy, part) or wanted is None or name in wanted or name in (REPLICAS, READY_REPLICAS)


def owned_series(workload: Workload) -> dict[str, str]:
    """Of the series a workload is decided from (``record.series_queries``), those its own query reads from the
    built-in metrics or kube-state-metrics, by recorded-metrics name: what ``owned_query`` asks for many
    workloads at once. A custom ``query``, ``replicasQuery`` or activation query is asked on its own."""
    owned = {m.name: m.name for m in workload.metrics if not m.query}
    owned |= {name: name for name in workload.extra_signals}
    owned[REPLICAS] = "spec"
    if not workload.replicas_query:
        owned[READY_REPLICAS] = "ready"
    if workload.activation is not None:
        owned[ACTIVITY] = "activity"
    return owned


@dataclass
class _Read:
    """One range query over one part of the history: one workload's own query, or an owned query of several
    namespaces' workloads (``owners``: a result series' namespace and owner to the workload it is)."""

    name: str  # the recorded-metrics name of the series
    query: str
    span: int  # which of the members' parts
    part: Part
    keys: list[str]
    owners: dict[tuple[str, str], str] | None = None
    group: tuple[str, str, float] = ("", "Deployment", 0.9)  # an owned query's series, kind and reading
    later: bool = False  # history caught up apart (``Policy.apart``): asked once every recent part is


@dataclass
class _Member:
    """A workload being warmed: its parts, the reads each waits for, what they returned (``array`` pairs of
    stamps and values: a day of seven series is 180 kB a workload, not the 800 kB of a row a stamp)."""

    workload: Workload
    policy: Policy
    parts: list[Part]
    waiting: list[int]
    read: list[dict[str, tuple[array[float], array[float]]]]
    shadow: Policy | None = None  # ``policy.apart()``: the part before ``detail_seconds`` is caught up in it
    replayed: int = 0  # of ``order``
    reported: bool = False  # listed by ``finished``: it decides
    outcome: WarmUp = field(default_factory=WarmUp)
    failed: dict[str, str] = field(default_factory=dict)

    @property
    def order(self) -> list[int]:
        """The parts in the order they are passed: oldest first, or with a ``shadow`` the recent part first."""
        spans = list(range(len(self.parts)))
        return spans[1:] + spans[:1] if self.shadow is not None else spans

    @property
    def complete(self) -> bool:
        return self.replayed == len(self.parts)

    @property
    def failures(self) -> list[str]:
        """What failed of its reading and replay, a line each."""
        return [f"{name}: {why}" for name, why in self.failed.items()]


class FleetHistory:
    """The history of many workloads, read one range query at a time (``read_next``) so that a controller can
    spread the reading over ticks; a workload whose parts are all read is passed through its policy and listed
    by ``finished``. The reads are fixed when it starts (a reading over several ticks leaves a gap of those ticks
    before the first live one, which the policy's state takes as it takes a missed scrape), and asked in the order
    of ``members``, so that the first are warmed first.

    A policy whose older history can be caught up apart (``Policy.apart``: the default that follows its work, whose
    day is its budget's count) is listed once its recent part is read and passed, and decides from then on; its
    older part is read after every workload's recent one, caught up in the copy, and taken in (``absorb``) as it
    arrives, logged ``caught-up``. Ten thousand such workloads decide from the second or third tick of a start,
    where they waited some twenty ticks for their day (docs/decisions/daemon-scale.md)."""

    def __init__(self, members: Sequence[tuple[Workload, Policy]], wall: float, to_now: float, interval: float) -> None:
        self.wall, self.to_now = wall, to_now
        self.members: dict[str, _Member] = {}
        self.done_keys: list[str] = []
        order: dict[str, int] = {}
        own: list[tuple[int, _Read]] = []
        groups: dict[tuple[str, str, str, float, int, Part, bool], list[Workload]] = {}
        for index, (workload, policy) in enumerate(members):
            parts = spans(policy, interval)
            member = _Member(workload, policy, parts, [0] * len(parts), [{} for _ in parts])
            if len(parts) > 1:
                member.shadow = policy.apart()
            self.members[workload.key] = member
            order[workload.key] = index
            owned = owned_series(workload) if parts else {}
            for name, query in series_queries(workload).items() if parts else ():
                for span, part in enumerate(parts):
                    if not read_over(name, policy, part):
                        continue
                    member.waiting[span] += 1
                    later = member.shadow is not None and span == 0
                    if name in owned:
                        kind, reading = workload.target.kind, workload.histogram_reading(name)
                        groups.setdefault((name, owned[name], kind, reading, span, part, later), []).append(workload)
                    else:
                        own.append((index, _Read(name, query, span, part, [workload.key], later=later)))
            if not parts:
                self.done_keys.append(workload.key)
        batched = [(order[r.keys[0]], r) for group in groups.items() for r in self._owned_reads(*group)]
        self.reads = [r for _, r in sorted(own + batched, key=lambda x: (x[1].later, x[0], x[1].span))]
        self.next = 0

    @staticmethod
    def _owned_reads(group: tuple[str, str, str, float, int, Part, bool], workloads: list[Workload]) -> list[_Read]:
        """The reads of one owned series over one part for ``workloads``: their namespaces, in their order, as few
        to a query as keep it within ``BATCH_POINTS``; a namespace of more workloads than that, in parts of it by
        the targets' names (one namespace of 10,000 read whole would take gigabytes while parsed)."""
        name, series, kind, reading, span, part, later = group
        most = max(1, BATCH_POINTS // max(1, round((part[0] - part[1]) / part[2])))
        by_namespace: dict[str, list[Workload]] = {}
        for workload in workloads:
            by_namespace.setdefault(workload.target.namespace, []).append(workload)
        reads: list[_Read] = []
        chunk: list[Workload] = []
        for members in [*by_namespace.values(), []]:
            if chunk and (not members or len(chunk) + len(members) > most):
                reads.append(_owned_read(name, (series, kind, reading), chunk, span, part, later=later))
                chunk = []
            if len(members) > most:  # alone, in parts
                for start in range(0, len(members), most):
                    some = members[start : start + most]
                    reads.append(_owned_read(name, (series, kind, reading), some, span, part, False, later))
            else:
                chunk += members
        return reads

    @property
    def done(self) -> bool:
        return self.next >= len(self.reads)

    def catching_up(self, key: str) -> bool:
        """Whether ``key`` decides while its older history is still to be read and taken in (``Policy.apart``)."""
        member = self.members.get(key)
        return member is not None and member.reported

    @property
    def undecided(self) -> int:
        """The workloads not yet listed by ``finished``."""
        return sum(1 for m in self.members.values() if not m.reported)

    def finished(self) -> list[tuple[str, WarmUp]]:
        """The workloads warmed since the last call (that decide from now on), with what their warm-up read."""
        done, self.done_keys = self.done_keys, []
        return [(key, self._finish(key)) for key in done]

    def read_next(self, source: MetricSource) -> None:
        """Ask the next read. A query Prometheus does not answer (a timeout, unreachable) ends the reading: the rest
        would each wait their timeout out, and each workload is passed what was read. An owned query Prometheus
        finds too large (``--query.max-samples``) is asked again in halves, and one namespace's as its workloads'
        own queries."""
        read = self.reads[self.next]
        self.next += 1
        start, end = self.wall - read.part[0], self.wall - read.part[1] - read.part[2]
        # Each part ends a step before the next begins; the last ends now.
        try:
            if read.owners is None:
                answer: RangeSeries | RangeVector = source.query_range(read.query, start, end, read.part[2])
            else:
                answer = source.query_ranges(read.query, start, end, read.part[2])
        except Exception as exc:  # one read's fault fails its workloads' series, never the others'
            answer = RangeSeries([], Failure.BAD_RESPONSE, repr(exc)[:300])
            for key in read.keys:
                self.members[key].failed.setdefault(read.name, answer.detail)
        if answer.failure == Failure.HTTP_ERROR and TOO_MANY_SAMPLES in answer.detail and read.owners is not None:
            self.reads[self.next : self.next] = self._split(read)
            return
        if answer.failure in PROMETHEUS_FAILURES:  # not "no data": a new workload has no past
            for key in read.keys:
                self.members[key].failed.setdefault(read.name, str(answer.failure))
        if isinstance(answer, RangeSeries):
            stamps, values = array("d", (t for t, _ in answer.samples)), array("d", (v for _, v in answer.samples))
            self._keep(read.keys[0], read, stamps, values)
        else:
            assert read.owners is not None
            for series in answer.series:
                whose = read.owners.get((series.labels.get("namespace", ""), series.labels.get(OWNER, "")))
                if whose is not None:  # a pod of another name in the namespaces is no workload's
                    self._keep(whose, read, series.stamps, series.values)
        for key in read.keys:
            self._arrived(key, read.span)
        if answer.failure in NOT_ANSWERING and not self.done:
            left = len(self.reads) - self.next
            for key in {k for r in self.reads[self.next :] for k in r.keys}:
                self.members[key].failed["not asked"] = f"{left} more {'query' if left == 1 else 'queries'}"
                if self.members[key].reported:  # it decides already: what was read of the rest is taken in
                    self._catch_up(key)
                elif key not in self.done_keys:
                    self.done_keys.append(key)
            self.next = len(self.reads)

    def _split(self, read: _Read) -> list[_Read]:
        """A read Prometheus refused as too large: its workloads in two halves (by namespace while it spans several),
        and one workload's as its own query."""
        assert read.owners is not None
        workloads = [self.members[key].workload for key in read.keys]
        if len(workloads) == 1:
            query = series_queries(workloads[0])[read.name]
            return [_Read(read.name, query, read.span, read.part, read.keys, later=read.later)]
        spaces = list(dict.fromkeys(w.target.namespace for w in workloads))
        if len(spaces) > 1:  # whole namespaces, in two halves
            first = set(spaces[: len(spaces) // 2])
            halves = (
                [w for w in workloads if w.target.namespace in first],
                [w for w in workloads if w.target.namespace not in first],
            )
        else:
            halves = workloads[: len(workloads) // 2], workloads[len(workloads) // 2 :]
        whole = len(spaces) > 1
        return [_owned_read(read.name, read.group, half, read.span, read.part, whole, read.later) for half in halves]

    def _keep(self, key: str, read: _Read, stamps: array[float], values: array[float]) -> None:
        self.members[key].read[read.span][read.name] = (stamps, values)  # one read a workload, series and part

    def _arrived(self, key: str, span: int) -> None:
        """One more read of ``key``'s part ``span`` is in: replay what is complete, in the member's ``order``. A
        workload decides once all of it is replayed, or with a ``shadow`` its recent part; a member already
        listed, once its older part is taken in, is done."""
        member = self.members[key]
        member.waiting[span] -= 1
        order = member.order
        while not member.complete and member.waiting[order[member.replayed]] == 0:
            self._replay(member, order[member.replayed])
        if member.reported:
            if member.complete:
                self._caught_up(key)
        elif (member.complete or (member.shadow is not None and member.replayed)) and key not in self.done_keys:
            self.done_keys.append(key)

    def _catch_up(self, key: str) -> None:
        """Take in what was read of a listed member's older part (the reading ended), and let it go."""
        self._replay_rest(self.members[key])
        self._caught_up(key)

    def _replay_rest(self, member: _Member) -> None:
        """Replay the parts not yet replayed, as far as they were read (the reading ended)."""
        while not member.complete:
            self._replay(member, member.order[member.replayed])

    def _caught_up(self, key: str) -> None:
        member = self.members.pop(key)
        failed = member.failures
        if failed:
            log.warning("catch-up-incomplete", workload=key, samples=member.outcome.samples, failed=failed)
        else:
            log.info("caught-up", workload=key, samples=member.outcome.samples)

    def _replay(self, member: _Member, span: int) -> None:
        """Pass part ``span`` through the policy's ``recommend``, a tick per sample, and let it go; the part before
        ``detail_seconds`` through its ``catch_up``, or the ``shadow``'s, which the policy then takes in. A sample
        without the count asked for is skipped: it is what a policy's demand is measured against. A policy that
        fails on its history fails that workload's warm-up alone."""
        member.replayed += 1
        rows: dict[float, dict[str, float]] = {}
        for name, (stamps, values) in member.read[span].items():
            for stamp, value in zip(stamps, values, strict=True):
                rows.setdefault(stamp, {})[name] = value
        member.read[span] = {}
        names = decided_names(member.workload)
        # Before the policy's detail_seconds, only what reaches back that far is moved (its catch_up).
        coarse = _coarse(member.policy, member.parts[span])
        policy = member.shadow if coarse and member.shadow is not None else member.policy
        apply = policy.catch_up if coarse else policy.recommend
        try:
            for stamp in sorted(rows):
                row = rows[stamp]
                if (current := row.get(REPLICAS)) is None:
                    continue
                apply(recorded_observation(member.workload, row, stamp + self.to_now, round(current), names))
                member.outcome.samples += 1
            if policy is not member.policy:
                member.policy.absorb(policy)
        except Exception as exc:
            member.failed.setdefault("replay", repr(exc)[:300])
            member.replayed = len(member.parts)

    def _finish(self, key: str) -> WarmUp:
        """A member listed: what its warm-up read so far. It is let go, its parts replayed as far as they were read
        (the reading ended), unless it catches its older part up apart in later reads."""
        member = self.members[key]
        member.reported = True
        if member.shadow is None or self.done:
            self._replay_rest(member)
        if member.complete:
            del self.members[key]
        return WarmUp(member.outcome.samples, member.failures)


def _owned_read(
    name: str,
    group: tuple[str, str, float],
    workloads: list[Workload],
    span: int,
    part: Part,
    whole: bool = True,
    later: bool = False,
) -> _Read:
    """The read of series ``name`` (``group``: its owned series, the targets' kind, a histogram's reading) for
    ``workloads``: their namespaces whole, or (not ``whole``) the targets by name, a part of one namespace's."""
    series, kind, reading = group
    spaces = list(dict.fromkeys(w.target.namespace for w in workloads))
    names = None if whole else [w.target.name for w in workloads]
    return _Read(
        name,
        owned_query(series, spaces, kind, reading, names=names),
        span,
        part,
        [w.key for w in workloads],
        {(w.target.namespace, w.target.name): w.key for w in workloads},
        group,
        later,
    )


def warm_up(
    workload: Workload, policy: Policy, source: MetricSource, wall: float, to_now: float, interval: float
) -> WarmUp:
    """Pass the workload's last ``history_seconds`` through ``policy.recommend``, a tick an ``interval`` apart,
    or coarser before its ``detail_seconds`` (``spans``), all read at once (``FleetHistory``). ``wall`` is the wall
    clock now and ``to_now`` what turns a wall-clock time into the decision clock."""
    history = FleetHistory([(workload, policy)], wall, to_now, interval)
    while not history.done:
        history.read_next(source)
    return dict(history.finished()).get(workload.key, WarmUp())
