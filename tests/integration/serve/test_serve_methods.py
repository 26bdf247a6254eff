"""Every Flight method of ``sediment serve`` against a real server process, each answer
compared with the local API's (the reference: the same store opened in this process)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.flight as fl
import pytest
from serve_helpers import SCHEMA, Server, rows

import sediment as sd
from sediment.errors import (
    BadRequestError,
    DataError,
    InvalidTableNameError,
    InvalidTagNameError,
    QueryError,
    TableNotFoundError,
)
from sediment.iterators.base import RowFilter

FRESH = {"state.cache.refresh_seconds": 0.0}  # this process's reference reads see every commit


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> sd.Store:
    s = sd.Store.open(str(tmp_path_factory.mktemp("store") / "s"), create=True)
    t = s.create_table("events", SCHEMA, split_points=["g", "p"], properties=FRESH)
    keys = [f"{c}{i:02d}" for c in "adgkpz" for i in range(20)]
    t.ingest(rows(keys[::2]))
    t.ingest(rows(keys[1::2], start=1000))
    binary = sd.Schema(row_keys=[("id", pa.binary())], values=[("v", pa.int64())])
    b = s.create_table("blobs", binary, split_points=[b"\x80"], properties=FRESH)
    b.ingest(pa.table({"id": [b"\x00\x01", b"\x7f", b"\x80\xff", b"\xff\xfe"],
                       "v": [1, 2, 3, 4]}, schema=binary.to_arrow()))
    return s


@pytest.fixture(scope="module")
def server(store: sd.Store, start_server: Any) -> Server:
    return start_server(store.uri)


@pytest.fixture(scope="module")
def remote(server: Server) -> Any:
    return server.connect()


def raw(server: Server) -> fl.FlightClient:
    return fl.FlightClient(server.uri)


def test_list_flights_gives_tables_and_schemas(server: Server, store: sd.Store,
                                               remote: Any) -> None:
    infos = {i.descriptor.path[0].decode(): i.schema for i in raw(server).list_flights()}
    assert infos == {n: store.table(n).schema.to_arrow() for n in store.tables()}
    assert remote.tables() == store.tables()


def test_flight_info_has_one_endpoint_per_leaf_touched(server: Server, store: sd.Store) -> None:
    table = store.table("events")
    client = raw(server)

    def info(**query: Any) -> fl.FlightInfo:
        doc = json.dumps({"table": "events", **query}).encode()
        return client.get_flight_info(fl.FlightDescriptor.for_command(doc))

    whole = info()
    assert len(whole.endpoints) == 3  # three leaves, all holding records
    assert whole.total_records == table.describe()["records"]
    assert whole.schema == table.schema.to_arrow()
    assert len(info(ranges=[{"range": {"start": "a", "end": "h"}}]).endpoints) == 2
    assert len(info(keys=["k01"]).endpoints) == 1
    assert len(info(keys=["a01", "z01"], columns=["key"]).endpoints) == 2
    tickets = [json.loads(e.ticket.ticket) for e in whole.endpoints]
    assert {t["query"]["version"] for t in tickets} == {table.version}
    assert len({t["leaf"] for t in tickets}) == 3
    # the leaves in key order, each its part of the answer
    parts = [client.do_get(e.ticket).read_all() for e in whole.endpoints]
    assert pa.concat_tables(parts).equals(table.query())
    # a ticket for the whole query (leaf null) streams everything
    whole_ticket = json.dumps({"query": {"table": "events", "ranges": [
        {"range": {"start": "d", "end": None}}]}, "leaf": None}).encode()
    got = client.do_get(fl.Ticket(whole_ticket)).read_all()
    assert got.equals(table.query(ranges=[sd.Range("d", None)]))


QUERIES: list[dict[str, Any]] = [
    {},
    {"keys": ["k03", "a00", "zz"]},
    {"ranges": [sd.Range("c", "m")]},
    {"ranges": sd.Range("d05", "p10", end_inclusive=True), "columns": ["value", "key"]},
    {"keys": ["g01"], "ranges": [sd.Range("y", None)]},
    {"columns": ["note"]},
    {"keys": [("k04",)]},
    {"iterators": [{"type": "filter", "field": "value", "op": ">", "value": 1005}]},
]


@pytest.mark.parametrize("query", QUERIES)
def test_query_and_scan_equal_the_local_api(remote: Any, store: sd.Store,
                                            query: dict[str, Any]) -> None:
    local = store.table("events")
    expected = local.query(**query)
    table = remote.table("events")
    assert table.query(**query).equals(expected)
    assert table.scan(**query).read_all().equals(expected)


def test_filters_as_where_text_and_as_expressions(remote: Any, store: sd.Store) -> None:
    local, table = store.table("events"), remote.table("events")
    expr = (pc.field("value") > 5) & (pc.field("key") < "p")
    expected = local.query(filter=expr)
    assert expected.num_rows > 0
    assert table.query(filter=expr).equals(expected)
    assert table.query(filter="value > 5 AND key < 'p'").equals(expected)
    assert table.query(filter="note IS NULL", columns=["key"]).equals(
        local.query(filter=pc.field("note").is_null(), columns=["key"]))


def test_binary_keys_travel_as_base64(remote: Any, store: sd.Store) -> None:
    local, table = store.table("blobs"), remote.table("blobs")
    for query in ({"keys": [b"\x80\xff", b"\x00\x01"]},
                  {"ranges": [sd.Range(b"\x7f", b"\xff")]}, {}):
        assert table.query(**query).equals(local.query(**query))


def test_ingest_versions_tags_and_time_travel(remote: Any, store: sd.Store) -> None:
    remote.create_table("versions", SCHEMA, split_points=["m"], properties=FRESH)
    local, table = store.table("versions"), remote.table("versions")
    first = table.ingest(rows(["b", "x"]))
    assert (first.rows, first.version) == (2, local.version)
    tag = table.tag("one")
    assert (tag.name, tag.version) == ("one", first.version)
    seen: list[int] = []
    second = table.ingest([rows(["c"], 10), rows(["y", "z"], 20).to_batches()[0]],
                          progress=seen.append)
    assert second.version == local.version == first.version + 1 and sum(seen) == 3
    assert table.query().equals(local.query())
    assert table.query(version="one").equals(local.query(version=first.version))
    assert table.query(version=first.version).num_rows == 2
    assert table.history() == local.history()
    assert table.history(limit=2) == local.history()[-2:]  # read from the head back
    assert table.history(limit=0) == []
    for bad in (-1, "2", True):
        with pytest.raises(BadRequestError, match="malformed history body for table "
                                                  "versions: 'limit' must be a whole number"):
            remote.action("history", {"table": "versions", "limit": bad})
    assert table.describe() == local.describe()
    assert table.describe(first.version)["records"] == 2
    restored = table.restore("one")
    assert local.version == restored and local.query().num_rows == 2
    assert table.compact(full=True)["jobs_failed"] == 0
    assert table.maintain()["jobs_failed"] == 0
    assert table.query().equals(local.query()) and table.query().num_rows == 2
    remote.drop_table("versions")
    assert "versions" not in store.tables()
    with pytest.raises(TableNotFoundError, match="versions"):
        remote.table("versions")


def test_health_and_stats(remote: Any) -> None:
    remote.table("events").query(keys=["a00"])
    assert remote.health()["status"] == "ok"
    stats = remote.stats()
    get = stats["methods"]["do_get"]
    assert get["calls"] >= 1 and get["rows"] >= 1
    assert 0 <= get["p50_ms"] <= get["p99_ms"]
    assert stats["max_concurrency"] == 32


def _local_error(fn: Any) -> BaseException:
    try:
        fn()
    except sd.SedimentError as e:
        return e
    raise AssertionError("no error")


def test_bad_input_gets_the_local_message_and_commits_nothing(
        server: Server, remote: Any, store: sd.Store) -> None:
    local, table = store.table("events"), remote.table("events")
    before = local.version
    client = raw(server)
    with pytest.raises(fl.FlightServerError, match="malformed query descriptor: not JSON"):
        client.get_flight_info(fl.FlightDescriptor.for_command(b"{not json"))
    with pytest.raises(fl.FlightServerError, match="malformed ticket"):
        client.do_get(fl.Ticket(b'{"query": 5}')).read_all()
    with pytest.raises(fl.FlightServerError, match="unknown field 'colums'"):
        client.get_flight_info(fl.FlightDescriptor.for_command(
            b'{"table": "events", "colums": ["key"]}'))
    with pytest.raises(TableNotFoundError, match="no table 'nope'"):
        remote.table("nope")
    for args in ({"columns": ["nope"]}, {"keys": "k01"}, {"keys": [5]},
                 {"ranges": [sd.Range("m", "c")]}, {"version": 999},
                 {"version": "no-such-tag"}):
        expected = _local_error(lambda a=args: local.query(**a))
        with pytest.raises(type(expected)) as got:
            table.query(**args)
        assert str(got.value) == str(expected)
        with pytest.raises(type(expected)) as got:
            table.scan(**args)  # at the call, as the local scan
        assert str(got.value) == str(expected)
    with pytest.raises(QueryError, match="position"):
        table.query(filter="value >")
    bad_schema = pa.table({"key": ["a"], "value": [1]})
    expected = _local_error(lambda: local.ingest(bad_schema))
    with pytest.raises(DataError) as got:
        table.ingest(bad_schema)
    assert str(got.value) == str(expected)
    null_key = pa.table({"key": ["a", None], "ts": [1, 2], "value": [1, 2], "note": ["x", "y"]})
    expected = _local_error(lambda: local.ingest(null_key))
    with pytest.raises(DataError) as got:
        table.ingest(null_key)
    assert str(got.value) == str(expected)
    assert local.version == before


def test_names_cannot_leave_the_store(remote: Any, store: sd.Store) -> None:
    root = Path(store.uri.removeprefix("file://"))
    before = sorted(p.name for p in root.parent.iterdir())
    with pytest.raises(InvalidTableNameError):
        remote.table("../x")
    with pytest.raises(InvalidTableNameError):
        remote.create_table("../../escape", SCHEMA)
    with pytest.raises(InvalidTagNameError):
        remote.table("events").tag("../x")
    with pytest.raises(InvalidTagNameError):
        remote.table("events").query(version="../../x")
    assert sorted(p.name for p in root.parent.iterdir()) == before


def test_arguments_that_cannot_travel_are_refused(remote: Any) -> None:
    table = remote.table("events")
    with pytest.raises(QueryError, match="RowFilter object cannot be sent"):
        table.query(iterators=[RowFilter("value", ">", 3)])
    with pytest.raises(QueryError, match="iterator cannot be sent"):
        table.query(keys=iter(["a00"]))
    with pytest.raises(QueryError, match="cannot be sent"):
        table.query(keys=[object()])
    with pytest.raises(QueryError, match="spill_dir"):
        table.ingest(rows(["a"]), spill_dir="/tmp")


def test_an_aborted_put_commits_nothing(server: Server, store: sd.Store, remote: Any) -> None:
    local = store.table("events")
    before = (local.version, local.query().num_rows)

    def broken() -> Any:
        yield rows(["q1", "q2", "q3", "q4"])
        raise RuntimeError("client fails mid-stream")

    with pytest.raises(RuntimeError, match="mid-stream"):
        remote.table("events").ingest(broken())
    deadline = time.monotonic() + 10
    # the server has read the batch and refused the stream without its end marker
    while "method=do_put table=events rows=4 " not in server.log.read_text():
        assert time.monotonic() < deadline, server.log.read_text()[-2000:]
        time.sleep(0.05)
    assert "rows=4 duration_ms" in server.log.read_text()
    line = [ln for ln in server.log.read_text().splitlines() if "rows=4 " in ln][-1]
    assert line.endswith("outcome=error:DataError")
    assert (local.version, local.query().num_rows) == before


def test_one_log_line_per_request(server: Server, remote: Any) -> None:
    remote.table("events").query(keys=["d03"])
    with pytest.raises(sd.SedimentError):  # its own refused request (not an earlier test's)
        remote.table("no_such_table").query(keys=["d03"])
    deadline = time.monotonic() + 5
    while True:
        lines = server.log.read_text().splitlines()
        hits = [ln for ln in lines if "method=do_get table=events rows=1 " in ln]
        if hits and any("outcome=error:TableNotFoundError" in ln for ln in lines) \
                or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert hits and "duration_ms=" in hits[-1] and hits[-1].endswith("outcome=ok")
    assert any("outcome=error:TableNotFoundError" in ln for ln in lines)


def test_two_servers_over_one_local_store(store: sd.Store, server: Server, remote: Any,
                                          start_server: Any) -> None:
    other = start_server(store.uri).connect()
    a, b = remote.table("events"), other.table("events")
    assert a.query().equals(b.query())
    result = b.ingest(rows(["two-servers"], 5000))
    deadline = time.monotonic() + 1.0 + 5  # state.cache.refresh_seconds, and slack
    while a.describe()["version"] != result.version or \
            a.query(keys=["two-servers"]).num_rows != 1:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert a.query().equals(b.query())
    assert a.query().equals(store.table("events").query())
