"""Schema changes read back right on every route: by field id, by name for files without ids,
each version with its own schema; compaction, restore, snapshots, a stale writer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import sediment as sd
from sediment.errors import DataError, SchemaError, TransactionInvalidError
from sediment.schema import FIELD_ID_KEY, Schema

SCHEMA = Schema([("k", pa.string())], [], [("v", pa.int32()), ("w", pa.string())])


def rows(table: sd.Table, **kw: Any) -> list[dict[str, Any]]:
    return table.query(**kw).to_pylist()


def compact(table: sd.Table) -> None:
    """A full compaction that must succeed (a failed job leaves the answer as it was: the
    reads after it would not show that the compaction could not map its inputs)."""
    result = table.compact(full=True)
    assert not result.errors, result.errors


def batch(keys: list[str], **cols: list[Any]) -> pa.Table:
    data: dict[str, Any] = {"k": keys}
    for name, values in cols.items():
        data[name] = values
    return pa.table(data)


def evolved(uri: str, options: dict[str, Any] | None = None) -> tuple[sd.Table, dict[int, Any]]:
    """A table through every kind of change, compacted halfway; what each version holds."""
    store = sd.Store.open(uri, create=True, **(options or {}))
    t = store.create_table("ev", SCHEMA, properties={"state.snapshot.interval": 3})
    seen: dict[int, Any] = {}
    t.ingest(batch(["a", "b"], v=pa.array([1, 2], pa.int32()), w=["x", "y"]))
    seen[t.version] = rows(t)
    t.add_columns([("n", pa.float64())])
    t.ingest(batch(["c"], v=pa.array([3], pa.int32()), w=["z"], n=[1.5]))
    t.ingest(batch(["d"], v=pa.array([4], pa.int32()), w=["q"]))  # n missing: nulls
    seen[t.version] = rows(t)
    t.rename_column("w", "w2")
    t.widen_column("v", pa.int64())
    seen[t.version] = rows(t)
    compact(t)
    t.drop_columns(["n"])
    t.add_columns([("n", pa.float64()), ("w", pa.string())])  # old names, new ids
    t.ingest(batch(["e"], v=[5], w2=["r"], n=[9.0], w=["new"]))
    seen[t.version] = rows(t)
    return t, seen


EXPECTED_HEAD = [
    {"k": "a", "v": 1, "w2": "x", "n": None, "w": None},
    {"k": "b", "v": 2, "w2": "y", "n": None, "w": None},
    {"k": "c", "v": 3, "w2": "z", "n": None, "w": None},
    {"k": "d", "v": 4, "w2": "q", "n": None, "w": None},
    {"k": "e", "v": 5, "w2": "r", "n": 9.0, "w": "new"},
]


def test_every_kind_of_change_reads_by_id_on_every_store(store_uri: tuple[str, dict[str, Any]]
                                                         ) -> None:
    uri, options = store_uri
    t, seen = evolved(uri, options)
    assert rows(t) == EXPECTED_HEAD
    assert t.query().schema.field("v").type == pa.int64()
    versions = sorted(seen)
    assert seen[versions[0]] == [{"k": "a", "v": 1, "w": "x"}, {"k": "b", "v": 2, "w": "y"}]
    assert seen[versions[1]][2:] == [{"k": "c", "v": 3, "w": "z", "n": 1.5},
                                     {"k": "d", "v": 4, "w": "q", "n": None}]
    for v, want in seen.items():  # every version reads with its own schema
        assert rows(t, version=v) == want
        assert t.schema_at(v).field_names == list(want[0])
    streamed = pa.Table.from_batches(list(t.scan()), schema=t.schema.to_arrow())
    assert streamed.to_pylist() == EXPECTED_HEAD
    assert rows(t, keys=["c"]) == [EXPECTED_HEAD[2]]
    assert t.query(columns=["k", "w2"]).to_pylist() == [
        {"k": r["k"], "w2": r["w2"]} for r in EXPECTED_HEAD]
    before = rows(t)
    compact(t)  # the current schema written, every file by id
    assert rows(t) == before
    for v, want in seen.items():
        assert rows(t, version=v) == want
    first, last = sorted(seen)[0], t.version
    d = t.diff(first, last)
    assert d.schemas is not None and d.schemas[0] == t.schema_at(first) \
        and d.schemas[1] == t.schema
    assert t.diff(last, last).schemas is None
    kinds = [h.summary for h in t.history() if h.kind == "alter_schema"]
    assert kinds == ["added n:double", "renamed w to w2", "widened v to int64", "dropped n",
                     "added n:double, w:string"]
    # the state loaded from a snapshot (every 3 versions) equals the one replayed
    reopened = sd.Store.open(uri, **(options or {})).table("ev")
    assert reopened.state() == t.state() and reopened.schema == t.schema


def test_dumps_of_each_version_load_with_that_versions_schema(tmp_path: Path) -> None:
    t, seen = evolved(str(tmp_path / "s"))
    store = sd.Store.open(str(tmp_path / "s"))
    for i, (v, want) in enumerate(sorted(seen.items())):
        job = t.dump(str(tmp_path / f"dump{i}"), version=v)
        loaded = store.load(job.manifest_uri, f"back{i}")
        assert rows(loaded) == want
        assert loaded.schema.field_names == list(want[0])
        assert loaded.schema.ids == t.schema_at(v).ids  # ids carried: later changes line up
    loaded.add_columns([("later", pa.int8())])
    assert loaded.schema.id_of("later") == t.schema.last_id + 1


def test_files_carry_field_ids(tmp_path: Path) -> None:
    t, _ = evolved(str(tmp_path / "s"))
    compact(t)
    refs = list(t.state().all_references())
    assert refs
    for ref in refs:
        arrow = pq.read_schema(str(t._handle.objects.local_path(ref.filename)))
        ids = {f.name: int(f.metadata[FIELD_ID_KEY]) for f in arrow if f.metadata
               and FIELD_ID_KEY in f.metadata}
        assert ids == dict(zip(t.schema.field_names, t.schema.ids, strict=True))


def test_files_without_ids_are_mapped_by_name_as_of_their_schema(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Files written before field ids existed: 'w' in them is the column renamed to 'w2',
    never the 'w' added later."""
    store = sd.Store.open(str(tmp_path / "s"), create=True)
    t = store.create_table("old", SCHEMA)
    plain = Schema.to_arrow

    def without_ids(self: Schema, *, field_ids: bool = False) -> pa.Schema:
        return plain(self)

    with monkeypatch.context() as m:
        m.setattr(Schema, "to_arrow", without_ids)
        t.ingest(batch(["a", "b"], v=pa.array([1, 2], pa.int32()), w=["x", "y"]))
    files = [r.filename for r in t.state().all_references()]
    assert all(f.metadata is None or FIELD_ID_KEY not in f.metadata
               for f in pq.read_schema(str(t._handle.objects.local_path(files[0]))))
    t.rename_column("w", "w2")
    t.add_columns([("w", pa.string())])
    t.ingest(batch(["c"], v=pa.array([3], pa.int32()), w2=["z"], w=["new"]))
    want = [{"k": "a", "v": 1, "w2": "x", "w": None}, {"k": "b", "v": 2, "w2": "y", "w": None},
            {"k": "c", "v": 3, "w2": "z", "w": "new"}]
    assert rows(t) == want
    compact(t)
    assert rows(t) == want


