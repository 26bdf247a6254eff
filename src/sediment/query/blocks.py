"""The block cache: decoded column data of data files, shared by every table and thread of a
process, bounded in bytes.

A lookup needs one record but decodes a whole row group (or, with the page index, a page) of
every column it returns; the hot keys of a workload are asked again and again, so the decoded
arrays are kept. Data files never change (a file is written once under a fresh name), so an
entry is never stale and needs no invalidation: a file deleted by GC simply stops being asked
for and ages out.

Entries are keyed by (store, file, row group, page, column) and hold one ``pa.Array``, or by
(store, file, row group, first row, columns) and hold the pages of those columns cut at the
same rows as one ``pa.Table`` with views of its keys (:class:`KeyedPages`: a warm lookup
then bisects them and slices the table); each is charged its buffers' bytes. Admission is
scan-resistant, as in RocksDB's block cache with a high-priority pool and in segmented LRU:
a new entry enters a *probation* segment (a fifth of the bound); only an entry asked for
again moves to the *protected* segment, and evictions take probation's oldest first. A full
scan that caches its blocks (only when its read request asks: ``ReadRequest.block_cache``)
therefore cycles through probation and never evicts the hot set. The row groups a range reads
enter only when asked a second time (a *doorkeeper*, as in TinyLFU): a range asked once, the
common case, costs no copy into the cache and evicts nothing.

The bound is per process: ``SEDIMENT_BLOCK_CACHE_BYTES`` when set (0 turns the cache off),
else the ``query.block_cache_bytes`` of the tables read (see :func:`configure`). Processes that
run many of a kind (Spark Python workers, the maintainer's job workers) start with a small bound
(:data:`WORKER_BYTES`, by :func:`use_worker_bound`) so the cache is not multiplied by their
count. A forked child starts with an empty cache and a fresh lock (``os.register_at_fork``):
the maintainer forks workers, and a lock held by another thread at the fork would never be
released in the child.

Hits, misses, insertions, evictions and bytes are counted (:meth:`BlockCache.stats`) for the
metrics.
"""

from __future__ import annotations

import bisect
import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias, cast

import pyarrow as pa

from sediment import metrics
from sediment.files.keys import bisect_span, sorted_span
from sediment.query.lru import touch

ENV = "SEDIMENT_BLOCK_CACHE_BYTES"
"""The process's bound in bytes, over any table's ``query.block_cache_bytes`` (0: off)."""

DEFAULT_BYTES = 256 * 1024 * 1024
"""The bound of a server or application process (the property's default)."""

WORKER_BYTES = 16 * 1024 * 1024
"""The bound of a process that runs many of a kind (Spark Python workers, job workers)."""

log = logging.getLogger(__name__)

PROBATION = 0.2
"""The share of the bound new entries may hold before they are asked for a second time."""

GHOSTS = 65_536
"""Keys of row groups read once and not cached (see :meth:`BlockCache.admit`) remembered, the
oldest forgotten first: a few MiB of keys, no data."""


@dataclass(frozen=True, slots=True)
class CacheStats:
    """Counters of a block cache since the process started (or forked)."""

    hits: int
    misses: int
    inserts: int
    evictions: int
    bytes: int
    entries: int
    capacity: int

    def as_dict(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in self.__slots__}


def _env_bound() -> int | None:
    """The bound SEDIMENT_BLOCK_CACHE_BYTES sets (None: unset). A value that is not a count
    of bytes is reported and ignored: a cache setting never stops a process from reading."""
    raw = os.environ.get(ENV)
    if raw is None or raw.strip() == "":
        return None
    try:
        value = int(raw.strip().replace("_", ""))
    except ValueError:
        value = -1
    if value < 0:
        log.warning("%s=%r is not a number of bytes (0 turns the block cache off): "
                    "ignored", ENV, raw)
        return None
    return value


_INT_FORMATS = {(8, True): "b", (16, True): "h", (32, True): "i", (64, True): "q",
                (8, False): "B", (16, False): "H", (32, False): "I", (64, False): "Q"}


