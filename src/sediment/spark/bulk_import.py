"""Bulk import on Spark (Sleeper's, with Arrow all the way).

1. Validate the source's schema against the table (a DataFrame's fields, or files read with
   pyarrow inside tasks, so S3 needs no Hadoop connector).
2. Pre-split a table with fewer than ``bulk_import.min_leaf_partitions`` leaves at quantiles of
   a sample of the input.
3. Assign every row its leaf (vectorised) and shuffle by leaf. Spark hashes the shuffle key, and
   small integers 0..n-1 do not spread evenly over n partitions, so each leaf gets a key value
   chosen to hash to its own partition number: one Spark partition per leaf, no collisions.
4. Each task sorts its leaf's rows (spilling past the memory limit) and writes files and
   samples; the driver commits every file in one AddFiles transaction. If the job fails nothing
   is committed, and files already written are orphans that GC removes.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from sediment.core.model import FileReference
from sediment.core.transactions import SplitPartition
from sediment.errors import DataError, JobError, SedimentError, TransactionInvalidError
from sediment.files.writer import WrittenFile
from sediment.handle import TableHandle, handle_of
from sediment.ingest.standard import IngestResult, StagedFiles, commit_staged
from sediment.spark import tasks

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
        # Validate (types, null keys) as the rows are first read, so that bad input fails in
        # the first job, before pre-splitting commits anything.
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
    from sediment.ingest.sources import expand_paths, read_file

    if isinstance(source, list) and source and isinstance(source[0], tuple):
        files = source  # already expanded
    else:
        paths = [source] if isinstance(source, str) else list(source)
        files = expand_paths(paths, table.objects)
    spec, name, schema = table.store_spec(), table.name, table.schema
    key_names = schema.row_key_names
    listing = spark.createDataFrame([(fs.type_name, p) for fs, p in files],
                                    "fs string, path string")
    listing = listing.repartition(max(1, min(len(files),
                                             spark.sparkContext.defaultParallelism * 2)))

    def read(batches: Any) -> Any:
        from sediment.ingest.sources import _filesystem_for, conform

        t = tasks.open_handle(spec, name)
        bucket_arr = None if leaves is None else np.asarray(leaves[1], dtype=np.int64)
        for b in batches:
            for fs_name, path in zip(b.column("fs").to_pylist(), b.column("path").to_pylist(),
                                     strict=True):
                uri = f"s3://{path}" if fs_name == "s3" else path
                fs, p = _filesystem_for(uri, t.objects)
                offset = 0
                for rb in read_file(fs, p, schema):
                    c = conform(rb, schema, name, offset, p)
                    offset += rb.num_rows
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


def _sample_keys(frame: DataFrame, names: Sequence[str], schema: pa.Schema) -> pa.Table:
    """An equi-depth sample of the frame's row keys: each task keeps every k-th key of its
    rows (k doubling, so at most ``2 * SAMPLE_ROWS_PER_TASK`` keys with counts), collected as
    Arrow. One pass over the key columns, no count, no Row objects. ``frame`` has positional
    column names (:func:`_positional`) for ``schema``'s fields."""
    from pyspark.sql.pandas.types import from_arrow_schema

    from sediment.files.sample import COUNT, KeySampler

    key_schema = pa.schema([schema.field(n) for n in names])
    out_schema = key_schema.append(pa.field(COUNT, pa.int64(), False))
    spark_keys = [_positional(schema.names)[schema.get_field_index(n)] for n in names]
    spark_out = pa.schema([f.with_name(n) for f, n in
                           zip(out_schema, [*spark_keys, COUNT], strict=True)])

    def sample(batches: Any) -> Any:
        sampler = KeySampler(names, SAMPLE_ROWS_PER_TASK)
        for b in batches:
            sampler.add(pa.Table.from_batches([b.rename_columns(list(names))]))
        yield from sampler.sample(key_schema).cast(out_schema) \
            .rename_columns(spark_out.names).to_batches()

    got = frame.select(*spark_keys).mapInArrow(sample, from_arrow_schema(spark_out)).toArrow()
    return got.rename_columns(out_schema.names)


