"""Work a tick fans out to threads: requests to the API server, each mostly a wait on the network."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")


def each(fn: Callable[[T], R], items: Iterable[T], most: int, name: str) -> list[R]:
    """``fn`` of every item, in their order, at most ``most`` at once in threads named ``name``; a single item runs
    in the caller's thread (no pool for one namespace or one write)."""
    items = list(items)
    if len(items) <= 1:
        return [fn(item) for item in items]
    with ThreadPoolExecutor(min(most, len(items)), thread_name_prefix=name) as pool:
        return list(pool.map(fn, items))
