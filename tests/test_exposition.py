"""The simulated replicas' ``/metrics`` (``simulations.exposition``): a real vLLM's exposition, and the totals
the simulator's own signals read."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from simulations.exposition import render
from simulations.fleet import Fleet
from simulations.replica_model import ReplicaModel
from simulations.traces import Trace
from tests.helpers import poisson_trace

REFERENCE = Path(__file__).parent / "fixtures" / "vllm-metrics.txt"
MODEL_NAME = "meta-llama/Meta-Llama-3-70B-Instruct"


def _families(text: str) -> dict[str, Metric]:
    return {family.name: family for family in text_string_to_metric_families(text)}


def _shape(family: Metric) -> dict[str, set[tuple[str, ...]]]:
    """Each sample name with the label names it carries and, for buckets, its edge."""
    shape: dict[str, set[tuple[str, ...]]] = {}
    for sample in family.samples:
        names = tuple(sorted(k for k in sample.labels if k != "le"))
        edge = (sample.labels["le"],) if "le" in sample.labels else ()
        shape.setdefault(sample.name, set()).add(names + edge)
    return shape


def _run(model: ReplicaModel, trace: Trace, replicas: int, until: float) -> Fleet:
    fleet = Fleet(model, trace, replicas)
    now = 0.0
    while now < until:
        fleet.step(now)
        now += model.step_s
    return fleet


def test_each_replica_serves_a_real_vllms_names_types_labels_and_buckets() -> None:
    fleet = _run(ReplicaModel(), poisson_trace(1.0, 200, 800, 200), 2, 120.0)
    pages = render(fleet, 120.0, MODEL_NAME, epoch=1.8e9)
    assert sorted(pages) == [0, 1]
    reference = _families(REFERENCE.read_text())
    for page in pages.values():
        served = _families(page)
        assert sorted(served) == sorted(reference)
        for name, family in served.items():
            expected = reference[name]
            assert (family.type, family.documentation) == (expected.type, expected.documentation), name
            assert _shape(family) == _shape(expected), name


def test_the_pods_add_up_to_what_the_simulator_reads() -> None:
    """Summed over the pods, every counter and histogram is the fleet's own total, the one its signals take
    rates of; the gauges are its scrape's. A tight cache makes the replicas preempt on the way."""
    model = ReplicaModel(kv_cache_tokens=6_000, scrape_interval_s=1.0)
    fleet = _run(model, poisson_trace(3.0, 300, 900, 300), 2, 90.0)
    assert fleet.preemptions > 0 and np.isfinite(fleet.finished).any()
    pods = [_families(page) for page in render(fleet, 90.0, MODEL_NAME).values()]

    def total(family: str, sample: str, **labels: str) -> float:
        return sum(
            s.value
            for pod in pods
            for s in pod[family].samples
            if s.name == sample and all(s.labels.get(k) == v for k, v in labels.items())
        )

    assert total("vllm:prompt_tokens", "vllm:prompt_tokens_total") == pytest.approx(fleet.prompt_tokens_total)
    assert total("vllm:generation_tokens", "vllm:generation_tokens_total") == pytest.approx(
        fleet.generation_tokens_total
    )
    assert total("vllm:num_preemptions", "vllm:num_preemptions_total") == fleet.preemptions
    ttft = "vllm:time_to_first_token_seconds"
    assert [total(ttft, f"{ttft}_bucket", le=le) for le in (*map(str, map(float, _edges(ttft))), "+Inf")] == (
        pytest.approx(np.cumsum(fleet.ttft_counts).tolist())
    )
    assert total(ttft, f"{ttft}_sum") == pytest.approx(fleet.ttft_sum)
    prompts = "vllm:request_prompt_tokens"
    assert total(prompts, f"{prompts}_count") == pytest.approx(float(fleet.prompt_counts.sum()))
    assert total("vllm:request_success", "vllm:request_success_total", finished_reason="stop") == float(
        np.isfinite(fleet.finished).sum()
    )
    scrape = fleet.latest_scrape(90.0)
    assert scrape is not None and scrape.at == 90.0
    assert total("vllm:num_requests_running", "vllm:num_requests_running") == scrape.running
    assert total("vllm:num_requests_waiting", "vllm:num_requests_waiting") == scrape.waiting
    kv = max(s.value for pod in pods for s in pod["vllm:kv_cache_usage_perc"].samples)
    assert kv == pytest.approx(scrape.kv_max)


def _edges(name: str) -> list[float]:
    family = _families(REFERENCE.read_text())[name]
    return [float(s.labels["le"]) for s in family.samples if s.name.endswith("_bucket") and s.labels["le"] != "+Inf"]


def test_a_starting_replica_serves_nothing_yet() -> None:
    model = ReplicaModel(cold_start_s=600.0)
    fleet = Fleet(model, poisson_trace(1.0, 10, 100, 10), 1)
    fleet.scale_to(2, 0.0)
    fleet.step(0.0)
    assert sorted(render(fleet, 1.0, MODEL_NAME)) == [0]
