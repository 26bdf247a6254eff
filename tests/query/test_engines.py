"""External engines over a pinned version: DuckDB views, DataFusion tables,
Polars frames and lazy frames, and plan_files read back with pyarrow, each equal to
``table.query()`` at the head and at a tagged older version, on tables with split references
(shared files and references left in a parent by a split), several files per leaf and
aggregation / keep-latest iterators; DuckDB on local disk only (its S3 extension cannot be
installed here), DataFusion, Polars and pyarrow also on S3."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import sediment as sd
from helpers import make_table, rows
from sediment.errors import MissingDependencyError
from sediment.files.keys import rows_in
from sediment.files.sequence import SEQ, with_sequence, without_sequence
from sediment.iterators.base import apply_iterators
from support.internals import leaf_for_key

KEYS = [f"k{i:03d}" for i in range(120)]


# one worker runs the module, so each table below is built once (see ``built``)
pytestmark = pytest.mark.xdist_group("engines")

def canon(t: pa.Table) -> list[dict[str, Any]]:
    """Rows in a canonical order (engines need not keep query()'s order)."""
    return t.sort_by([(n, "ascending") for n in t.column_names]).to_pylist()


def data(n: int, seed: int, keys: list[str]) -> pa.Table:
    """Rows of the benchmark schema over ``keys`` with few timestamps: many equal keys."""
    t = rows(n, seed, keys=keys)
    i = t.schema.get_field_index("timestamp")
    return t.set_column(i, t.schema.field(i), pc.bit_wise_and(t["timestamp"], 3))


def build(where: Any, options: dict[str, Any] | None, kind: str) -> sd.Table:
    """A table with split references, several files per leaf, and (``kind``) iterators;
    tagged ``old`` before its last writes."""
    props: dict[str, Any] = {"ingest.write_strategy": "shared_file",
                             "parquet.row_group_rows": 128, "compaction.strategy": "basic"}
    if kind == "aggregate":
        props["compaction.iterators"] = json.dumps(
            [{"type": "aggregate", "functions": {"value": "min",
                                                "nullable_value": "last"}}])
    elif kind == "keep_latest":
        props["query.iterators"] = json.dumps([{"type": "keep_latest", "by": "timestamp"}])
    table = make_table(where, options, split_points=["k040", "k080"], **props)
    table.ingest(data(400, 1, KEYS))
    table.ingest(data(300, 2, KEYS))
    # a split leaves the leaf's references in what becomes a parent (an ancestor's files)
    table.set_properties({"partition.split.threshold": 100})
    table.split()
    table.set_properties({"partition.split.threshold": 1_000_000_000})
    table.ingest(data(200, 3, KEYS[30:90]))
    table.tag("old")
    table.ingest(data(250, 4, KEYS))
    table.ingest(data(150, 5, KEYS[:50]))
    return table


@pytest.fixture(params=["plain", "aggregate", "keep_latest"])
def local_table(request: pytest.FixtureRequest, tmp_path: Path) -> sd.Table:
    return build(tmp_path / "store", None, request.param)


@pytest.fixture(scope="module")
def built() -> dict[tuple[str, str], sd.Table]:
    """The module's tables, by (kind, store kind): built by the first test that needs one
    (the S3 ones some 20 requests each) and only read by the tests after it."""
    return {}


# On S3 a plain table (files an engine reads itself, through its own S3 client) and one with
# iterators (read through Sediment's merge); aggregation takes the second route as keep-latest
# does, and its logic is proven on local disk, so it does not pay moto's requests again.
@pytest.fixture(params=[pytest.param(("plain", "local"), id="plain-local"),
                        pytest.param(("aggregate", "local"), id="aggregate-local"),
                        pytest.param(("keep_latest", "local"), id="keep_latest-local"),
                        pytest.param(("plain", "s3"), id="plain-s3", marks=pytest.mark.s3),
                        pytest.param(("keep_latest", "s3"), id="keep_latest-s3",
                                     marks=pytest.mark.s3)])
def any_table(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
              built: dict[tuple[str, str], sd.Table]) -> sd.Table:
    key: tuple[str, str] = request.param
    if key not in built:
        kind, where = key
        if where == "s3":
            uri, options = request.getfixturevalue("s3_store_uri")
        else:
            uri, options = str(tmp_path_factory.mktemp("engines") / "store"), {}
        built[key] = build(uri, options, kind)
    return built[key]


def test_tables_have_what_the_routes_must_handle(local_table: sd.Table) -> None:
    plan = local_table.plan_files()
    leaves = {p.leaf_id for p in plan}
    assert any(p.files_in_leaf > 1 for p in plan)  # several files per leaf
    assert any(p.partition_id != p.leaf_id for p in plan)  # a parent's reference
    by_file: dict[str, set[str]] = {}
    for p in plan:
        by_file.setdefault(p.filename, set()).add(p.leaf_id)
    assert any(len(v) > 1 for v in by_file.values())  # a file read by several leaves
    assert len(leaves) > 3


# ---- DuckDB (local disk) -------------------------------------------------------------------
@pytest.mark.parametrize("version", [None, "old"])
def test_duckdb_view_equals_query(local_table: sd.Table, version: str | None) -> None:
    duckdb = pytest.importorskip("duckdb")
    t = local_table
    con = duckdb.connect()
    assert t.to_duckdb(con, "events", version=version) is con
    expected = t.query(version=version)
    assert canon(con.sql("select * from events").to_arrow_table()) == canon(expected)
    # re-queryable: a second query reads afresh; projection and a key filter
    assert con.sql("select count(*) from events").fetchall() == [(expected.num_rows,)]
    got = con.sql("select value, key from events where key >= 'k035' and key < 'k085'"
                  ).to_arrow_table()
    want = t.query(ranges=[sd.Range("k035", "k085")], columns=["value", "key"],
                   version=version)
    assert canon(got) == canon(want)
    got = con.sql("select * from events where key = 'k007'").to_arrow_table()
    assert canon(got) == canon(t.query(keys=["k007"], version=version))
    # a filter on a value column with a key filter
    got = con.sql("select key, timestamp from events where key in ('k001', 'k050') "
                  "and value > 'm'").to_arrow_table()
    want = t.query(keys=["k001", "k050"], version=version)
    want = want.filter(pc.greater(want["value"], "m")).select(["key", "timestamp"])
    assert canon(got) == canon(want)


def test_duckdb_view_is_pinned(tmp_path: Path) -> None:
    duckdb = pytest.importorskip("duckdb")
    t = build(tmp_path / "store", None, "plain")
    before = t.query()
    con = duckdb.connect()
    t.to_duckdb(con, "events")
    t.ingest(rows(50, 9, keys=["zzz"]))
    assert canon(con.sql("select * from events").to_arrow_table()) == canon(before)
    aggregated = con.sql("select key, count(*) as n from events group by key").to_arrow_table()
    want = before.group_by("key").aggregate([("key", "count")]).rename_columns(["key", "n"])
    assert canon(aggregated) == canon(want)


def _view_sql(con: Any, name: str) -> str:
    rows_ = con.sql("select sql from duckdb_views() where view_name = ?",
                    params=[name]).fetchall()
    return rows_[0][0] if rows_ else ""


def test_duckdb_reads_leaves_without_merges_natively(tmp_path: Path) -> None:
    """Leaves of one file and no iterators are read by DuckDB's Parquet reader within their
    region, the others through Sediment; the view equals query() either way, keys with
    quotes included, and a key predicate touches one branch's file."""
    duckdb = pytest.importorskip("duckdb")
    keys = [f"k{i:03d}" for i in range(60)] + ["it's", "o''clock", 'say "hi"']
    t = make_table(tmp_path / "store", split_points=["k020", "k040", "m"],
                   **{"ingest.write_strategy": "shared_file", "parquet.row_group_rows": 128})
    t.ingest(data(500, 1, keys))
    t.compact(full=True)
    t.ingest(data(80, 2, keys[:15]))  # the first leaf now has two files: merged
    con = duckdb.connect()
    t.to_duckdb(con, "events")
    sql = _view_sql(con, "events")
    assert sql.count("read_parquet") == 3 and "__sediment_source_events" in sql
    expected = t.query()
    assert canon(con.sql("select * from events").to_arrow_table()) == canon(expected)
    for k in ["k003", "k025", "it's", "o''clock", 'say "hi"', "zzz"]:
        got = con.sql("select * from events where key = ?", params=[k]).to_arrow_table()
        assert canon(got) == canon(t.query(keys=[k])), k
    got = con.sql("select key, count(*) n from events where key between 'k010' and 'k045' "
                  "group by key").to_arrow_table()
    want = t.query(ranges=[sd.Range("k010", "k045", end_inclusive=True)])
    want = want.group_by("key").aggregate([("key", "count")]).rename_columns(["key", "n"])
    assert canon(got) == canon(want)
    # a file split between two leaves by a split: each branch keeps its region's rows
    t.set_properties({"partition.split.threshold": 50})
    t.split()
    con2 = duckdb.connect()
    t.to_duckdb(con2, "events")
    assert canon(con2.sql("select * from events").to_arrow_table()) == canon(t.query())


def test_duckdb_native_regions_ignore_the_default_collation(tmp_path: Path) -> None:
    """Leaf regions are in Arrow's (binary) order: a connection that compares strings
    case-insensitively still gets every leaf's rows."""
    duckdb = pytest.importorskip("duckdb")
    t = make_table(tmp_path / "store", split_points=["B", "a"])
    t.ingest(data(200, 1, ["A", "B", "Z", "_", "a", "b", "z", "é"]))
    t.compact(full=True)
    con = duckdb.connect()
    con.execute("SET default_collation = 'nocase'")
    t.to_duckdb(con, "t")
    assert "read_parquet" in _view_sql(con, "t")
    got = con.sql("select * from t").to_arrow_table()
    assert canon(got) == canon(t.query())


def test_duckdb_native_and_sediment_branches_agree_on_types(tmp_path: Path) -> None:
    """Value columns of many types come out the same from DuckDB's reader (a compacted leaf)
    and from the Sediment source (a leaf with two files) in one view."""
    duckdb = pytest.importorskip("duckdb")
    import datetime as dt
    import decimal

    schema = sd.Schema(row_keys=[("k", pa.string())], values=[
        ("ts", pa.timestamp("us", tz="UTC"), True), ("d", pa.date32(), True),
        ("dec", pa.decimal128(12, 3), True), ("l", pa.list_(pa.int64()), True),
        ("s", pa.struct([("x", pa.int32()), ("y", pa.string())]), True),
        ("b", pa.binary(), True), ("f", pa.float32(), True), ("u", pa.uint32(), True),
        ("ok", pa.bool_(), True)])
    t = make_table(tmp_path / "store", schema=schema, split_points=["m"])

    def batch(keys: list[str], seed: int) -> pa.Table:
        n = len(keys)
        return pa.table({
            "k": keys,
            "ts": [dt.datetime(2026, 1, 1 + i % 27, tzinfo=dt.UTC) for i in range(n)],
            "d": [dt.date(2025, 1 + i % 12, 1) for i in range(n)],
            "dec": [decimal.Decimal(f"{i + seed}.125") for i in range(n)],
            "l": [[i, seed] for i in range(n)], "s": [{"x": i, "y": f"y{i}"} for i in range(n)],
            "b": [bytes([i % 256, seed]) for i in range(n)], "f": [i / 4 for i in range(n)],
            "u": [i + 2**31 for i in range(n)], "ok": [i % 2 == 0 for i in range(n)]},
            schema=schema.to_arrow())

    t.ingest(batch([f"a{i:02d}" for i in range(20)] + [f"x{i:02d}" for i in range(20)], 1))
    t.compact(full=True)
    t.ingest(batch([f"a{i:02d}" for i in range(5)], 2))  # leaf "a..": two files
    con = duckdb.connect()
    t.to_duckdb(con, "t")
    sql = _view_sql(con, "t")
    assert "read_parquet" in sql and "__sediment_source_t" in sql
    got = con.sql("select * from t").to_arrow_table()
    want = t.query()
    order = [("k", "ascending"), ("dec", "ascending")]  # lists and structs do not sort
    assert got.sort_by(order).to_pylist() == want.sort_by(order).to_pylist()


@pytest.mark.parametrize("kind", ["iterators", "int_keys", "nul_keys"])
def test_duckdb_falls_back_to_sediment(tmp_path: Path, kind: str) -> None:
    """Iterators, and key literals DuckDB could compare differently, go through Sediment;
    integer keys render exactly and stay native."""
    duckdb = pytest.importorskip("duckdb")
    if kind == "int_keys":
        schema = sd.Schema(row_keys=[("id", pa.int64())], values=[("v", pa.string())])
        t = make_table(tmp_path / "store", schema=schema, split_points=[-5, 100])
        t.ingest(pa.table({"id": pa.array(range(-50, 250), pa.int64()),
                           "v": [f"v{i}" for i in range(300)]}))
        key, probe = "id", -7
    elif kind == "nul_keys":
        t = make_table(tmp_path / "store", split_points=["b\x00c"])
        t.ingest(data(100, 1, ["a", "b", "b\x00", "b\x00d", "c"]))
        key, probe = "key", "b\x00d"
    else:
        t = make_table(tmp_path / "store", split_points=["k050"], **{
            "query.iterators": json.dumps([{"type": "keep_latest", "by": "timestamp"}])})
        t.ingest(data(300, 1, KEYS))
        key, probe = "key", "k001"
    t.compact(full=True)
    con = duckdb.connect()
    t.to_duckdb(con, "t")
    sql = _view_sql(con, "t")
    assert ("read_parquet" in sql) == (kind == "int_keys")
    assert canon(con.sql("select * from t").to_arrow_table()) == canon(t.query())
    got = con.sql(f"select * from t where {key} = ?", params=[probe]).to_arrow_table()
    assert canon(got) == canon(t.query(keys=[probe]))


def test_duckdb_view_on_s3_reads_through_sediment(s3_store_uri: tuple[str, dict[str, Any]]
                                                  ) -> None:
    duckdb = pytest.importorskip("duckdb")
    uri, options = s3_store_uri
    t = make_table(uri, options, split_points=["k050"])
    t.ingest(data(200, 1, KEYS))
    con = duckdb.connect()
    t.to_duckdb(con, "t")
    assert "read_parquet" not in _view_sql(con, "t")
    assert canon(con.sql("select * from t").to_arrow_table()) == canon(t.query())


# ---- DataFusion (local and S3) -------------------------------------------------------------
@pytest.mark.parametrize("version", [None, "old"])
def test_datafusion_table_equals_query(any_table: sd.Table, version: str | None) -> None:
    import datafusion

    t = any_table
    ctx = datafusion.SessionContext()
    assert t.register_datafusion(ctx, "events", version=version) is ctx
    expected = t.query(version=version)
    got = ctx.sql("select * from events").to_arrow_table()
    assert canon(got) == canon(expected)
    got = ctx.sql("select key, value from events where key >= 'k035' and key < 'k085'"
                  ).to_arrow_table()
    want = t.query(ranges=[sd.Range("k035", "k085")], columns=["key", "value"],
                   version=version)
    assert canon(got) == canon(want)
    t.register_datafusion(ctx, "narrow", version=version, ranges=[sd.Range("k010", "k020")],
                          columns=["key", "timestamp"])
    assert canon(ctx.sql("select * from narrow").to_arrow_table()) == canon(
        t.query(ranges=[sd.Range("k010", "k020")], columns=["key", "timestamp"],
                version=version))
    # registering a name again replaces it (as to_duckdb replaces its view)
    t.register_datafusion(ctx, "narrow", version=version, ranges=[sd.Range("k020", "k030")],
                          columns=["key"])
    assert canon(ctx.sql("select * from narrow").to_arrow_table()) == canon(
        t.query(ranges=[sd.Range("k020", "k030")], columns=["key"], version=version))


def test_datafusion_empty_table(tmp_path: Path) -> None:
    import datafusion

    t = make_table(tmp_path / "store")
    ctx = datafusion.SessionContext()
    t.register_datafusion(ctx, "e")
    assert ctx.sql("select count(*) as n from e").to_pylist() == [{"n": 0}]


# ---- Polars (local and S3) -----------------------------------------------------------------
@pytest.mark.parametrize("version", [None, "old"])
def test_polars_equals_query(any_table: sd.Table, version: str | None) -> None:
    pl = pytest.importorskip("polars")
    t = any_table
    expected = t.query(version=version)
    df = t.to_polars(version=version)
    assert isinstance(df, pl.DataFrame)
    assert canon(df.to_arrow()) == canon(expected)
    lazy = t.to_polars(lazy=True, version=version)
    assert isinstance(lazy, pl.LazyFrame)
    assert canon(lazy.collect().to_arrow()) == canon(expected)
    got = (lazy.filter((pl.col("key") >= "k035") & (pl.col("key") < "k085"))
           .select(["value", "key"]).collect().to_arrow())
    want = t.query(ranges=[sd.Range("k035", "k085")], columns=["value", "key"],
                   version=version)
    assert canon(got) == canon(want)
    got = lazy.filter(pl.col("key").is_in(["k003", "k061"]) & pl.col("value").is_not_null()
                      ).collect().to_arrow()
    assert canon(got) == canon(t.query(keys=["k003", "k061"], version=version))
    assert lazy.head(5).collect().height == min(5, expected.num_rows)
    # the arguments narrow as query()'s do
    got = t.to_polars(lazy=True, keys=["k010"], columns=["key", "value"], version=version)
    assert canon(got.collect().to_arrow()) == canon(
        t.query(keys=["k010"], columns=["key", "value"], version=version))


def test_polars_lazy_is_pinned(tmp_path: Path) -> None:
    pytest.importorskip("polars")
    t = build(tmp_path / "store", None, "plain")
    before = t.query()
    lazy = t.to_polars(lazy=True)
    t.ingest(rows(50, 9, keys=["zzz"]))
    assert canon(lazy.collect().to_arrow()) == canon(before)


def test_polars_missing(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import builtins

    real = builtins.__import__

    def fake(name: str, *a: Any, **k: Any) -> Any:
        if name == "polars" or name.startswith("polars."):
            raise ImportError("no polars")
        return real(name, *a, **k)

    t = make_table(tmp_path / "store")
    monkeypatch.setattr(builtins, "__import__", fake)
    with pytest.raises(MissingDependencyError, match=r"pip install 'sediment-lsm\[polars\]'"):
        t.to_polars()


# ---- plan_files read back with pyarrow (local and S3) --------------------------------------
def read_plan(t: sd.Table, plan: list[Any], version: Any,
              open_file: Callable[[Any], pa.Table]) -> pa.Table:
    """What an engine reading Parquet itself does with a plan: each file restricted to its
    region and ranges, the flagged leaves merged by (keys, sequence) then run through the
    table's iterators."""
    prepared = t.prepare(version=version)
    schema = t.schema
    arrow = schema.to_arrow()
    out: list[pa.Table] = []
    for leaf in dict.fromkeys(p.leaf_id for p in plan):
        files = [p for p in plan if p.leaf_id == leaf]
        parts = []
        for p in files:
            data = open_file(p)
            data = rows_in(data, schema.row_key_names, p.region, p.ranges)
            parts.append(with_sequence(data, p.sequence) if p.sequenced
                         else with_sequence(data.drop_columns(
                             [c for c in data.column_names if c == SEQ]), p.sequence))
        data = pa.concat_tables(parts)
        if files[0].merge:
            data = data.sort_by([(n, "ascending") for n in [*schema.key_names, SEQ]])
            data = without_sequence(data).select(arrow.names).cast(arrow)
            data = pa.Table.from_batches(
                list(apply_iterators(iter(data.to_batches()), prepared.iterators)),
                schema=arrow)
        else:
            data = without_sequence(data).select(arrow.names).cast(arrow)
        out.append(data)
    return pa.concat_tables(out) if out else arrow.empty_table()


@pytest.mark.parametrize("version", [None, "old"])
def test_plan_files_read_back_equals_query(any_table: sd.Table, version: str | None) -> None:
    t = any_table
    fs, _ = t._handle.objects.arrow_filesystem()

    def open_file(p: Any) -> pa.Table:
        return pq.read_table(p.path, filesystem=fs)

    def open_row_groups(p: Any) -> pa.Table:
        with fs.open_input_file(p.path) as f:
            return pq.ParquetFile(f).read_row_groups(list(p.row_groups))

    for keys, ranges in [(None, None), (None, [sd.Range("k035", "k085")]),
                         (["k007", "k050"], None)]:
        plan = t.plan_files(keys=keys, ranges=ranges, version=version)
        # files whose row groups cannot hold a wanted row are left out
        assert {p.filename for p in plan} <= t.plan(keys, ranges, version=t.resolve_version(
            version)).files
        want = t.query(keys, ranges, version=version).to_pylist()
        assert read_plan(t, plan, version, open_file).to_pylist() == want
        assert read_plan(t, plan, version, open_row_groups).to_pylist() == want
    # exact keys: the key filters and statistics leave a few row groups of few files
    whole = t.plan_files(version=version)
    few = t.plan_files(keys=["k007"], version=version)
    assert sum(len(p.row_groups) for p in few) < sum(len(p.row_groups) for p in whole) / 4


def test_plan_files_flags(tmp_path: Path) -> None:
    t = make_table(tmp_path / "store", split_points=["m"])
    t.ingest(rows(100, 1))
    plan = t.plan_files()
    assert plan and not any(p.merge for p in plan)  # one file per leaf, no iterators
    assert all(p.uri.startswith("file://") and Path(p.path).exists() for p in plan)
    assert sum(p.records for p in plan) == 100
    t.ingest(rows(100, 2))
    assert all(p.merge for p in t.plan_files())
    t.compact(full=True)
    t.set_properties({"query.iterators": json.dumps([{"type": "keep_latest",
                                                      "by": "timestamp"}])})
    assert all(p.merge and p.files_in_leaf == 1 for p in t.plan_files())
    k = t.query().column("key")[0].as_py()
    assert [p.leaf_id for p in t.plan_files(keys=[k])] == [leaf_for_key(t.state(), (k,)).id]
    # a key no file can hold (by statistics and key filters): nothing to read
    assert t.plan_files(keys=["no such key"]) == []
