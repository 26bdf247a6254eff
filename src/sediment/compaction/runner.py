"""The local compaction runner: push references down, create jobs, run them, commit each.

``compact(table)`` runs one pass: one SplitFileReferences transaction for references in
non-leaf partitions, one AssignJobIds transaction for the jobs a strategy picks, then the jobs in
parallel threads; each job commits a ReplaceFileReferences transaction that only succeeds if its
inputs are still assigned to it. A job that fails, or whose commit no longer validates, leaves at
most an orphan file for GC; its inputs stay assigned, so another runner never double-commits.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence, Set
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from sediment import metrics
from sediment.compaction.expiry import expired_fractions
from sediment.compaction.job import JobOutput, run_compaction_job
from sediment.compaction.strategy import (
    CompactionJob,
    assignments,
    plan_compaction_jobs,
    plan_reference_splits,
)
from sediment.core.deletions import applicable
from sediment.core.head import Head
from sediment.core.model import FileReference
from sediment.core.regions import Region
from sediment.core.settling import nothing_older
from sediment.core.state import TableState
from sediment.core.transactions import (
    AssignJobIds,
    ReplaceFileReferences,
    SplitFileReferences,
    Transaction,
)
from sediment.errors import SedimentError, TransactionInvalidError
from sediment.files.sample import estimate_count
from sediment.files.staging import Staging
from sediment.metrics import traces
from sediment.query.planner import sums_of

if TYPE_CHECKING:
    from sediment.handle import TableHandle


class JobRunner(Protocol):
    """Runs a pass's jobs (planned on ``state``; ``head``: its head, when the caller has it)
    and commits each, calling ``on_done`` as each ends: :func:`run_jobs_locally`, or another
    runner found by name in :mod:`sediment.runners` (Spark's)."""

    def __call__(self, table: TableHandle, state: TableState, jobs: Sequence[CompactionJob], *,
                 on_done: Callable[[JobResult], None] | None = None,
                 head: Head | None = None) -> list[JobResult]: ...


@dataclass(frozen=True, slots=True)
class JobResult:
    job: CompactionJob
    committed: bool
    rows_in: int = 0
    rows_out: int = 0
    bytes_out: int = 0
    seconds: float = 0.0
    error: str | None = None


@dataclass(frozen=True, slots=True)
class CompactionResult:
    """One compaction pass: references pushed down, jobs created/committed/failed, rows."""

    references_pushed_down: int = 0
    jobs_created: int = 0
    jobs_committed: int = 0
    jobs_failed: int = 0
    rows_in: int = 0
    rows_out: int = 0
    seconds: float = 0.0
    errors: tuple[str, ...] = field(default=())

    @property
    def did_work(self) -> bool:
        return bool(self.references_pushed_down or self.jobs_created)


def push_down_references(table: TableHandle, *, head: Head | None = None) -> int:
    """Move references in non-leaf partitions one level down; returns how many moved
    (planned on ``head``, else on the table's head read now)."""
    return _push_down(table, table.read_head() if head is None else head)[0]


def _push_down(table: TableHandle, head: Head) -> tuple[int, Head]:
    """``push_down_references`` on ``head``: how many moved, and the head after (the state
    this commit made; ``head`` itself when nothing moved)."""
    schema = head.schema
    samples = table.samples

    def estimate(ref: FileReference, region: Region) -> int:
        return estimate_count(samples.sample(ref.filename), schema.row_key_names, region)

    moved = 0

    def build(head: TableState) -> Transaction:
        nonlocal moved
        splits = plan_reference_splits(head, estimate)
        moved = len(splits)
        return SplitFileReferences(splits)

    if not plan_reference_splits(head.state, lambda r, g: 0):
        return 0, head
    state = table.states.commit(build)
    return moved, head.moved_to(state)


JobSelection = Callable[[TableState, list[CompactionJob]], list[CompactionJob]]
"""Which of the jobs planned on a state to assign now (the others' files stay free for later
plans); a selected job may take only part of a planned job's inputs."""


def create_jobs(table: TableHandle, *, full: bool = False,
                select: JobSelection | None = None, head: Head | None = None
                ) -> list[CompactionJob]:
    """Pick jobs with the table's strategy (``full``: every leaf into one file), keep those
    ``select`` keeps (all by default), and assign them in one transaction (planned on
    ``head``, else on the table's head read now)."""
    head = table.read_head() if head is None else head
    return _create_jobs(table, head, full=full, select=select)[0]


def _create_jobs(table: TableHandle, head: Head, *, full: bool,
                 select: JobSelection | None) -> tuple[list[CompactionJob], Head]:
    """``create_jobs`` on ``head``: the jobs and the head after their assignment."""
    settings = head.settings
    # what age-off would drop from each file (empty without an age-off, or for a full pass,
    # which rewrites every leaf anyway)
    expired = {} if full else expired_fractions(
        table, head, (r for r in head.state.all_references() if r.job_id is None))

    def plan(state: TableState) -> list[CompactionJob]:
        planned = plan_compaction_jobs(state, settings, full=full, expired=expired)
        return planned if select is None else select(state, planned)

    jobs: list[CompactionJob] = []

    def build(head: TableState) -> Transaction:
        nonlocal jobs
        jobs = plan(head)
        return AssignJobIds(assignments(jobs))

    if not plan(head.state):
        return [], head
    state = table.states.commit(build)
    return jobs, head.moved_to(state)


def stale_jobs(state: TableState, timeout: float, *, exclude: set[str],
               now: float | None = None) -> list[CompactionJob]:
    """Jobs assigned more than ``timeout`` seconds ago that never committed (to run again)."""
    now = time.time() if now is None else now
    return [CompactionJob(job_id, pid, tuple(state.job_inputs(job_id)))
            for job_id, (pid, at) in sorted(state.jobs.items())
            if job_id not in exclude and now - at >= timeout]


def record_job_started(table: TableHandle, job: CompactionJob) -> None:
    """The ``started`` event of a job about to run (here or on a Spark executor)."""
    table.status.record("compaction", job.job_id, "started", partition_id=job.partition_id,
                        inputs=len(job.inputs), records_in=job.records)


def commit_job(table: TableHandle, job: CompactionJob, out: JobOutput | str, *,
               adopt: bool = False) -> JobResult:
    """End a job that ran: record ``finished`` and commit its output (``committed``), or
    record ``failed`` when it did not run (``out`` is then the reason) or its commit no longer
    validates. The output's staging settles its file (see ``sediment.files.staging``);
    ``adopt``: the output was written by another process (a Spark executor, a worker), so
    this one protects it from GC until the commit settles. Never raises for a job failure.

    Every runner (local, Spark, the continuous maintainer) ends its jobs here."""
    status = table.status

    def failed(reason: str) -> JobResult:
        status.record("compaction", job.job_id, "failed", partition_id=job.partition_id,
                      reason=reason)
        return JobResult(job, False, error=reason)

    if isinstance(out, str):
        return failed(out)
    w = out.written
    rows_out, bytes_out = (w.rows, w.bytes) if w else (0, 0)
    status.record("compaction", job.job_id, "finished", partition_id=job.partition_id,
                  rows_in=out.rows_in, rows_out=rows_out, bytes_out=bytes_out,
                  seconds=out.seconds,
                  rows_per_second=out.rows_in / out.seconds if out.seconds else 0.0)
    output = None if w is None else FileReference(w.filename, job.partition_id, w.rows)
    staging = out.staging if out.staging is not None else Staging(table.objects, table.name)
    try:
        if output is not None and adopt:
            staging.adopt([output.filename])
        # refused for certain (inputs reassigned, table dropped): the output goes at once
        staging.commit(table.states, ReplaceFileReferences(
            job.job_id, job.partition_id, tuple(r.filename for r in job.inputs), output,
            checksums={} if w is None or w.sums is None else {w.filename: w.sums},
            settles=out.settles, upserts=out.upserts))
    except (SedimentError, OSError) as e:
        return failed(_reason(e))
    status.record("compaction", job.job_id, "committed", partition_id=job.partition_id)
    metrics.compaction(table.name, out.seconds, out.rows_in)
    return JobResult(job, True, out.rows_in, rows_out, bytes_out, out.seconds)


def deletes_of(state: TableState, job: CompactionJob, region: Region) -> dict[str, Any]:
    """What ``job`` (planned on ``state``) applies of deletes and upserts, as keyword
    arguments of ``run_compaction_job``: the deletions pending in its partition; those it
    ``covered`` (nothing older than one is left beside its inputs: it may drop the upserted
    records one removes, which no longer hide anything); the version it ``settles``; and
    whether it is ``complete`` (it merges every record of the partition)."""
    deletions = applicable(state.deletions, job.partition_id, region)
    inputs = frozenset(r.filename for r in job.inputs)
    return {"deletions": deletions,
            "covered": frozenset(d.version for d in deletions
                                 if nothing_older(state, job.partition_id, inputs, d.bound)),
            "settles": state.version,
            "complete": nothing_older(state, job.partition_id, inputs, 0) and
            inputs == set(state.references(job.partition_id))}


def _reason(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"


def execute_job(table: TableHandle, job: CompactionJob, region: Region, *,
                head: Head | None = None) -> JobOutput | str:
    """Run one job (of the partition with ``region``) in this process with the schema,
    settings and iterators of ``head`` (else of the table's head read now: a Spark
    executor's): its output, or why it failed (a storage or data error: one bad job fails
    alone)."""
    try:
        with traces.span("sediment.compaction", table.name):
            head = table.read_head() if head is None else head
            return run_compaction_job(table.objects, head.schema, head.settings, job, region,
                                      head.iterators, staging=Staging(table.objects, table.name),
                                      sums=sums_of(head.state, job.inputs),
                                      schemas=head.state.schemas,
                                      **deletes_of(head.state, job, region))
    except (SedimentError, OSError) as e:
        return _reason(e)


def run_job(table: TableHandle, state: TableState, job: CompactionJob, *,
            head: Head | None = None) -> JobResult:
    """Run one job planned on ``state`` (``head``: its head, when the caller has it) and
    commit it; records status events; never raises for a job failure."""
    record_job_started(table, job)
    region = state.partitions[job.partition_id].region
    try:
        head = Head.of(state, table.name) if head is None else head
    except SedimentError as e:
        return commit_job(table, job, _reason(e))
    return commit_job(table, job, execute_job(table, job, region, head=head))


def run_jobs_locally(table: TableHandle, state: TableState, jobs: Sequence[CompactionJob], *,
                     on_done: Callable[[JobResult], None] | None = None,
                     head: Head | None = None) -> list[JobResult]:
    """Run ``jobs`` (planned on ``state``; ``head``: its head, when the caller has it) in
    threads (``compaction.threads``); results in the jobs' order. ``on_done`` is called on
    this thread as each job ends (committed or failed)."""
    try:
        head = Head.of(state, table.name) if head is None else head
    except SedimentError as e:
        return [commit_job(table, j, _reason(e)) for j in jobs]
    threads = head.settings.compaction_threads or (os.cpu_count() or 2)
    if len(jobs) <= 1 or threads == 1:
        results = []
        for j in jobs:
            results.append(run_job(table, state, j, head=head))
            if on_done is not None:
                on_done(results[-1])
        return results
    with ThreadPoolExecutor(min(threads, len(jobs))) as pool:
        futures = {pool.submit(run_job, table, state, j, head=head): i
                   for i, j in enumerate(jobs)}
        out: dict[int, JobResult] = {}
        for f in as_completed(futures):
            out[futures[f]] = f.result()
            if on_done is not None:
                on_done(out[futures[f]])
        return [out[i] for i in range(len(jobs))]


@dataclass(frozen=True, slots=True)
class DueJobs:
    """What the start of a pass found to run: the jobs it assigned, then the stale ones."""

    state: TableState
    """The head the jobs were planned on (what their regions are read from)."""
    jobs: list[CompactionJob]
    references_pushed_down: int = 0
    head: Head | None = None
    """``state``'s head (settings and iterators): what the jobs run with."""


def due_jobs(table: TableHandle, *, exclude: Set[str] = frozenset(),
             refresh: bool = True, full: bool = False,
             select: JobSelection | None = None, head: Head | None = None) -> DueJobs:
    """The start of every pass (``compact``, the continuous maintainer): push references down,
    assign new jobs (each recorded ``created``; ``full``: a forced full compaction; ``select``:
    see ``create_jobs``), and add the stale jobs not in ``exclude``. All of it is planned on
    ``head`` (else on the table's head read now; ``refresh``: re-read from the log, else
    this process's cached head) and on the states its own commits make: the log is read
    again only when another writer commits meanwhile."""
    head = table.read_head(refresh=refresh) if head is None else head
    try:
        moved, head = _push_down(table, head)
    except TransactionInvalidError:
        moved = 0  # raced with another runner: next pass
    jobs, head = _create_jobs(table, head, full=full, select=select)
    for j in jobs:
        table.status.record("compaction", j.job_id, "created", partition_id=j.partition_id,
                            inputs=len(j.inputs), records_in=j.records)
    timeout = head.settings.compaction_job_timeout_seconds
    stale = stale_jobs(head.state, timeout, exclude=set(exclude) | {j.job_id for j in jobs})
    return DueJobs(head.state, jobs + stale, moved, head)


Progress = Callable[[int, int], None]
"""``progress(done, total)``: called with the real total first (``done`` 0), then as work ends."""


def compact(table: TableHandle, *, runner: JobRunner | None = None,
            full: bool = False, progress: Progress | None = None) -> CompactionResult:
    """One compaction pass over ``table`` (nothing for an offline table). ``full``: every
    leaf with more than one file, or with a file that spans other leaves too, is compacted
    into one file whatever the strategy (references in non-leaf partitions are first pushed
    all the way down to the leaves). ``progress(done, total)``: once the jobs are planned
    (new and stale: every job this pass runs) with ``(0, total)``, then as each job ends
    (Spark's runner: as the driver commits each, once all tasks have run)."""
    started = time.perf_counter()
    return compact_on(table, table.read_head(), runner=runner, full=full, progress=progress,
                      started=started)


def compact_on(table: TableHandle, head: Head, *, runner: JobRunner | None = None,
               full: bool = False, progress: Progress | None = None,
               started: float | None = None) -> CompactionResult:
    """``compact`` on ``head``, read by the caller (a maintenance pass reads it once for
    all its steps)."""
    started = time.perf_counter() if started is None else started
    if not head.state.online:
        if progress is not None:
            progress(0, 0)
        return CompactionResult()
    moved = 0
    while full:  # every level at once: a full compaction leaves nothing above the leaves
        try:
            n, head = _push_down(table, head)
        except TransactionInvalidError:
            break  # raced with another runner's push-down: the next pass goes on
        if not n:
            break
        moved += n
    due = due_jobs(table, full=full, head=head)
    jobs = due.jobs
    if progress is not None:
        progress(0, len(jobs))
    done = 0

    def tick(_: JobResult) -> None:
        nonlocal done
        done += 1
        if progress is not None:
            progress(done, len(jobs))

    run = run_jobs_locally if runner is None else runner
    results = run(table, due.state, jobs, on_done=tick, head=due.head) if jobs else []
    ok = [r for r in results if r.committed]
    return CompactionResult(
        moved + due.references_pushed_down, len(jobs), len(ok), len(results) - len(ok),
        sum(r.rows_in for r in ok), sum(r.rows_out for r in ok),
        time.perf_counter() - started, tuple(r.error for r in results if r.error))
