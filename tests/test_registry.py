"""policies.registry: plug-ins by entry point, each loaded on its own."""

from __future__ import annotations

from collections.abc import Iterator
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest
import yaml

from autoscaler.cli import main
from policies import registry
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
