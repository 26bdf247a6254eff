"""``df.write.format("sediment")``'s writer, and what the streaming sink shares with it.

Each task validates, sorts and writes its rows as files cut at leaf boundaries
(:func:`stage_message`); the driver commits all files in one AddFiles transaction (abort
deletes them: :func:`delete_staged`). ``sediment.spark.datasource`` describes the options
and save modes; ``sediment.spark.sink`` commits a stream's micro-batches from the same
staging.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from sediment.spark import tasks
from sediment.spark.tasks import options_spec as _spec

WRITES = ("append", "upsert")
"""The values of the writer's option ``write``."""


@dataclass
class StagedMessage(WriterCommitMessage):
    """Files one write task staged: rows of ``tasks.STAGED_SCHEMA`` as dicts."""

    rows: list[dict[str, Any]]


def write_kind(options: Mapping[str, str]) -> str:
    """The writer's option ``write`` (default ``append``), one of :data:`WRITES`; QueryError
    naming the table, the option and the values it takes otherwise (before any task runs)."""
    from sediment.errors import QueryError

    given = options.get("write", "append")
    if given.strip().lower() not in WRITES:
        raise QueryError(f"the sediment data source writing to table {options.get('table')}: "
                         f"option write={given!r} is not one of {', '.join(WRITES)}")
    return given.strip().lower()


def check_fields(table: Any, schema: StructType, verb: str = "ingest") -> None:
    """The DataFrame's field names checked against ``table``'s as each write task checks its
    rows (``conform``: a field twice, one the table lacks, one missing), before any task
    runs: the same DataError, at once rather than from every task of a failing job (types
    and values are still checked by the tasks, on the batches Spark gives them)."""
    from sediment.ingest.sources import conform

    wanted = table.schema.to_arrow()
    fields = [wanted.field(n) if n in wanted.names else pa.field(n, pa.null())
              for n in schema.fieldNames()]
    conform(pa.RecordBatch.from_arrays([pa.array([], f.type) for f in fields],
                                       schema=pa.schema(fields)),
            table.schema, table.name, 0, "Spark input", verb=verb)


class SedimentWriter(DataSourceArrowWriter):
    """Stages each task's rows; the driver commits every task's files in one AddFiles
    (``upsert`` by option ``write``, ``overwrite`` by the save mode)."""

    def __init__(self, options: dict[str, str], *, overwrite: bool = False) -> None:
        self.spec = _spec(options)
        self.name = options["table"]
        self.upsert = write_kind(options) == "upsert"
        self.overwrite = overwrite
        table = tasks.open_table(self.spec, self.name)
        self.table_id = table.table_id
        self.version = table.version

    def write(self, iterator: Iterator[pa.RecordBatch]) -> StagedMessage:
        from sediment.ingest.standard import verb_of

        return stage_message(iterator, self.spec, self.name, self.version, self.table_id,
                             verb_of(self.upsert))

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        import time

        from sediment.core.model import FileReference
        from sediment.ingest.standard import StagedFiles, commit_staged

        # in the messages' order, which is the Spark partitions' (Spark indexes them so): the
        # files' ranks in the commit, hence their sequences, follow the partitions
        rows = [r for m in messages if isinstance(m, StagedMessage) for r in m.rows]
        table = tasks.open_handle(self.spec, self.name, self.table_id)
        refs = [FileReference(r["filename"], r["partition_id"], int(r["records"]))
                for r in rows]
        written = tasks.staged_written(rows)
        try:
            commit_staged(table, StagedFiles(sum(r.records for r in refs), refs, written),
                          time.perf_counter(), kind="bulk_import", upsert=self.upsert,
                          overwrite=self.overwrite)
        except BaseException as e:
            self._commit_error: BaseException | None = e
            raise

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        from sediment.errors import TableNotFoundError
        from sediment.state.store import definitely_not_committed

        error = getattr(self, "_commit_error", None)
        if error is not None and not definitely_not_committed(error):
            return  # the commit may have landed: GC's orphan pass judges the files later
        if isinstance(error, TableNotFoundError):
            return  # dropped: the commit deleted the files at once (its state is gone too)
        delete_staged(self.spec, self.name, self.table_id, messages)


def stage_message(iterator: Iterator[pa.RecordBatch], spec: dict[str, Any], name: str,
                  version: int, table_id: str, verb: str = "ingest") -> StagedMessage:
    """A write task's work: its rows sorted and written as files cut at the leaves of
    ``version`` (not committed), and the message naming them for the driver."""
    rows: list[dict[str, Any]] = []
    for b in tasks.stage_partition(iterator, spec, name, version, table_id, verb=verb):
        rows.extend(b.to_pylist())
    return StagedMessage(rows)


def delete_staged(spec: dict[str, Any], name: str, table_id: str,
                  messages: list[WriterCommitMessage | None]) -> None:
    """Delete the files ``messages`` staged that no version of the head references (for a
    write whose commit surely did not land)."""
    from sediment.files.sidecars import with_sidecars

    table = tasks.open_handle(spec, name, table_id)
    names = {r["filename"] for m in messages if isinstance(m, StagedMessage) for r in m.rows}
    state = table.states.head()  # never delete a file some version references
    names -= set(state.refcount) | set(state.unreferenced)
    table.objects.delete_many(with_sidecars(names))
