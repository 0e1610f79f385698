"""The daemon's own module: what starting it loads (its behaviour against real servers is in tests/integration)."""

from __future__ import annotations

import platform
import subprocess
import sys
from pathlib import Path

import pytest


def test_the_daemon_loads_no_simulation_module() -> None:
    """The runtime image holds the daemon; the simulator is a sibling it never imports (pyproject's import-linter
    contracts hold the source to it, this the running process)."""
    code = "import sys, autoscaler.daemon; print(sorted(m for m in sys.modules if m.split('.')[0] == 'simulations'))"
    done = subprocess.run([sys.executable, "-X", "importtime", "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
    assert "simulations" not in done.stderr  # -X importtime's list of every module imported


IMAGE = """
import sys
class Left:  # what the daemon's image leaves out (the Dockerfile)
    def find_spec(self, name, path=None, target=None):
        top = name.split(".")[0]
        if top in ("simulations", "matplotlib") or name.startswith(("autoscaler.testing", "autoscaler.bench")):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, Left())
from autoscaler.cli import main
raise SystemExit(main(sys.argv[1:]))
"""


def _in_the_image(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", IMAGE, *args], capture_output=True, text=True, timeout=60)


def test_the_daemons_commands_run_without_the_simulator() -> None:
    """The image holds the daemon and its command line: validate, run and status work there; simulate says in one
    line that it needs the simulator."""
    root = Path(__file__).resolve().parents[1]
    valid = _in_the_image("validate", "--config", str(root / "deploy" / "examples" / "policies" / "slo.yaml"))
    assert valid.returncode == 0, valid.stderr
    assert _in_the_image("run", "--help").returncode == 0
    status = _in_the_image("status", "--url", "http://127.0.0.1:1")
    assert status.returncode == 1 and "cannot read http://127.0.0.1:1/status" in status.stderr
    assert "Traceback" not in status.stderr
    simulate = _in_the_image("simulate", "-q")
    assert simulate.returncode == 1 and "needs the simulator" in simulate.stderr and "Traceback" not in simulate.stderr


def test_what_lives_as_long_as_the_policy_is_frozen_once_and_again_after_a_reload(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``settle``: after the first tick the garbage collector stops walking the document, the deciders and the metric
    series; a later tick of the same document does nothing; a reloaded document is settled again, after a collection
    that frees what the old one held. The calls are counted, not ``gc.get_freeze_count()``: a frozen object that
    another thread frees leaves the permanent generation, so the count can fall between two ticks that froze
    nothing."""
    import gc
    from types import SimpleNamespace
    from typing import Any

    from autoscaler.daemon import settle

    calls: list[str] = []
    for name in ("unfreeze", "collect", "freeze"):
        real = getattr(gc, name)
        monkeypatch.setattr(gc, name, lambda *a, _real=real, _name=name: (calls.append(_name), _real(*a))[1])
    settled: list[Any] = []
    first, reloaded = object(), object()
    controller: Any = SimpleNamespace(document=first)
    try:
        settle(controller, settled)
        assert calls == ["unfreeze", "collect", "freeze"] and settled == [first]
        assert gc.get_freeze_count() > 0
        settle(controller, settled)
        assert calls == ["unfreeze", "collect", "freeze"]
        controller.document = reloaded
        settle(controller, settled)
        assert calls == ["unfreeze", "collect", "freeze"] * 2 and settled == [reloaded]
    finally:
        monkeypatch.undo()
        gc.unfreeze()


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")
def test_the_malloc_arenas_are_limited() -> None:
    """glibc takes the limit (mallopt answers 1); the daemon sets it before its first thread."""
    from autoscaler.daemon import limit_arenas

    assert limit_arenas() is True
