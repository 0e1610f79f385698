"""``status`` in ``kubectl get hpa``'s terms, from records as the leader (or a dry-run daemon) leaves them."""

from __future__ import annotations

import json
import re

import requests
from prometheus_client import CollectorRegistry

from autoscaler.conditions import Condition
from autoscaler.server import HealthServer
from autoscaler.state import WorkloadRecord
from autoscaler.status import as_json, table

NOW = 10_000.0


def cells(text: str) -> dict[str, str]:
    """The first row of a table by its column names (columns are three spaces apart at least)."""
    header, line = text.splitlines()[:2]
    return dict(zip(re.split(r"\s{3,}", header.strip()), re.split(r"\s{3,}", line.strip()), strict=True))


def record(**extra: object) -> WorkloadRecord:
    base: dict[str, object] = {
        "workload": "llm/chat",
        "target": "Deployment/chat",
        "policy": "predictive",
        "updated_at": NOW,
        "min_replicas": 1,
        "max_replicas": 8,
        "current": 4,
        "ready": 4,
        "desired": 6,
        "recommended": 9,
        "stabilized": 9,
        "reason": "rate-limited",
        "metrics": {
            "waiting": {"value": 2012.0, "target": 500.0, "type": "AverageValue", "average": 503.0},
            "kv": {"value": 0.62, "target": 0.7, "type": "Value"},
        },
        "conditions": [
            Condition(type="AbleToScale", status="True", reason="SucceededRescale", message="m"),
            Condition(type="ScalingActive", status="True", reason="ValidMetricFound", message="m"),
            Condition(type="ScalingLimited", status="True", reason="TooManyReplicas", message="m"),
        ],
    }
    return WorkloadRecord.model_validate({**base, **extra})


def test_an_average_value_target_shows_per_replica_as_kubectl_get_hpa_does() -> None:
    header, line = table({"k": record()}, NOW).splitlines()
    assert "waiting 503/500 (avg)" in line and "kv 0.62/0.7" in line
    assert "HEADING" not in header and "PROPOSAL" not in header


def test_wide_shows_the_proposal_the_limit_and_the_conditions() -> None:
    shown = cells(table({"k": record()}, NOW, wide=True))
    assert (shown["PROPOSAL"], shown["LIMIT"]) == ("9", "TooManyReplicas")
    assert shown["CONDITIONS"].startswith("AbleToScale=True SucceededRescale, ScalingActive=True ValidMetricFound")


def test_a_dry_run_record_shows_where_it_heads_beside_the_owner() -> None:
    shadow = record(
        dry_run=True, heading=8, owners=["HPA keda-hpa-chat"], owner_current=4, owner_desired=5, agrees=False
    )
    shown = cells(table({"k": shadow}, NOW))
    assert (shown["CURRENT"], shown["DESIRED"], shown["HEADING"], shown["OWNER DESIRED"]) == (
        "4",
        "6 (rate-limited)",
        "8",
        "5 (differs)",
    )


def test_a_running_daemon_serves_its_records_at_status() -> None:
    records = {"k": record()}
    server = HealthServer(
        "127.0.0.1", 0, CollectorRegistry(), lambda: (True, ""), lambda: (True, ""), lambda: as_json(records)
    )
    server.start()
    try:
        body = requests.get(f"http://127.0.0.1:{server.port}/status", timeout=5).json()
    finally:
        server.stop()
    assert body == json.loads(as_json(records))
    assert body["workloads"][0]["conditions"][2]["reason"] == "TooManyReplicas"
