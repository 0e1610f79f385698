"""A Kubernetes API emulator over HTTP, for tests and benchmarks (no kube-apiserver can be installed here).

It serves the real paths and JSON of the resources the daemon uses: Deployments and their ``scale``
subresource, Leases, ConfigMaps, Events, HorizontalPodAutoscalers and KEDA ScaledObjects. It keeps the API's
semantics where the daemon depends on them: ``resourceVersion`` optimistic concurrency (409 on a stale
write), 404 with a ``Status`` body, RBAC refusals (403) from deny rules, bearer-token authentication (401),
merge patches only with the merge-patch content type, and a simulated kubelet that makes
``readyReplicas`` follow ``spec.replicas`` after a start-up delay. Faults (any status, or a dropped
connection) can be injected per method and path, and every request is recorded.
"""

from __future__ import annotations

import contextlib
import copy
import json
import re
import socket
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

RESOURCES = {
    # plural: (group path prefix, apiVersion, kind)
    "deployments": ("/apis/apps/v1", "apps/v1", "Deployment"),
    "leases": ("/apis/coordination.k8s.io/v1", "coordination.k8s.io/v1", "Lease"),
    "configmaps": ("/api/v1", "v1", "ConfigMap"),
    "events": ("/api/v1", "v1", "Event"),
    "horizontalpodautoscalers": ("/apis/autoscaling/v2", "autoscaling/v2", "HorizontalPodAutoscaler"),
    "scaledobjects": ("/apis/keda.sh/v1alpha1", "keda.sh/v1alpha1", "ScaledObject"),
}
PATH = re.compile(
    r"^(?P<prefix>/api/v1|/apis/[a-z0-9.\-]+/v[a-z0-9]+)/namespaces/(?P<ns>[^/]+)/(?P<plural>[a-z]+)"
    r"(?:/(?P<name>[^/]+))?(?:/(?P<sub>scale|status))?$"
)


def _now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Recorded:
    method: str
    path: str
    status: int
    body: Any = None
    content_type: str | None = None
    at: float = 0.0
    token: str | None = None
    lease_holders: dict[str, str] = field(default_factory=dict)


@dataclass
class Fault:
    method: str
    path: re.Pattern[str]
    status: int | str
    times: int
    retry_after: int | None = None


@dataclass
class Pods:
    """The simulated kubelet's view of one Deployment: when each pod became (or becomes) ready."""

    ready_at: list[float] = field(default_factory=list)


