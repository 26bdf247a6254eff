"""Query-time filters (``filter=``, ``--where``): results equal a pandas reference that applies
the table's iterators first and the filter after; row-key constraints narrow the plan;
statistics prune row groups only under record-by-record iterators."""

from __future__ import annotations

import json
import re
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import sediment as sd
from sediment.cli.app import app
from sediment.errors import QueryError
from sediment.query.filters import QueryFilter
from sediment.query.where import WhereError, parse_where

SCHEMA = sd.Schema(row_keys=[("key", pa.string())], sort_keys=[("ts", pa.int64())],
                   values=[("v", pa.int64())])
KEYS = ["", "a", "ab", "b", "c", "é", "m", "n", "x", "z", "zz", "😀"]
ITERATORS: dict[str, list[dict[str, Any]]] = {
    "none": [],
    "row_filter": [{"type": "filter", "field": "v", "op": ">", "value": -20}],
    "aggregate": [{"type": "aggregate", "functions": {"v": "sum"}}],
    "keep_latest": [{"type": "keep_latest", "by": "ts"}],
}

Pred = Callable[[pd.DataFrame], pd.Series]


# ---- random filters: a pyarrow expression and the same predicate in pandas (Kleene logic) ----
def _cmp(op: str, col: str, value: Any) -> tuple[pc.Expression, Pred]:
    f = pc.field(col)
    e = {"==": f == value, "!=": f != value, "<": f < value, "<=": f <= value,
         ">": f > value, ">=": f >= value}[op]

    def p(df: pd.DataFrame) -> pd.Series:
        s = df[col]
        return {"==": s == value, "!=": s != value, "<": s < value, "<=": s <= value,
                ">": s > value, ">=": s >= value}[op]
    return e, p


OPS = st.sampled_from(["==", "!=", "<", "<=", ">", ">="])
key_leaf = st.builds(lambda op, k: _cmp(op, "key", k), OPS, st.sampled_from(KEYS))
v_leaf = st.builds(lambda op, v: _cmp(op, "v", v), OPS, st.integers(-60, 60))
in_leaf = st.builds(
    lambda ks: (pc.field("key").isin(ks), lambda df: df["key"].isin(ks).astype("boolean")),
    st.lists(st.sampled_from(KEYS), min_size=1, max_size=3))
null_leaf = st.sampled_from([
    (pc.field("v").is_null(), lambda df: df["v"].isna().astype("boolean")),
    (pc.field("v").is_valid(), lambda df: df["v"].notna().astype("boolean"))])


def _and(a: Any, b: Any) -> Any:
    return a[0] & b[0], lambda df: a[1](df) & b[1](df)


def _or(a: Any, b: Any) -> Any:
    return a[0] | b[0], lambda df: a[1](df) | b[1](df)


def _not(a: Any) -> Any:
    return ~a[0], lambda df: ~a[1](df)


filters = st.recursive(
    st.one_of(key_leaf, key_leaf, v_leaf, in_leaf, null_leaf),
    lambda inner: st.one_of(st.builds(_and, inner, inner), st.builds(_or, inner, inner),
                            st.builds(_not, inner)),
    max_leaves=5)


# ---- the reference --------------------------------------------------------------------------
def reference(frames: list[pd.DataFrame], iterator: str, pred: Pred,
              columns: list[str]) -> list[tuple[Any, ...]]:
    df = pd.concat([f.assign(seq=range(i * 1000, i * 1000 + len(f)))
                    for i, f in enumerate(frames)], ignore_index=True)
    df = df.astype({"key": "string", "ts": "Int64", "v": "Int64"})
    if iterator == "row_filter":
        df = df[(df["v"] > -20).fillna(False)]
    elif iterator == "aggregate":
        df = df.groupby(["key", "ts"], as_index=False).agg(v=("v", lambda s: s.sum(min_count=1)))
    elif iterator == "keep_latest":
        df = df.sort_values(["key", "ts", "seq"], kind="stable").groupby("key").tail(1)
    df = df[pred(df).astype("boolean").fillna(False).to_numpy(dtype=bool)]
    return _rows(df[columns].astype(object).where(df[columns].notna(), None)
                 .itertuples(index=False))


def _rows(rows: Any) -> list[tuple[Any, ...]]:
    return sorted((tuple(r) for r in rows), key=repr)


def got_rows(t: pa.Table) -> list[tuple[Any, ...]]:
    return _rows(zip(*(c.to_pylist() for c in t.columns), strict=True)) if t.num_rows else []


def _frame(rng: Any, n: int) -> pd.DataFrame:
    return pd.DataFrame({
        "key": [rng.choice(KEYS) for _ in range(n)],
        "ts": [rng.randint(0, 5) for _ in range(n)],
        "v": pd.array([None if rng.random() < 0.15 else rng.randint(-50, 50)
                       for _ in range(n)], dtype="Int64")})


