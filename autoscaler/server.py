"""``/metrics``, ``/healthz``, ``/readyz`` and ``/status`` on one small HTTP server thread.

``/status`` is what ``vllm-autoscaler status --url`` reads: the records of the last tick, as ``status -o json``
prints them, from any daemon (a dry-run or a standby one too, which write no state into the cluster)."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from autoscaler.logs import get_logger

log = get_logger("autoscaler.server")


class OneLineErrorsServer(ThreadingHTTPServer):
    """A threaded HTTP server that says a request's failure in one log line, not the traceback ``socketserver`` prints
    on stderr: a client gone before its answer was written (a scrape or ``status --url`` that timed out on a large
    answer) at info, anything else as an error."""

    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        error = sys.exc_info()[1]
        client = ":".join(str(part) for part in client_address) if isinstance(client_address, tuple) else "?"
        if isinstance(error, ConnectionError):  # a broken pipe, a reset or an abort: the client left
            log.info("http-client-gone", client=client, error=type(error).__name__)
        else:
            log.error("http-request-failed", client=client, error=repr(error))


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

        self.httpd = OneLineErrorsServer((address, port), Handler)
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
