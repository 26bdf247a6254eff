"""``sd.join`` of tables with list, struct and map value fields (issue 34, item 4): Arrow's
hash join refuses such payload columns (a raw ArrowInvalid), so the join runs on the keys and
row numbers and gathers the value columns. The reference is ``pandas.merge`` of the same
records as plain Python values: the same rows (as multisets), duplicates and ties included.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sediment as sd
from sediment.schemes.join import RIGHT_SUFFIX, _arrow_join

TAGS = pa.list_(pa.int64())
POINT = pa.struct([("x", pa.int64()), ("label", pa.string())])
ATTRS = pa.map_(pa.string(), pa.int64())
LEFT = sd.Schema(row_keys=[("key", pa.string())],
                 values=[("tags", TAGS), ("point", POINT), ("n", pa.int64())])
RIGHT = sd.Schema(row_keys=[("user", pa.string())],
                  values=[("attrs", ATTRS), ("tags", TAGS), ("item", pa.string())])


# ---- the reference --------------------------------------------------------------------------
def _plain(v: Any) -> Any:
    """A value in one comparable form: NaN (pandas' missing) as None, integral floats as
    ints (pandas turns an int column with gaps into floats), containers as tuples."""
    if isinstance(v, float):
        return None if math.isnan(v) else int(v) if v.is_integer() else v
    if isinstance(v, dict):
        return tuple(sorted((k, _plain(x)) for k, x in v.items()))
    if isinstance(v, list | tuple):
        return tuple(_plain(x) for x in v)
    return v


def rows_of(table: pa.Table | pd.DataFrame) -> list[str]:
    frame = table if isinstance(table, pd.DataFrame) else \
        pd.DataFrame(table.to_pylist(), columns=table.column_names, dtype=object)
    return sorted(repr(tuple(_plain(v) for v in rec))
                  for rec in frame.itertuples(index=False, name=None))


def merged(left: pa.Table, right: pa.Table, lon: list[str], ron: list[str],
           how: str) -> pd.DataFrame:
    """pandas.merge of the records as Python values, right keys dropped (the join keeps one
    copy), a right value column the left also has suffixed."""
    lf = pd.DataFrame(left.to_pylist(), columns=left.column_names, dtype=object)
    rf = pd.DataFrame(right.to_pylist(), columns=right.column_names, dtype=object)
    if lon != ron:
        rf = rf.rename(columns=dict(zip(ron, lon, strict=True)))
    out = pd.merge(lf, rf, on=lon, how=how, suffixes=("", RIGHT_SUFFIX), sort=False)
    names = [*left.column_names, *(c + RIGHT_SUFFIX if c in left.column_names else c
                                  for c in right.column_names if c not in ron)]
    return out[names]


# ---- the join of two tables in memory, many shapes ---------------------------------------------
KEYS = st.sampled_from(["a", "b", "c", "d"])  # few keys: duplicates and ties on both sides
INTS = st.none() | st.integers(-5, 5)
LEFT_ROW = st.fixed_dictionaries({
    "key": KEYS,
    "tags": st.none() | st.lists(INTS, max_size=3),
    "point": st.none() | st.fixed_dictionaries({"x": INTS, "label": st.none() | st.text(
        alphabet="xyz", max_size=2)}),
    "n": INTS})
RIGHT_ROW = st.fixed_dictionaries({
    "user": KEYS,
    "attrs": st.none() | st.lists(st.tuples(st.sampled_from("pq"), INTS), max_size=2),
    "tags": st.none() | st.lists(INTS, max_size=2),
    "item": st.none() | st.text(alphabet="ij", max_size=2)})


def _table(recs: list[dict[str, Any]], schema: sd.Schema) -> pa.Table:
    return pa.Table.from_pylist(recs, schema=schema.to_arrow())


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(LEFT_ROW, max_size=12), st.lists(RIGHT_ROW, max_size=12),
       st.sampled_from(["inner", "left"]))
def test_arrow_join_equals_pandas_merge(left: list[dict[str, Any]],
                                        right: list[dict[str, Any]], how: str) -> None:
    lt, rt = _table(left, LEFT), _table(right, RIGHT)
    out = _arrow_join(lt, rt, ["key"], ["user"], how)
    assert out.column_names == ["key", "tags", "point", "n", "attrs", "tags_right", "item"]
    assert out.schema.field("tags_right").type == TAGS
    assert out.schema.field("point").type == POINT
    assert out.schema.field("attrs").type == ATTRS
    assert rows_of(out) == rows_of(merged(lt, rt, ["key"], ["user"], how))


def test_arrow_join_keeps_plain_columns_as_before() -> None:
    """Only fixed-width and string columns: the same schema and rows as Arrow's own join."""
    lt = pa.table({"key": ["a", "b", "b", "c"], "v": [1, 2, 3, 4], "s": ["w", "x", "y", "z"]})
    rt = pa.table({"key": ["b", "b", "c", "e"], "s": ["p", "q", "r", "t"], "f": [.5, 1.5, 2.5,
                                                                              3.5]})
    for how, arrow in (("inner", "inner"), ("left", "left outer")):
        ours = _arrow_join(lt, rt, ["key"], ["key"], how)
        theirs = lt.join(rt, keys="key", join_type=arrow, right_suffix=RIGHT_SUFFIX,
                         coalesce_keys=True)
        assert ours.schema == theirs.schema
        assert rows_of(ours) == rows_of(theirs)


# ---- sd.join of two member tables end to end ---------------------------------------------------
def _members(tmp_path: Path, split_points: list[str] | None) -> tuple[sd.Table, sd.Table]:
    store = sd.Store.open(str(tmp_path / "s"), create=True)
    store.create_scheme("users", row_keys=[("key", pa.string())], split_points=split_points)
    fresh = {"state.cache.refresh_seconds": 0}
    return (store.create_table("u", LEFT, scheme="users", properties=fresh),
            store.create_table("o", RIGHT, scheme="users", properties=fresh))


SHAPES = {
    # name: (left records, right records, split points)
    "one leaf, duplicates on both sides": (
        [{"key": k, "tags": [i, i], "point": {"x": i, "label": k}, "n": i}
         for i, k in enumerate("abbbcc")],
        [{"user": k, "attrs": [("p", i)], "tags": [i], "item": f"i{i}"}
         for i, k in enumerate("bbccdd")], None),
    "three leaves, nulls and empties": (
        [{"key": k, "tags": None if i % 3 == 0 else [], "point": None if i % 2 else
          {"x": None, "label": None}, "n": None} for i, k in enumerate("aghmqz" * 3)],
        [{"user": k, "attrs": None if i % 2 else [], "tags": [None, i], "item": None}
         for i, k in enumerate("ghhqqy")], ["h", "p"]),
    "no match at all": (
        [{"key": k, "tags": [1], "point": {"x": 1, "label": "a"}, "n": 1} for k in "abc"],
        [{"user": k, "attrs": [("q", 2)], "tags": [2], "item": "x"} for k in "xyz"], ["m"]),
    "right table empty": (
        [{"key": k, "tags": [1], "point": {"x": 1, "label": "a"}, "n": 1} for k in "ab"],
        [], None),
}


@pytest.mark.parametrize("how", ["inner", "left"])
@pytest.mark.parametrize("shape", list(SHAPES))
def test_sd_join_of_nested_values_equals_pandas_merge(tmp_path: Path, shape: str,
                                                      how: str) -> None:
    left, right, splits = SHAPES[shape]
    u, o = _members(tmp_path, splits)
    lt, rt = _table(left, LEFT), _table(right, RIGHT)
    u.ingest(lt)
    if right:
        o.ingest(rt.slice(0, len(right) // 2))  # two files: the merge of a leaf too
        o.ingest(rt.slice(len(right) // 2))
    got = sd.join(u, o, how=how)
    assert got.column_names == ["key", "tags", "point", "n", "attrs", "tags_right", "item"]
    assert got.schema.field("attrs").type == ATTRS
    assert rows_of(got) == rows_of(merged(lt, rt, ["key"], ["user"], how))
    assert rows_of(sd.join_reader(u, o, how=how, threads=2).read_all()) == rows_of(got)
    # keys= and columns= narrow it the same way
    some = sd.join(u, o, how=how, keys=["b", "h"], columns=["tags", "attrs"])
    want = merged(lt.filter(pa.compute.is_in(lt["key"], pa.array(["b", "h"]))),
                  rt.filter(pa.compute.is_in(rt["user"], pa.array(["b", "h"]))),
                  ["key"], ["user"], how)[["key", "tags", "tags_right", "attrs"]]
    assert some.column_names == ["key", "tags", "tags_right", "attrs"]  # as each table reads
    assert rows_of(some) == rows_of(want)
