"""``vllm-autoscaler run``: the controller daemon on APScheduler, until SIGTERM."""

from __future__ import annotations

import ctypes
import faulthandler
import functools
import gc
import math
import os
import signal
import socket
import sys
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from types import FrameType
from typing import Any

from apscheduler.schedulers.background import BackgroundScheduler

from autoscaler.actuators.base import Actuator
from autoscaler.actuators.dryrun import DryRunActuator
from autoscaler.actuators.kubernetes import KubernetesActuator, api_client
from autoscaler.controller import Controller
from autoscaler.leader import LeaderElector
from autoscaler.logs import get_logger
from autoscaler.metrics.prometheus import PrometheusSource
from autoscaler.server import HealthServer
from autoscaler.settings import Settings, own_namespace
from autoscaler.state import ConfigMapStateStore
from autoscaler.status import as_json
from autoscaler.telemetry import Telemetry
from policies.policy_file import PolicyFile

log = get_logger("autoscaler.daemon")
SHUTDOWN_S = 5.0  # how long SIGTERM waits for a tick in flight before abandoning it


def leader_election_wanted(settings: Settings, once: bool, dry_run: bool) -> bool:
    """Off in dry-run (which writes nothing); otherwise as set, else on for a live ``--once`` (so a one-off
    run never writes beside a running daemon) and inside a cluster (where the shipped Deployment runs two
    replicas)."""
    if dry_run:
        return False
    if settings.leader_elect is not None:
        return settings.leader_elect
    return once or "KUBERNETES_SERVICE_HOST" in os.environ


def _once(controller: Controller, elector: LeaderElector | None) -> int:
    """One tick; live, only under the Lease, given back afterwards."""
    if elector is not None and not elector.try_acquire_or_renew():
        lease = f"{elector.namespace}/{elector.name}"
        if elector.holder is not None and elector.refused.startswith("held by"):
            why = f"is held by {elector.holder}; not writing beside it (stop that daemon, or use --dry-run)"
        else:  # not another holder: the API refused (no such namespace, no right to it)
            why = (
                f"cannot be taken: {elector.refused} (set VLLM_AUTOSCALER_LEASE_NAMESPACE to the controller's "
                "namespace, or use --dry-run)"
            )
        print(f"vllm-autoscaler: the Lease {lease} {why}", file=sys.stderr)
        return 1
    try:
        controller.tick()
    finally:
        if elector is not None:
            elector.release()
    return 0


def run_daemon(config_path: str, document: PolicyFile, settings: Settings, once: bool) -> int:
    """The daemon: built (``_controller``), then one tick (``--once``) or ticking until SIGTERM (``_serve``)."""
    limit_arenas()
    stop = threading.Event()
    controller, elector = _controller(config_path, document, settings, once, stop)
    log.info(
        "starting",
        config=config_path,
        workloads=sorted(controller.runtime),
        dry_run=settings.dry_run,
        once=once,
        leader_election=elector is not None,
        prometheus=settings.prometheus(document).url,
    )
    if once:
        return _once(controller, elector)
    return _serve(controller, elector, settings, stop)


def _controller(
    config_path: str, document: PolicyFile, settings: Settings, once: bool, stop: threading.Event
) -> tuple[Controller, LeaderElector | None]:
    """The controller on the real API server and Prometheus, its writes behind one fence (``authority``), and its
    Lease's elector where it needs one."""
    api = api_client(settings.kubeconfig, settings.api_timeout_s)
    elector = None
    telemetry = Telemetry()
    if leader_election_wanted(settings, once, settings.dry_run):
        identity = settings.identity or f"{socket.gethostname()}-{os.getpid()}"
        elector = LeaderElector(
            api,
            own_namespace(settings),
            settings.lease_name,
            identity,
            settings.lease_duration_s,
            settings.renew_deadline_s,
            settings.retry_period_s,
            on_transition=lambda event: telemetry.leader_transitions.labels(event).inc(),
        )

    def authority() -> float:
        """The one fence every write passes (scales, claims, Events, the state): none after SIGTERM, else the
        Lease's remaining authority (``LeaderElector.authority_left``), or no limit without leader election."""
        if stop.is_set():
            return 0.0
        return elector.authority_left() if elector is not None else math.inf

    actuator: Actuator = KubernetesActuator(
        api,
        request_timeout=settings.api_timeout_s,
        authority=authority,
        stopping=stop,
        watch=settings.watch and not once,  # one tick has nothing to list again
    )
    if settings.dry_run:
        actuator = DryRunActuator(actuator)
    store = (
        None
        if settings.dry_run
        else ConfigMapStateStore(api, own_namespace(settings), timeout=settings.api_timeout_s, authority=authority)
    )
    controller = Controller(
        config_path,
        document,
        PrometheusSource(settings.prometheus(document)),
        actuator,
        telemetry,
        time.time,
        elector,
        store=store,
        source_factory=lambda reloaded: PrometheusSource(settings.prometheus(reloaded)),
        install=f"{own_namespace(settings)}/{settings.lease_name}",
    )
    return controller, elector


