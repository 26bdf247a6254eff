"""Every read route answers as ``query()`` after upserts and deletes, and ``query()`` answers
as an independent reference.

The table (module fixtures, built once per stage) has four leaves, several files per leaf,
upserted records (with repeated record keys inside one upsert), deletes by keys, by range and
by filter, records inserted again after a delete of their key, and a record that an upsert
replaced and a later filter delete then removed (its older record must not come back: upserts
settle before deletes apply). One leaf, ``[t, ∞)``, holds a single compacted file that no
upsert or delete touches: DuckDB reads it natively next to leaves read through Sediment.
Stages: ``pending`` (nothing compacted since the writes), ``compacted`` (a full compaction:
deletions settled, upsert marks cleared), ``mixed`` (after that compaction, more upserts and
deletes on top of the compacted files, then splits that leave references in the parents
and hand pending deletions to the children).

Routes: query with keys, ranges, filters and columns against the reference; scan and
to_batches, to_arrow, to_pandas, to_polars (eager and lazy, with a pushed-down filter),
DuckDB (a view mixing native and Sediment branches), DataFusion, the PyCapsule stream,
``plan_files`` read by a reader that uses pyarrow and PlannedFile's docstring only,
``sd.join`` with a second member of the table's partition scheme, and a dump loaded back.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import sediment as sd
from sediment.core.model import UPSERT_BIT
from sediment.query.wire import from_wire

SCHEMA = sd.Schema(row_keys=[("key", pa.string())], sort_keys=[("ts", pa.int64())],
                   values=[("value", pa.string()), ("n", pa.int64())])
ORDERS = sd.Schema(row_keys=[("key", pa.string())], values=[("item", pa.string())])
ARROW = SCHEMA.to_arrow()
SEQ = "__sediment_seq"
Row = tuple[str, int, str, int | None]


# ---- the reference ---------------------------------------------------------------------------
class Reference:
    """Records in commit order; a read is them sorted by (key, ts), stably."""

    def __init__(self) -> None:
        self.records: list[Row] = []

    def ingest(self, rows: list[Row]) -> None:
        self.records += rows

    def upsert(self, rows: list[Row]) -> None:
        last = {(r[0], r[1]): r for r in rows}  # the last occurrence of each record key
        self.records = [r for r in self.records if (r[0], r[1]) not in last]
        self.records += [r for r in rows if last[(r[0], r[1])] is r]

    def delete(self, removes: Callable[[Row], bool]) -> None:
        self.records = [r for r in self.records if not removes(r)]

    def rows(self) -> list[Row]:
        return sorted(self.records, key=lambda r: (r[0], r[1]))


def as_table(rows: Iterable[Row]) -> pa.Table:
    cols = list(zip(*rows, strict=True))
    return pa.table([pa.array(c, f.type) for c, f in zip(cols, ARROW, strict=True)],
                    schema=ARROW)


def as_rows(t: pa.Table) -> list[Row]:
    d = t.select(["key", "ts", "value", "n"]).to_pydict()
    return list(zip(d["key"], d["ts"], d["value"], d["n"], strict=True))


def gen(tag: str, count: int, seed: int, letters: str) -> list[Row]:
    rng = random.Random(seed)
    return [(rng.choice(letters) + rng.choice("abcd"), rng.randrange(3), f"{tag}-{i}",
             None if rng.random() < 0.1 else rng.randrange(-500, 500)) for i in range(count)]


LOW = "abcdefghijklmnopqrs"  # every write after the first compaction stays below "t"


@dataclass
class Built:
    table: sd.Table
    orders: sd.Table
    ref: Reference
    orders_ref: dict[str, list[str]]
    stage: str
    before: list[Row]
    """The reference at the tag ``before_deletes`` (after the first upserts)."""

    @property
    def want(self) -> list[Row]:
        return self.ref.rows()


def build(root: Path, stage: str) -> Built:
    store = sd.Store.open(str(root), create=True)
    store.create_scheme("users", row_keys=[("key", pa.string())], split_points=["f", "m", "t"],
                        properties={"partition.split.threshold": 1_000_000})
    props = {"state.cache.refresh_seconds": 0, "parquet.row_group_rows": 128,
             "compaction.strategy": "basic"}
    t = store.create_table("events", SCHEMA, scheme="users", properties=props)
    orders = store.create_table("orders", ORDERS, scheme="users", properties=props)
    ref = Reference()

    def ingest(rows: list[Row]) -> None:
        t.ingest(as_table(rows))
        ref.ingest(rows)

    def upsert(rows: list[Row]) -> None:
        t.upsert(as_table(rows))
        ref.upsert(rows)

    ingest([*gen("a", 900, 1, "abcdefghijklmnopqrstuvwxyz"), ("gb", 1, "gb1-first", 5),
            ("ea", 2, "ea2-first", -7)])
    ingest(gen("b", 300, 2, "abcdefghijklmnopqrstuvwxyz"))
    t.compact(full=True)  # one file per leaf; [t, ∞) keeps it
    ingest(gen("c", 80, 3, LOW))
    upsert([*gen("u1", 300, 4, LOW), ("ca", 0, "ca0-once", 1), ("ca", 0, "ca0-twice", 2)])
    # upserts alone in their files: statistics that a filter could wrongly prune them by
    upsert([("gb", 1, "gb1-upserted", 200)])
    upsert([("ea", 2, "ea2-upserted", 480)])
    t.tag("before_deletes")
    before = ref.rows()
    deleted_keys = ["ab", "ac", "nd", "qa"]
    t.delete(keys=deleted_keys)
    ref.delete(lambda r: r[0] in deleted_keys)
    t.delete(ranges=[sd.Range("h", "j")])
    ref.delete(lambda r: "h" <= r[0] < "j")
    t.delete(filter=(pc.field("n") >= 100) & (pc.field("n") < 260) & (pc.field("key") < "t"))
    ref.delete(lambda r: r[3] is not None and 100 <= r[3] < 260 and r[0] < "t")
    # inserted again after their delete (ts 5: no later upsert replaces them)
    ingest([("ab", 5, "ab5-again", 7), ("hb", 5, "hb5-again", 150), ("nd", 5, "nd5-again", 120)])
    upsert(gen("u2", 60, 5, LOW))
    t.delete(filter="n < -400 AND key >= 'c' AND key < 'p'")
    ref.delete(lambda r: r[3] is not None and r[3] < -400 and "c" <= r[0] < "p")
    ingest(gen("d", 50, 6, LOW))
    if stage in ("compacted", "mixed"):
        t.compact(full=True)
    if stage == "mixed":
        upsert(gen("u3", 50, 7, LOW))
        t.delete(keys=["ba", "ma"])
        ref.delete(lambda r: r[0] in ("ba", "ma"))
        ingest(gen("e", 30, 8, LOW))
        # splits: references left in parents, pending deletions handed to the children
        store.set_scheme_properties("users", {"partition.split.threshold": 150})
        store.split_scheme("users")
    # the second member of the scheme, with an upsert and a delete of its own
    keys = sorted({r[0] for r in ref.records})
    orders_ref = {k: [f"item-{k}"] for k in keys[::2]}
    orders.ingest(pa.table({"key": list(orders_ref), "item": [v[0] for v in
                                                            orders_ref.values()]}))
    changed = keys[::4]
    orders.upsert(pa.table({"key": changed, "item": [f"new-{k}" for k in changed]}))
    for k in changed:
        orders_ref[k] = [f"new-{k}"]
    orders.delete(keys=keys[::6])
    for k in keys[::6]:
        orders_ref.pop(k, None)
    return Built(t, orders, ref, orders_ref, stage, before)


@pytest.fixture(scope="module", params=["pending", "compacted", "mixed"])
def built(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Built:
    return build(tmp_path_factory.mktemp(f"routes-{request.param}"), request.param)


def reference_filtered(built: Built, keep: Callable[[int], bool]) -> pa.Table:
    """The reference's records whose ``n`` is not null and ``keep`` passes it."""
    return as_table([r for r in built.want if r[3] is not None and keep(r[3])])


