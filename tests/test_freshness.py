"""The selectors a custom query reads, whose samples' own timestamps say how old its value is."""

from __future__ import annotations

import pytest

from autoscaler.metrics.freshness import freshness_query, selectors


@pytest.mark.parametrize(
    ("query", "read"),
    [
        ('sum(rate(x{a="b"}[1m])) / sum(y)', ('x{a="b"}', "y")),
        (
            'sum(vllm:num_requests_waiting{namespace="llm",pod=~"vllm-.*"})',
            ('vllm:num_requests_waiting{namespace="llm",pod=~"vllm-.*"}',),
        ),
        ("max_over_time(x[10m:1m]) + on() group_left -(z)", ("x", "z")),
        ('histogram_quantile(0.9, sum by (le) (rate(h_bucket{job="v"}[5m])))', ('h_bucket{job="v"}',)),
        ("x + x", ("x",)),
        ("rate(x[5m] offset 1h) + y @ 1700000000", ()),  # old samples on purpose: not judged
        ("vector(1)", ()),
        ("sum(", None),  # not readable: not judged
    ],
)
def test_the_selectors_a_query_reads(query: str, read: tuple[str, ...] | None) -> None:
    assert selectors(query) == read


def test_one_query_dates_every_selector_told_apart_by_a_label() -> None:
    query = freshness_query(['x{a="b"}', "y"])
    assert query == (
        'label_replace(max(timestamp(x{a="b"})), "vllm_autoscaler_selector", "0", \'\', \'\')'
        " or label_replace(max(timestamp(y)), \"vllm_autoscaler_selector\", \"1\", '', '')"
    )
    assert selectors(query) == ('x{a="b"}', "y")  # itself valid PromQL
