"""Bulk import on Spark (Sleeper's, with Arrow all the way).

1. Validate the source's schema against the table (a DataFrame's fields, or files read with
   pyarrow inside tasks, so S3 needs no Hadoop connector).
2. Plan splits so that each leaf gets about ``bulk_import.target_leaf_rows`` of the input's
   rows, at quantiles of a sample of the input (``spark.planning``; no sample when the rows,
   known up front, cannot fill more than one leaf's target). The splits are not committed on
   their own: tasks write into the planned leaves, and the splits commit with the files
   (step 4).
3. Assign every row its leaf (vectorised in Python, or by Spark for a DataFrame with a simple
   key: :func:`_jvm_leaf_frame`) and shuffle by leaf. Spark hashes the shuffle key, and
   small integers 0..n-1 do not spread evenly over n partitions, so each leaf gets a key value
   chosen to hash to its own partition number: one Spark partition per leaf, no collisions.
4. Each task sorts its leaf's rows (spilling past the memory limit) and writes files and
   samples; the driver commits the splits and every file in one transaction (AddFilesWithSplits;
   AddFiles when nothing is split): one import, one commit. If the job fails nothing is
   committed, and files already written are orphans that GC removes.

Files are read in pieces (``spark.inputs``): Parquet by row groups, JSON lines by byte ranges,
so that one large file is read by every core.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from sediment.core.head import schema_of
from sediment.core.model import FileReference
from sediment.core.transactions import AddFilesWithSplits, SplitPartition
from sediment.errors import DataError, JobError, SedimentError
from sediment.files.staging import Staging
from sediment.handle import TableHandle, handle_of
from sediment.ingest.standard import IngestResult, StagedFiles, commit_staged, verb_of
from sediment.settings import settings_of
from sediment.spark import tasks
from sediment.spark.planning import plan_splits, planned_state, sample_input, spark_columns
from sediment.spark.sparktypes import for_spark, spark_struct

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from sediment.table import Table

Leaves = tuple[pa.Table, list[int]]
"""Boundaries of the leaves (``tasks.boundary_table``) and each leaf's shuffle key value."""


def _positional(names: Sequence[str]) -> list[str]:
    """The names the table's fields have inside Spark: ``c0``, ``c1``... by position.

    Spark parses a column name given as a string (a dot reaches into a struct, backticks
    quote), and ``mapInArrow`` itself looks every column of its input up by name, so a field
    named ``a.b`` or with a backtick cannot pass through it as it is. Frames carry positional
    names and every Python task renames the batches back to the table's own."""
    return [f"c{i}" for i in range(len(names))]


def _renamed(batches: Iterable[pa.RecordBatch], names: Sequence[str]
             ) -> Iterator[pa.RecordBatch]:
    """The batches with their columns renamed, in order, to ``names``."""
    for b in batches:
        yield b.rename_columns(list(names))


def _to_spark(batches: Iterable[pa.RecordBatch], schema: pa.Schema, table: str
              ) -> Iterator[pa.RecordBatch]:
    """The batches renamed to ``schema``'s names and cast to the types Spark holds."""
    for b in batches:
        yield for_spark(b.rename_columns(schema.names), schema, table)


def _partition_order(batches: Iterable[pa.RecordBatch], order: bool
                     ) -> Iterator[pa.RecordBatch]:
    """The batches of this task's Spark partition, with the :data:`tasks.ORDER` column when
    ``order``: the partition index and each row's position in it, as Spark's
    ``monotonically_increasing_id()`` numbers rows (each output batch holds its input
    batch's rows, in order)."""
    if not order:
        yield from batches
        return
    from pyspark import TaskContext

    context = TaskContext.get()
    yield from tasks.with_order(batches, 0 if context is None else context.partitionId())


