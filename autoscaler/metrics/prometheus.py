"""The Prometheus metric source, on ``prometheus-api-client``."""

from __future__ import annotations

import json
import math
import re
import threading
import time
from array import array
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import orjson
import requests
from prometheus_api_client import PrometheusConnect
from prometheus_api_client.exceptions import PrometheusApiClientException
from urllib3 import exceptions as urllib3_errors
from urllib3.util.retry import Retry

from autoscaler.logs import get_logger
from autoscaler.metrics.source import Failure, QueryResult, RangeSeries, RangeVector, Sample, Series, VectorResult
from policies.base import MAX_METRIC_VALUE, usable
from policies.policy_file import PrometheusConfig

log = get_logger("autoscaler.metrics")


class TokenUnreadable(Exception):
    """The bearer token file could not be read (apart from the request's own failures)."""


class PrometheusSource:
    """Instant queries per tick, each distinct query once; range queries for ``record``.

    TLS verification is on unless ``insecureSkipVerify``; ``caFile`` adds a CA bundle; the bearer token is
    re-read from ``bearerTokenFile`` on every call, so a rotated projected token is picked up.
    """

    def __init__(self, config: PrometheusConfig) -> None:
        self.config = config
        session = requests.Session()
        session.verify = False if config.insecure_skip_verify else (config.ca_file or True)
        self.client = PrometheusConnect(
            url=config.url.rstrip("/"),
            session=session,
            retry=Retry(total=0, read=False),  # no hidden retries: one tick, one try
            timeout=config.timeout,
        )
        self.requests_sent = 0
        self._counted = threading.Lock()  # a tick's queries are asked at once (``autoscaler.observer``)

    def _refresh_headers(self) -> None:
        if self.config.bearer_token_file:
            try:
                token = Path(self.config.bearer_token_file).read_text(encoding="utf-8").strip()
            except (OSError, UnicodeDecodeError) as exc:
                raise TokenUnreadable(f"cannot read the bearer token {self.config.bearer_token_file}: {exc}") from exc
            self.client.headers = {"Authorization": f"Bearer {token}"}

    def _failure(self, exc: Exception) -> tuple[Failure, str]:
        if isinstance(exc, TokenUnreadable):
            return Failure.UNREACHABLE, str(exc)
        if isinstance(exc, ValueError):  # a body that is not Prometheus's JSON: a proxy's HTML error page
            return Failure.BAD_RESPONSE, f"the answer is not Prometheus's JSON ({str(exc)[:120]})"
        if isinstance(
            exc, (requests.ConnectionError, urllib3_errors.NewConnectionError, urllib3_errors.ProtocolError)
        ) and not isinstance(exc, requests.Timeout):
            return Failure.UNREACHABLE, str(exc).splitlines()[0][:300]
        if isinstance(exc, (requests.Timeout, urllib3_errors.TimeoutError)):
            return Failure.TIMEOUT, f"no answer within {self.config.timeout} s"
        if isinstance(exc, requests.ConnectionError):
            return Failure.UNREACHABLE, str(exc).splitlines()[0][:300]
        if isinstance(exc, PrometheusApiClientException):
            return Failure.HTTP_ERROR, str(exc)[:300]
        return Failure.BAD_RESPONSE, repr(exc)[:300]

    def _request(self, send: Callable[[], Any]) -> tuple[Any, Failure | None, str, float]:
        """One request: token refreshed, counted and timed; any failure is "no value", never a crash."""
        started = time.monotonic()
        try:
            self._refresh_headers()
            with self._counted:
                self.requests_sent += 1
            data = send()
        except Exception as exc:
            failure, detail = self._failure(exc)
            return None, failure, detail, time.monotonic() - started
        return data, None, "", time.monotonic() - started

    def _ask(self, path: str, params: dict[str, Any]) -> bytes:
        """One GET of the HTTP API as ``prometheus-api-client``'s ``custom_query`` and ``custom_query_range`` send it
        (its URL, session, headers, auth and timeout), the answer's bytes; an HTTP error raises as the client's do.
        The answer is decoded here, not by the client's ``response.json()``: a batch over 10,000 workloads is some
        10,000 series, parsed by orjson in a third of the time (docs/decisions/daemon-scale.md)."""
        client = self.client
        response = client._session.request(
            method=client._method,
            url=f"{client.url}/api/v1/{path}",
            params=params,
            verify=client._session.verify,
            headers=client.headers,
            auth=client.auth,
            cert=client._session.cert,
            timeout=client._timeout,
        )
        content: bytes = response.content
        if response.status_code != 200:
            raise PrometheusApiClientException(f"HTTP Status Code {response.status_code} ({content!r})")
        return content

    def _instant(self, query: str, now: float) -> tuple[Any, Failure | None, str, float]:
        return self._request(
            lambda: orjson.loads(self._ask("query", {"query": query, "time": f"{now:.3f}"}))["data"]["result"]
        )

    def query_one(self, query: str, now: float) -> QueryResult:
        data, failure, detail, latency = self._instant(query, now)
        if failure is not None:
            return QueryResult(None, failure, detail, latency)
        return self._interpret(data, now, latency)

    def _interpret(self, data: Any, now: float, latency: float) -> QueryResult:
        if isinstance(data, dict) and "result" in data:  # a scalar result
            data = [{"value": data["result"]}] if data.get("resultType") == "scalar" else data["result"]
        if not isinstance(data, list):
            return QueryResult(None, Failure.BAD_RESPONSE, f"unexpected result {str(data)[:200]}", latency)
        if not data:
            return QueryResult(None, Failure.EMPTY, "the query returned no series", latency)
        if len(data) > 1:
            labels = [item.get("metric", {}) for item in data[:3]]
            return QueryResult(
                None,
                Failure.MULTIPLE_SERIES,
                f"{len(data)} series where one is expected, e.g. {labels}; aggregate with sum() or max()",
                latency,
            )
        try:
            stamp, text = data[0]["value"]
            value, stamp = float(text), float(stamp)
        except (KeyError, TypeError, ValueError) as exc:
            return QueryResult(None, Failure.BAD_RESPONSE, f"unparsable sample: {exc}", latency)
        if not usable(value):
            # NaN is kept: for a latency quantile it means no request in the window (policies.base.metric_value).
            return QueryResult(
                math.nan if math.isnan(value) else None,
                Failure.NOT_FINITE,
                f"value {text} (not finite, or past {MAX_METRIC_VALUE:g})",
                latency,
            )
        if now - stamp > self.config.staleness_seconds:
            return QueryResult(None, Failure.STALE, f"sample is {now - stamp:.0f} s old", latency)
        return QueryResult(value, None, "", latency)

    def query_vector(self, query: str, now: float) -> VectorResult:
        data, failure, detail, latency = self._instant(query, now)  # a failed batch fails every workload in it
        if failure is not None:
            return VectorResult([], failure, detail, latency)
        if not isinstance(data, list):
            return VectorResult([], Failure.BAD_RESPONSE, f"unexpected result {str(data)[:200]}", latency)
        samples = []
        for item in data:
            try:
                stamp, text = item["value"]
                value = float(text)
            except (KeyError, TypeError, ValueError):
                continue
            if usable(value) and now - float(stamp) <= self.config.staleness_seconds:
                samples.append(Sample(item.get("metric") or {}, value))
        return VectorResult(samples, None, "", latency)

    def query(self, queries: Iterable[str], now: float) -> Mapping[str, QueryResult]:
        return {q: self.query_one(q, now) for q in dict.fromkeys(queries)}

    def query_ranges(self, query: str, start: float, end: float, step: float) -> RangeVector:
        """A range query's every series. Asked as ``custom_query_range`` asks it (the client's URL, session, headers
        and timeout; start and end in whole seconds), and parsed a series at a time (``parse_matrix``): the
        client's ``response.json()`` holds the whole answer as Python objects, about 200 bytes a point, where this
        holds the answer's text and the parsed series' arrays (``autoscaler.bench``'s ``range_parse_bytes_per_point``,
        docs/decisions/daemon-scale.md)."""

        def send() -> str:
            # The step as seconds, a float: "8.64s" is no Prometheus duration (an HTTP 400 on a day read 10,000 points
            # apart at a 5 s interval); "8.64" is the float the API also takes. The bytes let go on return: the text
            # alone is held while parsed.
            params = {"query": query, "start": round(start), "end": round(end), "step": f"{step:g}"}
            return self._ask("query_range", params).decode("utf-8")

        body, failure, detail, _ = self._request(send)
        if failure is not None:
            return RangeVector([], failure, detail)
        try:
            series = parse_matrix(body)
        except (KeyError, TypeError, ValueError) as exc:
            return RangeVector([], Failure.BAD_RESPONSE, f"the answer is not Prometheus's JSON ({str(exc)[:120]})")
        return RangeVector(series, None if series else Failure.EMPTY, "" if series else "the query returned no series")

    def query_range(self, query: str, start: float, end: float, step: float) -> RangeSeries:
        answer = self.query_ranges(query, start, end, step)
        if answer.failure is not None:
            return RangeSeries([], answer.failure, answer.detail)
        if len(answer.series) > 1:
            return RangeSeries([], Failure.MULTIPLE_SERIES, f"{len(answer.series)} series where one is expected")
        only = answer.series[0]
        return RangeSeries(list(zip(only.stamps, only.values, strict=True)))


