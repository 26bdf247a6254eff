"""``sediment.spark.register_view`` (issue 36, item 2): a temp view that answers as
``table.query()`` at the version it pins, for key, range and value filters, on a plain table (its
compacted leaves read by Spark's own Parquet reader) and on an aggregating one (every leaf through
Sediment's merge); the data source's ``version``/``tag`` options refuse bad values with
Sediment's errors; Spark refuses its default save mode; an unknown ``write`` option is refused
naming the values it takes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import sediment as sd
from sediment.errors import QueryError, TagNotFoundError
from sediment.spark import register_view

pytestmark = pytest.mark.spark

SCHEMA = sd.Schema(row_keys=[("key", pa.string())], sort_keys=[("ts", pa.int64())],
                   values=[("status", pa.int64(), True)])


def _rows(n: int, ts: int, start: int = 0) -> pa.Table:
    keys = [f"k{i:03d}" for i in range(start, start + n)]
    return pa.table({"key": keys, "ts": [ts] * n,
                     "status": [None if i % 11 == 0 else 200 + (i * 37 + ts) % 400
                                for i in range(start, start + n)]},
                    schema=SCHEMA.to_arrow())


def _sorted(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(rows, key=lambda r: (r["key"], r["ts"], r["status"] is None, r["status"]))


def _sql(spark: Any, sql: str) -> list[dict[str, Any]]:
    return _sorted([r.asDict() for r in spark.sql(sql).collect()])


def _answers_as_query(spark: Any, t: sd.Table, view: str, version: int | str) -> None:
    """Key, range and value filters on the view give ``table.query()``'s rows at ``version``."""
    cases = [
        (f"SELECT * FROM {view}", {}),
        (f"SELECT * FROM {view} WHERE key = 'k005'", {"keys": ["k005"]}),
        (f"SELECT * FROM {view} WHERE key IN ('k001', 'k050', 'k099')",
         {"keys": ["k001", "k050", "k099"]}),
        (f"SELECT * FROM {view} WHERE key >= 'k030' AND key < 'k085'",
         {"ranges": [sd.Range("k030", "k085")]}),
        (f"SELECT * FROM {view} WHERE status >= 500", {"filter": "status >= 500"}),
    ]
    for sql, args in cases:
        want = _sorted(t.query(version=version, **args).to_pylist())
        assert _sql(spark, sql) == want, sql
        assert want or "k099" in sql, sql  # every case but one holds rows


def test_plain_table_view_is_pinned_and_answers_as_query(spark_local: Any,
                                                         tmp_path: Path) -> None:
    store = sd.Store.open(str(tmp_path / "store"), create=True)
    t = store.create_table("plain", SCHEMA, split_points=["k040", "k080"])
    t.ingest(_rows(120, 1))
    t.compact(full=True)
    t.ingest(_rows(30, 2))  # leaf [-, k040): two files, merged by Sediment
    pinned = t.version
    frame = register_view(spark_local, t, "plain_v")
    plan = frame._jdf.queryExecution().optimizedPlan().toString().lower()
    assert "parquet" in plan and "sediment" in plan  # Spark reads the compacted leaves itself
    t.ingest(_rows(50, 3, start=60))  # after registration: the view does not see it
    assert t.version > pinned
    _answers_as_query(spark_local, t, "plain_v", pinned)
    assert spark_local.sql("SELECT count(*) FROM plain_v").collect()[0][0] == \
        t.query(version=pinned).num_rows != t.query().num_rows
    register_view(spark_local, t, "plain_v")  # registered again: the head now
    assert spark_local.sql("SELECT count(*) FROM plain_v").collect()[0][0] == t.query().num_rows


def test_aggregating_table_view_applies_the_merge(spark_local: Any, tmp_path: Path) -> None:
    store = sd.Store.open(str(tmp_path / "store"), create=True)
    t = store.create_table("sums", SCHEMA, split_points=["k050"], properties={
        "query.iterators": json.dumps([{"type": "aggregate",
                                        "functions": {"status": "sum"}}])})
    for _ in range(2):  # every record twice: the sums double
        t.ingest(_rows(100, 1))
    t.compact(full=True)
    t.ingest(_rows(100, 1))
    t.tag("three")
    register_view(spark_local, t, "sums_v", version="three")
    frame = spark_local.table("sums_v")
    assert "parquet" not in frame._jdf.queryExecution().optimizedPlan().toString().lower()
    t.ingest(_rows(100, 1))
    _answers_as_query(spark_local, t, "sums_v", "three")
    one = _sql(spark_local, "SELECT * FROM sums_v WHERE key = 'k001'")
    assert one == [{"key": "k001", "ts": 1, "status": 3 * (200 + 37 + 1)}]


def test_bad_versions_are_sediment_errors(spark_local: Any, tmp_path: Path) -> None:
    store = sd.Store.open(str(tmp_path / "store"), create=True)
    t = store.create_table("events", SCHEMA)
    t.ingest(_rows(10, 1))
    with pytest.raises(QueryError, match="table events has no version 99"):
        register_view(spark_local, t, "bad_v", version=99)
    with pytest.raises(TagNotFoundError, match="no tag 'nope'"):
        register_view(spark_local, t, "bad_v", version="nope")
    assert not spark_local.catalog.tableExists("bad_v")

    def reader() -> Any:  # a fresh one each time: a DataFrameReader keeps its options
        return spark_local.read.format("sediment").option("store", store.uri) \
            .option("table", "events")

    for options, says in [({"version": "v1"}, "QueryError: .*option version='v1' is not a "
                                               "version number"),
                          ({"version": "99"}, "QueryError: table events has no version 99"),
                          ({"tag": "nope"}, "TagNotFoundError: table events has no tag"),
                          ({"version": "1", "tag": "x"}, "not both")]:
        with pytest.raises(Exception, match=says):  # Spark wraps the worker's error
            reader().options(**options).load()
    assert reader().option("version", " 2 ").load().count() == 10


def test_writes_refuse_the_default_mode_and_an_unknown_write(spark_local: Any,
                                                             tmp_path: Path) -> None:
    store = sd.Store.open(str(tmp_path / "store"), create=True)
    t = store.create_table("events", SCHEMA)
    before = t.version
    frame = spark_local.createDataFrame([("a", 1, 5)], "key string, ts long, status long")
    writer = frame.write.format("sediment").option("store", store.uri).option("table", "events")
    with pytest.raises(Exception, match="(?i)errorifexists|SaveMode|not supported"):
        writer.save()  # Spark's default mode: refused before the data source runs
    with pytest.raises(Exception, match=r"option write='replace' is not one of append, "
                                        r"upsert"):
        writer.mode("overwrite").option("write", "replace").save()
    writer.option("write", "append")
    assert t.version == before
    writer.mode("append").save()
    assert t.query().to_pylist() == [{"key": "a", "ts": 1, "status": 5}]
