"""The Prometheus source's handling of bad answers, against a fake HTTP server (a unit test may fake)."""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autoscaler.metrics.prometheus import PrometheusSource, parse_matrix
from autoscaler.metrics.queries import default_query, metric_queries, promql_string, regex_literal, replicas_query
from autoscaler.metrics.source import Failure
from policies.base import usable
from policies.policy_file import PrometheusConfig, parse_policy_document
from tests.helpers import workload_doc


class FakePrometheus:
    def __init__(self) -> None:
        self.answer: tuple[int, Any] = (200, {"status": "success", "data": {"resultType": "vector", "result": []}})
        self.delay = 0.0
        self.raw: bytes | None = None  # a body that is not JSON, sent as is
        self.headers: list[str | None] = []
        self.paths: list[str] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                fake.headers.append(self.headers.get("Authorization"))
                fake.paths.append(self.path)
                time.sleep(fake.delay)
                status, body = fake.answer
                data = fake.raw if fake.raw is not None else json.dumps(body).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    # The client stopped waiting (a delay beyond its timeout, as the timeout tests make): left
                    # to the server, the traceback lands on stderr later, in whatever test then captures it.
                    pass

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def vector(self, *samples: tuple[float, str]) -> None:
        result = [{"metric": {"pod": f"p{i}"}, "value": [t, v]} for i, (t, v) in enumerate(samples)]
        self.answer = (200, {"status": "success", "data": {"resultType": "vector", "result": result}})


@pytest.fixture
def fake() -> Iterator[FakePrometheus]:
    server = FakePrometheus()
    yield server
    server.server.shutdown()


def _source(url: str, **extra: Any) -> PrometheusSource:
    return PrometheusSource(PrometheusConfig(url=url, timeout=0.5, **extra))


def test_one_value(fake: FakePrometheus) -> None:
    now = time.time()
    fake.vector((now, "12.5"))
    result = _source(fake.url).query_one("q", now)
    assert result.ok and result.value == 12.5


@pytest.mark.parametrize(
    ("setup", "failure"),
    [
        (lambda f, now: f.vector(), Failure.EMPTY),
        (lambda f, now: f.vector((now, "NaN")), Failure.NOT_FINITE),
        (lambda f, now: f.vector((now, "+Inf")), Failure.NOT_FINITE),
        (lambda f, now: f.vector((now, "1"), (now, "2")), Failure.MULTIPLE_SERIES),
        (lambda f, now: f.vector((now - 3600, "1")), Failure.STALE),
        (lambda f, now: setattr(f, "answer", (500, {"status": "error"})), Failure.HTTP_ERROR),
        (
            lambda f, now: setattr(f, "answer", (200, {"status": "success", "data": {"result": "x"}})),
            Failure.BAD_RESPONSE,
        ),
        (lambda f, now: (f.vector((now, "1")), setattr(f, "delay", 1.5)), Failure.TIMEOUT),
    ],
)
def test_bad_answers_are_no_value(fake: FakePrometheus, setup: Any, failure: Failure) -> None:
    now = time.time()
    setup(fake, now)
    result = _source(fake.url).query_one("q", now)
    assert result.failure == failure and not result.ok
    # NaN is carried, for a latency quantile's "no request in the window" (policies.base.metric_value).
    assert result.value is None or (failure == Failure.NOT_FINITE and math.isnan(result.value))


def test_unreachable() -> None:
    result = _source("http://127.0.0.1:9").query_one("q", time.time())
    assert result.failure == Failure.UNREACHABLE


