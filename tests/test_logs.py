"""The daemon's log lines: one JSON object a line, whatever the values."""

from __future__ import annotations

import io
import json
import math
import re

import structlog

from autoscaler.logs import configure, get_logger, line_writer


def test_a_line_is_json_whatever_its_values() -> None:
    """NaN and infinities are null (``json.dumps`` would write ``NaN``, which no JSON reader takes), a number-keyed
    mapping keeps its keys as strings, and a value JSON has no type for is its ``repr``."""
    stream = io.StringIO()
    configure("json", "info", stream)
    try:
        get_logger("test").info("decision", waiting=math.nan, ratio=math.inf, buckets={0.5: 2}, at=object, n=3)
    finally:
        structlog.reset_defaults()
    line = json.loads(stream.getvalue())
    assert line["waiting"] is None and line["ratio"] is None and line["buckets"] == {"0.5": 2}
    assert line["at"] == repr(object) and line["n"] == 3
    assert (line["event"], line["level"]) == ("decision", "info") and line["timestamp"].endswith("Z")


def test_the_hot_path_writes_the_pipelines_very_line() -> None:
    """``line_writer`` writes what structlog's configured JSON pipeline writes for the same fields, level and time,
    and drops a level below the configured one; under another configuration there is none (structlog then)."""
    fields = {"workload": "llm/a", "current": 2, "metrics": {"waiting": math.nan}, "reason": "within-tolerance"}
    piped, direct = io.StringIO(), io.StringIO()
    try:
        configure("json", "info", piped)
        get_logger("test").info("decision", **fields)
        get_logger("test").debug("decision", **fields)
        configure("json", "info", direct)
        write = line_writer()
        assert write is not None
        write("info", "decision", fields)
        write("debug", "decision", fields)
        configure("console", "info", io.StringIO())
        assert line_writer() is None
        structlog.reset_defaults()
        assert line_writer() is None
    finally:
        structlog.reset_defaults()
    assert direct.getvalue().count("\n") == piped.getvalue().count("\n") == 1
    written, logged = json.loads(direct.getvalue()), json.loads(piped.getvalue())
    stamps = written.pop("timestamp"), logged.pop("timestamp")  # microseconds apart
    assert list(written.items()) == list(logged.items())  # the same keys in the same order, the same values
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", stamp) for stamp in stamps)
    assert written["metrics"] == {"waiting": None}