def _source_frame(spark: SparkSession, table: TableHandle, source: Any,
                  leaves: Leaves | None = None, *, order: bool = False) -> DataFrame:
    """The source as a DataFrame of the table's fields (files are read inside tasks).

    With ``leaves``, every row also gets its leaf's shuffle key (``tasks.PID``) in the same
    Python pass that reads (files) or validates (a DataFrame) it: each pass through Python
    costs a conversion of every row in the JVM each way. With ``order`` (an upsert), it also
    gets its input order (``tasks.ORDER``, see :func:`bulk_import`).
    """
    from pyspark.sql import DataFrame

    arrow = table.schema.to_arrow()
    user = list(arrow.names)
    spark_names = _positional(user)
    out = arrow if leaves is None else arrow.append(pa.field(tasks.PID, pa.int64(), False))
    if order:
        out = out.append(pa.field(tasks.ORDER, pa.int64(), False))
    spark_out = pa.schema([f.with_name(spark_names[i]) if i < len(user) else f  # PID stays
                           # (and ORDER)
                           for i, f in enumerate(out)])
    if isinstance(source, DataFrame):
        names = source.columns
        for f in arrow:
            if f.name not in names:
                raise DataError(f"bulk import into table {table.name}: the DataFrame has no "
                                f"field {f.name!r}")
        extra = [n for n in names if n not in arrow.names]
        if extra:
            raise DataError(f"bulk import into table {table.name}: field {extra[0]!r} is not "
                            f"in the table's schema ({', '.join(arrow.names)})")
        # Validate (types, null keys) in the pass that assigns leaves: the splits commit only
        # with the files, so bad input commits nothing.
        schema, name = table.schema, table.name
        if leaves is not None:
            boundaries, buckets = leaves
            return source.select(*spark_columns(user, spark_names)).mapInArrow(
                lambda it: _to_spark(_partition_order(
                    tasks.assign_leaves(_renamed(it, user), schema, name, boundaries, buckets),
                    order), spark_out, name),
                spark_struct(spark_out))
        return source.select(*spark_columns(user, spark_names)).mapInArrow(
            lambda it: _to_spark(tasks.conform_batches(_renamed(it, user), schema, name,
                                                       "Spark input"), spark_out, name),
            spark_struct(spark_out))
    from sediment.spark.inputs import PIECE_DDL, piece_rows, read_piece

    pieces: list[Any] = source
    # an upsert's input order: pieces in the order planned (files as given, each file's
    # pieces in order), rows in each piece's order
    piece_index = {p: i for i, p in enumerate(pieces)} if order else {}
    spec, name, schema = table.store_spec(), table.name, table.schema
    key_names = schema.row_key_names
    listing = spark.createDataFrame(pieces, PIECE_DDL)
    listing = listing.repartition(max(1, min(len(pieces),
                                             spark.sparkContext.defaultParallelism * 3)))

    def read(batches: Any) -> Any:
        from sediment.ingest.sources import _filesystem_for

        t = tasks.open_handle(spec, name)
        bucket_arr = None if leaves is None else np.asarray(leaves[1], dtype=np.int64)
        for piece in piece_rows(batches):
            fs_name, path = piece[0], piece[1]
            uri = f"s3://{path}" if fs_name == "s3" else path
            fs, _ = _filesystem_for(uri, t.objects)
            rows: Iterator[pa.RecordBatch] = read_piece(fs, piece, schema, name)
            if leaves is not None and bucket_arr is not None:
                rows = (tasks.with_leaf_column(c, key_names, leaves[0], bucket_arr)
                        for c in rows)
            if order:
                rows = tasks.with_order(rows, piece_index[tuple(piece)])
            for c in rows:
                yield for_spark(c.rename_columns(spark_out.names), spark_out, name)

    return listing.mapInArrow(read, spark_struct(spark_out))


def _by_leaf(frame: DataFrame, leaves: int, upsert: bool) -> DataFrame:
    """``frame`` shuffled to one Spark partition per leaf (by ``tasks.PID``); for an upsert,
    each partition's rows sorted by input order (``tasks.ORDER``). A shuffle hands a reducer
    its rows in no defined order (blocks are fetched as they come); the stage's sort by key
    is stable, so rows in input order there make the last of a key's rows the winner."""
    shuffled = frame.repartition(leaves, tasks.PID)
    return shuffled.sortWithinPartitions(tasks.ORDER) if upsert else shuffled


JVM_LEAF_LIMIT = 64
"""Most leaves a DataFrame's rows are assigned to in the JVM (one comparison per boundary
per row); past it the Python pass's binary search is cheaper."""


