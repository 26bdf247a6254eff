"""The Spark runner for compaction: jobs run as Spark tasks, commits go from the driver.

``table.compact(runner="spark")`` and ``sediment maintain --spark`` use it. Each task runs
:func:`~sediment.compaction.job.run_compaction_job` on an executor and returns the output file;
the driver then commits one ReplaceFileReferences per job (the state store's compare-and-swap
makes a duplicate or late commit fail cleanly, leaving an orphan for GC).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from sediment.compaction.runner import JobResult
from sediment.compaction.strategy import CompactionJob
from sediment.core.model import FileReference
from sediment.core.state import TableState
from sediment.core.transactions import ReplaceFileReferences
from sediment.errors import SedimentError
from sediment.state import pending

if TYPE_CHECKING:
    from sediment.table import Table


def _run_on_executor(spec: dict[str, Any], name: str, job: CompactionJob,
                     region: Any, table_id: str | None = None) -> dict[str, Any]:
    from sediment.compaction.job import run_compaction_job
    from sediment.spark.tasks import open_table

    table = open_table(spec, name, table_id)
    try:
        out = run_compaction_job(table.objects, table.schema, table.properties, job, region,
                                 table.compaction_iterators())
    except (SedimentError, OSError) as e:  # as the local runner: one bad job fails alone
        return {"job_id": job.job_id, "error": f"{type(e).__name__}: {e}"}
    w = out.written
    return {"job_id": job.job_id, "filename": w.filename if w else None,
            "rows": w.rows if w else 0, "bytes": w.bytes if w else 0,
            "rows_in": out.rows_in, "seconds": out.seconds}


def run_jobs_on_spark(table: Table, state: TableState,
                      jobs: Sequence[CompactionJob]) -> list[JobResult]:
    from pyspark.sql import SparkSession

    from sediment.spark.session import session

    spark = SparkSession.getActiveSession() or session()
    spec, name, table_id = table.store.spec(), table.name, table.table_id
    work = [(j, state.partitions[j.partition_id].region) for j in jobs]
    outputs = spark.sparkContext.parallelize(work, max(1, len(work))).map(
        lambda jr: _run_on_executor(spec, name, jr[0], jr[1], table_id)).collect()
    by_id = {o["job_id"]: o for o in outputs}
    results = []
    for j in jobs:
        o = by_id[j.job_id]
        if "error" in o:
            table.status.record("compaction", j.job_id, "failed", partition_id=j.partition_id,
                                reason=o["error"])
            results.append(JobResult(j, False, error=o["error"]))
            continue
        output = None if o["filename"] is None else FileReference(o["filename"],
                                                                   j.partition_id, o["rows"])
        if output is not None:  # written by an executor: the driver's to protect now
            pending.register(table.objects, [output.filename])
        try:
            table.states.commit(ReplaceFileReferences(
                j.job_id, j.partition_id, tuple(r.filename for r in j.inputs), output))
        except SedimentError as e:
            reason = f"{type(e).__name__}: {e}"
            table.status.record("compaction", j.job_id, "failed", partition_id=j.partition_id,
                                reason=reason)
            results.append(JobResult(j, False, error=reason))
            continue
        table.status.record("compaction", j.job_id, "committed", partition_id=j.partition_id,
                            rows_in=o["rows_in"], rows_out=o["rows"], seconds=o["seconds"])
        results.append(JobResult(j, True, o["rows_in"], o["rows"], o["bytes"], o["seconds"]))
    return results