RESULT = re.compile(r'"result"\s*:\s*\[')
DECODER = json.JSONDecoder()


def parse_matrix(text: str) -> list[Series]:
    """The series of a range query's answer (``{"status": "success", "data": {"resultType": "matrix", "result":
    [...]}}``), each decoded on its own and its samples moved to ``array``s before the next is decoded, so that the
    answer is never whole as Python objects; a value that is not finite, or past ``MAX_METRIC_VALUE``, is left
    out. Prometheus writes ``result`` after ``resultType`` and before any label, so its first mention opens the
    list. Raises ``ValueError`` (a ``json.JSONDecodeError`` among them) on what is not such an answer."""
    opened = RESULT.search(text)
    if opened is None or '"success"' not in text[: opened.start()]:
        raise ValueError(f"no successful result in {text[:80]!r}")
    series: list[Series] = []
    at, end = opened.end(), len(text)
    while True:
        while at < end and text[at] in " \t\r\n,":
            at += 1
        if at >= end:
            raise ValueError("the result list is not closed")
        if text[at] == "]":
            return series
        item, at = DECODER.raw_decode(text, at)
        stamps, values = array("d"), array("d")
        for stamp, sample in item.get("values", ()):  # a native histogram's series has "histograms": none read
            if usable(value := float(sample)):
                stamps.append(float(stamp))
                values.append(value)
        series.append(Series(dict(item.get("metric", {})), stamps, values))
