"""Leader election on a ``coordination.k8s.io/v1`` Lease, with an injected clock.

As in client-go, another holder's lease counts as expired only when its record has not changed for
``lease_duration`` seconds on *this* process's clock, so clocks need not agree. A leader writes only while
its last successful renewal is younger than ``renew_deadline`` (shorter than ``lease_duration``): a leader
that cannot renew stops writing before any other replica can see the lease as expired and take it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from datetime import UTC, datetime

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from autoscaler.logs import get_logger

log = get_logger("autoscaler.leader")
RELEASE_TIMEOUT_S = 2.0  # each of the release's two calls: a shutdown is bounded (autoscaler.daemon.SHUTDOWN_S)


def _answer(exc: Exception) -> str:
    """What the API said, in a few words: its status and reason, or the connection's failure."""
    return f"{exc.status} {exc.reason}" if isinstance(exc, ApiException) else str(exc)[:200]


class LeaderElector:
    def __init__(
        self,
        api: client.ApiClient,
        namespace: str,
        name: str,
        identity: str,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
        on_transition: Callable[[str], None] = lambda event: None,
    ) -> None:
        """``on_transition`` hears ``acquired`` and ``lost`` as this process starts and stops leading (the
        daemon counts them in ``vllm_autoscaler_leader_transitions_total``)."""
        if not retry_period < renew_deadline < lease_duration:
            raise ValueError("leader election needs retry period < renew deadline < lease duration")
        self.leases = client.CoordinationV1Api(api)
        self.namespace, self.name, self.identity = namespace, name, identity
        self.lease_duration, self.renew_deadline, self.retry_period = lease_duration, renew_deadline, retry_period
        self.clock = clock
        self.observed: tuple[str | None, str | None, int | None] | None = None
        self.observed_at = 0.0
        self.renewed_at: float | None = None
        self.transitions = 0
        self.refused = ""  # why the last round did not lead: "held by X", or the API's answer
        self.on_transition = on_transition
        self._leading = False  # as last reported: a lead that lapsed between rounds is reported at the next

    def is_leader(self) -> bool:
        return self.authority_left() > 0

    def authority_left(self) -> float:
        """Seconds this process may still write: the renew deadline less the age of its last renewal."""
        if self.renewed_at is None:
            return 0.0
        return self.renew_deadline - (self.clock() - self.renewed_at)

    @property
    def holder(self) -> str | None:
        """The holder this process last saw on the Lease (itself while it leads)."""
        if self.is_leader():
            return self.identity
        return self.observed[0] if self.observed else None

    def _spec(
        self, acquire: datetime, transitions: int, holder: str | None = None, duration: int | None = None
    ) -> client.V1LeaseSpec:
        return client.V1LeaseSpec(
            holder_identity=self.identity if holder is None else holder,
            lease_duration_seconds=duration or math.ceil(self.lease_duration),
            acquire_time=acquire,
            renew_time=datetime.now(UTC),
            lease_transitions=transitions,
        )

    def try_acquire_or_renew(self) -> bool:
        """One round: create, renew or take over the lease. Returns whether this process leads now."""
        now = self.clock()
        was_leader = self.is_leader()
        if self._leading and not was_leader:  # no renewal within the deadline: a stall, or the API unreachable
            assert self.renewed_at is not None
            lapsed = f"not renewed for {now - self.renewed_at:.1f} s (renew deadline {self.renew_deadline:g} s)"
            self._report_lost(f"{lapsed}: {self.refused}" if self.refused else lapsed)
        try:
            lease = self.leases.read_namespaced_lease(self.name, self.namespace)
        except ApiException as exc:
            if exc.status != 404:
                return self._lost(was_leader, f"read failed: {_answer(exc)}")
            body = client.V1Lease(
                metadata=client.V1ObjectMeta(name=self.name, namespace=self.namespace),
                spec=self._spec(datetime.now(UTC), 0),
            )
            try:
                self.leases.create_namespaced_lease(self.namespace, body)
            except (ApiException, urllib3.exceptions.HTTPError, OSError) as create_exc:
                return self._lost(was_leader, f"create failed: {_answer(create_exc)}")
            return self._won(now, was_leader, 0)
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            return self._lost(was_leader, f"read failed: {_answer(exc)}")
        spec = lease.spec or client.V1LeaseSpec()
        record = (spec.holder_identity, str(spec.renew_time), spec.lease_transitions)
        if record != self.observed:
            self.observed, self.observed_at = record, now
        holder = spec.holder_identity
        duration = float(spec.lease_duration_seconds or self.lease_duration)
        if holder and holder != self.identity and now - self.observed_at < duration:
            return self._lost(was_leader, f"held by {holder}")
        transitions = int(spec.lease_transitions or 0) + (0 if holder == self.identity else 1)
        acquire = spec.acquire_time if holder == self.identity and spec.acquire_time else datetime.now(UTC)
        lease.spec = self._spec(acquire, transitions)
        try:
            self.leases.replace_namespaced_lease(self.name, self.namespace, lease)
        except (ApiException, urllib3.exceptions.HTTPError, OSError) as exc:
            return self._lost(was_leader, f"update failed: {_answer(exc)}")
        return self._won(now, was_leader, transitions)

    def _won(self, now: float, was_leader: bool, transitions: int) -> bool:
        self.renewed_at = now
        self.observed = None
        self.transitions = transitions
        self.refused = ""
        if not self._leading:
            self._leading = True
            log.info("leader-acquired", lease=f"{self.namespace}/{self.name}", identity=self.identity)
            self.on_transition("acquired")
        return True

    def _lost(self, was_leader: bool, why: str) -> bool:
        """A round that did not renew: the lead is lost once its authority runs out, now or at a later round."""
        self.refused = why
        if self._leading and not self.is_leader():
            self._report_lost(why)
        return self.is_leader()

    def _report_lost(self, why: str) -> None:
        self._leading = False
        log.warning("leader-lost", lease=f"{self.namespace}/{self.name}", identity=self.identity, detail=why)
        self.on_transition("lost")

    def release(self) -> None:
        """Give the lease up (on SIGTERM) so that another replica takes over at once."""
        if not self.is_leader():
            return
        self.renewed_at = None
        self._leading = False
        try:
            lease = self.leases.read_namespaced_lease(self.name, self.namespace, _request_timeout=RELEASE_TIMEOUT_S)
            if lease.spec is None or lease.spec.holder_identity != self.identity:
                return
            lease.spec = self._spec(datetime.now(UTC), int(lease.spec.lease_transitions or 0), holder="", duration=1)
            self.leases.replace_namespaced_lease(self.name, self.namespace, lease, _request_timeout=RELEASE_TIMEOUT_S)
            log.info("leader-released", lease=f"{self.namespace}/{self.name}", identity=self.identity)
        except (ApiException, urllib3.exceptions.HTTPError, OSError) as exc:
            log.warning("leader-release-failed", detail=str(exc)[:200])
