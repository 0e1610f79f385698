"""The Kubernetes actuator: the official client, the scale subresource, retries that respect the API."""

from __future__ import annotations

import copy
import functools
import hashlib
import json
import math
import os
import random
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import urllib3
import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from autoscaler.actuators.base import (
    CLAIMED_BY,
    ActuatorError,
    Owner,
    Ownership,
    ReadFailure,
    ScaleState,
    WriteResult,
    target_key,
)
from autoscaler.actuators.watch import ChangeWatch
from autoscaler.concurrency import each
from autoscaler.logs import get_logger
from policies.policy_file import TargetRef

log = get_logger("autoscaler.actuator")
MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
RETRIABLE = {429, 500, 502, 503, 504}
OWNER_CACHE_S = 60.0
READ_RETRY_S = 1.0  # a LIST's retries within a tick: a namespace's trouble is waited out across ticks, not in one
BACKOFF_S = 10.0  # a failed LIST is not sent again for this long, doubling with each failure in a row
BACKOFF_MAX_S = 300.0
# Namespaces listed at once: 100 namespaces one after another took most of a tick; a slow one holds one thread.
READ_CONCURRENCY = 8
CONNECTIONS = 20  # kept open to the API server: the controller's writes (16 at once) and reads, each its own
FRESH_OWNERS_S = 0.0  # the check just before a write lists again: an owner created since the tick's check is seen
WATCH_CONNECTIONS = 256  # the watches' pool: one connection each, a namespace and kind a watch
LIST_VERSION = re.compile(rb'"resourceVersion"\s*:\s*"([^"]*)"')  # the list's, before its items
EVENT_AGGREGATE_S = 600.0  # client-go's aggregation window
EVENT_BURST, EVENT_REFILL_S = 25, 300.0  # client-go's spam filter: 25 at once, then one per 5 minutes


def api_client(kubeconfig: str | None = None, timeout: float = 10.0) -> client.ApiClient:
    """In-cluster configuration when running in a Pod, else a kubeconfig (``kubeconfig`` or the default)."""
    configuration = client.Configuration()
    try:
        if kubeconfig is None:
            config.load_incluster_config(client_configuration=configuration)
        else:
            raise config.ConfigException("kubeconfig given")
    except config.ConfigException:
        try:
            config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
        except (yaml.YAMLError, TypeError, AttributeError, KeyError, ValueError) as exc:
            # The client parses a file that is not a kubeconfig into any of these; say which file it was.
            where = kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
            first = (str(exc).splitlines() or [""])[0]
            raise config.ConfigException(f"{where} is not a kubeconfig ({type(exc).__name__}: {first})") from exc
    configuration.retries = False
    configuration.connection_pool_maxsize = CONNECTIONS  # the tick's reads and writes run in threads
    api = client.ApiClient(configuration)
    api.rest_client.pool_manager.connection_pool_kw["timeout"] = urllib3.Timeout(total=timeout)
    return api


