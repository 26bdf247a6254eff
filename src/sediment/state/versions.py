"""Versions: tags (named, pinned versions), diff between versions, and log/snapshot pruning.

Tags are small objects ``tags/<name>.json`` created with put-if-absent. ``diff`` compares two
states at cost proportional to the change: when both versions have snapshots, ranges with equal
digests are skipped (graveler); otherwise only the partitions the log entries between them
touched are compared. Pruning deletes log entries, snapshots and snapshot objects that no
version inside the retention window and no tag still needs.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from sediment.core.model import FileReference
from sediment.core.state import TableState
from sediment.errors import CorruptMetadataError, ObjectNotFoundError, QueryError
from sediment.state.log import LOG_PREFIX, log_key
from sediment.state.snapshot import (
    OBJECT_PREFIX,
    read_metarange,
    read_pointer,
    snapshot_key,
    snapshot_versions,
)
from sediment.state.store import PRUNE_GRACE_SECONDS, StateStore

TAG_PREFIX = "tags/"
OBJECT_GRACE_SECONDS = 3600.0
_TAG = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}")


def _tag_key(name: str) -> str:
    if not isinstance(name, str) or not _TAG.fullmatch(name) or ".." in name or \
            name.isdigit():
        raise QueryError(f"invalid tag name {name!r}: letters, digits, '_', '-', '.', not all "
                         "digits (a number means a version)")
    return f"{TAG_PREFIX}{name}.json"


@dataclass(frozen=True, slots=True)
class Tag:
    name: str
    version: int
    created: float


def create_tag(states: StateStore, name: str, version: int) -> Tag:
    doc = {"name": name, "version": version, "created": time.time()}
    if not states.objects.put_if_absent(_tag_key(name), json.dumps(doc).encode()):
        raise QueryError(f"table {states.table_id}: tag {name!r} already exists")
    return Tag(name, version, doc["created"])


def list_tags(states: StateStore) -> list[Tag]:
    out = []
    for o in states.objects.list(TAG_PREFIX):
        try:
            raw = states.objects.get(o.key)
        except ObjectNotFoundError:
            continue  # deleted since the listing (e.g. a dump job's tag as the job ends)
        out.append(_parse_tag(raw, o.key, states.table_id))
    return sorted(out, key=lambda t: (t.version, t.name))


def _parse_tag(raw: bytes, key: str, table_id: str) -> Tag:
    try:
        doc = json.loads(raw)
        return Tag(str(doc["name"]), int(doc["version"]), float(doc["created"]))
    except (ValueError, KeyError, TypeError) as e:
        raise CorruptMetadataError(f"tag object {key} of table {table_id} is corrupt: "
                                   f"{e!r}") from e


def get_tag(states: StateStore, name: str) -> Tag:
    key = _tag_key(name)
    try:
        raw = states.objects.get(key)
    except ObjectNotFoundError:
        raise QueryError(f"table {states.table_id} has no tag {name!r}") from None
    return _parse_tag(raw, key, states.table_id)


def delete_tag(states: StateStore, name: str) -> None:
    get_tag(states, name)
    states.objects.delete_many([_tag_key(name)])


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
    ranges_compared: int = 0
    ranges_skipped: int = 0
    details: dict[str, Any] = field(default_factory=dict)


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
    return Diff(v1, v2, tuple(new), tuple(gone), tuple(sorted(pb - pa_)),
                tuple(sorted(pa_ - pb)), tuple(added), tuple(removed),
                sum(r.records for r in added) - sum(r.records for r in removed),
                compared, skipped)


def diff(states: StateStore, v1: int, v2: int) -> Diff:
    """Differences between two versions (cost proportional to the change)."""
    head = states.head().version
    for v in (v1, v2):
        if not 1 <= v <= head:
            raise QueryError(f"table {states.table_id} has no version {v} (1..{head})")
    snaps = set(snapshot_versions(states.objects))
    if v1 in snaps and v2 in snaps:
        where = f"diff of table {states.table_id}"
        r1 = read_metarange(states.objects, read_pointer(states.objects, v1,
                                                         states.table_id)["metarange"], where)
        r2 = read_metarange(states.objects, read_pointer(states.objects, v2,
                                                         states.table_id)["metarange"], where)
        same = {r.digest for r in r1} & {r.digest for r in r2}
        changed = [r for r in r1 + r2 if r.digest not in same]
        a, b = states.load(v1), states.load(v2)
        pids: set[str] = set()
        for r in changed:
            for s in (a, b):
                pids.update(p for p in s.partitions_with_references()
                            if r.first_partition <= p <= r.last_partition)
        return _compare(a, b, pids, v1, v2, len(changed), len(r1) + len(r2) - len(changed))
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
        entry.transaction.apply(state, entry.time)
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


def prune(states: StateStore, retention_seconds: float, *, now: float | None = None
          ) -> PruneResult:
    """Delete log entries, snapshots and objects no retained version or tag needs."""
    now = time.time() if now is None else now
    head = states.head()
    needed = [t.version for t in list_tags(states)]
    # the oldest version still inside the retention window
    # (never less than PRUNE_GRACE_SECONDS: a writer that synced that recently must still
    # find the log slot after its cached head; see StateStore.commit)
    window = max(retention_seconds, PRUNE_GRACE_SECONDS)
    versions = [e.version for e in _entries_since(states, now - window)]
    needed.append(min(versions) if versions else head.version)
    floor = min(needed)
    snaps = snapshot_versions(states.objects)
    # The base snapshot stays below the head, so at least the head's log entry is kept: with
    # no log entry left, the oldest readable version could not be told (``earliest_version``
    # fell back to 1 and loading an old version failed on a log gap) and history was empty.
    base = max((v for v in snaps if v <= floor and v < head.version), default=None)
    if base is None:
        return PruneResult()
    old_logs = [o.key for o in states.objects.list(LOG_PREFIX) if o.key < log_key(base + 1)]
    old_snaps = [v for v in snaps if v < base]
    keep_digests: set[str] = set()
    for v in snaps:
        if v >= base:
            doc = read_pointer(states.objects, v, states.table_id)
            keep_digests.update((doc["metarange"], doc["partitions"], doc["unreferenced"]))
            keep_digests.update(r.digest for r in read_metarange(
                states.objects, doc["metarange"], f"prune of table {states.table_id}"))
    # Objects younger than the grace period stay: a writer holding an older snapshot's digests
    # in memory may reuse one for a new snapshot without rewriting it.
    dead_objects = [o.key for o in states.objects.list(OBJECT_PREFIX)
                    if o.key[len(OBJECT_PREFIX):].split(".")[0] not in keep_digests
                    and now - o.mtime >= OBJECT_GRACE_SECONDS]
    states.objects.delete_many(old_logs)
    states.objects.delete_many(snapshot_key(v) for v in old_snaps)
    states.objects.delete_many(dead_objects)
    return PruneResult(len(old_logs), len(old_snaps), len(dead_objects))


def _entries_since(states: StateStore, since: float) -> list[Any]:
    return [e for e in states.history() if e.time >= since]

