"""Upserts, overwrites and deletes on Spark (``local[2,2]``): ``bulk_import(..., upsert=True)``
and the writer's ``.option("write", "upsert")`` against a pandas reference in which the last
record of a key in input order wins (input order as ``bulk_import`` defines it: a DataFrame's
``collect()`` order, files in the order given); ``.mode("overwrite")`` as one commit; every
Spark read equal to ``table.query()`` after upserts and deletes, before and after compaction;
bad write options and mismatched schemas refused as an append refuses them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest
from spark_helpers import (
    COLUMNS,
    SCHEMA,
    arrow,
    assert_files_in_their_regions,
    canonical,
    leaves,
    make_frame,
    reader_options,
)

import sediment as sd
from sediment.errors import DataError
from sediment.spark import bulk_import, read_table, register_view

pytestmark = pytest.mark.spark

RECORD_KEY = ["key", "ts"]


def _resent(base: pd.DataFrame, parts: int, rows: int, tag: str) -> list[pd.DataFrame]:
    """``parts`` frames re-sending ``rows`` of ``base``'s record keys each (overlapping, with
    repeats inside a frame), every row's value naming where it came from."""
    out = []
    for p in range(parts):
        f = base.sample(rows, replace=True, random_state=p).copy()
        f["value"] = [f"{tag}{p}-{i}" for i in range(len(f))]
        out.append(f.reset_index(drop=True))
    return out


def _union(spark: Any, frames: list[pd.DataFrame]) -> Any:
    """One DataFrame of the frames, in order: a union concatenates its inputs' partitions, so
    ``collect()`` returns the frames' rows in order."""
    out = spark.createDataFrame(frames[0])
    for f in frames[1:]:
        out = out.union(spark.createDataFrame(f))
    return out


def _collected(frame: Any) -> pd.DataFrame:
    return pd.DataFrame([r.asDict() for r in frame.collect()], columns=COLUMNS)


def _upserted(table: pd.DataFrame, *inputs: pd.DataFrame) -> pd.DataFrame:
    """The reference: each input record replaces the table's records of its key; among an
    input's records of one key the last wins."""
    new = pd.concat(inputs, ignore_index=True).drop_duplicates(RECORD_KEY, keep="last")
    kept = table.merge(new[RECORD_KEY], on=RECORD_KEY, how="left", indicator=True)
    kept = kept[kept["_merge"] == "left_only"].drop(columns="_merge")
    return pd.concat([kept, new], ignore_index=True)


def _equal(actual: Any, want: pd.DataFrame) -> None:
    got = canonical(actual if isinstance(actual, pa.Table | pd.DataFrame)
                    else _collected(actual))
    assert len(got) == len(want), f"{len(got)} rows, expected {len(want)}"
    pd.testing.assert_frame_equal(got, canonical(want), check_dtype=False)


