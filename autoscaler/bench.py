"""Benchmarks of the daemon, printed as JSON: ``python -m autoscaler.bench`` (``--kube-dir`` names the real
kube-apiserver's start script folder, by default ``../shared/kube`` beside the checkout).

* ``tick_*``: ``STEADY_TICKS`` steady ticks over ``--workloads`` workloads (by default 1,000) a hundred to a namespace,
  against the real kube-apiserver and a real Prometheus (Debian's binary) scraping two vLLM pods a workload every
  ``SCRAPE_S``: the median of their wall and CPU times (``tick_wall_max_s`` the slowest: one tick's time moves with
  whatever else the two shared cores run then), the most Prometheus requests and LISTs one of them made
  (``tick_lists``), once every namespace's watch is open and every workload's stabilization window is full, as in a
  daemon that has run for that window (none of the namespaces changed: no LIST; every tick an interval after the last on
  the decision clock, each settled as the daemon settles it: ``_fill_windows``). The servers, the exporter and the
  making of the Deployments run in other processes, so the CPU time and memory are the daemon's alone:
  ``daemon_rss_mib`` is the process's resident memory with that one controller after the burst below and a heartbeat's
  tick (every record built again, with its full window, as every 5 minutes), ``peak_rss_mib`` the highest resident
  memory of a daemon's process: this one's from the controller's start on (its first tick, the steady ticks, the burst
  and the heartbeat), or the warm-up's below, whichever is higher (``warm_up_peak_rss_mib``; ``_reset_peak``; the pure
  benchmarks run apart, in a child). ``cluster_made_s`` is the making of the Deployments, eight at a time.
* ``state_*``: the state store of that controller (``autoscaler.state``, a ConfigMap in ``default``): the shards
  it took, and the ConfigMap writes of the steady ticks (``state_writes_idle_tick``: none when nothing changed).
* ``burst_*``: then a tenth of the workloads (1,000 of 10,000) see ten times the waiting requests at once: the
  scale-ups the next tick wrote, and its wall time, decisions and writes together.
* ``reaction_s``: the real daemon process (``vllm-autoscaler run``, 5 s interval) against the real server and
  Prometheus scraping every second: from the moment the exporter's waiting count steps up to the moment the
  server accepted the scale PATCH (its audit log's timestamp), averaged over several steps at random
  phases. ``keda_sum_reaction_s`` is the same
  steps through KEDA's timing (the HPA re-reads the metric every 15 s, after the same 1 s scrape).
* ``activation_s``: in the same daemon, a second workload that may go to zero (``minReplicas: 0``): once the
  daemon has taken it to zero by itself, from the moment the exporter's gateway queue steps above the
  activation threshold to the moment the server accepted the wake-up's scale PATCH, over several steps.
* ``warm_up_*``: before that controller, in a process of its own (``_warm_up_apart``), a controller of the same
  workloads given the policy a file given only an slo is written with, ticking back to back from its start until
  every workload has read its history (``autoscaler.warm_up``) and decides: the ticks it takes, the longest, their
  wall time and Prometheus requests.
  Prometheus holds only the minutes the bench has run, so each range query's answer is short; a day of samples
  adds the replay of ``warm_up_fleet_s`` (a day, the budget's window) for every thousand workloads.
* ``decisions_per_s``: the pure decision pipeline; ``history_entries_after_day``: what one workload's
  behavior history holds after a day of 15 s ticks (bounded by the windows, not by time).
* ``warm_up_s``: the replay of a day of history (the budget's window) into the policy a file given only an slo is
  written with (``bench_warm_up``), what a starting daemon spends per such workload before its first decision;
  ``warm_up_fleet_s`` the same for a thousand such workloads, a hundred to a namespace, read by series and
  namespaces in ``warm_up_fleet_queries`` range queries (``FleetHistory``), Prometheus's answers stubbed;
  ``warm_up_fleet_deciding_s`` the part of it until every one of them decides (its trend's minutes read, its day
  caught up after: ``Policy.apart``).
* ``range_parse_*``: the memory and time one range query's answer of a thousand workloads' 23 hours takes while
  it is read, in bytes a point, beside the client's own ``custom_query_range`` (``bench_range_parse``).
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import multiprocessing
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from array import array
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import numpy as np
import requests

from autoscaler.logs import configure
from autoscaler.metrics.source import QueryResult, RangeSeries, RangeVector, Series, VectorResult
from autoscaler.testing.kube import KubeServer, rbac_rules
from autoscaler.testing.servers import Unavailable
from simulations.results import write_dated

LEAST_NAMESPACES = 4
WORKLOADS_PER_NAMESPACE = 100
HPA_SYNC_S = 15.0
PODS_PER_WORKLOAD = 2  # the tick bench's Deployments' replicas, each a pod the exporter serves
STEADY_TICKS = 5  # the steady ticks timed (``tick_*``): their median, and the slowest beside it
# How often the tick's Prometheus scrapes the fleet's pods: as the shipped PodMonitor and ServiceMonitor do
# (deploy/components/prometheus-operator). Every second, 20,000 pods' scrapes took the shared cores from the tick.
SCRAPE_S = 15
DEPLOY_CONTROLLER = Path(__file__).resolve().parents[1] / "deploy" / "controller"


def _namespaces(count: int) -> list[str]:
    """A hundred workloads a namespace, four namespaces at least."""
    return [f"llm-{i:03d}" for i in range(max(LEAST_NAMESPACES, count // WORKLOADS_PER_NAMESPACE))]


def _workloads(count: int) -> list[tuple[str, str]]:
    namespaces = _namespaces(count)
    return [(namespaces[i % len(namespaces)], f"vllm-model-{i}") for i in range(count)]


def _serve(count: int, conn: Connection) -> None:
    """The child process: an exporter for the workloads' pods (``PODS_PER_WORKLOAD``), waiting 2 each until told
    ``("burst", n)``: then the first ``n`` workloads' pods wait 20 each."""
    from autoscaler.testing.servers import VllmExporter

    exporter = VllmExporter()
    targets = _workloads(count)

    def pods(upto: int) -> Iterator[dict[str, str]]:
        """The labels of the first ``upto`` workloads' pods."""
        for namespace, name in targets[:upto]:
            for pod in range(PODS_PER_WORKLOAD):
                yield {"namespace": namespace, "pod": f"{name}-5d8f7c6b9-p{pod}x7k", "model_name": "m"}

    for labels in pods(count):
        exporter.set("vllm:num_requests_waiting", 2.0, **labels)  # 2 a pod: its 2 replicas, steady
        exporter.set("vllm:kv_cache_usage_perc", 0.5, **labels)
    conn.send(exporter.port)
    while (message := conn.recv()) != "stop":
        for labels in pods(message[1]):
            exporter.set("vllm:num_requests_waiting", 20.0, **labels)
        conn.send("done")
    exporter.close()


