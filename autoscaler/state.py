"""The controller's per-workload state, kept in the cluster so a restart or a failover loses nothing.

ConfigMaps in the controller's own namespace, one key per workload holding a JSON record: what ``status`` shows
(counts, metrics against targets, the last scale and why, owners) and what a successor needs to carry on (the
measured cold starts, a scale-up still on its way, the behavior history that the stabilization windows and rate
limits read). Only the leader writes it, never in dry-run; a new leader reads it before its first decision. Times
are stored as wall-clock seconds and converted to and from the decision clock (monotonic, per process) on the way.

A fleet whose records fit in one ConfigMap (a few hundred workloads) has one, ``vllm-autoscaler-state``. A larger
one is sharded over ``vllm-autoscaler-state`` and ``vllm-autoscaler-state-1`` to ``-31`` by a hash of the record's
key, so that each stays under Kubernetes' 1 MiB object limit; the first names how many in its ``layout.json`` key,
and only a shard whose records changed is written. Worked example: 10,000 workloads of about 540 bytes each take 16
shards; one workload scaling rewrites one of them (tests/test_state.py).

With plain kubectl: ``kubectl -n vllm-autoscaler get configmap vllm-autoscaler-state -o yaml``.
"""

from __future__ import annotations

import hashlib
import json
import math
import zlib
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from autoscaler.conditions import Condition
from autoscaler.logs import get_logger

log = get_logger("autoscaler.state")
STATE_CONFIGMAP = "vllm-autoscaler-state"
MAX_BYTES = 900_000  # under the API's 1 MiB object limit, with room for metadata
SHARD_BYTES = 600_000  # what a shard is sized for: records grow between layouts (a behavior history fills)
MOST_SHARDS = 32  # the ConfigMaps the RBAC names: vllm-autoscaler-state, and -1 to -31
LAYOUT_KEY = "layout.json"  # in the first ConfigMap: {"shards": N}
VOLATILE = {"updated_at", "metrics"}
"""What changes on every tick without changing the state: written with the rest, but not a reason to write."""
HEARTBEAT_S = 300.0  # at most this long between writes while only the volatile fields change: status stays fresh


class LastScale(BaseModel):
    at: float
    from_replicas: int = Field(alias="from")
    to: int
    reason: str

    model_config = ConfigDict(populate_by_name=True)


class WorkloadRecord(BaseModel):
    """One workload's state as written by the leader (an external input when read back: validated)."""

    model_config = ConfigDict(extra="ignore")

    workload: str
    target: str
    policy: str
    updated_at: float
    min_replicas: int | None = None
    max_replicas: int | None = None
    current: int | None = None
    ready: int | None = None
    desired: int | None = None
    recommended: int | None = None  # the policy's proposal, before the behavior
    stabilized: int | None = None  # after the stabilization windows, before the rate limits
    reason: str | None = None
    metrics: dict[str, dict[str, float | str | None]] = Field(default_factory=dict)
    last_scale: LastScale | None = None
    cold_starts: list[float] = Field(default_factory=list)
    cold_start_seconds: float | None = None
    pending_scale_up: tuple[float, int] | None = None  # (wall time written, count)
    owners: list[str] = Field(default_factory=list)
    owner_current: int | None = None
    owner_desired: int | None = None
    dry_run: bool = False  # decided beside the owner and wrote nothing: ``heading`` and ``agrees`` compare
    heading: int | None = None
    agrees: bool | None = None
    conditions: list[Condition] = Field(default_factory=list)
    behavior: dict[str, list[list[float]]] = Field(default_factory=dict)  # wall-clock times
    scaled_to_zero: bool = False  # the target's zero is this controller's own: the only zero it wakes


RECORD_FIELDS = set(WorkloadRecord.model_fields)  # a record the controller builds has every one


def record_key(workload_key: str, kind: str) -> str:
    """A ConfigMap data key (``[-._a-zA-Z0-9]+``): object names never hold ``_``, so it separates."""
    namespace, name = workload_key.split("/", 1)
    return f"{kind.lower()}_{namespace}_{name}.json"


class StateStore(Protocol):
    def load(self) -> dict[str, WorkloadRecord]: ...

    def save(self, records: dict[str, WorkloadRecord], changed: Iterable[str] | None = None) -> None: ...

    def heartbeat_due(self, stamp: float) -> bool: ...


def _digest(text: str) -> bytes:
    return hashlib.blake2b(text.encode(), digest_size=16).digest()


