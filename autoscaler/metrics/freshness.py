"""How old the samples behind a custom query are, so that ``stalenessSeconds`` holds a custom query as it holds a
built-in one.

An instant query stamps its result with the evaluation time, and for 5 minutes Prometheus's lookback returns a
series' last sample as if current: a frozen exporter's value reads as fresh. ``timestamp()`` of a plain selector
gives each sample's own time, but of an expression (``sum(rate(...))``) only the evaluation time. So the query is
parsed (``promql-parser``, the Prometheus parser's Rust port), and each vector selector in it is asked for its
newest sample's time: one request a tick for every custom query, ``label_replace`` telling the selectors apart.
The query's age is its stalest selector's: a ratio whose denominator froze is as wrong as one whose numerator did.

A selector with ``offset`` or ``@`` asks for old samples on purpose and is not judged; a query the parser cannot
read (a newer PromQL feature) is not judged either: the daemon logs that once and uses its values as before.
"""

from __future__ import annotations

from typing import Any

import promql_parser

from autoscaler.metrics.queries import promql_string

LABEL = "vllm_autoscaler_selector"
_CHILDREN = ("expr", "lhs", "rhs", "args", "param", "vector_selector")


def selectors(query: str) -> tuple[str, ...] | None:
    """The instant-vector selectors ``query`` reads, as PromQL without their range or modifiers; None when the
    query cannot be parsed. Worked example: ``sum(rate(x{a="b"}[1m])) / sum(y)`` reads ``x{a="b"}`` and ``y``
    (tests/test_freshness.py)."""
    try:
        tree = promql_parser.parse(query)
    except (ValueError, TypeError):
        return None
    found: list[str] = []
    _walk(tree, found)
    return tuple(dict.fromkeys(found))


def _walk(node: Any, found: list[str]) -> None:
    if type(node).__name__ == "VectorSelector":
        if node.offset is None and node.at is None:
            matchers = str(node.matchers)
            found.append(f"{node.name or ''}{matchers if matchers != '{}' else ''}")
        return
    if type(node).__name__ == "SubqueryExpr" and (node.offset is not None or node.at is not None):
        return
    for name in _CHILDREN:
        child = getattr(node, name, None)
        for item in child if isinstance(child, list) else [child]:
            if item is not None and not isinstance(item, int | float | str):
                _walk(item, found)


def freshness_query(chosen: list[str]) -> str:
    """One query for the newest sample time of each selector in ``chosen``, told apart by ``LABEL`` (its index)."""
    return " or ".join(
        f"label_replace(max(timestamp({s})), {promql_string(LABEL)}, {promql_string(str(i))}, '', '')"
        for i, s in enumerate(chosen)
    )
