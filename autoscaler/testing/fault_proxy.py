"""A fault-injecting HTTP proxy in front of a real server, for the faults a healthy server will not produce on
demand: a 429 with ``Retry-After``, a 5xx, a dropped connection, a slow answer, an HTML error page.

The client speaks plain HTTP to the proxy on loopback; the proxy forwards to the upstream (HTTPS with the
upstream's CA, or HTTP) with the client's headers, so authentication and RBAC are the real server's. Each
request is recorded with the answer the client got. A watch (``watch=true``) is passed on as it streams.
"""

from __future__ import annotations

import http.client
import re
import ssl
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import urlsplit

from autoscaler.server import OneLineErrorsServer

DROP = "drop"


@dataclass
class Fault:
    """Answer requests matching ``method`` and the ``path`` pattern with ``status`` (an HTTP code, or
    ``"drop"`` to close the connection unanswered), after ``delay`` seconds; ``times`` requests, or all
    while ``times`` is None. ``status=None`` with a delay forwards the request late."""

    method: str
    path: str
    status: int | str | None
    times: int | None = 1
    retry_after: float | None = None
    delay: float = 0.0
    body: bytes | None = None
    content_type: str = "application/json"
    used: int = 0

    def matches(self, method: str, path: str) -> bool:
        live = self.times is None or self.used < self.times
        return live and method == self.method and re.search(self.path, path) is not None


@dataclass(frozen=True)
class Seen:
    at: float
    method: str
    path: str
    status: int  # -1: dropped
    injected: bool


@dataclass
class FaultProxy:
    upstream: str
    ca_file: str | None = None
    faults: list[Fault] = field(default_factory=list)
    seen: list[Seen] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.lock = threading.Lock()
        parts = urlsplit(self.upstream)
        self._host, self._port = parts.hostname or "127.0.0.1", parts.port
        self._tls = parts.scheme == "https"
        self._context = ssl.create_default_context(cafile=self.ca_file) if self._tls else None
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _handle(self) -> None:
                proxy._serve(self)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _handle

            def log_message(self, *args: Any) -> None:
                pass

        self.server = OneLineErrorsServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def inject(self, method: str, path: str, status: int | str | None, **options: Any) -> Fault:
        fault = Fault(method, path, status, **options)
        with self.lock:
            self.faults.append(fault)
        return fault

    def clear(self) -> None:
        with self.lock:
            self.faults.clear()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def requests(self, method: str | None = None, path: str = "") -> list[Seen]:
        with self.lock:
            return [s for s in self.seen if (method is None or s.method == method) and re.search(path, s.path)]

    def _fault_for(self, method: str, path: str) -> Fault | None:
        with self.lock:
            for fault in self.faults:
                if fault.matches(method, path):
                    fault.used += 1
                    return fault
        return None

    def _record(self, method: str, path: str, status: int, injected: bool) -> None:
        with self.lock:
            self.seen.append(Seen(time.time(), method, path, status, injected))

    def _serve(self, handler: BaseHTTPRequestHandler) -> None:
        method, path = handler.command, handler.path
        length = int(handler.headers.get("Content-Length") or 0)
        body = handler.rfile.read(length) if length else b""
        fault = self._fault_for(method, path.split("?")[0])
        if fault is not None and fault.delay:
            time.sleep(fault.delay)
        if fault is not None and fault.status == DROP:
            self._record(method, path, -1, True)
            handler.close_connection = True
            handler.connection.close()
            return
        if fault is not None and fault.status is not None:
            status = int(fault.status)
            payload = fault.body if fault.body is not None else _status_body(status)
            headers = {"Content-Type": fault.content_type}
            if fault.retry_after is not None:
                headers["Retry-After"] = str(int(fault.retry_after))
            self._record(method, path, status, True)
            _answer(handler, status, headers, payload)
            return
        if WATCH.search(path):
            self._stream(handler, method, path)
            return
        try:
            status, headers, payload = self._forward(method, path, handler.headers, body)
        except OSError:
            self._unreachable(handler, method, path)
            return
        self._record(method, path, status, False)
        _answer(handler, status, headers, payload)

    def _unreachable(self, handler: BaseHTTPRequestHandler, method: str, path: str) -> None:
        """The upstream could not be reached: a 502, as a gateway answers."""
        self._record(method, path, 502, False)
        _answer(handler, 502, {"Content-Type": "application/json"}, _status_body(502))

    def _connect(self, timeout: float | None) -> http.client.HTTPConnection:
        if self._tls:
            return http.client.HTTPSConnection(self._host, self._port, context=self._context, timeout=timeout)
        return http.client.HTTPConnection(self._host, self._port, timeout=timeout)

    def _forward(self, method: str, path: str, incoming: Any, body: bytes) -> tuple[int, dict[str, str], bytes]:
        connection = self._connect(30)
        try:
            connection.request(method, path, body=body or None, headers=_passed(incoming))
            response = connection.getresponse()
            payload = response.read()
            return response.status, _kept(response), payload
        finally:
            connection.close()

    def _stream(self, handler: BaseHTTPRequestHandler, method: str, path: str) -> None:
        """A watch, its answer passed on chunk by chunk as the upstream sends it, until either side ends it."""
        connection = self._connect(None)
        try:
            try:
                connection.request(method, path, headers=_passed(handler.headers))
                response = connection.getresponse()
            except OSError:
                self._unreachable(handler, method, path)
                return
            self._record(method, path, response.status, False)
            if response.status != 200:
                _answer(handler, response.status, _kept(response), response.read())
                return
            try:
                handler.send_response(200)
                for key, value in _kept(response).items():
                    handler.send_header(key, value)
                handler.send_header("Transfer-Encoding", "chunked")
                handler.end_headers()
                while chunk := response.read1(65536):
                    handler.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    handler.wfile.flush()
                handler.wfile.write(b"0\r\n\r\n")
            except OSError:
                handler.close_connection = True
        finally:
            connection.close()


WATCH = re.compile(r"[?&]watch=(true|1)(&|$)")
_SKIPPED = {"host", "connection", "content-length", "accept-encoding"}
_KEPT = {"content-type", "retry-after", "audit-id"}


def _passed(incoming: Any) -> dict[str, str]:
    """The client's headers, as sent on to the upstream."""
    return {k: v for k, v in incoming.items() if k.lower() not in _SKIPPED}


def _kept(response: http.client.HTTPResponse) -> dict[str, str]:
    """The upstream's headers, as answered to the client."""
    return {k: v for k, v in response.getheaders() if k.lower() in _KEPT}


def _status_body(code: int) -> bytes:
    reason = {429: "TooManyRequests", 500: "InternalError", 503: "ServiceUnavailable", 409: "Conflict"}
    return (
        '{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",'
        f'"message":"injected {code}","reason":"{reason.get(code, "Unknown")}","code":{code}}}'
    ).encode()


def _answer(handler: BaseHTTPRequestHandler, status: int, headers: dict[str, str], payload: bytes) -> None:
    try:
        handler.send_response(status)
        for key, value in headers.items():
            handler.send_header(key, value)
        handler.send_header("Content-Length", str(len(payload)))
        handler.end_headers()
        handler.wfile.write(payload)
    except OSError:
        pass
