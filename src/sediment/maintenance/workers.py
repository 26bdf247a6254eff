"""Compaction jobs in worker processes, so the continuous maintainer uses every core.

A job's merge and Parquet encoding release the GIL for most of their work, but not all of it
(batch slicing, the k-way merge's bookkeeping, the sampler, the writer's Python glue): with
jobs on threads of one process the maintainer measured about one core busy on a two-core
machine, and leaves piled past the compaction batch size under load. Here each job runs in a
worker process (spawned, not forked: the maintainer has threads, and a fork would copy their
locks held), while planning, the ``started`` event and the commit stay in the maintainer, as
with the Spark runner: a worker only writes the output file and returns its name.

A worker that dies (killed, out of memory) breaks the pool: the pool is replaced and the job is
run again, up to ``RETRIES`` times, under the same job id (its inputs are still assigned to it;
whatever the dead worker wrote is an orphan, which GC collects once its lease lapses). Other
jobs the broken pool was running are run again the same way. Nothing is committed twice: a
job's commit is conditional on its assignment (``ReplaceFileReferences``).

Iterators of your own travel as ``{"type": "python", "class": "module:Name"}``
(:mod:`sediment.iterators.trust`): a worker loads one when the maintainer trusts its module,
as it is spawned with the maintainer's environment (``$SEDIMENT_TRUSTED_ITERATOR_MODULES``,
which ``--trust-iterator-module`` and ``trust_iterator_modules`` write) and Python path.
Kinds registered with ``register_iterator`` at run time exist only in the process that
registered them: a table whose ``compaction.iterators`` names one needs thread workers
(``sediment maintain --loop --workers thread``).
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Mapping
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import TYPE_CHECKING, Any

from sediment.compaction.job import JobOutput, run_compaction_job
from sediment.compaction.runner import (
    JobResult,
    commit_job,
    deletes_of,
    record_job_started,
)
from sediment.compaction.strategy import CompactionJob
from sediment.core.head import Head
from sediment.core.model import FileSums
from sediment.core.regions import Region
from sediment.core.state import TableState
from sediment.errors import SedimentError
from sediment.files.staging import Staging
from sediment.iterators.registry import iterators_from_property
from sediment.query.planner import sums_of
from sediment.schema import Schema
from sediment.storage.base import ObjectStore
from sediment.storage.registry import open_object_store

if TYPE_CHECKING:
    from sediment.handle import TableHandle

RETRIES = 3
"""Times a job is started in a fresh pool after the worker running it died."""

_STORES: dict[tuple[str, str], ObjectStore] = {}


def _execute(uri: str, options: dict[str, Any], table: str, schema: Schema,
             properties: Mapping[str, Any], job: CompactionJob,
             region: Region, sums: Mapping[str, FileSums] | None = None,
             job_args: Mapping[str, Any] | None = None) -> JobOutput | str:
    """In a worker: run one job (its output, or why it failed, as ``execute_job``);
    ``job_args``: the job's deletes and the table's schema history."""
    key = (uri, repr(sorted(options.items())))
    objects = _STORES.get(key)
    if objects is None:
        objects = _STORES[key] = open_object_store(uri, **options)
    try:
        iterators = iterators_from_property(
            str(properties["compaction.iterators"]), schema,
            where=f"table {table} property compaction.iterators")
        out = run_compaction_job(objects, schema, properties, job, region, iterators,
                                 staging=Staging(objects, table), sums=sums,
                                 **(job_args or {}))
    except (SedimentError, OSError) as e:
        return f"{type(e).__name__}: {e}"
    # the maintainer adopts the file before committing it (a new file is no orphan for GC's
    # orphan pass for gc.orphan_timeout_seconds, so handing it over is safe)
    return out.handed_over()


def _ignore_stop_signals(parent: int) -> None:
    """Workers leave Ctrl-C and SIGTERM to the maintainer, which stops them once their jobs
    end (a terminal's Ctrl-C reaches the whole process group; a worker dying of it would only
    be run again)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    # ignoring those, a worker outliving a maintainer that was killed (kill -9, the OOM
    # killer) would run on for ever, reparented: it goes when its parent (``parent``, the
    # maintainer's pid as it started the pool: one that died before this ran is seen too) does
    threading.Thread(target=_exit_with_parent, args=(parent,), name="sediment-parent-watch",
                     daemon=True).start()
    # several run side by side: each keeps a small block cache, not a server's
    from sediment.query.blocks import use_worker_bound
    use_worker_bound()