def test_bearer_token_is_reread_every_call(fake: FakePrometheus, tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("first\n")
    source = _source(fake.url, bearerTokenFile=str(token))
    source.query_one("q", time.time())
    token.write_text("second")
    source.query_one("q", time.time())
    assert fake.headers == ["Bearer first", "Bearer second"]


def test_each_distinct_query_is_sent_once(fake: FakePrometheus) -> None:
    fake.vector((time.time(), "1"))
    source = _source(fake.url)
    results = source.query(["a", "b", "a", "a"], time.time())
    assert set(results) == {"a", "b"} and source.requests_sent == 2


def test_tls_verification_is_on_by_default() -> None:
    assert _source("https://prometheus:9090").client._session.verify is True
    assert _source("https://prometheus:9090", caFile="/etc/ca.pem").client._session.verify == "/etc/ca.pem"
    assert _source("https://prometheus:9090", insecureSkipVerify=True).client._session.verify is False


def test_default_queries_select_the_deployments_pods() -> None:
    workload = parse_policy_document(workload_doc(target={"namespace": "llm-serving", "name": "vllm.70b"})).workloads[0]
    waiting = default_query("num_requests_waiting", workload)
    assert waiting == 'sum(vllm:num_requests_waiting{namespace="llm-serving",pod=~"vllm\\\\.70b-[a-z0-9]+-[a-z0-9]+"})'
    kv = default_query("gpu_cache_usage_perc", workload) or ""
    assert "vllm:kv_cache_usage_perc" in kv and " or " in kv and "vllm:gpu_cache_usage_perc" in kv
    assert (
        replicas_query(workload)
        == 'max(kube_deployment_status_replicas_ready{namespace="llm-serving",deployment="vllm.70b"})'
    )


def test_label_values_cannot_inject() -> None:
    assert promql_string('a"}) or vector(1) #') == '"a\\"}) or vector(1) #"'
    assert promql_string("back\\slash") == '"back\\\\slash"'
    assert regex_literal("a.b*c") == "a\\.b\\*c"


def test_a_metric_without_query_or_default_is_a_validation_error() -> None:
    from policies.policy_file import PolicyFileError

    with pytest.raises(PolicyFileError, match=r"metrics\[0\].query: required for 'queue_depth'"):
        parse_policy_document(workload_doc(metrics=[{"name": "queue_depth", "target": {"value": 1}}]))
    workload = parse_policy_document(
        workload_doc(metrics=[{"name": "queue_depth", "query": "sum(x)", "target": {"value": 1}}])
    ).workloads[0]
    assert metric_queries(workload) == {"queue_depth": "sum(x)"}


def test_workloads_share_one_batched_request_per_metric() -> None:
    from autoscaler.metrics.source import Sample, VectorResult
    from autoscaler.observer import Observer

    workloads = [
        {
            "target": {"namespace": f"ns{i % 3}", "name": f"app{i}"},
            "maxReplicas": 4,
            "metrics": [
                {"name": "num_requests_waiting", "target": {"value": 1}},
                {"name": "gpu_cache_usage_perc", "target": {"type": "Value", "value": 0.8}},
            ],
        }
        for i in range(50)
    ]
    document = parse_policy_document({"workloads": workloads})

    class Source:
        def __init__(self) -> None:
            self.sent: list[str] = []
            self.stale = False  # app1's two pods

        def query(self, queries: object, now: float) -> dict[str, object]:
            return {}

        def query_vector(self, query: str, now: float) -> VectorResult:
            """Each workload's series as a batch answers it, by owner (2 pods waiting 3 each, the cache half full);
            app1's pods stale if so told, and then left out of a batch that leaves the stale pods out."""
            self.sent.append(query)
            if query.startswith("timestamp("):
                pods = [{"namespace": "ns1", "pod": f"app1-5f7c9d8b6-x{j}k2z"} for j in (0, 1)]
                return VectorResult([Sample(pod, -45.0) for pod in pods] if self.stale else [])
            value = 0.5 if "kv_cache_usage_perc" in query else 6.0
            left_out = {1} if "unless on (namespace, pod)" in query else set()
            series = [
                Sample({"namespace": f"ns{i % 3}", "kind": "Deployment", "owner": f"app{i}"}, value) for i in range(50)
            ]
            return VectorResult([s for i, s in enumerate(series) if i not in left_out])

    source = Source()
    observer = Observer(document, source)  # type: ignore[arg-type]
    observed = observer.collect(0.0)
    assert len(source.sent) == 3  # one per metric, and one for the stale pods
    assert len(observer.last_latencies) == 3  # one query latency per request, not per workload
    assert observed["ns1/app1"].values == {"num_requests_waiting": 6.0, "gpu_cache_usage_perc": 0.5}
    assert all(m.values["num_requests_waiting"] == 6.0 for m in observed.values())
    assert not any("unless" in q for q in source.sent)
    # app1's pods go stale (app10's, a name it begins, do not): the batches, asked at once with the dates, are asked
    # again without the stale pods, and app1 has no value, and says why.
    source.sent, source.stale = [], True
    observed = observer.collect(0.0)
    assert len(source.sent) == 5 and not any("unless" in q for q in source.sent[:3])
    assert all("unless on (namespace, pod) (" in q for q in source.sent[3:])
    stale = observed["ns1/app1"].failures["num_requests_waiting"]
    assert stale.failure == Failure.STALE and "is 45 s old (stalenessSeconds 120)" in stale.detail
    assert observed["ns1/app1"].values == {"num_requests_waiting": None, "gpu_cache_usage_perc": None}
    assert observed["ns1/app10"].values == {"num_requests_waiting": 6.0, "gpu_cache_usage_perc": 0.5}


@pytest.mark.parametrize("status", [200, 502])
def test_a_proxys_html_error_page_is_a_bad_answer_not_a_token_problem(
    fake: FakePrometheus, tmp_path: Path, status: int
) -> None:
    token = tmp_path / "token"
    token.write_text("secret")
    fake.raw = b"<html><body><h1>502 Bad Gateway</h1></body></html>"
    fake.answer = (status, {})
    result = _source(fake.url, bearer_token_file=str(token)).query_one("up", time.time())
    assert result.failure == (Failure.BAD_RESPONSE if status == 200 else Failure.HTTP_ERROR)
    assert "token" not in result.detail


def test_an_absurd_value_is_held_like_nan(fake: FakePrometheus) -> None:
    now = time.time()
    fake.vector((now, "1e306"))
    result = _source(fake.url).query_one("up", now)
    assert result.failure == Failure.NOT_FINITE and "1e306" in result.detail
    fake.vector((now, "2e11"), (now, "1e306"))
    vector = _source(fake.url).query_vector("up", now)
    assert [s.value for s in vector.samples] == [2e11]


_NAME = "[a-z0-9]([a-z0-9-]{0,10}[a-z0-9])?"


@settings(max_examples=400, deadline=None)
@given(
    name=st.from_regex(_NAME, fullmatch=True),
    other=st.from_regex(_NAME, fullmatch=True),
    own=st.booleans(),
    suffix=st.one_of(
        st.from_regex(r"-[a-z0-9]{1,10}-[a-z0-9]{1,5}", fullmatch=True),
        st.from_regex(r"-[0-9]{1,3}", fullmatch=True),
        st.from_regex(r"(-[a-z0-9]{0,4}){0,4}", fullmatch=True),
    ),
    stateful=st.booleans(),
)
def test_a_pods_owners_are_the_workloads_whose_pattern_matches_it(
    name: str, other: str, own: bool, suffix: str, stateful: bool
) -> None:
    """The observer finds a workload's pods by ``pod_owners`` in one lookup; it must find exactly the pods
    ``pod_pattern`` (what the PromQL selector matches) would."""
    from autoscaler.metrics.queries import pod_owners, pod_pattern
    from policies.policy_file import parse_policy_document
    from tests.helpers import workload_doc

    pod = (name if own else other) + suffix
    kind = "StatefulSet" if stateful else "Deployment"
    workload = parse_policy_document(workload_doc(target={"kind": kind, "namespace": "llm", "name": name})).workloads[0]
    assert bool(pod_pattern(workload).fullmatch(pod)) == ((stateful, name) in pod_owners(pod))


def test_a_pod_name_that_reads_both_ways_belongs_to_both() -> None:
    from autoscaler.metrics.queries import pod_owners

    assert pod_owners("web-0-1") == [(False, "web"), (True, "web-0")]
    assert pod_owners("vllm-5d8f7c6b9-x7k2p") == [(False, "vllm")]
    assert pod_owners("vllm-3") == [(True, "vllm")]
    assert pod_owners("vllm") == []


def _matrix(*series: tuple[dict[str, str], list[tuple[float, str]]]) -> dict[str, Any]:
    result = [{"metric": labels, "values": [[t, v] for t, v in values]} for labels, values in series]
    return {"status": "success", "data": {"resultType": "matrix", "result": result}}


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (json.dumps(_matrix()), []),
        (
            json.dumps(_matrix(({"pod": "a"}, [(1, "2"), (2, "NaN"), (3, "+Inf"), (4, "1e306"), (5, "3.5")]))),
            [({"pod": "a"}, [1.0, 5.0], [2.0, 3.5])],
        ),
        # A label naming the result list, text past ASCII, the answer indented: the list is found where it opens.
        (
            json.dumps(_matrix(({"q": '"result":[', "ns": "ünï"}, [(1, "1")]), ({}, [(2, "2")])), indent=2),
            [({"q": '"result":[', "ns": "ünï"}, [1.0], [1.0]), ({}, [2.0], [2.0])],
        ),
        (json.dumps(_matrix()) + "\n", []),
        # A native histogram's series carries "histograms", not "values": a series without samples, as before.
        (
            '{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"a":"b"},"histograms":[]}]}}',
            [({"a": "b"}, [], [])],
        ),
    ],
)
def test_a_range_answer_is_parsed_series_by_series(body: str, expected: list[Any]) -> None:
    parsed = [(s.labels, list(s.stamps), list(s.values)) for s in parse_matrix(body)]
    assert parsed == expected


