"""Shared fixtures: the real traces in ../shared/traces (never copied into the repository)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog

TRACES = Path(__file__).resolve().parents[2] / "shared" / "traces"


@pytest.fixture
def shared_trace() -> Path:
    """``../shared/traces/`` from the project root; CI fails without it, elsewhere the test skips."""
    if not TRACES.is_dir():
        if os.environ.get("CI"):
            pytest.fail(f"{TRACES} is missing: CI needs the shared traces")
        pytest.skip(f"{TRACES} is missing (the shared traces live beside the project)")
    return TRACES


@pytest.fixture(autouse=True)
def _reset_logging() -> Iterator[None]:
    """``run`` configures structlog for the process (onto a stream the test captures); put the default back."""
    yield
    structlog.reset_defaults()
