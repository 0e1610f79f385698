"""The tick: for each workload read the scale, observe, decide, act, and log one canonical line.

This is the thin loop around ``policies.pipeline.WorkloadDecider``, in the HPA's shape: every safety rule
that needs the cluster lives here, every decision rule lives in ``policies``.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from autoscaler.actuators.base import (
    CLAIMED_BY,
    PAUSED,
    PAUSED_REPLICAS,
    Actuator,
    ActuatorError,
    Owner,
    Ownership,
    ReadFailure,
    ScaleState,
    target_key,
)
from autoscaler.concurrency import each
from autoscaler.conditions import Condition, judge, merge
from autoscaler.leader import LeaderElector
from autoscaler.logs import Writer, get_logger, line_writer
from autoscaler.metrics.source import MetricSource
from autoscaler.observer import Observer, WorkloadMetrics
from autoscaler.state import HEARTBEAT_S, RECORD_FIELDS, LastScale, StateStore, WorkloadRecord, record_key
from autoscaler.telemetry import Series, Telemetry
from autoscaler.warm_up import FleetHistory, WarmUp, history_seconds
from policies.base import Observation
from policies.behavior import BehaviorState, ScaleEvent, TimedRecommendation
from policies.cold_start import WritesToReady
from policies.pipeline import Decision, Reason, WorkloadDecider
from policies.policy_file import (
    PolicyFile,
    PolicyFileError,
    TargetRef,
    Workload,
    parse_policy_text,
    read_policy_text,
)
from policies.spec import MetricSpec, TargetType

log = get_logger("autoscaler.controller")


EVENT_REASONS = {Reason.SCALED_TO_ZERO: "ScaledToZero", Reason.ACTIVATED: "Activated"}
# Scale writes in flight at once, each with its owner check, claim and Event: 1,000 scale-ups in one tick wrote one
# after another for minutes; this many at a time bounds what a burst asks of the API server.
WRITE_CONCURRENCY = 16
WARM_UP_SHARE = 0.5  # of an interval: what a tick spends reading workloads' history before it decides
CATCHING_UP = "catching-up"  # a lower count held while the workload's older history is read (autoscaler.warm_up)


@dataclass
class _Commit:
    """A scale write a tick decided, made with the others once every workload has decided (``_commit_all``)."""

    runtime: WorkloadRuntime
    state: ScaleState
    decision: Decision
    desired: int
    line: dict[str, Any]


@dataclass
class WorkloadRuntime:
    workload: Workload
    decider: WorkloadDecider
    cold_start: WritesToReady = field(default_factory=WritesToReady)  # a scale-up in flight, to its readiness
    metrics_failing: bool = False
    refused_by: tuple[str, ...] = ()
    missing: bool = False
    last_scale: tuple[float, int, int, str] | None = None  # wall time, from, to, reason
    warmed: bool = False  # its policy has been passed Prometheus's history (autoscaler.warm_up)
    conditions: list[Condition] = field(default_factory=list)  # AbleToScale, ScalingActive, ScalingLimited
    record: WorkloadRecord | None = None  # its record as last built (``Controller._records``)
    shape: tuple[Any, ...] = ()  # and what it was built from (``_shape``)
    # Its series of current and ready, and of desired, recommended and the bounds, looked up when first set (six
    # ``labels()`` a decision were 3 % of a tick's CPU at 10,000 workloads).
    read_series: tuple[Series, Series] | None = None
    decided_series: tuple[Series, Series, Series, Series] | None = None


class Controller:
    def __init__(
        self,
        policy_path: str | Path | None,
        document: PolicyFile,
        source: MetricSource,
        actuator: Actuator,
        telemetry: Telemetry | None = None,
        clock: Callable[[], float] = time.time,
        elector: LeaderElector | None = None,
        decision_clock: Callable[[], float] = time.monotonic,
        store: StateStore | None = None,
        source_factory: Callable[[PolicyFile], MetricSource] | None = None,
        install: str | None = None,
    ) -> None:
        """``clock`` is the wall clock, for Prometheus's evaluation time; ``decision_clock`` times the
        behavior windows, rate limits and cold starts, and is monotonic so that a step of the wall clock
        cannot freeze or release them. ``store`` keeps the per-workload state in the cluster (written by
        the leader only, never in dry-run); ``source_factory`` builds a new metric source when a reloaded
        policy changes its ``prometheus`` settings. ``install`` names this install of the controller (its
        Lease's ``namespace/name``): it claims a target before its first write and leaves one another
        install has claimed alone."""
        self.policy_path = Path(policy_path) if policy_path is not None else None
        self.source = source
        self.actuator = actuator
        self.telemetry = telemetry or Telemetry()
        self.clock = clock
        self.decision_clock = decision_clock
        self.elector = elector
        self.store = store
        self.source_factory = source_factory
        self.install = install
        self.restored = False
        self.document = document
        self.observer = Observer(document, source)
        self.runtime = {w.key: WorkloadRuntime(w, document.decider(w)) for w in document.workloads}
        self.policy_digest = self._digest(self._policy_text()) if self.policy_path else None
        self.rejected_digest: str | None = None
        self.last_tick_at: float | None = None
        self.started_at = decision_clock()
        self.prometheus_ok = False
        self.records: dict[str, WorkloadRecord] = {}  # as of the last tick: the state written, and ``/status``
        self._changed: list[str] = []  # the keys of the records the last tick built afresh (``_records``)
        self._decisions: Any = log  # the log the tick's lines go to (``tick``)
        self._line_writer: Writer | None = None  # or the JSON lines' writer, as configured at the tick (``tick``)
        self._built_at = -math.inf  # when every record was last built afresh, without a state to write
        self._commits: list[_Commit] = []  # the tick's scale writes, made together once every workload decided
        self._history: FleetHistory | None = None  # the history of the workloads not yet warmed, while it is read

    # -- the policy file -----------------------------------------------------------------------------

    @property
    def interval(self) -> float:
        return float(self.document.interval)

    @staticmethod
    def _digest(text: str | None) -> str | None:
        return None if text is None else hashlib.sha256(text.encode()).hexdigest()

    def _policy_text(self) -> str | None:
        """The file the document was loaded from, as it is now (None if it cannot be used)."""
        try:
            return read_policy_text(self.policy_path) if self.policy_path else None
        except PolicyFileError:
            return None

    def check_policy(self) -> bool:
        """Re-read the policy file; swap in a valid new one, keep the last good one otherwise."""
        if self.policy_path is None:
            return False
        try:
            text = read_policy_text(self.policy_path)
        except PolicyFileError as exc:  # too big, not UTF-8, or unreadable: said once, until it changes
            unreadable = "unreadable: " + "; ".join(exc.problems)
            if self.rejected_digest != unreadable:
                self._reject(unreadable, exc.problems)
            return False
        digest = self._digest(text)
        if digest in (self.policy_digest, self.rejected_digest):
            return False
        assert text is not None and digest is not None
        try:
            document = parse_policy_text(text, str(self.policy_path))
            if self.source_factory is not None and document.prometheus != self.document.prometheus:
                self.source = self.source_factory(document)
                log.info("metric-source-rebuilt", prometheus=document.prometheus.url)
            observer = Observer(document, self.source)
        except (PolicyFileError, ValueError) as exc:
            self._reject(digest, exc.problems if isinstance(exc, PolicyFileError) else [str(exc)])
            return False
        self.apply_document(document, observer)
        self.policy_digest, self.rejected_digest = digest, None
        self.telemetry.policy_reloads.labels("applied").inc()
        return True

    def _reject(self, key: str, problems: list[str]) -> None:
        """A policy file that cannot be used: said once (``key`` tells it from the next), in the log and as one
        ``InvalidPolicy`` Event per workload; the last good policy goes on."""
        self.rejected_digest = key
        self.telemetry.policy_reloads.labels("rejected").inc()
        log.error("policy-rejected", path=str(self.policy_path), problems=problems, keeping="last good policy")
        message = "invalid policy file, keeping the last good one: " + "; ".join(problems)[:900]
        for runtime in self.runtime.values():
            self._event(runtime.workload.target, "Warning", "InvalidPolicy", message)

    def apply_document(self, document: PolicyFile, observer: Observer | None = None) -> None:
        """Swap policies atomically; a workload that stays keeps its decision state, a removed one is left
        at its current count."""
        runtime: dict[str, WorkloadRuntime] = {}
        history = self._history
        for workload in document.workloads:
            previous = self.runtime.get(workload.key)
            catching_up = previous is not None and history is not None and history.catching_up(workload.key)
            decider = document.decider(workload, previous.decider if previous and not catching_up else None)
            if previous is not None and catching_up:
                # Its day was still being read: the new policy reads its history afresh, keeping the behavior.
                decider.restore(replace(previous.decider.snapshot(), policy_type=None, policy_state=None))
                previous.warmed = False
            if previous is not None:
                previous.workload, previous.decider = workload, decider
                runtime[workload.key] = previous
            else:
                runtime[workload.key] = WorkloadRuntime(workload, decider)
        self._history = None  # a history half read was planned for the old policies: read again for the new
        removed = sorted(set(self.runtime) - set(runtime))
        if self.install is not None and not self.actuator.dry_run and self.leading():
            for key in removed:  # no longer this install's to scale: let another take it
                self.actuator.release(self.runtime[key].workload.target, self.install)
        self.document, self.runtime = document, runtime
        self.observer = observer or Observer(document, self.source)
        log.info("policy-reloaded", workloads=sorted(runtime), removed=removed, interval=document.interval)

    # -- the tick ------------------------------------------------------------------------------------

    def leading(self) -> bool:
        return self.elector is None or self.elector.is_leader()

    def _event(self, target: TargetRef, kind: str, reason: str, message: str) -> None:
        """An Event on the target, from the leader only, as the HPA's controller-manager writes them: a standby
        decides beside it and says so in its log, and would only write every warning twice."""
        if self.leading():
            self.actuator.event(target, kind, reason, message)

    def tick(self) -> list[dict[str, Any]]:
        started = time.monotonic()
        # The module's logger bound once a tick, as configured now: through its lazy proxy, each line bound one again.
        self._decisions = log.bind()
        self._line_writer = line_writer()
        self.check_policy()
        wall, now = self.clock(), self.decision_clock()
        runtimes = list(self.runtime.values())
        if self._writes_state() and not self.restored:
            self._restore(wall, now)
        elif not self.leading():
            self.restored = False  # a leader again later reads what the leader meanwhile wrote
        # With only days left to catch up (every workload decides), the reading waits until the decisions are made.
        catching_up = self._history is not None and self._history.undecided == 0
        if not catching_up:
            self._warm_some(runtimes, wall, now)
        read = self.actuator.read_many([r.workload.target for r in runtimes])
        observed = self.observer.collect(wall)
        states = [read[target_key(r.workload.target)] for r in runtimes]
        for latency in self.observer.last_latencies:
            self.telemetry.query_latency.observe(latency)
        lines = []
        self._commits = []
        for runtime, state in zip(runtimes, states, strict=True):
            metrics = observed.get(runtime.workload.key, WorkloadMetrics({}))
            try:
                lines.append(self._workload_tick(runtime, state, metrics, now))
            except Exception as exc:  # one workload's fault never stalls the others
                key = runtime.workload.key
                log.exception("workload-tick-failed", workload=key)
                self.telemetry.decisions.labels(key, "workload-failed").inc()
                lines.append(
                    {"workload": key, "reason": "workload-failed", "detail": repr(exc)[:300], "applied": False}
                )
        self._commit_all()
        if catching_up:
            self._warm_some(runtimes, wall, now)
        self.prometheus_ok = any(not m.all_failed for m in observed.values()) or not observed
        self.records = self._records(lines, wall, now)
        if self._writes_state():
            self._persist(self.records)
        self.last_tick_at = now
        self.telemetry.tick_duration.observe(time.monotonic() - started)
        self.telemetry.leader.set(1 if self.leading() else 0)
        return lines

    def _workload_tick(
        self, runtime: WorkloadRuntime, state: ScaleState | ActuatorError, metrics: WorkloadMetrics, now: float
    ) -> dict[str, Any]:
        workload = runtime.workload
        key = workload.key
        line = self._line(key, metrics)
        if isinstance(state, ActuatorError):
            line.update(reason=f"target-{state.failure}", detail=state.detail)
            if state.failure == ReadFailure.NOT_FOUND and not runtime.missing:
                runtime.missing = True
            return self._log(line, "warning")
        if runtime.missing:
            runtime.missing = False
            log.info("target-found", workload=key)
        line.update(current=state.replicas, ready=state.ready)
        if runtime.read_series is None:
            runtime.read_series = (self.telemetry.current.labels(key), self.telemetry.ready.labels(key))
        runtime.read_series[0].set(state.replicas)
        runtime.read_series[1].set(state.ready)
        self._track_cold_start(runtime, state, now)

        refusal = self._ownership(runtime, state, line)
        if refusal is not None:
            self.telemetry.decisions.labels(key, refusal).inc()
            return self._log(line, "warning")

        if (paused := self._paused(runtime, state, line, now)) is not None:
            return paused
        if not runtime.warmed:  # its history is read in a later tick: no decision before it
            line.update(reason="warming-up")
            self.telemetry.decisions.labels(key, "warming-up").inc()
            return self._log(line)

        if workload.activation is not None:
            line.update(activation=metrics.activation, activity=metrics.activity)
            if self.actuator.dry_run and state.replicas == 0:  # shadow mode: nothing is written, so decide on any zero
                held = runtime.decider.snapshot()
                runtime.decider.restore(replace(held, zero=replace(held.zero, asleep=True)))
        observation = Observation(
            now, state.replicas, metrics.values, state.ready, metrics.activation, metrics.activity
        )
        decision = runtime.decider.decide(observation)
        floor = min(max(state.replicas, workload.min_replicas), workload.max_replicas)
        if decision.desired < floor and self._history is not None and self._history.catching_up(key):
            # Its day is still being read (autoscaler.warm_up): it may rise, not fall, until the day is in (its bounds
            # still hold: a count above maxReplicas goes to it).
            decision = replace(decision, desired=floor, reason=CATCHING_UP)
        self._count_slo(runtime, decision)
        self._metrics_events(runtime, decision, metrics, state)
        return self._act(runtime, state, decision, line)

    def _line(self, key: str, metrics: WorkloadMetrics) -> dict[str, Any]:
        """The tick's log line for a workload as its metrics were read, with the query failures and values counted."""
        line: dict[str, Any] = {
            "workload": key,
            "dry_run": self.actuator.dry_run,
            "leader": self.leading(),
            "metrics": metrics.values,
            "applied": False,
        }
        for name, result in metrics.failures.items():
            line.setdefault("metric_failures", {})[name] = f"{result.failure}: {result.detail}"
            self.telemetry.query_errors.labels(key, name, str(result.failure)).inc()
        for name, value in metrics.values.items():
            if value is not None:
                self.telemetry.metric_value.labels(key, name).set(value)
        return line

    def _paused(
        self, runtime: WorkloadRuntime, state: ScaleState, line: dict[str, Any], now: float
    ) -> dict[str, Any] | None:
        """KEDA's pause annotations: ``paused-replicas`` holds the count (within bounds), ``paused`` holds whatever
        it is; the tick's line when paused, None otherwise."""
        workload = runtime.workload
        paused_replicas = state.annotations.get(PAUSED_REPLICAS)
        if paused_replicas is not None:
            try:
                hold = int(paused_replicas)
            except ValueError:
                line.update(reason="paused", detail=f"ignoring {PAUSED_REPLICAS}={paused_replicas!r}")
                return self._log(line)
            desired = min(max(hold, workload.min_replicas), workload.max_replicas)
            return self._act(runtime, state, Decision(now, state.replicas, desired, desired, "paused"), line)
        if state.annotations.get(PAUSED, "").strip().lower() == "true":
            line.update(reason="paused")
            self.telemetry.decisions.labels(workload.key, "paused").inc()
            return self._log(line)
        return None

    def _warm_some(self, runtimes: list[WorkloadRuntime], wall: float, now: float) -> None:
        """Read the history of the workloads not yet warmed (``autoscaler.warm_up``) for up to ``WARM_UP_SHARE`` of an
        interval, one range query at least, and pass it through their policies; the others hold this tick
        (``warming-up``) and the reading goes on in the next. Ten thousand workloads' day of history takes minutes:
        in one tick it would hold every decision that long, and the liveness probe, which wants a tick every three
        intervals and 30 s, would restart the controller before its first (docs/operations.md, "State and
        status"); so could a Prometheus slow to answer each query."""
        deadline = self.decision_clock() + WARM_UP_SHARE * self.interval
        if self._history is None:
            # First those that read no history (nothing to wait for), then those that may sleep at zero (a request
            # waiting on a wake-up is the decision that cannot wait).
            pending = sorted(
                (r for r in runtimes if not r.warmed),
                key=lambda r: (history_seconds(r.decider.policy) > 0, r.workload.activation is None),
            )
            if not pending:
                return
            members = [(r.workload, r.decider.policy) for r in pending]
            self._history = FleetHistory(members, wall, now - wall, self.interval)
        history = self._history
        asked = 0
        while True:
            for key, outcome in history.finished():
                self._warmed(key, outcome)
            if history.done:
                self._history = None
                return
            if asked and self.decision_clock() >= deadline:
                log.info("warm-up-deferred", workloads=history.undecided, catching_up=len(history.members))
                return
            history.read_next(self.source)
            asked += 1

    def _warmed(self, key: str, outcome: WarmUp) -> None:
        if outcome.failed:
            log.warning("warm-up-incomplete", workload=key, samples=outcome.samples, failed=outcome.failed)
        elif outcome.samples:
            log.info("warmed-up", workload=key, samples=outcome.samples)
        if (runtime := self.runtime.get(key)) is not None:
            runtime.warmed = True

    def _ownership(
        self, runtime: WorkloadRuntime, state: ScaleState, line: dict[str, Any], fresh: bool = False
    ) -> str | None:
        """Why this workload must not be written (``owner-unknown``, ``foreign-autoscaler``), or None.

        Fail closed: an owner check that could not complete is no permission to write. In dry-run nothing is
        written anyway, so the decision goes on (shadow mode) and the line carries the owner's own counts
        beside ours, for comparing before the switch. ``fresh``: the check again just before a write, on a
        listing made then (an owner created since the tick's check is seen before anything is written; it costs
        the write a list of the namespace's autoscalers)."""
        target = runtime.workload.target
        ownership = self.actuator.owners(target, fresh)
        claimant = state.annotations.get(CLAIMED_BY)
        if claimant and claimant != self.install:
            ownership = Ownership((*ownership.owners, Owner(f"vllm-autoscaler install {claimant}")), ownership.unknown)
        owners = [o.what for o in ownership.owners]
        if ownership.owners:
            line["owners"] = owners
            counts = [o for o in ownership.owners if o.desired is not None]
            if counts:
                line.update(owner_current=counts[0].current, owner_desired=counts[0].desired)
                self.telemetry.owner_desired.labels(runtime.workload.key).set(counts[0].desired or 0)
                if counts[0].current is not None:
                    self.telemetry.owner_current.labels(runtime.workload.key).set(counts[0].current)
        if ownership.unknown:
            line["owner_unknown"] = list(ownership.unknown)
        if self.actuator.dry_run:
            if ownership.owners or ownership.unknown:
                line["shadow"] = True
            return None
        refusal, message = None, ""
        if ownership.unknown:
            refusal = "owner-unknown"
            message = "not scaling: cannot tell whether another autoscaler owns this target: " + "; ".join(
                ownership.unknown
            )
        elif ownership.owners:
            refusal = "foreign-autoscaler"
            message = f"not scaling: already targeted by {', '.join(owners)}; remove it first"
        if refusal is None:
            runtime.refused_by = ()
            return None
        line["reason"] = refusal
        if (refusal, *owners, *ownership.unknown) != runtime.refused_by:
            runtime.refused_by = (refusal, *owners, *ownership.unknown)
            reason = "OwnerUnknown" if refusal == "owner-unknown" else "ForeignAutoscaler"
            self._event(target, "Warning", reason, message[:1000])
        return refusal

    def _act(
        self, runtime: WorkloadRuntime, state: ScaleState, decision: Decision, line: dict[str, Any]
    ) -> dict[str, Any]:
        workload = runtime.workload
        key = workload.key
        desired = decision.desired
        if desired != state.replicas and not (workload.min_replicas <= desired <= workload.max_replicas):
            # Defence in depth: the decision pipeline already bounds every count it proposes.
            desired = min(max(desired, workload.min_replicas), workload.max_replicas)
        line.update(
            recommended=decision.recommended,
            desired=desired,
            reason=decision.reason,
            stabilized=decision.details.get("stabilized"),
        )
        if decision.details.get("policy"):
            line["policy"] = decision.details["policy"]
        if runtime.decided_series is None:
            t = self.telemetry
            runtime.decided_series = (
                t.desired.labels(key),
                t.recommended.labels(key),
                t.min_replicas.labels(key),
                t.max_replicas.labels(key),
            )
        desired_series, recommended_series, min_series, max_series = runtime.decided_series
        desired_series.set(desired)
        recommended_series.set(decision.recommended)
        min_series.set(workload.min_replicas)
        max_series.set(workload.max_replicas)
        self.telemetry.decisions.labels(key, decision.reason).inc()
        if self.actuator.dry_run:
            return self._shadow(runtime, state, decision, desired, line)
        if desired == state.replicas:
            return self._log(line)
        if not self.leading():
            line["write"] = "not-leader"
            return self._log(line)
        self._commits.append(_Commit(runtime, state, decision, desired, line))  # written with the others (tick)
        return line

    def _commit_all(self) -> None:
        """The tick's scale writes, ``WRITE_CONCURRENCY`` at a time, once every workload has decided: a burst of
        scale-ups is written within the interval. One workload's failing write stalls no other."""
        commits, self._commits = self._commits, []

        def commit(c: _Commit) -> None:
            try:
                self._commit(c.runtime, c.state, c.decision, c.desired, c.line)
            except Exception as exc:
                log.exception("workload-write-failed", workload=c.runtime.workload.key)
                c.line.update(write="failed", detail=repr(exc)[:300], applied=False)

        each(commit, commits, WRITE_CONCURRENCY, "scale-write")

    def _commit(
        self, runtime: WorkloadRuntime, state: ScaleState, decision: Decision, desired: int, line: dict[str, Any]
    ) -> dict[str, Any]:
        """One scale write's last checks, then the write: the owners listed again (an owner created since the
        tick's check is seen), the target claimed for this install, and ``_write``."""
        workload = runtime.workload
        key = workload.key
        if self._ownership(runtime, state, line, fresh=True) is not None:  # the tick's decision is counted already
            self.telemetry.scale_writes.labels(key, "refused").inc()
            line["write"] = "refused"
            return self._log(line, "warning")
        if self.install is not None and state.annotations.get(CLAIMED_BY) != self.install:
            claimed = self.actuator.claim(workload.target, state, self.install)
            if not claimed.applied:  # not ours yet: no write; the next tick reads the target again
                line.update(write=f"claim-{claimed.outcome}", detail=claimed.detail)
                return self._log(line, "warning")
            log.info("target-claimed", workload=key, claimant=self.install)
            state = replace(state, resource_version=claimed.resource_version or state.resource_version)
        return self._write(runtime, state, decision, desired, line)

    def _write(
        self, runtime: WorkloadRuntime, state: ScaleState, decision: Decision, desired: int, line: dict[str, Any]
    ) -> dict[str, Any]:
        """The scale write itself, once every check let it through: remembered by the decider and the cold start's
        tracker when it took effect, and an Event either way (not for a race lost or a lease gone)."""
        workload = runtime.workload
        result = self.actuator.scale(workload.target, state, desired)
        line.update(write=result.outcome, attempts=result.attempts)
        self.telemetry.scale_writes.labels(workload.key, result.outcome).inc()
        if result.applied:
            line["applied"] = True
            runtime.decider.applied(
                Decision(decision.now, state.replicas, decision.recommended, desired, decision.reason, decision.details)
            )
            runtime.cold_start.written(self.decision_clock(), state.replicas, desired)
            runtime.last_scale = (self.clock(), state.replicas, desired, decision.reason)
            self._event(
                workload.target,
                "Normal",
                EVENT_REASONS.get(decision.reason, "SuccessfulRescale"),
                f"New size: {desired}; reason: {decision.reason} (from {state.replicas})",
            )
            return self._log(line)
        line["detail"] = result.detail
        if result.outcome not in ("changed-concurrently", "not-leader"):
            self._event(
                workload.target,
                "Warning",
                "FailedRescale",
                f"New size: {desired}; reason: {decision.reason}; error: {result.outcome} {result.detail}",
            )
        return self._log(line, "warning")

    def _shadow(
        self, runtime: WorkloadRuntime, state: ScaleState, decision: Decision, desired: int, line: dict[str, Any]
    ) -> dict[str, Any]:
        """Dry-run's line, every tick, agreeing or not: the count it would set now (``desired``, after behavior),
        the count its policy is heading for (``heading``: the stabilized recommendation within the bounds, where
        it goes once the rate limits let it), and beside an owner the owner's current and desired counts, with
        ``agrees`` (ours now against the owner's desired, or against the current count without an owner)."""
        workload = runtime.workload
        stabilized = decision.details.get("stabilized")
        heading = decision.recommended if stabilized is None else int(stabilized)
        heading = min(max(heading, workload.min_replicas), workload.max_replicas)
        self.telemetry.heading.labels(workload.key).set(heading)
        owner_desired = line.get("owner_desired")
        line.update(
            write="dry-run",
            heading=heading,
            agrees=desired == (owner_desired if owner_desired is not None else state.replicas),
        )
        return self._log(line, event="would-scale")

    def _count_slo(self, runtime: WorkloadRuntime, decision: Decision) -> None:
        """The first tokens and estimated misses a policy counted into its error budget this tick, as counters: the
        ``VllmAutoscalerErrorBudgetBurn`` alert's burn rate (deploy/prometheus/rules.yaml)."""
        counted = decision.details.get("policy", {})
        slo = runtime.workload.slo
        if slo is None or "slo_first_tokens" not in counted:
            return
        key = runtime.workload.key
        self.telemetry.slo_target.labels(key).set(slo.target)
        self.telemetry.slo_first_tokens.labels(key).inc(max(counted["slo_first_tokens"], 0.0))
        self.telemetry.slo_misses.labels(key).inc(max(counted["slo_misses"], 0.0))

    def _metrics_events(
        self, runtime: WorkloadRuntime, decision: Decision, metrics: WorkloadMetrics, state: ScaleState
    ) -> None:
        """As the HPA's controller says it, once until the metrics come back: ``FailedGetExternalMetric`` (Warning) for
        each metric without a usable value and ``FailedComputeMetricsReplicas`` (Warning) for the count it could not
        compute; with no replica ready (at zero, or every one still in its cold start) vLLM has nothing to export
        yet, which is expected: ``WaitingForReadyReplicas`` (Normal) alone."""
        failing = decision.reason in (Reason.METRICS_UNAVAILABLE, Reason.FALLBACK)
        if failing and not runtime.metrics_failing:
            target = runtime.workload.target
            if state.ready == 0:
                self._event(
                    target,
                    "Normal",
                    "WaitingForReadyReplicas",
                    f"holding at {decision.current}: no replica is ready yet to export metrics",
                )
            else:
                errors = [
                    f"unable to get external metric {name}: {r.failure}: {r.detail}"
                    for name, r in metrics.failures.items()
                ]
                missing = decision.details.get("policy", {}).get("missing") or []
                errors += [f"unable to get external metric {n}: no value" for n in missing if n not in metrics.failures]
                for error in errors:
                    self._event(target, "Warning", "FailedGetExternalMetric", error[:1000])
                count = len(runtime.workload.metrics)
                first = errors[0] if errors else "no usable value"
                self._event(
                    target,
                    "Warning",
                    "FailedComputeMetricsReplicas",
                    f"invalid metrics ({len(errors) or count} invalid out of {count}), first error is: {first}"[:1000],
                )
        runtime.metrics_failing = failing

    def _track_cold_start(self, runtime: WorkloadRuntime, state: ScaleState, now: float) -> None:
        """From a scale-up write to ``readyReplicas`` reaching the new count, measured at tick resolution."""
        pending = runtime.cold_start.pending
        seconds = runtime.cold_start.observe(now, state.replicas, state.ready)
        if seconds is None or pending is None:
            return
        count = pending[1]
        p90 = runtime.decider.cold_start_measured(seconds)
        self.telemetry.cold_start.labels(runtime.workload.key).observe(seconds)
        log.info(
            "cold-start-measured",
            workload=runtime.workload.key,
            seconds=round(seconds, 1),
            replicas=count,
            p90_s=None if p90 is None else round(p90, 1),
        )

    # -- state kept in the cluster -------------------------------------------------------------------

    def _writes_state(self) -> bool:
        return self.store is not None and not self.actuator.dry_run and self.leading()

    def _restore(self, wall: float, now: float) -> None:
        """Carry on from what the last leader wrote: cold starts, a scale-up on its way, the behavior history."""
        assert self.store is not None
        try:
            records = self.store.load()
        except Exception as exc:  # the API down: decide without it, try again next tick
            log.warning("state-unreadable", detail=str(exc)[:200])
            return
        self.restored = True
        to_now = now - wall  # wall-clock seconds to this process's decision clock
        for key, runtime in self.runtime.items():
            record = records.get(key)
            if record is None:
                continue
            held = runtime.decider.snapshot()
            restore_behavior(held.behavior, record.behavior, to_now)
            runtime.decider.restore(
                replace(
                    held,
                    cold_starts=(*held.cold_starts, *record.cold_starts),
                    zero=replace(held.zero, asleep=record.scaled_to_zero),
                )
            )
            if record.pending_scale_up is not None:
                runtime.cold_start.pending = (record.pending_scale_up[0] + to_now, int(record.pending_scale_up[1]))
            if record.last_scale is not None:
                last = record.last_scale
                runtime.last_scale = (last.at, last.from_replicas, last.to, last.reason)
            runtime.conditions = list(record.conditions)
            runtime.shape = ()  # its record built and its conditions judged afresh at this tick (``_records``)
        log.info("state-restored", workloads=sorted(set(records) & set(self.runtime)))

    def _records(self, lines: list[dict[str, Any]], wall: float, now: float) -> dict[str, WorkloadRecord]:
        """Each workload's record after this tick (``autoscaler.state``), its conditions judged from the tick's line
        (``autoscaler.conditions``); times on the wall clock. A workload whose record would differ from its last one
        only in ``VOLATILE`` fields (``_shape``) keeps that record with those two set (its behavior history's times,
        then, as of its last change: as the state ConfigMap holds them); every record is built afresh each
        ``HEARTBEAT_S``, when the state is written whatever changed. Building them all was a third of a tick at
        10,000 workloads (docs/decisions/daemon-scale.md)."""
        to_wall = wall - now
        if self.store is not None and self._writes_state():
            afresh = self.store.heartbeat_due(wall)
        else:
            afresh = wall - self._built_at >= HEARTBEAT_S
        if afresh:
            self._built_at = wall
        records = {}
        self._changed = []
        # Each pair of the behavior's history once, for every record built (``dump_behavior``).
        pairs: dict[tuple[int, float], list[float]] = {}
        for line in lines:
            runtime = self.runtime.get(line["workload"])
            if runtime is None:
                continue
            workload = runtime.workload
            said = dict(line)
            said.pop("metrics", None)
            if not runtime.shape or said != runtime.shape[0] or workload is not runtime.shape[1]:
                # judged on the line but for its metrics' values: the same line, the same conditions (``merge``)
                judged = judge(line, workload.min_replicas, workload.max_replicas)
                runtime.conditions = merge(runtime.conditions, judged, wall)
            current = line.get("current")
            metrics = {m.name: _metric(m, line.get("metrics", {}).get(m.name), current) for m in workload.metrics}
            key = record_key(workload.key, workload.target.kind)
            shape = _shape(runtime, said)
            kept = runtime.record
            if kept is not None and not afresh and shape == runtime.shape:
                kept.__dict__.update(updated_at=wall, metrics=metrics)  # the VOLATILE fields, unvalidated as built
                records[key] = kept
                continue
            pending = runtime.cold_start.pending
            last = runtime.last_scale
            held = runtime.decider.snapshot()
            # Built from the controller's own values, not read: no validation (it was a third of a tick at 10,000), and
            # every field set, in one set for all (pydantic's own is 2 kB a record).
            records[key] = runtime.record = WorkloadRecord.model_construct(
                _fields_set=RECORD_FIELDS,
                workload=workload.key,
                target=f"{workload.target.kind}/{workload.target.name}",
                policy=workload.policy_type,
                updated_at=wall,
                min_replicas=workload.min_replicas,
                max_replicas=workload.max_replicas,
                current=current,
                ready=line.get("ready"),
                desired=line.get("desired"),
                recommended=line.get("recommended"),
                stabilized=line.get("stabilized"),
                reason=line.get("reason"),
                metrics=metrics,
                last_scale=None
                if last is None
                else LastScale(at=last[0], to=last[2], reason=last[3], **{"from": last[1]}),
                cold_starts=list(held.cold_starts),
                cold_start_seconds=runtime.decider.ctx.cold_start_seconds,
                pending_scale_up=None if pending is None else (pending[0] + to_wall, pending[1]),
                owners=line.get("owners", []),
                owner_current=line.get("owner_current"),
                owner_desired=line.get("owner_desired"),
                dry_run=bool(line.get("dry_run")),
                heading=line.get("heading"),
                agrees=line.get("agrees"),
                conditions=runtime.conditions,
                behavior=dump_behavior(held.behavior, to_wall, pairs),
                scaled_to_zero=held.zero.asleep,
            )
            runtime.shape = shape
            self._changed.append(key)
        return records

    def _persist(self, records: dict[str, WorkloadRecord]) -> None:
        assert self.store is not None
        try:
            self.store.save(records, self._changed)
        except Exception as exc:  # best effort: a failed write is retried at the next tick
            log.warning("state-unwritable", detail=str(exc)[:200])

    def _log(self, line: dict[str, Any], level: str = "info", event: str = "decision") -> dict[str, Any]:
        if self._line_writer is not None:  # JSON: NaN is written as null
            self._line_writer(level, event, line)
            return line
        fields = {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in line.items()}
        getattr(self._decisions, level)(event, **fields)
        return line

    # -- health --------------------------------------------------------------------------------------

    def healthy(self) -> tuple[bool, str]:
        """Alive while a tick completes at least every 3 intervals (plus 30 s), from the start on: a loop that
        never completes its first tick is as stuck as one that stopped."""
        if self.last_tick_at is None:
            waited = self.decision_clock() - self.started_at
            if waited > 3 * self.interval + 30:
                return False, f"no tick has completed in the {waited:.0f} s since start"
            return True, "starting"
        age = self.decision_clock() - self.last_tick_at
        if age > 3 * self.interval + 30:
            return False, f"the loop has not ticked for {age:.0f} s"
        return True, f"last tick {age:.0f} s ago"

    def ready(self) -> tuple[bool, str]:
        if self.last_tick_at is None:
            return False, "no tick yet"
        if not self.prometheus_ok:
            return False, "Prometheus gave no usable value at the last tick"
        return True, f"policy loaded ({len(self.runtime)} workloads), Prometheus reachable"


def _metric(spec: MetricSpec, value: float | None, current: int | None) -> dict[str, float | str | None]:
    """A metric as ``status`` shows it: the value, the target and its type, and for an ``AverageValue`` target the
    fleet total per current replica (``average``), as ``kubectl get hpa`` prints ``503/500 (avg)``."""
    shown: dict[str, float | str | None] = {"value": value, "target": spec.target.value, "type": str(spec.target.type)}
    if spec.target.type == TargetType.AVERAGE_VALUE and value is not None and current:
        shown["average"] = value / current
    return shown


def _shape(runtime: WorkloadRuntime, said: dict[str, Any]) -> tuple[Any, ...]:
    """What a workload's record is built from but its ``VOLATILE`` fields (the metrics' values, the time) and its
    behavior history's times: a record of the same shape as the last one is that one (``Controller._records``). The
    stabilization window is taken by the set of its recommendations' counts, as ``state.essential_json`` takes it; a
    scale event whole. Worked example: a steady workload adds a recommendation of 2 to a window of 2s each tick, the
    same shape."""
    decider = runtime.decider
    behavior = decider.behavior_state
    return (
        said,
        runtime.workload,
        runtime.conditions,
        runtime.last_scale,
        runtime.cold_start.pending,
        tuple(decider.cold_starts.samples),
        decider.ctx.cold_start_seconds,
        decider.zero.asleep,
        {r.replicas for r in behavior.recommendations},
        [(e.change, e.at, e.outdated) for e in behavior.scale_up_events],
        [(e.change, e.at, e.outdated) for e in behavior.scale_down_events],
    )


def dump_behavior(
    state: BehaviorState, to_wall: float, pairs: dict[tuple[int, float], list[float]] | None = None
) -> dict[str, list[list[float]]]:
    """The behavior history with its times on the wall clock (``to_wall`` added). ``pairs`` holds each recommendation's
    pair once for every record a tick builds (never changed once made: a record is built again, not edited): a tick's
    workloads recommend at one time, and 21 pairs of their own a workload were 22 MB at 10,000 workloads."""
    if pairs is None:
        pairs = {}
    recommendations = []
    for r in state.recommendations:
        pair = pairs.get(r)
        if pair is None:
            pair = pairs[r] = [r.replicas, r.at + to_wall]
        recommendations.append(pair)
    return {
        "recommendations": recommendations,
        "scale_up": [[e.change, e.at + to_wall, float(e.outdated)] for e in state.scale_up_events],
        "scale_down": [[e.change, e.at + to_wall, float(e.outdated)] for e in state.scale_down_events],
    }


def restore_behavior(state: BehaviorState, saved: dict[str, list[list[float]]], to_now: float) -> None:
    if not saved:
        return
    state.recommendations = [TimedRecommendation(int(r), at + to_now) for r, at in saved.get("recommendations", [])]
    state.scale_up_events = [ScaleEvent(int(c), at + to_now, bool(o)) for c, at, o in saved.get("scale_up", [])]
    state.scale_down_events = [ScaleEvent(int(c), at + to_now, bool(o)) for c, at, o in saved.get("scale_down", [])]