def test_restore_brings_back_the_old_schema_as_a_new_version(tmp_path: Path) -> None:
    t, seen = evolved(str(tmp_path / "s"))
    first = sorted(seen)[0]
    last_id = t.schema.last_id
    v = t.restore(first)
    assert rows(t) == seen[first] and t.schema.field_names == ["k", "v", "w"]
    assert t.schema.last_id == last_id  # an id once given is never given again
    t.add_columns([("x", pa.int8())])
    assert t.schema.id_of("x") == last_id + 1
    assert rows(t, version=v - 1) == EXPECTED_HEAD


def test_ingest_fills_added_columns_and_refuses_dropped_ones(tmp_path: Path) -> None:
    t, _ = evolved(str(tmp_path / "s"))
    t.drop_columns(["w"])
    with pytest.raises(DataError, match="field 'w' which is not in the table's schema"):
        t.ingest(batch(["f"], v=[6], w2=["s"], n=[1.0], w=["gone"]))
    t.upsert(batch(["a"], v=[10], w2=["x2"]))  # n (added) missing: null
    assert rows(t, keys=["a"]) == [{"k": "a", "v": 10, "w2": "x2", "n": None}]
    with pytest.raises(DataError, match="has no field 'w2'"):  # an original column is needed
        t.ingest(batch(["g"], v=[7], n=[1.0]))


def test_bad_changes_name_the_table_and_commit_nothing(tmp_path: Path) -> None:
    store = sd.Store.open(str(tmp_path / "s"), create=True)
    t = store.create_table("bad", SCHEMA, properties={"merge": "aggregate",
                                                     "merge.functions": '{"v": "sum"}'})
    version = t.version
    for change, message in [
        (lambda: t.drop_columns(["k"]), "table bad: cannot drop key field 'k'"),
        (lambda: t.rename_column("v", "v2"), "table bad: .*property 'merge.functions'"),
        (lambda: t.drop_columns(["v"]), "table bad: .*property 'merge.functions'"),
        (lambda: t.widen_column("v", pa.int16()), "table bad: .*not a widening"),
        (lambda: t.add_columns([("w", pa.int64())]), "table bad: column 'w' already exists"),
        (lambda: t.add_columns([("__sediment_x", pa.int64())]), "reserved"),
        (lambda: t.rename_column("w", "k"), "'k' already exists"),
    ]:
        with pytest.raises(SchemaError, match=message):
            change()
    assert t.version == version


