"""The Spark runner for compaction: jobs run as Spark tasks, commits go from the driver.

``table.compact(runner="spark")`` and ``sediment maintain --spark`` use it (the ``"spark"``
compaction runner of :mod:`sediment.runners`, imported only when chosen). Each task runs
:func:`~sediment.compaction.runner.execute_job` on an executor and returns the output file;
the driver then ends each job with :func:`~sediment.compaction.runner.commit_job`, as the local
runner does (the state store's compare-and-swap makes a duplicate or late commit fail cleanly,
leaving an orphan for GC).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from sediment.compaction.job import JobOutput
from sediment.compaction.runner import JobResult, commit_job, record_job_started
from sediment.compaction.strategy import CompactionJob
from sediment.core.model import FileSums
from sediment.core.state import TableState
from sediment.files.writer import WrittenFile
from sediment.iterators.trust import trusted_iterator_modules

if TYPE_CHECKING:
    from sediment.core.head import Head
    from sediment.handle import TableHandle


def _run_on_executor(spec: dict[str, Any], name: str, job: CompactionJob, region: Any,
                     table_id: str | None = None, trusted: tuple[str, ...] = ()
                     ) -> dict[str, Any]:
    from sediment.compaction.runner import execute_job
    from sediment.iterators.trust import trust_iterator_modules
    from sediment.spark.tasks import open_handle

    trust_iterator_modules(trusted)  # the driver's (an executor's environment may predate it)

    out = execute_job(open_handle(spec, name, table_id), job, region)
    if isinstance(out, str):
        return {"job_id": job.job_id, "error": out}
    # the driver adopts the file before committing it; the executor's Python worker outlives
    # the task, so its lease would protect the file (an orphan, if the commit fails) for as
    # long as the worker lives. A new file is no orphan for gc.orphan_timeout_seconds, so
    # handing it over here is safe.
    w = out.handed_over().written
    return {"job_id": job.job_id, "filename": w.filename if w else None,
            "rows": w.rows if w else 0, "bytes": w.bytes if w else 0,
            "sums": list(w.sums) if w and w.sums else None,
            "rows_in": out.rows_in, "seconds": out.seconds, "settles": out.settles,
            "upserts": out.upserts}


def _output(o: dict[str, Any]) -> JobOutput | str:
    if "error" in o:
        return str(o["error"])
    sums = o.get("sums")
    written = None if o["filename"] is None else WrittenFile(
        o["filename"], o["rows"], o["bytes"], None if sums is None else FileSums(*sums))
    return JobOutput(written, o["rows_in"], o["seconds"], settles=int(o.get("settles", 0)),
                     upserts=bool(o.get("upserts", False)))


def run_jobs_on_spark(table: TableHandle, state: TableState, jobs: Sequence[CompactionJob], *,
                      on_done: Callable[[JobResult], None] | None = None,
                      head: Head | None = None) -> list[JobResult]:
    """Run ``jobs`` as Spark tasks, then commit each from the driver (``on_done`` as each
    commit ends); a :class:`~sediment.compaction.runner.JobRunner`, the ``"spark"``
    compaction runner of :mod:`sediment.runners`. ``head`` is unused: executors reopen the
    table, and the commits read nothing of it."""
    from pyspark.sql import SparkSession

    from sediment.spark.session import session

    spark = SparkSession.getActiveSession() or session()
    spec, name, table_id = table.store_spec(), table.name, table.table_id
    trusted = trusted_iterator_modules()
    for j in jobs:
        record_job_started(table, j)
    work = [(j, state.partitions[j.partition_id].region) for j in jobs]
    outputs = spark.sparkContext.parallelize(work, max(1, len(work))).map(
        lambda jr: _run_on_executor(spec, name, jr[0], jr[1], table_id, trusted)).collect()
    by_id = {o["job_id"]: o for o in outputs}
    results = []
    for j in jobs:  # written by executors: the driver's to protect now (adopt)
        results.append(commit_job(table, j, _output(by_id[j.job_id]), adopt=True))
        if on_done is not None:
            on_done(results[-1])
    return results