def _cluster(kube: KubeServer, targets: list[tuple[str, str]], workdir: Path) -> Path:
    """Namespaces and Deployments at ``PODS_PER_WORKLOAD`` replicas (made eight at a time), and a kubeconfig for the
    daemon: a ServiceAccount bound by the shipped RBAC where ``deploy/`` is beside the package (a checkout), else the
    admin."""
    from kubernetes import client

    from autoscaler.concurrency import each

    core = client.CoreV1Api(kube.admin())
    namespaces = sorted({n for n, _ in targets})
    for namespace in namespaces:
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
    each(lambda target: kube.create_deployment(target[0], target[1], PODS_PER_WORKLOAD), targets, 8, "create")
    return kube.kubeconfig(workdir / "kubeconfig", _identity(kube, namespaces[0], namespaces, "bench"))


def _cluster_apart(kube: KubeServer, targets: list[tuple[str, str]], workdir: Path) -> Path:
    """``_cluster`` in a child process (forked), so that the 10,000 Deployments' making leaves nothing in this
    process's memory: what ``daemon_rss_mib`` then says is the daemon's."""
    parent, child = multiprocessing.get_context("fork").Pipe()

    def make() -> None:
        child.send(str(_cluster(kube, targets, workdir)))

    maker = multiprocessing.get_context("fork").Process(target=make)
    maker.start()
    made = Path(parent.recv())
    maker.join()
    return made


def _identity(kube: KubeServer, home: str, namespaces: list[str], name: str) -> str:
    rules = rbac_rules(sorted(DEPLOY_CONTROLLER.glob("*rbac*.yaml")))
    if not rules:
        return kube.env["KUBE_ADMIN_TOKEN"]
    token = kube.service_account_token(home, name)
    for namespace in namespaces:
        kube.grant(namespace, (home, name), rules, name)
    return token


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


def _sized_start() -> float:
    """The utilization ``simulate --write-config`` starts a file given only an slo from: a load test of the built-in
    replica at 2 s and 99 % (``sizing.follower_plan``), seconds of simulated fleets."""
    from simulations.replica_model import ReplicaModel
    from simulations.sizing import follower_plan

    return follower_plan(ReplicaModel(), None, 2.0, 0.99).utilization


def _slo_written(document: dict[str, Any], start: float) -> dict[str, Any]:
    """``document`` with each workload given the slo and the predictive block ``simulate --write-config`` writes
    for a file given only an slo (``builtin.with_error_budget``, the built-in replica at 2 s and 99 %), from
    ``start``, ``_sized_start``'s utilization."""
    from simulations.builtin import with_error_budget
    from simulations.follower_plan import Plan
    from simulations.replica_model import ReplicaModel

    model, planned = ReplicaModel(), Plan(start, 0)
    workloads = [
        with_error_budget({"workloads": [{**w, "policy": {"type": "predictive"}}]}, model, 2.0, 0.99, planned)[
            "workloads"
        ][0]
        for w in document["workloads"]
    ]
    return {**document, "workloads": workloads}


