"""``vllm-autoscaler run``: the daemon (``autoscaler.daemon``), its settings checked first."""

from __future__ import annotations

import argparse
from typing import Any

from autoscaler.cli.common import EXIT_BAD_INPUT, EXIT_FAILED, _error, _load, _settings


def cmd_run(args: argparse.Namespace) -> int:
    from autoscaler.daemon import run_daemon
    from autoscaler.logs import configure
    from autoscaler.metrics.queries import metric_queries

    settings = _settings(args)
    if settings is None:
        return EXIT_BAD_INPUT
    configure(settings.log_format, settings.log_level)
    document = _load(args.config, manifests=False)  # a reload reads the same path again, as a policy file
    if document is None:
        return EXIT_BAD_INPUT
    try:
        for workload in document.workloads:
            metric_queries(workload)
    except ValueError as exc:
        _error(str(exc))
        return EXIT_BAD_INPUT
    from kubernetes.config import ConfigException

    try:
        return run_daemon(args.config, document, settings, args.once)
    except ConfigException as exc:
        _error(f"no cluster to talk to: {exc} (run in a Pod, give --kubeconfig, or set KUBECONFIG)")
        return EXIT_FAILED
    except OSError as exc:  # the API server unreachable at start (a refused or dropped connection)
        _error(f"cannot reach the Kubernetes API: {str(exc).splitlines()[0][:200]}")
        return EXIT_FAILED


def add_parser(sub: Any) -> None:
    """The ``run`` command's arguments."""
    p = sub.add_parser("run", help="the controller daemon")
    p.add_argument("--config", required=True, metavar="FILE")
    p.add_argument("--dry-run", action="store_true", help="decide and log, never write to the cluster")
    p.add_argument("--once", action="store_true", help="one tick for every workload, then exit")
    p.add_argument("--kubeconfig", metavar="FILE", help="default: in-cluster, else ~/.kube/config")
    p.add_argument("--prometheus-url", metavar="URL", help="overrides the file and the environment")
    p.set_defaults(func=cmd_run)
