"""Unsigned integer fields through Spark (which has none): the data source, ``read_table`` and
bulk import widen them as Spark's own Parquet reader does (uint8/16/32 to the next signed type,
uint64 to DECIMAL(20, 0)), every value kept, including each type's maximum."""

from __future__ import annotations

import decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import sediment as sd
from sediment.spark.sparktypes import spark_arrow_schema

pytestmark = pytest.mark.spark

SCHEMA = sd.Schema(row_keys=[("id", pa.int64())], sort_keys=[("seq", pa.int32())],
                   values=[("small", pa.uint8(), True), ("mid", pa.uint16(), True),
                           ("count", pa.uint32(), True), ("big", pa.uint64(), True),
                           ("tags", pa.list_(pa.uint32()), True)])


def _data(n: int) -> pa.Table:
    top = 2**32 - 1
    return pa.table({
        "id": [i * 7919 for i in range(n)], "seq": [i % 3 for i in range(n)],
        "small": [None if i % 10 == 0 else 255 - i % 256 for i in range(n)],
        "mid": [2**16 - 1 - i for i in range(n)], "count": [top - i for i in range(n)],
        "big": [2**64 - 1 - i for i in range(n)],
        "tags": [[i, top] for i in range(n)]}, schema=SCHEMA.to_arrow())


def _as_python(t: pa.Table) -> list[dict[str, Any]]:
    rows = t.to_pylist()
    for r in rows:  # uint64 comes back from Spark as DECIMAL(20, 0)
        if isinstance(r["big"], decimal.Decimal):
            r["big"] = int(r["big"])
    return sorted(rows, key=lambda r: (r["id"], r["seq"]))


def test_unsigned_fields_read_and_import_through_spark(spark_local: Any,
                                                       tmp_path: Path) -> None:
    from sediment.spark import bulk_import, read_table

    store = sd.Store.open(str(tmp_path / "store"), create=True)
    table = store.create_table("u", SCHEMA, split_points=[5_000_000])
    data = _data(2000)
    table.ingest(data)
    want = _as_python(table.query())
    assert len(want) == 2000
    frame = spark_local.read.format("sediment").option("store", store.uri) \
        .option("table", "u").load()
    assert [f.dataType.simpleString() for f in frame.schema.fields[2:]] == [
        "smallint", "int", "bigint", "decimal(20,0)", "array<bigint>"]
    assert _as_python(frame.toArrow()) == want
    assert _as_python(read_table(spark_local, table).toArrow()) == want
    # a pushed-down key filter, and one Spark applies to an unsigned field
    got = spark_local.read.format("sediment").option("store", store.uri) \
        .option("table", "u").option("pushdown", "true").load() \
        .filter(f"id >= {500 * 7919} and count < {2**32 - 1000}")
    assert _as_python(got.toArrow()) == [r for r in want if r["id"] >= 500 * 7919
                                         and r["count"] < 2**32 - 1000]
    # a DataFrame read back through Spark imports into a table of the same schema
    copy = store.create_table("copy", SCHEMA)
    bulk_import(spark_local, copy, frame)
    assert _as_python(copy.query()) == want
    # and a value beyond the field's range is refused, naming the field
    wide = spark_local.createDataFrame(
        [(1, 1, 1, 1, 2**32, decimal.Decimal(1), [1])],
        "id long, seq int, small short, mid int, count long, big decimal(20,0), "
        "tags array<bigint>")
    with pytest.raises(sd.errors.SedimentError, match="count"):
        bulk_import(spark_local, copy, wide)
    assert _as_python(copy.query()) == want


def test_spark_arrow_schema_widens_every_unsigned_type() -> None:
    got = spark_arrow_schema(pa.schema([
        ("a", pa.uint8()), ("b", pa.uint16()), ("c", pa.uint32()), ("d", pa.uint64()),
        ("e", pa.map_(pa.string(), pa.uint32())), ("f", pa.struct([("x", pa.uint8())])),
        ("g", pa.large_list(pa.uint16())), ("h", pa.int8())]))
    assert got.types == [pa.int16(), pa.int32(), pa.int64(), pa.decimal128(20, 0),
                         pa.map_(pa.string(), pa.int64()), pa.struct([("x", pa.int16())]),
                         pa.large_list(pa.int32()), pa.int8()]
