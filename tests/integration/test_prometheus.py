"""The metric source against a real Prometheus scraping a vLLM-shaped exporter with known values."""

from __future__ import annotations

import csv
import math
import time
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from autoscaler.cli import main
from autoscaler.metrics.prometheus import PrometheusSource
from autoscaler.metrics.source import Failure, QueryResult
from autoscaler.observer import Observer
from autoscaler.testing.servers import PrometheusServer, VllmExporter, wait_for
from autoscaler.warm_up import FleetHistory, warm_up
from policies.base import Observation
from policies.histogram import PROMPT_TOKEN_BUCKETS
from policies.pipeline import Reason
from policies.policy_file import PolicyFile, parse_policy_document

pytestmark = pytest.mark.integration
NS, NAME = "llm-serving", "vllm-llama3-70b"
KEY = f"{NS}/{NAME}"


def _document(url: str, metrics: list[dict[str, Any]] | None = None) -> PolicyFile:
    return parse_policy_document(
        {
            "interval": 5,
            "prometheus": {"url": url, "timeout": 2},
            "workloads": [
                {
                    "target": {"namespace": NS, "name": NAME},
                    "minReplicas": 1,
                    "maxReplicas": 10,
                    "metrics": metrics
                    or [
                        {"name": "num_requests_waiting", "target": {"type": "AverageValue", "value": 2}},
                        {"name": "kv_cache_usage_perc", "target": {"type": "Value", "value": 0.85}},
                    ],
                }
            ],
        }
    )


def _collect(observer: Observer) -> dict[str, float | None]:
    return observer.collect(time.time())[KEY].values


def _until(observer: Observer, metric: str, value: float, what: str) -> dict[str, float | None]:
    """Poll until Prometheus has scraped the exporter's new value."""
    found: dict[str, dict[str, float | None]] = {}

    def check() -> bool:
        found["v"] = _collect(observer)
        return found["v"].get(metric) == value

    wait_for(check, 30, what)
    return found["v"]


def test_values_flow_through_to_observations(exporter: VllmExporter, prometheus: PrometheusServer) -> None:
    exporter.set_pods(NS, NAME, waiting=[3, 4, 5], kv=[0.2, 0.5, 0.7])
    exporter.set_pods("other", NAME, waiting=[100], kv=[0.99])  # another namespace's pods are not selected
    exporter.set(
        "vllm:num_requests_waiting", 50, namespace=NS, pod=f"{NAME}-canary-5f6d7c9b8-x2k9p", model_name="m"
    )  # another Deployment
    observer = Observer(_document(prometheus.url), PrometheusSource(_document(prometheus.url).prometheus))
    values = _until(observer, "num_requests_waiting", 12, "the exporter's values in Prometheus")
    assert values == {"num_requests_waiting": 12.0, "kv_cache_usage_perc": 0.7}
    exporter.set_pods(NS, NAME, waiting=[10, 10], kv=[0.9, 0.95])
    values = _until(observer, "num_requests_waiting", 20, "an update")
    assert values["kv_cache_usage_perc"] == 0.95


def test_both_kv_cache_metric_generations(exporter: VllmExporter, prometheus: PrometheusServer) -> None:
    document = _document(prometheus.url)
    observer = Observer(document, PrometheusSource(document.prometheus))
    exporter.set_pods(NS, NAME, waiting=[0, 0], old_kv=[0.3, 0.6])  # vLLM before 0.12: only the old name
    assert wait_for(lambda: _collect(observer)["kv_cache_usage_perc"] == 0.6, 30, "the old metric name")
    # During an upgrade: one pod with both names (current wins), one with only the old one.
    exporter.set_pods(NS, NAME, waiting=[0], kv=[0.4], old_kv=[0.9])
    exporter.set("vllm:gpu_cache_usage_perc", 0.5, namespace=NS, pod=f"{NAME}-7d9f8c6b5-old12", model_name="m")
    assert wait_for(lambda: _collect(observer)["kv_cache_usage_perc"] == 0.5, 30, "the mixed generations")


