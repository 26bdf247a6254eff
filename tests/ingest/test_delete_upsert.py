"""Deletes and upserts, case by case: what each covers, what it refuses, what it writes, and
how compaction that overlaps them in time settles them."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import sediment as sd
from helpers import make_table
from sediment.compaction.runner import commit_job, create_jobs, execute_job
from sediment.errors import QueryError, WhereError

SCHEMA = sd.Schema(row_keys=[("user", pa.string()), ("n", pa.int32())],
                   sort_keys=[("ts", pa.int64())], values=[("v", pa.string())])


def _rows(users: list[str], n: int = 1, ts: int = 0, v: str | None = "x") -> pa.Table:
    return pa.table({"user": users, "n": pa.array([n] * len(users), pa.int32()),
                     "ts": [ts] * len(users), "v": pa.array([v] * len(users), pa.string())})


def _objects(t: sd.Table, prefix: str) -> set[str]:
    return {o.key for o in t._handle.objects.list(prefix)}


def test_a_delete_writes_no_data_and_reads_none(tmp_path: Path) -> None:
    t = make_table(tmp_path, schema=SCHEMA)
    t.ingest(_rows(["a", "b", "c"]))
    t.ingest(_rows(["a", "d"], ts=1))
    data = _objects(t, "data/")
    v = t.delete(ranges=[sd.Range(("a",), ("b",), end_inclusive=True)])
    assert _objects(t, "data/") == data  # metadata only
    d = t.diff(v - 1, v)
    assert d.files_added == () and [x.version for x in d.deletions_added] == [v]
    assert t.query().column("user").to_pylist() == ["c", "d"]
    assert t.query(version=v - 1).num_rows == 5  # time travel still reads them


def test_keys_of_a_composite_row_key_are_exact_and_prefixes(tmp_path: Path) -> None:
    t = make_table(tmp_path, schema=SCHEMA)
    t.ingest(pa.concat_tables([_rows(["a", "b"], n=1), _rows(["a", "b"], n=2)]))
    t.delete(keys=[("a", 2)])  # one whole key
    got = t.query(columns=["user", "n"]).to_pydict()
    assert list(zip(got["user"], got["n"], strict=True)) == [("a", 1), ("b", 1), ("b", 2)]
    t.delete(keys=[("b",)])  # a prefix: every record whose key starts with it
    assert t.query(columns=["user", "n"]).to_pydict() == {"user": ["a"], "n": [1]}


@pytest.mark.parametrize("composite", [False, True], ids=["one-field", "two-field"])
def test_lookups_under_a_delete_of_many_keys_find_exactly_the_survivors(
        tmp_path: Path, composite: bool) -> None:
    """A read of a few records against a delete of many more keys probes the deleted keys
    with the records' keys (not a hash of every deleted key per read): lookups of deleted,
    surviving and never-written keys, and a range, answer as the reference does."""
    schema = SCHEMA if composite else sd.Schema(row_keys=[("user", pa.string())],
                                                values=[("v", pa.string())])
    users = [f"u{i:04d}" for i in range(400)]
    data = pa.concat_tables([_rows(users, n=1), _rows(users, n=2)]) if composite else \
        pa.table({"user": users, "v": [f"v{i}" for i in range(400)]})
    t = make_table(tmp_path, schema=schema)
    t.ingest(data)
    gone = [(u, 2) if composite else (u,) for u in users[::3]]  # 134 keys
    t.delete(keys=gone)
    dead = set(gone)
    names = ["user", "n"] if composite else ["user"]

    def alive(key: tuple[object, ...]) -> int:
        row = [r for r in data.select(names).to_pylist() if tuple(r.values()) == key]
        return 0 if key in dead else len(row)

    for u in users[:40] + ["u9999"]:
        key = (u, 2) if composite else (u,)
        assert t.query(keys=[key]).num_rows == alive(key), key
    if composite:
        assert t.query(keys=[("u0003",)]).num_rows == 1  # a prefix: (u0003, 1) survives
    want = sum(1 for r in data.select(names).to_pylist()
               if "u0010" <= r["user"] < "u0020" and tuple(r.values()) not in dead)
    assert t.query(ranges=[sd.Range(("u0010",), ("u0020",))]).num_rows == want


def test_a_per_field_region_deletes_what_it_holds(tmp_path: Path) -> None:
    t = make_table(tmp_path, schema=SCHEMA)
    t.ingest(pa.concat_tables([_rows(["a", "b"], n=1), _rows(["a", "b"], n=2)]))
    t.delete(ranges=[sd.Region({"n": sd.Range(2, 2, end_inclusive=True)})])
    assert t.query().column("n").to_pylist() == [1, 1]
    t.compact(full=True)
    assert t.query().column("n").to_pylist() == [1, 1]
    assert not t._handle.states.head().deletions


def test_a_filter_deletes_records_one_by_one_among_equal_keys(tmp_path: Path) -> None:
    t = make_table(tmp_path, schema=SCHEMA)
    t.ingest(pa.concat_tables([_rows(["a"], v="keep"), _rows(["a"], v="drop"),
                               _rows(["a"], v=None)]))  # equal record keys, kept each
    t.delete(filter=pc.field("v") == "drop")
    assert t.query().column("v").to_pylist() == ["keep", None]  # a null matches nothing


def test_an_insert_after_a_delete_is_kept_and_the_delete_never_returns(tmp_path: Path) -> None:
    t = make_table(tmp_path, schema=SCHEMA)
    t.ingest(_rows(["a", "b"]))
    t.delete(keys=[("a", 1)])
    t.ingest(_rows(["a"], ts=5, v="again"))
    assert t.query(keys=[("a", 1)]).column("v").to_pylist() == ["again"]
    t.maintain()
    assert t.query(keys=[("a", 1)]).column("v").to_pylist() == ["again"]
    assert not t._handle.states.head().deletions  # settled


def test_a_compaction_planned_before_a_delete_does_not_bring_records_back(
        tmp_path: Path) -> None:
    t = make_table(tmp_path, schema=SCHEMA)
    for ts in range(3):
        t.ingest(_rows(["a", "b", "c"], ts=ts))
    jobs = create_jobs(t._handle, full=True)
    assert len(jobs) == 1
    head = t._handle.read_head()  # the job's head: before the delete
    t.delete(keys=[("b", 1)])
    t.upsert(_rows(["c"], ts=1, v="new"))
    region = head.state.partitions[jobs[0].partition_id].region
    out = execute_job(t._handle, jobs[0], region, head=head)
    assert commit_job(t._handle, jobs[0], out).committed
    want = {"user": ["a", "a", "a", "c", "c", "c"], "v": ["x", "x", "x", "x", "new", "x"]}
    assert t.query(columns=["user", "v"]).to_pydict() == want
    assert t._handle.states.head().deletions, "not settled: the output holds older records"
    t.maintain()
    assert t.query(columns=["user", "v"]).to_pydict() == want
    assert not t._handle.states.head().deletions


def test_an_upsert_replaces_every_record_of_its_key_and_the_last_in_input_wins(
        tmp_path: Path) -> None:
    t = make_table(tmp_path, schema=SCHEMA)
    t.ingest(pa.concat_tables([_rows(["a"], v="1"), _rows(["a"], v="2"), _rows(["b"])]))
    r = t.upsert(pa.concat_tables([_rows(["a"], v="first"), _rows(["a"], v="last")]))
    assert r.rows == 2 and r.version == t.version
    assert t.query(columns=["user", "v"]).to_pydict() == {"user": ["a", "b"],
                                                          "v": ["last", "x"]}
    t.ingest(_rows(["a"], v="later"))  # a later plain write of the key is kept beside it
    assert t.query(keys=[("a", 1)]).column("v").to_pylist() == ["last", "later"]


def test_upsert_files_reads_what_ingest_files_reads(tmp_path: Path) -> None:
    t = make_table(tmp_path / "store", schema=SCHEMA)
    t.ingest(_rows(["a", "b"]))
    path = tmp_path / "in.parquet"
    import pyarrow.parquet as pq

    pq.write_table(_rows(["b", "c"], v="u"), path)
    t.upsert_files([str(path)])
    assert t.query(columns=["user", "v"]).to_pydict() == {"user": ["a", "b", "c"],
                                                          "v": ["x", "u", "u"]}


def test_bad_deletes_are_refused_naming_the_table_and_nothing_is_committed(
        tmp_path: Path) -> None:
    t = make_table(tmp_path, schema=SCHEMA, name="events")
    t.ingest(_rows(["a"]))
    v = t.version
    with pytest.raises(QueryError, match="events.*clear"):
        t.delete()
    with pytest.raises(QueryError, match="purge on table events names no keys.*clear"):
        t.purge()
    with pytest.raises(WhereError, match="events.*nope"):
        t.delete(filter="nope > 1")
    with pytest.raises(QueryError, match="events.*no column 'nope'"):
        t.delete(filter=pc.field("nope") > 1)
    with pytest.raises(QueryError, match="events"):
        t.delete(filter=pc.field("v") + 1)  # not a boolean
    with pytest.raises(QueryError, match="events"):
        t.delete(keys=[("a", "not a number")])
    # one key where a list is due: refused as query and purge refuse it (a str is a sequence
    # of characters, each a key to Python)
    for call in (t.delete, t.purge, t.query):
        with pytest.raises(QueryError, match=r"table events: keys must be a list of row "
                                             r"keys, not one str \(write keys=\['a'\]\)"):
            call(keys="a")
    assert t.version == v
    assert t.delete(keys=[]) == v  # nothing named: nothing committed


def test_overwrite_replaces_every_record_in_one_commit(tmp_path: Path) -> None:
    from sediment.ingest.standard import commit_staged, stage_batches

    t = make_table(tmp_path, schema=SCHEMA)
    t.ingest(_rows(["a", "b"]))
    t.delete(keys=[("a", 1)])
    h = t._handle
    state = h.states.head()
    staged = stage_batches(h, state, iter([("in", b) for b in _rows(["z"]).to_batches()]))
    r = commit_staged(h, staged, 0.0, state=state, overwrite=True)
    assert r.version == state.version + 1
    assert t.query().column("user").to_pylist() == ["z"]
    assert not h.states.head().deletions


@pytest.mark.parametrize("key_type", [pa.date32(), pa.timestamp("us", tz="UTC"), pa.string(),
                                      pa.int64()])
def test_a_null_key_is_refused_and_nothing_is_committed(tmp_path: Path,
                                                         key_type: pa.DataType) -> None:
    """A key has no nulls: a None in a delete's key or range, or a read's, is a QueryError
    naming the table and the field (Arrow takes None as a null of a date or timestamp, and a
    delete by it was committed, a log entry no reader could replay: the table was lost to
    every process that opened it afterwards)."""
    import datetime as dt

    schema = sd.Schema(row_keys=[("a", key_type), ("b", pa.string())],
                       values=[("v", pa.int64())])
    values = {"date32[day]": [dt.date(2024, 1, d) for d in (1, 5, 9)],
              "string": ["a", "e", "i"], "int64": [1, 5, 9]}.get(
        str(key_type), [dt.datetime(2024, 1, d, tzinfo=dt.UTC) for d in (1, 5, 9)])
    t = make_table(tmp_path, schema=schema, name="t", split_points=[(values[1], "m")])
    t.ingest(pa.table({"a": pa.array(values, key_type), "b": ["x", "y", "z"], "v": [1, 2, 3]}))
    v = t.version
    for call in (lambda: t.delete(keys=[(None,)]), lambda: t.delete(keys=[None]),
                 lambda: t.delete(keys=[(values[0], None)]),
                 lambda: t.delete(ranges=[sd.Range(None, (None,))])):
        with pytest.raises(QueryError, match=r"delete on table t: .*None is not a valid .* "
                                             r"field '[ab]'"):
            call()
    for read in (lambda: t.query(keys=[(None, "a")]), lambda: t.query(keys=[None]),
                 lambda: t.query(ranges=[sd.Range((None, "a"), None)])):
        with pytest.raises(QueryError, match="None is not a valid"):
            read()
    assert t.version == v
    assert sd.Store.open(str(tmp_path)).table("t").query().num_rows == 3  # readable anew