@pytest.mark.parametrize(
    "body",
    [
        b"<html>502 Bad Gateway</html>",
        b'{"status":"error","errorType":"bad_data","error":"the result is unknown"}',
        json.dumps(_matrix(({"pod": "a"}, [(1, "1")]))).encode()[:-12],  # cut short
        b'{"status":"success","data":{"resultType":"matrix","result":[{"metric":{},"values":[[1,"x"]]}]}}',
    ],
)
def test_what_is_not_a_range_answer_raises(body: bytes) -> None:
    with pytest.raises((ValueError, KeyError)):
        parse_matrix(body.decode("utf-8"))


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.dictionaries(st.text(max_size=8), st.text(max_size=12), max_size=3),
            st.lists(st.tuples(st.integers(0, 2**31), st.floats(allow_nan=True, allow_infinity=True)), max_size=6),
        ),
        max_size=4,
    ),
    st.sampled_from([None, 1]),
)
def test_the_lean_parse_equals_the_whole_answers(series: list[Any], indent: int | None) -> None:
    """``parse_matrix`` equals reading the whole answer with ``json.loads``, for any labels and values."""
    answer = _matrix(*((labels, [(t, repr(v)) for t, v in values]) for labels, values in series))
    whole = [
        (item["metric"], [float(t) for t, v in item["values"] if usable(float(v))])
        for item in json.loads(json.dumps(answer))["data"]["result"]
    ]
    lean = [(s.labels, list(s.stamps)) for s in parse_matrix(json.dumps(answer, indent=indent))]
    assert lean == whole


