"""Conversions with one call (``to_arrow``, ``to_pandas``, ``to_batches``): each gives exactly
``query()``'s answer for the same keys, ranges, columns, version (number or tag) and filter."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import sediment as sd
from sediment.errors import QueryError

SCHEMA = sd.Schema(row_keys=[("key", pa.string())], sort_keys=[("ts", pa.int64())],
                   values=[("v", pa.int64()), ("s", pa.string())])


@pytest.fixture(params=["none", "keep_latest"])
def table(request: pytest.FixtureRequest, tmp_path: Path) -> sd.Table:
    its = [] if request.param == "none" else [{"type": "keep_latest", "by": "ts"}]
    store = sd.Store.open(str(tmp_path), create=True)
    t = store.create_table("t", SCHEMA, split_points=["m"],
                           properties={"compaction.iterators": json.dumps(its)})
    for i in range(3):
        n = 40
        t.ingest(pa.table({"key": [chr(ord("a") + (j * 7 + i) % 26) for j in range(n)],
                           "ts": [i * 100 + j for j in range(n)],
                           "v": [None if j % 9 == 0 else j * (i + 1) for j in range(n)],
                           "s": [f"s{j % 5}" for j in range(n)]}, schema=SCHEMA.to_arrow()))
        if i == 1:
            t.tag("v1")
    return t


ARGS: list[dict[str, Any]] = [
    {},
    {"keys": ["a", "q"]},
    {"ranges": [sd.Range("c", "p")], "columns": ["v", "key"]},
    {"filter": pc.field("v") > 30},
    {"filter": (pc.field("key") >= "m") & (pc.field("s") == "s1"), "columns": ["ts"]},
    {"version": "v1", "filter": pc.field("v").is_null()},
    {"version": "v1", "ranges": [sd.Range("b", None)], "columns": ["s"]},
]


@pytest.mark.parametrize("args", ARGS)
def test_every_conversion_equals_query(table: sd.Table, args: dict[str, Any]) -> None:
    want = table.query(**args)
    assert want.num_rows or args.get("version") or "keys" in args
    assert table.to_arrow(**args).equals(want)
    reader = table.to_batches(**args)
    assert isinstance(reader, pa.RecordBatchReader)
    assert reader.schema == want.schema
    assert pa.Table.from_batches(list(reader), schema=want.schema).equals(want)
    df = table.to_pandas(**args)
    assert isinstance(df, pd.DataFrame)
    pd.testing.assert_frame_equal(df, want.to_pandas())


def test_version_number_and_tag_agree(table: sd.Table) -> None:
    old = table.version
    tag = table.tag("before")
    table.ingest(pa.table({"key": ["zz"], "ts": [1], "v": [1], "s": ["new"]},
                          schema=SCHEMA.to_arrow()))
    for convert in (table.to_arrow, lambda **kw: table.to_batches(**kw).read_all()):
        assert convert(version=old).equals(convert(version="before"))
        assert convert(version=tag.version).equals(table.query(version="before"))
        assert convert(version="before").num_rows + 1 == convert().num_rows


def test_to_batches_streams_in_bounded_batches(tmp_path: Path) -> None:
    store = sd.Store.open(str(tmp_path), create=True)
    t = store.create_table("t", SCHEMA, properties={"parquet.row_group_rows": 1000})
    n = 20_000
    t.ingest(pa.table({"key": [f"k{i:06}" for i in range(n)], "ts": list(range(n)),
                       "v": list(range(n)), "s": ["x"] * n}, schema=SCHEMA.to_arrow()))
    sizes = [b.num_rows for b in t.to_batches(columns=["v"])]
    assert sum(sizes) == n and max(sizes) < n  # never the whole answer in one batch


def test_conversion_errors(table: sd.Table) -> None:
    with pytest.raises(QueryError, match="'nope'"):
        table.to_arrow(columns=["nope"])
    with pytest.raises(QueryError, match=r"table t.*'nope'"):
        table.to_pandas(filter=pc.field("nope") == 1)
    with pytest.raises(QueryError, match=r"table t.*'nope'"):
        table.to_batches(filter=pc.field("nope") == 1)
