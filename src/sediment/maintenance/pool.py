"""The continuous maintainer's job threads: smallest job first, one thread kept for short jobs.

Why a pool of its own: ``concurrent.futures`` runs calls first come, first served, on any
thread. The maintainer needs the smallest merges first (they keep a leaf's file count down)
and must never have every thread in a long merge while new files wait (see
sediment.maintenance.continuous).
"""

from __future__ import annotations

import heapq
import itertools
import threading
from collections.abc import Callable
from concurrent.futures import Future


class SmallestFirstPool:
    """Worker threads that take the queued call with the lowest priority value first, with
    one thread kept for short calls.

    A call submitted as ``long`` (a merge of many records) starts only while fewer than
    ``threads - 1`` long calls run: with every thread in a long merge, the small merges of
    new files that keep a leaf under the batch size would wait for the slowest of them. A
    long call whose lane is free goes ahead of queued short calls (the maintainer submits one
    only when ``long_slots`` says it can start). With one thread there is nothing to keep,
    and long calls run smallest first as any other.
    """

    def __init__(self, threads: int, name: str = "sediment-job") -> None:
        self._heap: list[tuple[float, int, bool, Callable[[], object], Future[object]]] = []
        self._seq = itertools.count()
        self._cond = threading.Condition()
        self._long_running = 0
        self._running = 0
        self._count = threads
        self._max_long = max(1, threads - 1)
        self._lanes = threads > 1
        self._closing = False
        self._threads = [threading.Thread(target=self._work, name=f"{name}-{i}", daemon=True)
                         for i in range(threads)]
        for th in self._threads:
            th.start()

    @property
    def waiting(self) -> int:
        """Short calls queued and not yet started (long ones queued for their lane are not
        counted: they must not stop the short work that new files need)."""
        with self._cond:
            return sum(1 for item in self._heap if not item[2])

    @property
    def idle(self) -> int:
        """Threads that would start a call submitted now (none running, none queued for)."""
        with self._cond:
            return max(0, self._count - self._running - len(self._heap))

    @property
    def long_slots(self) -> int:
        """Long calls that could start now: neither running nor queued for their lane."""
        with self._cond:
            queued = sum(1 for item in self._heap if item[2])
            return max(0, self._max_long - self._long_running - queued)

    def submit(self, priority: float, fn: Callable[[], object], *,
               long: bool = False) -> Future[object]:
        fut: Future[object] = Future()
        with self._cond:
            heapq.heappush(self._heap, (priority, next(self._seq), long, fn, fut))
            self._cond.notify()
        return fut

    def _take(self) -> tuple[bool, Callable[[], object], Future[object]] | None:
        """The next call this thread may start (None: the pool is shut down and drained)."""
        with self._cond:
            while True:
                lane_free = self._long_running < self._max_long
                ready = [it for it in self._heap if lane_free or not it[2]]
                # a long call whose lane is free goes first: the maintainer assigns one only
                # when its lane can start it, and behind a stream of short calls it would
                # hold its inputs for nothing (with one thread: smallest first throughout)
                item = min(ready, default=None,
                           key=lambda it: (not (it[2] and self._lanes), it[0], it[1]))
                if item is not None:
                    self._heap.remove(item)
                    heapq.heapify(self._heap)
                    if item[2]:
                        self._long_running += 1
                    self._running += 1
                    return item[2], item[3], item[4]
                if self._closing and not self._heap:
                    return None
                self._cond.wait()

    def _work(self) -> None:
        while True:
            taken = self._take()
            if taken is None:
                return
            long, fn, fut = taken
            try:
                if fut.set_running_or_notify_cancel():
                    try:
                        fut.set_result(fn())
                    except BaseException as e:  # noqa: BLE001 - handed to the future's reader
                        fut.set_exception(e)
            finally:
                with self._cond:
                    self._running -= 1
                    if long:
                        self._long_running -= 1
                    self._cond.notify_all()

    def shutdown(self) -> None:
        """Run what is queued, then stop the threads."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        for th in self._threads:
            th.join()
