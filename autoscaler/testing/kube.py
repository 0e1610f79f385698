"""A real kube-apiserver (with etcd) for tests, as envtest is for Go controllers.

:class:`KubeServer` runs the shared ``start.sh`` (kube-apiserver with RBAC and token authentication) with an
audit log on, or starts the same two servers the same way from envtest's binaries (``KUBEBUILDER_ASSETS``,
as ``setup-envtest`` installs them), and gives what a test needs around it: a namespace of its own,
ServiceAccounts with real tokens (the TokenRequest API), Roles bound to them, Deployments, and
:class:`Kubelet`, which plays the one part the server lacks by writing a Deployment's ``status`` as pods would
become ready.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import shutil
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from autoscaler.testing.servers import Unavailable, free_port, wait_for

KUBE_DIR_ENV = "VLLM_AUTOSCALER_TEST_KUBE_DIR"
ASSETS_ENV = "KUBEBUILDER_ASSETS"  # envtest's convention: a folder holding kube-apiserver and etcd
BINARIES = ("kube-apiserver", "etcd")

# Everything at Metadata (who did what to which object, and the answer); the Lease and scale writes with
# their bodies, so a test can tell who held the Lease and which count was written.
AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [
        {
            "level": "Request",
            "verbs": ["create", "update", "patch"],
            "resources": [
                {"group": "coordination.k8s.io", "resources": ["leases"]},
                {"group": "apps", "resources": ["deployments/scale", "statefulsets/scale"]},
            ],
        },
        {"level": "Metadata"},
    ],
}


def find_kube_dir(start: Path | None = None) -> Path:
    """``$VLLM_AUTOSCALER_TEST_KUBE_DIR`` (a folder with ``start.sh``), else ``$KUBEBUILDER_ASSETS`` (envtest's
    binaries, as ``setup-envtest use -p path`` prints their folder), else ``../shared/kube`` beside the
    checkout (or the working folder)."""
    if os.environ.get(KUBE_DIR_ENV):
        return Path(os.environ[KUBE_DIR_ENV])
    if os.environ.get(ASSETS_ENV):
        assets = Path(os.environ[ASSETS_ENV])
        if not all(os.access(assets / binary, os.X_OK) for binary in BINARIES):
            raise Unavailable(f"{ASSETS_ENV}={assets} holds no executable kube-apiserver and etcd")
        return assets
    roots = [start] if start else []
    roots += [Path(__file__).resolve().parents[2], Path.cwd()]
    for root in roots:
        candidate = root.parent / "shared" / "kube"
        if (candidate / "start.sh").is_file():
            return candidate
    raise Unavailable(
        f"no real kube-apiserver: set {ASSETS_ENV} to envtest's binaries (setup-envtest use -p path), or "
        f"{KUBE_DIR_ENV}, or put shared/kube beside the checkout"
    )


@dataclass(frozen=True)
class AuditEvent:
    """One line of the audit log, the fields tests ask about."""

    stage: str
    user: str
    verb: str
    resource: str  # "deployments/scale", "leases", ...
    group: str
    namespace: str
    name: str
    code: int
    at: float  # stageTimestamp, Unix seconds
    request: dict[str, Any] | None

    @classmethod
    def parse(cls, raw: dict[str, Any]) -> AuditEvent:
        ref = raw.get("objectRef") or {}
        resource = ref.get("resource", "")
        if ref.get("subresource"):
            resource += "/" + ref["subresource"]
        stamp = raw.get("stageTimestamp", "")
        at = _rfc3339(stamp) if stamp else 0.0
        return cls(
            stage=raw.get("stage", ""),
            user=(raw.get("user") or {}).get("username", ""),
            verb=raw.get("verb", ""),
            resource=resource,
            group=ref.get("apiGroup", ""),
            namespace=ref.get("namespace", ""),
            name=ref.get("name", ""),
            code=int((raw.get("responseStatus") or {}).get("code", 0)),
            at=at,
            request=raw.get("requestObject"),
        )

    @property
    def writes(self) -> bool:
        return self.verb in ("create", "update", "patch", "delete", "deletecollection")


def _rfc3339(text: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _advertise(etcd: Path, url: str) -> list[str]:
    """The client URL to advertise, for an etcd that asks for it (etcd's own server does, when it listens on a
    given URL; the shared one, etcd's ``embed`` behind a small ``main``, takes no such flag)."""
    usage = subprocess.run([str(etcd), "--help"], capture_output=True, text=True, timeout=30, check=False)
    return ["--advertise-client-urls", url] if "advertise-client-urls" in usage.stdout + usage.stderr else []


def _get(url: str, headers: dict[str, str] | None = None, ca: str | None = None) -> str:
    """The body of a GET, or "" while the server is not answering."""
    try:
        answer = requests.get(url, headers=headers, verify=ca or True, timeout=2)
    except requests.RequestException:
        return ""
    return answer.text if answer.status_code == 200 else ""


class KubeServer:
    """One kube-apiserver and etcd, started by the shared ``start.sh``, stopped by :meth:`stop`."""

    def __init__(self, workdir: Path, kube_dir: Path | None = None) -> None:
        self.kube_dir = kube_dir or find_kube_dir()
        self.workdir = workdir
        self.env: dict[str, str] = {}
        self.audit_log = workdir / "audit.log"
        self._admin: client.ApiClient | None = None
        self._processes: list[subprocess.Popen[bytes]] = []  # started from envtest's binaries, not start.sh

    def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        policy = self.workdir / "audit-policy.yaml"
        policy.write_text(yaml.safe_dump(AUDIT_POLICY))
        if not (self.kube_dir / "start.sh").is_file():
            self._start_binaries(self.kube_dir, policy)
            return
        bin_dir = Path(os.environ.get("KUBE_BIN_DIR", str(Path.home() / ".cache" / "kube-test-bin")))
        environment = {
            **os.environ,
            "KUBE_APISERVER_ARGS": f"--audit-policy-file={policy} --audit-log-path={self.audit_log} "
            "--audit-log-mode=blocking --audit-log-maxsize=0",
            "KUBE_BIN_DIR": str(bin_dir),
        }
        self._unpack(bin_dir, environment)
        done = self._script("start_kube >&2 && env -0", environment, 240)
        if done.returncode != 0:
            raise RuntimeError(f"start_kube failed: {done.stderr.decode(errors='replace')[-2000:]}")
        for entry in done.stdout.split(b"\0"):
            key, _, value = entry.decode(errors="replace").partition("=")
            if key.startswith("KUBE"):
                self.env[key] = value

    def _script(self, commands: str, environment: dict[str, str], timeout: float) -> subprocess.CompletedProcess[bytes]:
        """``commands`` run by bash after sourcing the shared ``start.sh``."""
        return subprocess.run(
            ["bash", "-c", f'. "{self.kube_dir / "start.sh"}"; {commands}'],
            env=environment,
            capture_output=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )

    def _unpack(self, bin_dir: Path, environment: dict[str, str]) -> None:
        """Unpack the binaries once, under a lock, before any start.

        ``start.sh`` unpacks through one ``.tmp`` file per binary, so two servers starting at once on a fresh
        machine (one per xdist worker) race on it: one renames the file away under the other's ``chmod``.
        """
        bin_dir.parent.mkdir(parents=True, exist_ok=True)
        with open(f"{bin_dir}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            done = self._script("_kube_unpack", environment, 240)
        if done.returncode != 0:
            raise RuntimeError(f"unpacking the kube binaries failed: {done.stderr.decode(errors='replace')[-2000:]}")

    def _start_binaries(self, assets: Path, policy: Path) -> None:
        """What ``start.sh``'s ``start_kube`` does, from a folder of binaries: etcd and kube-apiserver on
        loopback, a self-signed serving certificate, token authentication for an admin and an unprivileged
        identity, RBAC on; the same ``KUBE_*`` values in :attr:`env`. Over 60 lines: the servers' flags, one a
        line, as ``start.sh`` gives them."""
        folder = Path(tempfile.mkdtemp(prefix="kube-", dir=self.workdir))
        ports: list[int] = []
        while len(ports) < 3:
            if (port := free_port()) not in ports:
                ports.append(port)
        etcd_port, peer_port, api_port = ports
        key, cert, sa_key, sa_pub = (folder / n for n in ("serving.key", "serving.crt", "sa.key", "sa.pub"))
        san = "subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes.default.svc"
        for command in (
            [
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
                "-days",
                "30",
                "-keyout",
                str(key),
                "-out",
                str(cert),
                "-subj",
                "/CN=kube-apiserver",
                "-addext",
                san,
            ],
            ["ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", str(sa_key)],
            ["ec", "-in", str(sa_key), "-pubout", "-out", str(sa_pub)],
        ):
            subprocess.run(["openssl", *command], check=True, capture_output=True, stdin=subprocess.DEVNULL)
        admin_token, sa_token = secrets.token_hex(16), secrets.token_hex(16)
        sa_user = os.environ.get("KUBE_SA_USER", "system:serviceaccount:llm:autoscaler")
        (folder / "tokens.csv").write_text(
            f'{admin_token},admin,uid-admin,"system:masters"\n'
            f'{sa_token},{sa_user},uid-sa,"system:serviceaccounts,system:serviceaccounts:{sa_user.split(":")[2]}"\n'
        )
        etcd_url = f"http://127.0.0.1:{etcd_port}"
        self._processes.append(
            self._spawn(
                folder / "etcd.log",
                [
                    str(assets / "etcd"),
                    "--data-dir",
                    str(folder / "etcd"),
                    "--listen-client-urls",
                    etcd_url,
                    *_advertise(assets / "etcd", etcd_url),
                    "--listen-peer-urls",
                    f"http://127.0.0.1:{peer_port}",
                    "--unsafe-no-fsync",
                    "--log-level",
                    "warn",
                ],
            )
        )
        wait_for(lambda: '"health":"true"' in _get(f"{etcd_url}/health"), 30, "etcd to be healthy")
        self._processes.append(
            self._spawn(
                folder / "apiserver.log",
                [
                    str(assets / "kube-apiserver"),
                    f"--etcd-servers={etcd_url}",
                    "--bind-address=127.0.0.1",
                    "--advertise-address=127.0.0.1",
                    f"--secure-port={api_port}",
                    f"--cert-dir={folder / 'certs'}",
                    f"--tls-cert-file={cert}",
                    f"--tls-private-key-file={key}",
                    "--authorization-mode=RBAC",
                    f"--token-auth-file={folder / 'tokens.csv'}",
                    "--service-account-issuer=https://kubernetes.default.svc",
                    f"--service-account-key-file={sa_pub}",
                    f"--service-account-signing-key-file={sa_key}",
                    "--service-cluster-ip-range=10.96.0.0/24",
                    "--profiling=false",
                    f"--audit-policy-file={policy}",
                    f"--audit-log-path={self.audit_log}",
                    "--audit-log-mode=blocking",
                    "--audit-log-maxsize=0",
                ],
            )
        )
        url = f"https://127.0.0.1:{api_port}"
        self.env = {"KUBE_URL": url, "KUBE_CA": str(cert), "KUBE_ADMIN_TOKEN": admin_token, "KUBE_DIR": str(folder)}
        self.env |= {"KUBE_SA_TOKEN": sa_token, "KUBE_SA_USER": sa_user, "KUBE_ETCD_URL": etcd_url}
        headers = {"Authorization": f"Bearer {admin_token}"}
        wait_for(lambda: _get(f"{url}/readyz", headers, str(cert)) == "ok", 120, "kube-apiserver to be ready")
        # kubectl apply validates against the OpenAPI document, which serves a few seconds after /readyz
        wait_for(lambda: _get(f"{url}/openapi/v2", headers, str(cert)), 120, "the OpenAPI document")
        self.env["KUBECONFIG"] = str(self.kubeconfig(folder / "admin.kubeconfig", admin_token))
        self.env["KUBE_SA_KUBECONFIG"] = str(self.kubeconfig(folder / "sa.kubeconfig", sa_token))

    def _spawn(self, log: Path, command: list[str]) -> subprocess.Popen[bytes]:
        with log.open("ab") as output:
            return subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def stop(self) -> None:
        if self._processes:
            for process in reversed(self._processes):  # the API server, then etcd, as stop_kube does
                process.terminate()
                try:
                    process.wait(15)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait(5)
            self._processes = []
            shutil.rmtree(self.env.get("KUBE_DIR", ""), ignore_errors=True)
            self.env = {}
            return
        if not self.env:
            return
        self._script("stop_kube", {**os.environ, **self.env}, 60)
        self.env = {}

    # -- access ---------------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        return self.env["KUBE_URL"]

    @property
    def admin_kubeconfig(self) -> Path:
        return Path(self.env["KUBECONFIG"])

    @property
    def ca_file(self) -> str:
        return self.env["KUBE_CA"]

    def admin(self) -> client.ApiClient:
        if self._admin is None:
            self._admin = self.api_for(self.env["KUBE_ADMIN_TOKEN"])
        return self._admin

    def api_for(self, token: str, url: str | None = None) -> client.ApiClient:
        configuration = client.Configuration()
        configuration.host = url or self.url
        configuration.ssl_ca_cert = self.ca_file
        configuration.api_key = {"authorization": f"Bearer {token}"}
        configuration.retries = False
        return client.ApiClient(configuration)

    def kubeconfig(self, path: Path, token: str, url: str | None = None) -> Path:
        """A kubeconfig for ``token``; ``url`` points it elsewhere (a fault proxy in front of this server)."""
        cluster: dict[str, Any] = {"server": url or self.url}
        if cluster["server"].startswith("https:"):
            cluster["certificate-authority"] = self.ca_file
        path.write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "current-context": "test",
                    "clusters": [{"name": "test", "cluster": cluster}],
                    "users": [{"name": "test", "user": {"token": token}}],
                    "contexts": [{"name": "test", "context": {"cluster": "test", "user": "test"}}],
                }
            )
        )
        return path

    def kubectl(self, *args: str, kubeconfig: Path | None = None) -> str:
        """kubectl's standard output; a failure raises with its standard error."""
        done = subprocess.run(
            ["kubectl", "--kubeconfig", str(kubeconfig or self.admin_kubeconfig), *args],
            capture_output=True,
            text=True,
            timeout=120,
            stdin=subprocess.DEVNULL,
        )
        if done.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)}: {done.stderr.strip()}")
        return done.stdout

    # -- objects --------------------------------------------------------------------------------------

    def create_namespace(self, prefix: str = "t") -> str:
        name = f"{prefix}-{secrets.token_hex(4)}"
        client.CoreV1Api(self.admin()).create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
        return name

    def delete_namespace(self, name: str) -> None:
        try:
            client.CoreV1Api(self.admin()).delete_namespace(name)
        except ApiException as exc:
            if exc.status != 404:
                raise

    def service_account_token(self, namespace: str, name: str, seconds: int = 3600) -> str:
        """A real ServiceAccount token from the TokenRequest API (creating the account if needed)."""
        core = client.CoreV1Api(self.admin())
        try:
            core.create_namespaced_service_account(
                namespace, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name=name))
            )
        except ApiException as exc:
            if exc.status != 409:
                raise
        request = client.AuthenticationV1TokenRequest(
            spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=seconds)
        )
        answer = core.create_namespaced_service_account_token(name, namespace, request)
        return str(answer.status.token)  # type: ignore[union-attr]

    def grant(self, namespace: str, account: tuple[str, str], rules: list[dict[str, Any]], name: str) -> None:
        """A Role with ``rules`` in ``namespace``, bound to the ServiceAccount ``(namespace, name)``."""
        rbac = client.RbacAuthorizationV1Api(self.admin())
        role: Any = {"metadata": {"name": name}, "rules": rules}
        rbac.create_namespaced_role(namespace, role)
        binding: Any = {
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": [{"kind": "ServiceAccount", "namespace": account[0], "name": account[1]}],
        }
        rbac.create_namespaced_role_binding(namespace, binding)

    def revoke(self, namespace: str, name: str) -> None:
        rbac = client.RbacAuthorizationV1Api(self.admin())
        rbac.delete_namespaced_role_binding(name, namespace)
        rbac.delete_namespaced_role(name, namespace)

    def create_deployment(
        self,
        namespace: str,
        name: str,
        replicas: int,
        annotations: dict[str, str] | None = None,
        ready: int | None = None,
    ) -> None:
        labels = {"app": name}
        body: Any = {
            "metadata": {"name": name, "annotations": annotations or {}},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {"containers": [{"name": "vllm", "image": "vllm/vllm-openai:v0.18.0"}]},
                },
            },
        }
        client.AppsV1Api(self.admin()).create_namespaced_deployment(namespace, body)
        if ready is not None or replicas:
            set_status(self.admin(), namespace, name, replicas, replicas if ready is None else ready)

    def replicas(self, namespace: str, name: str) -> int:
        scale: Any = client.AppsV1Api(self.admin()).read_namespaced_deployment_scale(name, namespace)
        return int(scale.spec.replicas or 0)

    def set_replicas(self, namespace: str, name: str, replicas: int) -> None:
        """As a person would with ``kubectl scale``."""
        client.AppsV1Api(self.admin()).patch_namespaced_deployment_scale(
            name, namespace, {"spec": {"replicas": replicas}}
        )

    def audit(self, namespace: str | None = None, user: str | None = None) -> list[AuditEvent]:
        """The audit log's completed requests so far, optionally those on objects in ``namespace`` or by ``user``; a
        watch once, as it started (it completes only when it ends, minutes later)."""
        events: list[AuditEvent] = []
        if not self.audit_log.exists():
            return events
        for line in self.audit_log.read_text(errors="replace").splitlines():
            try:
                raw = json.loads(line)
            except ValueError:
                continue
            event = AuditEvent.parse(raw)
            answered = "ResponseStarted" if event.verb == "watch" else "ResponseComplete"
            if event.stage not in (answered, "Panic"):
                continue
            if namespace is not None and event.namespace != namespace:
                continue
            if user is not None and event.user != user:
                continue
            events.append(event)
        return events


