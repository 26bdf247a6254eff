"""The ``sediment`` data source takes a read request's JSON (option ``request``): its keys,
ranges, columns, version or tag, filter and iterators apply to every partition, and each
partition carries its read as a request's JSON. The reader is exercised without Spark jobs
(its partitions read in turn, as tasks would), then once on Spark."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from spark_helpers import SCHEMA, make_frame

import sediment as sd
from sediment.errors import BadRequestError, QueryError

SPLITS = [("k010",), ("k020",), ("k030",)]  # four leaves


def _table(tmp_path: Path) -> tuple[sd.Store, sd.Table]:
    store = sd.Store.open(str(tmp_path / "store"), create=True)
    table = store.create_table("events", SCHEMA, split_points=SPLITS)
    table.ingest(make_frame(1200, keys=40, seed=11))
    table.tag("first")
    table.ingest(make_frame(400, keys=40, seed=12, start=5000))
    return store, table


def _read(options: dict[str, str]) -> tuple[int, pa.Table, Any]:
    """Every partition of a reader over the data source's schema, read in turn."""
    from sediment.spark.datasource import LeafPartition, SedimentDataSource

    source = SedimentDataSource(options)
    struct = source.schema()
    reader = source.reader(struct)
    parts = reader.partitions()
    assert all(isinstance(p, LeafPartition) for p in parts)
    batches = [b for p in parts for b in reader.read(p)]
    names = [f.name for f in struct.fields]
    got = pa.Table.from_batches(batches) if batches else pa.table(
        {n: [] for n in names})
    return len(parts), got, parts


def _same_rows(got: pa.Table | list[dict[str, Any]], want: pa.Table) -> None:
    """The same rows as multisets (Spark and the reader's partitions keep no order)."""
    rows = got.to_pylist() if isinstance(got, pa.Table) else got
    assert sorted(map(repr, rows)) == sorted(map(repr, want.to_pylist()))


REQUESTS = [
    sd.ReadRequest(keys=["k003", "k027"], columns=["key", "ts", "n"]),
    sd.ReadRequest(ranges=[sd.Range("k005", "k015")], filter=pc.field("n") > 500),
    sd.ReadRequest(version="first", filter="value >= 'v5000'", columns=["value", "key"]),
    sd.ReadRequest(iterators=[{"type": "keep_latest", "by": "ts"}], columns=["key", "n"]),
]


@pytest.mark.parametrize("request_", REQUESTS, ids=range(len(REQUESTS)))
def test_the_reader_reads_what_the_request_asks(tmp_path: Path,
                                                request_: sd.ReadRequest) -> None:
    store, table = _table(tmp_path)
    options = {"store": store.uri, "table": "events", "request": request_.to_json_text()}
    n, got, parts = _read(options)
    want = table.prepare(request_).to_arrow()
    assert want.num_rows > 0 and got.column_names == want.column_names
    _same_rows(got, want)
    assert n == len(table.prepare(request_).plan.subqueries)
    # each partition carries its read as a request's JSON, its version pinned
    for p in parts:
        read = sd.ReadRequest.from_json(p.request)
        assert isinstance(read.version, int) and read.keys is None
        assert sd.ReadRequest(filter=read.filter, iterators=read.iterators) == \
            sd.ReadRequest(filter=request_.filter, iterators=request_.iterators)


def test_a_request_clashing_or_unreadable_is_refused_at_load(tmp_path: Path) -> None:
    from sediment.spark.datasource import SedimentDataSource

    store, _ = _table(tmp_path)
    base = {"store": store.uri, "table": "events"}
    request = sd.ReadRequest(columns=["key"]).to_json_text()
    with pytest.raises(QueryError, match="give option request or option version"):
        SedimentDataSource({**base, "request": request, "version": "2"}).schema()
    with pytest.raises(BadRequestError, match="field 'format' is 9"):
        SedimentDataSource({**base, "request": '{"format": 9}'}).schema()
    with pytest.raises(QueryError, match="no column 'nope'"):
        SedimentDataSource({**base, "request": sd.ReadRequest(
            columns=["nope"]).to_json_text()}).schema()


@pytest.mark.spark
def test_spark_reads_a_request(spark_local: Any, tmp_path: Path) -> None:
    store, table = _table(tmp_path)
    from sediment.spark import register_data_source

    register_data_source(spark_local)
    request = REQUESTS[1]
    df = spark_local.read.format("sediment").option("store", store.uri) \
        .option("table", "events").option("request", request.to_json_text()).load()
    _same_rows([r.asDict() for r in df.collect()], table.prepare(request).to_arrow())
