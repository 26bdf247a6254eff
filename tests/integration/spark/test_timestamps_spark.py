"""Time-zone-aware timestamps through Spark (issue 34): a table whose key and value fields are
zoned timestamps (several zones and units) reads through ``spark.read.format("sediment")``,
``read_table`` and back through bulk import with the instants ``table.query()`` gives, whatever
the session's time zone; pushed-down key ranges on a zoned key select what the local API does;
a nanosecond value Spark cannot hold is refused naming the field, never truncated."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import sediment as sd

pytestmark = pytest.mark.spark

SCHEMA = sd.Schema(
    row_keys=[("at", pa.timestamp("ms", tz="Europe/Paris"))],
    sort_keys=[("seq", pa.int32())],
    values=[("tokyo", pa.timestamp("us", tz="Asia/Tokyo"), True),
            ("ny", pa.timestamp("ns", tz="America/New_York"), True),
            ("utc", pa.timestamp("s", tz="UTC"), True),
            ("plus", pa.timestamp("us", tz="+05:30"), True),
            ("wall", pa.timestamp("us"), True)])
BASE = 1_700_000_000_000  # ms since the epoch (November 2023: both sides of no DST change)


def _data(n: int) -> pa.Table:
    at = [BASE + i * 3_600_000 + 7 for i in range(n)]  # hourly, odd milliseconds
    return pa.table({
        "at": pa.array(at, pa.timestamp("ms", tz="Europe/Paris")),
        "seq": pa.array([i % 3 for i in range(n)], pa.int32()),
        "tokyo": pa.array([None if i % 5 == 0 else (BASE + i) * 1000 + 123 for i in range(n)],
                          pa.timestamp("us", tz="Asia/Tokyo")),
        "ny": pa.array([(BASE - i) * 1_000_000 + 456_000 for i in range(n)],
                       pa.timestamp("ns", tz="America/New_York")),
        "utc": pa.array([BASE // 1000 + i for i in range(n)], pa.timestamp("s", tz="UTC")),
        "plus": pa.array([(BASE + 2 * i) * 1000 for i in range(n)],
                         pa.timestamp("us", tz="+05:30")),
        "wall": pa.array([(BASE + 3 * i) * 1000 + 9 for i in range(n)], pa.timestamp("us")),
    }, schema=SCHEMA.to_arrow())


MICROS = sd.Schema(row_keys=SCHEMA.row_keys, sort_keys=SCHEMA.sort_keys,
                   values=[f for f in SCHEMA.values if f.name != "ny"])
"""The schema without its nanosecond field, which Spark's own Parquet reader refuses: a
compacted leaf of it is read by ``read_table`` with that reader."""


def _instants(t: pa.Table) -> list[tuple[Any, ...]]:
    """Rows with every timestamp as microseconds since the epoch (an instant for a zoned
    field, a wall-clock reading for an unzoned one): equal rows are equal instants, whatever
    zone or unit each side shows them in."""
    cols = []
    for name in t.schema.names:
        c = t.column(name)
        if pa.types.is_timestamp(c.type):
            c = c.cast(pa.timestamp("us", tz=c.type.tz)).cast(pa.int64())
        cols.append(c.to_pylist())
    return sorted(zip(*cols, strict=True), key=lambda r: (r[0], r[1]))


@pytest.fixture
def session_zone(spark_local: Any) -> Iterator[Any]:
    """The local session, its time zone set per test and put back afterwards."""
    before = spark_local.conf.get("spark.sql.session.timeZone")
    try:
        yield spark_local
    finally:
        spark_local.conf.set("spark.sql.session.timeZone", before)


@pytest.mark.parametrize("zone", ["UTC", "America/Los_Angeles", "Asia/Kolkata"])
def test_zoned_timestamps_read_as_the_local_api_does(session_zone: Any, tmp_path: Path,
                                                      zone: str) -> None:
    spark = session_zone
    spark.conf.set("spark.sql.session.timeZone", zone)
    store = sd.Store.open(str(tmp_path / "store"), create=True)
    table = store.create_table("t", SCHEMA, split_points=[
        dt.datetime.fromtimestamp((BASE + 20 * 3_600_000) / 1000, dt.UTC)])
    table.ingest(_data(40))
    want = _instants(table.query())
    assert len(want) == 40
    frame = spark.read.format("sediment").option("store", store.uri).option("table", "t").load()
    assert [f.dataType.simpleString() for f in frame.schema.fields] == [
        "timestamp", "int", "timestamp", "timestamp", "timestamp", "timestamp", "timestamp_ntz"]
    assert _instants(frame.toArrow()) == want

    # a key range pushed down: the rows the local API selects for the same instants
    lo = dt.datetime.fromtimestamp((BASE + 10 * 3_600_000) / 1000, dt.UTC)
    hi = dt.datetime.fromtimestamp((BASE + 30 * 3_600_000) / 1000, dt.UTC)
    source = spark.read.format("sediment").option("store", store.uri).option("table", "t") \
        .option("pushdown", "true").load()
    pushed = source.filter((source.at >= lo) & (source.at < hi))
    local = table.query(ranges=[sd.Range(lo, hi)])
    assert local.num_rows == 20
    assert _instants(pushed.toArrow()) == _instants(local)


def test_zoned_timestamps_through_read_table_and_bulk_import(spark_local: Any,
                                                             tmp_path: Path) -> None:
    from sediment.spark import bulk_import, read_table

    store = sd.Store.open(str(tmp_path / "store"), create=True)
    for name, schema in (("t", SCHEMA), ("micros", MICROS)):
        table = store.create_table(name, schema)
        table.ingest(_data(30).select(schema.field_names))
        table.compact()  # one file per leaf: Spark's own reader takes it (micros only)
        want = _instants(table.query())
        assert _instants(read_table(spark_local, table).toArrow()) == want
        frame = spark_local.read.format("sediment").option("store", store.uri) \
            .option("table", name).load()
        copy = store.create_table(f"{name}_copy", schema)
        bulk_import(spark_local, copy, frame)
        assert copy.schema.to_arrow() == schema.to_arrow()
        assert _instants(copy.query()) == want


def test_a_nanosecond_spark_cannot_hold_is_refused_naming_the_field(spark_local: Any,
                                                                     tmp_path: Path) -> None:
    store = sd.Store.open(str(tmp_path / "store"), create=True)
    data = _data(3)
    ny = data.column("ny").cast(pa.int64()).to_pylist()
    ny[1] += 5  # five nanoseconds past a whole microsecond
    table = store.create_table("t", SCHEMA)
    table.ingest(data.set_column(3, "ny", pa.array(ny, pa.timestamp(
        "ns", tz="America/New_York"))))
    frame = spark_local.read.format("sediment").option("store", store.uri) \
        .option("table", "t").load()
    with pytest.raises(Exception, match=r"table t: field 'ny'.*Spark cannot hold") as e:
        frame.toArrow()
    assert "AssertionError" not in str(e.value)
    # the other fields still read: naming the columns leaves the field out
    some = spark_local.read.format("sediment").option("store", store.uri) \
        .option("table", "t").option("columns", "at,seq,tokyo").load()
    assert some.count() == 3


def test_co_join_on_a_zoned_key(spark_local: Any, tmp_path: Path) -> None:
    """Two members of a scheme keyed by a zoned timestamp: Spark's co-join gives the rows
    ``sd.join`` gives, as the same instants."""
    from sediment.spark import co_join

    store = sd.Store.open(str(tmp_path / "store"), create=True)
    store.create_scheme("hours", [("at", pa.timestamp("ms", tz="Europe/Paris"))])
    left = store.create_table("left", MICROS, scheme="hours")
    right = store.create_table("right", sd.Schema(
        row_keys=[("when", pa.timestamp("ms", tz="Europe/Paris"))],
        values=[("seen", pa.timestamp("us", tz="Asia/Tokyo"), True)]), scheme="hours")
    data = _data(20).select(MICROS.field_names)
    left.ingest(data)
    right.ingest(pa.table({"when": data.column("at").slice(0, 10),
                           "seen": data.column("tokyo").slice(0, 10)}))
    want = sd.join(left, right)
    got = co_join(spark_local, left, right).toArrow()
    assert want.num_rows == 10  # every key once on each side

    def norm(t: pa.Table) -> list[tuple[Any, ...]]:
        cols = []
        for c in t.columns:
            if pa.types.is_timestamp(c.type):
                c = c.cast(pa.timestamp("us", tz=c.type.tz)).cast(pa.int64())
            cols.append(c.to_pylist())
        return sorted(zip(*cols, strict=True))

    assert got.column_names == want.column_names
    assert norm(got) == norm(want)
