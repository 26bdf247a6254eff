"""Python iterators on Spark ``local[2]`` executors: the module shipped with ``addPyFile``, as
the docs show; a module the driver trusts (after its session started: the trust travels with
the read's options and with the compaction tasks) runs in the executors' Python workers, on
reads (``read_table`` and ``spark.read.format("sediment")``) and on compactions; one it does
not trust is refused there, naming the module."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import sediment as sd
from sediment.iterators.trust import TRUST_ENV
from sediment.query.request import ReadRequest
from sediment.spark import read_table
from sediment.spark.datasource import TRUST_OPTION
from support.iterator_modules import (
    DATA,
    SCHEMA,
    even_rows,
    keep_even,
    row_set,
    write_iterator_module,
)

pytestmark = pytest.mark.spark


def _rows(records: list[dict[str, Any]]) -> set[tuple[object, ...]]:
    return {(r["key"], r["ts"], r["value"]) for r in records}


def test_executors_run_trusted_iterators_and_refuse_others(
        spark_local: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spark = spark_local
    trusted = write_iterator_module(tmp_path, "spark_a")
    other = write_iterator_module(tmp_path, "spark_b")
    for name in (trusted, other):  # shipped to the executors: importable there
        spark.sparkContext.addPyFile(str(tmp_path / f"{name}.py"))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv(TRUST_ENV, "")
    sd.iterators.trust_iterator_modules([trusted])
    store = sd.Store.open(str(tmp_path / "store"), create=True)
    reads = store.create_table("reads", SCHEMA, split_points=["k5"], properties={
        "query.iterators": json.dumps([keep_even(trusted)])})
    reads.ingest(DATA)
    assert _rows([r.asDict() for r in read_table(spark, reads).collect()]) == even_rows(DATA)

    compacted = store.create_table("compacted", SCHEMA, properties={
        "compaction.iterators": json.dumps([keep_even(trusted)]),
        "compaction.strategy": "basic", "compaction.batch_size": 2})
    compacted.ingest(DATA.slice(0, 40))
    compacted.ingest(DATA.slice(40))
    result = compacted.compact(runner="spark")
    assert result.errors == () and result.jobs_committed == 1
    stored = compacted.prepare(ReadRequest(raw=True)).to_arrow()  # as the executor wrote it
    assert row_set(stored) == even_rows(DATA)

    # a module the driver does not trust: the executors refuse it too
    plain = store.create_table("plain", SCHEMA)
    plain.ingest(DATA)
    request = ReadRequest(iterators=[keep_even(other)]).to_json_text()
    frame = spark.read.format("sediment").options(
        store=store.uri, table="plain", request=request, **{TRUST_OPTION: trusted})
    with pytest.raises(Exception, match=f"module '{other}' is not trusted") as e:
        frame.load().collect()
    assert "IteratorModuleError" in str(e.value)
