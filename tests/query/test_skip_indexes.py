"""Skip indexes (parquet.bloom_columns, sediment.query.skipindex) never change an answer: a
filter on an indexed value column, against a pandas reference, on tables with and without a
merge rule, with upserts, deletes, compactions and a query iterator; the index does narrow
what is read; DuckDB reads the files with their blooms through to_duckdb to the same answer."""

from __future__ import annotations

import uuid
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import sediment as sd

SCHEMA = sd.Schema(row_keys=[("k", pa.string())],
                   values=[("v", pa.string()), ("n", pa.int64())])
KEYS = list("abcdefgh")
VALUES = ["x0", "x1", "x2", "x3", None]
FILLER = 400
"""Rows of distinct keys and values ingested first: several row groups the index skips."""
MERGES = ["none", "last", "partial", "aggregate"]


def _props(merge: str, index: bool, iterator: bool) -> dict[str, Any]:
    props: dict[str, Any] = {"merge": merge, "parquet.row_group_rows": 128,
                             "state.cache.refresh_seconds": 0}
    if merge == "aggregate":
        props["merge.functions"] = '{"n": "sum"}'
    if index:
        props["parquet.bloom_columns"] = "v,n"
    if iterator:
        props["query.iterators"] = '[{"type": "filter", "field": "n", "op": ">", "value": 1}]'
    return props


def _filler() -> pa.Table:
    return pa.table({"k": [f"m{i:04d}" for i in range(FILLER)],
                     "v": [f"f{i}" for i in range(FILLER)],
                     "n": pa.array([i % 7 for i in range(FILLER)], pa.int64())})


class Model:
    """The table's records as rows, with each key's last delete and upsert by sequence;
    :meth:`answer` merges them as the rule says (pandas for the aggregate's sum)."""

    def __init__(self) -> None:
        self.rows: list[tuple[Any, Any, Any, int]] = []
        self.deleted: dict[str, int] = {}
        self.upserted: dict[str, int] = {}
        self.seq = 0

    def write(self, data: pa.Table, upsert: bool) -> None:
        for k, v, n in zip(*(data.column(c).to_pylist() for c in ("k", "v", "n")),
                           strict=True):
            self.rows.append((k, v, n, self.seq))
            if upsert:
                self.upserted[k] = self.seq
            self.seq += 1

    def delete(self, keys: list[str]) -> None:
        for k in keys:
            self.deleted[k] = self.seq
        self.seq += 1

    def answer(self, merge: str, iterator: bool) -> list[tuple[Any, ...]]:
        live = [r for r in self.rows if r[3] >= self.deleted.get(r[0], -1)
                and r[3] >= self.upserted.get(r[0], -1)]
        by_key: dict[str, list[tuple[Any, ...]]] = {}
        for r in live:
            by_key.setdefault(r[0], []).append(r)
        out: list[tuple[Any, ...]] = []
        if merge == "none":
            out = [r[:3] for r in live]
        for k, g in by_key.items() if merge != "none" else ():
            if merge == "last":
                out.append(g[-1][:3])
            elif merge == "partial":
                vs, ns = [r[1] for r in g if r[1] is not None], \
                    [r[2] for r in g if r[2] is not None]
                out.append((k, vs[-1] if vs else None, ns[-1] if ns else None))
            else:  # aggregate: n summed (null when every one is), v the last
                total = pd.Series([r[2] for r in g], dtype="float64").sum(min_count=1)
                out.append((k, g[-1][1], None if pd.isna(total) else int(total)))
        if iterator:
            out = [r for r in out if r[2] is not None and r[2] > 1]
        return out


def _got(t: pa.Table) -> list[tuple[Any, ...]]:
    return sorted(zip(*(t.column(c).to_pylist() for c in ("k", "v", "n")), strict=True),
                  key=repr)


row = st.tuples(st.sampled_from(KEYS), st.sampled_from(VALUES),
                st.one_of(st.none(), st.integers(0, 5)))
op = st.one_of(
    st.tuples(st.sampled_from(["ingest", "upsert"]), st.lists(row, min_size=1, max_size=12)),
    st.tuples(st.just("delete"), st.lists(st.sampled_from(KEYS), min_size=1, max_size=3)),
    st.tuples(st.just("compact"), st.none()),
)
FILTERS = [
    ("v == x1", pc.field("v") == "x1", lambda r: r[1] == "x1"),
    ("v in x0,x2,f5", pc.field("v").isin(["x0", "x2", "f5"]),
     lambda r: r[1] in ("x0", "x2", "f5")),
    ("v == x3 and n >= 2", (pc.field("v") == "x3") & (pc.field("n") >= 2),
     lambda r: r[1] == "x3" and r[2] is not None and r[2] >= 2),
    ("n == 4", pc.field("n") == 4, lambda r: r[2] == 4),
    ("v == f17 or v == x2", (pc.field("v") == "f17") | (pc.field("v") == "x2"),
     lambda r: r[1] in ("f17", "x2")),
    ("n >= 5 and k < m0100", (pc.field("n") >= 5) & (pc.field("k") < "m0100"),
     lambda r: r[2] is not None and r[2] >= 5 and r[0] < "m0100"),
    ("v > x2 (statistics)", pc.field("v") > "x2", lambda r: r[1] is not None and r[1] > "x2"),
]


