"""The daemon's log lines: one JSON object a line, whatever the values."""

from __future__ import annotations

import io
import json
import math

import structlog

from autoscaler.logs import configure, get_logger


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
