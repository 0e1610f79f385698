"""The interface every metric source implements, and what a query can come back with."""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol


class Failure(StrEnum):
    """Why a query gave no value: each is "no value" for that metric at that tick."""

    EMPTY = "empty-result"
    NOT_FINITE = "not-finite"
    MULTIPLE_SERIES = "multiple-series"
    HTTP_ERROR = "http-error"
    TIMEOUT = "timeout"
    UNREACHABLE = "unreachable"
    STALE = "stale"
    BAD_RESPONSE = "bad-response"


@dataclass(frozen=True, slots=True)
class QueryResult:
    value: float | None
    failure: Failure | None = None
    detail: str = ""
    latency_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.failure is None


@dataclass(frozen=True, slots=True)
class Sample:
    labels: dict[str, str]
    value: float


@dataclass(frozen=True)
class VectorResult:
    """Every series an instant query returned (for batched queries), or why there are none."""

    samples: list[Sample]
    failure: Failure | None = None
    detail: str = ""
    latency_s: float = 0.0


@dataclass(frozen=True)
class RangeSeries:
    """One range query's samples, ``(unix seconds, value)``, or why there are none."""

    samples: list[tuple[float, float]]
    failure: Failure | None = None
    detail: str = ""


@dataclass(frozen=True)
class Series:
    """One series of a range query: its labels, and its samples' times (unix seconds) and values, each an ``array``
    of doubles (16 bytes a sample, where a list of pairs takes over 100: a query of many workloads' day)."""

    labels: dict[str, str]
    stamps: array[float]
    values: array[float]


@dataclass(frozen=True)
class RangeVector:
    """Every series a range query returned (for queries of many workloads), or why there are none."""

    series: list[Series]
    failure: Failure | None = None
    detail: str = ""


class MetricSource(Protocol):
    def query(self, queries: Iterable[str], now: float) -> Mapping[str, QueryResult]:
        """Evaluate every query once, at ``now``."""
        ...

    def query_vector(self, query: str, now: float) -> VectorResult:
        """Evaluate one query at ``now`` and return every series (for queries batched across workloads)."""
        ...

    def query_range(self, query: str, start: float, end: float, step: float) -> RangeSeries:
        """One series from ``start`` to ``end`` a ``step`` apart; more than one is a failure."""
        ...

    def query_ranges(self, query: str, start: float, end: float, step: float) -> RangeVector:
        """Every series from ``start`` to ``end`` a ``step`` apart (for queries of many workloads)."""
        ...