def _build(root: str, iterator: str, seed: int) -> tuple[sd.Table, list[pd.DataFrame]]:
    """A table with several files per leaf and split references (files above split leaves);
    each file is one row group, so statistics prune whole files."""
    import random

    rng = random.Random(seed)
    store = sd.Store.open(root, create=True)
    props = {"parquet.row_group_rows": 128, "compaction.iterators": json.dumps(ITERATORS[iterator])}
    table = store.create_table("t", SCHEMA, split_points=["m"], properties=props)
    frames = []
    for i in range(5):
        f = _frame(rng, rng.randint(5, 30))
        frames.append(f)
        table.ingest(pa.Table.from_pandas(f, schema=SCHEMA.to_arrow(), preserve_index=False))
        if i == 2:  # split the leaves: the files ingested so far stay referenced above them
            # (a threshold of 1 splits every leaf holding two keys: 5 to 90 records can leave
            # both leaves at 10 or fewer, and then nothing split)
            table.set_properties({"partition.split.threshold": 1})
            table.split()
            table.set_properties({"partition.split.threshold": 1_000_000_000})
    return table, frames


@pytest.mark.parametrize("iterator", list(ITERATORS))
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.data_too_large])
@given(seed=st.integers(0, 10_000), flts=st.lists(filters, min_size=3, max_size=3),
       columns=st.sampled_from([["key", "ts", "v"], ["ts"], ["v", "key"]]))
def test_filter_matches_pandas_reference(iterator: str, seed: int, flts: list[Any],
                                         columns: list[str]) -> None:
    with tempfile.TemporaryDirectory() as root:
        table, frames = _build(root, iterator, seed)
        assert len(table.partitions()) > 3  # split below "m" and above it
        for expr, pred in flts:
            want = reference(frames, iterator, pred, columns)
            assert got_rows(table.query(columns=columns, filter=expr)) == want, str(expr)
            assert got_rows(table.scan(columns=columns, filter=expr).read_all()) == want
            assert got_rows(table.to_arrow(columns=columns, filter=expr)) == want


def test_merging_iterators_do_not_prune_by_value_statistics(tmp_path: Path) -> None:
    """keep-latest: an old record's row group passes `v > 50`, the latest's does not; the
    answer is nothing (pruning first would return the old record)."""
    store = sd.Store.open(str(tmp_path), create=True)
    table = store.create_table("t", SCHEMA, properties={
        "compaction.iterators": json.dumps(ITERATORS["keep_latest"])})
    table.ingest(pa.table({"key": ["a"], "ts": [1], "v": [100]}, schema=SCHEMA.to_arrow()))
    table.ingest(pa.table({"key": ["a"], "ts": [2], "v": [1]}, schema=SCHEMA.to_arrow()))
    flt = pc.field("v") > 50
    assert table.query(filter=flt).num_rows == 0
    prepared = table.prepare(filter=flt)
    assert prepared.query_filter is not None and prepared.query_filter.tree is None
    assert table.query(filter=pc.field("v") < 50).to_pylist() == [
        {"key": "a", "ts": 2, "v": 1}]


