"""Ranged reads of an object store for one checked read, through the disk cache.

A reader of a data file (a footer, a page index, a key-filter block, a page, a row group's
column chunks) checks what it reads: page CRCs, the footer's CRC against the file's sums, a
filter block's CRC, a decode. :class:`RangeReads` serves its ranges from the disk cache
(sediment.storage.diskcache) where they are, and from the store where they are not; the bytes
read from the store are *held* and enter the cache only when the reader calls
:meth:`RangeReads.keep` after its checks passed. A read whose checks failed drops its reads, so
its bytes are never cached, and reads again with ``fresh`` (nothing from the cache, and the
entries it asks for removed first).

Bytes without a checksum of their own (a page index; the footer and pages of a file written
before checksums) are kept only when a second read from the store gives the same bytes
(``keep(checked=False)``, :meth:`RangeReads.confirm`): a byte changed on the way is gone on the
next read, and never reaches the cache.

On a store whose reads are network round trips (one with a ``cache_name``), the ranges a
reader needs together (the pages of a row group's columns) are fetched by one GET
(:meth:`RangeReads.prefetch`), with the cache on or off. Local disk and memory read straight
through, the ranges a reader needs together by one call (``ObjectStore.get_ranges``: local
disk opens the file once for them).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable

from sediment.storage import checksums
from sediment.storage.base import ObjectStore
from sediment.storage.diskcache import DiskCache

log = logging.getLogger(__name__)

COALESCE_BYTES = 1024 * 1024
"""Missing ranges of one object read together (:meth:`RangeReads.prefetch`) are fetched by one
GET when they lie within this span: one round trip to S3 (tens of ms) costs more than the
bytes between the pages of a row group's columns (a 4,096-row group is some 100-300 KB)."""

Span = tuple[str, int, int]
"""(object key, start, end)."""


