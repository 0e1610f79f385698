"""What the leader keeps in its state ConfigMap, and when it writes it (against a fake API; the real one is in
tests/integration/test_daemon.py)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from kubernetes import client

from autoscaler.state import HEARTBEAT_S, ConfigMapStateStore, WorkloadRecord


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