def test_record_by_record_prunes_row_groups(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    store = sd.Store.open(str(tmp_path), create=True)
    table = store.create_table("t", SCHEMA, properties={"parquet.row_group_rows": 128})
    n = 1280
    table.ingest(pa.table({"key": [f"k{i:04}" for i in range(n)], "ts": [0] * n,
                           "v": list(range(n))}, schema=SCHEMA.to_arrow()))
    kept: list[int] = []
    original = QueryFilter.row_groups

    def spy(self: QueryFilter, md: Any, groups: list[int]) -> list[int]:
        out = original(self, md, groups)
        kept.extend(out)
        return out

    monkeypatch.setattr(QueryFilter, "row_groups", spy)
    got = table.query(filter=(pc.field("v") >= 420) & (pc.field("v") < 425), columns=["v"])
    assert got.column("v").to_pylist() == [420, 421, 422, 423, 424]
    assert kept == [3]  # one row group of ten read


def test_row_key_constraints_narrow_the_plan(tmp_path: Path) -> None:
    store = sd.Store.open(str(tmp_path), create=True)
    table = store.create_table("t", SCHEMA, split_points=["g", "p"])
    table.ingest(pa.table({"key": ["a", "h", "q"], "ts": [1, 1, 1], "v": [1, 2, 3]},
                          schema=SCHEMA.to_arrow()))
    assert len(table.plan().subqueries) == 3
    assert len(table.plan(filter=pc.field("key") == "h").subqueries) == 1
    assert len(table.plan(filter=(pc.field("key") < "b") | (pc.field("key") >= "q")
                          ).subqueries) == 2
    assert len(table.plan(filter=pc.field("key").isin(["a", "b"]) & (pc.field("v") > 0)
                          ).subqueries) == 1
    # not understood (a negation): everything is read, the answer is still right
    assert len(table.plan(filter=~(pc.field("key") < "h")).subqueries) == 3
    assert table.query(filter=~(pc.field("key") < "h")).column("key").to_pylist() == ["h", "q"]
    # with keys/ranges too: both apply
    got = table.query(ranges=[sd.Range("a", "z")], filter=pc.field("key") >= "h")
    assert got.column("key").to_pylist() == ["h", "q"]
    assert len(table.plan(ranges=[sd.Range("a", "z")], filter=pc.field("key") >= "h"
                          ).subqueries) == 2


def test_key_only_filters_are_enforced_by_the_read(tmp_path: Path) -> None:
    """A filter made only of comparisons and ``is_in`` on the first row key becomes the read's
    ranges and is not applied again; anything more is still applied after the merge."""
    store = sd.Store.open(str(tmp_path), create=True)
    table = store.create_table("t", SCHEMA, split_points=["g", "p"])
    data = pa.table({"key": list("abcghmpqz") * 2, "ts": list(range(18)),
                     "v": list(range(18))}, schema=SCHEMA.to_arrow())
    table.ingest(data)
    frame = data.to_pandas()
    k = pc.field("key")
    for expr, pred in [(k == "h", frame.key == "h"), (k < "g", frame.key < "g"),
                       (k <= "g", frame.key <= "g"), (k.isin(["a", "q", "y"]),
                                                      frame.key.isin(["a", "q", "y"])),
                       (((k > "b") & (k < "h")) | (k >= "q"),
                        ((frame.key > "b") & (frame.key < "h")) | (frame.key >= "q"))]:
        assert table.prepare(filter=expr).query_filter is None, str(expr)
        assert got_rows(table.query(filter=expr)) == _rows(
            frame[pred].itertuples(index=False)), str(expr)
    assert table.prepare(filter=(k == "h") & (pc.field("v") > 3)).query_filter is not None
    assert table.prepare(keys=["h"], filter=k >= "a").query_filter is not None
    assert table.query(keys=["a", "h"], filter=k >= "b").column("key").to_pylist() == ["h"] * 2
    # a multi-field key: the first field's ranges are prefixes
    two = sd.Schema(row_keys=[("a", pa.string()), ("b", pa.int64())], values=[("v", pa.int64())])
    t2 = store.create_table("t2", two, split_points=[("m", 5)])
    t2.ingest(pa.table({"a": ["l", "m", "m", "m", "n"], "b": [9, 1, 5, 9, 0],
                        "v": [1, 2, 3, 4, 5]}, schema=two.to_arrow()))
    assert t2.prepare(filter=pc.field("a") == "m").query_filter is None
    assert t2.query(filter=pc.field("a") == "m").column("v").to_pylist() == [2, 3, 4]
    assert t2.query(filter=pc.field("a") > "l").column("v").to_pylist() == [2, 3, 4, 5]


def test_filter_columns_are_read_and_dropped(tmp_path: Path) -> None:
    store = sd.Store.open(str(tmp_path), create=True)
    table = store.create_table("t", SCHEMA)
    table.ingest(pa.table({"key": ["a", "b"], "ts": [1, 2], "v": [1, 9]},
                          schema=SCHEMA.to_arrow()))
    got = table.query(columns=["ts"], filter=pc.field("v") > 3)
    assert got.column_names == ["ts"] and got.column("ts").to_pylist() == [2]


def test_filter_errors_name_table_and_field(tmp_path: Path) -> None:
    store = sd.Store.open(str(tmp_path), create=True)
    table = store.create_table("events", SCHEMA)
    with pytest.raises(QueryError, match=r"table events.*'nope'"):
        table.query(filter=pc.field("nope") > 3)
    with pytest.raises(QueryError, match="events"):
        table.to_arrow(filter=pc.field("key") > 3)  # string compared with a number
    with pytest.raises(QueryError, match="Expression"):
        table.query(filter=3)  # text is --where text now (tests/query/test_filter_text.py)


# ---- --where ------------------------------------------------------------------------------
ARROW = pa.schema([("key", pa.string()), ("ts", pa.timestamp("ms")), ("v", pa.int64()),
                   ("x", pa.float64()), ("ok", pa.bool_()), ("odd name", pa.string())])
DATA = pa.table({"key": ["a", "b", "c", "d"],
                 "ts": pa.array([0, 86_400_000, 2 * 86_400_000, None], pa.timestamp("ms")),
                 "v": [1, 5, None, 9], "x": [0.5, 1.5, 2.5, None],
                 "ok": [True, False, None, True], "odd name": ["p", "q", "r", "it's"]},
                schema=ARROW)


@pytest.mark.parametrize(("where", "keys"), [
    ("v = 5", ["b"]), ("v != 5", ["a", "d"]), ("v <> 5", ["a", "d"]), ("v < 5", ["a"]),
    ("v <= 5", ["a", "b"]), ("v > 5", ["d"]), ("v >= 5", ["b", "d"]),
    ("key IN ('a', 'c')", ["a", "c"]), ("key NOT IN ('a','c')", ["b", "d"]),
    ("v BETWEEN 2 AND 9", ["b", "d"]), ("v NOT BETWEEN 2 AND 8", ["a", "d"]),
    ("v IS NULL", ["c"]), ("v is not null", ["a", "b", "d"]),
    ("ok = true", ["a", "d"]), ("ok = FALSE", ["b"]),
    ("x > 1", ["b", "c"]), ("x >= 1.5 and x < 2.5", ["b"]), ("x = -0.5e0", []),
    ("ts >= '1970-01-02'", ["b", "c"]), ("ts < '1970-01-02 00:00:00'", ["a"]),
    ("v = 1 OR v = 9 AND key = 'a'", ["a"]), ("(v = 1 OR v = 9) AND key = 'd'", ["d"]),
    ("NOT (v > 1)", ["a"]), ("not not v = 1", ["a"]),
    ("\"odd name\" = 'it''s'", ["d"]), ("key >= 'b' and key < 'd'", ["b", "c"]),
])
def test_where_parses(where: str, keys: list[str]) -> None:
    expr = parse_where(where, ARROW)
    assert DATA.filter(expr).column("key").to_pylist() == keys


@pytest.mark.parametrize(("where", "position", "words"), [
    ("", 1, "expected a condition"),
    ("v >", 4, "expected a literal"),
    ("v > 'x'", 5, "does not fit field 'v'"),
    ("v = 1.5", 5, "does not fit"),
    ("nope = 1", 1, "unknown field 'nope'"),
    ("v = null", 5, "IS NULL"),
    ("(v > 1", 7, "expected ')'"),
    ("v > 1 v", 7, "expected AND, OR"),
    ("v IS 3", 6, "expected NULL"),
    ("v BETWEEN 1 2", 13, "expected AND"),
    ("key IN ('a' 'b')", 13, "expected ')'"),
    ("v ; 1", 3, "unexpected character ';'"),
    ("v 1", 3, "expected a comparison"),
    ("and = 1", 1, "expected a field name"),
    ("key = 'open", 7, "unterminated string"),
    ("ts > 'yesterday'", 6, "does not fit field 'ts'"),
])
def test_where_errors_name_the_position(where: str, position: int, words: str) -> None:
    with pytest.raises(WhereError) as e:
        parse_where(where, ARROW)
    msg = str(e.value)
    assert "\n" not in msg and words in msg and re.search(f"at position {position}\\b", msg), msg


def test_cli_where(tmp_path: Path) -> None:
    runner = CliRunner()
    store = str(tmp_path / "s")
    inp = tmp_path / "in.jsonl"
    inp.write_text('{"key": "a", "ts": 1, "v": 1}\n{"key": "b", "ts": 1, "v": 5}\n'
                   '{"key": "n", "ts": 2}\n{"key": "z", "ts": 3, "v": 7}\n')
    for args in (["init"], ["create-table", "t", "--row-key", "key:string",
                            "--sort-key", "ts:int64", "--value", "v:int64",
                            "--split-point", "m"], ["ingest", "t", str(inp)]):
        r = runner.invoke(app, [*args, "--store", store])
        assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["query", "t", "--store", store, "--json",
                            "--where", "v > 2 OR v IS NULL"])
    assert r.exit_code == 0, r.output
    assert [json.loads(line)["key"] for line in r.stdout.splitlines()] == ["b", "n", "z"]
    r = runner.invoke(app, ["query", "t", "--store", store, "--format", "csv", "-c", "ts",
                            "-w", "key BETWEEN 'b' AND 'n' AND NOT v = 5"])
    assert r.exit_code == 0, r.output
    assert r.stdout.split() == ['"ts"']  # n has no v: NOT (null = 5) is null, dropped
    r = runner.invoke(app, ["query", "t", "--store", store, "--where", "v >= 'x'"])
    assert r.exit_code == 1
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: where:") and "position 6" in lines[0]
    r = runner.invoke(app, ["query", "--help"])
    assert "--where" in r.stdout and "BETWEEN" in r.stdout