def _serve(controller: Controller, elector: LeaderElector | None, settings: Settings, stop: threading.Event) -> int:
    """Tick every interval (the Lease renewed beside it) and serve ``/metrics``, health and ``/status`` until
    SIGTERM or SIGINT; then a bounded shutdown (``_shut_down``)."""

    def on_signal(signum: int, frame: FrameType | None) -> None:
        log.info("stopping", signal=signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # `kill -USR1` dumps every thread's stack
    server = HealthServer(
        settings.bind_address,
        settings.metrics_port,
        controller.telemetry.registry,
        controller.healthy,
        controller.ready,
        lambda: as_json(controller.records),
    )
    server.start()
    scheduler = BackgroundScheduler(timezone=UTC)
    if elector is not None:
        scheduler.add_job(
            elector.try_acquire_or_renew,
            "interval",
            seconds=settings.retry_period_s,
            id="leader-election",
            max_instances=1,
            coalesce=True,
            next_run_time=datetime.now(UTC),
        )
    idle = threading.Event()
    idle.set()
    settled = Settled()

    def tick() -> None:
        # The job never calls back into the scheduler: shutdown holds its lock while it waits for this job.
        idle.clear()
        try:
            controller.tick()
            settle(controller, settled)
        except Exception:  # one bad tick must not kill the loop
            log.exception("tick-failed")
        finally:
            idle.set()

    scheduler.add_job(
        tick,
        "interval",
        seconds=controller.interval,
        id="tick",
        max_instances=1,
        coalesce=True,
        next_run_time=datetime.now(UTC),
        misfire_grace_time=None,
    )
    scheduler.start()
    interval = controller.interval
    while not stop.wait(1.0):
        if controller.interval != interval:  # a reloaded policy changed the interval
            interval = controller.interval
            scheduler.reschedule_job("tick", trigger="interval", seconds=interval)
            log.info("interval-changed", interval=interval)
    return _shut_down(scheduler, idle, elector, server)


M_ARENA_MAX = -8  # mallopt's parameter (glibc's malloc.h)
ARENAS = 2


def limit_arenas() -> bool:
    """At most ``ARENAS`` malloc arenas, as ``MALLOC_ARENA_MAX=2`` would set before the start: glibc gives each thread
    that allocates an arena of its own, up to eight a core, and the daemon's threads (a watch a namespace, the tick's
    queries and writes) left some 20 MB of the 300 MiB aimed at in their fragments at 10,000 workloads
    (docs/decisions/daemon-scale.md). Made before any thread starts. False where there is no glibc (musl, macOS):
    nothing to limit there."""
    mallopt = _glibc("mallopt")
    return mallopt is not None and bool(mallopt(M_ARENA_MAX, ARENAS))


def trim_heap() -> bool:
    """Give the heap's free pages back to the system (glibc's ``malloc_trim(0)``, 1 ms at 10,000 workloads): what a
    tick freed, a heartbeat's records and state text above all, otherwise stays in the RSS (8 MB of it in a harness
    at 10,000 workloads; docs/decisions/daemon-scale.md). False where there is no glibc: nothing to trim there."""
    malloc_trim = _glibc("malloc_trim")
    return malloc_trim is not None and bool(malloc_trim(0))


@functools.cache
def _glibc(name: str) -> Any:
    """glibc's function ``name``, looked up once (``trim_heap`` runs after every tick), or None without it."""
    try:
        return getattr(ctypes.CDLL(None), name)
    except (OSError, AttributeError):
        return None


THAW_S = 3600.0  # how often ``settle`` thaws and collects everything, for a cycle that became garbage while frozen


@dataclass
class Settled:
    """What ``settle`` last thawed for: the document, and when (the decision clock)."""

    document: PolicyFile | None = None
    at: float = -math.inf


def settle(controller: Controller, settled: Settled) -> None:
    """After every tick, what the tick left alive is frozen out of the garbage collector's sight (``gc.freeze``), once
    what it left unreachable is collected (a walk of the objects made since the last freeze only: 6 to 16 ms at 10,000
    workloads). Left in the oldest generation, a tick's survivors piled up until its full collections, two a tick at
    10,000 workloads with full stabilization windows, walked them all: 0.5 s of a tick's 1.3 s of CPU
    (docs/decisions/daemon-scale.md). After the first tick, a reload and every ``THAW_S``, everything is thawed and
    collected whole first (0.3 to 0.5 s then, between two ticks): what a reload let go is freed, and so is a cycle
    that became garbage while frozen (a steady tick makes none: tests/test_controller.py). Then the heap's free
    pages go back to the system (``trim_heap``)."""
    now = controller.decision_clock()
    if settled.document is not controller.document or now - settled.at >= THAW_S:
        gc.unfreeze()
        settled.document, settled.at = controller.document, now
    gc.collect()
    gc.freeze()
    trim_heap()


def _shut_down(
    scheduler: BackgroundScheduler, idle: threading.Event, elector: LeaderElector | None, server: HealthServer
) -> int:
    """End within ``SHUTDOWN_S`` plus the Lease's release, whatever the configured timeouts: a tick still waiting on
    Prometheus or the API server then is abandoned (it can write nothing: the fence closed with the signal), the
    Lease is given up, and the process leaves without joining the tick's thread."""
    scheduler.shutdown(wait=False)
    finished = idle.wait(SHUTDOWN_S)
    if elector is not None:
        elector.release()
    server.stop()
    log.info("stopped", abandoned_tick=not finished)
    if not finished:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)  # the abandoned tick's thread would be joined at exit
    return 0
