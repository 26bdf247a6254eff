"""Bulk import on Spark (Sleeper's, with Arrow all the way).

1. Validate the source's schema against the table (a DataFrame's fields, or files read with
   pyarrow inside tasks, so S3 needs no Hadoop connector).
2. Plan splits so that each leaf gets about ``bulk_import.target_leaf_rows`` of the input's
   rows, at quantiles of a sample of the input (which also counts its rows). The splits are
   not committed on their own: tasks write into the planned leaves, and the splits commit with
   the files (step 4).
3. Assign every row its leaf (vectorised) and shuffle by leaf. Spark hashes the shuffle key, and
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

import math
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sediment.core.keys import Key
from sediment.core.model import FileReference
from sediment.core.state import TableState
from sediment.core.transactions import AddFilesWithSplits, SplitPartition
from sediment.errors import DataError, JobError, SedimentError
from sediment.files.sample import COUNT
from sediment.files.writer import WrittenFile
from sediment.handle import TableHandle, handle_of
from sediment.ingest.standard import (
    IngestResult,
    StagedFiles,
    commit_staged,
    delete_staged,
    discard_staged,
)
from sediment.spark import tasks
from sediment.state import pending

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from sediment.table import Table

SAMPLE_ROWS_PER_TASK = 2_048


Leaves = tuple[pa.Table, list[int]]
"""Boundaries of the leaves (``tasks.boundary_table``) and each leaf's shuffle key value."""


def _positional(names: Sequence[str]) -> list[str]:
    """The names the table's fields have inside Spark: ``c0``, ``c1``... by position.

    Spark parses a column name given as a string (a dot reaches into a struct, backticks
    quote), and ``mapInArrow`` itself looks every column of its input up by name, so a field
    named ``a.b`` or with a backtick cannot pass through it as it is. Frames carry positional
    names and every Python task renames the batches back to the table's own."""
    return [f"c{i}" for i in range(len(names))]


def _columns(names: Sequence[str], aliases: Sequence[str]) -> list[Any]:
    """Spark columns of exactly ``names`` (backticked, backticks inside doubled), renamed."""
    from pyspark.sql.functions import col

    return [col("`" + n.replace("`", "``") + "`").alias(a)
            for n, a in zip(names, aliases, strict=True)]


def _renamed(batches: Iterable[pa.RecordBatch], names: Sequence[str]
             ) -> Iterator[pa.RecordBatch]:
    """The batches with their columns renamed, in order, to ``names``."""
    for b in batches:
        yield b.rename_columns(list(names))


