"""The daemon's own module: what starting it loads (its behaviour against real servers is in tests/integration)."""

from __future__ import annotations

import subprocess
import sys


def test_the_daemon_loads_no_simulation_module() -> None:
    """The runtime image holds the daemon; the simulator is a sibling it never imports (pyproject's import-linter
    contracts hold the source to it, this the running process)."""
    code = "import sys, autoscaler.daemon; print(sorted(m for m in sys.modules if m.split('.')[0] == 'simulations'))"
    done = subprocess.run([sys.executable, "-X", "importtime", "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
    assert "simulations" not in done.stderr  # -X importtime's list of every module imported