@dataclass(frozen=True, slots=True, eq=False)
class KeyedPages:
    """The pages of several columns cut at the same rows, as one table, with views of its
    key column's buffers made once (a string or binary column's offsets and bytes, an
    integer column's values): a warm lookup bisects them and slices the table, and makes no
    other Arrow call (each may give up the GIL, which collapses many threads' lookups, and
    costs more than the search)."""

    table: pa.Table
    key_at: int
    """The key column's position in ``table``."""
    kind: type | None
    """The Python type of the values searched (None: :func:`sorted_span` searches)."""
    offsets: memoryview | None
    """String or binary keys: the offsets of each value in ``data``."""
    data: memoryview | None
    """String or binary keys: their bytes; integer keys: their values."""

    @property
    def nbytes(self) -> int:
        return int(self.table.nbytes)

    @classmethod
    def of(cls, table: pa.Table, key_at: int) -> KeyedPages:
        column = table.column(key_at).chunk(0)  # (a table of pages: one chunk a column)
        t, n, at = column.type, len(column), column.offset
        if column.null_count == 0:  # (row keys are never null)
            if pa.types.is_string(t) or pa.types.is_binary(t) or \
                    pa.types.is_large_string(t) or pa.types.is_large_binary(t):
                wide = pa.types.is_large_string(t) or pa.types.is_large_binary(t)
                offsets = memoryview(column.buffers()[1]).cast("q" if wide else "i")
                return cls(table, key_at,
                           str if pa.types.is_string(t) or pa.types.is_large_string(t)
                           else bytes, offsets[at:at + n + 1],
                           memoryview(column.buffers()[2] or b""))
            if pa.types.is_integer(t):
                raw: Any = memoryview(column.buffers()[1])  # (cast by a format of the type)
                values = raw.cast(_INT_FORMATS[t.bit_width, pa.types.is_signed_integer(t)])
                values = values[at:at + n]
                return cls(table, key_at, int, None, values)
        return cls(table, key_at, None, None, None)

    def span(self, value: Any) -> tuple[int, int] | None:
        """The rows ``[start, end)`` whose key equals ``value`` (the model's form), as
        :func:`~sediment.files.keys.sorted_span` finds them; None for a value or type it
        does not search (the caller reads the row group)."""
        data, asked = self.data, cast(Any, value)  # (typed by ``kind``, checked here)
        if data is None or type(value) is not self.kind:  # (a bool is no key of an int)
            return sorted_span(self.table.column(self.key_at).chunk(0), value)
        offsets = self.offsets
        if offsets is None:  # integers: bisected as they are
            return bisect.bisect_left(data, asked), bisect.bisect_right(data, asked)
        target: bytes = asked.encode() if self.kind is str else asked
        n = len(offsets) - 1

        def at(i: int) -> bytes:
            return data[offsets[i]:offsets[i + 1]].tobytes()

        return bisect_span(n, target, at)


Block: TypeAlias = pa.Array | pa.Table | KeyedPages
"""What an entry holds: a decoded column of a page or row group, or the pages of several
columns cut at the same rows (:class:`KeyedPages`)."""


def _size(value: Block) -> int:
    """Bytes an entry holds: its buffers (a slice of a bigger buffer is charged its own
    share), plus a fixed cost for the Python objects around it."""
    return int(value.nbytes) + 256


