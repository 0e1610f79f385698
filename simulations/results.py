"""Dated reports for ``docs/results/``: each says the command that measured it, the version and the machine
(docs/results/README.md), so a figure is never quoted without what made it."""

from __future__ import annotations

import datetime
import os
import platform
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path


def machine_line() -> str:
    """``Machine: 2 CPUs, 24 GiB, x86_64, Linux 6.1, Python 3.11.7.``"""
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return (
        f"Machine: {os.cpu_count()} CPUs, {memory:.0f} GiB, {platform.machine()}, {platform.system()} "
        f"{platform.release()}, Python {sys.version.split()[0]}."
    )


def write_dated(folder: Path, name: str, title: str, command: str, body: list[str]) -> Path:
    """``folder/YYYY-MM-DD-name.md``: the title with today's date, who wrote it, the machine, then ``body``."""
    try:
        installed = version("vllm-autoscaler")
    except PackageNotFoundError:
        installed = "not installed"
    today = datetime.date.today().isoformat()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{today}-{name}.md"
    head = [
        f"# {title}, {today}",
        "",
        f"Written by `{command}` (vllm-autoscaler {installed}); do not edit by hand, run it again.",
        "",
        machine_line(),
        "",
    ]
    path.write_text("\n".join([*head, *body, ""]), encoding="utf-8")
    return path
