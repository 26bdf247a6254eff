"""``get_flight_info`` of a real ``sediment serve``: its ``total_records`` is the estimate of
the query's answer, narrowed by its ranges (from the files' samples), not the records of
every leaf the query touches; -1 when a sample it needs cannot be read."""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
import pyarrow.flight as fl
import pytest
from serve_helpers import SCHEMA, Server

import sediment as sd
from sediment.files.sidecars import SAMPLE, sidecar_name

N = 20_000


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> sd.Store:
    s = sd.Store.open(str(tmp_path_factory.mktemp("store") / "s"), create=True)
    t = s.create_table("events", SCHEMA, split_points=["k5000"],
                       properties={"state.cache.refresh_seconds": 0.0})
    keys = [f"k{i:04d}" for i in range(10_000)] * 2
    t.ingest(pa.table({"key": keys, "ts": list(range(N)), "value": list(range(N)),
                       "note": ["n"] * N}, schema=SCHEMA.to_arrow()))
    return s


def info(server: Server, **query: Any) -> fl.FlightInfo:
    doc = json.dumps({"table": "events", **query}).encode()
    return fl.FlightClient(server.uri).get_flight_info(fl.FlightDescriptor.for_command(doc))


def test_estimate_is_narrowed_by_the_ranges(store: sd.Store, start_server: Any) -> None:
    server = start_server(store.uri)
    table = store.table("events")
    assert info(server).total_records == N  # whole leaves: exact
    for start, end in (("k1000", "k2000"), ("k4000", "k6000"), ("k0000", "k0100")):
        got = info(server, ranges=[{"range": {"start": start, "end": end}}]).total_records
        true = table.query(ranges=[sd.Range(start, end)]).num_rows
        leaves = sum(r.records for p in table.leaves()
                     if p.region.max is None or p.region.max > (start,)
                     if p.region.min is None or p.region.min < (end,)
                     for r in table.files() if r.partition_id == p.id)
        assert true < leaves
        # within the sample's step (one sampled key stands for the records from it on)
        assert abs(got - true) <= 0.1 * true + 200, (start, end, got, true)
    # a sample that cannot be read: unknown, not a guess
    (ref,) = [r for r in table.files() if r.partition_id == table.leaves()[0].id]
    objects = table._handle.objects
    objects.delete_many([sidecar_name(ref.filename, SAMPLE)])
    fresh = start_server(store.uri)  # no cached sample
    assert info(fresh, ranges=[{"range": {"start": "k1000", "end": "k2000"}}]
                ).total_records == -1