@pytest.mark.parametrize(
    ("status", "body", "failure", "detail"),
    [
        (200, json.dumps(_matrix(({"pod": "a"}, [(1, "4")]))).encode(), None, ""),
        (200, json.dumps(_matrix()).encode(), Failure.EMPTY, "no series"),
        (
            422,
            b'{"status":"error","error":"query processing would load too many samples"}',
            Failure.HTTP_ERROR,
            "too many samples",
        ),
        (200, b"<html>proxy</html>", Failure.BAD_RESPONSE, "not Prometheus's JSON"),
        (200, b"\xff\xfe", Failure.BAD_RESPONSE, "not Prometheus's JSON"),
    ],
)
def test_range_answers(fake: FakePrometheus, status: int, body: bytes, failure: Failure | None, detail: str) -> None:
    fake.raw, fake.answer = body, (status, {})
    answer = _source(fake.url).query_ranges("q", 0.4, 120.6, 8.64)  # a day read 10,000 points apart at 5 s
    assert answer.failure == failure and detail in answer.detail
    assert [list(s.values) for s in answer.series] == ([[4.0]] if failure is None else [])
    # Whole seconds as the client sends them; the step a float of seconds ("8.64s" is no Prometheus duration).
    assert fake.paths[-1].startswith("/api/v1/query_range?") and fake.paths[-1].endswith("start=0&end=121&step=8.64")