def bench_warm_up_ticks(controller: Any) -> dict[str, Any]:
    """``warm_up_*``: a starting controller's ticks, back to back, until every workload has been warmed
    (``autoscaler.warm_up``) and decides: how many, the longest, and the range queries asked."""
    requests_before = controller.source.requests_sent
    longest, ticks, started = 0.0, 0, time.perf_counter()
    while True:
        wall = time.perf_counter()
        lines = controller.tick()
        longest, ticks = max(longest, time.perf_counter() - wall), ticks + 1
        if not any(line.get("reason") == "warming-up" for line in lines):
            break
    return {
        "warm_up_ticks": ticks,
        "warm_up_longest_s": round(longest, 3),
        "warm_up_wall_s": round(time.perf_counter() - started, 3),
        "warm_up_prometheus_requests": controller.source.requests_sent - requests_before,
    }


def bench_tick(count: int, workdir: Path, kube: KubeServer) -> dict[str, Any]:
    """``tick_*``, ``state_*``, ``burst_*`` and ``warm_up_*`` over ``count`` workloads (the module's docstring)."""
    from autoscaler.actuators.kubernetes import KubernetesActuator, api_client
    from autoscaler.controller import Controller
    from autoscaler.daemon import Settled, settle
    from autoscaler.metrics.prometheus import PrometheusSource
    from autoscaler.state import ConfigMapStateStore
    from autoscaler.testing.servers import PrometheusServer, wait_for
    from policies.policy_file import parse_policy_document

    parent, child = multiprocessing.Pipe()
    server = multiprocessing.Process(target=_serve, args=(count, child), daemon=True)
    server.start()
    exporter_port = parent.recv()
    made = time.perf_counter()
    kubeconfig = _cluster_apart(kube, _workloads(count), workdir)
    figures: dict[str, Any] = {"cluster_made_s": round(time.perf_counter() - made, 1)}
    prometheus = PrometheusServer(workdir, [exporter_port], SCRAPE_S)
    prometheus.start()
    try:
        every = PODS_PER_WORKLOAD * count
        wait_for(lambda: _series(prometheus.url) == every, 300, "Prometheus to hold every pod's series")
        # A daemon holds one controller: the warm-up's starts in a child of its own, forked before this one is made,
        # from a file written as simulate writes it, whose load test runs in a child before (it steps simulated
        # fleets, compiled: what a daemon never loads)
        fork = multiprocessing.get_context("fork")
        with fork.Pool(1) as pool:
            start = pool.apply(_sized_start)
        with fork.Pool(1) as pool:
            figures |= pool.apply(_warm_up_apart, (prometheus.url, str(kubeconfig), count, start))
        document = parse_policy_document(_policy(prometheus.url, _workloads(count)))
        source = PrometheusSource(document.prometheus)
        actuator = KubernetesActuator(api_client(str(kubeconfig)), watch=True)  # as the daemon runs
        store = ConfigMapStateStore(kube.admin(), "default")
        ahead = _Ahead()
        _reset_peak()  # the servers and the Deployments are in other processes: from here on, the daemon's memory
        controller = Controller(None, document, source, actuator, store=store, decision_clock=ahead)
        settled = Settled()
        controller.tick()  # warm: connection pools, the owner cache; the state written once
        settle(controller, settled)  # as the daemon does after every tick
        wait_for(lambda: _all(actuator.watching()), 60, "every namespace's watch to open")
        _fill_windows(controller, ahead, settled)
        figures |= _steady_ticks(controller, ahead, settled, source, store)
        figures |= _burst(controller, parent, count)
        settle(controller, settled)
        store.written_at = -math.inf  # a heartbeat's tick: every record built again, its full window with it
        controller.tick()
        settle(controller, settled)
        figures["daemon_rss_mib"] = _rss_mib()  # one controller of the fleet, after its burst and a heartbeat
        figures["peak_rss_mib"] = max(figures["warm_up_peak_rss_mib"], _peak_mib())
        return figures
    finally:
        prometheus.stop()
        parent.send("stop")
        server.join(10)