def test_a_write_prepared_before_a_rename_commits_its_values_under_the_new_name(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The stale writer's files carry the ids of the schema it wrote under: read by id."""
    import sediment.ingest.standard as standard

    store = sd.Store.open(str(tmp_path / "s"), create=True)
    t = store.create_table("race", SCHEMA)
    other = sd.Store.open(str(tmp_path / "s")).table("race")
    real = standard.commit_staged

    def alter_first(*args: Any, **kw: Any) -> Any:
        other.rename_column("w", "w2")
        other.drop_columns(["v"])
        return real(*args, **kw)

    monkeypatch.setattr(standard, "commit_staged", alter_first)
    t.ingest(batch(["a"], v=pa.array([1], pa.int32()), w=["x"]))
    assert rows(t) == [{"k": "a", "w2": "x"}]
    # the alter replayed at the head: the column it renames is gone by then
    monkeypatch.setattr(standard, "commit_staged", real)
    t.rename_column("w2", "w3")
    with pytest.raises(TransactionInvalidError, match="no value column 'w2'"):
        from sediment.core.transactions import AlterSchema

        other._handle.states.commit(AlterSchema("rename_column", {"old": "w2", "new": "w4"}))


def test_engines_and_file_plans_after_a_rename(tmp_path: Path) -> None:
    t, _ = evolved(str(tmp_path / "s"))
    compact(t)
    t.rename_column("w2", "w3")  # every file now written under the previous schema
    want = [{**{k: v for k, v in r.items() if k != "w2"}, "w3": r["w2"]} for r in EXPECTED_HEAD]
    want = [{"k": r["k"], "v": r["v"], "w3": r["w3"], "n": r["n"], "w": r["w"]} for r in want]
    con = duckdb.connect()
    t.prepare().to_duckdb(con, "ev")
    cur = con.execute("SELECT * FROM ev ORDER BY k")
    names = [d[0] for d in cur.description]
    got = [dict(zip(names, r, strict=True)) for r in cur.fetchall()]
    assert got == want
    assert t.prepare().to_polars().to_dicts() == want
    assert pa.table(t.prepare()).to_pylist() == want  # the PyCapsule stream
    assert t.prepare().to_pandas().astype(object).where(
        t.prepare().to_pandas().notna(), None).to_dict("records") == want
    import datafusion

    ctx = datafusion.SessionContext()
    t.prepare().register_datafusion(ctx, "ev")
    assert ctx.sql("SELECT * FROM ev ORDER BY k").to_arrow_table().to_pylist() == want
    plans = t.prepare().plan_files()
    assert plans and all(p.columns is not None and p.columns["w3"] == "w2" for p in plans)
    # an independent reader following PlannedFile's docstring
    out = []
    for p in plans:
        data = pq.read_table(p.path)
        out += [{f: r.get(p.columns.get(f)) for f in t.schema.field_names}  # type: ignore[union-attr]
                for r in data.to_pylist()]
    assert sorted(out, key=lambda r: r["k"]) == want


def test_a_column_a_pending_delete_filters_on_is_kept_until_it_settles(tmp_path: Path) -> None:
    store = sd.Store.open(str(tmp_path / "s"), create=True)
    t = store.create_table("del", SCHEMA)
    t.ingest(batch(["a", "b"], v=pa.array([1, 2], pa.int32()), w=["x", "y"]))
    t.ingest(batch(["c"], v=pa.array([3], pa.int32()), w=["z"]))
    t.delete(filter="w = 'y'")
    for change in (lambda: t.rename_column("w", "w2"), lambda: t.drop_columns(["w"])):
        with pytest.raises(SchemaError, match="table del: column 'w' is filtered on by the "
                                              "delete of version 4, not yet settled"):
            change()
    t.rename_column("v", "v2")  # a column the delete does not read
    compact(t)  # settles the delete
    t.rename_column("w", "w2")
    assert rows(t) == [{"k": "a", "v2": 1, "w2": "x"}, {"k": "c", "v2": 3, "w2": "z"}]


def test_alters_and_ingests_from_threads_lose_nothing(tmp_path: Path) -> None:
    """Writers commit while another handle adds, renames and drops columns: every record
    reads back with its values, the added columns null where a writer did not send them."""
    import threading

    store = sd.Store.open(str(tmp_path / "s"), create=True)
    store.create_table("busy", Schema([("k", pa.string())], [], [("v", pa.int64())]))
    errors: list[BaseException] = []

    def write(w: int) -> None:
        try:
            mine = sd.Store.open(str(tmp_path / "s")).table("busy")
            for i in range(12):
                mine.ingest(batch([f"w{w}-{i:02d}"], v=[w * 100 + i]))
        except BaseException as e:  # noqa: BLE001 (reported below)
            errors.append(e)

    def alter() -> None:
        try:
            mine = sd.Store.open(str(tmp_path / "s")).table("busy")
            for i in range(6):
                mine.add_columns([(f"c{i}", pa.int32())])
                mine.widen_column(f"c{i}", pa.int64())
                if i % 2:
                    mine.rename_column(f"c{i}", f"r{i}")
                else:
                    mine.drop_columns([f"c{i}"])
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=write, args=(w,)) for w in range(3)]
    threads.append(threading.Thread(target=alter))
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors
    head = sd.Store.open(str(tmp_path / "s")).table("busy")
    got = head.query().to_pylist()
    assert head.schema.field_names == ["k", "v", "r1", "r3", "r5"]
    assert [(r["k"], r["v"]) for r in got] == sorted(
        (f"w{w}-{i:02d}", w * 100 + i) for w in range(3) for i in range(12))
    assert all(r["r1"] is None and r["r3"] is None and r["r5"] is None for r in got)
    compact(head)
    assert head.query().to_pylist() == got


