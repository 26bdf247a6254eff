"""A lone surrogate in a remote read's keys or range ends (issue 34, item 4): the Python
client refuses it before sending anything, with the DataError the local API gives; a server
sent one anyway (JSON escapes it) answers with that DataError, never a raw error, and keeps
serving. The local and CLI routes: tests/query/test_read_refusals.py."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.flight as fl
import pytest
from serve_helpers import SCHEMA, Server, rows

import sediment as sd
from sediment.errors import DataError, QueryError
from sediment.serve.protocol import from_flight_error, to_flight_error

BAD = "k\ud800"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, start_server: Any) -> Server:
    s = sd.Store.open(str(tmp_path_factory.mktemp("store") / "s"), create=True)
    t = s.create_table("events", SCHEMA, split_points=["m"])
    t.ingest(rows(["a", "k", "z"]))
    return start_server(s.uri)


def log_lines(server: Server, method: str, at_least: int) -> list[str]:
    """The server's request-log lines of ``method``, once there are ``at_least`` of them
    (a line is written as its call ends: bounded wait)."""
    deadline = time.monotonic() + 10
    while True:
        lines = [ln for ln in server.log.read_text(errors="replace").splitlines()
                 if f"method={method} " in ln]
        if len(lines) >= at_least or time.monotonic() > deadline:
            return lines


CLIENT_READS: dict[str, Callable[[Any], Any]] = {
    "query keys": lambda t: t.query(keys=["a", BAD]),
    "query key tuple": lambda t: t.query(keys=[(BAD,)]),
    "query range": lambda t: t.query(ranges=[sd.Range("a", BAD)]),
    "query region": lambda t: t.query(ranges=[sd.Region({"key": sd.Range(BAD, None)})]),
    "scan keys": lambda t: t.scan(keys=[BAD]).read_all(),
    "flight_info ranges": lambda t: t.flight_info(ranges=sd.Range(BAD, None)),
}


def test_the_client_refuses_before_sending(server: Server) -> None:
    before = len(log_lines(server, "action:health", 0))
    reads = len(log_lines(server, "get_flight_info", 0)) + len(log_lines(server, "do_get", 0))
    with server.connect() as remote:
        table = remote.table("events")
        for name, read in CLIENT_READS.items():
            with pytest.raises(DataError) as e:
                read(table)
            message = str(e.value)
            assert "table events" in message and "lone surrogate" in message, (name, message)
            assert "\\ud800" in message, (name, message)
        remote.health()
    # nothing but the opening and the health call reached the server
    lines = log_lines(server, "action:health", before + 1)
    assert len(lines) == before + 1
    assert len(log_lines(server, "get_flight_info", 0)) + \
        len(log_lines(server, "do_get", 0)) == reads


def raw_query(**fields: Any) -> bytes:
    return json.dumps({"table": "events", **fields}).encode()  # ensure_ascii: \ud800 escaped


SENT_ANYWAY = {
    "keys": raw_query(keys=["a", BAD]),
    "key tuple": raw_query(keys=[[BAD]]),
    "range": raw_query(ranges=[{"range": {"start": BAD, "end": None}}]),
    "region": raw_query(ranges=[{"region": {"key": {"range": {"start": "a", "end": BAD}}}}]),
}


@pytest.mark.parametrize("query", list(SENT_ANYWAY))
def test_the_server_answers_a_lone_surrogate_with_a_data_error(server: Server,
                                                               query: str) -> None:
    client = fl.FlightClient(server.uri)
    body = SENT_ANYWAY[query]
    with pytest.raises(fl.FlightServerError) as e:
        client.get_flight_info(fl.FlightDescriptor.for_command(body))
    err = from_flight_error(e.value)
    assert isinstance(err, DataError), err
    assert "table events" in str(err) and "lone surrogate" in str(err)
    ticket = json.dumps({"query": json.loads(body), "leaf": None}).encode()
    with pytest.raises(fl.FlightServerError) as e:
        client.do_get(fl.Ticket(ticket)).read_all()
    assert isinstance(from_flight_error(e.value), DataError)
    with server.connect() as remote:  # and it keeps serving
        assert remote.health()["status"] == "ok"
        assert remote.table("events").query(keys=["k"]).num_rows == 1


def test_an_error_message_quoting_a_lone_surrogate_still_travels() -> None:
    """Whatever quotes a client's text raw (a --where literal, say) still reaches the client
    as a Flight error: the message goes out with the surrogate escaped, the class intact."""
    flight = to_flight_error(QueryError(f"literal '{BAD}' does not fit field 'key'"))
    err = from_flight_error(flight)
    assert type(err) is QueryError
    assert str(err) == "literal 'k\\ud800' does not fit field 'key'"
    str(flight).encode("utf-8")


def test_ordinary_keys_travel_as_before(server: Server) -> None:
    with server.connect() as remote:
        got = remote.table("events").query(keys=["a", "z"], columns=["key"])
    assert got == pa.table({"key": ["a", "z"]}, schema=pa.schema([SCHEMA.field("key")]))
