"""``spark.readStream.format("sediment")``: the content then the changes against a pandas
reference, starting versions, change rows equal to ``Table.changes``, admission limits and
``Trigger.AvailableNow``, restarts from a checkpoint after compaction and splits, expired and
pinned checkpoints, deletes without the change feed, and bad options.

Queries write through ``foreachBatch`` into a list (one Arrow table per micro-batch)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest
from spark_helpers import SCHEMA, assert_same_rows, make_frame, reader_options

import sediment as sd
from sediment.maintenance.gc import gc
from sediment.spark.datasource import SedimentDataSource
from sediment.state.log import log_key
from sediment.state.versions import prune

pytestmark = pytest.mark.spark
RECORD = ["key", "ts", "value", "n"]
CHANGE = [*RECORD, "_change_type", "_commit_version"]


@pytest.fixture
def store(tmp_path: Path) -> sd.Store:
    return sd.Store.open(str(tmp_path / "store"), create=True)


def _stream(spark: Any, store: sd.Store, table: str = "events", **options: Any) -> Any:
    reader = spark.readStream.format("sediment").options(**reader_options(store))
    reader = reader.option("table", table)
    for k, v in options.items():
        reader = reader.option(k, str(v))
    return reader.load()


def _run(df: Any, checkpoint: Path, *, available_now: bool = True) -> list[pa.Table]:
    """The non-empty micro-batches of a query over ``df`` (to the end with AvailableNow)."""
    got: list[pa.Table] = []

    def each(batch: Any, _: int) -> None:
        t = batch.toArrow()
        if t.num_rows:
            got.append(t)

    writer = df.writeStream.foreachBatch(each).option("checkpointLocation", str(checkpoint))
    query = writer.trigger(availableNow=True).start()
    assert query.awaitTermination(120), "an AvailableNow query did not stop"
    return got


def _rows(batches: list[pa.Table]) -> pd.DataFrame:
    return pd.concat([b.select(RECORD).to_pandas() for b in batches], ignore_index=True)


def _changes(batches: list[pa.Table] | pa.Table) -> list[tuple[Any, ...]]:
    t = batches if isinstance(batches, pa.Table) else pa.concat_tables(batches)
    millis = t.column("_commit_timestamp").cast(pa.timestamp("ms", tz="UTC")).cast(pa.int64())
    return sorted(zip(*(t.column(c).to_pylist() for c in CHANGE), millis.to_pylist(),
                      strict=True), key=repr)


def test_content_then_changes_and_a_restart_after_compaction_and_split(
        spark_local: Any, store: sd.Store, tmp_path: Path) -> None:
    table = store.create_table("events", SCHEMA, split_points=[("k020",)],
                               properties={"partition.split.threshold": 200})
    first = make_frame(300, seed=1)
    table.ingest(first)
    # the content at the start is read per leaf, in parallel (no Spark needed to plan it)
    source = SedimentDataSource({**reader_options(store), "table": "events"})
    plan = source.streamReader(source.schema())
    start = plan.initialOffset()
    assert len(plan.partitions(start, plan.latestOffset(start, plan.getDefaultReadLimit()))) == 2
    table.unpin(f"stream-events-{start['stream']}")

    ck = tmp_path / "ck"
    assert_same_rows(_rows(_run(_stream(spark_local, store), ck)), first)
    second = make_frame(200, seed=2, start=1000)
    table.ingest(second)
    upserted = first.iloc[:50].assign(value="up")
    table.upsert(upserted)
    leaves = len(table.leaves())
    table.compact(full=True)
    table.split()
    assert len(table.leaves()) > leaves
    third = make_frame(100, seed=3, start=5000)
    table.ingest(third)
    # the restart continues where the checkpoint stopped: each new record once, none lost
    assert_same_rows(_rows(_run(_stream(spark_local, store), ck)), second, upserted, third)
    pins = [t for t in table.tags() if t.name.startswith("stream-events-")]
    assert [(p.version, p.onward) for p in pins] == [(table.version, True)]


def test_starting_versions_and_change_rows_equal_table_changes(
        spark_local: Any, store: sd.Store, tmp_path: Path) -> None:
    table = store.create_table("events", SCHEMA)
    table.ingest(make_frame(40, seed=4))
    frame = make_frame(30, seed=5, start=100)
    v = table.ingest(frame).version
    table.tag("nightly", v)
    table.upsert(frame.iloc[:10].assign(value="up"))
    table.delete(keys=[frame.key.iloc[20]])
    want = _changes(table.changes(v - 1).read_all())
    assert {r[4] for r in want} == {"insert", "update_preimage", "update_postimage", "delete"}
    got = _run(_stream(spark_local, store, startingVersion=v, readChangeFeed="true"),
               tmp_path / "ck")
    assert _changes(got) == want
    # a tag starts where its version does (planned without Spark)
    source = SedimentDataSource({**reader_options(store), "table": "events",
                                 "startingVersion": "nightly"})
    assert source.streamReader(source.schema()).initialOffset()["version"] == v - 1

    # latest: only what is committed after the stream starts
    got: list[pa.Table] = []
    query = _stream(spark_local, store, startingVersion="latest").writeStream.foreachBatch(
        lambda b, _: got.append(b.toArrow())).option(
        "checkpointLocation", str(tmp_path / "latest")).start()
    try:
        query.processAllAvailable()
        assert sum(b.num_rows for b in got) == 0
        later = make_frame(20, seed=6, start=900)
        table.ingest(later)
        query.processAllAvailable()
    finally:
        query.stop()
    assert_same_rows(_rows([b for b in got if b.num_rows]), later)


def test_admission_limits_take_whole_versions_and_available_now_stops(
        spark_local: Any, store: sd.Store, tmp_path: Path) -> None:
    table = store.create_table("events", SCHEMA)
    start = table.version + 1
    v = []
    for i, size in enumerate([4, 4, 50, 4, 4, 4]):
        v.append(table.ingest(make_frame(size, seed=10 + i, start=1000 * i)).version)
        if i == 3:
            table.compact(full=True)  # changes no record: counts for no limit
    batches = _run(_stream(spark_local, store, startingVersion=start, readChangeFeed="true",
                           maxRecordsPerTrigger=10, maxVersionsPerTrigger=2), tmp_path / "ck")
    # whole versions, at most two and ten records a batch, but a version larger than the
    # limit is read whole, alone: the limits are soft
    assert [set(b.column("_commit_version").to_pylist()) for b in batches] == [
        {v[0], v[1]}, {v[2]}, {v[3], v[4]}, {v[5]}]


def test_deletes_fail_a_stream_without_the_change_feed_unless_ignored(
        spark_local: Any, store: sd.Store, tmp_path: Path) -> None:
    table = store.create_table("events", SCHEMA)
    frame = make_frame(30, seed=7)
    start = table.ingest(frame).version
    gone = table.delete(keys=[frame.key.iloc[0]])
    with pytest.raises(Exception, match=rf"(?s)QueryError: the sediment stream source on table "
                                        rf"events: version {gone} deletes records.*"
                                        rf"readChangeFeed=true.*ignoreDeletes=true"):
        _run(_stream(spark_local, store, startingVersion=start), tmp_path / "ck")
    got = _run(_stream(spark_local, store, startingVersion=start, ignoreDeletes="true"),
               tmp_path / "ck2")
    assert_same_rows(_rows(got), frame)


def test_an_expired_checkpoint_says_how_to_restart_and_a_pinned_one_survives_gc(
        spark_local: Any, store: sd.Store, tmp_path: Path) -> None:
    table = store.create_table("events", SCHEMA, properties={
        "retention.seconds": 60, "gc.delay_seconds": 0, "gc.clock_skew_seconds": 0,
        "state.snapshot.interval": 2})
    table.ingest(make_frame(10, seed=20))
    _run(_stream(spark_local, store, pin="false"), tmp_path / "unpinned")
    for i in range(2):
        table.ingest(make_frame(10, seed=21 + i, start=100 * (i + 1)))
    _run(_stream(spark_local, store), tmp_path / "pinned")
    after = [make_frame(10, seed=30 + i, start=1000 * (i + 1)) for i in range(3)]
    for frame in after:
        table.ingest(frame)
    table.compact(full=True)
    long_ago = time.time() - 3600
    for v in range(1, table.version - 1):
        os.utime(table._handle.objects.path(log_key(v)), (long_ago, long_ago))
    prune(table._handle.states, 60)
    gc(table._handle, now=time.time() + 120)
    with pytest.raises(Exception, match=r"(?s)VersionExpiredError: table events: version \d+ "
                                        r"has expired.*restart it with a new checkpoint "
                                        r"location and option startingVersion=latest"):
        _run(_stream(spark_local, store, pin="false"), tmp_path / "unpinned")
    assert_same_rows(_rows(_run(_stream(spark_local, store), tmp_path / "pinned")), *after)


def test_bad_options_name_the_table_and_the_option(spark_local: Any, store: sd.Store) -> None:
    table = store.create_table("events", SCHEMA)
    table.ingest(make_frame(5, seed=40))
    for table_name, options, message in [
            ("nope", {}, "nope"),
            ("events", {"startingVersion": "-3"}, "table events: option startingVersion='-3' "
                                                 "is not a version number"),
            ("events", {"startingVersion": "99"}, "table events: option startingVersion=99 is "
                                                 "after the table's latest version"),
            ("events", {"maxRecordsPerTrigger": "-1"}, "table events: option "
                                                      "maxRecordsPerTrigger='-1' is not a "
                                                      "positive whole number")]:
        with pytest.raises(Exception, match=message):
            _stream(spark_local, store, table_name, **options)
    with pytest.raises(Exception, match="option readChangeFeed is for spark.readStream"):
        spark_local.read.format("sediment").options(**reader_options(store)).option(
            "table", "events").option("readChangeFeed", "true").load().collect()
