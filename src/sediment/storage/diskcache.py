"""The disk cache: byte ranges of immutable objects read from an object store, kept on local
disk so that the next read of the same range makes no request.

A lookup on S3 reads a file's footer, its page index, a key-filter block and a few pages, each a
ranged GET of tens of milliseconds; the same ranges are read again by the next lookup of a
nearby key, in this process or another one on the machine (SlateDB's ``cached_object_store``
keeps object parts on local disk for the same reason). Data files and their sidecars are
written once under a fresh name and never changed, so an entry is never stale and needs no
invalidation: a file deleted by GC stops being asked for and ages out.

**Keyed by exact range.** An entry is one range ``[start, end)`` of one object, named by the
store's identity (endpoint, bucket, key: ``ObjectStore.cache_name``) and the range. Not by
aligned blocks: only bytes the reader checked may enter (sediment.storage.rangereads), and a page
CRC or a key-filter block's CRC checks that range, not the block around it. Readers of
immutable files ask for the same ranges again (a page's bytes from the page index, a filter
block from its layout, the footer's tail from the file's size), so exact ranges repeat.

**Crash-safe.** An entry is written to a temporary file in its final folder and renamed over
its name (atomic on POSIX and Windows), and carries a header (magic, the length of its name
and of its bytes, a CRC-32 over both) checked on every read: a torn or damaged file (a kill -9
between write and rename leaves only a temporary; a power loss without fsync may leave a
renamed file with lost bytes) fails the check, counts as a miss and is removed. No fsync: the
cache may lose entries, never hand out wrong ones.

**Shared by processes.** Nothing lives only in one process's memory: an entry is a file, a hit
refreshes its modification time (at most once a second), and eviction lists the folder and
removes the oldest files until the total is under :data:`LOW_WATER` of the bound. Each process
trims when its running estimate (the last listing plus what it wrote since) passes the bound,
and lists again at least every :data:`RESCAN_SECONDS` while it writes, so other processes'
writes are counted within that time. Two processes removing the same file, or one reading a
file another removes, is harmless (a missing file is a miss; an open file reads to its end).

The folder is ``$SEDIMENT_CACHE_DIR`` when set, else ``sediment`` under the user's cache folder
(``$XDG_CACHE_HOME`` or ``~/.cache``; ``%LOCALAPPDATA%`` on Windows, ``~/Library/Caches`` on
macOS); the bound is the ``query.disk_cache_bytes`` of the table read (0: off).
"""

from __future__ import annotations

import hashlib
import logging
import os
import struct
import sys
import threading
import time
import uuid
import zlib
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

ENV = "SEDIMENT_CACHE_DIR"
"""The cache's folder (see :func:`cache_dir`)."""

DEFAULT_BYTES = 1024 * 1024 * 1024
"""The default bound (``query.disk_cache_bytes``): 1 GiB holds the footers, page indexes and
key filters of some thousands of files and the hot pages of a lookup workload."""

FORMAT = "ranges-v1"
"""The folder of this entry format under the cache folder (a new format gets a new folder)."""

MAGIC = b"SDRC"
_HEADER = struct.Struct("<4sIQI")
"""magic, name length, data length, CRC-32 of name + data."""

TOUCH_SECONDS = 1.0
"""A hit refreshes an entry's modification time (its LRU age) when older than this."""

RESCAN_SECONDS = 30.0
"""A writing process lists the folder again at least this often (other processes' writes)."""

LOW_WATER = 0.9
"""A trim removes the oldest entries until the total is at most this share of the bound."""

TEMP_SECONDS = 300.0
"""Temporary files older than this are leftovers of a killed writer: a trim removes them."""

_TEMP = ".tmp"


def cache_dir() -> Path:
    """``$SEDIMENT_CACHE_DIR``, else ``sediment`` in the user's cache folder."""
    env = os.environ.get(ENV, "").strip()
    if env:
        return Path(env).expanduser()
    if sys.platform == "win32":
        base = os.environ.get("LOCALAPPDATA") or str(Path.home() / "AppData" / "Local")
    elif sys.platform == "darwin":
        base = str(Path.home() / "Library" / "Caches")
    else:
        base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "sediment"


@dataclass(frozen=True, slots=True)
class DiskCacheStats:
    """Counters of one process's use of a disk cache folder."""

    hits: int
    misses: int
    inserts: int
    evictions: int
    bad: int
    """Entries found torn or damaged (removed, counted as misses)."""
    bytes: int
    """The running estimate of the folder's total (the last listing plus writes since)."""
    capacity: int