class BlockCache:
    """A segmented LRU of decoded arrays bounded in bytes (see the module's docstring)."""

    def __init__(self, capacity: int) -> None:
        self._lock = threading.Lock()
        self._probation: OrderedDict[Hashable, tuple[Block, int]] = OrderedDict()
        self._protected: OrderedDict[Hashable, tuple[Block, int]] = OrderedDict()
        self._probation_bytes = 0
        self._protected_bytes = 0
        self.capacity = capacity
        self.fixed = False
        """Whether the bound came from the process (SEDIMENT_BLOCK_CACHE_BYTES or a worker's
        own): then tables' properties do not resize it."""
        self._hits = self._misses = self._inserts = self._evictions = 0
        self._ghosts: OrderedDict[Hashable, None] = OrderedDict()

    # --- reads ----------------------------------------------------------------------------
    def get(self, key: Hashable) -> Block | None:
        """The cached array, or None (a miss); a hit in probation is promoted."""
        return self.get_many([key])[0]

    def get_many(self, keys: Sequence[Hashable]) -> list[Block | None]:
        """:meth:`get` of each key (a row group's columns). When every key is in the
        protected segment (a warm lookup), without waiting for the lock: the entries move
        to the newest end only when it is free at once (see sediment.query.lru: threads
        queueing on it collapse lookups' throughput); else under one hold of it."""
        protected = self._protected
        hot = [protected.get(key) for key in keys]
        if None not in hot:
            touch(protected, self._lock, list(keys))
            self._hits += len(keys)  # (without the lock: a counter, where a rare lost
            # update between threads costs nothing)
            return [entry[0] for entry in hot if entry is not None]
        out: list[Block | None] = []
        with self._lock:
            for key in keys:
                entry = self._protected.get(key)
                if entry is not None:
                    self._protected.move_to_end(key)
                else:
                    entry = self._probation.pop(key, None)
                    if entry is not None:
                        self._probation_bytes -= entry[1]
                        self._protected[key] = entry
                        self._protected_bytes += entry[1]
                if entry is None:
                    self._misses += 1
                    out.append(None)
                else:
                    self._hits += 1
                    out.append(entry[0])
            self._evict()
        return out

    def put(self, key: Hashable, value: Block) -> None:
        """Admit ``value`` to probation (a key already cached keeps its place)."""
        size = _size(value)
        with self._lock:
            if not self.capacity or size > self.capacity * PROBATION or \
                    key in self._protected or key in self._probation:
                return
            self._probation[key] = (value, size)
            self._probation_bytes += size
            self._inserts += 1
            self._evict()

    def admit(self, keys: Sequence[Hashable]) -> list[bool]:
        """Of row groups just read for a range (each key missed), which to cache: those read
        before, not yet cached, and still remembered. A key read for the first time is only
        remembered (a *ghost*, no data), so a range asked once costs no copy into the cache
        and evicts nothing; one asked again is cached then. (A lookup's page is cached at
        once: it is small, and a lookup's key is asked again far more often than a range.)"""
        out = []
        ghosts = self._ghosts
        with self._lock:
            for key in keys:
                if key in ghosts:
                    del ghosts[key]
                    out.append(True)
                else:
                    ghosts[key] = None
                    out.append(False)
            while len(ghosts) > GHOSTS:
                ghosts.popitem(last=False)
        return out

    def _evict(self) -> None:
        """Holding the lock: probation within its share of the bound (a protected entry
        demoted by an over-full protected segment goes back to probation's newest end),
        the whole within the bound."""
        limit = self.capacity
        while self._protected_bytes > limit * (1 - PROBATION) and self._protected:
            key, entry = self._protected.popitem(last=False)
            self._protected_bytes -= entry[1]
            self._probation[key] = entry
            self._probation_bytes += entry[1]
        while self._probation and (self._probation_bytes > limit * PROBATION or
                                   self._probation_bytes + self._protected_bytes > limit):
            _, entry = self._probation.popitem(last=False)
            self._probation_bytes -= entry[1]
            self._evictions += 1

    # --- bound and counters ---------------------------------------------------------------
    def resize(self, capacity: int) -> None:
        with self._lock:
            self.capacity = capacity
            self._evict()

    def clear(self) -> None:
        """Drop every entry (the counters stay)."""
        with self._lock:
            self._probation.clear()
            self._protected.clear()
            self._ghosts.clear()
            self._probation_bytes = self._protected_bytes = 0

    def stats(self) -> CacheStats:
        with self._lock:
            return CacheStats(self._hits, self._misses, self._inserts, self._evictions,
                              self._probation_bytes + self._protected_bytes,
                              len(self._probation) + len(self._protected), self.capacity)

    def _after_fork(self) -> None:
        """In a forked child: a fresh lock (the parent's may have been held by a thread that
        does not exist here) and no entries; the counters start again."""
        self._lock = threading.Lock()
        self._probation = OrderedDict()
        self._protected = OrderedDict()
        self._ghosts = OrderedDict()
        self._probation_bytes = self._protected_bytes = 0
        self._hits = self._misses = self._inserts = self._evictions = 0


def _process_cache() -> BlockCache:
    bound = _env_bound()
    cache = BlockCache(DEFAULT_BYTES if bound is None else bound)
    cache.fixed = bound is not None
    return cache


BLOCKS = _process_cache()
"""The process's block cache."""

os.register_at_fork(after_in_child=BLOCKS._after_fork)


def _counts() -> tuple[int, int]:
    s = BLOCKS.stats()
    return s.hits, s.misses


metrics.watch_cache("block", _counts)  # counted by the cache itself, read when scraped


def configure(table_bytes: int) -> BlockCache | None:
    """The block cache a read of a table with ``query.block_cache_bytes`` = ``table_bytes``
    uses (None: the read bypasses it): a bound set by the process stays; else the cache is
    sized by the property (the last table read decides, for tables of one store share it)."""
    if table_bytes <= 0:
        return None
    if not BLOCKS.fixed and BLOCKS.capacity != table_bytes:
        BLOCKS.resize(table_bytes)
    return BLOCKS if BLOCKS.capacity else None


def use_worker_bound(capacity: int = WORKER_BYTES) -> None:
    """Bound this process's cache for a worker of which many run (Spark Python workers, the
    maintainer's job workers), unless SEDIMENT_BLOCK_CACHE_BYTES sets the bound."""
    if _env_bound() is None:
        BLOCKS.resize(capacity)
        BLOCKS.fixed = True


def stats() -> dict[str, Any]:
    """The process cache's counters as a plain dict (hits, misses, inserts, evictions,
    bytes, entries, capacity)."""
    return BLOCKS.stats().as_dict()
