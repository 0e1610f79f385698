"""The daemon's HTTP server (``autoscaler/server.py``): a request that fails is one log line, never a traceback."""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Callable

import pytest
import requests
from prometheus_client import CollectorRegistry
from structlog.testing import capture_logs

from autoscaler.server import HealthServer


def _server(status: Callable[[], str]) -> HealthServer:
    server = HealthServer("127.0.0.1", 0, CollectorRegistry(), lambda: (True, "ok"), lambda: (True, "ok"), status)
    server.start()
    return server


def test_a_client_gone_before_its_answer_is_one_line(capfd: pytest.CaptureFixture[str]) -> None:
    """A ``status --url`` or scrape that gives up on a large answer resets the connection while it is written: the
    daemon says so in one line at info, and its stderr holds no traceback."""
    answer = "x" * 20_000_000
    server = _server(lambda: answer)
    try:
        with capture_logs() as logs:
            client = socket.create_connection(("127.0.0.1", server.port))
            client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close with a reset
            client.sendall(b"GET /status HTTP/1.1\r\nHost: daemon\r\n\r\n")
            time.sleep(0.2)
            client.close()
            deadline = time.monotonic() + 10
            while not logs and time.monotonic() < deadline:
                time.sleep(0.05)
        assert [(e["event"], e["log_level"]) for e in logs] == [("http-client-gone", "info")]
        assert logs[0]["error"] in ("BrokenPipeError", "ConnectionResetError")
        assert requests.get(f"http://127.0.0.1:{server.port}/healthz", timeout=5).text == "ok\n"  # it serves on
    finally:
        server.stop()
    assert "Traceback" not in capfd.readouterr().err


def test_a_failing_answer_is_an_error_line(capfd: pytest.CaptureFixture[str]) -> None:
    def broken() -> str:
        raise RuntimeError("the records are being rebuilt")

    server = _server(broken)
    try:
        with capture_logs() as logs:
            with pytest.raises(requests.ConnectionError):
                requests.get(f"http://127.0.0.1:{server.port}/status", timeout=5)
            deadline = time.monotonic() + 10  # the client may see the connection closed before the line is logged
            while not logs and time.monotonic() < deadline:
                time.sleep(0.05)
        assert [(e["event"], e["log_level"]) for e in logs] == [("http-request-failed", "error")]
        assert "the records are being rebuilt" in logs[0]["error"]
    finally:
        server.stop()
    assert "Traceback" not in capfd.readouterr().err
