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
