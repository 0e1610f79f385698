"""``vllm-autoscaler status``: each workload's record, from the cluster's state or a running daemon's ``/status``."""

from __future__ import annotations

import argparse
import json
from typing import Any

from autoscaler.cli.common import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK, _error, _load, _settings
from policies.policy_file import http_url


def _status_from_daemon(url: str) -> dict[str, Any] | None:
    """The records a running daemon serves at ``URL/status`` (any daemon: a dry-run one writes no state into the
    cluster); None, said in one line, when it cannot be read."""
    from urllib.error import URLError
    from urllib.request import urlopen

    from pydantic import ValidationError

    from autoscaler.state import WorkloadRecord

    address = url.rstrip("/") + "/status"
    try:
        with urlopen(address, timeout=10) as response:
            body = json.loads(response.read())
        return {r.workload: r for r in (WorkloadRecord.model_validate(w) for w in body["workloads"])}
    except (URLError, OSError, ValueError, KeyError, TypeError, ValidationError) as exc:
        _error(
            f"cannot read {address}: {str(exc).splitlines()[0][:200]} (the daemon's --metrics-port, e.g. "
            "through kubectl port-forward)"
        )
        return None


def cmd_status(args: argparse.Namespace) -> int:
    from kubernetes.client.exceptions import ApiException
    from kubernetes.config import ConfigException

    from autoscaler.actuators.kubernetes import api_client
    from autoscaler.settings import own_namespace
    from autoscaler.state import STATE_CONFIGMAP, ConfigMapStateStore
    from autoscaler.status import as_json, table

    settings = _settings(args)
    if settings is None:
        return EXIT_BAD_INPUT
    if args.url is not None:
        try:
            http_url(args.url)
        except ValueError as exc:
            _error(f"--url: {exc}")
            return EXIT_BAD_INPUT
        served = _status_from_daemon(args.url)
        if served is None:
            return EXIT_FAILED
        records = served
    else:
        if args.namespace is None:
            args.namespace = own_namespace(settings)
        try:
            store = ConfigMapStateStore(api_client(args.kubeconfig), args.namespace)
            records = store.load()
        except ConfigException as exc:
            _error(f"no cluster to read: {exc} (give --kubeconfig, or set KUBECONFIG)")
            return EXIT_FAILED
        except ApiException as exc:
            _error(f"cannot read ConfigMap {args.namespace}/{STATE_CONFIGMAP}: {exc.status} {exc.reason}")
            return EXIT_FAILED
        except OSError as exc:
            _error(f"cannot reach the cluster: {str(exc).splitlines()[0][:200]}")
            return EXIT_FAILED
        if store.versions.get(0) is None:
            _error(
                f"no state in {args.namespace}/{STATE_CONFIGMAP}: no leader has written it yet (a dry-run "
                "controller writes nothing into the cluster: read it with --url http://ITS-ADDRESS:PORT)"
            )
            return EXIT_FAILED
    if args.config:
        document = _load(args.config)
        if document is None:
            return EXIT_BAD_INPUT
        records = {k: r for k, r in records.items() if r.workload in {w.key for w in document.workloads}}
    print(as_json(records) if args.output == "json" else table(records, wide=args.output == "wide"))
    return EXIT_OK


def add_parser(sub: Any) -> None:
    """The ``status`` command's arguments."""
    p = sub.add_parser("status", help="each workload's counts, metrics, last scale and cold start, from the cluster")
    p.add_argument("--kubeconfig", metavar="FILE", help="default: in-cluster, else ~/.kube/config")
    p.add_argument(
        "--namespace",
        help="the controller's namespace (default: the daemon's own, VLLM_AUTOSCALER_LEASE_NAMESPACE, else the "
        "pod's, else vllm-autoscaler)",
    )
    p.add_argument("--config", metavar="FILE", help="show only this policy file's workloads")
    p.add_argument(
        "--url",
        metavar="URL",
        help="read a running daemon's /status (its metrics port) instead of the cluster's state: a dry-run daemon "
        "writes no state",
    )
    p.add_argument("-o", "--output", choices=["table", "wide", "json"], default="table")
    p.set_defaults(func=cmd_status)
