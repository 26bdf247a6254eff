"""Dump tasks as Spark tasks: the same ``run_dump_task`` on executors."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sediment.dump.dump import DumpTask
    from sediment.table import Table


def run_tasks_on_spark(table: Table, root: str, job_id: str, version: int,
                       tasks: Sequence[DumpTask]) -> list[tuple[str, list[str]]]:
    from pyspark.sql import SparkSession

    from sediment.spark.session import session

    spark = SparkSession.getActiveSession() or session()
    spec, name = table.store.spec(), table.name

    def run(task: DumpTask) -> tuple[str, list[str]]:
        from sediment.dump.dump import RETRIES, _dest, run_dump_task
        from sediment.errors import JobError, SedimentError
        from sediment.spark.tasks import open_table

        t = open_table(spec, name)
        dest = _dest(t, root)
        last: Exception | None = None
        for _ in range(RETRIES):
            try:
                return task.task_id, run_dump_task(t, dest, job_id, version, task)
            except SedimentError as e:
                last = e
        raise JobError(f"dump job {job_id}: task {task.task_id} failed: {last}")

    return spark.sparkContext.parallelize(list(tasks), max(1, len(tasks))).map(run).collect()
