"""The local dump runner: a dump's tasks in threads of this process (``runner="local"``).

The ``"local"`` dump runner of :mod:`sediment.runners`; Spark's
(:mod:`sediment.spark.dump_runner`) takes the same arguments and runs the same
:func:`~sediment.dump.dump.run_dump_task_retried` on executors.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from sediment.dump.dump import DumpTask, run_dump_task_retried

if TYPE_CHECKING:
    from sediment.handle import TableHandle
    from sediment.storage.base import ObjectStore


def run_tasks_locally(table: TableHandle, dest: ObjectStore, job_id: str, version: int,
                      tasks: Sequence[DumpTask], owner: str | None = None, *, threads: int = 0,
                      on_done: Callable[[str, list[str]], None] | None = None) -> None:
    """Run ``tasks`` in up to ``threads`` threads (0: one per CPU), calling
    ``on_done(task_id, manifest_paths)`` on this thread as each ends, in the tasks' order.
    ``owner``: see :func:`~sediment.dump.dump.run_dump_task_retried`."""
    n = threads or os.cpu_count() or 2
    with ThreadPoolExecutor(max(1, min(n, len(tasks) or 1))) as pool:
        for tid, paths in pool.map(
                lambda t: run_dump_task_retried(table, dest, job_id, version, t, owner), tasks):
            if on_done is not None:
                on_done(tid, paths)
