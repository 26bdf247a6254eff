"""Maintenance passes: split, compact and collect garbage until a table has nothing left to do
(``Store.maintain`` runs them over every table of a store)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sediment.compaction.runner import CompactionResult, JobRunner, Progress, compact
from sediment.maintenance.gc import GcResult, gc
from sediment.maintenance.schemes import split_table
from sediment.maintenance.splitting import SplitResult

if TYPE_CHECKING:
    from sediment.handle import TableHandle

MAX_PASSES = 100


@dataclass(frozen=True, slots=True)
class MaintenanceResult:
    passes: int
    splits: int
    jobs_committed: int
    jobs_failed: int
    files_deleted: int
    seconds: float
    errors: tuple[str, ...] = ()
    """What the passes went past: members of the table's partition scheme that a split could
    not read or bring up to date, each ``table T: <error>`` (``SplitResult.errors``); the
    table itself and the scheme's other members are maintained."""


def maintain_pass(table: TableHandle, *, runner: JobRunner | None = None,
                  orphan_timeout: float | None = None, progress: Progress | None = None
                  ) -> tuple[SplitResult, CompactionResult, GcResult]:
    """One pass: split leaves over the threshold, compact, collect garbage
    (``orphan_timeout``: see ``sediment.maintenance.gc.gc``; ``progress``: the pass's
    compaction jobs, see ``sediment.compaction.runner.compact``)."""
    s = split_table(table)
    c = compact(table, runner=runner, progress=progress)
    g = gc(table, orphan_timeout=orphan_timeout)
    return s, c, g


def maintain(table: TableHandle, *, max_passes: int = MAX_PASSES, runner: JobRunner | None = None,
             on_pass: Callable[[int, SplitResult, CompactionResult, GcResult], None] | None
             = None, orphan_timeout: float | None = None,
             progress: Progress | None = None) -> MaintenanceResult:
    """Run passes until one does nothing (or ``max_passes``). ``progress(done, total)``: each
    pass's compaction jobs, ``(0, total)`` when the pass has planned them, then as they end
    (so ``done`` starts again from 0 at each pass)."""
    started = time.perf_counter()
    splits = committed = failed = deleted = 0
    passes = 0
    errors: dict[str, None] = {}  # in order, each once
    for passes in range(1, max_passes + 1):  # noqa: B007 - used after the loop
        s, c, g = maintain_pass(table, runner=runner, orphan_timeout=orphan_timeout,
                                progress=progress)
        splits += s.splits
        committed += c.jobs_committed
        failed += c.jobs_failed
        deleted += g.deleted + g.orphans_deleted
        errors.update(dict.fromkeys(s.errors))
        if on_pass is not None:
            on_pass(passes, s, c, g)
        if not (s.did_work or c.did_work):
            break
    return MaintenanceResult(passes, splits, committed, failed, deleted,
                             time.perf_counter() - started, tuple(errors))

