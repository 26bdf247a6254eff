"""The table page's commits: every commit the log holds, counted per minute over the last hour,
per hour over the last day and per day over the last week, by kind, and the latest few with
their summaries.

A table under a maintainer commits many times a second, so its latest 1,000 commits cover
well under a minute; a glance asks how many commits of each kind came when, over hours and
days. The times come from listings of the log (one object per commit; each listing asks only
for the keys after the newest one held, and gives each object's modification time: the
store's clock when the commit landed, milliseconds after the writer's). The kinds come from
reading the entries (one small read each), newest first and at most :data:`KIND_READS` per
refresh, so a first visit to a busy table stays fast; older entries are read over the next
refreshes and counted meanwhile as :data:`UNREAD`. A read entry gives its own commit time
(the one ``table.history()`` shows) and its kind (upserts and overwrites counted apart from
plain ingests: ``sediment.dashboard.changes``); a delete among the latest few is read whole,
to say what it deleted. The counting is numpy over the held arrays.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from sediment.dashboard.aggregate import iso
from sediment.dashboard.changes import delete_detail, timeline_kind
from sediment.errors import CorruptMetadataError
from sediment.handle import handle_of
from sediment.state.log import LOG_PREFIX, HistoryEntry, TransactionLog, log_key, version_of_key
from sediment.table import Table


@dataclass(frozen=True, slots=True)
class Window:
    """A span of time the timeline shows, ending now, cut into buckets aligned on UTC."""

    name: str
    label: str
    bucket: str
    bucket_seconds: int
    buckets: int

    def first_bucket(self, now: float) -> int:
        """The number of the window's first bucket (its start over ``bucket_seconds``) when
        the last one holds ``now``."""
        return math.floor(now / self.bucket_seconds) - self.buckets + 1


WINDOWS = (Window("hour", "last hour", "minute", 60, 60),
           Window("day", "last day", "hour", 3600, 24),
           Window("week", "last week", "day", 86400, 7))
KIND_READS = 2000
"""Log entries read per refresh and table, newest unread first (~0.2 s on a local disk)."""
RECENT = 25
"""The latest commits listed with their summaries."""
UNREAD = "(kind not read yet)"
UNREADABLE = "(entry unreadable)"
"""The kind of a listed entry that could not be read (pruned since it was listed, or
damaged): it is counted at its listed time and not read again."""
KEEP_SECONDS = WINDOWS[-1].bucket_seconds * (WINDOWS[-1].buckets + 1)
"""Commits older than the widest window (and one bucket) are dropped from memory."""


@dataclass(slots=True)
class _Held:
    """The commits of one table seen so far: versions ascending, times, kind codes (indexes
    into ``kinds``; -1 not read yet) and the latest entries read."""

    last_key: str | None = None
    versions: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    times: np.ndarray = field(default_factory=lambda: np.empty(0, np.float64))
    codes: np.ndarray = field(default_factory=lambda: np.empty(0, np.int32))
    kinds: list[str] = field(default_factory=list)
    recent: list[HistoryEntry] = field(default_factory=list)
    details: dict[int, str] = field(default_factory=dict)
    """What each delete among ``recent`` covers (read from its whole entry), by version."""

    def code(self, kind: str) -> int:
        if kind not in self.kinds:
            self.kinds.append(kind)
        return self.kinds.index(kind)


class CommitTimeline:
    """The commits of each table, read incrementally (see the module docstring)."""

    def __init__(self, *, kind_reads: int = KIND_READS,
                 clock: Callable[[], float] = time.time) -> None:
        self.kind_reads = kind_reads
        self.clock = clock
        self._held: dict[str, _Held] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._lock = threading.Lock()

    def view(self, table: Table) -> dict[str, Any]:
        """``windows``: per window, its buckets (start times) and commits per kind in each;
        ``default``: the shortest window holding the latest commit; ``recent``: the latest
        commits, newest first; ``held``, ``unread``, ``oldest``: what the counts cover."""
        with self._lock:
            lock = self._locks.setdefault(table.table_id, threading.Lock())
        with lock:  # one refresh per table at a time: the same entries are not read twice
            held = self._refresh(table)
            return self._counts(held, self.clock())

    # ---- reading -------------------------------------------------------------------------
    def _refresh(self, table: Table) -> _Held:
        held = self._held.setdefault(table.table_id, _Held())
        log = handle_of(table).states.log
        listed = list(log.objects.list(LOG_PREFIX, start_after=held.last_key))
        versions = [version_of_key(o.key, LOG_PREFIX) for o in listed]
        fresh = [(v, o.mtime) for v, o in zip(versions, listed, strict=True) if v is not None]
        if fresh:
            held.last_key = log_key(fresh[-1][0])
            new_v = np.fromiter((v for v, _ in fresh), np.int64, len(fresh))
            new_t = np.fromiter((t for _, t in fresh), np.float64, len(fresh))
            held.versions = np.concatenate([held.versions, new_v])
            held.times = np.concatenate([held.times, new_t])
            held.codes = np.concatenate([held.codes, np.full(len(fresh), -1, np.int32)])
        keep = held.times >= self.clock() - KEEP_SECONDS
        keep[-RECENT:] = True  # the latest commits stay, however old
        if not keep.all():
            held.versions, held.times, held.codes = \
                held.versions[keep], held.times[keep], held.codes[keep]
        todo = np.flatnonzero(held.codes < 0)[-self.kind_reads:]
        if len(todo):
            self._read(log, held, todo)
        return held

    def _read(self, log: TransactionLog, held: _Held, todo: np.ndarray) -> None:
        """Read the entries at positions ``todo`` (16 at a time, as the log reads)."""
        def entry(version: int) -> HistoryEntry | None:
            try:
                return log.history_entry(version)
            except CorruptMetadataError:
                return None  # pruned since listed, or damaged: counted at its listed time

        versions = [int(v) for v in held.versions[todo]]
        with ThreadPoolExecutor(min(16, len(versions))) as pool:
            entries = list(pool.map(entry, versions))
        unreadable = held.code(UNREADABLE)
        for i, e in zip(todo.tolist(), entries, strict=True):
            if e is None:
                held.codes[i] = unreadable
            else:
                held.times[i], held.codes[i] = e.time, held.code(timeline_kind(e))
        latest = {e.version: e for e in (*held.recent, *(e for e in entries if e))}
        held.recent = [latest[v] for v in sorted(latest)[-RECENT:]]
        self._detail(log, held)

    @staticmethod
    def _detail(log: TransactionLog, held: _Held) -> None:
        """Read the whole entries of the deletes among the latest commits (a history row has
        only their count of ranges): what each covers, once per delete."""
        shown = {e.version for e in held.recent}
        held.details = {v: t for v, t in held.details.items() if v in shown}
        for e in held.recent:
            if e.kind == "delete_records" and e.version not in held.details:
                try:
                    detail = delete_detail(log.read(e.version).transaction)
                except CorruptMetadataError:
                    detail = None  # pruned since, or damaged: the summary alone
                held.details[e.version] = detail or ""

    # ---- counting ------------------------------------------------------------------------
    def _counts(self, held: _Held, now: float) -> dict[str, Any]:
        names = [*held.kinds, UNREAD]  # code -1 is the last name
        codes = np.where(held.codes < 0, len(names) - 1, held.codes)
        windows = window_counts(held.times, codes, names, now)
        latest = float(held.times.max()) if len(held.times) else None
        default = next((w.name for w in WINDOWS if latest is not None
                        and latest >= w.first_bucket(now) * w.bucket_seconds),
                       WINDOWS[-1].name)
        return {
            "windows": windows, "default": default,
            "held": len(held.versions), "unread": int((held.codes < 0).sum()),
            "oldest": iso(float(held.times.min())) if len(held.times) else None,
            "recent": [{"version": e.version, "time": iso(e.time), "kind": e.kind,
                        "summary": e.summary, "detail": held.details.get(e.version) or None}
                       for e in reversed(held.recent)],
        }


def window_counts(times: np.ndarray, codes: np.ndarray, names: list[str],
                  now: float) -> list[dict[str, Any]]:
    """Commits per bucket and kind in each of :data:`WINDOWS` ending at ``now``: ``times``
    (epoch seconds) and ``codes`` (indexes into ``names``) are the commits. A window's
    buckets are aligned on UTC (whole minutes, hours, days), the last one holding ``now``;
    a time ahead of ``now`` (a writer's clock ahead of this one) counts in the last."""
    out = []
    for w in WINDOWS:
        first = w.first_bucket(now)
        slot = np.floor(times / w.bucket_seconds).astype(np.int64) - first
        slot = np.minimum(slot, w.buckets - 1)
        inside = slot >= 0
        grid = np.bincount(slot[inside] * len(names) + codes[inside],
                           minlength=w.buckets * len(names)).reshape(w.buckets, len(names))
        totals = grid.sum(axis=0)
        out.append({
            "name": w.name, "label": w.label, "bucket": w.bucket,
            "bucket_seconds": w.bucket_seconds,
            "start": iso(first * w.bucket_seconds),
            "end": iso((first + w.buckets) * w.bucket_seconds),
            "buckets": [iso((first + i) * w.bucket_seconds) for i in range(w.buckets)],
            "counts": {names[k]: grid[:, k].tolist() for k in np.flatnonzero(totals)},
            "commits": int(totals.sum()),
        })
    return out
