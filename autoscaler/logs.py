"""Structured logs: JSON lines by default, human-readable with ``VLLM_AUTOSCALER_LOG_FORMAT=console``."""

from __future__ import annotations

import logging
import sys
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
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelName(level.upper())),
        logger_factory=structlog.PrintLoggerFactory(file=stream or sys.stderr),
        cache_logger_on_first_use=False,
    )


def get_logger(name: str) -> Any:
    return structlog.get_logger(name)