def test_a_query_with_several_series_is_no_value(exporter: VllmExporter, prometheus: PrometheusServer) -> None:
    document = _document(
        prometheus.url,
        [
            {
                "name": "num_requests_waiting",
                "query": f'vllm:num_requests_waiting{{namespace="{NS}"}}',
                "target": {"type": "AverageValue", "value": 2},
            },
        ],
    )
    exporter.set_pods(NS, NAME, waiting=[1, 2, 3])
    source = PrometheusSource(document.prometheus)
    observer = Observer(document, source)
    wait_for(
        lambda: (
            source.query_one(document.workloads[0].metrics[0].query or "", time.time()).failure
            == Failure.MULTIPLE_SERIES
        ),
        30,
        "three series",
    )
    with capture_logs() as logs:
        metrics = observer.collect(time.time())[KEY]
    assert metrics.values == {"num_requests_waiting": None}
    assert metrics.failures["num_requests_waiting"].failure == Failure.MULTIPLE_SERIES
    assert any(e["event"] == "metric-unavailable" and e["reason"] == "multiple-series" for e in logs)


def test_prometheus_stopped_mid_run_holds_then_recovers(exporter: VllmExporter, prometheus: PrometheusServer) -> None:
    document = _document(prometheus.url)
    workload = document.workloads[0]
    decider = document.decider(workload)
    observer = Observer(document, PrometheusSource(document.prometheus))
    exporter.set_pods(NS, NAME, waiting=[9, 9, 9], kv=[0.5, 0.5, 0.5])
    wait_for(lambda: _collect(observer)["num_requests_waiting"] == 27, 30, "the first values")

    prometheus.stop()
    with capture_logs() as logs:
        metrics = observer.collect(time.time())[KEY]
    assert metrics.all_failed
    assert {f.failure for f in metrics.failures.values()} == {Failure.UNREACHABLE}
    assert any(e["event"] == "metric-unavailable" and e["reason"] == "unreachable" for e in logs)
    decision = decider.decide(Observation(time.time(), 3, metrics.values))
    assert (decision.desired, decision.reason) == (3, Reason.METRICS_UNAVAILABLE)

    prometheus.start()
    wait_for(lambda: _collect(observer)["num_requests_waiting"] == 27, 30, "recovery")
    decision = decider.decide(Observation(time.time(), 3, _collect(observer)))
    assert decision.desired > 3


