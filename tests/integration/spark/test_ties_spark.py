"""Ties under the Spark runner: compaction jobs run as Spark tasks keep the order of records
with equal keys (commit order, then input position), so ``last`` aggregation and keep-latest
answer the same before and after, and the same as the local runner (tests/query/test_ties.py has
the rest)."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from spark_helpers import open_store, reader_options, spark_and_store

import sediment as sd

pytestmark = pytest.mark.spark

SCHEMA = sd.Schema(row_keys=[("key", pa.string())], sort_keys=[("ts", pa.int64())],
                   values=[("v", pa.int64())])
LAST = {"type": "aggregate", "functions": {"v": "last"}}
LATEST = {"type": "keep_latest", "by": "ts"}


def _batch(commit: int, rng: np.random.Generator) -> pa.Table:
    n = 300
    return pa.table({"key": [f"k{k:02d}" for k in rng.integers(0, 30, n)],
                     "ts": rng.integers(0, 3, n), "v": commit * 1_000_000 + np.arange(n)},
                    schema=SCHEMA.to_arrow())


def _expected(batches: list[pa.Table], how: str | None) -> list[dict[str, Any]]:
    df = pa.concat_tables(batches).to_pandas().sort_values(["key", "ts", "v"], kind="stable")
    if how == "last":
        df = df.drop_duplicates(["key", "ts"], keep="last")
    elif how == "latest":
        df = df.drop_duplicates(["key"], keep="last")
    return df.to_dict("records")


def _answer(table: sd.Table, how: str | None) -> list[dict[str, Any]]:
    its = [] if how is None else [LAST if how == "last" else LATEST]
    return table.query(iterators=its).to_pylist()


@spark_and_store(("local", "local"))
def test_spark_compaction_keeps_the_order_of_ties(spark: Any, store_uri: Any) -> None:
    store = open_store(store_uri)
    props = {"compaction.strategy": "basic", "compaction.batch_size": 2,
             "state.snapshot.interval": 2}
    tables = {runner: store.create_table(f"t_{runner}", SCHEMA, split_points=[("k15",)],
                                         properties=props) for runner in ("spark", "local")}
    tables["agg"] = store.create_table("t_agg", SCHEMA, split_points=[("k15",)], properties={
        **props, "compaction.iterators": json.dumps([LAST])})
    rng = np.random.default_rng(3)
    batches = [_batch(c, rng) for c in range(1, 6)]
    for b in batches:
        for t in tables.values():
            t.ingest(b)
    want = {how: _expected(batches, how) for how in ("last", "latest", None)}
    for how, rows in want.items():
        assert _answer(tables["spark"], how) == rows
    for _ in range(3):
        for name, t in tables.items():
            t.compact(runner="local" if name == "local" else "spark")
        for name, t in tables.items():
            for how in ("last",) if name == "agg" else ("last", "latest", None):
                assert _answer(t, how) == want[how], (name, how)
    assert len(tables["spark"].files()) == 2
    # a fresh reader (snapshots + log) and the Spark data source agree; no hidden column
    fresh = sd.Store.open(store.uri).table("t_spark")
    assert _answer(fresh, "last") == want["last"]
    frame = (spark.read.format("sediment").options(**reader_options(store))
             .option("table", "t_spark").load())
    assert frame.columns == ["key", "ts", "v"]
    got = frame.toPandas().sort_values(["key", "ts", "v"]).to_dict("records")
    assert got == want[None]
