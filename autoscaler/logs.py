"""Structured logs: JSON lines by default, human-readable with ``VLLM_AUTOSCALER_LOG_FORMAT=console``."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, TextIO

import orjson
import structlog


def _dumps(event: dict[str, Any], **_: Any) -> str:
    """A line as compact JSON by orjson: 10,000 workloads' decision lines a tick take a third of ``json.dumps``'s time
    (docs/decisions/daemon-scale.md). A value JSON has no type for is written as its ``repr``, as structlog's own
    renderer does; NaN and infinities come out as null (``json.dumps`` writes ``NaN``, which is no JSON)."""
    return orjson.dumps(event, default=repr, option=orjson.OPT_NON_STR_KEYS).decode()


def configure(log_format: str = "json", level: str = "info", stream: TextIO | None = None) -> None:
    renderer: Any = (
        structlog.processors.JSONRenderer(serializer=_dumps)
        if log_format == "json"
        else structlog.dev.ConsoleRenderer()
    )
    processors = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.format_exc_info,
        renderer,
    ]
    least = logging.getLevelName(level.upper())
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(least),
        logger_factory=structlog.PrintLoggerFactory(file=stream or sys.stderr),
        cache_logger_on_first_use=False,
    )
    _JSON.clear()
    if log_format == "json":
        _JSON.update(processors=processors, least=least, stream=stream or sys.stderr)


_JSON: dict[str, Any] = {}  # what ``configure`` installed in the JSON format: its processors, level and stream

Writer = Callable[[str, str, dict[str, Any]], None]
LEVELS = {name: logging.getLevelName(name.upper()) for name in ("debug", "info", "warning", "error", "critical")}


def line_writer() -> Writer | None:
    """A writer of one line a call (``level``, ``event``, fields), the very line the JSON pipeline ``configure``
    installed writes, without its chain of processors: 3 us a line where structlog takes 20, for a path that logs
    10,000 lines a tick (the decision log; docs/decisions/daemon-scale.md). None while structlog runs another
    configuration (the console format, a test's capture, none at all): log through structlog then. The context
    bound with ``structlog.contextvars`` is read once, when the writer is made (the controller makes one a tick).
    tests/test_logs.py holds the two lines equal."""
    if not _JSON or structlog.get_config()["processors"] is not _JSON["processors"]:
        return None
    least, stream = _JSON["least"], _JSON["stream"]
    bound = structlog.contextvars.get_contextvars()  # the caller's context, as of the writer's making

    def write(level: str, event: str, fields: dict[str, Any]) -> None:
        if LEVELS[level] < least:
            return
        stamp = datetime.now(UTC).isoformat().replace("+00:00", "Z")
        line = {**bound, **fields, "event": event, "level": level, "timestamp": stamp}
        stream.write(_dumps(line) + "\n")
        stream.flush()

    return write


def get_logger(name: str) -> Any:
    return structlog.get_logger(name)