def rbac_rules(paths: list[Path]) -> list[dict[str, Any]]:
    """Every rule of the Roles and ClusterRoles in these manifest files, in order."""
    rules: list[dict[str, Any]] = []
    for path in paths:
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc["kind"] in ("Role", "ClusterRole"):
                rules += doc["rules"]
    return rules


def service_account_user(namespace: str, name: str) -> str:
    return f"system:serviceaccount:{namespace}:{name}"


def set_status(api: client.ApiClient, namespace: str, name: str, replicas: int, ready: int) -> None:
    """Write a Deployment's status as the kubelet and the Deployment controller would."""
    ready = min(ready, replicas)
    client.AppsV1Api(api).patch_namespaced_deployment_status(
        name,
        namespace,
        {
            "status": {
                "replicas": replicas,
                "updatedReplicas": replicas,
                "readyReplicas": ready,
                "availableReplicas": ready,
            }
        },
    )


class Kubelet:
    """Plays the kubelet and the Deployment controller for the Deployments of one namespace: after a scale
    up, the new replicas become ready ``startup_delay`` seconds later; a scale down is ready at once."""

    def __init__(self, api: client.ApiClient, namespace: str, startup_delay: float = 0.0, period: float = 0.1) -> None:
        self.api, self.namespace, self.delay, self.period = api, namespace, startup_delay, period
        self.stopping = threading.Event()
        self.raised_at: dict[str, tuple[int, float]] = {}
        self.thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Kubelet:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        self.thread.join(5)

    def _run(self) -> None:
        apps = client.AppsV1Api(self.api)
        while not self.stopping.wait(self.period):
            try:
                listed = apps.list_namespaced_deployment(self.namespace)
            except Exception:  # the server stopping under the test
                continue
            for deployment in listed.items:
                self._step(deployment)

    def _step(self, deployment: Any) -> None:
        name = deployment.metadata.name
        want = int(deployment.spec.replicas or 0)
        status = deployment.status
        ready = int(status.ready_replicas or 0) if status else 0
        replicas = int(status.replicas or 0) if status else 0
        now = time.monotonic()
        if want > ready:
            since = self.raised_at.get(name)
            if since is None or since[0] != want:
                self.raised_at[name] = since = (want, now)
            target_ready = want if now - since[1] >= self.delay else ready
        else:
            target_ready = want
            self.raised_at.pop(name, None)
        if (replicas, ready) != (want, target_ready):
            with contextlib.suppress(ApiException):
                set_status(self.api, self.namespace, name, want, target_ready)
