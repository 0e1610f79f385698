from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog

from tests.servers import PrometheusServer, VllmExporter


@pytest.fixture(autouse=True)
def _reset_logging() -> Iterator[None]:
    """``run`` configures structlog for the process; put the test default back afterwards."""
    yield
    structlog.reset_defaults()


@pytest.fixture
def exporter() -> Iterator[VllmExporter]:
    server = VllmExporter()
    yield server
    server.close()


@pytest.fixture
def prometheus(tmp_path: Path, exporter: VllmExporter) -> Iterator[PrometheusServer]:
    server = PrometheusServer(tmp_path, [exporter.port])
    server.start()
    yield server
    server.stop()
