"""Skip indexes on Spark with pushdown on: ``=`` and ``IN`` on a column with bloom filters
(``parquet.bloom_columns``) are pushed as the read's filter, the plan keeps only the leaves
that may hold the values, and the answer equals the same read of a table without the index
(a ``merge="last"`` table with a replaced value, so a stale record would show)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from spark_helpers import COLUMNS, SCHEMA, arrow, make_frame, reader_options

import sediment as sd


def _tables(store: sd.Store) -> tuple[list[sd.Table], str]:
    """Two merge="last" tables of the same records, one with the index, and the value one
    record of k150 held before a later write of its record key replaced it."""
    frame = make_frame(1200, keys=400, seed=5)
    stale = frame[frame.key == "k150"].iloc[0]
    out = []
    for name, props in (("indexed", {"parquet.bloom_columns": "value"}), ("plain", {})):
        t = store.create_table(name, SCHEMA, split_points=["k100", "k200", "k300"],
                               properties={"merge": "last", "parquet.row_group_rows": 128,
                                           **props})
        t.ingest(arrow(frame))
        # a record of k150 replaced (same record key): its old value is stale
        t.ingest(pa.table({"key": ["k150", "k250"], "ts": pa.array([int(stale.ts), 10**6]),
                           "value": ["new", "v7"], "n": pa.array([1, 2])}))
        out.append(t)
    return out, str(stale.value)


def test_pushed_point_filters_narrow_the_plan(tmp_path: Path) -> None:
    from pyspark.sql.datasource import EqualTo, In

    from sediment.spark.datasource import SedimentReader
    from sediment.spark.sparktypes import spark_struct

    store = sd.Store.open(str(tmp_path / "store"), create=True)
    (indexed, plain), old = _tables(store)
    assert old not in indexed.query(keys=["k150"]).column("value").to_pylist()
    answers = []
    for t in (indexed, plain):
        reader = SedimentReader({"store": store.uri, "table": t.name, "pushdown": "true"},
                                spark_struct(SCHEMA.to_arrow()))
        filters = [EqualTo(("value",), "v7"), In(("value",), ("v7", old))]
        assert list(reader.pushFilters(filters)) == filters  # Spark applies them too
        parts = reader.partitions()
        rows = pa.Table.from_batches([b for p in parts for b in reader.read(p)]) \
            if parts[0].leaf_id else None
        answers.append((len(parts), rows))
    assert answers[0][0] < answers[1][0] == 4  # the index keeps fewer leaves
    # each reader's rows, before Spark applies the filters again: the indexed read returns
    # only matching records, the plain one whole leaves; both hold the same matches
    assert answers[0][1] is not None
    want = plain.query(filter=f"value IN ('v7', '{old}')").to_pylist()
    assert sorted(answers[0][1].to_pylist(), key=repr) == sorted(want, key=repr)
    assert old not in [r["value"] for r in want if r["key"] == "k150"]  # never the stale one


@pytest.mark.spark
def test_spark_filter_answers_equal_with_and_without_the_index(spark_local: Any,
                                                                tmp_path: Path) -> None:
    store = sd.Store.open(str(tmp_path / "store"), create=True)
    (indexed, plain), old = _tables(store)
    answers = []
    for t in (indexed, plain):
        df = spark_local.read.format("sediment").options(**reader_options(store)) \
            .option("table", t.name).option("pushdown", "true").load()
        got = df.filter(f"value IN ('v7', '{old}', 'new')").toPandas()[COLUMNS]
        answers.append(sorted(map(tuple, got.astype(object).values.tolist()), key=repr))
    assert answers[0] == answers[1] and answers[0]
    assert "new" in {r[2] for r in answers[0] if r[0] == "k150"}
    assert old not in {r[2] for r in answers[0] if r[0] == "k150"}  # never the stale one
