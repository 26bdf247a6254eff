"""Maintenance passes: the steps of a table's upkeep, run in order until a table has nothing
left to do (:mod:`sediment.maintenance.orchestrator` runs them over every table of a store).

A pass reads the table's head once and runs each step of ``TABLE_STEPS`` on it (split,
compact, collect garbage today: a new kind of upkeep is a new step here, not a new loop): each
step works on the head the step before left, the states its own commits made, so the log is
read again only when another writer commits meanwhile. GC is the exception by design: it loads
the state after listing the table's files and reading the leases, the order that makes its
deletions safe (:mod:`sediment.maintenance.gc`).

After the last pass, :func:`maintain` bounds the table's metadata once
(:func:`sediment.maintenance.retention.tidy_metadata`), as the continuous maintainer's GC lane
does on its slow cadence: a prune lists the log and the snapshots, and what it frees does not
depend on how many passes ran, so it is no step of a pass.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sediment.compaction.runner import CompactionResult, JobRunner, Progress, compact_on
from sediment.maintenance.gc import GcResult, gc
from sediment.maintenance.retention import tidy_metadata
from sediment.maintenance.schemes import split_table
from sediment.maintenance.splitting import SplitResult

if TYPE_CHECKING:
    from sediment.core.head import Head
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
    metadata_deleted: int = 0
    """Metadata objects the closing prune deleted (``MetadataResult.deleted``)."""
    prune_note: str = ""
    """Why the closing prune kept what it could have deleted (``PruneResult.note``: an
    unreadable tag holds everything), or empty."""

    def plus(self, other: MaintenanceResult) -> MaintenanceResult:
        """Both results summed (a table maintained again, as a scheme member is)."""
        return MaintenanceResult(
            self.passes + other.passes, self.splits + other.splits,
            self.jobs_committed + other.jobs_committed, self.jobs_failed + other.jobs_failed,
            self.files_deleted + other.files_deleted, self.seconds + other.seconds,
            tuple(dict.fromkeys(self.errors + other.errors)),
            self.metadata_deleted + other.metadata_deleted, other.prune_note)


@dataclass(frozen=True, slots=True)
class PassOptions:
    """What a pass's steps are run with."""

    runner: JobRunner | None = None
    """Runs compaction jobs (None: local threads)."""
    orphan_timeout: float | None = None
    """Overrides ``gc.orphan_timeout_seconds`` (see ``sediment.maintenance.gc.gc``)."""
    progress: Progress | None = None
    """The pass's compaction jobs (see ``sediment.compaction.runner.compact``)."""


@dataclass(frozen=True, slots=True)
class StepOutcome:
    """What one step did: its own result, the head it leaves for the next step, and what it
    adds to the table's :class:`MaintenanceResult`."""

    result: Any
    """The step's result (``SplitResult``, ``CompactionResult``, ``GcResult``)."""
    head: Head
    counts: dict[str, int] = field(default_factory=dict)
    """Added to the ``MaintenanceResult`` field of each name."""
    more: bool = False
    """The step changed the table so that another pass may find work (splits, jobs)."""
    errors: tuple[str, ...] = ()


TableStep = Callable[["TableHandle", "Head", PassOptions], StepOutcome]
"""One step of a pass: ``step(table, head, options)``."""


def split_step(table: TableHandle, head: Head, options: PassOptions) -> StepOutcome:
    """Split the leaves over the threshold (a scheme member: its scheme's, for every
    member)."""
    s = split_table(table, head=head)
    if head.settings.partition_scheme:
        # the scheme's split and the members' catch-up commit through other state stores
        # than this table's: its head is read again
        head = table.read_head()
    elif s.splits:
        head = table.read_head(refresh=False)  # this process's own commits: no log read
    return StepOutcome(s, head, {"splits": s.splits}, s.did_work, s.errors)


def compact_step(table: TableHandle, head: Head, options: PassOptions) -> StepOutcome:
    """One compaction pass (push references down, assign jobs, run and commit them)."""
    c = compact_on(table, head, runner=options.runner, progress=options.progress)
    if c.did_work:
        head = table.read_head(refresh=False)  # its commits are in this process's cache
    return StepOutcome(c, head, {"jobs_committed": c.jobs_committed,
                                 "jobs_failed": c.jobs_failed}, c.did_work)


def gc_step(table: TableHandle, head: Head, options: PassOptions) -> StepOutcome:
    """Collect garbage (on its own read of the head: see the module)."""
    g = gc(table, orphan_timeout=options.orphan_timeout)
    return StepOutcome(g, head, {"files_deleted": g.deleted + g.orphans_deleted})


TABLE_STEPS: tuple[TableStep, ...] = (split_step, compact_step, gc_step)
"""The steps of a pass, in order."""


def run_pass(table: TableHandle, options: PassOptions,
             steps: Sequence[TableStep] = TABLE_STEPS) -> list[StepOutcome]:
    """One pass: the head read once, then every step in order."""
    head = table.read_head()
    out = []
    for step in steps:
        outcome = step(table, head, options)
        out.append(outcome)
        head = outcome.head
    return out


def maintain_pass(table: TableHandle, *, runner: JobRunner | None = None,
                  orphan_timeout: float | None = None, progress: Progress | None = None
                  ) -> tuple[SplitResult, CompactionResult, GcResult]:
    """One pass: split leaves over the threshold, compact, collect garbage
    (``orphan_timeout``: see ``sediment.maintenance.gc.gc``; ``progress``: the pass's
    compaction jobs, see ``sediment.compaction.runner.compact``)."""
    s, c, g = (o.result for o in run_pass(table, PassOptions(runner, orphan_timeout, progress)))
    return s, c, g


def maintain(table: TableHandle, *, max_passes: int = MAX_PASSES, runner: JobRunner | None = None,
             on_pass: Callable[..., None] | None = None, orphan_timeout: float | None = None,
             progress: Progress | None = None,
             steps: Sequence[TableStep] = TABLE_STEPS) -> MaintenanceResult:
    """Run passes until one does nothing (or ``max_passes``), then bound the table's metadata
    once, as the continuous maintainer's GC lane does (``tidy_metadata``: the log and
    snapshots pruned past ``retention.seconds``, job events rolled up past
    ``status.retention.seconds``), so a store kept by one-off runs (cron) stays bounded too.
    ``on_pass(n, *results)``: after
    pass ``n`` with each step's result (split, compaction, GC). ``progress(done, total)``:
    each pass's compaction jobs, ``(0, total)`` when the pass has planned them, then as they
    end (so ``done`` starts again from 0 at each pass)."""
    started = time.perf_counter()
    options = PassOptions(runner, orphan_timeout, progress)
    totals = {"splits": 0, "jobs_committed": 0, "jobs_failed": 0, "files_deleted": 0}
    passes = 0
    errors: dict[str, None] = {}  # in order, each once
    for passes in range(1, max_passes + 1):  # noqa: B007 - used after the loop
        outcomes = run_pass(table, options, steps)
        for o in outcomes:
            for name, n in o.counts.items():
                totals[name] = totals.get(name, 0) + n
            errors.update(dict.fromkeys(o.errors))
        if on_pass is not None:
            on_pass(passes, *(o.result for o in outcomes))
        if not any(o.more for o in outcomes):
            break
    tidied = tidy_metadata(table)
    return MaintenanceResult(passes, totals["splits"], totals["jobs_committed"],
                             totals["jobs_failed"], totals["files_deleted"],
                             time.perf_counter() - started, tuple(errors), tidied.deleted,
                             tidied.pruned.note)
