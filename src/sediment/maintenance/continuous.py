"""The continuous maintainer behind ``sediment maintain --loop``.

Why not passes: a pass (split, push down, create jobs, run them all, collect garbage) waits
for its slowest job before it looks at the table again, and a loop sleeps between passes. Under
continuous ingest the files that arrive meanwhile pile up (measured: passes that assign jobs
~1.1 s apart on an idle box, seconds apart on a loaded one, and leaves past the compaction
batch size). Here every ``tick`` the maintainer looks at each table's head state and starts
what is due at once: splits for leaves over the threshold, references pushed down, and new
compaction jobs for the files no job holds, each job committing on its own as it ends while
the others run. GC, which only acts on files older than its delay, runs every ``gc_every``
on a thread of its own, followed now and then by the bounding of the table's metadata
(``sediment.maintenance.collecting``).

Jobs are assigned only as threads free to run them: a tick plans (and claims the files of)
as many jobs as threads are idle, in the plan's order (the leaves with the most files first),
and a job's end wakes the loop to plan again. An assigned job that waits in a queue holds its
inputs while new files keep arriving; planned when a thread frees, it groups those too
(measured in benchmarks/steady_state.py's 60 s run: with a queue of a thread's worth of jobs,
jobs waited 1-23 s and leaves reached 17-18 files; planning for idle threads only: 15-16, and
8.9-9.9 files per leaf on average instead of 9.4-11.6). A long job (one rewriting a file of at
least ``LONG_JOB_FRACTION`` of the split threshold's records: see ``is_long``) never takes the
last free thread: that one is kept for the merges of small files, which keep the files per
leaf down (a 1 s merge on each of 2 threads let leaves reach 21 files).

Jobs still go through the same transactions as a pass (AssignJobIds, ReplaceFileReferences
conditional on the assignment), so several maintainers, or a maintainer and ``table.maintain()``,
can run side by side without double commits.
"""

from __future__ import annotations

import functools
import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, wait
from typing import TYPE_CHECKING, Any, Literal

from sediment.compaction.runner import JobResult, JobRunner, due_jobs, run_job
from sediment.compaction.strategy import (
    CompactionJob,
    crowded_files,
    files_after_jobs,
    is_long,
    short_part,
)
from sediment.handle import handle_of
from sediment.ingest.batcher_store import REQUESTS
from sediment.maintenance.activity import TableActivity, report_rows
from sediment.maintenance.batching import BatcherLane
from sediment.maintenance.collecting import CollectorLane
from sediment.maintenance.orchestrator import StoreMaintenance
from sediment.maintenance.pool import SmallestFirstPool
from sediment.maintenance.schemes import split_table
from sediment.maintenance.split_pacing import SplitPacing
from sediment.maintenance.splitting import leaf_records
from sediment.maintenance.workers import WorkerProcesses

if TYPE_CHECKING:
    from sediment.core.head import Head
    from sediment.core.model import Partition
    from sediment.core.state import TableState
    from sediment.handle import TableHandle
    from sediment.maintenance.lease_store import LeaseHolder

LONG_JOB_FRACTION = 0.05
"""A job with an input of at least this fraction of the split threshold's records is long: it
runs on the threads the pool does not keep for short jobs (see SmallestFirstPool). A merge of
small files is short however many records they add up to (judged by its total, right after
the first split every merge of two new files was long: peaks of 13-14 files in
steady_state's 20 s run, 11-12 judged by the largest input). Measured with the total, in
benchmarks/steady_state.py's 60 s run (threshold 2M; new files of ~6k records), peak files per
leaf: 15-16 with a quarter (medium merges of 100-500k records then hold the kept thread), 13-14
with a twentieth, 14-17 with a fiftieth (a leaf whose every due job is a merge of ten new files
waits for the long lane); 15-16 with jobs long when expected to take a quarter of a second at
the rate recent jobs merged."""


