"""Work fanned out to threads (``autoscaler.concurrency``)."""

from __future__ import annotations

import threading

from autoscaler.concurrency import each


def test_each_keeps_the_items_order_and_runs_at_most_so_many_at_once() -> None:
    running, most, lock = [0], [0], threading.Lock()
    gate = threading.Barrier(3)

    def work(n: int) -> int:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        if n < 3:
            gate.wait(5)  # the first three meet: three ran at once
        with lock:
            running[0] -= 1
        return n * n

    assert each(work, range(9), 3, "test") == [n * n for n in range(9)]
    assert most[0] == 3


def test_one_item_runs_in_the_callers_thread() -> None:
    assert each(lambda _: threading.current_thread().name, ["only"], 8, "test") == [threading.current_thread().name]
    assert each(lambda n: n, [], 8, "test") == []