def presplit(spark: SparkSession, table: TableHandle, frame: DataFrame, min_leaves: int) -> int:
    """Split the table at quantiles of a sample of ``frame`` until it has ``min_leaves``
    leaves (each split its own transaction); returns the number of splits made."""
    from sediment.files.sample import merge_samples, quantile

    state = table.states.head()
    if len(state.leaf_partitions()) >= min_leaves:
        return 0
    names = table.schema.row_key_names
    sample = _sample_keys(frame, names, table.schema.to_arrow())
    if sample.num_rows == 0:
        return 0
    merged = merge_samples([sample], names)
    points: list[tuple[Any, ...]] = []
    for i in range(1, min_leaves):
        k = quantile(merged, names, i / min_leaves)
        if k is not None and (not points or k > points[-1]):
            points.append(k)
    made = 0
    for k in points:
        leaf = table.states.head().leaf_for_key(k)
        if not leaf.region.is_strictly_inside(k):
            continue
        try:
            table.states.commit(SplitPartition(leaf.id, k, uuid.uuid4().hex[:16],
                                               uuid.uuid4().hex[:16]))
            made += 1
        except TransactionInvalidError:
            continue
    return made


def bulk_import(spark: SparkSession, table: Table | TableHandle,
                source: DataFrame | str | Sequence[str], *,
                before_commit: Callable[[StagedFiles], None] | None = None) -> IngestResult:
    """Import a DataFrame or files (Parquet, CSV, JSON lines; local or S3; globs) into
    ``table`` with Spark, committing every file in one transaction.

    ``before_commit`` is called with the written, not yet committed files just before the
    commit (the ingest batcher records them there); if it raises, the files are deleted and
    nothing is committed.
    """
    from pyspark.sql import DataFrame

    from sediment.spark.session import register_data_source

    started = time.perf_counter()
    table = handle_of(table)
    register_data_source(spark)
    inputs: DataFrame | list[tuple[Any, str]]  # a DataFrame, or (filesystem, path) pairs
    if isinstance(source, DataFrame):
        inputs = source
    else:
        from sediment.ingest.sources import expand_paths

        inputs = expand_paths([source] if isinstance(source, str) else list(source),
                              table.objects)
    frame = _source_frame(spark, table, inputs)
    min_leaves = int(table.properties["bulk_import.min_leaf_partitions"])
    try:
        presplit(spark, table, frame, min_leaves)
        state = table.states.head()
        leaves = state.leaf_partitions()
        boundaries = tasks.boundary_table(state)
        buckets = _bucket_values(len(leaves))
        name, spec = table.name, table.store_spec()
        from pyspark.sql.pandas.types import from_arrow_schema

        # read (or validate) and assign leaves in one pass through Python
        with_pid = _source_frame(spark, table, inputs, (boundaries, buckets))
        shuffled = with_pid.repartition(len(leaves), tasks.PID)
        version, table_id = state.version, table.table_id
        named = [*table.schema.to_arrow().names, tasks.PID]
        staged_rows = shuffled.mapInArrow(
            lambda it: tasks.stage_partition(_renamed(it, named), spec, name, version,
                                             table_id),
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
    return commit_staged(table, staged, started, kind="bulk_import",
                         before_commit=before_commit)


def _translate(e: Exception, table: str) -> SedimentError:
    text = str(e)
    for cls in (DataError,):
        marker = f"{cls.__module__}.{cls.__name__}: "
        if marker in text:
            msg = text.split(marker, 1)[1].splitlines()[0]
            return cls(msg)
    first = text.strip().splitlines()[0] if text.strip() else type(e).__name__
    return JobError(f"bulk import into table {table} failed: {first}")
