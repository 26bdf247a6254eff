"""HeadCache: the head of one table this process shares, kept current by reading the log.

The head is immutable once published (every change builds a new ``TableState``), so its lock
is held only to read or swap it, never across object-store I/O: readers never wait for a
writer, nor for each other. It is brought up to the log's head by probing the slots after it
one by one (a few small reads; :meth:`HeadCache.probe`), by listing the log when the probe
cannot tell, and from the newest snapshot when the entries after it were pruned. Readers that
may be a little behind take :meth:`HeadCache.cached_head`, re-read ahead of its age limit on a
background thread (refresh-ahead); those that find it past the limit share one re-read. The
commit loop (``sediment.state.commit``) publishes the states it commits here.

Every handle of one table in a process (a ``Table`` the application holds, another opened by
``store.table``, a load, a bulk import on the Spark driver, a server's) has its own
cache, and each publishes what it reads or commits to the table's :class:`SharedHead` too, the
newest head any of them knows: a commit through one handle is in every other's head at once,
as ``state.cache.refresh_seconds`` promises for "this process's own commits".
"""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from concurrent.futures import Future
from typing import Any

from sediment import metrics
from sediment.core.crowding import most_files_per_leaf
from sediment.core.state import TableState
from sediment.errors import CorruptMetadataError, SedimentError
from sediment.properties import PROPERTIES
from sediment.state.log import LogEntry, TransactionLog, log_key
from sediment.state.snapshot import DigestMemo, read_snapshot, snapshot_versions
from sediment.storage.base import ObjectStore

log = logging.getLogger(__name__)

REFRESH_AHEAD = 0.5
"""Past this fraction of ``state.cache.refresh_seconds``, a read of the cached head starts a
background re-read of the log (see ``HeadCache.cached_head``)."""


class SharedHead:
    """The newest head of one table any :class:`HeadCache` of this process published, and when
    it was synced (one tuple, swapped under the lock, read without it)."""

    __slots__ = ("__weakref__", "_lock", "now")

    def __init__(self) -> None:
        self.now: tuple[TableState | None, float] = (None, 0.0)
        self._lock = threading.Lock()

    def publish(self, state: TableState, synced: float) -> None:
        with self._lock:
            head, was = self.now
            if head is None or state.version > head.version:
                self.now = (state, synced)
            elif state.version == head.version and synced > was:
                self.now = (head, synced)


_SHARED: weakref.WeakValueDictionary[tuple[str, str], SharedHead] = \
    weakref.WeakValueDictionary()
"""The shared head of each table (by store location and table id) while a cache holds it."""
_SHARED_LOCK = threading.Lock()


def _after_fork() -> None:
    """A forked child (the maintainer's job workers) starts with fresh locks: one another
    thread of the parent held at the fork would never be released in it."""
    global _SHARED_LOCK
    _SHARED_LOCK = threading.Lock()
    for shared in list(_SHARED.values()):
        shared._lock = threading.Lock()


os.register_at_fork(after_in_child=_after_fork)


def shared_head(objects: ObjectStore, table_id: str) -> SharedHead:
    """The shared head of the table ``table_id`` in ``objects`` (table-rooted)."""
    key = (objects.identity, table_id)
    with _SHARED_LOCK:
        found = _SHARED.get(key)
        if found is None:
            found = _SHARED[key] = SharedHead()
        return found


def prop(state: TableState, name: str) -> Any:
    """A property of ``state``, or its default."""
    return state.properties.get(name, PROPERTIES[name].default)


