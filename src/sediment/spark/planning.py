"""What bulk import plans on the driver before its job: a sample of the input's row keys
and the leaf splits that give each leaf about ``bulk_import.target_leaf_rows`` rows.

Nothing here commits: the splits commit with the import's files, in one transaction
(``AddFilesWithSplits``). Sampling is skipped when the input's rows are known up front
(Parquet footers, a DataFrame's count) and no leaf could get more than the target.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sediment.core.cells import Cell, first_field, is_box_tree
from sediment.core.keys import Key
from sediment.core.state import TableState
from sediment.core.transactions import SplitPartition
from sediment.files.cells import choose_cut
from sediment.files.keys import cell_mask
from sediment.files.sample import COUNT
from sediment.handle import TableHandle
from sediment.properties import defaults
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
    one transaction).

    The sample counts the rows each key stands for, so it tells how many rows each leaf of
    ``state`` gets: a leaf getting ``r`` rows is cut into ``ceil(r / target_rows)`` parts at
    the sample's quantiles within it, halving recursively, so the new subtree stays balanced.
    """
    from sediment.files.keys import bisect_key
    from sediment.files.sample import quantile

    if merged is None:
        return []
    if is_box_tree(state.partitions):
        return _box_splits(merged, names, state, target_rows)
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


def _box_splits(merged: pa.Table, names: Sequence[str], state: TableState,
                target_rows: int) -> list[SplitPartition]:
    """Box partitions: a leaf getting more than ``target_rows`` of the input's rows is cut as
    a split would cut it (the field ``partition.split.dimension`` picks at its median,
    files/cells.choose_cut, over the input's sample within the leaf), and each side again
    while it gets more."""
    rule = str({**defaults(), **state.properties}["partition.split.dimension"])
    splits: list[SplitPartition] = []
    for leaf in state.leaf_partitions():
        assert isinstance(leaf.region, Cell)
        mask = cell_mask(merged, names, leaf.region)
        _cut_box(leaf.id, leaf.region, merged if mask is None else merged.filter(mask),
                 names, target_rows, splits, rule, len(state.ancestors(leaf.id)))
    return splits


def _cut_box(pid: str, cell: Cell, sample: pa.Table, names: Sequence[str], target: int,
             out: list[SplitPartition], rule: str, depth: int) -> None:
    rows = int(pc.sum(sample.column(COUNT)).as_py() or 0) if sample.num_rows else 0
    cut = choose_cut(cell, sample, names, COUNT, first=first_field(rule, depth, len(names))) \
        if rows > target else None
    if cut is None:
        return
    dim, value = cut
    left, right = uuid.uuid4().hex[:16], uuid.uuid4().hex[:16]
    out.append(SplitPartition(pid, (value,), left, right, dim))
    low_cell, high_cell = cell.cut(dim, value)
    column = sample.column(names[dim])
    low = pc.less(column, pa.scalar(value, type=column.type))
    _cut_box(left, low_cell, sample.filter(low), names, target, out, rule, depth + 1)
    _cut_box(right, high_cell, sample.filter(pc.invert(low)), names, target, out, rule,
             depth + 1)


def planned_state(state: TableState, splits: Sequence[SplitPartition]) -> TableState:
    """``state`` with ``splits`` applied in memory: the leaves the import writes into."""
    if not splits:
        return state
    out = state.copy()
    for s in splits:
        s.apply(out, 0.0)
    return out
