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


def test_what_a_tick_leaves_alive_is_frozen_and_all_is_thawed_after_a_reload_and_each_hour(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``settle``: after every tick what is alive is frozen, once what is not is collected; after the first tick, a
    reloaded document and every ``THAW_S`` everything is thawed first, so that the collection frees what the old
    document held and any cycle that became garbage while frozen. The calls are counted, not
    ``gc.get_freeze_count()``: a frozen object that another thread frees leaves the permanent generation, so the
    count can fall between two ticks."""
    import gc
    from types import SimpleNamespace
    from typing import Any

    from autoscaler.daemon import THAW_S, Settled, settle

    calls: list[str] = []
    for name in ("unfreeze", "collect", "freeze"):
        real = getattr(gc, name)
        monkeypatch.setattr(gc, name, lambda *a, _real=real, _name=name: (calls.append(_name), _real(*a))[1])
    settled = Settled()
    first, reloaded = object(), object()
    clock = [1000.0]
    controller: Any = SimpleNamespace(document=first, decision_clock=lambda: clock[0])
    thawed, kept = ["unfreeze", "collect", "freeze"], ["collect", "freeze"]
    try:
        settle(controller, settled)
        assert calls == thawed and settled.document is first
        assert gc.get_freeze_count() > 0
        clock[0] += 15
        settle(controller, settled)
        assert calls == thawed + kept
        controller.document = reloaded
        settle(controller, settled)
        assert calls == thawed + kept + thawed and settled.document is reloaded
        clock[0] += THAW_S - 1
        settle(controller, settled)
        clock[0] += 1
        settle(controller, settled)
        assert calls == thawed + kept + thawed + kept + thawed
    finally:
        monkeypatch.undo()
        gc.unfreeze()


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")
def test_the_malloc_arenas_are_limited() -> None:
    """glibc takes the limit (mallopt answers 1); the daemon sets it before its first thread."""
    from autoscaler.daemon import limit_arenas

    assert limit_arenas() is True


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")
def test_what_a_tick_freed_goes_back_to_the_system() -> None:
    """40 MB of malloc's own chunks freed: ``trim_heap`` (after every tick, ``settle``) gives pages back (1)."""
    from autoscaler.daemon import trim_heap

    held = [bytes(2000) for _ in range(20_000)]
    del held
    assert trim_heap() is True
