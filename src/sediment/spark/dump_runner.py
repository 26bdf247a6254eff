"""Dump tasks as Spark tasks: the same ``run_dump_task_retried`` on executors."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sediment.dump.dump import DumpTask
    from sediment.handle import TableHandle
    from sediment.storage.base import ObjectStore


def run_tasks_on_spark(table: TableHandle, dest: ObjectStore, job_id: str, version: int,
                       tasks: Sequence[DumpTask], owner: str | None = None, *,
                       threads: int = 0,
                       on_done: Callable[[str, list[str]], None] | None = None) -> None:
    """Run ``tasks`` as Spark tasks (the ``"spark"`` dump runner of :mod:`sediment.runners`),
    calling ``on_done(task_id, manifest_paths)`` for each once all have run (Spark's own
    console bar shows them meanwhile; ``threads`` is the local runner's and unused here).
    With ``owner`` (the job's dump-lock owner) each task checks that the job still holds the
    table's dump lock before it writes: the driver's heartbeat keeps the lock fresh
    meanwhile, and a job another dump resumed is that dump's to write."""
    from pyspark.sql import SparkSession

    from sediment.spark.session import session

    spark = SparkSession.getActiveSession() or session()
    spec, name = table.store_spec(), table.name
    # executors resolve a relative path against their own working directory: give them the
    # destination's normalised URI (file:///abs/path or s3://...)
    root = dest.uri

    def run(task: DumpTask) -> tuple[str, list[str]]:
        from sediment.dump.dump import run_dump_task_retried
        from sediment.spark.tasks import open_handle

        t = open_handle(spec, name)
        return run_dump_task_retried(t, t.object_store_at(root), job_id, version, task, owner)

    done = spark.sparkContext.parallelize(list(tasks), max(1, len(tasks))).map(run).collect()
    for tid, paths in done:
        if on_done is not None:
            on_done(tid, paths)
