"""Code that runs inside Spark tasks (executors): reopening tables, assigning leaves, writing.

Everything here is a plain function of picklable arguments (a store spec, a table name, a
version), so the same functions serve bulk import, the data source and the compaction runner.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from sediment.core.model import FileSums
from sediment.core.state import TableState
from sediment.files.writer import WrittenFile
from sediment.handle import TableHandle, handle_of
from sediment.partitioning import LeafFinder, partitioning_of
from sediment.schema import Schema

_STORES: dict[str, Any] = {}
_TABLES: dict[tuple[str, str], Any] = {}
_LOCK = threading.Lock()

STAGED_SCHEMA = pa.schema([("filename", pa.string()), ("partition_id", pa.string()),
                           ("records", pa.int64()), ("bytes", pa.int64()),
                           # the file's FileSums, as its writer took them (null: none)
                           ("size", pa.int64()), ("footer_crc", pa.int64()),
                           ("file_crc", pa.int64()), ("sample_crc", pa.int64())])
"""One row per reference a task staged: what the driver commits (rows of one file repeat
its size and sums)."""
_SUM_FIELDS = ("size", "footer_crc", "file_crc", "sample_crc")
PID = "__sediment_leaf"
ORDER = "__sediment_order"
"""The column of an upsert's input order (bulk import): ``(origin << ORDER_SHIFT) +
position``, where the origin is a DataFrame's Spark partition index (what
``monotonically_increasing_id()`` numbers) or an input piece's index (files in the order
given, each file's pieces in order), and the position the row's within it."""
ORDER_SHIFT = 33
_INTERNAL = (PID, ORDER)
_STORE_OPTIONS = ("endpoint_url", "region", "access_key_id", "secret_access_key",
                  "session_token")


TRUST_OPTION = "trusted_iterator_modules"
"""The option giving the module prefixes whose python iterators the source's workers load
(comma separated), besides those their environment trusts: Spark starts a source's Python
workers with the JVM's environment, which a driver that trusted a module after its session
started cannot change (:func:`sediment.spark.read_table` and :func:`sediment.spark.co_join`
set it from the driver's; ``spark.read.format("sediment")`` and
``spark.readStream.format("sediment")`` take it from their caller)."""


def trust_options(options: Mapping[str, str]) -> None:
    """Trust, in this worker, the modules the :data:`TRUST_OPTION` option names."""
    from sediment.iterators.trust import trust_iterator_modules

    given = options.get(TRUST_OPTION, "")
    trust_iterator_modules(p for p in given.split(",") if p.strip())


def options_spec(options: Mapping[str, str]) -> dict[str, Any]:
    """The store spec of the data source's options ``store`` and the S3 options (what
    :func:`open_table` takes); QueryError when option ``store`` or ``table`` is missing."""
    from sediment.errors import QueryError

    if "store" not in options or "table" not in options:
        raise QueryError("the sediment data source needs options 'store' and 'table'")
    return {"uri": options["store"], **{k: options[k] for k in _STORE_OPTIONS if k in options}}


def open_table(spec: dict[str, Any], name: str, table_id: str | None = None) -> Any:
    """The table, kept open once per executor process.

    A table dropped and re-created under the same name is another table: with ``table_id``
    (taken when the job was planned) a task gets that table or TableNotFoundError, never the
    new one with the old one's plan; without it, the catalog is checked (one small read) and
    a stale cached table is replaced.
    """
    from sediment.errors import TableNotFoundError
    from sediment.store import Store

    key = (repr(sorted(spec.items())), name)
    with _LOCK:
        store = _STORES.get(key[0])
        if store is None:
            store = _STORES[key[0]] = Store.from_spec(spec)
        t = _TABLES.get(key)
        if t is None or t.table_id != (table_id or store.table(name).table_id):
            t = _TABLES[key] = store.table(name)
    if table_id is not None and t.table_id != table_id:
        raise TableNotFoundError(f"table {name} was dropped (and perhaps re-created) while a "
                                 f"Spark job on it was running")
    return t


def open_handle(spec: dict[str, Any], name: str, table_id: str | None = None) -> TableHandle:
    """The handle of :func:`open_table`'s table: what services run on an executor take."""
    return handle_of(open_table(spec, name, table_id))


def boundary_table(state: TableState) -> LeafFinder:
    """What finds each row's leaf among ``state``'s leaves, by its partitioning
    (:meth:`sediment.partitioning.Partitioning.leaf_finder`): its ``boundaries``, when
    set, are the leaves' row-key minimums a JVM can count."""
    return partitioning_of(state).leaf_finder(state)


def leaf_indices(data: pa.Table | pa.RecordBatch, names: Sequence[str],
                 boundaries: LeafFinder) -> np.ndarray:
    """Index (in key order) of each row's leaf partition, vectorised."""
    return boundaries.indices(data, names)