class KubernetesActuator:
    dry_run = False

    def __init__(
        self,
        api: client.ApiClient,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        max_attempts: int = 5,
        request_timeout: float = 10.0,
        authority: Callable[[], float] | None = None,
        stopping: threading.Event | None = None,
        watch: bool = False,
    ) -> None:
        """``authority`` says how many seconds this process may still write (the Lease's renew deadline
        less the age of its last renewal; None: no leader election); ``stopping`` ends every retry at once
        (SIGTERM); ``watch``: a namespace's targets are listed again only when a watch saw them change
        (``autoscaler.actuators.watch``), each watch a thread and a connection of its own."""
        self.apps = client.AppsV1Api(api)
        self._watch_apps = client.AppsV1Api(_streaming_client(api)) if watch else None
        self._watches: dict[tuple[str, str], ChangeWatch] = {}
        self.lists = 0  # LISTs answered
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.sleep = sleep
        self.clock = clock
        self.max_attempts = max_attempts
        self.timeout = request_timeout
        self._owners: dict[str, tuple[float, list[tuple[Owner, dict[str, Any]]]]] = {}
        self.authority = authority
        self.stopping = stopping or threading.Event()
        self._events: dict[tuple[str, ...], _Recorded] = {}
        self._events_lock = threading.Lock()  # scale writes, and so their Events, run in several threads
        # (kind, namespace): what _list read, and the LIST's resourceVersion
        self._listed: dict[tuple[str, str], tuple[bytes, dict[str, ScaleState], str]] = {}
        self._failing: dict[tuple[str, str], tuple[float, int, Exception]] = {}  # (list, namespace): until, count, why

    def _read(self, what: str, namespace: str, fn: Callable[[], Any]) -> Any:
        """A LIST that isolates its namespace: retried within ``READ_RETRY_S`` only (a ``Retry-After`` longer than that
        ends it at once), and a failure is remembered for its ``Retry-After``, else a backoff from ``BACKOFF_S``
        doubling to ``BACKOFF_MAX_S``, during which the same LIST fails at once without a request. So a throttled
        or broken namespace costs a tick one quick request at most, and the healthy ones decide on every interval."""
        key = (what, namespace)
        now = self.clock()
        failing = self._failing.get(key)
        if failing is not None and now < failing[0]:
            raise failing[2]
        try:
            answer = self._call(what, fn, budget=READ_RETRY_S)
        except (ApiException, urllib3.exceptions.HTTPError, OSError, ValueError) as exc:
            if isinstance(exc, ApiException) and exc.status == 404:
                raise  # an answer (a kind not served), not trouble
            count = 1 if failing is None else failing[1] + 1
            wait = (_retry_after(exc) if isinstance(exc, ApiException) else None) or min(
                BACKOFF_S * 2 ** (count - 1), BACKOFF_MAX_S
            )
            self._failing[key] = (self.clock() + wait, count, exc)
            log.info("list-backing-off", call=what, namespace=namespace, seconds=round(wait, 1), failures=count)
            raise
        self._failing.pop(key, None)
        return answer

    def authority_left(self) -> float:
        return math.inf if self.authority is None else self.authority()

    def _call(self, what: str, fn: Callable[[], Any], write: bool = False, budget: float = math.inf) -> Any:
        """Call the API, backing off on 429 and 5xx (respecting ``Retry-After``) and on dropped connections.

        A write is fenced by the Lease: each attempt first checks that this process may still write, and no
        retry is waited for that would end past the renew deadline, so a deposed leader's write never lands
        after another replica could have taken over (client-go's leader election makes the same promise). No
        wait is begun that would end past ``budget`` seconds from the first attempt.
        """
        delay = 0.2
        started = self.clock()
        for attempt in range(1, self.max_attempts + 1):
            if write and self.authority_left() <= 0:
                raise Fenced("this process does not hold the Lease (or has not renewed it within its deadline)")
            try:
                return fn()
            except ApiException as exc:
                if exc.status not in RETRIABLE or attempt == self.max_attempts:
                    raise
                wait = _retry_after(exc) or delay
                last: Exception = exc
            except (urllib3.exceptions.HTTPError, ConnectionError, OSError) as exc:
                if attempt == self.max_attempts:
                    raise
                wait = delay
                last = exc
            wait = min(wait, 5.0) * (1 + 0.1 * random.random())
            if self.stopping.is_set() or (write and wait >= self.authority_left()):
                raise last
            if self.clock() - started + wait > budget:
                raise last
            log.info("api-retry", call=what, attempt=attempt, wait_s=round(wait, 3))
            if self.sleep is time.sleep:
                if self.stopping.wait(wait):
                    raise last
            else:
                self.sleep(wait)
            delay = min(delay * 2, 5.0)
        raise AssertionError("unreachable")

    def read(self, target: TargetRef) -> ScaleState:
        """One target's state, from the same LIST as :meth:`read_many`; raises :class:`ActuatorError`."""
        state = self.read_many([target])[target_key(target)]
        if isinstance(state, ActuatorError):
            raise state
        return state

    def read_many(self, targets: list[TargetRef]) -> dict[tuple[str, str, str], ScaleState | ActuatorError]:
        """One LIST per namespace and kind, parsed as plain JSON (the client's models cost a millisecond or
        more per object). A LIST that fails after its retries fails every target it would have read: the
        tick holds them, and never fans out into one request per workload against a throttled server."""
        groups: dict[tuple[str, str], list[TargetRef]] = {}
        for target in targets:
            groups.setdefault((target.kind, target.namespace), []).append(target)
        states: dict[tuple[str, str, str], ScaleState | ActuatorError] = {}
        answers = each(self._list_group, groups, READ_CONCURRENCY, "list")
        for members, listed in zip(groups.values(), answers, strict=True):
            if isinstance(listed, ActuatorError):
                states.update((target_key(t), listed) for t in members)
                continue
            for target in members:
                if target.name in listed:
                    states[target_key(target)] = listed[target.name]
                else:
                    states[target_key(target)] = ActuatorError(ReadFailure.NOT_FOUND, "the target does not exist")
        return states

    def _list_group(self, group: tuple[str, str]) -> dict[str, ScaleState] | ActuatorError:
        """One namespace's targets of one kind, or why they could not be listed (for every target of it): the last
        LIST's while its watch says nothing changed since, else a LIST."""
        kind, namespace = group
        watch = self._watch(group)
        if watch is not None and watch.current() and group in self._listed:
            return self._listed[group][1]
        generation = 0 if watch is None else watch.generation
        try:
            listed: dict[str, ScaleState] = self._read(f"list-{kind}", namespace, lambda: self._list(kind, namespace))
            if watch is not None:
                watch.listed(self._listed[group][2], generation)
            return listed
        except ApiException as exc:
            failure = _failure(exc, listing=True)
        except (urllib3.exceptions.HTTPError, OSError, ValueError) as exc:
            failure = ActuatorError(ReadFailure.UNAVAILABLE, _short(exc))
        log.info("list-failed", namespace=namespace, kind=kind, detail=failure.detail)
        return failure

    def _list(self, kind: str, namespace: str) -> dict[str, ScaleState]:
        lister = _by_kind(self.apps, "list", kind)
        response: Any = lister(namespace, _preload_content=False, _request_timeout=self.timeout)
        data: bytes = response.data
        self.lists += 1
        # The items as the server wrote them, after the list's own resourceVersion (which any write anywhere moves):
        # a namespace whose targets did not change since the last tick is not parsed again. Parsing is 40 us a
        # Deployment: 0.4 s of every tick at 10,000, where a steady fleet changes none.
        items_at = data.find(b'"items"')
        digest = hashlib.blake2b(data[items_at:], digest_size=16).digest()
        found = LIST_VERSION.search(data, 0, max(items_at, 0))
        version = found.group(1).decode() if found else ""
        last = self._listed.get((kind, namespace))
        if last is not None and last[0] == digest:
            self._listed[(kind, namespace)] = (digest, last[1], version)
            return last[1]
        items = json.loads(data).get("items", [])
        states = {}
        for item in items:
            meta, spec, status = item.get("metadata", {}), item.get("spec", {}), item.get("status") or {}
            states[meta["name"]] = ScaleState(
                replicas=int(spec.get("replicas", 1)),
                ready=int(status.get("readyReplicas") or 0),
                resource_version=str(meta.get("resourceVersion", "")),
                annotations=dict(meta.get("annotations") or {}),
            )
        self._listed[(kind, namespace)] = (digest, states, version)
        return states

    def watching(self) -> tuple[int, int]:
        """How many of the namespaces' watches say their last LIST is current, of how many."""
        watches = list(self._watches.values())
        return sum(1 for w in watches if w.holds), len(watches)

    def _watch(self, group: tuple[str, str]) -> ChangeWatch | None:
        """The group's watch, made at its first use; None without watches."""
        if self._watch_apps is None:
            return None
        watch = self._watches.get(group)
        if watch is None:
            kind, namespace = group
            opener = functools.partial(self._open_watch, kind, namespace)
            watch = ChangeWatch(f"{kind}/{namespace}", opener, self.stopping, self.stopping.wait)
            watch = self._watches.setdefault(group, watch)
        return watch

    def _open_watch(self, kind: str, namespace: str, version: str, timeout: float, silence: float) -> Iterator[bytes]:
        """A WATCH of ``kind`` in ``namespace`` from ``version`` with bookmarks, as its answer's lines."""
        assert self._watch_apps is not None
        response: Any = _by_kind(self._watch_apps, "list", kind)(
            namespace,
            watch=True,
            resource_version=version,
            allow_watch_bookmarks=True,
            timeout_seconds=int(timeout),
            _preload_content=False,
            _request_timeout=(self.timeout, silence),
        )
        return _lines(response)

    def _patch_scale(self, target: TargetRef, body: dict[str, Any]) -> Any:
        patch = _by_kind(self.apps, "patch", target.kind, "_scale")
        return patch(target.name, target.namespace, body, _content_type=MERGE_PATCH, _request_timeout=self.timeout)

    def _read_scale(self, target: TargetRef) -> Any:
        read = _by_kind(self.apps, "read", target.kind, "_scale")
        return read(target.name, target.namespace, _request_timeout=self.timeout)

    def scale(self, target: TargetRef, state: ScaleState, replicas: int) -> WriteResult:
        """A merge patch of the scale subresource carrying the ``resourceVersion`` read this tick.

        On 409 the scale is read afresh: if its count is still the one this decision started from, the
        write is retried on the new version; if someone changed the count meanwhile, the write is dropped
        and the next tick decides again from the new count.
        """
        version, attempts = state.resource_version, 0
        for _ in range(self.max_attempts):
            attempts += 1
            body = {"metadata": {"resourceVersion": version}, "spec": {"replicas": replicas}}
            try:
                self._call("scale", lambda b=body: self._patch_scale(target, b), write=True)  # type: ignore[misc]
                return WriteResult(True, "applied", attempts=attempts)
            except Fenced as exc:
                return WriteResult(False, "not-leader", str(exc), attempts)
            except ApiException as exc:
                if exc.status != 409:
                    return _write_failure(exc, attempts)
                log.info("scale-conflict", workload=f"{target.namespace}/{target.name}", attempt=attempts)
            except (urllib3.exceptions.HTTPError, OSError) as exc:
                return WriteResult(False, "unavailable", str(exc)[:300], attempts)
            try:
                fresh = self._call("read-scale", lambda: self._read_scale(target))
            except ApiException as exc:
                return _write_failure(exc, attempts)
            except (urllib3.exceptions.HTTPError, OSError) as exc:
                return WriteResult(False, "unavailable", str(exc)[:300], attempts)
            if int(fresh.spec.replicas or 0) != state.replicas:
                return WriteResult(
                    False,
                    "changed-concurrently",
                    f"spec.replicas changed from {state.replicas} to {fresh.spec.replicas}",
                    attempts,
                )
            version = str(fresh.metadata.resource_version)
        return WriteResult(False, "conflict", f"still conflicting after {attempts} attempts", attempts)

    def _patch_object(self, target: TargetRef, body: Any, content_type: str) -> Any:
        patch = _by_kind(self.apps, "patch", target.kind)
        return patch(
            target.name,
            target.namespace,
            body,
            _content_type=content_type,
            _request_timeout=self.timeout,
            _preload_content=False,
        )

    def claim(self, target: TargetRef, state: ScaleState, claimant: str) -> WriteResult:
        """A merge patch of the claim annotation on the version read: atomic, since a 409 means someone
        (perhaps another install) changed the object since, and the next tick reads it again. Fenced by the
        Lease like every write. The shipped admission policy lets the controller change nothing else."""
        body = {"metadata": {"resourceVersion": state.resource_version, "annotations": {CLAIMED_BY: claimant}}}
        try:
            answer = self._call("claim", lambda: self._patch_object(target, body, MERGE_PATCH), write=True)
        except Fenced as exc:
            return WriteResult(False, "not-leader", str(exc), 1)
        except ApiException as exc:
            return WriteResult(
                False, "conflict" if exc.status == 409 else _write_failure(exc, 1).outcome, _short(exc), 1
            )
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            return WriteResult(False, "unavailable", str(exc)[:300], 1)
        version = str(json.loads(answer.data).get("metadata", {}).get("resourceVersion", ""))
        return WriteResult(True, "claimed", attempts=1, resource_version=version)

    def release(self, target: TargetRef, claimant: str) -> WriteResult:
        """A JSON patch that tests the claim is ``claimant``'s and removes it, in one atomic request."""
        path = "/metadata/annotations/" + CLAIMED_BY.replace("~", "~0").replace("/", "~1")
        body = [{"op": "test", "path": path, "value": claimant}, {"op": "remove", "path": path}]
        try:
            self._call("release", lambda: self._patch_object(target, body, JSON_PATCH), write=True)
        except Fenced as exc:
            return WriteResult(False, "not-leader", str(exc), 1)
        except ApiException as exc:  # 422: the test failed (not ours any more), 404: the target is gone
            return WriteResult(
                False, _write_failure(exc, 1).outcome if exc.status != 422 else "not-ours", _short(exc), 1
            )
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            return WriteResult(False, "unavailable", str(exc)[:300], 1)
        return WriteResult(True, "released", attempts=1)

    def owners(self, target: TargetRef, fresh: bool = False) -> Ownership:
        owners, unknown = self._namespace_autoscalers(target.namespace, FRESH_OWNERS_S if fresh else OWNER_CACHE_S)
        found = tuple(
            owner
            for owner, ref in owners
            if ref.get("name") == target.name and (ref.get("kind") or "Deployment") == target.kind
        )
        return Ownership(found, unknown)

    def _namespace_autoscalers(
        self, namespace: str, max_age_s: float
    ) -> tuple[list[tuple[Owner, dict[str, Any]]], tuple[str, ...]]:
        """Every autoscaler in ``namespace`` with the ref it targets, and why a list failed. A complete answer
        is used for up to ``max_age_s``; a failed one never stands for "no owners": it is remembered as a failure
        for its backoff (``_read``) and asked again after it. A custom
        resource whose API is not served (404) is "not installed", not a failure."""
        cached = self._owners.get(namespace)
        now = self.clock()
        if cached is not None and now - cached[0] < max_age_s:
            return cached[1], ()
        owners: list[tuple[Owner, dict[str, Any]]] = []
        unknown: list[str] = []
        for lister in OWNER_LISTS:
            try:
                items = self._read(
                    f"list-{lister.resource}",
                    namespace,
                    lambda lister=lister: self._list_owners(lister, namespace),  # type: ignore[misc]
                )
            except ApiException as exc:
                if exc.status == 404 and lister.group != "autoscaling":
                    continue
                unknown.append(lister.failed(namespace, exc))
                continue
            except (urllib3.exceptions.HTTPError, OSError, ValueError) as exc:
                unknown.append(lister.failed(namespace, exc))
                continue
            owners += [lister.owner(item) for item in items]
        if unknown:
            log.warning("owner-check-failed", namespace=namespace, detail=unknown)
        else:
            self._owners[namespace] = (now, owners)
        return owners, tuple(unknown)

    def _list_owners(self, lister: OwnerList, namespace: str) -> list[dict[str, Any]]:
        """The generic path works for the built-in group too, and answers plain dicts for all three."""
        listed: Any = self.custom.list_namespaced_custom_object(
            lister.group, lister.version, namespace, lister.resource, _request_timeout=self.timeout
        )
        return list(listed.get("items", []))

    def event(self, target: TargetRef, kind: str, reason: str, message: str) -> None:
        """Record an Event, aggregated as client-go's EventCorrelator does: an identical Event (same object,
        type, reason and message) within ``EVENT_AGGREGATE_S`` raises ``count`` and ``lastTimestamp`` on the
        one already recorded instead of adding another; each gets a token bucket (``EVENT_BURST`` at once,
        then one per ``EVENT_REFILL_S``), and what the bucket holds back is counted into the next update."""
        if self.authority_left() <= 0:  # the one fence every write passes: scales, claims, Events, the state
            log.debug("event-fenced", reason=reason)
            return
        key = (target.kind, target.namespace, target.name, kind, reason, message)
        now, stamp = self.clock(), datetime.now(UTC)
        aggregate: tuple[str, int] | None = None  # the Event already recorded, and its count now
        with self._events_lock:
            seen = self._events.get(key)
            if seen is not None and now - seen.last_seen < EVENT_AGGREGATE_S:
                seen.last_seen, seen.count = now, seen.count + 1
                if not seen.take(now):
                    return
                aggregate = (seen.name, seen.count)
        if aggregate is not None:
            body: Any = {"count": aggregate[1], "lastTimestamp": stamp.isoformat().replace("+00:00", "Z")}
            try:
                self.core.patch_namespaced_event(aggregate[0], target.namespace, body, _request_timeout=self.timeout)
                return
            except (ApiException, urllib3.exceptions.HTTPError, OSError) as exc:
                log.debug("event-failed", reason=reason, detail=_short(exc))
                if not (isinstance(exc, ApiException) and exc.status == 404):
                    return  # the Event was deleted (or expired): record a new one
        name = f"{target.name}.{uuid.uuid4().hex[:16]}"
        event = client.CoreV1Event(
            metadata=client.V1ObjectMeta(name=name, namespace=target.namespace),
            involved_object=client.V1ObjectReference(
                api_version=target.api_version, kind=target.kind, name=target.name, namespace=target.namespace
            ),
            reason=reason,
            message=message,
            type=kind,
            count=1,
            first_timestamp=stamp,
            last_timestamp=stamp,
            source=client.V1EventSource(component="vllm-autoscaler"),
            reporting_component="vllm-autoscaler",
        )
        try:
            self.core.create_namespaced_event(target.namespace, event, _request_timeout=self.timeout)
        except (ApiException, urllib3.exceptions.HTTPError, OSError) as exc:
            log.debug("event-failed", reason=reason, detail=_short(exc))
            return
        with self._events_lock:
            self._events[key] = _Recorded(name, now, now, float(EVENT_BURST - 1))
            if len(self._events) > 4096:  # forget the oldest
                oldest = min(self._events, key=lambda k: self._events[k].last_seen)
                del self._events[oldest]