class RangeReads:
    """Ranged reads for one checked read (module docstring)."""

    def __init__(self, objects: ObjectStore, cache: DiskCache | None, *,
                 fresh: bool = False) -> None:
        self.objects = objects
        self.remote = objects.cache_name("") is not None
        self.cache = cache if self.remote else None
        self.fresh = fresh
        self._held: dict[Span, tuple[str, bytes]] = {}
        """Bytes read from the store, by range: (their cache name, the bytes)."""
        self._renewed: set[str] = set()
        """Names a fresh reader read from the store (its later reads may use them)."""
        self._confirmed: set[Span] = set()
        self._served: set[Span] = set()
        """Held ranges handed to the reader (only those were checked: a prefetched range
        the reader never asked for is not kept)."""
        self._prefetched: dict[Span, bytes] = {}
        """Ranges of a store read straight through (local disk, memory) that
        :meth:`prefetch` read together, until the reader's :meth:`read` takes them."""
        self._lock = threading.Lock()

    def _name(self, key: str, what: str) -> str:
        return f"{self.objects.cache_name(key)}\n{what}"

    def _lookup(self, span: Span, name: str) -> bytes | None:
        """Held or cached bytes of ``span`` (cached under ``name``), or None."""
        with self._lock:
            got = self._held.get(span)
        if got is not None:
            return got[1]
        if self.cache is None:
            return None
        if self.fresh and name not in self._renewed:
            self.cache.discard(name)
            return None
        return self.cache.get(name)

    def _hold(self, span: Span, name: str, data: bytes) -> None:
        if self.remote:
            with self._lock:
                self._held[span] = (name, data)
                self._renewed.add(name)

    def read(self, key: str, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of ``key``: held, cached, or read from the store (held)."""
        if not self.remote:
            got = self._prefetched.pop((key, start, end), None)
            return self.objects.get_range(key, start, end) if got is None else got
        span = (key, start, end)
        name = self._name(key, f"{start}-{end}")
        got = self._lookup(span, name)
        if got is None:
            got = self.objects.get_range(key, start, end)
            self._hold(span, name, got)
        with self._lock:
            self._served.add(span)
        return got

    def reader(self, key: str) -> Callable[[int, int], bytes]:
        """``read_range(start, end)`` of one object (what files.pages takes)."""
        return lambda start, end: self.read(key, start, end)

    def read_suffix(self, key: str, size: int, guess: int,
                    need: Callable[[bytes], int]) -> bytes:
        """The last bytes of the ``size``-byte object ``key`` that ``need`` says it needs
        (``need(last_bytes)``: how many of the last bytes, from the last ``guess`` read
        first; a Parquet footer's length + 8): read once with a guess, again when that falls
        short, and held (cached) as exactly those bytes, so the bytes before them, which
        nothing checks, never enter the cache."""
        name = self._name(key, f"suffix-{size}")
        with self._lock:
            held = [d for n, d in self._held.values() if n == name]
        if held:
            return held[0]
        got = self._lookup((key, -1, size), name)  # (a cached suffix: its start unknown)
        if got is not None:
            return got
        data = self.objects.get_range(key, max(0, size - guess), size)
        n = min(max(need(data), 0), size)
        if n > len(data):
            data = self.objects.get_range(key, size - n, size)
        data = data[len(data) - n:] if n else data
        span = (key, size - len(data), size)
        self._hold(span, name, data)
        with self._lock:
            self._served.add(span)
        return data

    def prefetch(self, key: str, ranges: Iterable[tuple[int, int]]) -> None:
        """Read the ranges of ``key`` not cached yet, those within :data:`COALESCE_BYTES` of
        each other by one GET, and hold them for the reader's :meth:`read` (only the ranges
        it then reads may be kept: the bytes between them, or a range it does not read, are
        not checked, so never cached). A store read straight through reads the ranges by
        one ``get_ranges`` and hands them to :meth:`read`."""
        if not self.remote:  # local disk: the ranges read through one open of the file
            spans = sorted({(s, e) for s, e in ranges if e > s})
            if len(spans) > 1:
                got = self.objects.get_ranges(key, spans)
                self._prefetched.update(((key, s, e), data)
                                        for (s, e), data in zip(spans, got, strict=True))
            return
        missing = sorted({(s, e) for s, e in ranges if e > s and
                          self._lookup((key, s, e), self._name(key, f"{s}-{e}")) is None})
        group: list[tuple[int, int]] = []
        for span in missing:
            if group and span[1] - group[0][0] > COALESCE_BYTES:
                self._fetch(key, group)
                group = []
            group.append(span)
        if group:
            self._fetch(key, group)

    def _fetch(self, key: str, group: list[tuple[int, int]]) -> None:
        lo = group[0][0]
        data = self.objects.get_range(key, lo, max(e for _, e in group))
        for s, e in group:
            self._hold((key, s, e), self._name(key, f"{s}-{e}"), data[s - lo:e - lo])

    def confirm(self, key: str, start: int, end: int) -> bool:
        """For bytes without a checksum of their own (a page index) about to be cached:
        whether a second read from the store gives the bytes held for ``[start, end)``
        (True too when they came from the cache, or nothing is cached)."""
        span = (key, start, end)
        with self._lock:
            held = self._held.get(span)
        if held is None or self.cache is None or not checksums.VERIFY_READS:
            return True
        same = self.objects.get_range(key, start, end) == held[1]
        if same:
            with self._lock:
                self._confirmed.add(span)
        return same

    def keep(self, *, checked: bool = True) -> None:
        """The reader's checks passed: the held ranges enter the cache. ``checked``: the
        bytes carry checksums the reader verified (page CRCs, a footer's CRC against the
        file's sums, a filter block's CRC); else (a file written before checksums) a range
        enters only when a second read from the store gives the same bytes, so a byte
        changed on the way is never kept. A short range (which the checks should have
        refused) never enters; nothing does while reads go unchecked
        (``storage.checksums.VERIFY_READS``: the checksum benchmark)."""
        with self._lock:
            held, self._held = self._held, {}
            served, self._served = self._served, set()
            confirmed = set(self._confirmed)
        if self.cache is None or not checksums.VERIFY_READS:
            return
        for (key, start, end), (name, data) in held.items():
            if (key, start, end) not in served or len(data) != end - start:
                continue
            if not checked and (key, start, end) not in confirmed and \
                    self.objects.get_range(key, start, end) != data:
                log.warning("%s [%d, %d) of %s read differently twice: not cached", key,
                            start, end, self.objects.uri)
                continue
            self.cache.put(name, data)

    def forget(self) -> None:
        """The reader's checks failed: drop the held ranges."""
        with self._lock:
            self._held = {}
            self._served = set()