def test_record_then_replay(exporter: VllmExporter, prometheus: PrometheusServer, tmp_path: Path) -> None:
    """``replicas`` is the count asked for (spec: 5 while a scale-up starts) and ``ready_replicas`` the ready
    one (3): replay decides from what was asked for, so it does not repeat a scale-up during a cold start."""
    exporter.set_pods(NS, NAME, waiting=[2, 4, 6], kv=[0.1, 0.2, 0.3])
    exporter.set("kube_deployment_spec_replicas", 5.0, namespace=NS, deployment=NAME)
    document = _document(prometheus.url)
    observer = Observer(document, PrometheusSource(document.prometheus))
    wait_for(lambda: _collect(observer)["num_requests_waiting"] == 12, 30, "the values")
    start = time.time()
    wait_for(lambda: time.time() - start > 4, 10, "a few seconds of samples")
    policy = tmp_path / "policy.yaml"
    policy.write_text(document.model_dump_json(by_alias=True, exclude_none=True))
    recorded = tmp_path / "recorded.csv"
    code = main(
        [
            "record",
            "--config",
            str(policy),
            "--start",
            f"{start:.0f}",
            "--end",
            f"{time.time():.0f}",
            "--step",
            "1s",
            "--out",
            str(recorded),
        ]
    )
    assert code == 0
    rows = list(csv.DictReader(recorded.open()))
    by_metric: dict[str, set[float]] = {}
    for row in rows:
        assert row["workload"] == KEY
        by_metric.setdefault(row["metric"], set()).add(float(row["value"]))
    assert by_metric == {
        "num_requests_waiting": {12.0},
        "kv_cache_usage_perc": {0.3},
        "replicas": {5.0},
        "ready_replicas": {3.0},
    }
    decisions = tmp_path / "decisions.csv"
    assert main(["replay", "--config", str(policy), "--metrics", str(recorded), "--out", str(decisions)]) == 0
    replayed = list(csv.DictReader(decisions.open()))
    assert len(replayed) == len({row["timestamp"] for row in rows}) >= 4
    assert replayed[0]["current_replicas"] == "5" and replayed[0]["recommended_replicas"] == "6"


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full, a file every write to fails")
def test_record_and_replay_say_an_output_that_fails_mid_write(
    exporter: VllmExporter, prometheus: PrometheusServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """/dev/full passes the check made before the work (its folder is writable) and fails on the write."""
    exporter.set_pods(NS, NAME, waiting=[2], kv=[0.1])
    document = _document(prometheus.url)
    observer = Observer(document, PrometheusSource(document.prometheus))
    wait_for(lambda: _collect(observer)["num_requests_waiting"] == 2, 30, "the values")
    policy = tmp_path / "policy.yaml"
    policy.write_text(document.model_dump_json(by_alias=True, exclude_none=True))
    now = time.time()
    window = ["--start", f"{now - 30:.0f}", "--end", f"{now:.0f}", "--step", "1s"]
    assert main(["record", "--config", str(policy), *window, "--out", "/dev/full"]) == 1
    assert "cannot write /dev/full: No space left on device" in capsys.readouterr().err
    recorded = tmp_path / "recorded.csv"
    assert main(["record", "--config", str(policy), *window, "--out", str(recorded)]) == 0
    assert main(["replay", "--config", str(policy), "--metrics", str(recorded), "--out", "/dev/full"]) == 1
    assert "cannot write /dev/full: No space left on device" in capsys.readouterr().err


def test_record_fails_with_exit_1_when_prometheus_is_down(tmp_path: Path) -> None:
    from autoscaler.testing.servers import free_port

    document = _document(f"http://127.0.0.1:{free_port()}")
    policy = tmp_path / "policy.yaml"
    policy.write_text(document.model_dump_json(by_alias=True, exclude_none=True))
    now = time.time()
    assert (
        main(
            [
                "record",
                "--config",
                str(policy),
                "--start",
                f"{now - 60:.0f}",
                "--end",
                f"{now:.0f}",
                "--out",
                str(tmp_path / "r.csv"),
            ]
        )
        == 1
    )


def _export(exporter: VllmExporter, targets: list[tuple[str, str]], started: float) -> None:
    """Two pods a workload: gauges that differ by workload and pod, counters rising at their own rates, the TTFT
    histogram (its sum 0.4 s a first token) and lognormal prompt lengths on vLLM's buckets."""
    for w, (namespace, name) in enumerate(targets):
        for p in range(2):
            labels = {"namespace": namespace, "pod": f"{name}-6c8d9f7b4-p{p}q{w}", "model_name": "m"}
            exporter.set("vllm:num_requests_waiting", w + p, **labels)
            exporter.set("vllm:num_requests_running", 2 * w + p, **labels)
            exporter.set(
                "vllm:kv_cache_usage_perc" if p else "vllm:gpu_cache_usage_perc", 0.1 * (w + 1) + p / 10, **labels
            )
    for w, (namespace, name) in enumerate(targets):
        for p in range(2):
            labels = {"namespace": namespace, "pod": f"{name}-6c8d9f7b4-p{p}q{w}", "model_name": "m"}
            rate = 100.0 * (w + 1) + p

            def counter(rate: float = rate) -> float:
                return rate * (time.time() - started)

            exporter.set("vllm:prompt_tokens_total", counter, **labels)
            exporter.set("vllm:generation_tokens_total", lambda rate=rate: rate / 4 * (time.time() - started), **labels)
            for bound, share in (("0.1", 0.2), ("0.5", 0.6), ("1.0", 0.9), ("2.5", 0.97), ("+Inf", 1.0)):
                exporter.set(
                    "vllm:time_to_first_token_seconds_bucket",
                    lambda share=share, rate=rate: share * rate / 50 * (time.time() - started),
                    le=bound,
                    **labels,
                )
            # The prompts' lengths: lognormal about 1,000 tokens, the log's spread 0.5, on vLLM's 1-2-5 buckets,
            # each bucket read on the same whole second (a clock read a bucket apart leaves the buckets' rates
            # apart by a millionth, which Prometheus's histogram_quantile mends as not monotonic and ours not).
            for bound in (*PROMPT_TOKEN_BUCKETS, math.inf):
                share = 1.0 if bound == math.inf else 0.5 * (1 + math.erf(math.log(bound / 1000) / 0.5 / math.sqrt(2)))
                exporter.set(
                    "vllm:request_prompt_tokens_bucket",
                    lambda share=share, rate=rate: share * rate / 50 * round(time.time() - started),
                    le="+Inf" if bound == math.inf else f"{bound:g}",
                    **labels,
                )
            # The histogram's count is its +Inf bucket; its sum, 0.4 s a first token.
            exporter.set(
                "vllm:time_to_first_token_seconds_count",
                lambda rate=rate: rate / 50 * (time.time() - started),
                **labels,
            )
            exporter.set(
                "vllm:time_to_first_token_seconds_sum",
                lambda rate=rate: 0.4 * rate / 50 * (time.time() - started),
                **labels,
            )


def test_batched_queries_equal_each_workloads_default_query(
    exporter: VllmExporter, prometheus: PrometheusServer
) -> None:
    """One request per metric for every workload, and the same values as the per-workload default queries."""
    from autoscaler.metrics.queries import default_query

    started = time.time()
    names = [
        "num_requests_waiting",
        "num_requests_running",
        "kv_cache_usage_perc",
        "time_to_first_token_p90_seconds",
        "prompt_tokens_per_second",
        "generation_tokens_per_second",
    ]
    targets = [(NS, NAME), (NS, "vllm-8b"), ("batch", "vllm-8b")]
    _export(exporter, targets, started)
    workloads = []
    for namespace, name in targets:
        workloads.append(
            {
                "target": {"namespace": namespace, "name": name},
                "maxReplicas": 9,
                "metrics": [{"name": n, "target": {"type": "AverageValue", "value": 1}} for n in names],
            }
        )
    document = parse_policy_document({"prometheus": {"url": prometheus.url}, "workloads": workloads})
    source = PrometheusSource(document.prometheus)
    observer = Observer(document, source)
    assert observer.requests_per_tick() == len(names) + 1  # a batch per metric and the freshness, for any number
    wait_for(
        lambda: all(v is not None for m in observer.collect(time.time()).values() for v in m.values.values()),
        40,
        "every metric of every workload",
    )
    ready_at = time.time()
    wait_for(lambda: time.time() > ready_at + 3, 10, "a few more scrapes for the rates")
    now = time.time()
    before = source.requests_sent
    batched = observer.collect(now)
    assert source.requests_sent - before == len(names) + 1
    for workload in document.workloads:
        for name in names:
            result = source.query_one(default_query(name, workload) or "", now)
            expected = result.value
            assert expected is not None, (workload.key, name, result.failure, result.detail)
            assert batched[workload.key].values[name] == pytest.approx(expected, rel=1e-9), (workload.key, name)
    # A workload that learns its capacity reads the TTFT quantile at its slo's target from the same histogram
    # batch as the p90: one request more in all, not one a workload.
    from policies.metric_names import TTFT_SLO

    learning = [
        {
            "target": {"namespace": namespace, "name": name},
            "maxReplicas": 9,
            "slo": {"ttftSeconds": 2, "target": 0.95},
            "capacity": {"promptTokensPerSecond": 1000, "runningRequests": 8, "learn": True},
        }
        for namespace, name in targets
    ]
    document = parse_policy_document({"prometheus": {"url": prometheus.url}, "workloads": learning})
    observer = Observer(document, source)
    assert observer.requests_per_tick() == 5  # prompt tokens, running, waiting, the histogram, the freshness
    now = time.time()
    collected = observer.collect(now)
    for workload in document.workloads:
        assert "histogram_quantile(0.95," in (default_query(TTFT_SLO, workload) or "")
        expected = source.query_one(default_query(TTFT_SLO, workload) or "", now).value
        assert expected is not None and collected[workload.key].values[TTFT_SLO] == pytest.approx(expected, rel=1e-9)
    # A workload whose learned headroom the error budget hands back reads the histogram's sum and count, batched
    # too, and, not told its prompts' spread, the prompt-length histogram: three requests more in all; its prompt
    # tokens are among its metrics already.
    from policies.metric_names import FIRST_TOKENS_OVER_SLO, FIRST_TOKENS_RATE, PROMPT_SPREAD, TTFT_SECONDS_RATE

    budget = {"learnedHeadroom": {}, "errorBudget": {"prefillTokensPerSecond": 1000}}
    spending = [
        {**w, "capacity": {**w["capacity"], "learn": False}, "policy": {"type": "predictive", **budget}}
        for w in learning
    ]
    document = parse_policy_document({"prometheus": {"url": prometheus.url}, "workloads": spending})
    observer = Observer(document, source)
    # prompt tokens, running, waiting, the histogram's sum, count and buckets, the prompts' histogram, freshness
    assert observer.requests_per_tick() == 8
    now = time.time()
    collected = observer.collect(now)
    for workload in document.workloads:
        values = collected[workload.key].values
        for name in (FIRST_TOKENS_RATE, TTFT_SECONDS_RATE, PROMPT_SPREAD, FIRST_TOKENS_OVER_SLO):
            expected = source.query_one(default_query(name, workload) or "", now).value
            assert expected is not None and values[name] == pytest.approx(expected, rel=1e-9), name
        # A tenth of the first tokens came later than 1.0 s, the bucket edge below the 2 s SLO.
        assert values[FIRST_TOKENS_OVER_SLO] / values[FIRST_TOKENS_RATE] == pytest.approx(0.1, rel=0.01)  # type: ignore[operator]
        assert values[PROMPT_SPREAD] == pytest.approx(0.5, abs=0.03)  # what the buckets were filled by
        # The mean time to first token, whatever part of the minute the young series fill: 0.4 s (to the
        # microseconds between the exporter's reading of the two counters' clocks).
        assert values[TTFT_SECONDS_RATE] / values[FIRST_TOKENS_RATE] == pytest.approx(0.4, rel=0.01)  # type: ignore[operator]


def test_owned_range_queries_equal_each_workloads_own(exporter: VllmExporter, prometheus: PrometheusServer) -> None:
    """A starting daemon reads history by series and namespaces (``warm_up.FleetHistory``): each workload's series
    in the owned query's answer equals what its own query returns over the same range, for every kind of series
    (sums, the KV gauge's max over both names, histogram quantiles, the prompts' spread, the counts, the activity),
    for Deployments and a StatefulSet, and a pod of another name is no workload's."""
    from autoscaler.metrics.queries import default_query, owned_query
    from autoscaler.record import series_queries
    from autoscaler.warm_up import owned_series
    from policies.metric_names import (
        FIRST_TOKENS_OVER_SLO,
        FIRST_TOKENS_RATE,
        PROMPT_SPREAD,
        TTFT_SECONDS_RATE,
        TTFT_SLO,
    )

    started = time.time()
    targets = [(NS, NAME), (NS, "vllm-8b"), ("batch", "vllm-8b")]
    _export(exporter, targets, started)
    for namespace, name in targets:
        exporter.set("kube_deployment_spec_replicas", 2.0, namespace=namespace, deployment=name)
        exporter.set("kube_deployment_status_replicas_ready", 2.0, namespace=namespace, deployment=name)
    for ordinal in range(3):  # a StatefulSet named as one of the Deployments' pods could be read
        pod = {"namespace": NS, "pod": f"vllm-8b-6c8d9f7b4-{ordinal}", "model_name": "m"}
        exporter.set("vllm:num_requests_waiting", 7.0 + ordinal, **pod)
    exporter.set("kube_statefulset_replicas", 3.0, namespace=NS, statefulset="vllm-8b-6c8d9f7b4")
    workloads = [
        {
            "target": {"namespace": namespace, "name": name, **({"kind": kind} if kind else {})},
            "maxReplicas": 9,
            "metrics": [
                {"name": n, "target": {"type": "AverageValue", "value": 1}}
                for n in ("num_requests_waiting", "kv_cache_usage_perc")
            ],
            "slo": {"ttftSeconds": 2, "target": 0.95},
            "activation": {"query": "vector(0)", "idleSeconds": 60},
            "minReplicas": 0,
        }
        for namespace, name, kind in [*((n, w, None) for n, w in targets), (NS, "vllm-8b-6c8d9f7b4", "StatefulSet")]
    ]
    document = parse_policy_document({"prometheus": {"url": prometheus.url}, "workloads": workloads})
    source = PrometheusSource(document.prometheus)
    wait_for(lambda: time.time() > started + 10, 15, "a few scrapes for the rates")
    # Two scrapes back: a scrape stamped before ``end`` but stored between the owned query and the workload's own
    # would change the last stamps' rates between them (CI saw 2.07167 against 2.07163 once).
    end = time.time() - 2
    start = end - 6
    histograms = {
        name: name for name in (TTFT_SLO, PROMPT_SPREAD, FIRST_TOKENS_RATE, TTFT_SECONDS_RATE, FIRST_TOKENS_OVER_SLO)
    }
    compared = set()
    for workload in document.workloads:
        target = workload.target
        for name, series in {**owned_series(workload), **histograms}.items():
            own = series_queries(workload).get(name) or default_query(name, workload) or ""
            owned = owned_query(series, [NS, "batch"], target.kind, workload.histogram_reading(name))
            answer = source.query_ranges(owned, start, end, 1)
            key = (target.namespace, target.name)
            mine = [s for s in answer.series if (s.labels.get("namespace"), s.labels.get("owner")) == key]
            alone = source.query_range(own, start, end, 1)
            if alone.failure is not None:  # the StatefulSet has no histograms, no KV gauge, no ready count
                assert not mine, (workload.key, name)
                continue
            assert len(mine) == 1, (workload.key, name, answer.failure, answer.detail)
            # And by name, as a part of a namespace too large for one query is read: this workload's series alone.
            named = owned_query(
                series, [target.namespace], target.kind, workload.histogram_reading(name), [target.name]
            )
            alone_by_name = source.query_ranges(named, start, end, 1).series
            assert [(s.labels.get("namespace"), s.labels.get("owner")) for s in alone_by_name] == [key]
            for found in (mine[0], alone_by_name[0]):
                assert list(found.stamps) == [t for t, _ in alone.samples], (workload.key, name)
                assert list(found.values) == pytest.approx([v for _, v in alone.samples], rel=1e-9), (
                    workload.key,
                    name,
                )
            compared.add((target.kind, name))
    every = {"num_requests_waiting", "kv_cache_usage_perc", "replicas", "ready_replicas", "activity", *histograms}
    assert compared == {("Deployment", n) for n in every} | {
        ("StatefulSet", n) for n in ("num_requests_waiting", "replicas")
    }


def test_both_kinds_are_one_request_a_metric_and_a_stray_pod_of_the_other_kind_is_not_read(
    exporter: VllmExporter, prometheus: PrometheusServer
) -> None:
    """A Deployment and a StatefulSet workload share each metric's request; each reads its own pods, as its own
    query does: pods named as a StatefulSet of the Deployment's name (``web-0``), or as a Deployment of the
    StatefulSet's (``db-5f6d7c8b9-q1w2e``), no workload's, are neither's."""
    from autoscaler.metrics.queries import default_query

    kinds = {"web": "Deployment", "db": "StatefulSet"}
    workloads = [
        {
            "target": {"namespace": NS, "name": name, "kind": kind},
            "maxReplicas": 9,
            "metrics": [{"name": "num_requests_waiting", "target": {"type": "AverageValue", "value": 2}}],
        }
        for name, kind in kinds.items()
    ]
    document = parse_policy_document({"prometheus": {"url": prometheus.url}, "workloads": workloads})
    exporter.set_pods(NS, "web", waiting=[1, 2])
    exporter.set_pods(NS, "db", waiting=[10, 20], stateful=True)
    for stray, waiting in (("web-0", 100.0), ("web-1", 200.0), ("db-5f6d7c8b9-q1w2e", 400.0)):
        exporter.set("vllm:num_requests_waiting", waiting, namespace=NS, pod=stray, model_name="m")
    source = PrometheusSource(document.prometheus)
    observer = Observer(document, source)
    assert observer.requests_per_tick() == 2  # the metric for both kinds, and the stale pods

    def read() -> bool:
        observed = observer.collect(time.time())
        return [observed[f"{NS}/{n}"].values["num_requests_waiting"] for n in kinds] == [3.0, 30.0]

    wait_for(read, 30, "each workload's own pods")
    now = time.time()
    for workload in document.workloads:
        own = source.query_one(default_query("num_requests_waiting", workload) or "", now).value
        assert observer.collect(now)[workload.key].values["num_requests_waiting"] == own


def _until_stale(observer: Observer, workload: str, metric: str, what: str) -> QueryResult:
    """Poll until ``workload``'s ``metric`` is held as stale; that failure."""
    found: dict[str, QueryResult] = {}

    def stale() -> bool:
        failure = observer.collect(time.time())[workload].failures.get(metric)
        if failure is not None and failure.failure == Failure.STALE:
            found["failure"] = failure
        return "failure" in found

    wait_for(stale, 30, what)
    return found["failure"]


def test_a_frozen_exporters_old_samples_are_stale(exporter: VllmExporter, prometheus: PrometheusServer) -> None:
    """An exporter whose samples carry a timestamp 205 s old: Prometheus's instant query stamps the values with
    the evaluation time, but their own timestamps say how old they are, and a 30 s ``stalenessSeconds`` holds
    them; the fresh workload beside it is read as usual, and one with a pod of each is its fresh pod's value (the
    batch asked without the stale pods, on the server)."""
    frozen, half = "vllm-frozen", "vllm-half"
    workloads = [
        {
            "target": {"namespace": NS, "name": name},
            "maxReplicas": 9,
            "metrics": [{"name": "num_requests_waiting", "target": {"type": "AverageValue", "value": 2}}],
        }
        for name in (NAME, frozen, half)
    ]
    document = parse_policy_document(
        {"prometheus": {"url": prometheus.url, "timeout": 2, "stalenessSeconds": 30}, "workloads": workloads}
    )
    observer = Observer(document, PrometheusSource(document.prometheus))
    exporter.set_pods(NS, NAME, waiting=[3, 4])
    _until(observer, "num_requests_waiting", 7.0, "the fresh workload's values")
    # (Set after: a Prometheus whose storage holds no sample yet refuses ones older than its start.)
    exporter.set_pods(NS, frozen, waiting=[8, 8], stamped_at=time.time() - 205)
    exporter.set_pods(NS, half, waiting=[5, 9], stamped_at=[None, time.time() - 205])

    failure = _until_stale(observer, f"{NS}/{frozen}", "num_requests_waiting", "the frozen samples held as stale")
    assert "s old" in failure.detail and "stalenessSeconds 30" in failure.detail
    observed = observer.collect(time.time())
    assert observed[f"{NS}/{half}"].values["num_requests_waiting"] == 5.0  # its frozen pod's 9 left out
    assert observed[f"{NS}/{NAME}"].values["num_requests_waiting"] == 7.0
    raw = PrometheusSource(document.prometheus).query_one(
        f'sum(vllm:num_requests_waiting{{namespace="{NS}",pod=~"{frozen}-.*"}})', time.time()
    )
    assert raw.value == 16.0  # the value alone looks current: only its timestamp tells


def test_a_custom_query_over_frozen_samples_is_stale(exporter: VllmExporter, prometheus: PrometheusServer) -> None:
    """A custom ``query`` is dated as a built-in metric is: by the samples of each selector it reads. Over the
    frozen pods (205 s old) it holds at ``stalenessSeconds`` 30, and the same query over the fresh ones is read; in
    one request a tick for all of them."""
    frozen = "vllm-frozen-custom"

    def workload(name: str) -> dict[str, object]:
        query = f'2 * max(vllm:num_requests_waiting{{namespace="{NS}",pod=~"{name}-.*"}})'
        return {
            "target": {"namespace": NS, "name": name},
            "maxReplicas": 9,
            "metrics": [{"name": "waiting", "query": query, "target": {"type": "AverageValue", "value": 2}}],
        }

    document = parse_policy_document(
        {
            "prometheus": {"url": prometheus.url, "timeout": 2, "stalenessSeconds": 30},
            "workloads": [workload(NAME), workload(frozen)],
        }
    )
    observer = Observer(document, PrometheusSource(document.prometheus))
    assert observer.requests_per_tick() == 3  # two custom queries, and one dating both
    exporter.set_pods(NS, NAME, waiting=[3, 4])
    _until(observer, "waiting", 8.0, "the fresh workload's values")
    exporter.set_pods(NS, frozen, waiting=[8, 8], stamped_at=time.time() - 205)

    failure = _until_stale(
        observer, f"{NS}/{frozen}", "waiting", "the frozen samples behind the custom query held as stale"
    )
    observed = observer.collect(time.time())
    assert "vllm:num_requests_waiting" in failure.detail and "stalenessSeconds 30" in failure.detail
    assert observed[f"{NS}/{NAME}"].values["waiting"] is not None  # fresh beside it


def test_an_idle_histogram_is_no_load_batched_and_custom(exporter: VllmExporter, prometheus: PrometheusServer) -> None:
    """Pods up and their TTFT histograms still (no request in the window): Prometheus's histogram_quantile
    is NaN, and so is the batched built-in; both are no load, not a metrics failure, and 8 replicas scale in."""
    exporter.set_pods(NS, NAME, waiting=[0, 0], running=[0, 0])
    for pod in exporter.pods[(NS, NAME)]:
        for bound, count in (("0.5", 10.0), ("1.0", 18.0), ("+Inf", 20.0)):
            exporter.set("vllm:time_to_first_token_seconds_bucket", count, namespace=NS, pod=pod, le=bound)
    custom = (
        f'histogram_quantile(0.9, sum by (le) (rate(vllm:time_to_first_token_seconds_bucket{{namespace="{NS}"}}[1m])))'
    )
    document = _document(
        prometheus.url,
        [
            {"name": "time_to_first_token_p90_seconds", "target": {"type": "Value", "value": 1.5}},
            {"name": "ttft_custom", "query": custom, "target": {"type": "Value", "value": 1.5}},
        ],
    )
    observer = Observer(document, PrometheusSource(document.prometheus))

    def both_nan() -> bool:
        values = _collect(observer)
        return all(v is not None and v != v for v in values.values())  # NaN, not None

    wait_for(both_nan, 40, "two scrapes of the still histograms")
    with capture_logs() as logs:
        observed = observer.collect(time.time())[KEY]
    assert observed.failures == {} and not [e for e in logs if e["event"] == "metric-unavailable"]
    decider = document.decider(document.workloads[0])
    decision = decider.decide(Observation(0.0, 8, observed.values, 8))
    assert decision.reason != Reason.METRICS_UNAVAILABLE and decision.recommended == 0


def test_a_starting_daemon_warms_its_policy_from_prometheus_history(
    exporter: VllmExporter, prometheus: PrometheusServer
) -> None:
    """``warm_up`` reads what ``record`` would write over the policy's history, through a real Prometheus's
    range API, and the predictive policy's trend holds those samples before its first decision."""
    exporter.set_pods(NS, NAME, waiting=[2, 4, 6], kv=[0.1, 0.2, 0.3])
    exporter.set("kube_deployment_spec_replicas", 3.0, namespace=NS, deployment=NAME)
    document = parse_policy_document(
        {
            **_document(prometheus.url).model_dump(by_alias=True, exclude_none=True),
            "interval": 1,
        }
    )
    workload = document.workloads[0].model_copy(update={"policy": {"type": "predictive"}})
    document = document.model_copy(update={"workloads": [workload]})
    source = PrometheusSource(document.prometheus)
    observer = Observer(document, source)
    wait_for(lambda: _collect(observer)["num_requests_waiting"] == 12, 30, "the values")
    start = time.time()
    wait_for(lambda: time.time() - start > 6, 12, "a few seconds of samples")
    policy: Any = document.decider(workload).policy
    outcome = warm_up(workload, policy, source, time.time(), 0.0, 1.0)
    assert outcome.failed == [] and outcome.samples >= 5
    since = [round(demand, 6) for at, demand in policy.state.trend.samples if at >= start]
    assert len(since) >= 4 and set(since) == {6.0}  # 12 waiting requests over a target of 2: the larger demand


def test_a_follower_decides_on_its_last_seconds_and_takes_the_rest_of_its_day_in_after(
    exporter: VllmExporter, prometheus: PrometheusServer
) -> None:
    """The default that follows its work, warmed through a real Prometheus's range API: listed (it decides) once its
    trend's window is read, the rest of its day still to be asked; then the rest is read, caught up apart and taken
    in: the budget holds first tokens from before the trend's window (``Policy.apart``, ``autoscaler.warm_up``)."""
    exporter.set_pods(NS, NAME, waiting=[0, 0], kv=[0.1, 0.1])
    born = time.time()
    for pod in exporter.pods[(NS, NAME)]:
        labels = {"namespace": NS, "pod": pod, "model_name": "meta-llama/Meta-Llama-3-70B-Instruct", "engine": "0"}
        for metric, per_second in (
            ("vllm:prompt_tokens_total", 1000.0),
            ("vllm:generation_tokens_total", 300.0),
            ("vllm:time_to_first_token_seconds_count", 2.0),
            ("vllm:time_to_first_token_seconds_sum", 1.2),
        ):
            exporter.set(metric, lambda rate=per_second: rate * (time.time() - born), **labels)
    budget = {"prefillTokensPerSecond": 1000, "promptLengthSigma": 0.5}
    utilization = {"start": 0.7, "prefillTokensPerSecond": 1000, "decodeTokensPerSecond": 300}
    document = parse_policy_document(
        {
            **_document(prometheus.url).model_dump(by_alias=True, exclude_none=True),
            "interval": 1,
        }
    )
    policy_block = {
        "type": "predictive",
        "trend": {"windowSeconds": 6},
        "errorBudget": budget,
        "utilization": utilization,
    }
    raw = document.model_dump(by_alias=True, exclude_none=True)
    raw["workloads"][0] |= {"policy": policy_block, "slo": {"ttftSeconds": 2, "target": 0.99}}
    document = parse_policy_document(raw)
    workload = document.workloads[0]
    source = PrometheusSource(document.prometheus)
    wait_for(lambda: time.time() - born > 35, 45, "thirty-five seconds of samples")
    policy: Any = document.decider(workload).policy
    assert policy.apart() is not None and policy.detail_seconds == 6
    history = FleetHistory([(workload, policy)], time.time(), 0.0, 1.0)
    listed: list[Any] = []
    while not listed:
        history.read_next(source)
        listed = history.finished()
    assert listed[0][1].failed == [] and history.catching_up(KEY) and not history.done
    recent = policy.state.budget.first_tokens
    assert policy.state.budget.span <= 6 and recent > 0
    while not history.done:
        history.read_next(source)
    assert history.members == {} and policy.state.budget.span > 6 and policy.state.budget.first_tokens > recent
