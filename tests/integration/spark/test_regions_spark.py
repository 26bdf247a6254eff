"""The Spark reader and per-field regions: filters on the row-key fields after the first are
pushed down as a region (exact, so Spark need not apply them again), and a Spark read with
them equals the reference."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import sediment as sd
from reference import Reference, RefRegion, assert_matches

SCHEMA = sd.Schema(row_keys=[("src", pa.string()), ("dst", pa.int64())],
                   sort_keys=[("ts", pa.int64())], values=[("w", pa.int64())])


def _edges(store: sd.Store, properties: dict[str, Any] | None = None
           ) -> tuple[sd.Table, Reference]:
    table = store.create_table("edges", SCHEMA, split_points=[("c",), ("f", 50)],
                               properties=properties or {})
    ref = Reference(SCHEMA)
    n = 3000
    data = pa.table({"src": [chr(ord("a") + i % 8) for i in range(n)],
                     "dst": [(i * 7) % 101 for i in range(n)],
                     "ts": list(range(n)), "w": [i % 5 for i in range(n)]},
                    schema=ref.arrow)
    table.ingest(data)
    ref.add(data)
    return table, ref


def _read(reader: Any) -> pa.Table:
    batches = [b for p in reader.partitions() for b in reader.read(p)]
    return pa.Table.from_batches(batches, schema=SCHEMA.to_arrow()) if batches else \
        SCHEMA.to_arrow().empty_table()


def test_filters_on_other_row_key_fields_push_down_as_a_region(tmp_path: Path) -> None:
    from pyspark.sql.datasource import EqualTo, GreaterThan, LessThanOrEqual
    from pyspark.sql.pandas.types import from_arrow_schema

    from sediment.spark.datasource import SedimentReader

    store = sd.Store.open(str(tmp_path / "store"), create=True)
    table, ref = _edges(store)
    options = {"store": store.uri, "table": "edges", "pushdown": "true"}
    struct = from_arrow_schema(SCHEMA.to_arrow())

    def read(*filters: Any) -> tuple[pa.Table, list[Any], int]:
        reader = SedimentReader(dict(options), struct)
        rejected = list(reader.pushFilters(list(filters)))
        return _read(reader), rejected, len(reader.partitions())

    got, rejected, parts = read(GreaterThan(("dst",), 40), LessThanOrEqual(("dst",), 60))
    assert rejected == []
    assert_matches(got, ref, ranges=[RefRegion({"dst": (40, False, 60, True)})])
    got, rejected, parts = read(EqualTo(("src",), "f"), LessThanOrEqual(("dst",), 10))
    assert rejected == [] and parts == 1  # only the leaf [("c",), ("f", 50)) can hold them
    assert_matches(got, ref, ranges=[RefRegion({"src": ("f", True, "f", True),
                                                "dst": (None, True, 10, True)})])
    got, _, _ = read(GreaterThan(("dst",), 60), LessThanOrEqual(("dst",), 10))
    assert got.num_rows == 0


@pytest.mark.slow
def test_spark_read_with_other_field_filters_equals_the_reference(spark_local: Any,
                                                                  tmp_path: Path) -> None:
    store = sd.Store.open(str(tmp_path / "store"), create=True)
    table, ref = _edges(store)
    df = spark_local.read.format("sediment").option("store", store.uri) \
        .option("table", "edges").option("pushdown", "true").load()
    got = df.filter("dst >= 30 and dst < 35 and src > 'b'").toArrow()
    assert_matches(got.cast(SCHEMA.to_arrow()), ref,
                   ranges=[RefRegion({"dst": (30, True, 35, False),
                                      "src": ("b", False, None, True)})])


@pytest.mark.slow
def test_spark_bulk_import_and_read_of_a_box_table(spark_local: Any, tmp_path: Path) -> None:
    """A box-partitioned table: bulk import assigns rows to box leaves, and the Spark reader
    (whole table, and with filters on both key fields) equals the reference."""
    from sediment.spark import bulk_import

    store = sd.Store.open(str(tmp_path / "store"), create=True)
    table = store.create_table("boxes", SCHEMA, split_points=["c", "f"], properties={
        "partitioning": "dimensions", "partition.split.threshold": 300})
    ref = Reference(SCHEMA)
    n = 3000
    data = pa.table({"src": [chr(ord("a") + i % 8) for i in range(n)],
                     "dst": [(i * 7) % 101 for i in range(n)],
                     "ts": list(range(n)), "w": [i % 5 for i in range(n)]},
                    schema=ref.arrow)
    table.ingest(data.slice(0, 1000))
    table.split()
    table.compact()
    bulk_import(spark_local, table, spark_local.createDataFrame(data.slice(1000).to_pandas()))
    ref.add(data)
    assert sum(p.is_leaf for p in table.partitions()) > 3
    assert_matches(table.query(), ref)
    reader = spark_local.read.format("sediment").option("store", store.uri) \
        .option("table", "boxes").option("pushdown", "true")
    assert_matches(reader.load().toArrow().cast(SCHEMA.to_arrow()), ref)
    got = reader.load().filter("dst >= 30 and dst < 35 and src > 'b'").toArrow()
    assert_matches(got.cast(SCHEMA.to_arrow()), ref,
                   ranges=[RefRegion({"dst": (30, True, 35, False),
                                      "src": ("b", False, None, True)})])


def test_bulk_import_presplits_box_leaves_as_a_split_would(tmp_path: Path) -> None:
    """The splits planned for an import into a box table: Sleeper's field at the median of the
    input's sample, until each leaf gets at most the target."""
    from sediment.core.regions import Cell
    from sediment.files.sample import COUNT
    from sediment.spark.planning import plan_splits, planned_state

    store = sd.Store.open(str(tmp_path / "store"), create=True)
    table = store.create_table("boxes", SCHEMA, properties={"partitioning": "dimensions"})
    # three sources of 1000 destinations each: the median source (b) is neither the
    # smallest nor the largest, so src is cut first; then a leaf of one source, or of two
    # (b and c: their median is the largest), is cut on dst
    sample = pa.table({"src": ["a"] * 1000 + ["b"] * 1000 + ["c"] * 1000,
                       "dst": list(range(1000)) * 3, COUNT: [10] * 3000})
    state = table._handle.states.head()
    splits = plan_splits(sample, ["src", "dst"], state, 6000)
    after = planned_state(state, splits)
    assert (splits[0].dimension, splits[0].split_key) == (0, ("b",))
    assert {s.dimension for s in splits[1:]} == {1}
    leaves = [p.region for p in after.leaf_partitions()]
    assert all(isinstance(c, Cell) for c in leaves) and len(leaves) == 6
    for cell in leaves:  # each leaf gets at most the target of the input's rows
        rows = sum(10 for src, dst in zip(sample.column("src").to_pylist(),
                                          sample.column("dst").to_pylist(), strict=True)
                   if cell.contains((src, dst)))
        assert 0 < rows <= 6000


def test_bulk_import_presplits_box_leaves_by_the_cycle_rule(tmp_path: Path) -> None:
    """Under ``partition.split.dimension=cycle`` the planned tree alternates its fields by
    depth (a k-d tree), where Sleeper's rule would cut only the many-valued first field."""
    from sediment.files.sample import COUNT
    from sediment.partitioning.dimensions import split_of
    from sediment.spark.planning import plan_splits, planned_state

    store = sd.Store.open(str(tmp_path / "store"), create=True)
    table = store.create_table("boxes", SCHEMA, properties={
        "partitioning": "dimensions", "partition.split.dimension": "cycle"})
    sample = pa.table({"src": [f"s{i // 100:03d}" for i in range(10_000)],
                       "dst": [(i * 37) % 1000 for i in range(10_000)], COUNT: [1] * 10_000})
    state = table._handle.states.head()
    after = planned_state(state, plan_splits(sample, ["src", "dst"], state, 1300))
    leaves = after.leaf_partitions()
    assert len(leaves) == 8
    for p in after.partitions.values():
        if not p.is_leaf:
            dim, _ = split_of(p, after.partitions[p.children[0]])
            assert dim == len(after.ancestors(p.id)) % 2