@settings(max_examples=12, deadline=None)
@given(merge=st.sampled_from(MERGES), iterator=st.booleans(),
       ops=st.lists(op, min_size=1, max_size=5))
def test_filters_on_indexed_columns_match_a_reference(merge: str, iterator: bool,
                                                      ops: list[Any]) -> None:
    # (an in-memory store: no fsync, so an example takes a fraction of a second)
    store = sd.Store.open(f"memory://skip-{uuid.uuid4().hex[:8]}", create=True)
    table = store.create_table(f"t{uuid.uuid4().hex[:8]}", SCHEMA,
                               properties=_props(merge, True, iterator))
    model = Model()
    table.ingest(_filler())
    model.write(_filler(), False)
    for kind, arg in ops:
        if kind in ("ingest", "upsert"):
            data = pa.table({"k": [r[0] for r in arg], "v": [r[1] for r in arg],
                             "n": pa.array([r[2] for r in arg], pa.int64())})
            (table.upsert if kind == "upsert" else table.ingest)(data)
            model.write(data, kind == "upsert")
        elif kind == "delete":
            table.delete(keys=arg)
            model.delete(arg)
        else:
            table.compact()
    merged = model.answer(merge, iterator)
    for name, expression, test in FILTERS:
        want = sorted((r for r in merged if test(r)), key=repr)
        assert _got(table.query(filter=expression)) == want, name
    stream = table.scan(filter=FILTERS[1][1]).read_all()
    assert _got(stream) == sorted((r for r in merged if FILTERS[1][2](r)), key=repr)


def _two_tables(tmp_path: Any, merge: str) -> tuple[sd.Table, sd.Table]:
    store = sd.Store.open(str(tmp_path / "s"), create=True)
    out = []
    for index in (True, False):
        t = store.create_table(f"{merge}_{index}", SCHEMA, properties=_props(merge, index,
                                                                             False))
        t.ingest(_filler())
        t.ingest(_filler().slice(0, 300))  # a second file
        t.upsert(pa.table({"k": ["m0005"], "v": ["f6"], "n": pa.array([1], pa.int64())}))
        out.append(t)
    return out[0], out[1]


@pytest.mark.parametrize("merge", ["none", "last"])
def test_the_index_narrows_the_plan(tmp_path: Any, merge: str) -> None:
    indexed, plain = _two_tables(tmp_path, merge)
    f = pc.field("v") == "f300"
    a, b = indexed.prepare(sd.ReadRequest(filter=f)), plain.prepare(sd.ReadRequest(filter=f))
    assert a.to_arrow().equals(b.to_arrow())
    assert a.to_arrow().num_rows == 1
    # merged (a merge rule, or a leaf holding an upsert): candidate keys, read exactly
    assert [s.ranges for s in a.plan.subqueries] == [(sd.Range.exact(("m0300",)),)]
    # (the table without blooms may find them by statistics: "f300" sorts among few)
    # the upsert replaced m0005's f5: neither table finds it, both find f6 twice or once
    g = pc.field("v").isin(["f5", "f6"])
    assert _got(indexed.query(filter=g)) == _got(plain.query(filter=g))


def test_a_plain_table_drops_files_without_the_value(tmp_path: Any) -> None:
    store = sd.Store.open(str(tmp_path / "s"), create=True)
    t = store.create_table("p", SCHEMA, properties=_props("none", True, False))
    t.ingest(_filler())
    t.ingest(pa.table({"k": ["a"], "v": ["only"], "n": pa.array([1], pa.int64())}))
    scan = t.prepare(sd.ReadRequest(filter=pc.field("v") == "only"))
    assert sum(len(s.references) for s in scan.plan.subqueries) == 1
    assert scan.to_arrow().column("k").to_pylist() == ["a"]
    assert len(scan.plan_files()) == 1


def test_files_written_before_the_property_stay_candidates(tmp_path: Any) -> None:
    store = sd.Store.open(str(tmp_path / "s"), create=True)
    t = store.create_table("late", SCHEMA, properties=_props("last", False, False))
    t.ingest(_filler())
    t.set_properties({"parquet.bloom_columns": "v"})
    t.ingest(pa.table({"k": ["m0009"], "v": ["f1"], "n": pa.array([0], pa.int64())}))
    got = t.query(filter=pc.field("v").isin(["f9", "f1"]))
    assert got.column("k").to_pylist() == ["m0001", "m0009"]


