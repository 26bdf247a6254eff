"""Compaction planning, pure functions of a TableState.

1. Push references down: a reference in a non-leaf partition is replaced by references in its
   two children (one level per pass, as Sleeper does), with record counts estimated from the
   file's sample (an ``estimate`` function supplied by the caller does that I/O).
2. Pick jobs per leaf with a strategy over references that have no job yet:
   - ``basic``: full batches of ``compaction.batch_size`` files taken in ascending order of
     record count (ties by filename, so planning is deterministic), as Sleeper's basic
     strategy takes them; a remainder short of a batch waits;
   - ``size_ratio`` (default): files sorted by records; the largest group of up to batch-size
     smallest files in which ``ratio`` times the largest is at most the sum of the others
     (Sleeper's criterion; with ratio 3, at least 4 files of one size, and a big file merges
     only once the small ones add up to 3 times it, so a record is rewritten about
     log4(leaf / new file) times). When a leaf holds more than half a batch of files
     (counting each running job as the one file it leaves), its smallest files merge
     regardless of the ratio, just enough of them to come back to that level: the files per
     leaf stay within the batch size while ingest goes on, the other half being headroom for
     files that arrive while jobs run (with the ratio alone a leaf keeps up to 4 files of
     each size, 6-8 files before any new one; at two thirds of a batch, leaves under
     steady_state's 60 s run reached 12-14 files, at half 10-13, rewriting each record 4.6
     times instead of 3.3). The test is on the largest file, not on the others: "the largest
     at most ``ratio`` times the others" would let 2 files merge, and under continuous ingest
     rewrites each record ~6.6 times against ~2.7 (benchmarks/steady_state.py).
   Either way, an estimated reference (to a file spanning several leaves) left over gets a
   single-file job, and ``full`` merges every leaf's references into one file (see
   ``plan_compaction_jobs``). A leaf where deletions are pending (sediment.core.deletions)
   or that holds upserted records (sediment.files.upserts) gets one job merging all its
   references, once no job runs there and no ancestor holds references: it drops the deleted
   and replaced records and settles the rest, so they free their storage at the next pass
   and reads of the leaf read one file again (an upsert of 1% of a table's keys rewrites the
   leaves it touched once, as a Paimon primary-key table's compaction does).
   With an age-off among the compaction iterators, the files of a leaf that no group takes
   and of which at least ``compaction.expired_fraction`` of the records are past the TTL
   (``expired``: estimated by the caller from Parquet statistics, sediment.compaction.expiry)
   are merged together, a batch at a time: age-off drops those records, so storage shrinks as
   they expire rather than when new data happens to reach the leaf.
3. When the merge rule or the compaction iterators combine records in an order that matters
   across files (``partial``, ``concat``: ``RecordIterator.needs_consecutive_inputs``), a
   multi-file job takes every reference of its leaf, and only while no job runs in the leaf
   and no ancestor still holds references to push down: a combined record keeps one
   sequence, so a file committed between
   a job's inputs and left out would read as coming after all of them. Records in other
   leaves never share a key, and files committed later have greater sequences, so merging
   the whole leaf keeps commit order. The cost is write amplification (each such job rewrites
   the leaf); single-file jobs need no such care.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sediment.core.model import FileReference, is_upsert
from sediment.core.regions import Region
from sediment.core.state import TableState
from sediment.core.transactions import JobAssignment, SplitReference
from sediment.iterators.merge_rules import needs_consecutive_inputs
from sediment.iterators.registry import iterators_from_property
from sediment.settings import as_settings

Estimate = Callable[[FileReference, Region], int]
"""Estimated records of a referenced file inside a region (from its sample)."""


@dataclass(frozen=True, slots=True)
class CompactionJob:
    """Merge ``inputs`` (references in ``partition_id``) into one file."""

    job_id: str
    partition_id: str
    inputs: tuple[FileReference, ...]

    @property
    def records(self) -> int:
        return sum(r.records for r in self.inputs)


def is_long(job: CompactionJob, records: float) -> bool:
    """Whether a job rewrites a large file: one of its inputs holds at least ``records``
    records. A merge of many small files is short however many there are (a batch of new
    files is a fraction of a second's work); judged by the job's total instead, every merge
    of a few new files counted as long once a leaf took a twentieth of the split threshold a
    second (two new files right after the first split), and a leaf reached 17 files waiting
    for the long lane (benchmarks/steady_state.py --quick)."""
    return max((r.records for r in job.inputs), default=0) >= records


def short_part(job: CompactionJob, records: float, properties: Mapping[str, Any]
               ) -> CompactionJob | None:
    """The job cut down to its small inputs, those holding fewer than ``records`` records
    each (None: fewer than two of them, or the table's compaction iterators need a leaf's
    inputs merged together). Merging the small files of a crowded leaf at once keeps it
    under the batch size while a thread for the whole merge is busy; the large inputs stay
    free for a later plan."""
    if _whole_leaf(properties):
        return None
    taken = tuple(r for r in sorted(job.inputs, key=lambda r: (r.records, r.filename))
                  if r.records < records)
    return CompactionJob(job.job_id, job.partition_id, taken) if len(taken) >= 2 else None


def _whole_leaf(properties: Mapping[str, Any]) -> bool:
    """Whether the merge rule or a compaction iterator needs consecutive inputs (see
    plan_compaction_jobs; the merge rules' reasons are in sediment.iterators.merge_rules)."""
    settings = as_settings(properties)
    if needs_consecutive_inputs(settings.merge, settings.merge_functions):
        return True
    return any(it.needs_consecutive_inputs() for it in iterators_from_property(
        settings.compaction_iterators, where="property compaction.iterators"))


def plan_reference_splits(state: TableState, estimate: Estimate) -> list[SplitReference]:
    """Push every unassigned reference in a non-leaf partition down one level."""
    out: list[SplitReference] = []
    for pid in state.partitions_with_references():
        p = state.partitions[pid]
        if p.is_leaf:
            continue
        for ref in state.references(pid).values():
            if ref.job_id is not None:
                continue
            to = []
            for cid in p.children:
                child = state.partitions[cid]
                n = estimate(ref, child.region)
                to.append(FileReference(ref.filename, cid, max(0, min(n, ref.records)), True))
            out.append(SplitReference(ref.filename, pid, tuple(to)))
    return out


def _basic(files: list[FileReference], batch: int) -> list[list[FileReference]]:
    """Full batches of the files smallest first (ties by filename)."""
    files = sorted(files, key=lambda r: (r.records, r.filename))
    return [files[i : i + batch] for i in range(0, len(files) - batch + 1, batch)]


def files_after_jobs(refs: Iterable[FileReference]) -> int:
    """The references a leaf holds once the jobs holding some of ``refs`` (its references)
    commit: each job turns its inputs into one file. (Counting a running job's inputs as
    files to come made a crowded leaf merge its largest files, rewriting the whole leaf to
    save a file or two that the running job was about to save anyway.)"""
    held = [r.job_id for r in refs]
    return held.count(None) + len(set(held) - {None})


def crowded_files(batch: int) -> int:
    """The references a leaf holds past which it is crowded: half a batch (the other half is
    headroom for the files that arrive while its jobs run)."""
    return max(2, batch // 2)


def _size_ratio(files: list[FileReference], batch: int, ratio: float, *, in_leaf: int = 0
                ) -> list[list[FileReference]]:
    pending = sorted(files, key=lambda r: (r.records, r.filename))
    groups: list[list[FileReference]] = []
    while len(pending) >= 2:
        group = pending[:batch]
        while len(group) >= 2:
            largest = group[-1].records
            if ratio * largest <= sum(r.records for r in group[:-1]):
                break
            group = group[:-1]
        if len(group) < 2:
            break
        groups.append(group)
        pending = pending[len(group):]
    # Bound the files a leaf holds: past half a batch of references (``in_leaf``: the
    # leaf's references once its running jobs commit; each group planned above leaves one
    # file), the smallest files merge regardless of the ratio: enough of them to come back
    # to that level, and at least a third of a batch (small files are cheap to merge, and
    # the more merge at once the fewer times each record is rewritten); the other half of a
    # batch is headroom for files arriving while jobs run.
    high = crowded_files(batch)
    count = max(in_leaf, len(files)) - sum(len(g) - 1 for g in groups)
    while count > high and len(pending) >= 2:
        m = min(batch, len(pending), max(2, count - high + 1, batch // 3))
        groups.append(pending[:m])
        pending = pending[m:]
        count -= m - 1
    return groups


def plan_compaction_jobs(state: TableState, properties: Mapping[str, Any], *,
                         full: bool = False,
                         new_id: Callable[[], str] = lambda: uuid.uuid4().hex,
                         expired: Mapping[str, float] | None = None
                         ) -> list[CompactionJob]:
    """Jobs for the leaves of an online table (none for an offline one).

    Besides the strategy's groups, the references whose counts are estimates (files written
    for, or pushed down from, a wider region) that no group takes are merged, a batch at a
    time (one job each where the compaction iterators need consecutive inputs): the leaf's
    share is rewritten into a file of its own, so its count becomes exact (the split
    threshold counts only exact records) and the wide file can be collected once every leaf
    has done so. ``full`` (a forced full compaction, as Sleeper's ``compact all``): each leaf
    holding more than one unassigned reference, or one estimated reference, gets one job
    merging all of them, whatever the strategy. ``compaction.max_jobs_per_pass`` (0: no cap)
    bounds the jobs planned: taken round robin over the leaves, the leaves with the most
    references first (ties in key order), so no leaf starves behind the others.
    ``expired``: filename -> the fraction of its records age-off would drop now (see the
    module docstring)."""
    if not state.online:
        return []
    settings = as_settings(properties)
    strategy = settings.compaction_strategy
    batch = settings.compaction_batch_size
    ratio = settings.compaction_ratio
    cap = settings.compaction_max_concurrent_jobs_per_partition
    whole_leaf = _whole_leaf(settings)
    pending = {pid for d in state.deletions for pid in d.pending}
    per_leaf: list[tuple[int, int, list[CompactionJob]]] = []
    for position, leaf in enumerate(state.leaf_partitions()):
        refs = state.references(leaf.id)
        if not refs:
            continue
        running = {r.job_id for r in refs.values() if r.job_id is not None}
        free = [r for name, r in sorted(refs.items()) if r.job_id is None]
        if full:
            groups = [free] if len(free) >= 2 or (free and _estimated(state, free[0])) else []
        else:
            groups = [] if len(refs) < 2 else _basic(free, batch) if strategy == "basic" \
                else _size_ratio(free, batch, ratio, in_leaf=files_after_jobs(refs.values()))
            taken = {r.filename for g in groups for r in g}
            wide = [r for r in free if r.filename not in taken and _estimated(state, r)]
            # merged together (a batch at a time) rather than one job each: the same bytes
            # rewritten, one file out instead of one per reference, so a leaf that a split
            # left with its parent's files does not stay over the batch size while ingest
            # goes on (single files where only consecutive inputs may merge: see below)
            groups += [[r] for r in wide] if whole_leaf else \
                [wide[i : i + batch] for i in range(0, len(wide), batch)]
            if expired:
                taken |= {r.filename for r in wide}
                aged = [r for r in free if r.filename not in taken and
                        expired.get(r.filename, 0.0) >= settings.compaction_expired_fraction]
                groups += [[r] for r in aged] if whole_leaf else \
                    [aged[i : i + batch] for i in range(0, len(aged), batch)]
        alone = not running and not any(state.references(a.id)
                                        for a in state.ancestors(leaf.id))
        if whole_leaf and any(len(g) > 1 for g in groups):
            groups = [free] if alone else [g for g in groups if len(g) == 1]
        elif alone and free and (leaf.id in pending or
                                 any(is_upsert(r.sequence) for r in refs.values())):
            # deletions or upserts to settle: the whole leaf in one job, which drops what
            # they delete or replace and leaves nothing older behind (sediment.core.settling),
            # so reads of the leaf merge and settle nothing more
            groups = [free]
        if cap:
            groups = groups[: max(0, cap - len(running))]
        if groups:
            per_leaf.append((len(refs), position,
                             [CompactionJob(new_id(), leaf.id, tuple(g)) for g in groups]))
    per_leaf.sort(key=lambda t: (-t[0], t[1]))
    jobs = [leaf_jobs[i] for i in range(max((len(j) for _, _, j in per_leaf), default=0))
            for _, _, leaf_jobs in per_leaf if i < len(leaf_jobs)]
    most = settings.compaction_max_jobs_per_pass
    return jobs[:most] if most else jobs


def _estimated(state: TableState, ref: FileReference) -> bool:
    """Whether a reference's count is an estimate: its file spans more than this leaf."""
    return ref.approximate or state.refcount.get(ref.filename, 0) > 1


def assignments(jobs: Sequence[CompactionJob]) -> list[JobAssignment]:
    return [JobAssignment(j.job_id, j.partition_id, tuple(r.filename for r in j.inputs))
            for j in jobs]
