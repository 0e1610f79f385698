"""What the leader keeps in its state ConfigMap, and when it writes it (against a fake API; the real one is in
tests/integration/test_daemon.py)."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from autoscaler import state as state_module
from autoscaler.state import (
    HEARTBEAT_S,
    LAYOUT_KEY,
    MAX_BYTES,
    MOST_SHARDS,
    ConfigMapStateStore,
    WorkloadRecord,
    shard_name,
    shard_of,
)


class FakeCore:
    """The two calls ``save`` makes, counted."""

    def __init__(self) -> None:
        self.writes: list[dict[str, str]] = []

    def _answer(self, body: Any) -> Any:
        self.writes.append(dict(body["data"]))
        return SimpleNamespace(metadata=SimpleNamespace(resource_version=str(len(self.writes))))

    def create_namespaced_config_map(self, namespace: str, body: Any, **_: Any) -> Any:
        return self._answer(body)

    def replace_namespaced_config_map(self, name: str, namespace: str, body: Any, **_: Any) -> Any:
        return self._answer(body)


def records(at: float, desired: int = 4, waiting: float = 7.0) -> dict[str, WorkloadRecord]:
    record = WorkloadRecord(
        workload="llm/a",
        target="Deployment/a",
        policy="threshold",
        updated_at=at,
        desired=desired,
        metrics={"waiting": {"value": waiting, "target": 2.0, "type": "AverageValue"}},
    )
    return {"deployment_llm_a.json": record}


def test_the_state_is_written_when_it_changes_not_on_every_tick() -> None:
    """Ticks that change only the time and the metrics' values write nothing until ``HEARTBEAT_S`` has passed; a
    change of state (here the desired count) is written at once."""
    store = ConfigMapStateStore(client.ApiClient(), "vllm-autoscaler")
    core = FakeCore()
    store.core = core  # type: ignore[assignment]
    store.save(records(1000.0))
    for tick in range(1, 10):
        store.save(records(1000.0 + 15 * tick, waiting=7.0 + tick))
    assert len(core.writes) == 1
    store.save(records(1150.0, desired=5))
    assert len(core.writes) == 2
    store.save(records(1150.0 + HEARTBEAT_S, desired=5, waiting=1.0))
    assert len(core.writes) == 3  # the heartbeat: status's metrics are never older than it


class ShardedCore:
    """ConfigMaps by name, as the API keeps them: read, created once, replaced on the version read."""

    def __init__(self) -> None:
        self.maps: dict[str, dict[str, str]] = {}
        self.writes: list[str] = []

    def read_namespaced_config_map(self, name: str, namespace: str, **_: Any) -> Any:
        if name not in self.maps:
            raise ApiException(status=404)
        version = str(sum(1 for n in self.writes if n == name))
        return SimpleNamespace(metadata=SimpleNamespace(resource_version=version), data=dict(self.maps[name]))

    def create_namespaced_config_map(self, namespace: str, body: Any, **_: Any) -> Any:
        name = body["metadata"]["name"]
        if name in self.maps:
            raise ApiException(status=409)
        return self._answer(name, body)

    def replace_namespaced_config_map(self, name: str, namespace: str, body: Any, **_: Any) -> Any:
        return self._answer(name, body)

    def _answer(self, name: str, body: Any) -> Any:
        self.maps[name] = dict(body["data"])
        self.writes.append(name)
        return SimpleNamespace(metadata=SimpleNamespace(resource_version=str(len(self.writes))))


def fleet(count: int, at: float, desired: int = 4, changed: str | None = None) -> dict[str, WorkloadRecord]:
    """``count`` workloads with a behavior history each, about what a busy fleet's records hold."""
    behavior = {"recommendations": [[1000.0 - 15.0 * i, 4.0] for i in range(20)]}
    out = {}
    for i in range(count):
        name = f"model-{i}"
        out[f"deployment_llm_{name}.json"] = WorkloadRecord(
            workload=f"llm/{name}",
            target=f"Deployment/{name}",
            policy="predictive",
            updated_at=at,
            desired=desired + (name == changed),
            metrics={"waiting": {"value": 7.0, "target": 2.0, "type": "AverageValue"}},
            behavior=behavior,
        )
    return out


def _store(core: ShardedCore) -> ConfigMapStateStore:
    store = ConfigMapStateStore(client.ApiClient(), "vllm-autoscaler")
    store.core = core  # type: ignore[assignment]
    return store


