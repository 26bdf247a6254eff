"""``df.writeStream.format("sediment")``: the Structured Streaming sink, exactly once.

Options: ``store``, ``table`` and the S3 options as the batch writer's, ``checkpointLocation``
(Spark's), ``write`` (``append``, the default: the rows are ingested; ``upsert``: as
``Table.upsert``, the batch writer's option) and, for a checkpoint Python cannot read,
``streamId``.

Each micro-batch is one transaction. Spark's tasks stage the batch's rows as files in
parallel, as the batch writer's tasks do (cut at the leaves of the head when the batch was
planned); the driver commits them all in one AddFiles that carries the batch's
:class:`~sediment.core.transactions.StreamMark` (the stream's identity and the batch id), and
the table state keeps each stream's last committed batch (Delta's ``SetTransaction``). A batch
Spark runs again after its driver died between this commit and its own checkpoint is
recognised in the state and adds nothing (:func:`sediment.ingest.streams.commit_stream_batch`
says how every outcome of the commit is read back, never guessed).

The stream's identity is the query id Spark keeps in ``<checkpointLocation>/metadata``
(PySpark 4.3 hands the option to the data source): a restart from the checkpoint keeps it, a
deleted checkpoint gives the next run a new id, whose batch ids start again at 0 as a new
sequence, so no batch of it is taken for a replay. Option ``streamId`` names the stream
instead, for a checkpoint on a file system Sediment cannot open (``hdfs://``): the run that
reuses it with a new checkpoint is refused at its first batch (its batch ids go back), never
silently skipped, unless the old run had committed only its batch 0.

Abort (a task failed, so no commit was tried): the staged files no version references are
deleted at once. Files a driver killed between staging and commit leaves, and those of a
commit whose outcome stayed unknown, are orphans for GC's orphan pass
(``gc.orphan_timeout_seconds`` after they were written).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamArrowWriter, WriterCommitMessage

from sediment.spark import tasks
from sediment.spark.tasks import options_spec as _spec
from sediment.spark.writer import StagedMessage, delete_staged, stage_message, write_kind

METADATA = "metadata"
"""The file under a checkpoint location where Spark keeps the query id."""


def stream_identity(options: Mapping[str, str], spec: Mapping[str, Any]) -> str:
    """The stream's identity: option ``streamId``, else the query id in
    ``<checkpointLocation>/metadata`` (read with the store's S3 options on ``s3://`` and
    ``s3a://``). QueryError naming the table when neither can be had."""
    from sediment.errors import QueryError, SedimentError
    from sediment.storage.registry import open_object_store_beside

    where = f"the sediment streaming sink writing to table {options.get('table')}"
    named = {k.lower(): v for k, v in options.items()}  # Spark lower-cases option names
    if "streamid" in named:
        given = named["streamid"].strip()
        if not given:
            raise QueryError(f"{where}: option streamId is empty")
        return given
    location = named.get("checkpointlocation")
    if not location:
        raise QueryError(f"{where}: give the query option checkpointLocation (the query id "
                         f"Spark keeps there is the stream's identity, by which a replayed "
                         f"batch is recognised), or option streamId")
    root = location.rstrip("/")
    for alias in ("s3a://", "s3n://"):
        if root.startswith(alias):
            root = "s3://" + root[len(alias):]
    try:
        doc = json.loads(open_object_store_beside(root, spec).get(METADATA))
        query_id = str(doc["id"])
    except (SedimentError, ValueError, KeyError, TypeError) as e:
        raise QueryError(f"{where}: cannot read the query id from {location}/{METADATA} "
                         f"({e}); give option streamId (a name for this stream, new for each "
                         f"new checkpoint)") from e
    return query_id


class SedimentStreamWriter(DataSourceStreamArrowWriter):
    """Stages each task's rows; the driver commits a micro-batch's files in one AddFiles
    marked with the stream and batch (see the module)."""

    def __init__(self, options: dict[str, str], *, overwrite: bool = False) -> None:
        self.spec = _spec(options)
        self.name = options["table"]
        self.upsert = write_kind(options) == "upsert"
        self.overwrite = overwrite
        self.stream_id = stream_identity(options, self.spec)
        table = tasks.open_table(self.spec, self.name)
        self.table_id = table.table_id
        # Spark asks for a writer for every micro-batch: each batch is staged on the leaves
        # of the head at its planning
        self.version = table.version

    def write(self, iterator: Iterator[pa.RecordBatch]) -> StagedMessage:
        from sediment.ingest.standard import verb_of

        return stage_message(iterator, self.spec, self.name, self.version, self.table_id,
                             verb_of(self.upsert))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int  # noqa: N803
               ) -> None:
        self.commit_batch(messages, batchId)

    def commit_batch(self, messages: list[WriterCommitMessage | None], batch_id: int
                     ) -> bool:
        """Commit one micro-batch (see :meth:`commit`); False when the table had it already
        or it was empty (nothing added)."""
        from sediment.core.model import FileReference
        from sediment.core.transactions import StreamMark
        from sediment.ingest.standard import StagedFiles
        from sediment.ingest.streams import commit_stream_batch

        # in the messages' order, the Spark partitions': the files' ranks in the commit,
        # hence their sequences (which record an upsert keeps), follow the partitions
        rows = [r for m in messages if isinstance(m, StagedMessage) for r in m.rows]
        refs = [FileReference(r["filename"], r["partition_id"], int(r["records"]))
                for r in rows]
        staged = StagedFiles(sum(r.records for r in refs), refs, tasks.staged_written(rows))
        table = tasks.open_handle(self.spec, self.name, self.table_id)
        done = commit_stream_batch(table, staged, StreamMark(self.stream_id, int(batch_id)),
                                   upsert=self.upsert, overwrite=self.overwrite)
        return done.committed

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int  # noqa: N803
              ) -> None:
        """A task failed (a None among ``messages``): no commit was tried, so the files
        staged are deleted. Otherwise the batch's commit may have been tried (it settles its
        files itself: deleted when surely refused, kept when its outcome is unknown), so
        nothing is deleted here: what is left is an orphan for GC."""
        if not messages or all(m is not None for m in messages):
            return
        delete_staged(self.spec, self.name, self.table_id, messages)
