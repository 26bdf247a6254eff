"""Purge: a delete whose records leave storage, not only the answers.

A delete (sediment.ingest.records) removes records from every read from its version on, but
their bytes stay in the files until compaction rewrites them, and older versions read them
until retention, pins and tags let GC collect those files. ``purge`` is for records that
must go (a user's data under the right to erasure): it commits the delete, then rewrites
every live file that may hold one of its records, all of them in one transaction
(``ReplaceFileReferencesBatch``: one whole-leaf compaction job per leaf where the delete is
pending, which drops the records and settles the delete there). From that version no live
file holds a purged record; the replaced files become unreferenced, and GC deletes them
(with their sidecars) once nothing keeps them. :class:`PurgeResult` says what still does:
the retained versions before the rewrite, the tags and pins that reference a replaced file,
and when GC may delete them if only time holds them. Log entries and snapshots that name the
purged keys (the delete's own entry) go with ``prune`` after retention, like every entry.
A leaf split at a purged key keeps the key as its split point in the partition tree: the
result lists such keys.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pyarrow.compute as pc

from sediment.compaction.job import JobOutput
from sediment.compaction.runner import create_jobs, execute_job, push_down_references
from sediment.compaction.strategy import CompactionJob
from sediment.core.deletions import Deletion
from sediment.core.keys import Key
from sediment.core.model import RANK_BITS, FileReference
from sediment.core.regions import Range
from sediment.core.state import TableState
from sediment.core.transactions import ReplaceFileReferences, ReplaceFileReferencesBatch
from sediment.errors import JobError, QueryError, SedimentError
from sediment.files.keys import region_mask
from sediment.files.staging import Staging
from sediment.handle import TableHandle
from sediment.ingest.records import delete
from sediment.maintenance.gc import tag_holds
from sediment.query.prepare import prepare_query
from sediment.query.request import request_of
from sediment.settings import settings_of
from sediment.state.tags import scan_tags

ROUNDS = 5
"""Rewrites tried before a purge gives up on leaves another job keeps busy (each round waits
for running jobs a little longer)."""


@dataclass(frozen=True, slots=True)
class PurgeResult:
    """A purge: ``version``, from which no live file holds a purged record (the rewrite's
    commit; the delete's when no file held one); the retained versions that still read
    purged records (``held_by_versions``: from the oldest one that may, to the one before
    the delete); the tags and live pins whose versions reference a replaced file
    (``held_by_tags``: GC keeps those files while they exist); and ``expires``, when GC may
    delete the replaced files if only time keeps them (retention, the GC delay, the clock-skew
    margin; a pin's expiry when later; None while a tag keeps one). ``split_keys``: purged
    keys that are split points of the partition tree (they stay there, as metadata)."""

    version: int
    held_by_versions: tuple[int, ...]
    held_by_tags: tuple[str, ...]
    expires: float | None
    split_keys: tuple[Key, ...] = ()


def purge(table: TableHandle, keys: Sequence[Any] | None = None,
          ranges: Sequence[Range] | Range | None = None, *,
          filter: Any = None) -> PurgeResult:  # noqa: A002 (the public name)
    """Delete (as :func:`sediment.ingest.records.delete`), then rewrite every live file that
    may hold a deleted record in one transaction. Raises as ``delete``; JobError naming the
    table when a rewrite fails or other jobs keep a leaf busy through every round (the
    delete stands: reads never return the records; a later purge or compaction removes them
    from storage)."""
    if keys is None and ranges is None and filter is None:
        raise QueryError(f"purge on table {table.name} names no keys, ranges or filter: to "
                         f"remove every record use clear() (then gc)")
    version = deleted = delete(table, keys, ranges, filter=filter)
    held = _leaves_holding(table, deleted, keys, ranges, filter)
    replaced: list[FileReference] = []
    for attempt in range(ROUNDS):
        push_down_references(table)
        state = table.states.head()
        mine = _deletion(state, deleted)
        if mine is None or not mine.pending & held:
            break
        jobs = create_jobs(table, select=functools.partial(_whole_leaves, deletion=mine,
                                                           leaves=held))
        if not jobs:  # its leaves are busy with other jobs: they settle, or the next round
            time.sleep(0.2 * (attempt + 1))
            continue
        replaced += [r for j in jobs for r in j.inputs]
        version = _rewrite(table, jobs)
    else:
        mine = _deletion(table.states.head(), deleted)
        if mine is not None and mine.pending & held:
            raise JobError(f"purge of table {table.name}: other compaction jobs kept its "
                           f"leaves busy through {ROUNDS} rounds; the records are deleted from "
                           f"every read but some files still hold them (purge again)")
    return _result(table, version, deleted, replaced, keys, ranges, filter)


def _deletion(state: TableState, version: int) -> Deletion | None:
    """The purge's own deletion while it is pending anywhere (None: settled everywhere, or
    it covered no leaf holding data)."""
    return next((d for d in state.deletions if d.version == version), None)


def _leaves_holding(table: TableHandle, deleted: int, keys: Sequence[Any] | None,
                    ranges: Sequence[Range] | Range | None, filter: Any) -> set[str]:  # noqa: A002
    """The leaves (at the head now) holding a record the delete at ``deleted`` removed: the
    row keys of the records it removed, read at the version before it (by their key ranges
    and file statistics, the filter's fields only where it has one), cut at the leaves. A
    leaf holding none is not rewritten (the delete stays pending there until compaction)."""
    before = table.state(deleted - 1)
    names = before.schema.row_key_names if before.schema is not None else []
    request = request_of(keys, ranges, columns=names, filter=filter)
    gone = prepare_query(before, table.executors.get(before), table.name, request).to_arrow()
    if not gone.num_rows:
        return set()
    state = table.states.head()
    return {leaf.id for leaf in state.leaf_partitions()
            if (m := region_mask(gone, names, leaf.region)) is None or pc.any(m).as_py()}


def _whole_leaves(state: TableState, planned: list[CompactionJob], *, deletion: Deletion,
                  leaves: set[str]) -> list[CompactionJob]:
    """The planned jobs that merge a whole leaf of ``leaves`` where ``deletion`` is pending
    (the planner gives such a leaf one, when no other job runs there)."""
    return [j for j in planned if j.partition_id in deletion.pending & leaves
            and {r.filename for r in j.inputs} == set(state.references(j.partition_id))]


def _rewrite(table: TableHandle, jobs: list[CompactionJob]) -> int:
    """Run ``jobs`` here and commit their outputs in one transaction; its version."""
    head = table.read_head()
    regions = {j.job_id: head.state.partitions[j.partition_id].region for j in jobs}
    threads = head.settings.compaction_threads or 2
    with ThreadPoolExecutor(max(1, min(threads, len(jobs)))) as pool:
        outs = list(pool.map(lambda j: execute_job(table, j, regions[j.job_id], head=head),
                             jobs))
    failed = [(j, o) for j, o in zip(jobs, outs, strict=True) if isinstance(o, str)]
    done = [o for o in outs if isinstance(o, JobOutput)]
    staging = Staging(table.objects, table.name)
    names = [o.written.filename for o in done if o.written is not None]
    staging.adopt(names)  # one commit for all: this staging protects them all until it
    for o in done:
        o.handed_over()
    if failed:
        staging.delete(names)
        job, why = failed[0]
        raise JobError(f"purge of table {table.name}: rewriting partition {job.partition_id} "
                       f"failed: {why}")
    batch = [ReplaceFileReferences(
        j.job_id, j.partition_id, tuple(r.filename for r in j.inputs),
        None if o.written is None else FileReference(o.written.filename, j.partition_id,
                                                     o.written.rows),
        checksums={} if o.written is None or o.written.sums is None
        else {o.written.filename: o.written.sums},
        settles=o.settles, upserts=o.upserts)
        for j, o in zip(jobs, done, strict=True)]
    return staging.commit(table.states, ReplaceFileReferencesBatch(batch)).version


def _result(table: TableHandle, version: int, deleted: int, replaced: list[FileReference],
            keys: Sequence[Any] | None, ranges: Sequence[Range] | Range | None,
            filter: Any) -> PurgeResult:  # noqa: A002
    """What still holds purged records after the rewrite. Besides the live files it replaced,
    files an earlier compaction replaced (unreferenced, kept for the retained versions that
    read them and for tags and pins) may hold some: a retained version older than the
    replaced files' own may read them (reported from the oldest retained version when any
    such file is kept), and a tag or pin is reported when a read of the purge at its version
    returns a record, as well as when it keeps a replaced file."""
    state = table.states.head()
    split_keys = _split_keys(state, keys, ranges)
    names = {r.filename for r in replaced}
    older = set(table.state(deleted - 1).unreferenced) if deleted > 1 else set()
    if not names and not older:
        return PurgeResult(version, (), (), None, split_keys)
    earliest = table.states.earliest_version()
    first = earliest if older else \
        max(min(r.sequence >> RANK_BITS for r in replaced), earliest)
    scan = scan_tags(table.states)
    at = {t.name: t.version for t in scan.tags}
    holds, _ = tag_holds(table)
    held = [h for h in holds if h.files & names or (
        h.files & older and at.get(h.name, deleted) < deleted
        and _reads_any(table, at[h.name], keys, ranges, filter))]
    if not names and not held and first >= deleted:
        return PurgeResult(version, (), (), None, split_keys)
    settings = settings_of(state, table.name)
    expires: float | None = time.time() + max(settings.gc_delay_seconds,
                                              settings.retention_seconds) \
        + settings.gc_clock_skew_seconds
    for h in held:
        expires = None if h.expires is None or expires is None else max(expires, h.expires)
    return PurgeResult(version, tuple(range(first, deleted)),
                       tuple(sorted(h.name for h in held)), expires, split_keys)


def _reads_any(table: TableHandle, version: int, keys: Sequence[Any] | None,
               ranges: Sequence[Range] | Range | None, filter: Any) -> bool:  # noqa: A002
    """Whether a read of the purge's selection at ``version`` returns a record; True when
    that version cannot be read (the purge has committed: what holds the records is
    reported conservatively, never raised)."""
    try:
        state = table.state(version)
        names = state.schema.row_key_names if state.schema is not None else []
        request = request_of(keys, ranges, columns=names, filter=filter)
        return prepare_query(state, table.executors.get(state), table.name,
                             request).to_arrow().num_rows > 0
    except SedimentError:
        return True


def _split_keys(state: TableState, keys: Sequence[Any] | None,
                ranges: Sequence[Range] | Range | None) -> tuple[Key, ...]:
    """Split points of ``state``'s tree among the purged keys or inside the purged ranges."""
    wanted: list[Range] = []
    if keys is not None:
        wanted += [Range.exact(k) for k in ([keys] if isinstance(keys, str | bytes) else keys)]
    if ranges is not None:
        wanted += [ranges] if isinstance(ranges, Range) else list(ranges)
    points = [p.split_key for p in state.partitions.values()
              if p.split_key is not None and isinstance(p.split_key, tuple)]
    return tuple(sorted({k for k in points for r in wanted
                         if r.per_field is None and r.contains(k)}, key=repr))
