"""Each simulated replica's ``/metrics`` as a real vLLM writes it.

vLLM's own names, help, types, labels (``model_name``, ``engine``) and histogram buckets, from its
``PrometheusStatLogger`` (``vllm/v1/metrics/loggers.py``, v0.12), written by ``prometheus_client`` as vLLM
writes them (``_created`` samples included). So ``record``, ``replay`` and the daemon can read a simulated
fleet through a real Prometheus exactly as they read production; ``tests/test_exposition.py`` holds the
text to a reference exposition, and the counters to the totals the simulator's own signals read.

The counters are worked out from the requests each replica admitted (``Fleet.served_by``), when asked: a
replica's prompt tokens and first tokens count when its first token comes, its prompt and output lengths,
latencies and successes when a request finishes, as vLLM counts them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.samples import Sample

from policies.histogram import PROMPT_TOKEN_BUCKETS, TTFT_BUCKETS
from simulations.fleet import Fleet, Replica

LABELS = ("model_name", "engine")
FINISH_REASONS = ("stop", "length", "abort", "error")  # vLLM's FinishReason, every one exposed from the start
REQUEST_LATENCY_BUCKETS: tuple[float, ...] = (
    *(0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0),
    *(30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0),
)
"""The ``le`` edges of vLLM's request-latency histograms (e2e, queue time)."""


def _histogram(
    name: str, help_text: str, edges: Sequence[float], values: np.ndarray, labels: list[str], created: float
) -> Metric:
    """A histogram of ``values`` over ``edges`` (a value on an edge counts in it, as ``le`` says)."""
    family = HistogramMetricFamily(name, help_text, labels=list(LABELS))
    counts = np.cumsum(np.bincount(np.searchsorted(edges, values), minlength=len(edges) + 1))
    buckets = [(str(float(edge)), float(count)) for edge, count in zip(edges, counts, strict=False)]
    family.add_metric(labels, [*buckets, ("+Inf", float(counts[-1]))], float(values.sum()))
    family.samples.append(Sample(f"{name}_created", dict(zip(LABELS, labels, strict=True)), created))
    return family


def _counter(name: str, help_text: str, value: float, labels: list[str], created: float) -> Metric:
    family = CounterMetricFamily(name, help_text, labels=list(LABELS))
    family.add_metric(labels, value, created=created)
    return family


def _gauge(name: str, help_text: str, value: float, labels: list[str]) -> Metric:
    family = GaugeMetricFamily(name, help_text, labels=list(LABELS))
    family.add_metric(labels, value)
    return family


def replica_families(fleet: Fleet, replica: Replica, model_name: str, epoch: float = 0.0) -> list[Metric]:
    """The metric families one replica's vLLM exposes; ``epoch`` is the Unix time of the simulation's
    second 0 (the ``_created`` samples are Unix times). Over 60 lines: one block per family, in the order of
    vLLM's ``PrometheusStatLogger``, so that the two read side by side."""
    model = fleet.model
    labels = [model_name, "0"]
    created = epoch + replica.created_at
    mine = fleet.served_by == replica.index
    first = mine & ~np.isnan(fleet.first_token)
    finished = mine & ~np.isnan(fleet.finished) & ~fleet.dropped
    left_to_decode = fleet.to_decode.copy()
    left_to_decode[fleet.r_req] = fleet.r_dec
    left_to_decode[finished] = 0.0
    generated = float(np.sum(fleet.output[first] - left_to_decode[first]))
    success = CounterMetricFamily(
        "vllm:request_success", "Count of successfully processed requests.", labels=[*LABELS, "finished_reason"]
    )
    for reason in FINISH_REASONS:
        success.add_metric([*labels, reason], float(finished.sum()) if reason == "stop" else 0.0, created=created)
    kv = float(fleet.kv_used()[replica.index]) / model.kv_cache_tokens
    waiting = float(len(replica.waiting))
    cache_labels = {
        "block_size": str(model.kv_block_tokens),
        "cache_dtype": "auto",
        "enable_prefix_caching": str(model.prefix_caching),
        "engine": "0",
        "num_gpu_blocks": str(int(model.kv_cache_tokens // model.kv_block_tokens)),
    }
    info = GaugeMetricFamily(
        "vllm:cache_config_info", "Information of the LLMEngine CacheConfig", labels=list(cache_labels)
    )
    info.add_metric(list(cache_labels.values()), 1.0)
    return [
        _gauge("vllm:num_requests_running", "Number of requests in model execution batches.", replica.running, labels),
        _gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", waiting, labels),
        _gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", kv, labels),
        _counter(
            "vllm:num_preemptions",
            "Cumulative number of preemption from the engine.",
            replica.preemptions,
            labels,
            created,
        ),
        _counter(
            "vllm:prompt_tokens",
            "Number of prefill tokens processed.",
            float(fleet.prompt[first].sum()),
            labels,
            created,
        ),
        _counter("vllm:generation_tokens", "Number of generation tokens processed.", generated, labels, created),
        success,
        _histogram(
            "vllm:request_prompt_tokens",
            "Number of prefill tokens processed.",
            PROMPT_TOKEN_BUCKETS,
            fleet.prompt[finished],
            labels,
            created,
        ),
        _histogram(
            "vllm:request_generation_tokens",
            "Number of generation tokens processed.",
            PROMPT_TOKEN_BUCKETS,
            fleet.output[finished],
            labels,
            created,
        ),
        _histogram(
            "vllm:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            TTFT_BUCKETS,
            fleet.first_token[first] - fleet.arrival[first],
            labels,
            created,
        ),
        _histogram(
            "vllm:e2e_request_latency_seconds",
            "Histogram of e2e request latency in seconds.",
            REQUEST_LATENCY_BUCKETS,
            fleet.finished[finished] - fleet.arrival[finished],
            labels,
            created,
        ),
        _histogram(
            "vllm:request_queue_time_seconds",
            "Histogram of time spent in WAITING phase for request.",
            REQUEST_LATENCY_BUCKETS,
            fleet.admitted[finished] - fleet.engine_arrival[finished],
            labels,
            created,
        ),
        info,
    ]


class _Families:
    """A collector that hands ``prometheus_client`` families already built."""

    def __init__(self, families: Iterable[Metric]) -> None:
        self.families = list(families)

    def collect(self) -> Iterable[Metric]:
        return self.families


def render(fleet: Fleet, now: float, model_name: str, epoch: float = 0.0) -> dict[int, str]:
    """The ``/metrics`` text of every replica that is up at ``now`` (ready, not removed), by replica index:
    a replica that is starting serves nothing yet, and one that is gone, nothing any more."""
    pages = {}
    for replica in fleet.live:
        if replica.ready_at > now:
            continue
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Families(replica_families(fleet, replica, model_name, epoch)))
        pages[replica.index] = generate_latest(registry).decode()
    return pages
