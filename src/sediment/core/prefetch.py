"""Producing an iterator's items on background threads, a bounded number ahead of the consumer.

Arrow's readers and DataFusion's streams release the GIL while they decode, so a producer on
another thread overlaps with whatever consumes its items (a merge, Parquet encoding, DuckDB's
aggregation). One producer (:func:`prefetched`) or several in order (:func:`read_ahead`: a
scan's leaves, each read on its own thread, handed out in key order).

Memory stays bounded: each producer holds at most ``depth`` items, and at most ``width``
producers run at once. A consumer that stops early (or fails) stops the producers; a producer
that fails hands its exception to the consumer, which raises it where it would have been
raised without threads.
"""

from __future__ import annotations

import queue
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from itertools import islice
from typing import Any, Generic, TypeVar

T = TypeVar("T")

_DONE = object()


class Prefetcher(Generic[T]):
    """``items`` produced on a thread started now, at most ``depth`` ahead; iterate once,
    then :meth:`close` (also after a partial iteration: it stops the thread)."""

    def __init__(self, items: Iterator[T], depth: int = 2, name: str = "sediment-prefetch"
                 ) -> None:
        self._items = items
        self._queue: queue.Queue[Any] = queue.Queue(max(1, depth))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._produce, name=name, daemon=True)
        self._thread.start()

    def _put(self, item: Any) -> bool:
        while not self._stop.is_set():  # the consumer may have gone: never block for good
            try:
                self._queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _produce(self) -> None:
        try:
            for item in self._items:
                if not self._put(item):
                    return
            self._put(_DONE)
        except BaseException as e:  # noqa: BLE001 (handed to the consumer, raised there)
            self._put(e)
        finally:
            close = getattr(self._items, "close", None)
            if close is not None:
                close()  # a generator's own clean-up runs on its thread

    def __iter__(self) -> Iterator[T]:
        while True:
            item = self._queue.get()
            if item is _DONE:
                return
            if isinstance(item, BaseException):
                raise item
            yield item

    def close(self) -> None:
        self._stop.set()
        self._thread.join()


def prefetched(items: Iterator[T], depth: int = 2, name: str = "sediment-prefetch"
               ) -> Iterator[T]:
    """``items`` produced by one background thread, ``depth`` ahead of the consumer."""
    p = Prefetcher(items, depth, name)
    try:
        yield from p
    finally:
        p.close()


def read_ahead(sources: Iterable[Callable[[], Iterator[T]]], width: int, depth: int = 4,
               name: str = "sediment-read-ahead") -> Iterator[T]:
    """The items of every source, source by source in order, while up to ``width`` sources
    are produced at once, each on its own thread, at most ``depth`` items ahead. A source is
    a function making an iterator; it is called on the consumer's thread, iterated on its
    producer's."""
    todo = iter(sources)
    running: deque[Prefetcher[T]] = deque(
        Prefetcher(make(), depth, name) for make in islice(todo, max(1, width)))
    try:
        while running:
            current = running[0]
            yield from current
            running.popleft().close()
            following = next(todo, None)
            if following is not None:
                running.append(Prefetcher(following(), depth, name))
    finally:
        for p in running:
            p.close()