def test_bulk_import_upsert_last_in_input_order_wins(spark_local: Any, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A DataFrame of six Spark partitions (leaves assigned in the JVM, then in Python) and
    files cut into pieces read by different tasks: each time one commit, equal to the
    reference."""
    import importlib

    import sediment.spark.inputs as inputs

    bi = importlib.import_module("sediment.spark.bulk_import")  # (the package's name is the
    # function's)

    store = sd.Store.open(str(tmp_path / "store"), create=True)
    table = store.create_table("events", SCHEMA,
                               properties={"bulk_import.target_leaf_rows": 600})
    base = make_frame(2000, keys=40, seed=1)
    table.ingest(arrow(base))
    want = base

    # a DataFrame: leaves assigned by Spark (one string key), pre-split in the same commit
    frame = _union(spark_local, _resent(base, 3, 700, "a"))
    assert frame.rdd.getNumPartitions() > 3
    before = table.version
    result = bulk_import(spark_local, table, frame, upsert=True)
    want = _upserted(want, _collected(frame))
    assert table.version == result.version == before + 1
    [entry] = table.history()[-1:]
    assert entry.kind == "add_files_with_splits" and "upsert:" in entry.summary
    assert len(leaves(table)) > 1
    _equal(table.query(), want)
    assert_files_in_their_regions(table)

    # leaves assigned in the Python pass
    monkeypatch.setattr(bi, "JVM_LEAF_LIMIT", 0)
    frame = _union(spark_local, _resent(base, 2, 900, "b"))
    bulk_import(spark_local, table, frame, upsert=True)
    want = _upserted(want, _collected(frame))
    assert table.history()[-1].summary.startswith("upsert:")
    _equal(table.query(), want)

    # files, given in the order b, a: each cut into pieces, which tasks read in any order
    monkeypatch.setattr(inputs, "MIN_PIECE_BYTES", 1)
    files = dict(zip("ab", _resent(base, 2, 1500, "f"), strict=True))
    for name, f in files.items():
        pq.write_table(arrow(f), tmp_path / f"{name}.parquet", row_group_size=100)
    planned, _ = inputs.plan_pieces([(pafs.LocalFileSystem(), str(tmp_path / "a.parquet"))],
                                    2)
    assert len(planned) > 2
    bulk_import(spark_local, table, [str(tmp_path / "b.parquet"), str(tmp_path / "a.parquet")],
                upsert=True)
    want = _upserted(want, files["b"], files["a"])
    _equal(table.query(), want)


def test_each_leaf_reaches_its_stage_in_input_order(spark_local: Any) -> None:
    """Whatever order a shuffle hands a leaf's rows over in, an upsert's stage gets them in
    input order (here the order column runs against the rows' positions)."""
    from pyspark.sql import functions as F  # noqa: N812 (Spark's own spelling)

    from sediment.spark import tasks
    from sediment.spark.bulk_import import _by_leaf

    n = 4000
    frame = spark_local.range(0, n, numPartitions=4).select(
        (F.col("id") % 3).alias(tasks.PID), (F.lit(n) - F.col("id")).alias(tasks.ORDER))
    staged = _by_leaf(frame, 3, upsert=True).rdd.mapPartitions(
        lambda rows: [[r[1] for r in rows]]).collect()
    assert sum(len(p) for p in staged) == n
    assert all(p == sorted(p) for p in staged)


def test_writer_upserts_and_overwrites_in_one_commit(spark_local: Any, tmp_path: Path) -> None:
    store = sd.Store.open(str(tmp_path / "store"), create=True)
    table = store.create_table("events", SCHEMA, split_points=["k020"])
    base = make_frame(1500, keys=40, seed=2)
    table.ingest(arrow(base))

    def writer(frame: Any) -> Any:
        return frame.write.format("sediment").options(**reader_options(store)) \
            .option("table", "events")

    # upsert: every task's files in one commit; across Spark partitions the later one wins
    frame = _union(spark_local, _resent(base, 3, 600, "w"))
    before = table.version
    writer(frame).option("write", "upsert").mode("append").save()
    assert table.version == before + 1
    assert table.history()[-1].summary.startswith("upsert:")
    want = _upserted(base, _collected(frame))
    _equal(table.query(), want)

    # overwrite: everything deleted and the new records added, in one commit
    fresh = make_frame(700, keys=10, seed=3, start=50_000)
    writer(spark_local.createDataFrame(fresh)).mode("overwrite").save()
    assert table.version == before + 2
    assert table.history()[-1].summary.startswith("overwrite:")
    _equal(table.query(), fresh)
    # an upserting overwrite: the table is the input, one record per key
    dup = _union(spark_local, [fresh, fresh.assign(value="again")])
    writer(dup).option("write", "upsert").mode("overwrite").save()
    assert table.version == before + 3
    _equal(table.query(), fresh.assign(value="again"))
    # an empty DataFrame leaves the table empty, in one commit
    writer(spark_local.createDataFrame(fresh).limit(0)).mode("overwrite").save()
    assert table.version == before + 4
    assert table.history()[-1].summary.startswith("overwrite: 0 files")
    assert table.query().num_rows == 0 and table.files() == []


def test_spark_reads_equal_query_after_upserts_and_deletes(spark_local: Any,
                                                           tmp_path: Path) -> None:
    """The data source (with and without pushdown), ``read_table`` and a view equal
    ``table.query()`` after an upsert and deletes by keys, range and filter, before and after
    compaction; the leaf nothing touched stays Spark's own Parquet read."""
    store = sd.Store.open(str(tmp_path / "store"), create=True)
    table = store.create_table("events", SCHEMA, split_points=["k010", "k020", "k030"])
    base = make_frame(3000, keys=40, seed=4)
    table.ingest(arrow(base))
    table.compact(full=True)
    touched = base[(base.key >= "k010")]
    bulk_import(spark_local, table, spark_local.createDataFrame(
        _resent(touched, 1, 400, "u")[0]), upsert=True)
    table.upsert(arrow(touched.head(50).assign(value="again")))
    table.delete(keys=["k012"])
    table.delete(ranges=sd.Range("k021", "k024"))
    table.delete(ranges=sd.Range("k030", None), filter=pc.field("n") > 900)

    def check(native: bool) -> None:
        want = table.query()
        options = {**reader_options(store), "table": "events"}
        _equal(spark_local.read.format("sediment").options(**options).load(), want.to_pandas())
        pushed = spark_local.read.format("sediment").options(**options) \
            .option("pushdown", "true").load().filter("key = 'k015' or key = 'k033'")
        _equal(pushed, table.query(keys=["k015", "k033"]).to_pandas())
        frame = read_table(spark_local, table)
        plan = frame._jdf.queryExecution().optimizedPlan().toString().lower()
        assert ("parquet" in plan) == native
        _equal(frame, want.to_pandas())
        register_view(spark_local, table, "events_view")
        counts = spark_local.sql("select key, count(*) as c from events_view group by key") \
            .toPandas().set_index("key")["c"].sort_index()
        assert counts.to_dict() == want.to_pandas().groupby("key").size().to_dict()

    check(native=True)  # leaf [-, k010): one compacted file, nothing to apply
    table.compact(full=True)
    check(native=True)
    assert table.query().num_rows < len(base)


def test_bad_write_option_and_mismatched_schema_are_refused(spark_local: Any,
                                                            tmp_path: Path) -> None:
    store = sd.Store.open(str(tmp_path / "store"), create=True)
    table = store.create_table("events", SCHEMA)
    table.ingest(arrow(make_frame(100, seed=5)))
    before = table.version
    frame = spark_local.createDataFrame(make_frame(50, seed=6))

    def writer() -> Any:  # a new writer each time: .option() changes the one it is called on
        return frame.write.format("sediment").options(**reader_options(store)) \
            .option("table", "events").mode("append")

    def reader(how: Any) -> Any:
        return how.format("sediment").options(**reader_options(store)).option("table", "events")

    with pytest.raises(Exception, match=r"QueryError: the sediment data source writing to "
                                        r"table events: option write='merge' is not one of "
                                        r"append, upsert"):
        writer().option("write", "merge").save()
    # a misspelt option is refused, not ignored (ignored, wirte=upsert appended duplicates),
    # and so is a read's option on a write
    with pytest.raises(Exception, match=r"QueryError: the sediment data source \(write of "
                                        r"table events\): unknown option 'wirte' \(did you "
                                        r"mean 'write'\?\)"):
        writer().option("wirte", "upsert").save()
    with pytest.raises(Exception, match=r"unknown option 'startingversion'"):
        writer().option("startingVersion", "2").save()
    with pytest.raises(Exception, match=r"unknown option 'verison' \(did you mean 'version'"):
        reader(spark_local.read).option("verison", "2").load()
    with pytest.raises(Exception, match=r"unknown option 'startingversoin' \(did you mean "
                                        r"'startingVersion'"):
        reader(spark_local.readStream).option("startingVersoin", "latest").load()

    # no field n: the upsert is refused as the append is, on both routes, each naming itself
    short = frame.drop("n")
    errors = []
    for write in ("append", "upsert"):
        with pytest.raises(Exception, match="DataError") as err:
            short.write.format("sediment").options(**reader_options(store)) \
                .option("table", "events").option("write", write).mode("append").save()
        errors.append(next(line for line in str(err.value).splitlines()
                           if "sediment.errors.DataError" in line))
    assert "ingest into table events" in errors[0] and "has no field 'n'" in errors[0]
    assert errors[1] == errors[0].replace("ingest into", "upsert into")
    refused = []
    for upsert in (False, True):
        with pytest.raises(DataError) as bulk:
            bulk_import(spark_local, table, short, upsert=upsert)
        refused.append(str(bulk.value))
    assert refused[0] == refused[1] and "'n'" in refused[0]
    assert table.version == before


def test_co_join_applies_upserts_and_deletes(spark_local: Any, tmp_path: Path) -> None:
    """``co_join`` joins what each table's ``query()`` answers after an upsert and deletes."""
    from sediment.spark import co_join

    users = sd.Schema(row_keys=[("key", pa.string())], values=[("v", pa.int64())])
    orders = sd.Schema(row_keys=[("user", pa.string())], values=[("item", pa.string())])
    keys = [f"k{i:04d}" for i in range(600)]
    store = sd.Store.open(str(tmp_path / "store"), create=True)
    store.create_scheme("users", row_keys=[("key", pa.string())], split_points=["k0300"])
    u = store.create_table("u", users, scheme="users")
    o = store.create_table("o", orders, scheme="users")
    u.ingest(pa.table({"key": keys, "v": list(range(600))}))
    o.ingest(pa.table({"user": keys[::2], "item": [f"i{i}" for i in range(300)]}))
    u.upsert(pa.table({"key": keys[:50], "v": [-1] * 50}))
    u.delete(ranges=sd.Range("k0100", "k0150"))
    o.delete(keys=keys[400:420])
    o.delete(filter=pc.field("item") == "i7")

    got = co_join(spark_local, u, o, how="inner").toPandas()
    want = u.query().to_pandas().merge(o.query().to_pandas().rename(columns={"user": "key"}),
                                       on="key")
    cols = ["key", "v", "item"]
    assert got[cols].sort_values("key").reset_index(drop=True).equals(
        want[cols].sort_values("key").reset_index(drop=True))
    # keys[0:50:2] upserted, less keys[14], whose order "i7" is deleted
    assert (got["v"] == -1).sum() == 24 and len(got) == len(want) < 300