def conform_batches(batches: Iterator[pa.RecordBatch], schema: Schema, table_name: str,
                    source: str) -> Iterator[pa.RecordBatch]:
    """Each batch checked and cast to the table's schema (DataError naming field and row)."""
    from sediment.ingest.sources import conform

    offset = 0
    for b in batches:
        yield conform(b, schema, table_name, offset, source)
        offset += b.num_rows


def assign_leaves(batches: Iterator[pa.RecordBatch], schema: Schema, table_name: str,
                  boundaries: LeafFinder, buckets: Sequence[int]
                  ) -> Iterator[pa.RecordBatch]:
    """Validate each batch and add the shuffle column (a bucket value per leaf)."""
    from sediment.ingest.sources import conform

    bucket_arr = np.asarray(buckets, dtype=np.int64)
    offset = 0
    for b in batches:
        c = conform(b, schema, table_name, offset, "Spark input")
        offset += b.num_rows
        yield with_leaf_column(c, schema.row_key_names, boundaries, bucket_arr)


def with_leaf_column(batch: pa.RecordBatch, names: Sequence[str],
                     boundaries: LeafFinder,
                     bucket_arr: np.ndarray) -> pa.RecordBatch:
    """``batch`` (already conformed) with the shuffle column: its leaf's bucket value."""
    idx = leaf_indices(batch, names, boundaries)
    return batch.append_column(PID, pa.array(bucket_arr[idx]))


def with_order(batches: Iterable[pa.RecordBatch], origin: int, position: int = 0
               ) -> Iterator[pa.RecordBatch]:
    """The batches with the :data:`ORDER` column appended: rows numbered in order from
    ``position`` within ``origin`` (a Spark partition index, or an input piece's)."""
    for b in batches:
        start = (origin << ORDER_SHIFT) + position
        yield b.append_column(ORDER, pa.array(np.arange(start, start + b.num_rows,
                                                        dtype=np.int64)))
        position += b.num_rows


def stage_partition(batches: Iterator[pa.RecordBatch], spec: dict[str, Any], name: str,
                    version: int, table_id: str | None = None,
                    splits: Sequence[Any] = (), verb: str = "ingest"
                    ) -> Iterator[pa.RecordBatch]:
    """Sort and write one Spark partition's rows as data files (not committed), cut at the
    leaves of ``version`` with ``splits`` (SplitPartition transactions the driver plans to
    commit with the files) applied in memory; ``verb``: the write, as errors name it."""
    from sediment.ingest.standard import stage_batches

    table = open_handle(spec, name, table_id)
    state = table.state(version)
    if splits:
        state = state.copy()
        for s in splits:
            s.apply(state, 0.0)

    def rows() -> Iterator[tuple[str, pa.RecordBatch]]:
        for b in batches:
            internal = [c for c in _INTERNAL if c in b.schema.names]
            if internal:
                b = b.drop_columns(internal)
            yield "Spark input", b

    # one writer: the executor's other cores run other tasks (Spark's parallelism)
    staged = stage_batches(table, state, rows(), writers=1, verb=verb)
    if staged.staging is not None:
        # the driver adopts the files before committing them; this Python worker outlives the
        # task, so its lease would protect them (orphans, if the import fails) for as long as
        # it lives. A new file is no orphan for gc.orphan_timeout_seconds: handing over is safe.
        staged.staging.hand_over()
    if not staged.references:
        return
    files = {w.filename: w for w in staged.written}
    yield pa.RecordBatch.from_pylist(
        [{"filename": r.filename, "partition_id": r.partition_id, "records": r.records,
          **_staged_file(files.get(r.filename))} for r in staged.references],
        schema=STAGED_SCHEMA)


def _staged_file(w: WrittenFile | None) -> dict[str, Any]:
    sums = None if w is None else w.sums
    return {"bytes": 0 if w is None else w.bytes,
            **dict(zip(_SUM_FIELDS, sums or (None,) * 4, strict=True))}


def staged_written(rows: Iterable[Any]) -> list[WrittenFile]:
    """The files of STAGED_SCHEMA rows (Spark Rows or dicts), each once, with their sums
    (rows from a task of an older Sediment have none)."""
    out: dict[str, WrittenFile] = {}
    for r in rows:
        size = _field(r, "size")
        sums = None if size is None else FileSums(
            int(size), int(r["footer_crc"]), int(r["file_crc"]),
            None if r["sample_crc"] is None else int(r["sample_crc"]))
        out[r["filename"]] = WrittenFile(r["filename"], 0, int(r["bytes"]), sums)
    return list(out.values())


def _field(row: Any, name: str) -> Any:
    try:
        return row[name]
    except (KeyError, ValueError):  # a Spark Row without the field raises ValueError
        return None