def _streaming_client(api: client.ApiClient) -> client.ApiClient:
    """A client like ``api`` whose connections are the watches' own: a watch holds its connection for minutes, and
    the tick's reads and writes keep theirs (``CONNECTIONS``)."""
    configuration = copy.copy(api.configuration)
    configuration.connection_pool_maxsize = WATCH_CONNECTIONS
    return client.ApiClient(configuration)


def _lines(response: Any) -> Iterator[bytes]:
    """A streamed answer's non-empty lines (urllib3 yields a chunk's lines as they arrive); its connection is
    closed at the end, since one left mid-stream cannot be reused."""
    try:
        for line in response:
            if line.strip():
                yield line
    finally:
        response.close()


@dataclass
class _Recorded:
    """An Event already recorded, for aggregation: its name, when it was last seen, and its token bucket."""

    name: str
    last_seen: float
    refilled_at: float
    tokens: float
    count: int = 1

    def take(self, now: float) -> bool:
        self.tokens = min(float(EVENT_BURST), self.tokens + (now - self.refilled_at) / EVENT_REFILL_S)
        self.refilled_at = now
        if self.tokens < 1:
            return False
        self.tokens -= 1
        return True


@dataclass(frozen=True)
class OwnerList:
    """One kind of autoscaler the owner check lists: where, and how its items name their target."""

    group: str
    version: str
    resource: str
    kind: str

    def owner(self, item: dict[str, Any]) -> tuple[Owner, dict[str, Any]]:
        spec, status = item.get("spec") or {}, item.get("status") or {}
        current, desired = status.get("currentReplicas"), status.get("desiredReplicas")
        owner = Owner(
            f"{self.kind} {item['metadata']['name']}",
            None if current is None else int(current),
            None if desired is None else int(desired),
        )
        return owner, dict(spec.get("scaleTargetRef") or {})

    def failed(self, namespace: str, exc: Exception) -> str:
        why = _short(exc)
        rule = f"`list` on {self.resource} in apiGroup {self.group}"
        hint = (
            f"; the controller's role needs {rule}"
            if isinstance(exc, ApiException) and exc.status in (401, 403)
            else ""
        )
        return f"listing {self.resource}.{self.group} in {namespace} failed: {why}{hint}"