def _jvm_leaf_frame(table: TableHandle, source: DataFrame, boundaries: Any,
                    buckets: Sequence[int], *, order: bool = False) -> DataFrame | None:
    """The DataFrame with positional field names (:func:`_positional`) and the shuffle
    column computed by Spark: a row's leaf is the number of boundaries at or below its key;
    with ``order``, then the input order column (``monotonically_increasing_id()``).

    Rows then pass through Python once (in the stage tasks, which validate them) instead of
    twice. Only for one row-key field whose Spark type is exactly the table's (a string, an
    integer: Spark and Arrow order them alike), and up to :data:`JVM_LEAF_LIMIT` leaves;
    otherwise None, and the leaves are assigned in Python. A null key gets some leaf, and its
    stage task refuses it (DataError naming the field)."""
    from pyspark.sql import functions as F  # noqa: N812 - Spark's own convention
    from pyspark.sql.pandas.types import from_arrow_type

    boundaries = boundaries.boundaries  # the leaves' minimums; None: found in Python
    if boundaries is None:
        return None
    names = table.schema.row_key_names
    arrow = table.schema.to_arrow()
    key = arrow.field(names[0])
    simple = pa.types.is_string(key.type) or pa.types.is_integer(key.type)
    if len(names) != 1 or not simple or len(buckets) > JVM_LEAF_LIMIT:
        return None
    if source.schema[names[0]].dataType != from_arrow_type(key.type):
        return None
    user = list(arrow.names)
    frame = source.select(*spark_columns(user, _positional(user)))
    k = F.col(_positional(user)[user.index(names[0])])
    if boundaries.num_rows == 0:
        frame = frame.withColumn(tasks.PID, F.lit(int(buckets[0])).cast("long"))
    else:
        index = sum((F.when(k >= F.lit(b), 1).otherwise(0)
                     for b in boundaries.column(0).to_pylist()), F.lit(0))
        values = F.array(*[F.lit(int(v)).cast("long") for v in buckets])
        frame = frame.withColumn(tasks.PID, F.element_at(values, index + 1))
    if order:  # numbered over the source's own partitions (a narrow projection of them)
        frame = frame.withColumn(tasks.ORDER, F.monotonically_increasing_id())
    return frame


def _bucket_values(n: int) -> list[int]:
    """For each i < n, a long whose Spark hash partition (``pmod(hash(v), n)``) is i."""
    size = n * 64
    while True:
        cand = np.arange(size, dtype=np.int64)
        part = np.mod(spark_hash_long(cand), n)
        values, first = np.unique(part, return_index=True)
        if len(values) == n:
            return cand[first].tolist()
        size *= 4


def _rotl(x: np.ndarray, r: int) -> np.ndarray:
    return ((x << np.uint32(r)) | (x >> np.uint32(32 - r))).astype(np.uint32)


def spark_hash_long(values: np.ndarray, seed: int = 42) -> np.ndarray:
    """Spark's ``hash()`` of long values (Murmur3 x86 32-bit, seed 42), vectorised; the
    partition of a row in ``repartition(n, col)`` is ``pmod(hash(col), n)``."""
    with np.errstate(over="ignore"):
        v = values.astype(np.int64).view(np.uint64)
        h = np.full(len(v), seed, dtype=np.uint32)
        for half in ((v & np.uint64(0xFFFFFFFF)).astype(np.uint32),
                     (v >> np.uint64(32)).astype(np.uint32)):
            k = (half * np.uint32(0xCC9E2D51)).astype(np.uint32)
            k = _rotl(k, 15)
            k = (k * np.uint32(0x1B873593)).astype(np.uint32)
            h = h ^ k
            h = _rotl(h, 13)
            h = (h * np.uint32(5) + np.uint32(0xE6546B64)).astype(np.uint32)
        h = h ^ np.uint32(8)
        h = h ^ (h >> np.uint32(16))
        h = (h * np.uint32(0x85EBCA6B)).astype(np.uint32)
        h = h ^ (h >> np.uint32(13))
        h = (h * np.uint32(0xC2B2AE35)).astype(np.uint32)
        h = h ^ (h >> np.uint32(16))
    return h.view(np.int32).astype(np.int64)


