"""Benchmarks of the daemon, printed as JSON: ``python -m simulations.bench`` (from the repository root).

* ``tick_1000_*``: one steady tick over 1,000 workloads in four namespaces, against the Kubernetes API
  emulator and a real Prometheus (Debian's binary) scraping 2,000 vLLM pods. The emulator and the exporter
  run in a child process, so the CPU time and peak RSS are the daemon's alone.
* ``reaction_s``: the real daemon process (``vllm-autoscaler run``, 5 s interval) against the emulator and
  Prometheus scraping every second: from the moment the exporter's waiting count steps up to the moment the
  scale PATCH arrives, averaged over several steps at random phases. ``keda_sum_reaction_s`` is the same
  steps through KEDA's timing (the HPA re-reads the metric every 15 s, after the same 1 s scrape).
* ``decisions_per_s``: the pure decision pipeline; ``history_entries_after_day``: what one workload's
  behavior history holds after a day of 15 s ticks (bounded by the windows, not by time).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import random
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import numpy as np
import requests

from autoscaler.logs import configure

NAMESPACES = ("llm-a", "llm-b", "llm-c", "llm-d")
HPA_SYNC_S = 15.0


def _workloads(count: int) -> list[tuple[str, str]]:
    return [(NAMESPACES[i % len(NAMESPACES)], f"vllm-model-{i}") for i in range(count)]


def _serve(count: int, conn: Connection) -> None:
    """The child process: the API emulator with ``count`` Deployments, and an exporter for their pods."""
    from tests.k8s_emulator import KubernetesEmulator
    from tests.servers import VllmExporter

    emulator = KubernetesEmulator()
    exporter = VllmExporter()
    for namespace, name in _workloads(count):
        emulator.add_deployment(namespace, name, 2)
        for pod in range(2):
            labels = {"namespace": namespace, "pod": f"{name}-5d8f7c6b9-p{pod}x7k", "model_name": "m"}
            exporter.set("vllm:num_requests_waiting", 2.0, **labels)  # 4 per workload: its 2 replicas, steady
            exporter.set("vllm:kv_cache_usage_perc", 0.5, **labels)
    conn.send((emulator.url, emulator.token, exporter.port))
    conn.recv()
    emulator.close()
    exporter.close()


def _kubeconfig(path: Path, url: str, token: str) -> Path:
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "bench",
                "clusters": [{"name": "bench", "cluster": {"server": url}}],
                "users": [{"name": "bench", "user": {"token": token}}],
                "contexts": [{"name": "bench", "context": {"cluster": "bench", "user": "bench"}}],
            }
        )
    )
    return path


def _policy(prometheus_url: str, targets: list[tuple[str, str]], interval: int = 15) -> dict[str, Any]:
    return {
        "interval": interval,
        "prometheus": {"url": prometheus_url, "timeout": 10},
        "workloads": [
            {
                "target": {"namespace": namespace, "name": name},
                "minReplicas": 1,
                "maxReplicas": 20,
                "metrics": [
                    {"name": "num_requests_waiting", "target": {"type": "AverageValue", "value": 2}},
                    {"name": "kv_cache_usage_perc", "target": {"type": "Value", "value": 0.85}},
                ],
            }
            for namespace, name in targets
        ],
    }


def bench_tick(count: int, workdir: Path) -> dict[str, Any]:
    from autoscaler.actuators.kubernetes import KubernetesActuator, api_client
    from autoscaler.controller import Controller
    from autoscaler.metrics.prometheus import PrometheusSource
    from autoscaler.policy_file import parse_policy_document
    from tests.servers import PrometheusServer, wait_for

    parent, child = multiprocessing.Pipe()
    server = multiprocessing.Process(target=_serve, args=(count, child), daemon=True)
    server.start()
    api_url, token, exporter_port = parent.recv()
    prometheus = PrometheusServer(workdir, [exporter_port])
    prometheus.start()
    try:
        document = parse_policy_document(_policy(prometheus.url, _workloads(count)))
        source = PrometheusSource(document.prometheus)
        actuator = KubernetesActuator(api_client(str(_kubeconfig(workdir / "kubeconfig", api_url, token))))
        controller = Controller(None, document, source, actuator)
        last = document.workloads[-1].key
        wait_for(
            lambda: controller.observer.collect(time.time())[last].values["kv_cache_usage_perc"] == 0.5,
            60,
            "Prometheus to hold every pod's series",
        )
        controller.tick()  # warm: connection pools, the owner cache
        requests_before = source.requests_sent
        wall, cpu = time.perf_counter(), time.process_time()
        lines = controller.tick()
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        writes = sum(1 for line in lines if line.get("applied"))
        return {
            "tick_1000_wall_s": round(wall, 3),
            "tick_1000_cpu_s": round(cpu, 3),
            "tick_1000_prometheus_requests": source.requests_sent - requests_before,
            "tick_1000_workloads": len(lines),
            "tick_1000_scale_writes": writes,
            "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        }
    finally:
        prometheus.stop()
        parent.send("stop")
        server.join(10)


def bench_reaction(workdir: Path, trials: int, seed: int) -> dict[str, Any]:
    from tests.k8s_emulator import KubernetesEmulator
    from tests.servers import PrometheusServer, VllmExporter, free_port, start_daemon, wait_for

    rng = random.Random(seed)
    emulator, exporter = KubernetesEmulator(), VllmExporter()
    namespace, name = "llm-serving", "vllm-llama3-70b"
    emulator.add_deployment(namespace, name, 2)
    exporter.set_pods(namespace, name, waiting=[2, 2])
    prometheus = PrometheusServer(workdir, [exporter.port])
    prometheus.start()
    policy = workdir / "reaction-policy.json"
    policy.write_text(json.dumps(_policy(prometheus.url, [(namespace, name)], interval=5)))
    port = free_port()
    daemon = start_daemon(
        policy,
        emulator.kubeconfig(workdir / "kubeconfig"),
        port,
        workdir / "daemon.log",
        VLLM_AUTOSCALER_LEADER_ELECT="false",
    )
    reactions: list[float] = []
    keda: list[float] = []
    try:

        def ready() -> bool:
            try:
                return requests.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200
            except requests.RequestException:
                return False

        wait_for(ready, 60, "the daemon to be ready")
        for _ in range(trials):
            time.sleep(16 + rng.uniform(0, 5))  # past the scale-up period, at a random phase of the interval
            seen = len(emulator.scale_writes())
            stepped = time.time()
            exporter.set_pods(namespace, name, waiting=[20, 20])

            def patched(seen: int = seen) -> Any:
                return next((w for w in emulator.scale_writes()[seen:] if w.status == 200), None)

            write = wait_for(patched, 60, "the scale PATCH")
            reactions.append(write.at - stepped)
            scrape = rng.uniform(0, 1.0)  # the same 1 s scrape, then KEDA waits for the HPA's next sync
            keda.append(scrape + rng.uniform(0, HPA_SYNC_S))
            exporter.set_pods(namespace, name, waiting=[2, 2])
            emulator.set_replicas_by_hand(namespace, name, 2)
    finally:
        daemon.terminate()
        try:
            daemon.wait(20)
        except subprocess.TimeoutExpired:
            daemon.send_signal(signal.SIGUSR1)
            time.sleep(1)
            daemon.kill()
            print((workdir / "daemon.log").read_text()[-6000:], file=sys.stderr)
            raise
        prometheus.stop()
        emulator.close()
        exporter.close()
    return {
        "reaction_s": round(float(np.mean(reactions)), 2),
        "reaction_max_s": round(max(reactions), 2),
        "reaction_trials": [round(r, 2) for r in reactions],
        "keda_sum_reaction_s": round(float(np.mean(keda)), 2),
        "reaction_target_s": 1.0 + 5.0 + 1.0,
    }


def bench_pipeline(seed: int) -> dict[str, Any]:
    from autoscaler.policy_file import parse_policy_document
    from policies.base import Observation

    document = parse_policy_document(_policy("http://unused:9090", [("llm", "vllm")]))
    rng = np.random.default_rng(seed)
    waiting = rng.gamma(2.0, 6.0, size=200_000)
    kv = rng.uniform(0.2, 1.0, size=200_000)
    results: dict[str, Any] = {}
    for policy_type in ("threshold", "pid", "predictive"):
        raw = document.model_dump(by_alias=True, exclude_none=True, mode="json")
        raw["workloads"][0]["policy"] = {"type": policy_type}
        doc = parse_policy_document(raw)
        decider = doc.decider(doc.workloads[0])
        current = 2
        started = time.perf_counter()
        for i in range(len(waiting)):
            decision = decider.decide(
                Observation(
                    15.0 * i, current, {"num_requests_waiting": float(waiting[i]), "kv_cache_usage_perc": float(kv[i])}
                )
            )
            decider.applied(decision)
            current = decision.desired
            if i == 86_400 // 15:
                results[f"history_entries_after_day_{policy_type}"] = decider.behavior_state.history_size()
        results[f"decisions_per_s_{policy_type}"] = round(len(waiting) / (time.perf_counter() - started))
    results["decisions_per_s"] = results["decisions_per_s_threshold"]
    results["history_entries_after_day"] = max(v for k, v in results.items() if k.startswith("history_entries"))
    return results


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m simulations.bench", description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", type=int, default=1000)
    parser.add_argument("--trials", type=int, default=4, help="load steps for the reaction time")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--skip", action="append", default=[], choices=["tick", "reaction", "pipeline"])
    args = parser.parse_args()
    if shutil.which("prometheus") is None and not {"tick", "reaction"} <= set(args.skip):
        print("the prometheus binary is needed (apt-get install prometheus)", file=sys.stderr)
        return 2
    # The daemon's JSON log lines are rendered as in production, into the void.
    configure("json", "info", open(os.devnull, "w"))  # noqa: SIM115
    out: dict[str, Any] = {"machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]}}
    with tempfile.TemporaryDirectory() as tmp:
        if "pipeline" not in args.skip:
            out.update(bench_pipeline(args.seed))
        if "tick" not in args.skip:
            (Path(tmp) / "tick").mkdir()
            out.update(bench_tick(args.workloads, Path(tmp) / "tick"))
        if "reaction" not in args.skip:
            (Path(tmp) / "reaction").mkdir()
            out.update(bench_reaction(Path(tmp) / "reaction", args.trials, args.seed))
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