def _source_frame(spark: SparkSession, table: TableHandle, source: Any,
                  leaves: Leaves | None = None) -> DataFrame:
    """The source as a DataFrame of the table's fields (files are read inside tasks).

    With ``leaves``, every row also gets its leaf's shuffle key (``tasks.PID``) in the same
    Python pass that reads (files) or validates (a DataFrame) it: each pass through Python
    costs a conversion of every row in the JVM each way.
    """
    from pyspark.sql import DataFrame
    from pyspark.sql.pandas.types import from_arrow_schema

    arrow = table.schema.to_arrow()
    user = list(arrow.names)
    spark_names = _positional(user)
    out = arrow if leaves is None else arrow.append(pa.field(tasks.PID, pa.int64(), False))
    spark_out = pa.schema([f.with_name(spark_names[i]) if i < len(user) else f  # PID stays
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
            return source.select(*_columns(user, spark_names)).mapInArrow(
                lambda it: _renamed(tasks.assign_leaves(_renamed(it, user), schema, name,
                                                        boundaries, buckets),
                                    spark_out.names),
                from_arrow_schema(spark_out))
        return source.select(*_columns(user, spark_names)).mapInArrow(
            lambda it: _renamed(tasks.conform_batches(_renamed(it, user), schema, name,
                                                      "Spark input"), spark_out.names),
            from_arrow_schema(spark_out))
    from sediment.spark.inputs import PIECE_DDL, piece_rows, read_piece

    pieces: list[Any] = source
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
            for c in read_piece(fs, piece, schema, name):
                if leaves is not None and bucket_arr is not None:
                    c = tasks.with_leaf_column(c, key_names, leaves[0], bucket_arr)
                yield c.rename_columns(spark_out.names)

    return listing.mapInArrow(read, from_arrow_schema(spark_out))


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


def _sample_files(spark: SparkSession, table: TableHandle, pieces: list[Any]) -> pa.Table:
    """An equi-depth sample of the row keys of files: each task keeps every k-th key of its
    pieces' rows (k doubling, so at most ``2 * SAMPLE_ROWS_PER_TASK`` keys with counts),
    collected as Arrow. One pass, over the key columns only where the format allows
    (:func:`inputs.read_piece_keys`)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    from sediment.files.sample import KeySampler
    from sediment.spark.inputs import PIECE_DDL, piece_rows, read_piece_keys

    schema, names = table.schema, table.schema.row_key_names
    arrow = schema.to_arrow()
    out_schema = pa.schema([arrow.field(n) for n in names]).append(
        pa.field(COUNT, pa.int64(), False))
    spark_out = pa.schema([f.with_name(f"c{i}") for i, f in enumerate(out_schema)])
    spec, name = table.store_spec(), table.name
    listing = spark.createDataFrame(pieces, PIECE_DDL).repartition(
        max(1, min(len(pieces), spark.sparkContext.defaultParallelism * 3)))

    def sample(batches: Any) -> Any:
        from sediment.ingest.sources import _filesystem_for

        t = tasks.open_handle(spec, name)
        sampler = KeySampler(names, SAMPLE_ROWS_PER_TASK)
        for piece in piece_rows(batches):
            uri = f"s3://{piece[1]}" if piece[0] == "s3" else piece[1]
            fs, _ = _filesystem_for(uri, t.objects)
            for b in read_piece_keys(fs, piece, schema, name):
                sampler.add(pa.Table.from_batches([b]))
        yield from sampler.sample(out_schema.remove(len(names))).cast(out_schema) \
            .rename_columns(spark_out.names).to_batches()

    got = listing.mapInArrow(sample, from_arrow_schema(spark_out)).toArrow()
    return got.rename_columns(out_schema.names)


def _sample_frame(table: TableHandle, source: DataFrame, rows: int, leaves: int) -> pa.Table:
    """A uniform random sample of a DataFrame's row keys, drawn by Spark itself (the JVM
    reads only the key columns, nothing passes through Python), with each key counting for
    ``rows / sampled`` rows. Rows the import will refuse (a null key, a value of another
    type) are left out: the import's own pass reports them."""
    arrow = table.schema.to_arrow()
    names = table.schema.row_key_names
    key_schema = pa.schema([arrow.field(n) for n in names])
    want = min(rows, max(100_000, 1_000 * leaves))
    aliases = [f"c{i}" for i in range(len(names))]
    got = source.select(*_columns(names, aliases)).sample(
        withReplacement=False, fraction=min(1.0, 1.2 * want / rows), seed=17).toArrow()
    got = got.rename_columns(list(names)).drop_null()
    try:
        keys = got.cast(key_schema)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        return key_schema.empty_table().append_column(COUNT, pa.array([], pa.int64()))
    weight = max(1, round(rows / max(1, keys.num_rows)))
    return keys.append_column(COUNT, pa.array(np.full(keys.num_rows, weight, np.int64)))


def sample_input(spark: SparkSession, table: TableHandle, inputs: DataFrame | list[Any],
                 rows: int | None, target_rows: int) -> pa.Table | None:
    """The merged key sample bulk import plans splits from, or None when no leaf can get
    more than ``target_rows`` (``rows``, the input's rows when known up front, is at most
    that): then nothing is sampled at all."""
    from pyspark.sql import DataFrame

    from sediment.files.sample import merge_samples

    if isinstance(inputs, DataFrame):
        rows = inputs.count()  # the JVM alone; Parquet-backed frames count from footers
        if rows <= target_rows:
            return None
        sample = _sample_frame(table, inputs, rows, math.ceil(rows / target_rows))
    else:
        if rows is not None and rows <= target_rows:
            return None
        sample = _sample_files(spark, table, inputs)
    if sample.num_rows == 0:
        return None
    return merge_samples([sample], table.schema.row_key_names)


def plan_splits(merged: pa.Table | None, names: Sequence[str], state: TableState,
                target_rows: int) -> list[SplitPartition]:
    """The splits that give each leaf about ``target_rows`` of the input's rows, from the
    ``merged`` key sample (:func:`sample_input`; not committed: they commit with the files, in
    one transaction).

    The sample counts the rows each key stands for, so it tells how many rows each leaf of
    ``state`` gets: a leaf getting ``r`` rows is cut into ``ceil(r / target_rows)`` parts at
    the sample's quantiles within it, halving recursively, so the new subtree stays balanced.
    """
    from sediment.files.keys import bisect_key
    from sediment.files.sample import quantile

    if merged is None:
        return []
    splits: list[SplitPartition] = []
    for leaf in state.leaf_partitions():
        region = leaf.region
        lo = 0 if region.min is None else bisect_key(merged, region.min, names)
        hi = merged.num_rows if region.max is None else bisect_key(merged, region.max, names)
        part = merged.slice(lo, max(0, hi - lo))
        rows = int(pc.sum(part.column(COUNT)).as_py() or 0)
        parts = math.ceil(rows / target_rows)
        if parts < 2:
            continue
        points: list[Key] = []
        for i in range(1, parts):
            k = quantile(part, names, i / parts)
            if k is not None and region.is_strictly_inside(k) and (not points or k > points[-1]):
                points.append(k)
        _split_balanced(leaf.id, points, splits)
    return splits


def _split_balanced(pid: str, points: Sequence[Key], out: list[SplitPartition]) -> None:
    """Split ``pid`` at the middle point, then each side at the middle of its points."""
    if not points:
        return
    mid = len(points) // 2
    left, right = uuid.uuid4().hex[:16], uuid.uuid4().hex[:16]
    out.append(SplitPartition(pid, tuple(points[mid]), left, right))
    _split_balanced(left, points[:mid], out)
    _split_balanced(right, points[mid + 1:], out)


def planned_state(state: TableState, splits: Sequence[SplitPartition]) -> TableState:
    """``state`` with ``splits`` applied in memory: the leaves the import writes into."""
    if not splits:
        return state
    out = state.copy()
    for s in splits:
        s.apply(out, 0.0)
    return out


def bulk_import(spark: SparkSession, table: Table | TableHandle,
                source: DataFrame | str | Sequence[str], *,
                before_commit: Callable[[StagedFiles], None] | None = None) -> IngestResult:
    """Import a DataFrame or files (Parquet, CSV, JSON lines; local or S3; globs) into
    ``table`` with Spark, committing the leaf splits and every file in one transaction.

    ``before_commit`` is called with the written, not yet committed files just before the
    commit (the ingest batcher records them there); if it raises, the files are deleted and
    nothing is committed.
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
    target = int(table.properties["bulk_import.target_leaf_rows"])
    try:
        head = table.states.head()
        if isinstance(inputs, DataFrame):
            _source_frame(spark, table, inputs)  # the fields are checked before any job
        merged = sample_input(spark, table, inputs, rows, target)
        splits = plan_splits(merged, table.schema.row_key_names, head, target)
        state = planned_state(head, splits)
        leaves = state.leaf_partitions()
        boundaries = tasks.boundary_table(state)
        buckets = _bucket_values(len(leaves))
        name, spec = table.name, table.store_spec()
        from pyspark.sql.pandas.types import from_arrow_schema

        # read (or validate) and assign leaves in one pass through Python
        with_pid = _source_frame(spark, table, inputs, (boundaries, buckets))
        shuffled = with_pid.repartition(len(leaves), tasks.PID)
        version, table_id = head.version, table.table_id
        named = [*table.schema.to_arrow().names, tasks.PID]
        staged_rows = shuffled.mapInArrow(
            lambda it: tasks.stage_partition(_renamed(it, named), spec, name, version,
                                             table_id, splits),
            from_arrow_schema(tasks.STAGED_SCHEMA)).collect()
    except SedimentError:
        raise
    except Exception as e:  # Py4J / Spark errors: find our own error in the message
        raise _translate(e, table.name) from e
    refs = [FileReference(r["filename"], r["partition_id"], int(r["records"]))
            for r in staged_rows]
    written = {r["filename"]: WrittenFile(r["filename"], 0, int(r["bytes"]))
               for r in staged_rows}
    staged = StagedFiles(sum(r.records for r in refs), refs, list(written.values()))
    return _commit(table, staged, splits, started, before_commit)


def _commit(table: TableHandle, staged: StagedFiles, splits: Sequence[SplitPartition],
            started: float, before_commit: Callable[[StagedFiles], None] | None
            ) -> IngestResult:
    """Commit the splits and the files together (``commit_staged`` with an
    AddFilesWithSplits): the splits validate against the head, so a leaf another writer split
    meanwhile makes the whole import invalid, and its files are deleted."""
    if not splits:
        return commit_staged(table, staged, started, kind="bulk_import",
                             before_commit=before_commit)
    filenames = [w.filename for w in staged.written]
    if before_commit is not None:
        try:
            before_commit(staged)
        except BaseException:
            delete_staged(table, filenames)
            raise
    if staged.rows == 0:
        return IngestResult(0, 0, 0, table.version, time.perf_counter() - started)
    pending.register(table.objects, filenames)  # written by Spark tasks: ours to protect now
    try:
        new_state = table.states.commit(AddFilesWithSplits(staged.references, splits))
    except BaseException as e:
        discard_staged(table, filenames, e)
        raise
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
