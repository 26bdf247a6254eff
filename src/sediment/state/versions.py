"""Versions: diff between versions, and log/snapshot pruning (tags and pins: ``state.tags``).

``diff`` compares two states at cost proportional to the change: when both versions have
snapshots, ranges with equal digests are skipped (graveler); otherwise only the partitions the
log entries between them touched are compared. Pruning deletes log entries, snapshots and
snapshot objects that no version inside the retention window and no tag or live pin still
needs.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass

from sediment.core.deletions import Deletion
from sediment.core.model import FileReference
from sediment.core.state import TableState
from sediment.errors import CorruptMetadataError, ObjectNotFoundError, QueryError, SedimentError
from sediment.schema import Schema
from sediment.state.log import LOG_PREFIX, log_key, version_of_key
from sediment.state.prune_floor import forget_floors, record_floor
from sediment.state.snapshot import (
    OBJECT_PREFIX,
    read_metarange,
    read_pointer,
    read_snapshot,
    snapshot_key,
    snapshot_versions,
)
from sediment.state.store import PRUNE_GRACE_SECONDS, StateStore
from sediment.state.tags import TAG_PREFIX as TAG_PREFIX  # re-exported: the tags' old home
from sediment.state.tags import Tag as Tag
from sediment.state.tags import TagScan as TagScan
from sediment.state.tags import create_tag as create_tag
from sediment.state.tags import delete_tag as delete_tag
from sediment.state.tags import forget_expired_pins
from sediment.state.tags import get_tag as get_tag
from sediment.state.tags import list_tags as list_tags
from sediment.state.tags import scan_tags as scan_tags
from sediment.storage.clock import CLOCK_SKEW_SECONDS, deletion_clock

log = logging.getLogger(__name__)

OBJECT_GRACE_SECONDS = 3600.0


# ---- diff -------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Diff:
    """What changed from ``from_version`` to ``to_version``."""

    from_version: int
    to_version: int
    files_added: tuple[str, ...] = ()
    files_removed: tuple[str, ...] = ()
    partitions_added: tuple[str, ...] = ()
    partitions_removed: tuple[str, ...] = ()
    references_added: tuple[FileReference, ...] = ()
    references_removed: tuple[FileReference, ...] = ()
    records_change: int = 0
    """Records in the references added less those in the references removed: records that
    deletes and upserts removed from answers while their files stay are not counted (see
    ``deletions_added``)."""
    ranges_compared: int = 0
    ranges_skipped: int = 0
    deletions_added: tuple[Deletion, ...] = ()
    """Deletes made after ``from_version`` and still pending at ``to_version`` (one that
    compaction settled before ``to_version`` shows as the files it rewrote)."""
    deletions_removed: tuple[Deletion, ...] = ()
    """Deletes of ``from_version`` no longer pending at ``to_version`` (compaction settled
    them: their records left the files)."""
    schemas: tuple[Schema, Schema] | None = None
    """(schema at ``from_version``, schema at ``to_version``) when they differ (columns
    added, dropped, renamed or widened between them); None when the schema is the same."""


def _compare(a: TableState, b: TableState, pids: Iterable[str], v1: int, v2: int,
             compared: int = 0, skipped: int = 0) -> Diff:
    added: list[FileReference] = []
    removed: list[FileReference] = []
    for pid in sorted(set(pids)):
        ra, rb = a.references(pid), b.references(pid)
        for f, r in rb.items():
            if f not in ra or ra[f].records != r.records:
                added.append(r)
        for f, r in ra.items():
            if f not in rb or rb[f].records != r.records:
                removed.append(r)
    files_a = {r.filename for r in removed}
    files_b = {r.filename for r in added}
    gone = sorted(f for f in files_a - files_b if f not in b.refcount)
    new = sorted(f for f in files_b - files_a if f not in a.refcount)
    pa_, pb = set(a.partitions), set(b.partitions)
    da, db = {d.version for d in a.deletions}, {d.version for d in b.deletions}
    return Diff(v1, v2, tuple(new), tuple(gone), tuple(sorted(pb - pa_)),
                tuple(sorted(pa_ - pb)), tuple(added), tuple(removed),
                sum(r.records for r in added) - sum(r.records for r in removed),
                compared, skipped, tuple(d for d in b.deletions if d.version not in da),
                tuple(d for d in a.deletions if d.version not in db),
                None if a.schema == b.schema or a.schema is None or b.schema is None
                else (a.schema, b.schema))


def _diff_by_snapshots(states: StateStore, v1: int, v2: int) -> Diff:
    """``diff`` when both versions have snapshots: ranges of equal digests are skipped."""
    where = f"diff of table {states.name}"
    ranges = []
    for v in (v1, v2):
        doc = read_pointer(states.objects, v, states.table_id, name=states.name)
        if "metarange" not in doc:
            raise CorruptMetadataError(f"snapshot {v} of table {states.name} "
                                       f"({snapshot_key(v)}) lacks its metarange")
        ranges.append(read_metarange(states.objects, doc["metarange"], where))
    r1, r2 = ranges
    same = {r.digest for r in r1} & {r.digest for r in r2}
    changed = [r for r in r1 + r2 if r.digest not in same]
    a, b = states.load(v1), states.load(v2)
    pids: set[str] = set()
    for r in changed:
        for s in (a, b):
            pids.update(p for p in s.partitions_with_references()
                        if r.first_partition <= p <= r.last_partition)
    return _compare(a, b, pids, v1, v2, len(changed), len(r1) + len(r2) - len(changed))


def diff(states: StateStore, v1: int, v2: int) -> Diff:
    """Differences between two versions (cost proportional to the change)."""
    head = states.head().version
    for v in (v1, v2):
        if not 1 <= v <= head:
            raise QueryError(f"table {states.name} has no version {v} (versions 1..{head})")
    snaps = set(snapshot_versions(states.objects))
    if v1 in snaps and v2 in snaps:
        try:
            return _diff_by_snapshots(states, v1, v2)
        except CorruptMetadataError as e:  # a damaged snapshot: the log answers as well
            log.warning("diff of table %s: %s; comparing by the log", states.name, e)
    lo, hi = min(v1, v2), max(v1, v2)
    base = states.load(lo)
    state = base.copy()
    touched: set[str] = set()
    for entry in states.log.read_after(lo, upto=hi):
        # A fresh copy per entry: copy-on-write gives every partition the entry changes a new
        # map (or takes it out of the lazy snapshot tables), so identity shows what it touched.
        # (Comparing ``references()`` of one state across entries missed in-place changes to a
        # partition already materialised, e.g. any partition of a state loaded from a snapshot.)
        prev, state = state, state.copy()
        try:
            entry.transaction.apply(state, entry.time)
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as e:
            raise CorruptMetadataError(  # as StateStore._apply names a damaged entry
                f"log entry {entry.version} of table {states.name} "
                f"({log_key(entry.version)}) cannot be replayed: {e!r}") from e
        state.version = entry.version
        for pid in set(prev._refs) | set(prev._lazy) | set(state._refs) | set(state._lazy):
            if prev._refs.get(pid) is not state._refs.get(pid) or \
                    prev._lazy.get(pid) is not state._lazy.get(pid):
                touched.add(pid)
    a, b = (base, state) if v1 <= v2 else (state, base)
    return _compare(a, b, touched, v1, v2)


# ---- pruning ----------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class PruneResult:
    log_entries: int = 0
    snapshots: int = 0
    objects: int = 0
    base: int | None = None
    """The snapshot kept as the base (the log continues after it), None when nothing went."""
    unusable_snapshots: tuple[int, ...] = ()
    """Snapshots that could have been the base but do not load (never used as one)."""
    note: str = ""
    """Why less (or nothing) was pruned, when something stood in the way."""


def prune(states: StateStore, retention_seconds: float, *, now: float | None = None
          ) -> PruneResult:
    """Delete log entries, snapshots and objects no retained version, tag or live pin needs
    (and the objects of pins expired for a day).

    Times are those of the object store: log entries younger than the retention window (at
    least ``PRUNE_GRACE_SECONDS``) plus the clock skew (``gc.clock_skew_seconds``, default
    ``CLOCK_SKEW_SECONDS``) by their modification times,
    compared with the store's own clock (a probe object), stay. ``now`` (this machine's clock,
    default ``time.time()``) only ever makes pruning more careful: the earlier of the two
    clocks is used, so a clock running ahead deletes nothing early.

    The snapshot kept as the base is loaded in full (every object it names read and parsed)
    before anything older is deleted; when it does not load, an older one that does is used,
    or nothing is deleted.
    """
    clock = deletion_clock(states.objects, now)
    head = states.head()
    where = f"prune of table {states.name}"
    logs = {v: o for o in states.objects.list(LOG_PREFIX)
            if (v := version_of_key(o.key, LOG_PREFIX)) is not None}
    # Versions committed inside the window stay readable, and so does the one before the
    # oldest of them (the state at the window's start); the head's own entry always stays.
    # The base is strictly below every recent entry: an entry inside the window is never
    # deleted (a writer synced within PRUNE_GRACE_SECONDS relies on it; see StateStore.commit).
    skew = float(head.properties.get("gc.clock_skew_seconds", CLOCK_SKEW_SECONDS))
    window = max(retention_seconds, PRUNE_GRACE_SECONDS) + skew
    recent = [v for v, o in logs.items() if clock - o.mtime < window]
    limit = min([head.version, *recent]) - 1
    scan = scan_tags(states, clock)  # live pins hold versions as tags do
    forget_expired_pins(states, scan, clock)
    if scan.unreadable:
        # an unreadable tag may pin any version: nothing can be proved unneeded
        note = f"an unreadable tag may pin any version, nothing pruned: {scan.unreadable[0]}"
        log.warning("%s: %s", where, note)
        return PruneResult(note=note)
    tags = [t.version for t in scan.tags]
    if tags:
        limit = min(limit, min(tags))
    snaps = snapshot_versions(states.objects)
    base: int | None = None
    unusable: list[int] = []
    for v in sorted((v for v in snaps if v <= limit), reverse=True):
        problem = _base_problem(states, v)
        if problem is None:
            base = v
            break
        log.warning("%s: snapshot %s cannot be the base: %s", where, v, problem)
        unusable.append(v)
    if base is None:
        note = (f"no snapshot at or below version {limit} loads" if unusable else "")
        return PruneResult(unusable_snapshots=tuple(unusable), note=note)
    gap = [v for v in range(base + 1, head.version + 1) if v not in logs]
    if gap:
        # Never make a damaged log worse: deleting below the base would not mend the gap.
        note = f"log entries {gap[:5]} after the base {base} are missing: nothing deleted"
        log.warning("%s: %s", where, note)
        return PruneResult(base=None, unusable_snapshots=tuple(unusable), note=note)
    # the handshake with a tag or pin written since the scan (sediment.state.prune_floor)
    floor = record_floor(states.objects, base)
    again = scan_tags(states, clock)
    late = sorted(t.version for t in again.tags if t.version < base)
    if again.unreadable or late:
        states.objects.delete_many([floor])
        note = (f"a tag or pin written while prune ran holds version "
                f"{late[0] if late else '?'} below the base {base}: nothing pruned")
        log.warning("%s: %s", where, note)
        return PruneResult(unusable_snapshots=tuple(unusable), note=note)
    old_logs = [o.key for v, o in sorted(logs.items()) if v <= base]
    old_snaps = [v for v in snaps if v < base]
    keep_digests: set[str] = set()
    complete = True
    for v in snaps:
        if v >= base:
            complete &= _snapshot_digests(states, v, keep_digests)
    dead_objects: list[str] = []
    if complete:
        # Objects younger than the grace period stay: a writer holding an older snapshot's
        # digests in memory (a DigestMemo, for less long than this) may reuse one for a new
        # snapshot without rewriting it, and a snapshot being written now has no pointer yet.
        grace = OBJECT_GRACE_SECONDS + skew
        dead_objects = [o.key for o in states.objects.list(OBJECT_PREFIX)
                        if o.key[len(OBJECT_PREFIX):].split(".")[0] not in keep_digests
                        and clock - o.mtime >= grace]
    states.objects.delete_many(old_logs)
    states.objects.delete_many(snapshot_key(v) for v in old_snaps)
    states.objects.delete_many(dead_objects)
    forget_floors(states.objects, floor, clock)
    note = "" if complete else ("a snapshot above the base is unreadable: no snapshot object "
                                "was deleted")
    return PruneResult(len(old_logs), len(old_snaps), len(dead_objects), base,
                       tuple(unusable), note)


def _base_problem(states: StateStore, version: int) -> str | None:
    """Why the snapshot at ``version`` cannot be a base (None: it loads completely)."""
    try:
        state = read_snapshot(states.objects, version, states.table_id, name=states.name)
    except SedimentError as e:
        return f"{type(e).__name__}: {e}"
    if state.version != version or state.table_id != states.table_id:
        return (f"it holds version {state.version} of another table (id {state.table_id}, "
                f"not {states.table_id})")
    return None


def _snapshot_digests(states: StateStore, version: int, out: set[str]) -> bool:
    """Add the digests of every object the snapshot at ``version`` names to ``out``; False
    when some cannot be told (its pointer is unreadable)."""
    where = f"prune of table {states.name}"
    try:
        doc = read_pointer(states.objects, version, states.table_id, name=states.name)
        out.update((doc["metarange"], doc["partitions"], doc["unreferenced"]))
        # written only when unreferenced files have sums, and when deletions are pending
        out.update(doc[k] for k in ("unreferenced_sums", "deletions") if k in doc)
    except ObjectNotFoundError:
        return True  # deleted since the listing (a concurrent prune): names nothing
    except (SedimentError, KeyError, TypeError) as e:
        log.warning("%s: snapshot %s is unreadable: %s", where, version, e)
        return False
    try:
        out.update(r.digest for r in read_metarange(states.objects, doc["metarange"], where))
    except CorruptMetadataError as e:
        # its metarange is gone or damaged, so it cannot load anyway: its ranges need no keeping
        log.warning("%s: snapshot %s cannot load: %s", where, version, e)
    return True