def _warm_up_apart(prometheus_url: str, kubeconfig: str, count: int, start: float) -> dict[str, Any]:
    """``warm_up_*`` (``bench_warm_up_ticks``) of a controller of the policy a file given only an slo is written with
    (from ``start``, ``_sized_start``'s), over the same workloads, in a process of its own (forked, what the parent
    holds so far counted from its start): ``warm_up_peak_rss_mib`` its resident high-water mark."""
    from autoscaler.actuators.dryrun import DryRunActuator
    from autoscaler.actuators.kubernetes import KubernetesActuator, api_client
    from autoscaler.controller import Controller
    from autoscaler.metrics.prometheus import PrometheusSource
    from policies.policy_file import parse_policy_document

    _reset_peak()
    budget = parse_policy_document(_slo_written(_policy(prometheus_url, _workloads(count)), start))
    actuator = DryRunActuator(KubernetesActuator(api_client(kubeconfig)))
    figures = bench_warm_up_ticks(Controller(None, budget, PrometheusSource(budget.prometheus), actuator))
    return figures | {"warm_up_peak_rss_mib": _peak_mib()}


def _series(prometheus_url: str) -> int:
    """How many pods' KV-cache gauges Prometheus answers now."""
    answer = requests.get(f"{prometheus_url}/api/v1/query", {"query": "count(vllm:kv_cache_usage_perc)"}, timeout=10)
    result = answer.json()["data"]["result"] if answer.ok else []
    return int(float(result[0]["value"][1])) if result else 0


class _Ahead:
    """A decision clock ``offset`` seconds ahead of the monotonic one."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.monotonic() + self.offset


def _fill_windows(controller: Any, ahead: _Ahead, settled: Any) -> None:
    """Ticks an interval apart on the decision clock (taken ahead) until every workload's stabilization window is full,
    each settled as the daemon settles it: the fleet of a daemon that has run for the longest window, whose every
    workload holds a window of recommendations and whose ticks' survivors have been frozen (``daemon.settle``)."""
    from autoscaler.daemon import settle

    longest = max(r.decider.behavior.down_window for r in controller.runtime.values())
    for _ in range(math.ceil(longest / controller.interval) + 1):
        ahead.offset += controller.interval
        controller.tick()
        settle(controller, settled)
    ahead.offset += controller.interval


def _rss_mib() -> float:
    """This process's resident memory now."""
    with open("/proc/self/statm", encoding="ascii") as statm:
        pages = int(statm.read().split()[1])
    return round(pages * os.sysconf("SC_PAGE_SIZE") / 2**20, 1)


def _reset_peak() -> None:
    """Start this process's resident high-water mark afresh (Linux's ``clear_refs``), once what is garbage is
    collected and free heap pages are given back: ``_peak_mib`` then reads the peak of what runs from here on."""
    from autoscaler.daemon import trim_heap

    gc.unfreeze()  # what a settled tick froze is collected too
    gc.collect()
    trim_heap()
    with open("/proc/self/clear_refs", "w", encoding="ascii") as refs:
        refs.write("5")


def _peak_mib() -> float:
    """This process's resident high-water mark since the last ``_reset_peak`` (``VmHWM``)."""
    with open("/proc/self/status", encoding="ascii") as status:
        kib = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
    return round(kib / 1024, 1)


def _all(counts: tuple[int, int]) -> bool:
    return counts[0] == counts[1]


def _steady_ticks(controller: Any, ahead: _Ahead, settled: Any, source: Any, store: Any) -> dict[str, Any]:
    """``STEADY_TICKS`` ticks of a fleet holding steady, a second of the host's time and an interval of the decision
    clock apart, each settled: the median of their wall and CPU times and the slowest, the most Prometheus requests
    and LISTs one made, and their state writes (none when nothing changed)."""
    from autoscaler.daemon import settle

    walls, cpus, asked, listed, writes_before = [], [], [], [], store.writes
    for _ in range(STEADY_TICKS):
        time.sleep(1.0)  # as between a daemon's ticks, the servers' own work done
        requests_before, lists_before = source.requests_sent, controller.actuator.lists
        wall, cpu = time.perf_counter(), time.process_time()
        lines = controller.tick()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
        asked.append(source.requests_sent - requests_before)
        listed.append(controller.actuator.lists - lists_before)
        settle(controller, settled)
        ahead.offset += controller.interval
    return {
        "tick_lists": max(listed),
        "tick_wall_s": round(float(np.median(walls)), 3),
        "tick_wall_max_s": round(max(walls), 3),
        "tick_cpu_s": round(float(np.median(cpus)), 3),
        "tick_prometheus_requests": max(asked),
        "tick_workloads": len(lines),
        "tick_scale_writes": sum(1 for line in lines if line.get("applied")),
        "state_shards": store.shards,
        "state_writes_idle_tick": store.writes - writes_before,
    }


