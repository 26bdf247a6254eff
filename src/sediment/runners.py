"""Runners: which function runs a kind of job (compaction, dump, the batcher's imports) where.

A runner is named by a mode string (``runner="local"``, ``runner="spark"``) and registered here
as a dotted path ``"module:function"``, imported only when that runner is chosen. So the rooms
that run jobs (the table, dumps, the batcher) name no runner module: a Spark runner sits above
them (it takes a table and reopens its store on executors) and is reached without an import,
as pyiceberg reaches its FileIO implementations. Importing a Spark runner without pyspark raises
:class:`~sediment.errors.MissingDependencyError` (the ``sediment.spark`` package checks).

The functions of one kind take the same arguments, so a caller never asks which runner it has:

- ``compaction``: ``run(table, state, jobs, *, on_done=None, head=None) -> list[JobResult]``
  runs a pass's jobs planned on ``state`` and commits each (``on_done(result)`` as each ends);
  see :data:`sediment.compaction.runner.JobRunner`.
- ``dump``: ``run(table, dest, job_id, version, tasks, owner=None, *, threads=0,
  on_done=None) -> None`` runs a dump's tasks, calling ``on_done(task_id, manifest_paths)``
  as each task's output is written.
- ``batcher``: ``run(table, paths, *, before_commit, spill_dir=None, spark=None) ->
  IngestResult`` imports one batch of files in one transaction (the local runner ingests them
  here; the Spark runner bulk-imports them on ``spark``).

``register_runner`` adds another (a test double, a new engine).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from sediment.errors import JobError

_RUNNERS: dict[str, dict[str, str]] = {
    "compaction": {
        "local": "sediment.compaction.runner:run_jobs_locally",
        "spark": "sediment.spark.runner:run_jobs_on_spark",
    },
    "dump": {
        "local": "sediment.dump.local_runner:run_tasks_locally",
        "spark": "sediment.spark.dump_runner:run_tasks_on_spark",
    },
    "batcher": {
        "local": "sediment.ingest.batcher:ingest_batch",
        "spark": "sediment.spark.batcher_runner:bulk_import_batch",
    },
}
"""Job kind -> runner name -> ``"module:function"``: the built-in runners."""


def register_runner(kind: str, name: str, path: str) -> None:
    """Run jobs of ``kind`` with the function at ``path`` (``"package.module:function"``)
    when ``runner=name`` is chosen (replacing any earlier runner of that name). The function
    is imported when chosen, not now; it takes the kind's arguments (see the module docs)."""
    module, sep, function = path.partition(":")
    if kind not in _RUNNERS:
        raise JobError(f"unknown job kind {kind!r} for runner {name!r} (kinds: "
                       f"{', '.join(sorted(_RUNNERS))})")
    if not (module and sep and function):
        raise JobError(f"{kind} runner {name!r}: {path!r} is not a dotted path "
                       "'package.module:function'")
    _RUNNERS[kind][name] = path


def runner_names(kind: str) -> list[str]:
    """The runners registered for ``kind``, sorted."""
    return sorted(_RUNNERS.get(kind, {}))


def runner_path(kind: str, name: str, *, table: str | None = None) -> str:
    """The dotted path of runner ``name`` for ``kind``; JobError naming the runner (and the
    table, when given) and listing the known runners for an unknown name."""
    path = _RUNNERS.get(kind, {}).get(name)
    if path is None:
        whose = f"table {table}: " if table else ""
        raise JobError(f"{whose}unknown {kind} runner {name!r} (runners: "
                       f"{', '.join(runner_names(kind)) or 'none'})")
    return path


def load_runner(kind: str, name: str, *, table: str | None = None) -> Callable[..., Any]:
    """The function that runs ``kind`` jobs on runner ``name``, imported now.

    Raises JobError for an unknown runner (see :func:`runner_path`) or a path that names no
    function; MissingDependencyError when the runner needs an extra that is not installed
    (``"spark"`` without pyspark)."""
    path = runner_path(kind, name, table=table)
    module, _, function = path.partition(":")
    try:
        loaded = importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name is None or not (module == e.name or module.startswith(e.name + ".")):
            raise  # a module the runner's module imports: not the registration at fault
        raise JobError(f"{kind} runner {name!r}: no module {module!r} (from {path!r})") from None
    fn = getattr(loaded, function, None)
    if not callable(fn):
        raise JobError(f"{kind} runner {name!r}: {path!r} names no function")
    return fn
