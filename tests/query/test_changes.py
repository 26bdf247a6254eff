"""The change feed, case by case: what each commit kind yields (against hand-written
expectations), the shape of rows across schema changes, refusals, retention and pins, and
``follow`` racing writers and a compacting maintainer."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import sediment as sd
from helpers import run_together
from sediment.errors import QueryError, SchemaError, VersionExpiredError, WhereError
from sediment.maintenance.gc import gc
from sediment.state.log import log_key
from sediment.state.versions import prune

SCHEMA = sd.Schema(row_keys=[("k", pa.string())], sort_keys=[("ts", pa.int64())],
                   values=[("v", pa.int64())])


def _batch(*recs: tuple[str, int, int]) -> pa.Table:
    return pa.table({"k": [r[0] for r in recs], "ts": [r[1] for r in recs],
                     "v": [r[2] for r in recs]})


def _rows(reader: pa.RecordBatchReader, *cols: str) -> list[tuple[Any, ...]]:
    t = reader.read_all()
    names = list(cols) or ["k", "ts", "v", "_change_type", "_commit_version"]
    return [tuple(r[n] for n in names) for r in t.to_pylist()]


@pytest.fixture
def store(tmp_path: Path) -> sd.Store:
    return sd.Store.open(str(tmp_path / "s"), create=True)


def test_an_upsert_replaces_records_by_their_whole_record_key_in_a_run(store: sd.Store) -> None:
    """Runs of keyed commits (read together) match an upsert to the records it replaces by
    the whole record key: with no sort key every record of the row key, with two sort keys
    only a record equal on both; the same rows as following the table commit by commit."""
    plain = store.create_table("users", sd.Schema(row_keys=[("user", pa.string())],
                                                  values=[("plan", pa.string())]))
    start = plain.version
    plain.ingest(pa.table({"user": ["ann", "bob"], "plan": ["free", "free"]}))
    v = plain.upsert(pa.table({"user": ["ann"], "plan": ["pro"]})).version
    gone = plain.delete(keys=["bob"])
    cols = ("user", "plan", "_change_type", "_commit_version")
    assert _rows(plain.changes(start), *cols)[2:] == [
        ("ann", "free", "update_preimage", v), ("ann", "pro", "update_postimage", v),
        ("bob", "free", "delete", gone)]
    two = store.create_table("two", sd.Schema(
        row_keys=[("k", pa.string())], sort_keys=[("a", pa.int64()), ("b", pa.int64())],
        values=[("v", pa.string())]))
    start = two.version
    two.ingest(pa.table({"k": ["x", "x"], "a": [1, 2], "b": [5, 9], "v": ["o15", "o29"]}))
    v = two.upsert(pa.table({"k": ["x"], "a": [1], "b": [9], "v": ["n19"]})).version
    assert _rows(two.changes(start), "a", "b", "v", "_change_type")[2:] == [
        (1, 9, "n19", "insert")]
    for t in (plain, two):  # the runs' answer is the commit-by-commit one
        followed = [r for _, (_, reader) in zip(range(t.version - start),
                                                t.follow(start, poll_seconds=0.01),
                                                strict=False)
                    for r in reader.read_all().to_pylist()]
        assert followed == t.changes(start).read_all().to_pylist()


def test_each_commit_kind_yields_what_the_docs_say(store: sd.Store) -> None:
    t = store.create_table("events", SCHEMA, split_points=["m"])
    v0 = t.version
    v1 = t.ingest(_batch(("a", 1, 1), ("b", 1, 2), ("x", 1, 3))).version
    v2 = t.upsert(_batch(("b", 1, 20), ("c", 1, 4))).version
    v3 = t.delete(keys=["a"])
    v4 = t.delete(filter="v > 10")
    t.compact(full=True)
    t.split()
    v5 = t.version
    v6 = t.restore(v2)
    v7 = t.clear()
    assert _rows(t.changes(v0, v1)) == [("a", 1, 1, "insert", v1), ("b", 1, 2, "insert", v1),
                                        ("x", 1, 3, "insert", v1)]
    assert _rows(t.changes(v1, v2)) == [("b", 1, 2, "update_preimage", v2),
                                        ("b", 1, 20, "update_postimage", v2),
                                        ("c", 1, 4, "insert", v2)]
    assert _rows(t.changes(v2, v3)) == [("a", 1, 1, "delete", v3)]
    assert _rows(t.changes(v3, v4)) == [("b", 1, 20, "delete", v4)]
    assert _rows(t.changes(v4, v5)) == []  # compaction, job assignment, splits
    assert sorted(_rows(t.changes(v5, v6))) == [("a", 1, 1, "insert", v6),
                                                ("b", 1, 20, "insert", v6)]
    assert sorted(_rows(t.changes(v6, v7))) == [
        ("a", 1, 1, "delete", v7), ("b", 1, 20, "delete", v7), ("c", 1, 4, "delete", v7),
        ("x", 1, 3, "delete", v7)]
    # (a, b] then (b, c] is (a, c], in commit order
    assert _rows(t.changes(v0, v7)) == [r for a, b in [(v0, v4), (v4, v7)]
                                        for r in _rows(t.changes(a, b))]
    ts = t.changes(v0, v1).read_all().column("_commit_timestamp")
    assert ts.type == pa.timestamp("ms", tz="UTC")
    committed = {e.version: e.time for e in t.history()}[v1]
    assert abs(ts[0].value / 1000 - committed) < 0.002


@pytest.mark.parametrize("merge, late, expected", [
    ("first", 9, []),  # the first write of a record key stays: the late one changes nothing
    ("last", 9, [("a", 1, 1, "update_preimage"), ("a", 1, 9, "update_postimage")]),
    ("aggregate", 9, [("a", 1, 1, "update_preimage"), ("a", 1, 10, "update_postimage")]),
])
def test_a_plain_ingest_on_a_merge_rule_table_yields_what_the_record_became(
        store: sd.Store, merge: str, late: int, expected: list[tuple[Any, ...]]) -> None:
    props: dict[str, Any] = {"merge": merge}
    if merge == "aggregate":
        props["merge.functions"] = '{"v": "sum"}'
    t = store.create_table("m", SCHEMA, properties=props)
    t.ingest(_batch(("a", 1, 1), ("b", 1, 2)))
    before = t.version
    t.ingest(_batch(("a", 1, late), ("c", 1, 3)))
    got = _rows(t.changes(before), "k", "ts", "v", "_change_type")
    assert got == [*expected, ("c", 1, 3, "insert")]


def test_a_delete_on_a_merge_rule_table_reports_the_merged_records_it_removed(
        store: sd.Store) -> None:
    t = store.create_table("agg", SCHEMA, properties={"merge": "aggregate",
                                                      "merge.functions": '{"v": "sum"}'})
    t.ingest(_batch(("a", 1, 1), ("b", 1, 1)))
    t.ingest(_batch(("a", 1, 5)))
    before = t.version
    t.delete(filter="v = 5")  # a filter judges merged records: a sums to 6, nothing matches
    assert _rows(t.changes(before)) == []
    t.delete(filter="v = 6")
    assert _rows(t.changes(before + 1), "k", "v", "_change_type") == [("a", 6, "delete")]


def test_rows_take_the_end_versions_shape(store: sd.Store) -> None:
    t = store.create_table("shape", SCHEMA)
    v0 = t.version
    t.ingest(_batch(("a", 1, 1)))
    t.add_columns([("note", pa.string())])
    t.ingest(pa.table({"k": ["b"], "ts": [1], "v": [2], "note": ["n"]}))
    t.rename_column("v", "value")
    got = t.changes(v0).read_all()
    assert got.column_names == ["k", "ts", "value", "note", "_change_type", "_commit_version",
                                "_commit_timestamp"]
    assert got.select(["k", "value", "note"]).to_pylist() == [
        {"k": "a", "value": 1, "note": None}, {"k": "b", "value": 2, "note": "n"}]
    # up to a version before the rename, rows are shaped by that version's schema
    assert "v" in t.changes(v0, v0 + 1).read_all().column_names


def test_columns_and_filter_apply_per_row_and_may_name_the_change_columns(
        store: sd.Store) -> None:
    t = store.create_table("f", SCHEMA)
    v0 = t.version
    t.ingest(_batch(("a", 1, 1), ("b", 1, 2)))
    t.upsert(_batch(("a", 1, 5)))
    got = t.changes(v0, columns=["k", "_change_type"],
                    filter="_change_type = 'update_postimage' OR k = 'b'").read_all()
    assert got.to_pylist() == [{"k": "b", "_change_type": "insert"},
                               {"k": "a", "_change_type": "update_postimage"}]
    expr = t.changes(v0, filter=pc.field("v") > 1).read_all()
    assert expr.column("v").to_pylist() == [2, 5]


def test_bad_requests_are_refused_naming_the_table(store: sd.Store) -> None:
    t = store.create_table("bad", SCHEMA)
    t.ingest(_batch(("a", 1, 1)))
    t.tag("one")
    with pytest.raises(QueryError, match="table bad: changes from version 2 to 1: the start "
                                         "is after the end"):
        t.changes(2, 1)
    with pytest.raises(QueryError, match="no tag|tag"):
        t.changes("nope")
    with pytest.raises(QueryError, match="table bad has no version 9"):
        t.changes(9)
    with pytest.raises(QueryError, match="table bad has no column 'zz' for its change feed"):
        t.changes(0, columns=["zz"])
    with pytest.raises(QueryError, match="table bad's change feed: column 'k' is asked for twice "
                                         "\\(columns="):
        t.changes(0, columns=["k", "_change_type", "k"])
    with pytest.raises(WhereError, match="change feed of table bad"):
        t.changes(0, filter="zz = 1")
    assert _rows(t.changes("one")) == []  # a tag is a version
    odd = store.create_table("odd", sd.Schema(row_keys=[("k", pa.string())],
                                              values=[("_change_type", pa.string())]))
    with pytest.raises(SchemaError, match="table odd has a column named '_change_type'"):
        odd.changes(0)


def test_a_start_past_retention_is_expired_unless_pinned(store: sd.Store) -> None:
    t = store.create_table("old", SCHEMA, properties={
        "retention.seconds": 60, "gc.delay_seconds": 0, "gc.clock_skew_seconds": 0,
        "state.snapshot.interval": 2})
    for i in range(3):
        t.ingest(_batch((f"k{i}", 1, i)))
    pinned = t.version
    t.pin("follower", pinned, ttl_seconds=3600, onward=True)
    for i in range(3, 6):
        t.ingest(_batch((f"k{i}", 1, i)))
    t.pin("plain", pinned + 1, ttl_seconds=3600)  # holds its own version's files only
    t.compact(full=True)
    objects = t._handle.objects
    long_ago = time.time() - 3600
    for v in range(1, t.version - 1):
        os.utime(objects.path(log_key(v)), (long_ago, long_ago))
    prune(t._handle.states, 60)
    gc(t._handle, now=time.time() + 120)
    with pytest.raises(VersionExpiredError, match=r"table old: version 1 has expired.*"
                                                  r"retention.seconds = 60 s"):
        t.changes(1)
    # the onward pin keeps its version and everything after it: its changes still read
    assert [r[0] for r in _rows(t.changes(pinned))] == ["k3", "k4", "k5"]
    assert t.unpin("follower")
    gc(t._handle, now=time.time() + 120)
    with pytest.raises(VersionExpiredError, match="garbage collection deleted"):
        t.changes(pinned + 1).read_all()  # a plain pin keeps its version's files only


def test_follow_sees_each_version_once_in_order_while_writers_and_compaction_race(
        store: sd.Store) -> None:
    t = store.create_table("live", SCHEMA, split_points=["m"],
                           properties={"state.cache.refresh_seconds": 0})
    start = t.version
    stop = threading.Event()
    seen: list[tuple[int, pa.Table]] = []

    def follower() -> None:
        for version, reader in store.table("live").follow(start, poll_seconds=0.02,
                                                          stop=stop):
            seen.append((version, reader.read_all()))

    def writer(w: int) -> None:
        mine = store.table("live")
        for i in range(8):
            mine.ingest(_batch((f"{'az'[w]}{i}", w, i)))

    def compactor() -> None:
        mine = store.table("live")
        for _ in range(4):
            mine.compact()
            time.sleep(0.02)

    th = threading.Thread(target=follower)
    th.start()
    run_together([0, 1, "c"], lambda w: compactor() if w == "c" else writer(int(w)))
    final = t.version
    deadline = time.monotonic() + 20
    while (not seen or seen[-1][0] < final) and time.monotonic() < deadline:
        time.sleep(0.02)
    stop.set()
    th.join(10)
    assert [v for v, _ in seen] == list(range(start + 1, final + 1))
    inserted = pa.concat_tables([r for _, r in seen if r.num_rows])
    assert set(inserted.column("_change_type").to_pylist()) == {"insert"}
    assert sorted(inserted.column("k").to_pylist()) == sorted(
        f"{c}{i}" for c in "az" for i in range(8))


def test_a_follower_resumes_after_the_last_version_it_handled_and_holds_a_pin(
        store: sd.Store) -> None:
    t = store.create_table("resume", SCHEMA)
    t.ingest(_batch(("a", 1, 1)))
    start = t.version - 1
    t.ingest(_batch(("b", 1, 2)))
    follower = t.follow(start, poll_seconds=0.01, pin="reader-1")
    v, r = next(follower)
    assert (v, r.read_all().column("k").to_pylist()) == (start + 1, ["a"])
    v2, _ = next(follower)  # asking for the next one finished the first: the pin moved there
    pins = {p.name: p.version for p in t.tags()}
    assert pins["reader-1"] == start + 1
    follower.close()
    # after a restart, from the last version handled: nothing twice, nothing lost
    again = t.follow(v2, poll_seconds=0.01)
    t.ingest(_batch(("c", 1, 3)))
    v3, r3 = next(again)
    assert (v3, r3.read_all().column("k").to_pylist()) == (v2 + 1, ["c"])


def test_an_upsert_of_a_record_age_off_drops_still_removes_the_one_it_replaced(
        store: sd.Store) -> None:
    schema = sd.Schema(row_keys=[("k", pa.string())], sort_keys=[("ts", pa.int64())],
                       values=[("at", pa.int64()), ("v", pa.int64())])
    t = store.create_table("aged", schema, properties={"query.iterators": json.dumps(
        [{"type": "age_off", "field": "at", "ttl_seconds": 3600}])})
    now = int(time.time() * 1000)
    t.ingest(pa.table({"k": ["a", "b"], "ts": [1, 1], "at": [now, now], "v": [1, 2]}))
    before = t.version
    t.upsert(pa.table({"k": ["a", "b"], "ts": [1, 1], "at": [now - 7_200_000, now],
                       "v": [10, 20]}))
    assert t.query().column("k").to_pylist() == ["b"]  # a's new record is aged off
    assert _rows(t.changes(before), "k", "v", "_change_type") == [
        ("a", 1, "delete"), ("b", 2, "update_preimage"), ("b", 20, "update_postimage")]