class HeadCache:
    """The cached head of the table in ``objects`` (table-rooted), read through ``log``; every
    state it loads carries the table's ``name`` (for errors)."""

    def __init__(self, objects: ObjectStore, table_id: str, name: str,
                 log: TransactionLog, *, shared: bool = False) -> None:
        self.objects = objects
        self.table_id = table_id
        self.name = name
        self.log = log
        self.known_digests = DigestMemo()
        """Snapshot objects known to exist, forgotten well within the prune grace period (a
        digest remembered past a prune would make a snapshot name a deleted object)."""
        self._now: tuple[TableState | None, float] = (None, 0.0)
        """The head and when it was last synced, swapped as one tuple: a reader takes it
        without the lock (one attribute read is atomic), so readers on many threads never
        queue on a lock (a blocked ``acquire`` gives up the GIL, and with many threads each
        such wait hands it to another thread: their lookups collapse)."""
        self._shared = shared_head(objects, table_id) if shared else SharedHead()
        """The newest head of the table any handle in this process knows (module doc); one
        of its own when not ``shared``."""
        self._lock = threading.Lock()
        """Guards swapping ``_now`` (and the re-read flags) only: never held across I/O."""
        """When the cached head was last known to be current (monotonic seconds)."""
        self._reread: tuple[float, Future[TableState]] | None = None
        """The re-read of an expired head under way for ``cached_head`` (when it started, and
        its outcome), which readers that come meanwhile share."""
        self._refreshing = False
        """A background re-read of the log is under way (see ``cached_head``)."""
        metrics.watch_leaves(name, self.most_files_per_leaf)

    def most_files_per_leaf(self) -> tuple[int, int]:
        """The cached head's version and the most files a read of one of its leaves merges
        ((-1, 0) before the first read): ``sediment_files_per_leaf``, computed when
        scraped."""
        head, _ = self.cached()
        return (-1, 0) if head is None else (head.version, most_files_per_leaf(head))

    # ---- the head: swapped under the lock, read without it, never mutated --------------
    def cached(self) -> tuple[TableState | None, float]:
        """The cached head (None before the first read) and when it was last synced: this
        cache's, or the table's shared head when another handle's is newer."""
        mine, theirs = self._now, self._shared.now
        if theirs[0] is not None and (mine[0] is None or theirs[0].version > mine[0].version
                                      or (theirs[0].version == mine[0].version
                                          and theirs[1] > mine[1])):
            return theirs
        return mine

    def publish(self, state: TableState, synced: float) -> TableState:
        """Make ``state`` the cached head unless a newer one was published meanwhile; returns
        the cached head."""
        with self._lock:
            head, was = self.cached()
            if head is None or state.version >= head.version:
                self._now = (state, max(was, synced))
                self._shared.publish(state, max(was, synced))
                return state
            self._now = (head, was)
            return head

    def current(self, *, max_age: float | None) -> tuple[TableState, bool]:
        """The head, re-read from storage when never loaded or synced more than ``max_age``
        seconds ago (None: always). The flag says whether it was read just now."""
        head, synced = self.cached()
        if head is not None and max_age is not None and time.monotonic() - synced <= max_age:
            return head, False
        started = time.monotonic()
        state = self.load_from_storage(None) if head is None else self._refreshed(head)
        return self.publish(state, started), True

    def head(self, *, refresh: bool = True) -> TableState:
        """The latest state (a private copy the caller may keep)."""
        state, _ = self.current(max_age=None if refresh else float("inf"))
        return state.copy()

    def cached_head(self) -> TableState:
        """The head this process shares, without a copy (read it, never change it): this
        process's own commits are in it at once, other writers' once it was re-read, which
        happens when it was last synced more than ``state.cache.refresh_seconds`` ago.

        Reading the log's new entries takes a query from a few milliseconds to a few tens
        while others commit, so a head past ``REFRESH_AHEAD`` of its age limit is returned
        as it is and re-read on a background thread (refresh-ahead): a table read steadily
        is re-read off its readers' path, and only a read that finds the head past its limit
        (the table was not read for a while) waits for the log. The limit itself holds as
        before: no read is answered from a head synced longer ago."""
        head, synced = self.cached()
        if head is None:
            return self.current(max_age=None)[0]
        max_age = float(prop(head, "state.cache.refresh_seconds"))
        age = time.monotonic() - synced
        if age < max_age:
            if age >= max_age * REFRESH_AHEAD:
                self._refresh_in_background()
            return head
        return self._shared_reread(max_age)

    def _shared_reread(self, max_age: float) -> TableState:
        """The head re-read for readers that found it past its age limit: one of them reads
        the log, the others that come while it does take what it read (a herd of requests
        after an idle spell each read the log otherwise: 64 puts, 128 requests). A reader
        joins only a re-read that started within ``max_age``, so what it is answered with
        meets the limit, as its own read would; an error of the read is each one's."""
        now = time.monotonic()
        with self._lock:
            flight = self._reread
            mine = flight is None or now - flight[0] > max_age
            if mine:
                flight = self._reread = (now, Future())
        assert flight is not None
        if not mine:
            return flight[1].result()
        try:
            state = self.current(max_age=None)[0]
        except BaseException as e:
            flight[1].set_exception(e)
            raise
        finally:
            with self._lock:
                if self._reread is flight:
                    self._reread = None
        flight[1].set_result(state)
        return state

    def _refresh_in_background(self) -> None:
        """Re-read the log on a daemon thread (one at a time per table); a failure is left
        for the next read that finds the head too old to meet, on its own thread."""
        with self._lock:
            if self._refreshing:
                return
            self._refreshing = True

        def refresh() -> None:
            try:
                self.current(max_age=None)
            except Exception as e:  # noqa: BLE001 (reported by the read that needs it)
                log.debug("background refresh of table %s failed: %r", self.name, e)
            finally:
                with self._lock:
                    self._refreshing = False

        threading.Thread(target=refresh, name=f"sediment-refresh-{self.name}",
                         daemon=True).start()

    # ---- reading the log ---------------------------------------------------------------
    def replay(self, state: TableState, entry: LogEntry) -> None:
        """Apply a committed entry to ``state``. Every entry was validated before it was
        written, so one that cannot be applied is damaged metadata, named as such (with the
        table and key), not a raw KeyError that stops whoever reads the table."""
        try:
            entry.transaction.apply(state, entry.time)
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as e:
            raise CorruptMetadataError(
                f"log entry {entry.version} of table {self.name} ({log_key(entry.version)}) "
                f"cannot be replayed: {e!r}") from e
        state.version = entry.version
        state.last_update = entry.time

    def load_from_storage(self, version: int | None) -> TableState:
        """The state at ``version`` (None: the latest): the newest readable snapshot at or
        below it, then the log's entries after that."""
        snaps = [v for v in snapshot_versions(self.objects) if version is None or v <= version]
        state: TableState | None = None
        for v in reversed(snaps):
            try:
                # an old version's objects are the ones prune deletes next: not remembered
                state = read_snapshot(self.objects, v, self.table_id,
                                      self.known_digests if version is None else None,
                                      name=self.name)
                break
            except SedimentError as e:  # a damaged snapshot: fall back to an older one
                log.warning("ignoring snapshot %s of table %s: %s", v, self.name, e)
        if state is None:
            state = TableState(self.table_id, self.name)
        for entry in self.log.read_after(state.version, upto=version):
            self.replay(state, entry)
        return state

    def _refreshed(self, base: TableState) -> TableState:
        """``base`` brought up to the log's head (a new state; ``base`` is left alone)."""
        state, complete = self.probe(base)
        return state if complete else self._listed(state)

    def probe(self, base: TableState) -> tuple[TableState, bool]:
        """Read the log slots after ``base`` one by one until one is empty: a few small reads,
        where listing the log can cost O(log length). Not complete when the log must be
        listed: more than ``objects.probe_limit`` new entries (the state moves past those
        read), or the head's own entry is gone (pruned: the entries after it may be too)."""
        v = base.version
        if v == 0:
            return base, False
        state: TableState | None = None
        entry: LogEntry | None = None
        for _ in range(max(1, self.objects.probe_limit)):
            entry = self.log.read_if_present(v + 1)
            if entry is None:
                break
            if state is None:
                state = base.copy()
            self.replay(state, entry)
            v += 1
        out = base if state is None else state
        if entry is not None:  # probe_limit entries read, maybe more: list for the rest
            return out, False
        # Pruning deletes a prefix of the log: while entry v exists, v + 1 cannot have been
        # pruned, so its empty slot means v is the head (checked after the miss: no race).
        return out, self.objects.exists(log_key(v))

    def _listed(self, base: TableState) -> TableState:
        newer = self.log.versions_after(base.version)
        if newer and newer[0] != base.version + 1:
            # The entries after this state were pruned: start again from storage.
            return self.load_from_storage(None)
        if not newer:
            return base
        state = base.copy()
        for e in self.log.read_after(base.version, listed=newer):
            self.replay(state, e)
        return state