OWNER_LISTS = (
    OwnerList("autoscaling", "v2", "horizontalpodautoscalers", "HorizontalPodAutoscaler"),
    OwnerList("keda.sh", "v1alpha1", "scaledobjects", "ScaledObject"),
    OwnerList("autoscaling.aibrix.ai", "v1alpha1", "podautoscalers", "PodAutoscaler"),
)


class Fenced(Exception):
    """A write not sent: this process may not write now (see ``KubernetesActuator._call``)."""


def _retry_after(exc: ApiException) -> float | None:
    headers = exc.headers or {}
    value = headers.get("Retry-After") if hasattr(headers, "get") else None
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


RESOURCES = {"Deployment": "deployment", "StatefulSet": "stateful_set"}  # a target kind's name in AppsV1Api's methods


def _by_kind(apps: Any, verb: str, kind: str, subresource: str = "") -> Any:
    """AppsV1Api's ``{verb}_namespaced_{resource}{subresource}`` for a target ``kind``: ``list``, ``read`` and
    ``patch`` of a Deployment or a StatefulSet, ``_scale`` for the scale subresource."""
    return getattr(apps, f"{verb}_namespaced_{RESOURCES[kind]}{subresource}")


def _short(exc: Exception) -> str:
    if isinstance(exc, ApiException):
        return f"{exc.status} {exc.reason}"
    return str(exc)[:200]


def _failure(exc: ApiException, listing: bool = False) -> ActuatorError:
    if exc.status == 404 and not listing:
        return ActuatorError(ReadFailure.NOT_FOUND, "the target does not exist")
    if exc.status in (401, 403):
        return ActuatorError(ReadFailure.FORBIDDEN, _short(exc))
    return ActuatorError(ReadFailure.UNAVAILABLE, _short(exc))


def _write_failure(exc: ApiException, attempts: int) -> WriteResult:
    outcome = {404: "not-found", 403: "forbidden", 401: "forbidden"}.get(exc.status or 0, "unavailable")
    return WriteResult(False, outcome, _short(exc), attempts)
