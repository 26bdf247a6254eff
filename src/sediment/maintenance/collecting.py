"""The continuous maintainer's GC lane: garbage collection, metadata bounds and the store
steps, on one thread of their own.

A GC pass lists the table's objects (tens of milliseconds per thousands of files); on the
tick's thread it held back the planning of jobs while new files kept arriving. So the
maintainer hands each table's pass, once a ``gc_every`` period, to this lane's one thread,
one pass per table at a time; every ``PRUNE_GC_PERIODS`` periods (and at the first) the pass
is followed by the bounding of the table's metadata (``sediment.maintenance.retention``: log
entries and snapshots past ``retention.seconds`` pruned, job events past
``status.retention.seconds`` rolled up); the store steps (the folders no catalog entry names)
run on the same thread. What a pass did or could not do goes to the maintainer's report
through ``record`` and ``note``, both called under the maintainer's lock.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING

from sediment.maintenance.activity import TableActivity
from sediment.maintenance.gc import gc
from sediment.maintenance.orchestrator import StoreMaintenance
from sediment.maintenance.retention import tidy_metadata

if TYPE_CHECKING:
    from sediment.handle import TableHandle

PRUNE_GC_PERIODS = 6
"""Metadata is pruned every this many GC periods (a minute with ``maintain --loop``'s default
10 s interval): a prune lists the log and the snapshot objects, and what it frees grows by the
commits of one period only, so once a minute bounds the metadata as well as every tick would."""


class CollectorLane:
    """GC passes of tables and the store steps, on one thread (see the module docstring).

    ``activity(name)``: the report's activity of a table; ``note(name, error)``: an error for
    its report row; both are called holding ``lock``, the maintainer's."""

    def __init__(self, gc_every: float, orphan_timeout: float | None,
                 lock: AbstractContextManager[object],
                 activity: Callable[[str], TableActivity],
                 note: Callable[[str, str], None]) -> None:
        self.gc_every = gc_every
        self.orphan_timeout = orphan_timeout
        self._lock = lock
        self._activity = activity
        self._note = note
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="sediment-gc")
        self._gc_at: dict[str, float] = {}
        self._pruned_at: dict[str, float] = {}
        """Table -> when its metadata was last pruned (see PRUNE_GC_PERIODS)."""
        self._collecting: dict[str, Future[None]] = {}
        """Table -> its GC pass under way (one at a time)."""
        self._store_at = float("-inf")

    def tick(self, t: TableHandle, now: float) -> None:
        """Start ``t``'s GC pass when a period has passed and its last one ended."""
        collecting = self._collecting.get(t.name)
        if now - self._gc_at.get(t.name, float("-inf")) >= self.gc_every and \
                (collecting is None or collecting.done()):
            self._gc_at[t.name] = now
            self._collecting[t.name] = self._pool.submit(self._collect, t)

    def store_tick(self, store: StoreMaintenance, now: float) -> None:
        """Start the store steps when a period has passed."""
        if now - self._store_at >= self.gc_every:
            self._store_at = now
            self._pool.submit(self._store_steps, store)

    def running(self) -> set[str]:
        """Tables whose GC pass is under way."""
        return {n for n, f in list(self._collecting.items()) if not f.done()}

    def pending(self) -> list[Future[None]]:
        """The GC passes under way."""
        return [f for f in list(self._collecting.values()) if not f.done()]

    def close(self) -> None:
        """Wait for the passes under way."""
        self._pool.shutdown(wait=True)

    def _collect(self, t: TableHandle) -> None:
        """One GC pass of ``t``, then (when due) the bounding of its metadata."""
        try:
            g = gc(t, orphan_timeout=self.orphan_timeout)
        except Exception as e:  # noqa: BLE001 - reported; the next GC period tries again
            with self._lock:
                self._note(t.name, f"gc: {type(e).__name__}: {e}")
            return
        with self._lock:
            act = self._activity(t.name)
            act.files_deleted += g.deleted + g.orphans_deleted
            act.errors.extend(f"gc kept every unreferenced file: {m}"
                              for m in g.unreadable_tags)
        now = time.monotonic()
        if now - self._pruned_at.get(t.name, float("-inf")) >= self.gc_every * PRUNE_GC_PERIODS:
            self._pruned_at[t.name] = now
            self._tidy(t)

    def _tidy(self, t: TableHandle) -> None:
        """Bound ``t``'s metadata (after a GC pass)."""
        try:
            r = tidy_metadata(t)
        except Exception as e:  # noqa: BLE001 - reported; the next prune period tries again
            with self._lock:
                self._note(t.name, f"prune: {type(e).__name__}: {e}")
            return
        with self._lock:
            act = self._activity(t.name)
            act.metadata_deleted += r.deleted
            if r.pruned.note:
                act.errors.append(f"prune: {r.pruned.note}")

    def _store_steps(self, store: StoreMaintenance) -> None:
        """The store steps; what they could not do is reported."""
        try:
            results = store.run_store_steps()
        except Exception as e:  # noqa: BLE001 - reported; the next GC period tries again
            with self._lock:
                self._note("(unnamed folders)", f"{type(e).__name__}: {e}")
            return
        with self._lock:
            for r in results:
                if r.note:
                    self._note(f"({r.what})", r.note)
