"""What bulk import plans on the driver before its job: a sample of the input's row keys
and the leaf splits that give each leaf about ``bulk_import.target_leaf_rows`` rows.

Nothing here commits: the splits commit with the import's files, in one transaction
(``AddFilesWithSplits``). Sampling is skipped when the input's rows are known up front
(Parquet footers, a DataFrame's count) and no leaf could get more than the target.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from sediment.core.state import TableState
from sediment.core.transactions import SplitPartition
from sediment.files.sample import COUNT
from sediment.handle import TableHandle
from sediment.partitioning import partitioning_of
from sediment.spark import tasks
from sediment.spark.sparktypes import for_spark, spark_struct

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

SAMPLE_ROWS_PER_TASK = 2_048


def spark_columns(names: Sequence[str], aliases: Sequence[str]) -> list[Any]:
    """Spark columns of exactly ``names`` (backticked, backticks inside doubled), renamed."""
    from pyspark.sql.functions import col

    return [col("`" + n.replace("`", "``") + "`").alias(a)
            for n, a in zip(names, aliases, strict=True)]


def _sample_files(spark: SparkSession, table: TableHandle, pieces: list[Any]) -> pa.Table:
    """An equi-depth sample of the row keys of files: each task keeps every k-th key of its
    pieces' rows (k doubling, so at most ``2 * SAMPLE_ROWS_PER_TASK`` keys with counts),
    collected as Arrow. One pass, over the key columns only where the format allows
    (:func:`inputs.read_piece_keys`)."""
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
        got = sampler.sample(out_schema.remove(len(names))).cast(out_schema)
        yield from (for_spark(b, spark_out, name)
                    for b in got.rename_columns(spark_out.names).to_batches())

    got = listing.mapInArrow(sample, spark_struct(spark_out)).toArrow()
    return got.rename_columns(out_schema.names).cast(out_schema)


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
    got = source.select(*spark_columns(names, aliases)).sample(
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
    one transaction), as the table's partitioning cuts a leaf
    (:meth:`sediment.partitioning.Partitioning.import_splits`). The sample counts the rows
    each key stands for, so it tells how many rows each leaf of ``state`` gets."""
    if merged is None:
        return []
    return partitioning_of(state).import_splits(merged, names, state, target_rows)


def planned_state(state: TableState, splits: Sequence[SplitPartition]) -> TableState:
    """``state`` with ``splits`` applied in memory: the leaves the import writes into."""
    if not splits:
        return state
    out = state.copy()
    for s in splits:
        s.apply(out, 0.0)
    return out
