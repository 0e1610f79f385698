"""A namespace's watch says whether its last LIST is current (autoscaler/actuators/watch.py): the rule's cases, on
streams the test feeds event by event."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import orjson
import pytest

from autoscaler.actuators.watch import IDLE_S, ChangeWatch

END = object()


class Streams:
    """The watch's opener: records the version each stream opens from; the test feeds the open stream's lines."""

    def __init__(self, stopping: threading.Event, refuse: int = 0) -> None:
        self.opened: queue.Queue[str] = queue.Queue()
        self.lines: queue.Queue[Any] = queue.Queue()
        self.refuse = refuse
        self.stopping = stopping  # ends an open stream at the test's end, so that no thread outlives it

    def __call__(self, version: str, timeout: float, silence: float) -> Iterator[bytes]:
        assert silence > timeout
        self.opened.put(version)
        if self.refuse:
            self.refuse -= 1
            raise OSError("connection refused")
        return self._stream()

    def _stream(self) -> Iterator[bytes]:
        while not self.stopping.is_set():
            try:
                item = self.lines.get(timeout=0.01)
            except queue.Empty:
                continue
            if item is END:
                return
            if isinstance(item, Exception):
                raise item
            yield orjson.dumps(item)

    def send(self, kind: str, version: str, **found: Any) -> None:
        self.lines.put({"type": kind, "object": {"metadata": {"resourceVersion": version}, **found}})


def until(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 5
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.005)


@pytest.fixture
def stopping() -> Iterator[threading.Event]:
    """Set at the test's end: every watch's thread ends within a moment, without a word (a late line would land in
    another test's captured output)."""
    event = threading.Event()
    before = set(threading.enumerate())
    yield event
    event.set()
    for thread in set(threading.enumerate()) - before:
        if thread.name.startswith("watch-"):
            thread.join(5)
            assert not thread.is_alive(), thread.name


def started(streams: Streams, stopping: threading.Event, waits: list[float] | None = None) -> ChangeWatch:
    def sleep(seconds: float) -> bool:
        if waits is not None:
            waits.append(seconds)
        return stopping.is_set()

    watch = ChangeWatch("Deployment/llm", streams, stopping, sleep)
    generation = watch.generation
    watch.listed("100", generation)
    assert streams.opened.get(timeout=5) == "100"
    until(watch.current, "the stream open")
    return watch


def test_current_only_once_listed_and_streaming(stopping: threading.Event) -> None:
    streams = Streams(stopping)
    watch = ChangeWatch("Deployment/llm", streams, stopping, lambda s: stopping.is_set())
    assert not watch.current()  # never listed: the tick lists
    watch.listed("100", watch.generation)
    assert streams.opened.get(timeout=5) == "100"  # watched from the LIST's own version
    until(watch.current, "the stream open")


def test_an_event_sends_the_tick_back_to_a_list(stopping: threading.Event) -> None:
    """Worked example of the module's docstring: a scale at 120 after a LIST at 100 stales it; the next LIST, with
    no event while it ran, is current again."""
    streams = Streams(stopping)
    watch = started(streams, stopping)
    streams.send("MODIFIED", "120")
    until(lambda: not watch.current(), "the event seen")
    generation = watch.generation
    watch.listed("120", generation)
    assert watch.current()
    assert streams.opened.empty()  # the stream that runs goes on: no second one


def test_an_event_while_the_list_runs_leaves_it_stale(stopping: threading.Event) -> None:
    streams = Streams(stopping)
    watch = started(streams, stopping)
    generation = watch.generation  # read before the LIST is sent
    streams.send("ADDED", "130")  # arrives while it is in flight: before or after its version, nobody knows
    until(lambda: watch.generation != generation, "the event seen")
    watch.listed("125", generation)
    assert not watch.current()
    watch.listed("131", watch.generation)
    assert watch.current()


def test_a_bookmark_moves_the_version_on_and_stales_nothing(stopping: threading.Event) -> None:
    streams = Streams(stopping)
    watch = started(streams, stopping)
    streams.send("BOOKMARK", "150")
    streams.lines.put(END)  # the server ends the stream at its timeout
    assert streams.opened.get(timeout=5) == "150"  # resumed from the bookmark, not from the LIST
    until(watch.current, "the next stream open")


def test_gone_waits_for_the_next_lists_version(stopping: threading.Event) -> None:
    """A 410 (the version resumed from is older than the server keeps): stale, and the next stream starts from the
    next LIST's version, never from a list of its own."""
    streams = Streams(stopping)
    watch = started(streams, stopping)
    streams.lines.put({"type": "ERROR", "object": {"code": 410, "message": "too old resource version"}})
    until(lambda: not watch.current(), "the error seen")
    time.sleep(0.05)
    assert streams.opened.empty()
    watch.listed("900", watch.generation)
    assert streams.opened.get(timeout=5) == "900"
    until(watch.current, "the stream from the new version")


def test_a_failed_stream_lists_meanwhile_and_is_retried_from_where_it_was(stopping: threading.Event) -> None:
    streams = Streams(stopping)
    waits: list[float] = []
    watch = started(streams, stopping, waits)
    streams.send("BOOKMARK", "140")
    streams.refuse = 2
    streams.lines.put(ConnectionResetError("reset"))
    assert [streams.opened.get(timeout=5) for _ in range(3)] == ["140"] * 3  # two refused, the third open
    until(lambda: len(waits) >= 3, "the backoff")
    assert waits[:3] == [1.0, 2.0, 4.0]  # doubling from the dropped stream on
    time.sleep(0.05)
    assert not watch.current()  # what changed while no stream was open arrives after the next opens: list once
    watch.listed("141", watch.generation)
    assert watch.current()


def test_stopping_ends_the_thread(stopping: threading.Event) -> None:
    streams = Streams(stopping)
    watch = started(streams, stopping)
    stopping.set()
    streams.send("BOOKMARK", "160")
    until(lambda: watch._thread is not None and not watch._thread.is_alive(), "the thread gone")
    assert not watch.current()


def test_a_watch_no_tick_asks_about_ends_and_starts_again_when_asked(stopping: threading.Event) -> None:
    """A namespace dropped from the policy: its watch ends once its stream does, after ``IDLE_S`` unasked; listed
    again, it streams from that LIST's version."""
    streams = Streams(stopping)
    clock = [0.0]
    watch = ChangeWatch("Deployment/llm", streams, stopping, lambda s: stopping.is_set(), lambda: clock[0])
    watch.listed("100", watch.generation)
    assert streams.opened.get(timeout=5) == "100"
    until(lambda: watch.holds, "the stream open")  # an onlooker's question (the bench's) keeps it no longer
    clock[0] = IDLE_S + 1
    assert watch.holds
    streams.lines.put(END)  # the server ends the stream: no tick asked since, so no other
    until(lambda: watch._thread is not None and not watch._thread.is_alive(), "the idle thread gone")
    assert streams.opened.empty() and not watch.current()
    watch.listed("700", watch.generation)
    assert streams.opened.get(timeout=5) == "700"
    until(watch.current, "streaming again")