def canon(t: pa.Table) -> list[tuple[Any, ...]]:
    """Rows in a canonical order (engines need not keep query()'s order), with strings
    whatever their Arrow type."""
    return sorted(as_rows(t), key=lambda r: (r[0], r[1], r[2]))


# ---- the table and query() -------------------------------------------------------------------
def test_the_table_has_what_the_routes_must_handle(built: Built) -> None:
    t = built.table
    plan = t.plan_files()
    leaves = {p.leaf_id for p in plan}
    assert len(leaves) == 4 if built.stage != "mixed" else len(leaves) > 4
    native = {p.leaf_id for p in plan if not p.merge}
    if built.stage == "compacted":
        assert native == leaves and not t.state().deletions
        assert not any(p.sequence & UPSERT_BIT for p in plan)
    else:
        above_t = {p.leaf_id for p in plan if p.region.min is not None and p.region.min >= ("t",)}
        assert native == above_t and native, "what lies in [t, ∞) alone has nothing to apply"
        assert any(p.files_in_leaf > 1 for p in plan)
        assert any(p.deletions for p in plan)
        assert any(p.sequence & UPSERT_BIT for p in plan)
        assert t.state().deletions
    if built.stage == "mixed":
        assert any(p.partition_id != p.leaf_id and p.deletions for p in plan)
    assert len(set(as_rows(t.query()))) == len(built.want)


