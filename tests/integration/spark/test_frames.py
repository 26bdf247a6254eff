"""``sediment.spark.read_table``: Spark's own Parquet reader for leaves that need no merge, the
sediment data source for the others; equal to ``table.query()``."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import sediment as sd
from sediment.spark.frames import read_table

pytestmark = pytest.mark.spark


def _rows(frame: Any, order: list[str]) -> list[dict[str, Any]]:
    return sorted((r.asDict() for r in frame.collect()), key=lambda r: [r[c] for c in order])


def test_read_table_mixes_native_and_sediment_leaves(spark_local: Any, tmp_path: Path) -> None:
    schema = sd.Schema(row_keys=[("k", pa.string())], sort_keys=[("ts", pa.int64())],
                       values=[("v", pa.string(), True), ("when", pa.timestamp("ms"), True),
                               ("n", pa.int32(), True)])
    store = sd.Store.open(str(tmp_path / "store"), create=True)
    t = store.create_table("t", schema, split_points=["g", "p"])

    def batch(keys: list[str], seed: int) -> pa.Table:
        return pa.table({"k": keys, "ts": [seed] * len(keys), "v": [f"{k}{seed}" for k in keys],
                         "when": [dt.datetime(2026, 1, 1 + i % 20) for i in range(len(keys))],
                         "n": [i - 5 for i in range(len(keys))]}, schema=schema.to_arrow())

    keys = [f"{c}{i}" for c in "acegikmoqsuwy" for i in range(5)]
    t.ingest(batch(keys, 1))
    t.compact(full=True)
    t.ingest(batch([k for k in keys if k < "g"], 2))  # leaf [-, g): two files, merged
    t.tag("then")
    t.ingest(batch(["zz"], 3))
    frame = read_table(spark_local, t, version="then")
    plan = frame._jdf.queryExecution().optimizedPlan().toString()
    assert "parquet" in plan.lower() and "sediment" in plan.lower()  # both kinds of leaf
    want = t.query(version="then").to_pylist()
    assert _rows(frame, ["k", "ts"]) == sorted(want, key=lambda r: [r["k"], r["ts"]])
    assert frame.count() == len(want)
    two = read_table(spark_local, t, columns=["v", "k"])
    assert two.columns == ["v", "k"]
    assert sorted(r.v for r in two.collect()) == sorted(t.query(columns=["v"])["v"].to_pylist())


def test_read_table_with_iterators_goes_through_sediment(spark_local: Any,
                                                          tmp_path: Path) -> None:
    schema = sd.Schema(row_keys=[("k", pa.string())], sort_keys=[("ts", pa.int64())],
                       values=[("v", pa.int64(), True)])
    store = sd.Store.open(str(tmp_path / "store"), create=True)
    t = store.create_table("t", schema, properties={"query.iterators": json.dumps(
        [{"type": "keep_latest", "by": "ts"}])})
    t.ingest(pa.table({"k": ["a", "a", "b"], "ts": [1, 2, 1], "v": [1, 2, 3]},
                      schema=schema.to_arrow()))
    t.compact(full=True)
    frame = read_table(spark_local, t)
    assert "parquet" not in frame._jdf.queryExecution().optimizedPlan().toString().lower()
    assert _rows(frame, ["k"]) == t.query().to_pylist()


def test_read_table_at_a_path_hadoop_would_glob(spark_local: Any, tmp_path: Path) -> None:
    """Hadoop takes '?', '[', ':' ... in a path for globs or URI syntax: such files go through
    the data source, and the answer stays right."""
    schema = sd.Schema(row_keys=[("k", pa.string())], values=[("v", pa.int64(), True)])
    store = sd.Store.open(str(tmp_path / "what?[a] b:c"), create=True)
    t = store.create_table("t", schema)
    t.ingest(pa.table({"k": ["a", "b", "c"], "v": [1, 2, 3]}, schema=schema.to_arrow()))
    frame = read_table(spark_local, t)
    assert "parquet" not in frame._jdf.queryExecution().optimizedPlan().toString().lower()
    assert _rows(frame, ["k"]) == t.query().to_pylist()
