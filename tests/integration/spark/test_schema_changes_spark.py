"""Spark after schema changes (``local[2,2]``): the data source, ``read_table`` (files written
under an older schema leave Spark's own Parquet reader for the data source, which maps them by
field id) and writes that omit an added column."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from spark_helpers import SCHEMA, arrow, make_frame, reader_options

import sediment as sd
from sediment.spark import bulk_import, read_table

pytestmark = pytest.mark.spark


def _canonical(frame: pd.DataFrame) -> pd.DataFrame:
    cols = list(frame.columns)
    frame = frame.astype({"ts": "int64", "n": "Int64", "label": "object"})
    if "score" in cols:
        frame = frame.astype({"score": "Float64"})
    return frame.sort_values(cols, na_position="first").reset_index(drop=True)


def _equal(frame: Any, want: pa.Table) -> None:
    got = _canonical(frame.toPandas())
    expected = _canonical(want.to_pandas())
    assert list(got.columns) == list(expected.columns)
    pd.testing.assert_frame_equal(got, expected, check_dtype=False)


def test_spark_reads_and_writes_after_schema_changes(spark_local: Any, tmp_path: Path) -> None:
    store = sd.Store.open(str(tmp_path / "store"), create=True)
    table = store.create_table("events", SCHEMA, split_points=["k020"])
    table.ingest(arrow(make_frame(800, keys=40, seed=5)))
    assert not table.compact(full=True).errors  # one file per leaf: native until the schema moves
    table.rename_column("value", "label")
    table.add_columns([("score", pa.float64())])
    want = table.query()
    assert want.column_names == ["key", "ts", "label", "n", "score"]
    options = {**reader_options(store), "table": "events"}
    _equal(spark_local.read.format("sediment").options(**options).load(), want)
    frame = read_table(spark_local, table)
    plan = frame._jdf.queryExecution().optimizedPlan().toString().lower()
    assert "parquet" not in plan  # every file is under the old schema: through Sediment
    _equal(frame, want)

    # a write without the added column: nulls there, as in the files written before it
    more = make_frame(200, keys=40, seed=6, start=10_000).rename(columns={"value": "label"})
    spark_local.createDataFrame(more).write.format("sediment").options(**options) \
        .mode("append").save()
    bulk_import(spark_local, table, spark_local.createDataFrame(
        make_frame(100, keys=40, seed=7, start=20_000).rename(columns={"value": "label"})
        .assign(score=1.5)))
    assert not table.compact(full=True).errors  # every file under the current schema: native
    frame = read_table(spark_local, table)
    assert "parquet" in frame._jdf.queryExecution().optimizedPlan().toString().lower()
    _equal(frame, table.query())
    assert table.query().num_rows == 1100
    assert table.query(filter=pc.field("score") == 1.5).num_rows == 100
