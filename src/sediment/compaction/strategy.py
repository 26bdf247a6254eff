"""Compaction planning, pure functions of a TableState.

1. Push references down: a reference in a non-leaf partition is replaced by references in its
   two children (one level per pass, as Sleeper does), with record counts estimated from the
   file's sample (an ``estimate`` function supplied by the caller does that I/O).
2. Pick jobs per leaf with a strategy over references that have no job yet:
   - ``basic``: full batches of ``compaction.batch_size`` files, oldest first;
   - ``size_ratio`` (default): files sorted by records; the largest group of up to batch-size
     smallest files whose largest member is at most ``ratio`` times the sum of the others
     (size-tiered: new small files merge together before they merge into a big one); when
     more than a batch of files is left that no such group takes, the smallest batch of them
     is merged anyway, so a settled leaf holds at most ``compaction.batch_size`` files.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sediment.core.model import FileReference, Region
from sediment.core.state import TableState
from sediment.core.transactions import JobAssignment, SplitReference

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
    return [files[i : i + batch] for i in range(0, len(files) - batch + 1, batch)]


def _size_ratio(files: list[FileReference], batch: int, ratio: float
                ) -> list[list[FileReference]]:
    pending = sorted(files, key=lambda r: (r.records, r.filename))
    groups: list[list[FileReference]] = []
    while len(pending) >= 2:
        group = pending[:batch]
        while len(group) >= 2:
            largest = group[-1].records
            if largest <= ratio * sum(r.records for r in group[:-1]):
                break
            group = group[:-1]
        if len(group) < 2:
            break
        groups.append(group)
        pending = pending[len(group):]
    # Bound the files a leaf keeps: files whose sizes grow faster than the ratio never form
    # a group, so past a batch of them the smallest are merged regardless of the ratio.
    while len(pending) > batch:
        groups.append(pending[:batch])
        pending = pending[batch:]
    return groups


def plan_compaction_jobs(state: TableState, properties: Mapping[str, Any], *,
                         new_id: Callable[[], str] = lambda: uuid.uuid4().hex
                         ) -> list[CompactionJob]:
    """Jobs for the leaves of an online table (none for an offline one)."""
    if not state.online:
        return []
    strategy = str(properties["compaction.strategy"])
    batch = int(properties["compaction.batch_size"])
    ratio = float(properties["compaction.ratio"])
    cap = int(properties["compaction.max_concurrent_jobs_per_partition"])
    jobs: list[CompactionJob] = []
    for leaf in state.leaf_partitions():
        refs = state.references(leaf.id)
        if len(refs) < 2:
            continue
        running = {r.job_id for r in refs.values() if r.job_id is not None}
        free = [r for name, r in sorted(refs.items()) if r.job_id is None]
        groups = _basic(free, batch) if strategy == "basic" else _size_ratio(free, batch, ratio)
        if cap:
            groups = groups[: max(0, cap - len(running))]
        jobs.extend(CompactionJob(new_id(), leaf.id, tuple(g)) for g in groups)
    return jobs


def assignments(jobs: Sequence[CompactionJob]) -> list[JobAssignment]:
    return [JobAssignment(j.job_id, j.partition_id, tuple(r.filename for r in j.inputs))
            for j in jobs]