def test_a_filter_on_a_re_added_name_never_prunes_by_the_old_columns_statistics(
        tmp_path: Path) -> None:
    """Old files hold the dropped 'w' (never null); the new 'w' is null in them: a filter
    ``w is null`` keeps every old record, and plan_files keeps their row groups."""
    import pyarrow.compute as pc

    store = sd.Store.open(str(tmp_path / "s"), create=True)
    t = store.create_table("stats", SCHEMA, properties={"parquet.row_group_rows": 128})
    n = 384  # three row groups
    t.ingest(batch([f"k{i:03d}" for i in range(n)], v=pa.array(range(n), pa.int32()),
                   w=[f"x{i}" for i in range(n)]))
    t.drop_columns(["w"])
    t.add_columns([("w", pa.string())])
    t.ingest(batch(["z"], v=[9], w=["new"]))
    got = t.query(filter=pc.field("w").is_null(), columns=["k"]).column("k").to_pylist()
    assert got == [f"k{i:03d}" for i in range(n)]
    assert t.query(filter=pc.field("w") == "x1").num_rows == 0
    planned = t.prepare(sd.ReadRequest(filter=pc.field("w").is_null())).plan_files()
    old = [p for p in planned if p.columns is not None]
    assert old and sum(len(p.row_groups) for p in old) == 3


def test_compaction_maps_inputs_under_an_awkward_local_path(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Merge rounds' outputs (in the temporary directory) are read back by their file URLs,
    percent-encoded: footers found under a path with a space, '%' and '#'."""
    import tempfile

    odd = tmp_path / "odd dir %20 #x"
    odd.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(odd))
    t, _ = evolved(str(tmp_path / "s"))
    t.ingest(batch(["f"], v=[6], w2=["s"]))
    t.ingest(batch(["g"], v=[7], w2=["t"]))  # four files: two merge rounds of two
    t.set_properties({"compaction.max_merge_inputs": 2})
    t.rename_column("w2", "w3")
    result = t.compact(full=True)
    assert result.jobs_committed and not result.errors, result.errors
    assert [r["w3"] for r in rows(t)] == [*(r["w2"] for r in EXPECTED_HEAD), "s", "t"]


def test_decimal_columns_are_added_and_widened(tmp_path: Path) -> None:
    """A schema change stores types as text: a decimal's text parses back exactly."""
    from decimal import Decimal

    store = sd.Store.open(str(tmp_path / "s"), create=True)
    t = store.create_table("dec", Schema([("k", pa.string())], [], [("p", pa.decimal128(10, 2))]))
    t.ingest(pa.table({"k": ["a"], "p": pa.array([Decimal("12.34")], pa.decimal128(10, 2))}))
    t.widen_column("p", pa.decimal128(14, 2))
    t.add_columns([("q", pa.decimal256(40, 5))])
    compact(t)
    assert rows(t) == [{"k": "a", "p": Decimal("12.34"), "q": None}]
    assert t.schema.field("p").type == pa.decimal128(14, 2)
    assert t.schema.field("q").type == pa.decimal256(40, 5)
