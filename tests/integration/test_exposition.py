"""A simulated fleet's replicas served as vLLM pods, scraped by a real Prometheus and read by the daemon's own
queries: the values are the ones the simulator's signals read."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from autoscaler.metrics.prometheus import PrometheusSource
from autoscaler.metrics.queries import default_query, pod_selector
from autoscaler.observer import Observer
from autoscaler.testing.servers import PrometheusServer, Unavailable, VllmExporter, wait_for
from policies.histogram import TTFT_BUCKETS, histogram_quantile
from policies.policy_file import parse_policy_document
from simulations.exposition import render
from simulations.fleet import Fleet
from simulations.replica_model import ReplicaModel
from simulations.signals import signals_for
from tests.helpers import poisson_trace
from tests.integration.conftest import unavailable

pytestmark = pytest.mark.integration
NS, NAME = "llm-serving", "vllm-llama3-70b"
GAUGES = ["num_requests_waiting", "num_requests_running", "kv_cache_usage_perc"]
NOW = 90.0


@pytest.fixture
def simulated(tmp_path: Path) -> Iterator[tuple[Fleet, PrometheusServer]]:
    model = ReplicaModel(kv_cache_tokens=6_000, scrape_interval_s=1.0)
    fleet = Fleet(model, poisson_trace(3.0, 300, 900, 300), 3)
    now = 0.0
    while now < NOW:
        fleet.step(now)
        now += model.step_s
    pages = render(fleet, NOW, "meta-llama/Meta-Llama-3-70B-Instruct", epoch=time.time() - NOW)
    pods = {index: VllmExporter(page) for index, page in pages.items()}
    try:
        prometheus = PrometheusServer(
            tmp_path,
            {pod.port: {"namespace": NS, "pod": f"{NAME}-5f7c9d8b6-r{index}x"} for index, pod in pods.items()},
        )
        prometheus.start()
    except Unavailable as exc:
        for pod in pods.values():
            pod.close()
        unavailable(exc)
    yield fleet, prometheus
    prometheus.stop()
    for pod in pods.values():
        pod.close()


def test_the_daemon_reads_the_simulated_pods_as_the_simulator_does(simulated: tuple[Fleet, PrometheusServer]) -> None:
    fleet, prometheus = simulated
    document = parse_policy_document(
        {
            "interval": 5,
            "prometheus": {"url": prometheus.url, "timeout": 2},
            "workloads": [
                {
                    "target": {"namespace": NS, "name": NAME},
                    "minReplicas": 1,
                    "maxReplicas": 10,
                    "metrics": [{"name": name, "target": {"type": "Value", "value": 1}} for name in GAUGES],
                }
            ],
        }
    )
    source = PrometheusSource(document.prometheus)
    selector = pod_selector(document.workloads[0])

    def scraped() -> float | None:
        count = source.query_one(f"count(vllm:num_requests_running{{{selector}}})", time.time()).value
        return count if count == len(fleet.live) else None

    wait_for(scraped, 30, "Prometheus to scrape every simulated pod")
    observed = Observer(document, source).collect(time.time())[f"{NS}/{NAME}"].values
    expected = signals_for(GAUGES)(fleet, NOW)
    assert observed == pytest.approx(expected)
    for name in GAUGES:  # the same numbers through each default query, as the daemon sends it
        query = default_query(name, document.workloads[0]) or ""
        assert source.query_one(query, time.time()).value == pytest.approx(expected[name])

    def value(query: str) -> float:
        result = source.query_one(query, time.time()).value
        assert result is not None, query
        return result

    assert value(f"sum(vllm:prompt_tokens_total{{{selector}}})") == pytest.approx(fleet.prompt_tokens_total)
    assert value(f"sum(vllm:generation_tokens_total{{{selector}}})") == pytest.approx(fleet.generation_tokens_total)
    assert fleet.preemptions > 0
    assert value(f"sum(vllm:num_preemptions_total{{{selector}}})") == fleet.preemptions
    edges = (*TTFT_BUCKETS, float("inf"))
    p90 = histogram_quantile(0.9, dict(zip(edges, np.cumsum(fleet.ttft_counts).tolist(), strict=True)))
    read = value(f"histogram_quantile(0.9, sum by (le) (vllm:time_to_first_token_seconds_bucket{{{selector}}}))")
    assert read == pytest.approx(p90)
    blocks = int(fleet.model.kv_cache_tokens // fleet.model.kv_block_tokens)
    assert value(f'count(vllm:cache_config_info{{{selector},num_gpu_blocks="{blocks}"}})') == len(fleet.live)