class DiskCache:
    """Byte ranges on local disk under one folder, bounded in bytes (module docstring)."""

    def __init__(self, directory: Path | str, capacity: int) -> None:
        self.directory = Path(directory)
        self.root = self.directory / FORMAT
        self.capacity = capacity
        self._lock = threading.Lock()
        self._estimate: int | None = None
        self._scanned = 0.0
        self._hits = self._misses = self._inserts = self._evictions = self._bad = 0
        self._failed = False

    def _path(self, name: str) -> Path:
        digest = hashlib.sha256(name.encode()).hexdigest()
        return self.root / digest[:2] / digest[2:]

    # --- entries ---------------------------------------------------------------------------
    def get(self, name: str) -> bytes | None:
        """The bytes cached under ``name``, or None: absent, or torn/damaged (then removed)."""
        path = self._path(name)
        try:
            with open(path, "rb") as f:
                raw = f.read()
                mtime = os.fstat(f.fileno()).st_mtime
        except OSError:
            with self._lock:
                self._misses += 1
            return None
        data = _unpack(raw, name)
        if data is None:
            self._remove(path)
            with self._lock:
                self._bad += 1
                self._misses += 1
            log.warning("disk cache entry %s is torn or damaged: removed", path)
            return None
        if time.time() - mtime > TOUCH_SECONDS:
            try:
                os.utime(path)
            except OSError:
                pass  # removed meanwhile by another process's trim: the bytes were read
        with self._lock:
            self._hits += 1
        return data

    def put(self, name: str, data: bytes) -> None:
        """Keep ``data`` under ``name`` (replacing an entry), unless it alone passes the bound.
        A folder that cannot be written is reported once and the cache is skipped: a cache
        never fails a read."""
        size = _HEADER.size + len(name.encode()) + len(data)
        if size > self.capacity:
            return
        path = self._path(name)
        temp = path.with_name(f"{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}{_TEMP}")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(temp, "wb") as f:
                f.write(_pack(name, data))
            os.replace(temp, path)
        except OSError as e:
            self._remove(temp)
            if not self._failed:
                self._failed = True
                log.warning("disk cache %s cannot be written (%s): reads go without it",
                            self.root, e)
            return
        with self._lock:
            self._inserts += 1
            if self._estimate is not None:
                self._estimate += size
            due = self._estimate is None or self._estimate > self.capacity or \
                time.monotonic() - self._scanned > RESCAN_SECONDS
        if due:
            self.trim()

    def discard(self, name: str) -> None:
        """Remove the entry of ``name`` (a range the reader no longer trusts)."""
        self._remove(self._path(name))

    @staticmethod
    def _remove(path: Path) -> bool:
        try:
            os.unlink(path)
            return True
        except OSError:
            return False

    # --- the bound ---------------------------------------------------------------------------
    def trim(self) -> int:
        """List the folder, remove leftover temporaries and, past the bound, the entries
        least recently used until the total is within :data:`LOW_WATER` of it; how many
        entries it removed. Safe beside other processes doing the same."""
        entries: list[tuple[float, int, str]] = []
        now = time.time()
        try:
            shards = list(os.scandir(self.root))
        except OSError:
            shards = []
        for shard in shards:
            try:
                files = list(os.scandir(shard.path))
            except OSError:
                continue
            for entry in files:
                try:
                    st = entry.stat()
                except OSError:
                    continue
                if entry.name.endswith(_TEMP):
                    if now - st.st_mtime > TEMP_SECONDS:
                        self._remove(Path(entry.path))
                    continue
                entries.append((st.st_mtime, st.st_size, entry.path))
        total = sum(size for _, size, _ in entries)
        removed = 0
        if total > self.capacity:
            entries.sort()
            goal = int(self.capacity * LOW_WATER)
            for _, size, path in entries:
                if total <= goal:
                    break
                if self._remove(Path(path)):
                    removed += 1
                total -= size
        with self._lock:
            self._estimate = total
            self._scanned = time.monotonic()
            self._evictions += removed
        return removed

    def stats(self) -> DiskCacheStats:
        with self._lock:
            return DiskCacheStats(self._hits, self._misses, self._inserts, self._evictions,
                                  self._bad, self._estimate or 0, self.capacity)


def _pack(name: str, data: bytes) -> bytes:
    key = name.encode()
    crc = zlib.crc32(data, zlib.crc32(key))
    return b"".join((_HEADER.pack(MAGIC, len(key), len(data), crc), key, data))


def _unpack(raw: bytes, name: str) -> bytes | None:
    """The data of an entry file, or None when it is not a whole, intact entry of ``name``."""
    if len(raw) < _HEADER.size:
        return None
    magic, nlen, dlen, crc = _HEADER.unpack_from(raw)
    key = name.encode()
    if magic != MAGIC or nlen != len(key) or len(raw) != _HEADER.size + nlen + dlen:
        return None
    view = memoryview(raw)
    if bytes(view[_HEADER.size:_HEADER.size + nlen]) != key:
        return None
    data = view[_HEADER.size + nlen:]
    if zlib.crc32(data, zlib.crc32(key)) != crc:
        return None
    return bytes(data)


_CACHES: dict[Path, DiskCache] = {}
_CACHES_LOCK = threading.Lock()


def configure(capacity: int) -> DiskCache | None:
    """The process's disk cache of the folder :func:`cache_dir` names, bounded by
    ``capacity`` (a table's ``query.disk_cache_bytes``: the last table read sets the bound);
    None when it is 0 (off)."""
    if capacity <= 0:
        return None
    directory = cache_dir()
    with _CACHES_LOCK:
        cache = _CACHES.get(directory)
        if cache is None:
            cache = _CACHES[directory] = DiskCache(directory, capacity)
        cache.capacity = capacity
    return cache


def stats() -> dict[str, int]:
    """This process's counters of the cache folder :func:`cache_dir` names (hits, misses,
    inserts, evictions, bad entries, estimated bytes, the bound); zeros before any read of
    an object store used it."""
    with _CACHES_LOCK:
        cache = _CACHES.get(cache_dir())
    if cache is None:
        return dict.fromkeys(DiskCacheStats.__slots__, 0)
    got = cache.stats()
    return {name: getattr(got, name) for name in DiskCacheStats.__slots__}


def _after_fork() -> None:
    """In a forked child (the maintainer forks workers): fresh locks, since the parent's may
    have been held by a thread that does not exist here. The entries are files: the child
    shares them."""
    global _CACHES_LOCK
    _CACHES_LOCK = threading.Lock()
    for cache in _CACHES.values():
        cache._lock = threading.Lock()


os.register_at_fork(after_in_child=_after_fork)