def _data_digest(data: dict[str, str]) -> bytes:
    """A shard's data, as what it was last read or written as: 16 bytes where its text is up to 600 KB."""
    return _digest(json.dumps(data, sort_keys=True))


def essential_json(record: WorkloadRecord) -> str:
    """What makes a record's state change: everything but the ``VOLATILE`` fields, and of its behavior history the
    scale events whole but the stabilization window's recommendations by their values only. A steady fleet adds a
    recommendation of the same count every tick; the window's times are written with the heartbeat, so a successor
    reads them up to ``HEARTBEAT_S`` old (the HPA keeps them in memory only, and forgets them on a restart)."""
    shape = {
        part: sorted({entry[0] for entry in entries}) if part == "recommendations" else entries
        for part, entries in record.behavior.items()
    }
    fields = record.model_dump_json(by_alias=True, exclude_none=True, exclude=VOLATILE | {"behavior"})
    return fields + json.dumps(shape, sort_keys=True)


def shard_name(base: str, shard: int) -> str:
    return base if shard == 0 else f"{base}-{shard}"


def shard_of(key: str, shards: int) -> int:
    """The shard a record key lives in: a hash of the key, the same in every process."""
    return zlib.crc32(key.encode()) % shards


def shards_for(essential_bytes: int, at_least: int = 1) -> int:
    """The shards that hold records whose essential fields take ``essential_bytes`` (the whole records take about
    twice that), in ``SHARD_BYTES`` each: a power of two, never fewer than ``at_least`` (a layout only grows
    while a process runs, so records do not move back and forth), at most ``MOST_SHARDS``."""
    needed = max(1, math.ceil(2 * essential_bytes / SHARD_BYTES))
    return min(MOST_SHARDS, max(at_least, 1 << (needed - 1).bit_length()))