def _loaded() -> tuple[ShardedCore, ConfigMapStateStore]:
    """A store over empty ConfigMaps, read as a starting leader reads them."""
    core = ShardedCore()
    store = _store(core)
    store.load()
    return core, store


def test_a_large_fleet_is_sharded_under_the_object_limit_and_read_back_whole() -> None:
    core, store = _loaded()
    written = fleet(10_000, 1000.0)
    store.save(written)
    assert 1 < store.shards <= MOST_SHARDS and len(core.maps) == store.shards
    assert all(sum(len(v) for v in data.values()) <= MAX_BYTES for data in core.maps.values())
    assert json.loads(core.maps["vllm-autoscaler-state"][LAYOUT_KEY]) == {"shards": store.shards}
    again = _store(core)
    assert {r.workload for r in again.load().values()} == {r.workload for r in written.values()}
    assert again.shards == store.shards


def test_one_workload_changing_rewrites_its_shard_only_and_an_idle_tick_writes_none() -> None:
    core, store = _loaded()
    store.save(fleet(10_000, 1000.0))
    before = len(core.writes)
    store.save(fleet(10_000, 1015.0))  # only the time moved
    assert len(core.writes) == before
    store.save(fleet(10_000, 1030.0, changed="model-42"))
    assert core.writes[before:] == [
        shard_name("vllm-autoscaler-state", shard_of("deployment_llm_model-42.json", store.shards))
    ]


def test_a_small_fleet_keeps_one_configmap_without_a_layout() -> None:
    core, store = _loaded()
    store.save(fleet(50, 1000.0))
    assert list(core.maps) == ["vllm-autoscaler-state"] and LAYOUT_KEY not in core.maps["vllm-autoscaler-state"]


def test_a_steady_windows_new_recommendations_are_no_change_and_a_new_count_is() -> None:
    """A fleet holding 4 adds a recommendation of 4 every tick: nothing to write until the heartbeat; a
    recommendation of 5 in the window is written at once."""
    core, store = _loaded()

    def at(t: float, values: list[int]) -> dict[str, WorkloadRecord]:
        behavior = {"recommendations": [[float(v), t - 15.0 * i] for i, v in enumerate(values)], "scale_up": []}
        record = WorkloadRecord(
            workload="llm/a", target="Deployment/a", policy="threshold", updated_at=t, desired=4, behavior=behavior
        )
        return {"deployment_llm_a.json": record}

    store.save(at(1000.0, [4]))
    store.save(at(1015.0, [4, 4]))
    store.save(at(1030.0, [4, 4, 4]))
    assert len(core.writes) == 1
    store.save(at(1045.0, [5, 4, 4, 4]))
    assert len(core.writes) == 2


def test_a_workload_gone_from_the_file_leaves_its_shard_rewritten_without_it() -> None:
    core, store = _loaded()
    written = fleet(10_000, 1000.0)
    store.save(written)
    before = len(core.writes)
    gone = "deployment_llm_model-7.json"
    store.save({k: v for k, v in written.items() if k != gone})
    assert core.writes[before:] == [shard_name("vllm-autoscaler-state", shard_of(gone, store.shards))]
    assert gone not in core.maps[core.writes[-1]]


def test_records_said_unchanged_are_not_serialized_again_and_a_lost_write_is_made_at_the_next_save(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``save(records, changed)``: the records not named are taken as last given (their essential fields not
    serialized again); one named and changed is written; a write lost (fenced) is made at a later save even though
    the record is no longer named, since what was given differs from what was written."""
    core, store = _loaded()
    written = fleet(100, 1000.0)
    store.save(written)
    before = len(core.writes)
    changed = fleet(100, 1015.0, changed="model-3")
    serialized: list[str] = []
    real = state_module.essential_json

    def counted(record: WorkloadRecord) -> str:
        serialized.append(record.workload)
        return real(record)

    fence = [0.0]
    store.authority = lambda: fence[0]  # the Lease not held: the write is fenced
    monkeypatch.setattr(state_module, "essential_json", counted)
    store.save(changed, ["deployment_llm_model-3.json"])
    assert serialized == ["llm/model-3"] and len(core.writes) == before
    fence[0] = 10.0
    store.save(changed, [])
    assert serialized == ["llm/model-3"] and len(core.writes) == before + 1
    assert json.loads(core.maps[core.writes[-1]]["deployment_llm_model-3.json"])["desired"] == 5
    store.save(fleet(101, 1030.0, changed="model-3"), [])  # a new workload is serialized, named or not
    assert serialized == ["llm/model-3", "llm/model-100"] and len(core.writes) == before + 2
