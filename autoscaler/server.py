"""``/metrics``, ``/healthz``, ``/readyz`` and ``/status`` on one small HTTP server thread.

``/status`` is what ``vllm-autoscaler status --url`` reads: the records of the last tick, as ``status -o json``
prints them, from any daemon (a dry-run or a standby one too, which write no state into the cluster)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest


class HealthServer:
    def __init__(
        self,
        address: str,
        port: int,
        registry: CollectorRegistry,
        healthy: Callable[[], tuple[bool, str]],
        ready: Callable[[], tuple[bool, str]],
        status: Callable[[], str] | None = None,
    ) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    self._send(200, generate_latest(registry), CONTENT_TYPE_LATEST)
                elif path == "/status" and status is not None:
                    self._send(200, status().encode(), "application/json")
                elif path in ("/healthz", "/readyz"):
                    ok, why = (healthy if path == "/healthz" else ready)()
                    self._send(200 if ok else 503, (why + "\n").encode(), "text/plain; charset=utf-8")
                else:
                    self._send(404, b"not found\n", "text/plain; charset=utf-8")

            def _send(self, status: int, body: bytes, content_type: str) -> None:
                send(self, status, body, content_type)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer((address, port), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True, name="health-server")

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def send(handler: BaseHTTPRequestHandler, status: int, body: bytes, content_type: str) -> None:
    """Answer ``handler``'s request with ``body``, its type and length said."""
    handler.send_response(status)
    handler.send_header("Content-Type", content_type)
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)