PARENT_WATCH_SECONDS = 1.0
"""How often a worker looks whether its maintainer is still its parent."""


def _exit_with_parent(parent: int) -> None:
    """End this worker once ``parent`` is no longer its parent (it died: the worker was
    reparented). A job it was running is left as a killed worker's is: uncommitted, its
    files orphans for GC, the job run again by the next maintainer."""
    while True:
        time.sleep(PARENT_WATCH_SECONDS)
        if os.getppid() != parent:
            os._exit(1)


def _ready() -> None:
    """A worker's first call: it returns once the worker has started and imported Sediment."""


class WorkerProcesses:
    """A pool of ``processes`` spawned workers that runs compaction jobs, replaced when a
    worker dies (see the module docstring)."""

    def __init__(self, processes: int) -> None:
        self.processes = processes
        self._lock = threading.Lock()
        self._pool = self._new_pool()
        self.replaced = 0
        """How many times a broken pool was replaced (a worker died)."""

    def _new_pool(self) -> ProcessPoolExecutor:
        """A pool whose workers start now: a spawned worker takes a second or more to import
        Sediment, PyArrow and DataFusion, which the first jobs would otherwise wait for
        while new files pile up (a spawn pool starts a worker per submitted call)."""
        pool = ProcessPoolExecutor(self.processes, initializer=_ignore_stop_signals,
                                   initargs=(os.getpid(),),
                                   mp_context=multiprocessing.get_context("spawn"))
        for _ in range(self.processes):
            pool.submit(_ready)
        return pool

    def pids(self) -> list[int]:
        """The worker processes' ids (those started so far)."""
        with self._lock:
            procs = getattr(self._pool, "_processes", None) or {}
            return list(procs)

    def execute(self, table: TableHandle, job: CompactionJob, region: Region,
                head: Head | None = None) -> JobOutput | str:
        """Run ``job`` in a worker with the schema and settings of ``head`` (else of the
        table's head read now): its output, or why it failed."""
        objects = table.objects
        head = table.read_head() if head is None else head
        args = (objects.uri, objects.reopen_options(), table.name, head.schema,
                dict(head.settings), job, region, sums_of(head.state, job.inputs),
                {**deletes_of(head.state, job, region), "schemas": head.state.schemas})
        for _ in range(RETRIES):
            with self._lock:
                pool = self._pool
            try:
                return pool.submit(_execute, *args).result()
            except BrokenProcessPool:
                with self._lock:
                    if self._pool is pool:  # the first thread to see it replaces it
                        pool.shutdown(wait=False, cancel_futures=True)
                        self._pool = self._new_pool()
                        self.replaced += 1
        return (f"compaction job {job.job_id}: the worker process running it died "
                f"{RETRIES} times")

    def run_job(self, table: TableHandle, state: TableState, job: CompactionJob, *,
                head: Head | None = None) -> JobResult:
        """``run_job`` with the work in a worker: started event and commit here (``head``:
        the head of ``state``, when the caller has it)."""
        record_job_started(table, job)
        try:
            if head is None:
                head = Head.of(state, table.name)
            out = self.execute(table, job, state.partitions[job.partition_id].region, head)
        except Exception as e:  # noqa: BLE001 - a worker's bug fails its job, not the daemon
            out = f"{type(e).__name__}: {e}"
        return commit_job(table, job, out, adopt=True)

    def close(self) -> None:
        with self._lock:
            self._pool.shutdown(wait=True, cancel_futures=True)