@pytest.mark.parametrize("merge", ["none", "last"])
def test_duckdb_reads_the_indexed_files_to_the_same_answer(tmp_path: Any, merge: str) -> None:
    duckdb = pytest.importorskip("duckdb")
    indexed, plain = _two_tables(tmp_path, merge)
    answers = []
    for t in (indexed, plain):
        con = duckdb.connect()
        t.to_duckdb(con, "t")
        answers.append(con.sql("SELECT k, v, n FROM t WHERE v IN ('f400', 'f6', 'f5') "
                               "ORDER BY k, v, n").fetchall())
    assert answers[0] == answers[1] and answers[0]


def test_temporal_and_float_columns_and_keys(tmp_path: Any) -> None:
    """Dates, timestamps (a second row-key field too) and floats (0.0 also finds -0.0)
    answer as without the index, on a merge table whose candidate keys are tuples."""
    import datetime as dt

    store = sd.Store.open(str(tmp_path / "s"), create=True)
    schema = sd.Schema(row_keys=[("d", pa.date32()), ("t", pa.timestamp("us"))],
                       values=[("x", pa.float64()), ("day", pa.date32())])
    n = 600
    day0, t0 = dt.date(2020, 1, 1), dt.datetime(2024, 1, 1)
    data = pa.table({
        "d": pa.array([day0 + dt.timedelta(days=i % 50) for i in range(n)]),
        "t": pa.array([t0 + dt.timedelta(seconds=i) for i in range(n)], pa.timestamp("us")),
        "x": pa.array([-0.0 if i == 20 else float(i % 300) for i in range(n)]),
        "day": pa.array([day0 + dt.timedelta(days=i) for i in range(n)])})
    filters = [pc.field("x") == 0.0, pc.field("x") == 7.0, pc.field("x") == 999.0,
               pc.field("day") == dt.date(2020, 1, 9),
               pc.field("t") == dt.datetime(2024, 1, 1, 0, 0, 3)]
    answers = []
    for index in (True, False):
        props: dict[str, Any] = {"merge": "last", "parquet.row_group_rows": 128}
        if index:
            props["parquet.bloom_columns"] = "x,day,t"
        t = store.create_table(f"t{index}", schema, properties=props)
        t.ingest(data)
        t.ingest(data.slice(0, 10).set_column(2, "x", pa.array([999.0] * 10)))
        answers.append([t.query(filter=f).to_pylist() for f in filters])
        if index:
            plan = t.prepare(sd.ReadRequest(filter=filters[3])).plan
            assert [s.ranges for s in plan.subqueries] == \
                [(sd.Range.exact((18270, 1704067208000000)),)]
    assert answers[0] == answers[1]
    assert len(answers[0][0]) == 2 and len(answers[0][2]) == 10  # -0.0 among the zeros


def test_a_range_filter_on_a_merge_table_reads_candidate_keys(tmp_path: Any) -> None:
    """A comparison with clustered values (here ``n``, ascending with the key) rules row
    groups out by their statistics: the merge table reads the keys of the records that may
    match, every version of each, and a replaced record's old value is never returned."""
    store = sd.Store.open(str(tmp_path / "s"), create=True)
    t = store.create_table("r", SCHEMA, properties=_props("last", False, False))
    t.ingest(pa.table({"k": [f"m{i:04d}" for i in range(1000)], "v": ["a"] * 1000,
                       "n": pa.array(range(1000), pa.int64())}))
    t.ingest(pa.table({"k": ["m0995", "m0001"], "v": ["b", "b"],
                       "n": pa.array([3, 2000], pa.int64())}))
    scan = t.prepare(sd.ReadRequest(filter=pc.field("n") >= 990))
    assert all(s.ranges is not None for s in scan.plan.subqueries)
    got = scan.to_arrow()
    assert sorted(got.column("k").to_pylist()) == sorted(
        ["m0001"] + [f"m{i:04d}" for i in range(990, 1000) if i != 995])



class _Flaky:
    """An object store whose ranged reads inside a file (not its tail) change a byte every
    second time they are asked for."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.calls = inner, 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def get_range(self, key: str, start: int, end: int) -> bytes:
        data = self.inner.get_range(key, start, end)
        if end < self.inner.head(key).size:
            self.calls += 1
            if self.calls % 2 == 0:
                data = data[:-1] + bytes([data[-1] ^ 1])
        return data


def test_bloom_filters_that_read_differently_twice_are_not_used(tmp_path: Any,
                                                               caplog: Any) -> None:
    # a filter has no checksum: a byte changed on the way could hide a value, so its bytes
    # are read twice, and a file whose two reads differ is read without its filters
    from sediment.query.footers import FooterCache

    store = sd.Store.open(str(tmp_path / "s"), create=True)
    t = store.create_table("p", SCHEMA, properties=_props("none", True, False))
    t.ingest(_filler())
    (ref,) = t.state().all_references()
    objects = t._handle.objects
    assert FooterCache(objects, "k", 8, 1 << 20).blooms(ref.filename, "v", None) is not None
    flaky = _Flaky(objects)
    assert FooterCache(flaky, "k", 8, 1 << 20).blooms(ref.filename, "v", None) is None
    assert flaky.calls == 2 and "read differently twice" in caplog.text
