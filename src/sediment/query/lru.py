"""Reading an LRU shared by threads without waiting for its lock.

The caches of a lookup (footers, page indexes, key filters, decoded pages) are ordered dicts
kept oldest first under a lock. A lookup used to take each lock to read its entry and move it
to the newest end; with many threads, one of them is sometimes switched out while it holds a
lock (CPython switches threads every 5 ms, wherever one is), and the next to ask blocks. A
blocked ``acquire`` gives up the GIL, and whoever wakes holding the lock waits for the GIL in
turn: the threads queue on the lock and the GIL together (a lock convoy). Measured before
this change: 8 threads gave the GIL up 668 times in 2,000 warm lookups, 649 of them in a
blocked ``acquire`` (counted at ``PyEval_SaveThread``, 1M rows), and waited 0.41-0.74 times
per warm lookup at 10M rows (``benchmarks/lookup_threads.py``; one thread: 0.003); after it,
no warm lookup gives the GIL up, and 8 threads wait 0.17-0.24 times per lookup.

So a reader takes the entry with one dict read (atomic under the GIL: the keys are strings
and tuples, whose hashing and comparison run no Python code) and moves it only when the lock
is free at once (``acquire(blocking=False)`` never gives up the GIL). A hit that finds the lock
busy leaves its entry where it is: the order is a little less exact under contention, never
wrong. Writers (a miss that inserts, evictions) still take the lock and wait for it.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable
from typing import TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
D = TypeVar("D")


def lru_get(entries: OrderedDict[K, V], lock: threading.Lock, key: K, default: D) -> V | D:
    """The entry of ``key`` (``default`` when there is none), moved to the newest end of
    ``entries`` when ``lock`` (the one its writers hold) is free (see the module)."""
    value = entries.get(key, default)
    if value is not default:
        touch(entries, lock, [key])
    return value


def touch(entries: OrderedDict[K, V], lock: threading.Lock, keys: list[K]) -> bool:
    """Move ``keys`` (those still there) to the newest end of ``entries`` when ``lock`` is
    free at once; whether it was (see the module)."""
    if not lock.acquire(blocking=False):
        return False
    try:
        for key in keys:
            if key in entries:
                entries.move_to_end(key)
    finally:
        lock.release()
    return True
