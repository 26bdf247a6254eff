"""Thread pools kept for the life of a process, one per name: made once, fork-safe.

Starting a thread costs more than it seems in a busy interpreter: the new thread needs the
GIL to begin, and ``Thread.start`` waits until it has it, up to a switch interval (5 ms) while
other threads compute. A pool made per call starts its threads every time (a log read of a
few dozen entries started 16); a pool kept for the process starts them once and reuses idle
ones (docs/architecture.md has the measurement).

A pool inherited through fork has no threads (it would never run anything): each process
makes its own. A pool's tasks must never wait for other tasks of the same pool (a bounded
pool would deadlock); their callers may.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

_lock = threading.Lock()
_pools: dict[str, tuple[int, ThreadPoolExecutor]] = {}


def _reset_lock() -> None:
    """A forked child starts with a free lock (a parent's thread may have held it)."""
    global _lock
    _lock = threading.Lock()


os.register_at_fork(after_in_child=_reset_lock)


def shared_pool(name: str, threads: int) -> ThreadPoolExecutor:
    """This process's pool ``name`` (its threads named ``sediment-<name>``), made at the first
    call with at most ``threads`` threads (started as tasks need them)."""
    with _lock:
        got = _pools.get(name)
        if got is None or got[0] != os.getpid():
            got = (os.getpid(), ThreadPoolExecutor(threads, thread_name_prefix=f"sediment-{name}"))
            _pools[name] = got
        return got[1]