def test_query_equals_the_reference(built: Built) -> None:
    t, want = built.table, built.want
    assert as_rows(t.query()) == want
    assert ("gb", 1, "gb1-first", 5) not in want  # replaced, and its replacement deleted
    assert ("ea", 2, "ea2-first", -7) not in want
    assert ("ca", 0, "ca0-twice", 2) in want and ("ca", 0, "ca0-once", 1) not in want
    assert ("ab", 5, "ab5-again", 7) in want and ("hb", 5, "hb5-again", 150) in want
    for keys in (["ab", "gb", "nd"], ["ca", "zz"]):
        assert as_rows(t.query(keys=keys)) == [r for r in want if r[0] in keys]
    for lo, hi in (("a", "h"), ("gb", "nb"), ("s", None)):
        assert as_rows(t.query(ranges=[sd.Range(lo, hi)])) == \
            [r for r in want if lo <= r[0] and (hi is None or r[0] < hi)]
    # filters prune row groups by statistics: never the one holding the upsert or delete
    # that hides an older record
    for expr, keep in ((pc.field("n") < 50, lambda r: r[3] is not None and r[3] < 50),
                       (pc.field("n") > 150, lambda r: r[3] is not None and r[3] > 150),
                       ("value = 'gb1-first'", lambda r: r[2] == "gb1-first"),
                       ("n = 5", lambda r: r[3] == 5),
                       ("n < 0 AND key = 'ea'", lambda r: r[0] == "ea" and (r[3] or 0) < 0)):
        assert as_rows(t.query(filter=expr)) == [r for r in want if keep(r)], expr
    got = t.query(columns=["value"])
    assert got.column_names == ["value"]
    assert got.column("value").to_pylist() == [r[2] for r in want]


# ---- Arrow, pandas, Polars, the PyCapsule stream ---------------------------------------------
def test_scan_batches_arrow_pandas_and_capsule_equal_query(built: Built) -> None:
    t = built.table
    expected = t.query()
    assert pa.Table.from_batches(list(t.scan()), schema=ARROW).equals(expected)
    assert t.to_batches().read_all().equals(expected)
    assert t.to_arrow().equals(expected)
    assert pa.Table.from_pandas(t.to_pandas(), schema=ARROW, preserve_index=False) \
        .equals(expected)
    scan = t.prepare()
    assert pa.RecordBatchReader.from_stream(scan).read_all().equals(expected)
    assert pa.table(scan).equals(expected)  # a fresh stream each time
    filtered = t.prepare(filter="n < 0")
    assert pa.RecordBatchReader.from_stream(filtered).read_all().equals(
        t.query(filter="n < 0"))


def test_polars_equals_query(built: Built) -> None:
    pl = pytest.importorskip("polars")
    t = built.table
    expected = t.query()
    assert canon(t.to_polars().to_arrow()) == canon(expected)
    lazy = t.to_polars(lazy=True)
    assert canon(lazy.collect().to_arrow()) == canon(expected)
    for expr, keep in ((pl.col("n") > 150, lambda n: n > 150),
                       (pl.col("n") < 50, lambda n: n < 50)):
        got = lazy.filter(expr).collect().to_arrow()
        assert canon(got) == canon(reference_filtered(built, keep)), expr
    got = lazy.filter(pl.col("key") == "gb").collect().to_arrow()
    assert canon(got) == canon(t.query(keys=["gb"]))