def bulk_import(spark: SparkSession, table: Table | TableHandle,
                source: DataFrame | str | Sequence[str], *,
                before_commit: Callable[[StagedFiles], None] | None = None,
                upsert: bool = False) -> IngestResult:
    """Import a DataFrame or files (Parquet, CSV, JSON lines; local or S3; globs) into
    ``table`` with Spark, committing the leaf splits and every file in one transaction.

    ``before_commit`` is called with the written, not yet committed files just before the
    commit (the ingest batcher records them there); if it raises, the files are deleted and
    nothing is committed.

    ``upsert``: the import is an upsert (as ``Table.upsert``): each record replaces every
    older record of its record key (row keys and sort keys), in the same one commit. Among
    the input's records of one key, the last in input order wins, and input order is
    defined on Spark too: a DataFrame's rows in the order ``collect()`` returns them (by
    Spark partition index, then position in the partition: what
    ``monotonically_increasing_id()`` numbers), files' rows in the order the paths are given
    (a glob's matches in name order), each file's rows in order. Spark's shuffle delivers a
    leaf's rows in no defined order, so each row carries its input order through it and
    every leaf's rows are sorted by it before they are written (one more sort, in the JVM).
    A DataFrame whose own row order is not deterministic (after a join, a ``groupBy`` or a
    ``repartition`` without a sort) has no defined last record: sort it (``orderBy``) or
    give one record per key.
    """
    from pyspark.sql import DataFrame

    from sediment.spark.session import register_data_source

    started = time.perf_counter()
    table = handle_of(table)
    register_data_source(spark)
    inputs: DataFrame | list[Any]  # a DataFrame, or pieces of files (spark.inputs)
    rows: int | None = None  # the input's rows, when known without reading it
    if isinstance(source, DataFrame):
        inputs = source
    else:
        from sediment.ingest.sources import expand_paths
        from sediment.spark.inputs import plan_pieces

        files = expand_paths([source] if isinstance(source, str) else list(source),
                             table.objects)
        inputs, rows = plan_pieces(files, spark.sparkContext.defaultParallelism)
    try:
        head = table.states.head()  # the import's one read of the head
        settings = settings_of(head, table.name)
        target = settings.bulk_import_target_leaf_rows
        if isinstance(inputs, DataFrame):
            _source_frame(spark, table, inputs)  # the fields are checked before any job
        # A member of a partition scheme takes the scheme's leaves as they are: only the
        # scheme splits (on all its members' records), so nothing is pre-split here.
        member = bool(settings.partition_scheme)
        merged = None if member else sample_input(spark, table, inputs, rows, target)
        splits = plan_splits(merged, schema_of(head, table.name).row_key_names, head, target)
        state = planned_state(head, splits)
        leaves = state.leaf_partitions()
        boundaries = tasks.boundary_table(state)
        buckets = _bucket_values(len(leaves))
        name, spec = table.name, table.store_spec()
        from pyspark.sql.pandas.types import from_arrow_schema

        # read (or validate) and assign leaves in one pass through Python, or, for a
        # DataFrame whose key Spark can compare as the table does, in the JVM (the stage
        # tasks validate every row anyway)
        with_pid = None
        if isinstance(inputs, DataFrame):
            with_pid = _jvm_leaf_frame(table, inputs, boundaries, buckets, order=upsert)
        if with_pid is None:
            with_pid = _source_frame(spark, table, inputs, (boundaries, buckets),
                                     order=upsert)
        shuffled = _by_leaf(with_pid, len(leaves), upsert)
        version, table_id = head.version, table.table_id
        named = [*table.schema.to_arrow().names, tasks.PID, *([tasks.ORDER] if upsert else [])]
        staged_rows = shuffled.mapInArrow(
            lambda it: tasks.stage_partition(_renamed(it, named), spec, name, version,
                                             table_id, splits, verb_of(upsert)),
            from_arrow_schema(tasks.STAGED_SCHEMA)).collect()
    except SedimentError:
        raise
    except Exception as e:  # Py4J / Spark errors: find our own error in the message
        raise _translate(e, table.name) from e
    refs = [FileReference(r["filename"], r["partition_id"], int(r["records"]))
            for r in staged_rows]
    staged = StagedFiles(sum(r.records for r in refs), refs, tasks.staged_written(staged_rows))
    return _commit(table, staged, splits, started, before_commit, upsert)


def _commit(table: TableHandle, staged: StagedFiles, splits: Sequence[SplitPartition],
            started: float, before_commit: Callable[[StagedFiles], None] | None,
            upsert: bool = False) -> IngestResult:
    """Commit the splits and the files together (``commit_staged`` with an
    AddFilesWithSplits): the splits validate against the head, so a leaf another writer split
    meanwhile makes the whole import invalid, and its files are deleted. ``upsert``: the
    files' records are upserted (the transaction's ``upsert`` flag)."""
    if not splits:
        return commit_staged(table, staged, started, kind="bulk_import",
                             before_commit=before_commit, upsert=upsert)
    with Staging(table.objects, table.name) as staging:
        # written by Spark tasks: ours to protect now; an error before the commit deletes
        # them, one of the commit as it says (see sediment.files.staging)
        staging.adopt(w.filename for w in staged.written)
        if before_commit is not None:
            before_commit(staged)
        if staged.rows == 0:
            return IngestResult(0, 0, 0, table.version, time.perf_counter() - started)
        new_state = staging.commit(table.states,
                                   AddFilesWithSplits(staged.references, splits,
                                                      checksums=staged.checksums,
                                                      upsert=upsert))
    result = IngestResult(staged.rows, len(staged.written), staged.bytes, new_state.version,
                          time.perf_counter() - started)
    table.status.record("bulk_import", f"v{result.version}", "committed", rows=result.rows,
                        files=result.files, bytes=result.bytes, seconds=result.seconds,
                        rows_per_second=result.rows_per_second)
    return result


def _translate(e: Exception, table: str) -> SedimentError:
    text = str(e)
    for cls in (DataError,):
        marker = f"{cls.__module__}.{cls.__name__}: "
        if marker in text:
            msg = text.split(marker, 1)[1].splitlines()[0]
            return cls(msg)
    first = text.strip().splitlines()[0] if text.strip() else type(e).__name__
    return JobError(f"bulk import into table {table} failed: {first}")