class KubernetesEmulator:
    def __init__(self, token: str = "test-token", startup_delay: float = 0.0) -> None:
        self.token = token
        self.tokens = {token}
        self.startup_delay = startup_delay
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.pods: dict[tuple[str, str], Pods] = {}
        self.version = 1000
        self.lock = threading.RLock()
        self.requests: list[Recorded] = []
        self.faults: list[Fault] = []
        self.denied: set[tuple[str, str]] = set()  # (verb, plural)
        emulator = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _handle(self) -> None:
                emulator.dispatch(self)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _handle

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._stop = threading.Event()
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        threading.Thread(target=self._kubelet, daemon=True).start()

    # -- test helpers ----------------------------------------------------------------------------

    def kubeconfig(self, path: Path, token: str | None = None) -> Path:
        """A kubeconfig for this emulator; another ``token`` tells that client's requests apart."""
        if token is not None:
            self.tokens.add(token)
        path.write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "current-context": "emulator",
                    "clusters": [{"name": "emulator", "cluster": {"server": self.url}}],
                    "users": [{"name": "tester", "user": {"token": token or self.token}}],
                    "contexts": [{"name": "emulator", "context": {"cluster": "emulator", "user": "tester"}}],
                }
            )
        )
        return path

    def add_deployment(
        self,
        namespace: str,
        name: str,
        replicas: int,
        annotations: dict[str, str] | None = None,
        ready: int | None = None,
    ) -> dict[str, Any]:
        obj = {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "annotations": annotations or {},
                "labels": {"app": name},
                "generation": 1,
            },
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": {"app": name}},
                "template": {
                    "metadata": {"labels": {"app": name}},
                    "spec": {"containers": [{"name": "vllm", "image": "vllm/vllm-openai"}]},
                },
            },
            "status": {},
        }
        with self.lock:
            stored = self._store("deployments", namespace, name, obj)
            self.pods[(namespace, name)] = Pods([0.0] * (replicas if ready is None else ready))
            self._update_status(namespace, name, time.time())
            return copy.deepcopy(stored)

    def add(self, plural: str, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            return copy.deepcopy(self._store(plural, namespace, name, body))

    def get(self, plural: str, namespace: str, name: str) -> dict[str, Any] | None:
        with self.lock:
            obj = self.objects.get((plural, namespace, name))
            return copy.deepcopy(obj) if obj else None

    def delete(self, plural: str, namespace: str, name: str) -> None:
        with self.lock:
            self.objects.pop((plural, namespace, name), None)
            self.pods.pop((namespace, name), None)

    def set_replicas_by_hand(self, namespace: str, name: str, replicas: int) -> None:
        with self.lock:
            obj = self.objects[("deployments", namespace, name)]
            obj["spec"]["replicas"] = replicas
            self._bump(obj)

    def inject(self, method: str, path: str, status: int | str, times: int = 1, retry_after: int | None = None) -> None:
        """Answer the next ``times`` matching requests with ``status`` (or ``"drop"``: close the connection)."""
        with self.lock:
            self.faults.append(Fault(method.upper(), re.compile(path), status, times, retry_after))

    def deny(self, verb: str, plural: str) -> None:
        self.denied.add((verb, plural))

    def writes(self, path_part: str = "") -> list[Recorded]:
        return [r for r in self.requests if r.method in ("POST", "PUT", "PATCH", "DELETE") and path_part in r.path]

    def scale_writes(self) -> list[Recorded]:
        return [r for r in self.requests if r.method in ("PUT", "PATCH") and r.path.endswith("/scale")]

    def close(self) -> None:
        self._stop.set()
        self.server.shutdown()
        self.server.server_close()

    # -- storage -----------------------------------------------------------------------------------

    def _bump(self, obj: dict[str, Any]) -> None:
        self.version += 1
        obj["metadata"]["resourceVersion"] = str(self.version)

    def _store(self, plural: str, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        _, api_version, kind = RESOURCES[plural]
        obj = copy.deepcopy(body)
        obj.setdefault("apiVersion", api_version)
        obj.setdefault("kind", kind)
        meta = obj.setdefault("metadata", {})
        meta["name"], meta["namespace"] = name, namespace
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", _now_iso())
        self._bump(obj)
        self.objects[(plural, namespace, name)] = obj
        return obj

    def _update_status(self, namespace: str, name: str, now: float) -> None:
        obj = self.objects.get(("deployments", namespace, name))
        pods = self.pods.get((namespace, name))
        if obj is None or pods is None:
            return
        want = int(obj["spec"].get("replicas", 1))
        if len(pods.ready_at) > want:
            pods.ready_at = sorted(pods.ready_at)[:want]
        while len(pods.ready_at) < want:
            pods.ready_at.append(now + self.startup_delay)
        ready = sum(1 for t in pods.ready_at if t <= now)
        status = {
            "replicas": want,
            "readyReplicas": ready,
            "availableReplicas": ready,
            "updatedReplicas": want,
            "observedGeneration": obj["metadata"].get("generation", 1),
        }
        if ready == 0:
            status.pop("readyReplicas")
            status.pop("availableReplicas")
        if obj.get("status") != status:
            obj["status"] = status
            self._bump(obj)

    def _kubelet(self) -> None:
        while not self._stop.wait(0.05):
            with self.lock:
                for namespace, name in list(self.pods):
                    self._update_status(namespace, name, time.time())

    # -- HTTP --------------------------------------------------------------------------------------

    def dispatch(self, request: BaseHTTPRequestHandler) -> None:
        path, _, query = request.path.partition("?")
        length = int(request.headers.get("Content-Length") or 0)
        raw = request.rfile.read(length) if length else b""
        content_type = request.headers.get("Content-Type")
        try:
            body = json.loads(raw) if raw else None
        except json.JSONDecodeError:
            body = raw.decode(errors="replace")
        method = request.command
        with self.lock:
            fault = next((f for f in self.faults if f.method in (method, "*") and f.path.search(path)), None)
            if fault is not None:
                fault.times -= 1
                if fault.times <= 0:
                    self.faults.remove(fault)
        if fault is not None:
            self.requests.append(
                Recorded(
                    method, path, -1 if fault.status == "drop" else int(fault.status), body, content_type, time.time()
                )
            )
            if fault.status == "drop":
                request.close_connection = True
                with contextlib.suppress(OSError):
                    request.connection.shutdown(socket.SHUT_RDWR)
                return
            headers = {"Retry-After": str(fault.retry_after)} if fault.retry_after is not None else {}
            self._reply(request, int(fault.status), _status(int(fault.status), "injected fault"), headers)
            return
        token = request.headers.get("Authorization", "").removeprefix("Bearer ") or None
        with self.lock:
            holders = {
                f"{ns}/{name}": (obj.get("spec") or {}).get("holderIdentity") or ""
                for (plural, ns, name), obj in self.objects.items()
                if plural == "leases"
            }
            status, reply = self._route(request, method, path, query, body, content_type)
        self.requests.append(Recorded(method, path, status, body, content_type, time.time(), token, holders))
        self._reply(request, status, reply)

    def _reply(
        self, request: BaseHTTPRequestHandler, status: int, body: Any, headers: dict[str, str] | None = None
    ) -> None:
        data = json.dumps(body).encode()
        request.send_response(status)
        request.send_header("Content-Type", "application/json")
        request.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            request.send_header(key, value)
        request.end_headers()
        request.wfile.write(data)

    def _route(
        self, request: BaseHTTPRequestHandler, method: str, path: str, query: str, body: Any, content_type: str | None
    ) -> tuple[int, Any]:
        if request.headers.get("Authorization", "").removeprefix("Bearer ") not in self.tokens:
            return 401, _status(401, "Unauthorized")
        match = PATH.match(path)
        if match is None or match["plural"] not in RESOURCES or RESOURCES[match["plural"]][0] != match["prefix"]:
            return 404, _status(404, f"the server could not find the requested resource ({path})")
        ns, plural, name, sub = match["ns"], match["plural"], match["name"], match["sub"]
        verb = {
            "GET": "get" if name else "list",
            "POST": "create",
            "PUT": "update",
            "PATCH": "patch",
            "DELETE": "delete",
        }[method]
        resource = f"{plural}/{sub}" if sub else plural
        if (verb, resource) in self.denied or (verb, plural) in self.denied:
            return 403, _status(403, f'{resource} is forbidden: cannot {verb} resource "{resource}" in "{ns}"')
        with self.lock:
            if name is None:
                if method == "GET":
                    items = [
                        copy.deepcopy(o) for (p, n, _), o in sorted(self.objects.items()) if p == plural and n == ns
                    ]
                    kind = RESOURCES[plural][2]
                    return 200, {
                        "apiVersion": RESOURCES[plural][1],
                        "kind": f"{kind}List",
                        "metadata": {"resourceVersion": str(self.version)},
                        "items": items,
                    }
                if method == "POST" and isinstance(body, dict):
                    meta = body.get("metadata", {})
                    new_name = meta.get("name") or (meta.get("generateName", "obj-") + uuid.uuid4().hex[:5])
                    if (plural, ns, new_name) in self.objects:
                        return 409, _status(409, f'{plural} "{new_name}" already exists', "AlreadyExists")
                    return 201, copy.deepcopy(self._store(plural, ns, new_name, body))
                return 405, _status(405, "method not allowed")
            key = (plural, ns, name)
            obj = self.objects.get(key)
            if obj is None:
                return 404, _status(404, f'{plural} "{name}" not found', "NotFound")
            if sub == "scale":
                return self._scale(obj, method, body, content_type)
            if method == "GET":
                return 200, copy.deepcopy(obj)
            if method == "DELETE":
                self.delete(plural, ns, name)
                return 200, _status(200, "deleted", "")
            if method == "PUT" and isinstance(body, dict):
                sent = body.get("metadata", {}).get("resourceVersion")
                if sent and sent != obj["metadata"]["resourceVersion"]:
                    return 409, _conflict(plural, name)
                stored = copy.deepcopy(body)
                stored["metadata"] = {
                    **obj["metadata"],
                    **{k: v for k, v in body.get("metadata", {}).items() if k in ("annotations", "labels")},
                }
                if plural == "deployments":
                    stored["status"] = obj.get("status", {})
                self.objects[key] = stored
                self._bump(stored)
                return 200, copy.deepcopy(stored)
            if method == "PATCH":
                status = self._merge(obj, body, content_type)
                if status is not None:
                    return status
                return 200, copy.deepcopy(obj)
        return 405, _status(405, "method not allowed")

    def _merge(self, obj: dict[str, Any], body: Any, content_type: str | None) -> tuple[int, Any] | None:
        if content_type not in ("application/merge-patch+json", "application/strategic-merge-patch+json"):
            return 415 if content_type != "application/json-patch+json" else 422, _status(
                422, f"the body of a {content_type} patch must be a JSON patch array; send a merge patch"
            )
        if not isinstance(body, dict):
            return 400, _status(400, "the patch body must be a JSON object")
        sent = body.get("metadata", {}).get("resourceVersion")
        if sent and sent != obj["metadata"]["resourceVersion"]:
            return 409, _conflict(obj["kind"].lower() + "s", obj["metadata"]["name"])
        before = json.dumps(obj.get("spec"), sort_keys=True)
        _merge_into(obj, {k: v for k, v in body.items() if k != "status"})
        if json.dumps(obj.get("spec"), sort_keys=True) != before:
            obj["metadata"]["generation"] = obj["metadata"].get("generation", 1) + 1
        self._bump(obj)
        return None

    def _scale(self, obj: dict[str, Any], method: str, body: Any, content_type: str | None) -> tuple[int, Any]:
        if obj["kind"] != "Deployment":
            return 404, _status(404, "no scale subresource", "NotFound")
        if method == "PATCH":
            if content_type not in ("application/merge-patch+json", "application/strategic-merge-patch+json"):
                return 422, _status(422, f"unsupported patch type {content_type} for this body")
            if not isinstance(body, dict):
                return 400, _status(400, "the patch body must be a JSON object")
            sent = body.get("metadata", {}).get("resourceVersion")
            if sent and sent != obj["metadata"]["resourceVersion"]:
                return 409, _conflict("deployments.apps", obj["metadata"]["name"])
            replicas = body.get("spec", {}).get("replicas")
            if replicas is not None:
                if not isinstance(replicas, int) or replicas < 0:
                    return 422, _status(422, "spec.replicas: must be a non-negative integer", "Invalid")
                self._set_spec_replicas(obj, replicas)
        elif method == "PUT":
            if not isinstance(body, dict):
                return 400, _status(400, "bad body")
            sent = body.get("metadata", {}).get("resourceVersion")
            if sent and sent != obj["metadata"]["resourceVersion"]:
                return 409, _conflict("deployments.apps", obj["metadata"]["name"])
            self._set_spec_replicas(obj, int(body.get("spec", {}).get("replicas", 0)))
        elif method != "GET":
            return 405, _status(405, "method not allowed")
        meta = obj["metadata"]
        return 200, {
            "apiVersion": "autoscaling/v1",
            "kind": "Scale",
            "metadata": {
                "name": meta["name"],
                "namespace": meta["namespace"],
                "uid": meta["uid"],
                "resourceVersion": meta["resourceVersion"],
                "creationTimestamp": meta["creationTimestamp"],
            },
            "spec": {"replicas": obj["spec"].get("replicas", 1)},
            "status": {"replicas": obj.get("status", {}).get("replicas", 0), "selector": f"app={meta['name']}"},
        }

    def _set_spec_replicas(self, obj: dict[str, Any], replicas: int) -> None:
        if obj["spec"].get("replicas") != replicas:
            obj["spec"]["replicas"] = replicas
            obj["metadata"]["generation"] = obj["metadata"].get("generation", 1) + 1
            self._bump(obj)
            self._update_status(obj["metadata"]["namespace"], obj["metadata"]["name"], time.time())


def _merge_into(target: dict[str, Any], patch: dict[str, Any]) -> None:
    """RFC 7386 JSON merge patch."""
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            _merge_into(target[key], value)
        else:
            target[key] = copy.deepcopy(value)


def _status(code: int, message: str, reason: str | None = None) -> dict[str, Any]:
    reasons = {
        400: "BadRequest",
        401: "Unauthorized",
        403: "Forbidden",
        404: "NotFound",
        405: "MethodNotAllowed",
        409: "Conflict",
        415: "UnsupportedMediaType",
        422: "Invalid",
        429: "TooManyRequests",
        500: "InternalError",
        503: "ServiceUnavailable",
    }
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success" if code < 300 else "Failure",
        "message": message,
        "reason": reason if reason is not None else reasons.get(code, ""),
        "code": code,
    }


def _conflict(resource: str, name: str) -> dict[str, Any]:
    return _status(
        409,
        f'Operation cannot be fulfilled on {resource} "{name}": the object has been modified; '
        "please apply your changes to the latest version and try again",
        "Conflict",
    )