def _burst(controller: Any, exporter: Connection, count: int) -> dict[str, Any]:
    """A tenth of the workloads (1,000 of 10,000) see ten times the waiting requests at once: the tick that writes
    their scale-ups, from the first decision to the last write."""
    from autoscaler.testing.servers import wait_for

    burst = max(1, count // 10)
    exporter.send(("burst", burst))
    exporter.recv()
    last = controller.document.workloads[burst - 1].key  # the last pod the exporter changed
    # The exporter sets the burst's pods in order and renders a page under the lock each set takes, so a scrape that
    # shows the last one shows them all.
    wait_for(
        lambda: controller.observer.collect(time.time())[last].values["num_requests_waiting"] == 40,
        60,
        "Prometheus to see the burst",
    )
    wall = time.perf_counter()
    lines = controller.tick()
    return {
        "burst_scale_ups": sum(1 for line in lines if line.get("applied")),
        "burst_wall_s": round(time.perf_counter() - wall, 3),
    }


@dataclass
class _Rig:
    """The reaction bench's servers: a vLLM-shaped exporter scraped by a real Prometheus, a daemon on the real
    kube-apiserver acting for ``user``, and the two workloads it scales."""

    kube: KubeServer
    exporter: Any
    prometheus: Any
    daemon: subprocess.Popen[bytes]
    port: int
    user: str
    namespace: str = "llm-serving"
    name: str = "vllm-llama3-70b"

    def accepted_patches(self, target: str | None = None, replicas: int | None = None) -> list[float]:
        """When each scale PATCH of ``target`` (by default the busy workload) to ``replicas`` (any) was accepted."""
        target = target or self.name
        return [
            e.at
            for e in self.kube.audit(self.namespace, self.user)
            if e.verb == "patch"
            and e.resource == "deployments/scale"
            and e.code == 200
            and e.name == target
            and (replicas is None or (e.request or {}).get("spec", {}).get("replicas") == replicas)
        ]

    def ready(self) -> bool:
        try:
            return requests.get(f"http://127.0.0.1:{self.port}/readyz", timeout=1).status_code == 200
        except requests.RequestException:
            return False


def bench_reaction(workdir: Path, trials: int, seed: int, kube: KubeServer) -> dict[str, Any]:
    """How long the daemon takes from a step in the load to the accepted scale PATCH (``reaction_s``; KEDA's pair
    beside it, ``keda_sum_reaction_s``), and from the first request for a model at zero to its wake-up PATCH
    (``activation_s``), each over ``trials`` steps at random phases of the interval."""
    from autoscaler.testing.servers import wait_for

    rng = random.Random(seed)
    rig = _reaction_rig(workdir, kube)
    try:
        wait_for(rig.ready, 60, "the daemon to be ready")
        reactions, keda = _reactions(rig, trials, rng)
        activations = _activations(rig, trials, rng)
    finally:
        _stop(rig, workdir)
    return {
        "reaction_s": round(float(np.mean(reactions)), 2),
        "reaction_max_s": round(max(reactions), 2),
        "reaction_trials": [round(r, 2) for r in reactions],
        "keda_sum_reaction_s": round(float(np.mean(keda)), 2),
        "reaction_target_s": 1.0 + 5.0 + 1.0,
        "activation_s": round(float(np.mean(activations)), 2),
        "activation_max_s": round(max(activations), 2),
        "activation_trials": [round(a, 2) for a in activations],
    }


def _reaction_rig(workdir: Path, kube: KubeServer) -> _Rig:
    """The servers started: two Deployments, their pods' metrics, Prometheus, and the daemon every 5 s."""
    from kubernetes import client

    from autoscaler.testing.kube import service_account_user
    from autoscaler.testing.servers import PrometheusServer, VllmExporter, free_port, start_daemon

    exporter = VllmExporter()
    namespace, name = "llm-serving", "vllm-llama3-70b"
    client.CoreV1Api(kube.admin()).create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
    token = _identity(kube, namespace, [namespace], "reaction")
    user = service_account_user(namespace, "reaction") if token != kube.env["KUBE_ADMIN_TOKEN"] else "admin"
    kube.create_deployment(namespace, name, 2)
    exporter.set_pods(namespace, name, waiting=[2, 2])
    kube.create_deployment(namespace, IDLE_MODEL, 1)
    exporter.set_pods(namespace, IDLE_MODEL, waiting=[0], running=[0])
    exporter.set(GATEWAY, 0.0, namespace=namespace)
    prometheus = PrometheusServer(workdir, [exporter.port])
    prometheus.start()
    policy = workdir / "reaction-policy.json"
    document = _policy(prometheus.url, [(namespace, name)], interval=5)
    document["workloads"].append(_idle_model(namespace))
    policy.write_text(json.dumps(document))
    port = free_port()
    kubeconfig = kube.kubeconfig(workdir / "kubeconfig", token)
    daemon = start_daemon(policy, kubeconfig, port, workdir / "daemon.log", VLLM_AUTOSCALER_LEADER_ELECT="false")
    return _Rig(kube, exporter, prometheus, daemon, port, user, namespace, name)


def _reactions(rig: _Rig, trials: int, rng: random.Random) -> tuple[list[float], list[float]]:
    """Each trial: the waiting requests step from 2 to 20 a replica; seconds to the accepted PATCH, and what KEDA's
    pair would take (the same 1 s scrape, then the HPA's next sync)."""
    from autoscaler.testing.servers import wait_for

    reactions: list[float] = []
    keda: list[float] = []
    for _ in range(trials):
        time.sleep(16 + rng.uniform(0, 5))  # past the scale-up period, at a random phase of the interval
        seen = len(rig.accepted_patches())
        stepped = time.time()
        rig.exporter.set_pods(rig.namespace, rig.name, waiting=[20, 20])

        def patched(seen: int = seen) -> float | None:
            return next(iter(rig.accepted_patches()[seen:]), None)

        reactions.append(wait_for(patched, 60, "the scale PATCH") - stepped)
        keda.append(rng.uniform(0, 1.0) + rng.uniform(0, HPA_SYNC_S))
        rig.exporter.set_pods(rig.namespace, rig.name, waiting=[2, 2])
        rig.kube.set_replicas(rig.namespace, rig.name, 2)
    return reactions, keda


def _activations(rig: _Rig, trials: int, rng: random.Random) -> list[float]:
    """Each trial: the idle model at the daemon's own zero gets queued requests; seconds to its wake-up PATCH."""
    from autoscaler.testing.servers import wait_for

    activations: list[float] = []
    for _ in range(trials):
        wait_for(lambda: rig.kube.replicas(rig.namespace, IDLE_MODEL) == 0, 60, "the daemon's own zero")
        time.sleep(rng.uniform(0, 5))  # a random phase of the interval
        seen = len(rig.accepted_patches(IDLE_MODEL, 1))
        stepped = time.time()
        rig.exporter.set(GATEWAY, 2.0, namespace=rig.namespace)

        def woke(seen: int = seen) -> float | None:
            return next(iter(rig.accepted_patches(IDLE_MODEL, 1)[seen:]), None)

        activations.append(wait_for(woke, 60, "the wake-up PATCH") - stepped)
        rig.exporter.set(GATEWAY, 0.0, namespace=rig.namespace)
    return activations


def _stop(rig: _Rig, workdir: Path) -> None:
    """The daemon stopped (its log printed if it would not), then Prometheus and the exporter."""
    rig.daemon.terminate()
    try:
        rig.daemon.wait(20)
    except subprocess.TimeoutExpired:
        rig.daemon.send_signal(signal.SIGUSR1)
        time.sleep(1)
        rig.daemon.kill()
        print((workdir / "daemon.log").read_text()[-6000:], file=sys.stderr)
        raise
    finally:
        rig.prometheus.stop()
        rig.exporter.close()


IDLE_MODEL, GATEWAY = "vllm-eval-7b", "gateway_queued_requests"


def _idle_model(namespace: str) -> dict[str, Any]:
    """A workload that may go to zero, idle: it goes there ``idleSeconds`` after the daemon starts."""
    return {
        "target": {"namespace": namespace, "name": IDLE_MODEL},
        "minReplicas": 0,
        "maxReplicas": 4,
        "metrics": [{"name": "num_requests_waiting", "target": {"type": "AverageValue", "value": 2}}],
        "activation": {"query": f'sum({GATEWAY}{{namespace="{namespace}"}})', "threshold": 0.5, "idleSeconds": 6},
    }


def bench_pipeline(seed: int) -> dict[str, Any]:
    from policies.base import Observation
    from policies.policy_file import parse_policy_document

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
                results[f"history_entries_after_day_{policy_type}"] = decider.snapshot().behavior.history_size()
        results[f"decisions_per_s_{policy_type}"] = round(len(waiting) / (time.perf_counter() - started))
    results["decisions_per_s"] = results["decisions_per_s_threshold"]
    results["history_entries_after_day"] = max(v for k, v in results.items() if k.startswith("history_entries"))
    return results


class _History:
    """A metric source whose every range query is answered whole (``bench_warm_up``): positive, varying values,
    as a loaded workload's series would be; a query of many workloads (``owned_query``) answers for each of
    ``owners`` in the namespaces it names."""

    def __init__(self, seed: int, owners: Iterable[tuple[str, str]] = ()) -> None:
        self.rng = np.random.default_rng(seed)
        self.owners = list(owners)

    def query(self, queries: Iterable[str], now: float) -> Mapping[str, QueryResult]:
        raise NotImplementedError("a warm-up reads ranges only")

    def query_vector(self, query: str, now: float) -> VectorResult:
        raise NotImplementedError("a warm-up reads ranges only")

    def query_range(self, query: str, start: float, end: float, step: float) -> RangeSeries:
        stamps = np.arange(start, end + step / 2, step)
        values = 4.0 + self.rng.gamma(4.0, 1.0, size=len(stamps))
        return RangeSeries([(float(t), float(v)) for t, v in zip(stamps, values, strict=True)])

    def query_ranges(self, query: str, start: float, end: float, step: float) -> RangeVector:
        named = re.search(r'namespace=~"([^"]*)"', query)
        spaces = set(named.group(1).split("|")) if named else set()
        stamps = array("d", np.arange(start, end + step / 2, step))
        return RangeVector(
            [
                Series({"namespace": n, "owner": o}, stamps, array("d", 4.0 + self.rng.gamma(4.0, 1.0, len(stamps))))
                for n, o in self.owners
                if n in spaces
            ]
        )


def bench_warm_up(seed: int, fleet: int = 1000) -> dict[str, Any]:
    """``warm_up_s``: one workload's warm-up (``autoscaler.warm_up``) of the policy ``simulate --write-config``
    writes for a file given only an slo (``_slo_written``): a day of history, the window its error budget is
    counted over (the slo's, a day at least), its ``detail_seconds`` (the trend's window) read finer, as the
    warm-up reads it (``spans``), and replayed through ``predictive``. ``warm_up_fleet_s``: the same for
    ``fleet`` workloads a hundred to a namespace, read by series and namespaces (``FleetHistory``), in
    ``warm_up_fleet_queries`` range queries.
    Prometheus's answers are stubbed, so it is the daemon's CPU alone, what a starting daemon spends before its
    first tick's decisions."""
    from autoscaler.warm_up import FleetHistory, history_seconds, warm_up
    from policies.policy_file import parse_policy_document

    targets = _workloads(fleet)
    raw = _policy("http://unused:9090", targets)
    for workload in raw["workloads"]:
        del workload["metrics"]
        workload["capacity"] = {"promptTokensPerSecond": 500, "runningRequests": 11}
    one = {**raw, "workloads": raw["workloads"][:1]}
    start = _sized_start()  # once: it is a load test of seconds
    document = parse_policy_document(_slo_written(one, start))
    policy = document.decider(document.workloads[0]).policy
    wall = time.time()
    started = time.perf_counter()
    outcome = warm_up(document.workloads[0], policy, _History(seed, targets[:1]), wall, 0.0, float(document.interval))
    figures = {"warm_up_s": round(time.perf_counter() - started, 3), "warm_up_samples": outcome.samples}
    document = parse_policy_document(_slo_written(raw, start))
    members = [(w, document.decider(w).policy) for w in document.workloads]
    source = _History(seed, targets)
    started = time.perf_counter()
    history = FleetHistory(members, wall, 0.0, float(document.interval))
    listed, deciding = 0, None
    while not history.done:
        history.read_next(source)
        listed += len(history.finished())
        if deciding is None and listed == fleet:
            deciding = time.perf_counter() - started
    assert listed == fleet and history.members == {}
    assert all(p.state.budget.span > 0.9 * history_seconds(p) for _, p in members)
    return figures | {
        "warm_up_fleet_s": round(time.perf_counter() - started, 3),
        "warm_up_fleet_deciding_s": round(deciding or 0.0, 3),
        "warm_up_fleet_queries": len(history.reads),
    }


def bench_range_parse(series: int = 1000, points: int = 1380) -> dict[str, Any]:
    """``range_parse_*``: the memory a range query's answer takes while the daemon reads it, in bytes a point,
    and its time: ``series`` workloads' 23 hours a minute apart (the warm-up's coarse part), Prometheus's own
    format (whole-second stamps, shortest-repr rates), served by a local HTTP server and read through
    ``PrometheusSource.query_ranges`` (``_client``: the client's ``custom_query_range``, its whole answer parsed at
    once). ``warm_up.BATCH_POINTS`` is set from it. The time of one read, then tracemalloc's peak over another, over
    the answer's points. ``main`` runs it in a child process: the answer built here would stay in the bench
    process's resident memory, which ``daemon_rss_mib`` reads after it."""
    import tracemalloc
    from datetime import UTC, datetime

    from autoscaler.metrics.prometheus import PrometheusSource
    from autoscaler.testing.servers import serve_page
    from policies.policy_file import PrometheusConfig

    rng = random.Random(1)
    result = [
        {
            "metric": {"namespace": f"llm-{i // 100:03d}", "owner": f"vllm-model-{i}"},
            "values": [[1_733_400_000 + 60 * j, repr(rng.uniform(0, 3000) / 7)] for j in range(points)],
        }
        for i in range(series)
    ]
    answer = {"status": "success", "data": {"resultType": "matrix", "result": result}}
    body = json.dumps(answer, separators=(",", ":")).encode()
    del answer, result

    server, _ = serve_page(lambda: body, "application/json")
    source = PrometheusSource(PrometheusConfig(url=f"http://127.0.0.1:{server.server_address[1]}", timeout=60))
    total = series * points
    reads: dict[str, Callable[[], object]] = {
        "": lambda: source.query_ranges("q", 0, 1, 60),
        "_client": lambda: source.client.custom_query_range(
            "q", datetime.fromtimestamp(0, UTC), datetime.fromtimestamp(1, UTC), "60s"
        ),
    }
    figures: dict[str, Any] = {"range_answer_bytes_per_point": round(len(body) / total, 1)}
    try:
        for suffix, read in reads.items():
            started = time.perf_counter()
            read()
            figures[f"range_parse_s_per_million_points{suffix}"] = round(
                (time.perf_counter() - started) * 1e6 / total, 2
            )
            tracemalloc.start()
            kept = read()
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
            del kept
            figures[f"range_parse_bytes_per_point{suffix}"] = round(peak / total, 1)
    finally:
        server.shutdown()
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m autoscaler.bench", description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", type=int, default=1000)
    parser.add_argument("--trials", type=int, default=4, help="load steps for the reaction time")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--skip", action="append", default=[], choices=["tick", "reaction", "pipeline"])
    parser.add_argument("--kube-dir", type=Path, help="the folder of the kube-apiserver's start.sh")
    parser.add_argument("--report", type=Path, metavar="DIR", help="also write a dated Markdown report there")
    args = parser.parse_args()
    if shutil.which("prometheus") is None and not {"tick", "reaction"} <= set(args.skip):
        print("the prometheus binary is needed (apt-get install prometheus)", file=sys.stderr)
        return 2
    # The daemon's JSON log lines are rendered as in production, into the void; its malloc arenas limited as it limits
    # them before its first thread.
    from autoscaler.daemon import limit_arenas

    configure("json", "info", open(os.devnull, "w"))  # noqa: SIM115
    limit_arenas()
    out: dict[str, Any] = {"machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]}}
    with tempfile.TemporaryDirectory() as tmp:
        if "pipeline" not in args.skip:
            # Apart: what they keep would stay in this process's RSS, which the tick's bench reads as the daemon's.
            with multiprocessing.get_context("fork").Pool(1) as pool:
                out.update(pool.apply(bench_pipeline, (args.seed,)))
                out.update(pool.apply(bench_warm_up, (args.seed,)))
                out.update(pool.apply(bench_range_parse))
        runs: dict[str, Callable[[Path, KubeServer], dict[str, Any]]] = {
            "tick": lambda folder, kube: bench_tick(args.workloads, folder, kube),
            "reaction": lambda folder, kube: bench_reaction(folder, args.trials, args.seed, kube),
        }
        for name, run in runs.items():
            if name in args.skip:
                continue
            folder = Path(tmp) / name
            try:
                kube = KubeServer(folder / "kube", args.kube_dir)
            except Unavailable as exc:
                print(f"python -m autoscaler.bench: {exc}", file=sys.stderr)
                return 2
            kube.start()
            try:
                out.update(run(folder, kube))
            finally:
                kube.stop()
    print(json.dumps(out, indent=2))
    if args.report:
        path = write_report(args.report, out, sys.argv[1:])
        print(f"python -m autoscaler.bench: wrote {path}", file=sys.stderr)
    return 0


TARGETS = {
    "tick_wall_s": "< 1 s",
    "tick_prometheus_requests": "<= 8",
    "state_writes_idle_tick": "0",
    "burst_wall_s": "< interval (15 s)",
    "warm_up_ticks": "<= 2",
    "warm_up_prometheus_requests": "about 100",
    "reaction_s": "< interval + 2 scrapes (7 s)",
    "activation_max_s": "<= interval + 1 scrape (6 s)",
    "daemon_rss_mib": "< 300 MiB",
    "peak_rss_mib": "< 300 MiB",
}


def write_report(folder: Path, out: dict[str, Any], argv: list[str]) -> Path:
    """A dated Markdown report of one run: the command, the version, the machine, every figure."""
    rows = [
        f"| `{key}` | {value} | {TARGETS.get(key, '')} |"
        for key, value in out.items()
        if key != "machine" and not isinstance(value, (list, dict))
    ]
    body = [
        "| figure | measured | target |",
        "|---|---|---|",
        *rows,
        "",
        "What each figure measures is in the module docstring of `autoscaler/bench.py`.",
    ]
    command = " ".join(["python -m autoscaler.bench", *argv])
    return write_dated(folder, "daemon-bench", "The daemon's benchmark", command, body)


if __name__ == "__main__":
    sys.exit(main())