class Maintainer:
    """Keeps tables maintained until stopped: see the module docstring.

    ``tables`` is called every ``refresh_tables`` seconds (tables come and go in a store).
    ``store``: the maintenance of their store (``sediment.store.store_maintenance``), whose
    store steps (the folders no catalog entry names) run every ``gc_every`` seconds.
    ``threads`` (default: the CPUs) run jobs, and a tick assigns only as many as are idle (see
    the module docstring). With ``workers="process"`` each of those
    threads hands its job's merge to one of as many worker processes
    (sediment.maintenance.workers), so jobs use every core instead of sharing one GIL.
    ``batcher_threads`` (0: none) run the tables' ingest batcher jobs
    (sediment.maintenance.batching). ``batch_runner`` (a compaction runner of
    sediment.runners, e.g. Spark's): each tick hands all of a table's due jobs to it at
    once, on one thread, instead of a job per idle thread; ``spark`` (a session) sends the
    batcher's big groups to bulk import. ``leases`` (sediment.maintenance.lease_store): which tables
    this maintainer holds among several over one store; it looks only at those (None: at
    every table).
    """

    def __init__(self, tables: Callable[[], Sequence[object]], *, threads: int = 0,
                 tick_seconds: float = 0.25, gc_every: float = 10.0,
                 refresh_tables: float = 10.0,
                 orphan_timeout: float | None = None,
                 workers: Literal["thread", "process"] = "thread",
                 store: StoreMaintenance | None = None, batcher_threads: int = 0,
                 leases: LeaseHolder | None = None,
                 batch_runner: JobRunner | None = None, spark: Any = None) -> None:
        self._tables_fn = tables
        self._store = store
        self.orphan_timeout = orphan_timeout
        """Overrides each table's ``gc.orphan_timeout_seconds`` (see
        ``sediment.maintenance.gc.gc``)."""
        self.threads = threads or (os.cpu_count() or 2)
        self.tick_seconds = tick_seconds
        self.gc_every = gc_every
        self.refresh_tables = refresh_tables
        self._pool = SmallestFirstPool(self.threads)
        self._processes = WorkerProcesses(self.threads) if workers == "process" else None
        self._running: dict[str, tuple[str, Future[object]]] = {}  # job id -> table, future
        self._activity: dict[str, TableActivity] = {}
        self._splits = SplitPacing()
        self._lock = threading.Lock()
        self._turn = 0
        self._wake = threading.Event()
        """Set when a job ends: the loop plans again at once."""
        self._tables: list[TableHandle] = []
        self._online: list[TableHandle] = []
        """The tables this tick found online (their batcher queues are looked at)."""
        self._tables_at = float("-inf")
        self._collector = CollectorLane(gc_every, orphan_timeout, self._lock, self._act,
                                        self._note)
        self._ran_at: dict[str, tuple[str, float]] = {}  # job id -> table, when we last ran it
        self._failed: dict[str, tuple[float, str]] = {}  # table -> when it last failed, error
        self._batcher = BatcherLane(batcher_threads, note=self._note_locked,
                                    on_end=self._wake.set, spark=spark) \
            if batcher_threads else None
        self._batch_runner = batch_runner
        self.leases = leases

    # ---- one tick ------------------------------------------------------------------------
    def tick(self) -> int:
        """Look at every table once and start what is due; returns how many jobs and splits
        it started."""
        now = time.monotonic()
        if now - self._tables_at >= self.refresh_tables:
            try:
                self._tables = [handle_of(t) for t in self._tables_fn()]
            except Exception as e:  # noqa: BLE001 - listing tables again next refresh
                self._note("*", f"{type(e).__name__}: {e}")
            self._tables_at = now
        tables = self._tables
        if self.leases is not None:  # several maintainers: only the tables leased to us
            self.leases.offer([t.name for t in tables], busy=self._busy_tables(),
                              store=self._store is not None)
            for error in self.leases.take_errors():
                self._note("(leases)", error)
            tables = [t for t in tables if self.leases.holds(t.name)]
        if self._store is not None and (self.leases is None or self.leases.holds_store()):
            self._collector.store_tick(self._store, now)
        self._reap()
        started = 0
        # each tick starts at the table after the last one that started work: the first ones
        # looked at take the idle threads, and a busy table must not keep the others' jobs
        # waiting (ticks with no idle thread do not move the turn on). Once a table found no
        # idle thread, the tables after it start no jobs in this tick: a thread that frees
        # while they are looked at belongs to the table passed over, whose turn comes first
        # in the next tick.
        turn = self._turn % len(tables) if tables else 0
        passed_over = False
        self._online = []
        for i, t in enumerate(tables[turn:] + tables[:turn]):
            failed = self._failed.get(t.name)
            if failed is not None and now - failed[0] < self.gc_every:
                self._note(t.name, failed[1])  # still reported; retried once a GC period
                continue
            try:
                may_compact = not passed_over and self._pool.idle > 0
                passed_over = not may_compact
                n = self._tick_table(t, now, may_compact)
                if n:
                    self._turn = turn + i + 1
                started += n
                self._failed.pop(t.name, None)
            except Exception as e:  # noqa: BLE001 - one table must not stop the daemon
                # A daemon: one table's failure (damaged metadata, a storage error, even a
                # bug) is reported and retried every GC period (not every tick: reloading a
                # damaged table four times a second costs reads for nothing); the other
                # tables go on.
                error = f"{type(e).__name__}: {e}"
                self._note(t.name, error)
                self._failed[t.name] = (now, error)
        if self._batcher is not None:  # the lane looks at their queues on its own clock
            self._batcher.hold(self._online)
        return started

    def _tick_table(self, t: TableHandle, now: float, may_compact: bool) -> int:
        act = self._activity.setdefault(t.name, TableActivity())
        act.ticks += 1
        before = act.splits + act.jobs_started
        head = t.read_head()  # the tick's one read of the table's head
        if head.state.online:
            self._online.append(t)
            # one split a tick, and only while jobs keep up (a thread's worth of them queued
            # at most): a split leaves both children with every file of the parent to
            # rewrite, and leaves that cross the threshold together (uniform keys) would
            # otherwise hand the workers all of that at once
            if self._pool.waiting < self.threads and self._splits.due(t.name, head):
                r = split_table(t, limit=1, ready=functools.partial(self._split_ready, t),
                                head=head)
                act.splits += r.splits
                # a scheme's split commits through other state stores than this table's
                scheme = bool(head.settings.partition_scheme)
                if r.splits or scheme:
                    head = t.read_head(refresh=scheme)
                for leaf in r.unsplittable:
                    p = head.state.partitions.get(leaf)
                    if p is not None:
                        self._splits.stuck(t.name, leaf, leaf_records(head.state, p))
            if may_compact and self._pool.idle:
                self._compact(t, head, act)
        self._collector.tick(t, now)
        return act.splits + act.jobs_started - before

    def _split_ready(self, t: TableHandle, state: TableState, leaf: Partition) -> bool:
        """See SplitPacing.ready."""
        return self._splits.ready(t.name, state, leaf)

    def _compact(self, t: TableHandle, head: Head, act: TableActivity) -> None:
        settings = head.settings
        timeout = settings.compaction_job_timeout_seconds
        now = time.monotonic()
        with self._lock:
            # ours in flight, and ours that ended within the timeout (a job whose commit
            # failed stays assigned: rerun it as any stale job, not on every tick)
            recent = set(self._running) | {j for j, (_, at) in self._ran_at.items()
                                           if now - at < timeout}
        long_records = settings.partition_split_threshold * LONG_JOB_FRACTION
        crowded = crowded_files(settings.compaction_batch_size)
        idle, slots = self._pool.idle, self._pool.long_slots

        def select(state: TableState, planned: list[CompactionJob]) -> list[CompactionJob]:
            # Only the jobs idle threads start now, in the plan's order (the leaves with the
            # most files first), a long one only when its lane is free: a job assigned and
            # queued holds its inputs while files keep arriving, and the next plan, made
            # when a thread frees, groups more of them (measured: jobs queued 1-23 s while
            # leaves reached 17-18 files). A crowded leaf whose job is long and cannot
            # start merges the job's small files now instead of waiting for the lane.
            out: list[CompactionJob] = []
            free_long = slots
            for j in planned:
                if len(out) == idle:
                    break
                if is_long(j, long_records):
                    if free_long:
                        free_long -= 1
                    elif files_after_jobs(state.references(j.partition_id).values()) > crowded:
                        short = short_part(j, long_records, settings)
                        if short is None:
                            continue
                        j = short
                    else:
                        continue
                out.append(j)
            return out

        if self._batch_runner is not None:
            self._compact_batch(t, head, act, recent, now)
            return
        due = due_jobs(t, exclude=recent, select=select, head=head)
        state = due.state
        live = set(state.jobs)  # forget this table's jobs that are no longer assigned
        self._ran_at = {j: v for j, v in self._ran_at.items() if v[0] != t.name or j in live}
        for j in due.jobs:
            self._ran_at[j.job_id] = (t.name, now)
            runner = run_job if self._processes is None else self._processes.run_job
            # each job derives its settings from ``state`` (no read of the head)
            fut = self._pool.submit(j.records, functools.partial(runner, t, state, j),
                                    long=is_long(j, long_records))
            fut.add_done_callback(lambda _: self._wake.set())
            with self._lock:
                self._running[j.job_id] = (t.name, fut)
            act.jobs_started += 1

    def _compact_batch(self, t: TableHandle, head: Head, act: TableActivity,
                       recent: set[str], now: float) -> None:
        """Every due job of ``t`` (as the strategy plans them, and the stale ones) in one
        call of the batch runner on one thread: one Spark stage per table per tick, whose
        executors run the merges while the driver commits each job as it comes back."""
        assert self._batch_runner is not None
        due = due_jobs(t, exclude=recent, head=head)
        live = set(due.state.jobs)
        self._ran_at = {j: v for j, v in self._ran_at.items() if v[0] != t.name or j in live}
        if not due.jobs:
            return
        fut = self._pool.submit(sum(j.records for j in due.jobs),
                                functools.partial(self._batch_runner, t, due.state, due.jobs))
        fut.add_done_callback(lambda _: self._wake.set())
        with self._lock:
            for j in due.jobs:
                self._ran_at[j.job_id] = (t.name, now)
                self._running[j.job_id] = (t.name, fut)
        act.jobs_started += len(due.jobs)

    def _reap(self) -> None:
        """Count the jobs that ended since the last tick."""
        with self._lock:
            done = [(jid, name, fut) for jid, (name, fut) in self._running.items()
                    if fut.done()]
            for jid, _, _ in done:
                del self._running[jid]
        for jid, name, fut in done:
            if fut.cancelled():
                continue
            act = self._activity.setdefault(name, TableActivity())
            try:
                r = fut.result()
                if isinstance(r, list):  # a batch runner's results: this job's
                    r = next(x for x in r if x.job.job_id == jid)
                assert isinstance(r, JobResult)
            except Exception as e:  # noqa: BLE001 - a bug in a job must not stop the daemon
                act.jobs_failed += 1
                act.errors.append(f"{type(e).__name__}: {e}")
                continue
            if r.committed:
                act.jobs_committed += 1
            else:
                act.jobs_failed += 1

    def _act(self, table: str) -> TableActivity:
        return self._activity.setdefault(table, TableActivity())

    def _note(self, table: str, error: str) -> None:
        self._act(table).errors.append(error)

    def _note_locked(self, table: str, error: str) -> None:
        with self._lock:
            self._note(table, error)

    def _busy_tables(self) -> set[str]:
        """Tables with a compaction, GC or batcher job of ours under way (a lease is not
        given up while one runs: see sediment.maintenance.leases)."""
        with self._lock:
            busy = {name for name, fut in self._running.values() if not fut.done()}
        busy |= self._collector.running()
        if self._batcher is not None:
            busy |= set(self._batcher.running())
        return busy

    def note(self, table: str, error: str) -> None:
        """Report ``error`` in ``table``'s next report row (e.g. a table that could not be
        opened, which therefore is not among those ``tables`` returned)."""
        self._note(table, error)

    # ---- what the metrics endpoint reads when scraped ----------------------------------------
    def jobs_waiting(self) -> int:
        """Jobs (and splits) queued for a thread, not started: ``sediment_queue_depth{queue=
        "jobs"}``."""
        return self._pool.waiting

    def batcher_waiting(self) -> int:
        """File-ingest requests pending in the batchers of the tables maintained (one
        listing per table, names only): ``sediment_queue_depth{queue="batcher"}``."""
        return sum(sum(1 for o in t.objects.list(REQUESTS) if o.key.endswith(".json"))
                   for t in list(self._tables))

    # ---- running -------------------------------------------------------------------------
    def report(self) -> list[dict[str, object]]:
        """One row per table of what happened since the last report (then reset)."""
        self._reap()
        with self._lock:
            running: dict[str, int] = {}
            for name, _ in self._running.values():
                running[name] = running.get(name, 0) + 1
            # swapped under the lock: the GC thread adds to the activity of the next report
            activity, self._activity = self._activity, {}
        ingests = self._batcher.report() if self._batcher is not None else {}
        return report_rows(activity, running, ingests, batching=self._batcher is not None)

    def run(self, *, report_every: float, on_report: Callable[[list[dict[str, object]]], None],
            max_reports: int = 0, stop: threading.Event | None = None) -> None:
        """Tick until ``stop`` is set, reporting every ``report_every`` seconds; then wait for
        the running jobs. With ``max_reports``, the last report comes once the tables have
        settled (what the running jobs lead to is done too), as ``maintain`` would leave them.
        """
        stop = stop or threading.Event()
        reports = 0
        next_report = time.monotonic() + report_every
        try:
            while not stop.is_set():
                started = time.monotonic()
                self.tick()
                if time.monotonic() >= next_report:
                    reports += 1
                    if max_reports and reports >= max_reports:
                        self._settle(stop)
                        on_report(self.report())
                        break
                    on_report(self.report())
                    next_report = time.monotonic() + report_every
                # the next tick comes when a job ends (a thread to plan for) or after
                # tick_seconds (new files to plan for)
                self._wake.wait(max(0.0, self.tick_seconds - (time.monotonic() - started)))
                self._wake.clear()
        finally:
            self.close()

    def _settle(self, stop: threading.Event, max_ticks: int = 100) -> None:
        """Tick until nothing runs and a tick starts nothing (at most ``max_ticks`` ticks that
        start something: a table that never settles must not hold the daemon forever)."""
        busy = 0
        while not stop.is_set() and busy < max_ticks:
            with self._lock:
                pending: list[Future[Any]] = [fut for _, fut in self._running.values()
                                              if not fut.done()]
            pending += self._collector.pending()
            if self._batcher is not None:
                pending += self._batcher.pending()
            if pending:
                wait(pending, timeout=0.5)
                continue
            if self.tick() == 0:
                self._reap()
                if not self._running:
                    return
            busy += 1

    def close(self) -> None:
        """Drop the jobs still queued (assigned but not started: they go stale and run again
        later, here or in another maintainer) and wait for the running ones, each of which
        commits or fails on its own."""
        with self._lock:
            for _, fut in self._running.values():
                fut.cancel()  # only a job that has not started can be cancelled
        self._pool.shutdown()
        if self._batcher is not None:
            self._batcher.close()
        self._collector.close()
        if self.leases is not None:  # after the jobs: a lease is let go once nothing runs
            self.leases.close()
        if self._processes is not None:
            self._processes.close()
        self._reap()
