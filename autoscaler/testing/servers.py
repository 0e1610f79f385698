"""Real servers for tests and benchmarks: Prometheus (Debian's binary), a vLLM-shaped exporter, the daemon
as its own process."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import requests

from autoscaler.server import OneLineErrorsServer, send


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def wait_for(predicate: Callable[[], Any], timeout: float = 30.0, what: str = "condition") -> Any:
    """Poll a real server until ``predicate`` holds; the only waiting the tests do."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout} s waiting for {what} (last: {last!r})")


def serve_page(
    render: Callable[[], bytes], content_type: str, port: int = 0
) -> tuple[ThreadingHTTPServer, threading.Thread]:
    """A local HTTP server that answers every GET with ``render()``, serving on a daemon thread (port 0: any free)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            send(self, 200, render(), content_type)

        def log_message(self, *args: Any) -> None:
            pass

    server = OneLineErrorsServer(("127.0.0.1", port), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    return server, thread


class Unavailable(RuntimeError):
    """A real server this kit needs is not on the machine; tests skip on it (CI fails)."""


def prometheus_binary() -> str:
    path = shutil.which("prometheus")
    if path is None:
        raise Unavailable("the prometheus binary is not installed (apt-get install prometheus)")
    return path


def start_daemon(
    policy: Path, kubeconfig: Path, port: int, log: Path, *args: str, **env: str
) -> subprocess.Popen[bytes]:
    """``vllm-autoscaler run`` as its own process, serving /metrics and health on loopback ``port``, its
    output in ``log``."""
    environment = {
        **os.environ,
        "VLLM_AUTOSCALER_METRICS_PORT": str(port),
        "VLLM_AUTOSCALER_BIND_ADDRESS": "127.0.0.1",
        **env,
    }
    with log.open("ab") as output:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "autoscaler",
                "run",
                "--config",
                str(policy),
                "--kubeconfig",
                str(kubeconfig),
                *args,
            ],
            env=environment,
            stdout=output,
            stderr=subprocess.STDOUT,
        )


class VllmExporter:
    """Serves ``/metrics`` in the Prometheus text format from series the test sets, or a whole ``page``
    (a simulated replica's exposition, ``simulations.exposition``)."""

    def __init__(self, page: str | None = None) -> None:
        self.page = page
        self.series: dict[tuple[str, tuple[tuple[str, str], ...]], float | Callable[[], float]] = {}
        self.pods: dict[tuple[str, str], list[str]] = {}
        self.stamps: dict[tuple[str, str], float] = {}  # (namespace, pod): the samples' own time, Unix seconds
        self.lock = threading.Lock()
        self.server, self.thread = serve_page(lambda: self.render().encode(), "text/plain; version=0.0.4", free_port())
        self.port = self.server.server_address[1]

    def set(self, metric: str, value: float | Callable[[], float], **labels: str) -> None:
        """A value, or a function of time (for counters that grow)."""
        with self.lock:
            self.series[(metric, tuple(sorted(labels.items())))] = value

    def remove(self, metric: str) -> None:
        with self.lock:
            self.series = {k: v for k, v in self.series.items() if k[0] != metric}

    def set_pods(
        self,
        namespace: str,
        deployment: str,
        waiting: list[float],
        kv: list[float] | None = None,
        old_kv: list[float] | None = None,
        model: str = "meta-llama/Meta-Llama-3-70B-Instruct",
        stateful: bool = False,
        stamped_at: float | list[float | None] | None = None,
        running: list[float] | None = None,
        prompt_tokens: float = 0.0,
    ) -> None:
        """One vLLM pod per list entry, named as a Deployment (or a StatefulSet) names its pods; the
        workload's pods set before are replaced. ``stamped_at`` exposes every sample with that timestamp
        (Unix seconds), as an exporter that froze then would (one a pod if a list; None: not frozen). Each pod
        runs 4 requests unless ``running`` says otherwise, and its prompt-token counter stands at
        ``prompt_tokens`` (a rate of 0)."""
        names = [
            f"{deployment}-{i}" if stateful else f"{deployment}-7d9f8c6b5-{chr(97 + i)}x{i}z9"
            for i in range(len(waiting))
        ]
        with self.lock:
            old = set(self.pods.get((namespace, deployment), []))
            self.series = {
                k: v
                for k, v in self.series.items()
                if not (k[0].startswith("vllm:") and ("namespace", namespace) in k[1] and dict(k[1]).get("pod") in old)
            }
            self.pods[(namespace, deployment)] = names
            stamps = stamped_at if isinstance(stamped_at, list) else [stamped_at] * len(names)
            for pod, stamp in zip(names, stamps, strict=True):
                if stamp is None:
                    self.stamps.pop((namespace, pod), None)
                else:
                    self.stamps[(namespace, pod)] = stamp
        for i, pod in enumerate(names):
            labels = {"namespace": namespace, "pod": pod, "model_name": model, "engine": "0"}
            self.set("vllm:num_requests_waiting", waiting[i], **labels)
            self.set("vllm:num_requests_running", 4.0 if running is None else running[i], **labels)
            self.set("vllm:prompt_tokens_total", prompt_tokens, **labels)
            if kv is not None:
                self.set("vllm:kv_cache_usage_perc", kv[i], **labels)
            if old_kv is not None:
                self.set("vllm:gpu_cache_usage_perc", old_kv[i], **labels)
        for metric in ("kube_deployment_status_replicas_ready", "kube_deployment_spec_replicas"):
            self.set(metric, float(len(waiting)), namespace=namespace, deployment=deployment)

    def render(self) -> str:
        if self.page is not None:
            return self.page
        with self.lock:
            items = sorted(self.series.items())
        lines = []
        for (metric, labels), value in items:
            text = ",".join(f'{k}="{v}"' for k, v in labels)
            number = value() if callable(value) else value
            found = dict(labels)
            stamp = self.stamps.get((found.get("namespace", ""), found.get("pod", "")))
            suffix = "" if stamp is None else f" {int(stamp * 1000)}"
            lines.append(f"{metric}{{{text}}} {number!r}{suffix}")
        return "\n".join(lines) + "\n"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class PrometheusServer:
    """The real ``prometheus`` binary on loopback, scraping the given targets (ports) every ``scrape_s`` seconds
    (one by default: a test waits no longer than that for a value); a target given with labels gets them on every
    series, as Kubernetes service discovery gives a pod's ``namespace`` and ``pod``."""

    def __init__(self, workdir: Path, targets: list[int] | dict[int, dict[str, str]], scrape_s: int = 1) -> None:
        self.binary = prometheus_binary()
        self.workdir = workdir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.config = workdir / "prometheus.yml"
        labelled = targets if isinstance(targets, dict) else {t: {} for t in targets}
        groups = "".join(
            f"      - targets: ['127.0.0.1:{port}']\n"
            + (f"        labels: {{{', '.join(f'{k}: {v!r}' for k, v in labels.items())}}}\n" if labels else "")
            for port, labels in labelled.items()
        )
        self.config.write_text(
            f"global:\n  scrape_interval: {scrape_s}s\n  evaluation_interval: 1s\n"
            "scrape_configs:\n  - job_name: vllm\n    honor_labels: true\n"
            f"    static_configs:\n{groups}"
        )
        self.process: subprocess.Popen[bytes] | None = None
        self.log = workdir / "prometheus.log"

    def start(self) -> None:
        handle = self.log.open("ab")
        self.process = subprocess.Popen(
            [
                self.binary,
                f"--config.file={self.config}",
                f"--storage.tsdb.path={self.workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--storage.tsdb.retention.time=1h",
            ],
            stdout=handle,
            stderr=subprocess.STDOUT,
        )
        wait_for(self.ready, 30, "Prometheus to be ready")

    def ready(self) -> bool:
        if self.process is not None and self.process.poll() is not None:
            raise AssertionError(f"prometheus exited: {self.log.read_text()[-2000:]}")
        try:
            return requests.get(f"{self.url}/-/ready", timeout=1).status_code == 200
        except requests.RequestException:
            return False

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        self.process = None