# ---- DuckDB, DataFusion ----------------------------------------------------------------------
def test_duckdb_view_equals_query(built: Built) -> None:
    duckdb = pytest.importorskip("duckdb")
    t = built.table
    con = duckdb.connect()
    t.to_duckdb(con, "events")
    view = con.sql("select sql from duckdb_views() where view_name = 'events'").fetchall()[0][0]
    native = sum(1 for p in t.plan_files() if not p.merge)
    assert view.count("read_parquet") == native, view
    expected = t.query()
    assert canon(con.sql("select * from events").to_arrow_table()) == canon(expected)
    for where, want in (("n > 150", t.query(filter=pc.field("n") > 150)),
                        ("n < 50", reference_filtered(built, lambda n: n < 50)),
                        ("key = 'gb'", t.query(keys=["gb"])),
                        ("key >= 'p' and n < 0",
                         t.query(ranges=[sd.Range("p", None)], filter="n < 0")),
                        ("value = 'gb1-first'", t.query(filter="value = 'gb1-first'"))):
        got = con.sql(f"select * from events where {where}").to_arrow_table()
        assert canon(got) == canon(want), where
    counts = con.sql("select key, count(*) from events group by key order by key").fetchall()
    want_counts: dict[str, int] = {}
    for r in built.want:
        want_counts[r[0]] = want_counts.get(r[0], 0) + 1
    assert counts == sorted(want_counts.items())


def test_datafusion_equals_query(built: Built) -> None:
    datafusion = pytest.importorskip("datafusion")
    t = built.table
    ctx = datafusion.SessionContext()
    t.register_datafusion(ctx, "events")
    got = pa.Table.from_batches(ctx.sql("select * from events").collect())
    assert canon(got) == canon(t.query())
    for where, keep in (("n > 150", lambda n: n > 150), ("n < 50", lambda n: n < 50)):
        got = pa.Table.from_batches(ctx.sql(f"select * from events where {where}").collect())
        assert canon(got) == canon(reference_filtered(built, keep)), where


# ---- plan_files, read as its docstring says --------------------------------------------------
def in_bounds(col: pa.ChunkedArray, lo: Any, hi: Any, lo_inclusive: bool = True,
              hi_inclusive: bool = False) -> np.ndarray:
    """Rows of a one-field row key between two bounds (None: open)."""
    out = np.ones(len(col), dtype=bool)
    if lo is not None:
        m = pc.greater_equal(col, lo[0]) if lo_inclusive else pc.greater(col, lo[0])
        out &= m.to_numpy(zero_copy_only=False)
    if hi is not None:
        m = pc.less_equal(col, hi[0]) if hi_inclusive else pc.less(col, hi[0])
        out &= m.to_numpy(zero_copy_only=False)
    return out


def read_as_documented(plan: list[Any], fs: Any, *, settle_first: bool = True) -> pa.Table:
    """An engine reading Parquet itself, by PlannedFile's docstring: each file's rows in its
    leaf's region (and ranges); a leaf flagged ``merge`` has its files' rows merged by (row
    keys, sort keys, sequence: ``__sediment_seq`` where it has a value, else ``sequence``), in
    each run of equal record keys the records before its last upserted one (UPSERT_BIT in the
    sequence) dropped, then its ``deletions`` applied (the table has no iterators)."""
    out = []
    for leaf in dict.fromkeys(p.leaf_id for p in plan):
        files = [p for p in plan if p.leaf_id == leaf]
        parts = []
        for p in files:
            with fs.open_input_file(p.path) as f:
                data = pq.ParquetFile(f).read_row_groups(list(p.row_groups))
            keep = in_bounds(data["key"], p.region.min, p.region.max)
            if p.ranges is not None:
                keep &= np.logical_or.reduce([
                    in_bounds(data["key"], r.start, r.end, r.start_inclusive, r.end_inclusive)
                    for r in p.ranges])
            data = data.filter(pa.array(keep))
            seq = pa.array(np.full(data.num_rows, p.sequence, dtype=np.int64))
            if SEQ in data.column_names:
                seq = pc.coalesce(data[SEQ], seq)
                data = data.drop_columns([SEQ])
            parts.append(data.select(ARROW.names).cast(ARROW).append_column(SEQ, seq))
        data = pa.concat_tables(parts)
        if files[0].merge:
            data = data.sort_by([("key", "ascending"), ("ts", "ascending"), (SEQ, "ascending")])
            if settle_first:
                data = delete(settle(data), files[0].deletions)
            else:
                data = settle(delete(data, files[0].deletions))
        out.append(data.drop_columns([SEQ]))
    return pa.concat_tables(out) if out else ARROW.empty_table()


def settle(data: pa.Table) -> pa.Table:
    """In each run of equal (key, ts), drop the records before its last upserted one."""
    keys, ts = data["key"].to_pylist(), data["ts"].to_pylist()
    upserted = (data[SEQ].to_numpy() & UPSERT_BIT) != 0
    keep = np.ones(data.num_rows, dtype=bool)
    last: dict[tuple[str, int], int] = {}
    for i, u in enumerate(upserted):
        if u:
            last[(keys[i], ts[i])] = i
    for i in range(data.num_rows):
        j = last.get((keys[i], ts[i]))
        if j is not None and i < j:
            keep[i] = False
    return data.filter(pa.array(keep))


