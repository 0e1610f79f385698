"""policies.registry: plug-ins by entry point, each loaded on its own."""

from __future__ import annotations

from collections.abc import Iterator
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest
import yaml
from pydantic import BaseModel as PolicyParams

from autoscaler.cli import main
from policies import registry
from policies.base import Observation, PolicyBase, Proposal
from tests.helpers import workload_doc


@pytest.fixture
def broken_plugin(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    entry = EntryPoint("broken", "no_such_module_for_the_test:Policy", registry.ENTRY_POINT_GROUP)
    monkeypatch.setattr(registry, "entry_points", lambda group: [entry] if group == registry.ENTRY_POINT_GROUP else [])
    registry._load.cache_clear()
    yield
    registry._load.cache_clear()


def test_a_broken_plugin_costs_only_its_own_type(
    broken_plugin: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert "threshold" in registry.available() and "broken" in registry.broken_plugins()
    good = tmp_path / "good.yaml"
    good.write_text(yaml.safe_dump(workload_doc()))
    assert main(["validate", "--config", str(good)]) == 0
    err = capsys.readouterr().err
    assert err.count("plug-in 'broken' failed to load") == 1 and "Traceback" not in err
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(workload_doc(policy={"type": "broken"})))
    assert main(["validate", "--config", str(bad)]) == 2
    out = capsys.readouterr().out
    assert "policy.type" in out and "ModuleNotFoundError" in out


class MinimalPolicy:
    """A plug-in with only the required members: no tuning knob, no history, no settings to report."""

    type = "minimal"

    class Params(PolicyParams):
        type: str = "minimal"

    def __init__(self, params: object, ctx: object) -> None:
        self.state = None

    def recommend(self, observation: Observation) -> Proposal:
        return Proposal(3, "steady")


@pytest.fixture
def minimal_plugin(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    entry = EntryPoint("minimal", f"{__name__}:MinimalPolicy", registry.ENTRY_POINT_GROUP)
    monkeypatch.setattr(registry, "entry_points", lambda group: [entry] if group == registry.ENTRY_POINT_GROUP else [])
    registry._load.cache_clear()
    yield
    registry._load.cache_clear()


def test_a_plugin_that_leaves_the_optional_members_out_gets_the_bases_defaults(minimal_plugin: None) -> None:
    """Callers read a policy's optional members directly (``PolicyBase`` declares them): a plug-in that does not
    subclass it is put under it as it loads, and decides as it wrote."""
    cls = registry.policy_class("minimal")
    assert issubclass(cls, PolicyBase) and cls.__name__ == "MinimalPolicy" and cls.tuning_knob is None
    policy = registry.build(registry.parse_params({"type": "minimal"}), None)  # type: ignore[arg-type]
    assert (policy.history_seconds, policy.detail_seconds, policy.resolved()) == (0.0, 0.0, {})
    assert policy.recommend(Observation(0.0, 2, {})).replicas == 3
