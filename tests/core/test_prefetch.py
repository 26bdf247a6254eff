"""Background producers (sediment.core.prefetch): order, bounded read-ahead, failures handed
to the consumer, and producers stopped when the consumer stops early."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from sediment.core.prefetch import prefetched, read_ahead


def test_read_ahead_keeps_source_order() -> None:
    sources = [lambda i=i: iter(range(i * 10, i * 10 + 10)) for i in range(7)]
    assert list(read_ahead(sources, width=3, depth=2)) == list(range(70))
    assert list(read_ahead([], width=2)) == []


def test_read_ahead_runs_sources_at_once_and_bounded() -> None:
    started: list[int] = []
    lock = threading.Lock()
    produced = [0] * 6

    def source(i: int) -> Iterator[int]:
        with lock:
            started.append(i)
        for j in range(100):
            produced[i] += 1
            yield j

    sources = [lambda i=i: source(i) for i in range(6)]
    it = read_ahead(sources, width=2, depth=3)
    assert next(it) == 0
    time.sleep(0.3)
    # two sources in flight, each at most depth (+1 being put, +1 taken) ahead
    assert sorted(started) == [0, 1]
    assert produced[1] <= 4 and produced[0] <= 6
    assert sum(1 for _ in it) == 599
    assert sorted(started) == list(range(6))


def test_failure_reaches_the_consumer_in_order() -> None:
    def bad() -> Iterator[int]:
        yield 1
        raise ValueError("broken leaf")

    sources = [lambda: iter([0]), bad, lambda: iter([2])]
    got: list[int] = []
    with pytest.raises(ValueError, match="broken leaf"):
        for x in read_ahead(sources, width=3):
            got.append(x)
    assert got == [0, 1]


def test_early_stop_stops_producers() -> None:
    closed = threading.Event()

    def endless() -> Iterator[int]:
        try:
            n = 0
            while True:
                n += 1
                yield n
        finally:
            closed.set()

    it = prefetched(endless(), depth=2)
    assert next(it) == 1
    it.close()  # the consumer goes: the producer thread ends and closes its source
    assert closed.wait(5)
    before = threading.active_count()
    it2 = read_ahead([endless, endless, endless], width=3)
    next(it2)
    it2.close()
    time.sleep(0.2)
    assert threading.active_count() <= before
