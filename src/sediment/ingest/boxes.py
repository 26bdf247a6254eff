"""Standard ingest into box partitions (``partitioning="dimensions"``).

A sorted stream does not visit box leaves one after another (rows of one leaf are spread over
the whole key order), so each batch is split by leaf (:func:`assign_leaves`) and every touched
leaf has its own open writer; each gets its rows in order, so each file is sorted. With the
``shared_file`` strategy the stream goes to one file referenced from every leaf it touches,
with that leaf's exact count."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pyarrow as pa

from sediment.core.head import schema_of
from sediment.core.model import FileReference
from sediment.core.state import TableState
from sediment.files.cells import assign_leaves
from sediment.files.writer import SortedFileWriter, WrittenFile

if TYPE_CHECKING:
    from sediment.files.staging import Staging
    from sediment.handle import TableHandle
    from sediment.settings import TableSettings


def write_boxes(table: TableHandle, state: TableState, settings: TableSettings,
                stream: Iterator[pa.RecordBatch], strategy: str,
                open_writers: list[SortedFileWriter],
                written: list[WrittenFile], staging: Staging) -> list[FileReference]:
    """Write the stream into the leaves' files (with the ``settings`` of ``state``; each
    staged in ``staging`` before it is created); returns their references. ``open_writers``
    and ``written`` hold the writers still open and the files closed, so that the caller
    aborts and deletes them on failure."""
    schema = schema_of(state, table.name)
    props = settings
    names = schema.row_key_names
    writers: dict[str, SortedFileWriter] = {}
    counts: dict[str, int] = {}
    for batch in stream:
        for leaf, rows in assign_leaves(batch, names, state.partitions):
            counts[leaf.id] = counts.get(leaf.id, 0) + len(rows)
            key = "shared" if strategy == "shared_file" else leaf.id
            writer = writers.get(key)
            if writer is None:
                writer = SortedFileWriter(table.objects, staging.new_file(key), schema, props)
                writers[key] = writer
                open_writers.append(writer)
            # one shared file takes the batch whole (it is sorted); per leaf, its rows
            if strategy != "shared_file":
                writer.write(batch.take(pa.array(rows)))
        if strategy == "shared_file" and "shared" in writers:
            writers["shared"].write(batch)
    refs: list[FileReference] = []
    for key, writer in writers.items():
        w = writer.close()
        open_writers.remove(writer)
        written.append(w)
        if key == "shared":
            refs.extend(FileReference(w.filename, pid, n) for pid, n in counts.items())
        else:
            refs.append(FileReference(w.filename, key, w.rows))
    return refs