def delete(data: pa.Table, deletions: Iterable[dict[str, Any]]) -> pa.Table:
    """Drop each record below a deletion's ``version << 24``, in its ranges, matching its
    filter."""
    dead = np.zeros(data.num_rows, dtype=bool)
    for d in deletions:
        hit = data[SEQ].to_numpy() < (d["version"] << 24)
        if "ranges" in d:
            hit &= np.logical_or.reduce([
                in_bounds(data["key"], r["start"], r["end"], r["start_inclusive"],
                          r["end_inclusive"]) for r in d["ranges"]] + [np.zeros(len(hit), bool)])
        if "filter" in d:
            n = data.num_rows
            rows = data.append_column("__row", pa.array(np.arange(n))).filter(
                from_wire(d["filter"], ARROW))["__row"].to_numpy()
            matches = np.zeros(n, dtype=bool)
            matches[rows] = True
            hit &= matches
        dead |= hit
    return data.filter(pa.array(~dead))


def test_plan_files_read_as_documented_equals_query(built: Built) -> None:
    t = built.table
    fs, _ = t._handle.objects.arrow_filesystem()
    for keys, ranges in ((None, None), (["ab", "gb", "nd", "zz"], None),
                         (None, [sd.Range("gb", "q")])):
        plan = t.plan_files(keys=keys, ranges=ranges)
        got = read_as_documented(plan, fs)
        assert as_rows(got) == as_rows(t.query(keys, ranges)), (keys, ranges)
    # a filter prunes row groups (PlannedFile.row_groups); the reader applies it last
    plan = t.plan_files(filter=pc.field("n") < 50)
    got = read_as_documented(plan, fs).filter(pc.field("n") < 50)
    assert as_rows(got) == as_rows(reference_filtered(built, lambda n: n < 50))


def test_the_order_of_settling_and_deleting_matters(tmp_path: Path) -> None:
    """Why PlannedFile's reader must settle upserts before it applies deletions: deleting
    first keeps a record that an upsert replaced and a filter delete then removed."""
    t = sd.Store.open(str(tmp_path / "store"), create=True).create_table("t", SCHEMA)
    t.ingest(as_table([("k", 0, "first", 5)]))
    t.upsert(as_table([("k", 0, "second", 200)]))
    t.delete(filter="n >= 100")
    assert t.query().num_rows == 0
    fs, _ = t._handle.objects.arrow_filesystem()
    assert read_as_documented(t.plan_files(), fs).num_rows == 0
    assert as_rows(read_as_documented(t.plan_files(), fs, settle_first=False)) == \
        [("k", 0, "first", 5)]


def test_routes_at_the_version_before_the_deletes(built: Built) -> None:
    """Time travel: the tagged version reads without the later deletes and upserts, on
    every route that takes a version (after compactions and splits too)."""
    t, want, v = built.table, built.before, "before_deletes"
    assert as_rows(t.query(version=v)) == want
    assert as_rows(t.to_batches(version=v).read_all()) == want
    fs, _ = t._handle.objects.arrow_filesystem()
    assert as_rows(read_as_documented(t.plan_files(version=v), fs)) == want
    duckdb = pytest.importorskip("duckdb")
    con = duckdb.connect()
    t.to_duckdb(con, "old", version=v)
    assert canon(con.sql("select * from old").to_arrow_table()) == canon(as_table(want))


# ---- sd.join over two members of one scheme ---------------------------------------------------
def test_join_equals_the_references(built: Built) -> None:
    got = sd.join(built.table, built.orders)
    want = sorted((r[0], r[1], r[2], r[3], item) for r in built.want
                  for item in built.orders_ref.get(r[0], []))
    d = got.select(["key", "ts", "value", "n", "item"]).to_pydict()
    assert sorted(zip(*d.values(), strict=True)) == want
    left = sd.join(built.table, built.orders, how="left")
    assert left.num_rows == len(built.want)


# ---- dump and load ---------------------------------------------------------------------------
def test_dump_loads_back_equal_to_query(built: Built, tmp_path: Path) -> None:
    t = built.table
    job = t.dump(str(tmp_path / "dump"))
    loaded = t.store.load(job.manifest_uri, f"loaded_{built.stage}")
    try:
        assert loaded.query().equals(t.query())
    finally:
        t.store.drop_table(f"loaded_{built.stage}")
