"""The controller's per-workload state, kept in the cluster so a restart or a failover loses nothing.

One ConfigMap, ``vllm-autoscaler-state`` in the controller's own namespace, one key per workload holding a
JSON record: what ``status`` shows (counts, metrics against targets, the last scale and why, owners) and
what a successor needs to carry on (the measured cold starts, a scale-up still on its way, the behavior
history that the stabilization windows and rate limits read). Only the leader writes it, never in dry-run;
a new leader reads it before its first decision. Times are stored as wall-clock seconds and converted to
and from the decision clock (monotonic, per process) on the way.

With plain kubectl: ``kubectl -n vllm-autoscaler get configmap vllm-autoscaler-state -o yaml``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Protocol

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from autoscaler.conditions import Condition
from autoscaler.logs import get_logger

log = get_logger("autoscaler.state")
STATE_CONFIGMAP = "vllm-autoscaler-state"
MAX_BYTES = 900_000  # under the API's 1 MiB object limit, with room for metadata
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


def record_key(workload_key: str, kind: str) -> str:
    """A ConfigMap data key (``[-._a-zA-Z0-9]+``): object names never hold ``_``, so it separates."""
    namespace, name = workload_key.split("/", 1)
    return f"{kind.lower()}_{namespace}_{name}.json"


class StateStore(Protocol):
    def load(self) -> dict[str, WorkloadRecord]: ...

    def save(self, records: dict[str, WorkloadRecord]) -> None: ...


class ConfigMapStateStore:
    """The records in one ConfigMap: read with GET, written with a create or a replace on the version read."""

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
        self.essential: dict[str, str] = {}  # what was last written, less its VOLATILE fields
        self.written_at = 0.0  # the records' updated_at when last written
        self.version: str | None = None
        self.written: dict[str, str] = {}

    def load(self) -> dict[str, WorkloadRecord]:
        try:
            configmap: Any = self.core.read_namespaced_config_map(
                self.name, self.namespace, _request_timeout=self.timeout
            )
        except ApiException as exc:
            if exc.status == 404:
                self.version = None
                return {}
            raise
        self.version = configmap.metadata.resource_version
        self.written = dict(configmap.data or {})
        return parse_records(self.written)

    def save(self, records: dict[str, WorkloadRecord]) -> None:
        """Write the records if their state changed (anything but the ``VOLATILE`` fields), or every ``HEARTBEAT_S``
        while only those did: a fleet that holds steady costs etcd no write a tick. A 409 or 404 (another writer, or
        a deletion) re-reads the ConfigMap; the next tick writes again."""
        essential = {
            k: r.model_dump_json(by_alias=True, exclude_none=True, exclude=VOLATILE) for k, r in records.items()
        }
        stamp = max((r.updated_at for r in records.values()), default=0.0)
        if essential == self.essential and stamp - self.written_at < HEARTBEAT_S:
            return  # the usual tick: one serialization of the state, none of the whole records
        data = {key: record.model_dump_json(by_alias=True, exclude_none=True) for key, record in records.items()}
        if sum(len(v) for v in data.values()) > MAX_BYTES:  # a very large fleet: keep the rest, drop the history
            data = {
                key: record.model_copy(update={"behavior": {}}).model_dump_json(by_alias=True, exclude_none=True)
                for key, record in records.items()
            }
        if data == self.written:
            return
        if self.authority is not None and self.authority() <= 0:
            log.info("state-fenced", detail="this process does not hold the Lease (or has not renewed it in time)")
            return
        body: Any = {"metadata": {"name": self.name, "namespace": self.namespace}, "data": data}
        try:
            if self.version is None:
                answer: Any = self.core.create_namespaced_config_map(
                    self.namespace, body, _request_timeout=self.timeout
                )
            else:
                body["metadata"]["resourceVersion"] = self.version
                answer = self.core.replace_namespaced_config_map(
                    self.name, self.namespace, body, _request_timeout=self.timeout
                )
        except ApiException as exc:
            if exc.status not in (404, 409):
                raise
            self.load()
            return
        self.version = answer.metadata.resource_version
        self.written, self.essential, self.written_at = data, essential, stamp


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
