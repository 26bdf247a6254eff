"""Garbage collection: delete unreferenced files after a delay, and orphans after a timeout.

Unreferenced files (their last reference went away at least ``gc.delay_seconds`` plus
``gc.clock_skew_seconds`` ago, so no running query still reads them, even by the clock of a
machine up to that much behind) are recorded as deleted by a DeleteFiles transaction, one per
batch, then deleted from storage (in that order: see ``gc``). Orphans are files under ``data/``
that no transaction ever added (a failed ingest or compaction, a killed job) older than
``gc.orphan_timeout_seconds``; so are the temp files of writes a crash interrupted
(``ObjectStore.temporaries``), anywhere in the table's folder, and the multipart uploads such
writes left incomplete on S3 (``ObjectStore.multipart_uploads``: Sediment's own and pyarrow's
of data files, aborted once older than the orphan timeout). A file that a live writer still
means to commit is named by its lease (``sediment.state.pending``) and is never an orphan,
however long the writer takes. Orphan and lease ages are read off the object store's own clock
(modification times against a probe written now), so no machine's clock enters them.

Order matters: the listing happens first, then the leases are read, then the leases found dead
are recorded expired (one ExpireLeases commit, only when there are any), then the state is
loaded. A listed file was registered before it was created, so either its lease is still live,
or its writer committed it (the state loaded after knows it), or gave it up, or its lease is
dead: then its writer, however long it was paused, can no longer commit it (its append meets
the recorded expiry: ``sediment.state.pending``). A referenced file is never deleted.

Tags keep their versions' files. A tag GC cannot read (not JSON, or naming a version that does
not load) might protect any file: GC then deletes no unreferenced file at all in that pass,
reports the tag (``GcResult.unreadable_tags``, a warning in the log) and goes on with orphans,
which no version ever referenced and so no tag can protect.

A reader may pin an old version while a pass runs, after the pass read the pins: the pass
then reads the tags and pins again after recording its deletions and spares what one now holds
(the spared files are orphans, kept while it lives), and the pin, once written, reads the log
and is refused when its version's files are recorded deleted (``Table.pin``). Each side writes,
then reads the other's write, so no pin succeeds whose files go (the race of PostHog PR #78455,
a short-retention vacuum deleting the files a concurrent reader's version still needed). Tags
are not refused so (a tag may name a version GC already collected: ``diff`` reads its log).

Live pins (``state.tags``) count as tags (an onward pin, a change-feed follower's, keeps also
every file of the versions after its own: those unreferenced after it was committed), and keep
the files they name besides (a batcher job's staged files, neither referenced nor leased once
its runner died), until they expire by the store's clock.

What a pass deletes and what it keeps, and why, is decided by one pure classifier
(``sediment.maintenance.kept``): ``GcResult.kept`` reports the rest by reason, with bytes and
when each becomes due, and ``survey`` answers the same without changing anything.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sediment import metrics
from sediment.core.transactions import DeleteFiles, ExpireLeases, Transaction
from sediment.errors import SedimentError, TransactionInvalidError
from sediment.files.sidecars import data_file_of, with_sidecars
from sediment.ingest.idempotency import expire_keys
from sediment.maintenance.kept import GcKept, GcPlan, GcWindows, Hold, classify
from sediment.settings import TableSettings, settings_of
from sediment.state import pending
from sediment.state.versions import TAG_PREFIX, scan_tags
from sediment.storage.clock import object_store_time

if TYPE_CHECKING:
    from collections.abc import Mapping

    from sediment.core.state import TableState
    from sediment.handle import TableHandle
    from sediment.storage.base import ObjectInfo

log = logging.getLogger(__name__)

TEMPORARY_TIMEOUT_SECONDS = 3600.0
"""Temp files of puts are collected only once this old, whatever the orphan timeout."""


@dataclass(frozen=True, slots=True)
class GcResult:
    deleted: int = 0
    orphans_deleted: int = 0
    seconds: float = 0.0
    unreadable_tags: tuple[str, ...] = ()
    """One message per tag GC could not read (naming the table and the tag's key): while any
    is left, no unreferenced file is deleted, since the tag might protect it."""
    kept: GcKept = field(default_factory=GcKept)
    """What the pass did not delete and why, with bytes and when each becomes due
    (``sediment.maintenance.kept``)."""
    expired_keys: int = 0
    """Idempotency key records deleted past ``write.idempotency_window_seconds``."""
    uploads_aborted: int = 0
    """Incomplete multipart uploads under the table's folder (a writer killed mid-object)
    aborted once older than the orphan timeout, by the store's clock."""

    @property
    def did_work(self) -> bool:
        return bool(self.deleted or self.orphans_deleted or self.uploads_aborted)


_FILES_AT: dict[tuple[str, str, int], tuple[frozenset[str], float]] = {}
"""Files referenced at (store URI, table id, version), and its commit time: a committed
version never changes, and loading one (snapshot + log replay) cost ~7 ms per tag on every
pass (14 tags: 7 -> 112 ms)."""


def _files_at(table: TableHandle, version: int) -> tuple[frozenset[str], float]:
    key = (table.objects.uri, table.table_id, version)
    known = _FILES_AT.get(key)
    if known is None:
        state = table.state(version)
        known = (frozenset(state.refcount), state.last_update)
        if len(_FILES_AT) >= 1024:
            _FILES_AT.clear()
        _FILES_AT[key] = known
    return known


def tag_holds(table: TableHandle, now: float | None = None, head: TableState | None = None
              ) -> tuple[list[Hold], list[str]]:
    """The table's tags and live pins (``now``: the store's time to judge pins by), each with
    the files it keeps, and a message for each tag that cannot be read or whose version
    cannot be loaded (for which nothing can be said: see the module). An onward pin keeps
    also every file a later version referenced: those of ``head`` (default: loaded) that
    became unreferenced after the pinned version was committed."""
    scan = scan_tags(table.states, now)
    holds: list[Hold] = []
    problems = list(scan.unreadable)
    for tag in scan.tags:
        try:
            files, committed = _files_at(table, tag.version)
            if tag.onward:
                head = head if head is not None else table.states.head()
                files = files | {f for f, t in head.unreferenced.items() if t >= committed}
        except SedimentError as e:
            problems.append(f"tag {tag.name!r} of table {table.name} ({TAG_PREFIX}{tag.name}"
                            f".json) pins version {tag.version}, which cannot be read: {e}")
            files = frozenset()
        # a pin's own files too (staged, not yet committed)
        holds.append(Hold(tag.name, tag.expires, files | frozenset(tag.files)))
    return holds, problems


def tag_protection(table: TableHandle, now: float | None = None) -> tuple[set[str], list[str]]:
    """The files the table's tags and live pins keep, and the messages of :func:`tag_holds`."""
    holds, problems = tag_holds(table, now)
    return {f for h in holds for f in h.files}, problems


def _live_leases(table: TableHandle, store_now: float) -> Mapping[str, float | None]:
    """The files live leases protect, each with when its lease lapses. Dead leases are
    recorded expired in the log first (then deleted), so that no writer paused past its lease
    commits what this pass deletes (see the module); a pass that finds none commits nothing."""
    scan = pending.scan_leases(table.objects, store_now, table.name)
    if scan.dead:
        dead = scan.dead_ids

        def record(head: TableState) -> Transaction:  # another collector may have recorded some
            return ExpireLeases([i for i in dead if i not in head.expired_leases])

        table.states.commit(record)
        pending.delete_dead(table.objects, scan)
    return scan.lapses


def _plan(table: TableHandle, listed: list[ObjectInfo], leases: Mapping[str, float | None],
          now: float, store_now: float, orphan_timeout: float | None
          ) -> tuple[GcPlan, list[str], TableSettings]:
    """Classify (``sediment.maintenance.kept``) against the head, loaded after the listing and
    the leases (see the module): GC's one read of the head, which it cannot take from the
    start of a maintenance pass (the order above is what makes it safe). Its settings come
    back too, for the rest of the pass."""
    state = table.states.head()
    settings = settings_of(state, table.name)
    holds, unreadable = tag_holds(table, store_now, state)
    for problem in unreadable:
        log.warning("gc of table %s deletes no unreferenced file: %s", table.name, problem)
    return classify(state, listed, holds=holds, unreadable_tags=bool(unreadable),
                    leases=leases, windows=GcWindows.of(settings, orphan_timeout),
                    now=now, store_now=store_now), unreadable, settings


def survey(table: TableHandle, *, now: float | None = None,
           orphan_timeout: float | None = None,
           listed: list[ObjectInfo] | None = None) -> GcPlan:
    """What a GC pass would delete and keep now, writing nothing (dead leases protect
    nothing, as in a pass): ``Table.describe`` and the dashboard report it. Reads never
    write, so no probe asks the store for its time: ``now`` (default: this machine's clock)
    judges the ages of orphans, pins and leases too, which may put a file within the
    clock-skew margin of its due time in the neighbouring class; bytes do not depend on it.
    ``listed``: the caller's listing of the table's ``data/`` (``sediment.maintenance.usage``
    lists the whole folder once)."""
    listed = list(table.objects.list("data/")) if listed is None else listed
    now = time.time() if now is None else now
    leases = pending.scan_leases(table.objects, now, table.name).lapses
    return _plan(table, listed, leases, now, now, orphan_timeout)[0]


def stale_leases(table: TableHandle, now: float | None = None) -> tuple[str, ...]:
    """The pending-file leases of ``table`` not renewed for longer than the lease timeout
    (their writers died or stalled), which the next GC pass records expired and deletes;
    writing nothing (``now``: this machine's clock, as :func:`survey`)."""
    now = time.time() if now is None else now
    return pending.scan_leases(table.objects, now, table.name).dead


def _unheld(table: TableHandle, recorded: list[str], store_now: float) -> list[str]:
    """Of ``recorded`` (just recorded deleted), those no tag or live pin holds now: a reader
    may have pinned their version after the plan read the pins. Read after the record, so
    that a pin written later sees the record and is refused (``Table.pin``): either way no
    pin succeeds whose files go. The files spared are orphans, kept while the pin lives.
    A tag unreadable now spares them all."""
    holds, problems = tag_holds(table, store_now)
    if problems:
        return []
    held = {f for h in holds for f in h.files}
    return [f for f in recorded if f not in held]


def gc(table: TableHandle, *, now: float | None = None,
       orphan_timeout: float | None = None) -> GcResult:
    """One garbage-collection pass over ``table``. ``now`` stands in for both this machine's
    and the store's clock (tests); ``orphan_timeout`` overrides the property, which may not go
    below an hour: only tests that control every writer should go lower. What it deletes and
    keeps comes from one classifier (``sediment.maintenance.kept``), so ``GcResult.kept``
    says exactly why the rest stays."""
    started = time.perf_counter()
    listed = list(table.objects.list("data/"))
    # incomplete multipart uploads, listed before the leases are read as the files are: an
    # upload in flight is a live writer's file, which its lease (taken before the upload
    # starts) protects
    uploads = list(table.objects.multipart_uploads(""))
    store_now = (object_store_time(table.objects) or time.time()) if now is None else now
    leases = _live_leases(table, store_now)
    now = time.time() if now is None else now
    plan, unreadable, settings = _plan(table, listed, leases, now, store_now, orphan_timeout)
    batch_size = settings.gc_batch_size
    # oldest unreferenced first, at most gc.max_files_per_run in one pass
    ready = list(plan.unreferenced_ready[: settings.gc_max_files_per_run])
    deleted = 0
    for i in range(0, len(ready), batch_size):
        batch = ready[i : i + batch_size]
        # Record first, then delete: once recorded, no transaction can reference the files
        # again (a restore validates against the recorded state). Deleting first left a window
        # (or, after a crash, forever) in which a restore could bring back references to files
        # already gone. A crash after recording leaves orphans, which the orphan pass removes.
        try:
            table.states.commit(DeleteFiles(batch))
        except TransactionInvalidError:
            break  # another collector recorded them first, or a restore referenced them again
        batch = _unheld(table, batch, store_now)
        # one request per batch; sidecars under current and legacy names (files.sidecars)
        table.objects.delete_many(with_sidecars(batch, legacy=True))
        deleted += len(batch)
        metrics.gc_deleted(table.name, len(batch))

    orphans = list(plan.orphans_ready)
    if orphans:
        table.objects.delete_many(orphans)
    timeout = GcWindows.of(settings, orphan_timeout).orphan_timeout
    # partial writes of killed writers (local temp files), anywhere in the table's folder; a
    # put in flight writes one too, and no override goes below the hour no put ever takes
    stale = [o.key for o in table.objects.temporaries("")
             if store_now - o.mtime >= max(timeout, TEMPORARY_TIMEOUT_SECONDS)]
    if stale:
        table.objects.delete_many(stale)
    # multipart uploads a killed writer left incomplete (ours, and pyarrow's own of data
    # files: both under the table's folder), which S3 keeps, and bills, until aborted
    aborted = table.objects.abort_uploads(
        [u for u in uploads
         if store_now - u.initiated >= timeout and data_file_of(u.key) not in leases])
    n_orphans = sum(1 for k in orphans if data_file_of(k) == k)
    expired = expire_keys(table, settings.write_idempotency_window_seconds, store_now,
                          settings.gc_clock_skew_seconds)
    result = GcResult(deleted, n_orphans, time.perf_counter() - started, tuple(unreadable),
                      plan.kept, expired, aborted)
    if result.did_work:
        table.status.record("gc", f"gc-{int(now)}", "finished", deleted=deleted,
                            orphans_deleted=n_orphans, uploads_aborted=aborted,
                            seconds=result.seconds)
    return result