class ConfigMapStateStore:
    """The records in one ConfigMap or a few (the module's docstring): each read with GET, written with a create or
    a replace on the version read, only when its records changed."""

    def __init__(
        self,
        api: client.ApiClient,
        namespace: str,
        name: str = STATE_CONFIGMAP,
        timeout: float = 10,
        authority: Callable[[], float] | None = None,
    ) -> None:
        """``authority`` is the Lease's fence that scale writes and Events pass too (``LeaderElector.authority_left``):
        the records are written only while it is positive."""
        self.core = client.CoreV1Api(api)
        self.namespace, self.name, self.timeout = namespace, name, timeout
        self.authority = authority
        self.shards = 1
        # What was last written, less its VOLATILE fields, by record key: its length and digest (a kilobyte a record,
        # where the text was 10 MB at 10,000 workloads).
        self.essential: dict[str, tuple[int, bytes]] = {}
        self.given: dict[str, tuple[int, bytes]] = {}  # the same of the records last given to ``save``, written or not
        self.written_at = 0.0  # the records' updated_at when last written
        self.versions: dict[int, str | None] = {}  # each shard's resourceVersion; None: not created yet
        self.written: dict[int, bytes] = {}  # each shard's data as last read or written (_data_digest)
        self.writes = 0  # ConfigMap writes made, for the bench's ``state_writes_idle_tick``

    def load(self) -> dict[str, WorkloadRecord]:
        data = self._read(0)
        layout = data.pop(LAYOUT_KEY, None)
        try:
            shards = int(json.loads(layout)["shards"]) if layout else 1
        except (ValueError, KeyError, TypeError):
            log.warning("state-layout-unreadable", detail=str(layout)[:200])
            shards = 1
        self.shards = min(max(shards, 1), MOST_SHARDS)
        for shard in range(1, self.shards):
            data.update(self._read(shard))
        self.essential = {}
        return parse_records(data)

    def _read(self, shard: int) -> dict[str, str]:
        try:
            configmap: Any = self.core.read_namespaced_config_map(
                shard_name(self.name, shard), self.namespace, _request_timeout=self.timeout
            )
        except ApiException as exc:
            if exc.status == 404:
                self.versions[shard], self.written[shard] = None, _data_digest({})
                return {}
            raise
        self.versions[shard] = configmap.metadata.resource_version
        data = dict(configmap.data or {})
        self.written[shard] = _data_digest(data)
        return data

    def heartbeat_due(self, stamp: float) -> bool:
        """Whether records stamped ``stamp`` are written whatever changed (``HEARTBEAT_S`` since the last write)."""
        return stamp - self.written_at >= HEARTBEAT_S

    def save(self, records: dict[str, WorkloadRecord], changed: Iterable[str] | None = None) -> None:
        """Write the shards whose records' state changed (anything but the ``VOLATILE`` fields), and every one every
        ``HEARTBEAT_S`` while only those did: a fleet that holds steady costs etcd no write a tick. A 409 or 404
        (another writer, or a deletion) re-reads the ConfigMaps; the next tick writes again.

        ``changed``: the keys of the records that may have changed since the last save; the others are taken as
        they were then, their essential fields not serialized again (a third of a tick at 10,000). None: any."""
        given: dict[str, tuple[int, bytes]] = {} if changed is None else self.given
        for key in records if changed is None else {*changed} | (records.keys() - given.keys()):
            text = essential_json(records[key])
            given[key] = (len(text), _digest(text))
        if len(given) != len(records):  # a workload gone
            given = {key: given[key] for key in records}
        self.given = essential = given
        stamp = max((r.updated_at for r in records.values()), default=0.0)
        heartbeat = self.heartbeat_due(stamp)
        if essential == self.essential and not heartbeat:
            return  # the usual tick: one serialization of the state, none of the whole records
        shards = shards_for(sum(size for size, _ in essential.values()), self.shards)
        moved = shards != self.shards
        keys: list[list[str]] = [[] for _ in range(shards)]
        for key in records:
            keys[shard_of(key, shards)].append(key)
        before = [0] * shards  # each shard's records as last written: one that lost a record has changed
        for key in self.essential:
            before[shard_of(key, shards)] += 1
        for shard, held in enumerate(keys):
            same = len(held) == before[shard] and all(essential[k] == self.essential.get(k) for k in held)
            if same and not heartbeat and not moved:
                continue
            if not self._write(shard, shards, {k: records[k] for k in held}):
                return
        if moved:
            log.info("state-resharded", shards=shards, previously=self.shards)
        self.shards, self.essential, self.written_at = shards, dict(essential), stamp

    def _write(self, shard: int, shards: int, records: dict[str, WorkloadRecord]) -> bool:
        """One shard's records written if they differ from what it holds; False when the write was fenced or lost a
        race (the ConfigMaps are re-read, and the next tick writes again)."""
        data = {key: record.model_dump_json(by_alias=True, exclude_none=True) for key, record in records.items()}
        if sum(len(v) for v in data.values()) > MAX_BYTES:  # a shard too full: keep the rest, drop the history
            data = {
                key: record.model_copy(update={"behavior": {}}).model_dump_json(by_alias=True, exclude_none=True)
                for key, record in records.items()
            }
        if shard == 0 and shards > 1:
            data[LAYOUT_KEY] = json.dumps({"shards": shards})
        digest = _data_digest(data)
        if digest == self.written.get(shard):
            return True
        if self.authority is not None and self.authority() <= 0:
            log.info("state-fenced", detail="this process does not hold the Lease (or has not renewed it in time)")
            return False
        name = shard_name(self.name, shard)
        body: Any = {"metadata": {"name": name, "namespace": self.namespace}, "data": data}
        try:
            if self.versions.get(shard) is None:
                answer: Any = self.core.create_namespaced_config_map(
                    self.namespace, body, _request_timeout=self.timeout
                )
            else:
                body["metadata"]["resourceVersion"] = self.versions[shard]
                answer = self.core.replace_namespaced_config_map(
                    name, self.namespace, body, _request_timeout=self.timeout
                )
        except ApiException as exc:
            if exc.status == 409 and self.versions.get(shard) is None:  # created by a predecessor: read its version
                self._read(shard)
                return False
            if exc.status not in (404, 409):
                raise
            self.load()
            return False
        self.writes += 1
        self.versions[shard] = answer.metadata.resource_version
        self.written[shard] = digest
        return True


def parse_records(data: dict[str, str]) -> dict[str, WorkloadRecord]:
    """Every readable record; one that does not parse is skipped with a warning, never fatal."""
    records: dict[str, WorkloadRecord] = {}
    for key, text in data.items():
        try:
            record = WorkloadRecord.model_validate(json.loads(text))
        except (ValueError, ValidationError) as exc:
            log.warning("state-record-unreadable", key=key, detail=str(exc).splitlines()[0][:200])
            continue
        records[record.workload] = record
    return records
