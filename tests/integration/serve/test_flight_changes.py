"""The change feed over Flight against a real ``sediment serve`` process: a changes request (a
read request's ``changes`` field) answers exactly what ``Table.changes`` answers locally,
through the Python client and a plain Flight client; its end version is pinned in the ticket;
bad requests are one clear error and the server goes on serving."""

from __future__ import annotations

import json

import pyarrow.flight as fl
import pytest
from serve_helpers import SCHEMA, Server, rows

import sediment as sd
from sediment.errors import BadRequestError, QueryError


def test_flight_changes_equal_local(store: sd.Store, server: Server) -> None:
    t = store.create_table("feed", SCHEMA, split_points=["m"],
                           properties={"state.cache.refresh_seconds": 0})
    start = t.version
    t.ingest(rows(["a", "b", "x", "y"]))
    t.upsert(rows(["b", "c"], start=1))
    t.delete(keys=["x"])
    t.compact(full=True)
    with server.connect() as remote:
        rt = remote.table("feed")
        for a, b in [(start, None), (start + 1, start + 2)]:
            assert rt.changes(a, b).read_all().equals(t.changes(a, b).read_all())
        got = rt.changes(start, columns=["key", "_change_type"],
                         filter="_change_type = 'delete'").read_all()
        assert got.to_pylist() == [{"key": "x", "_change_type": "delete"}]
        with pytest.raises(QueryError, match="the start is after the end"):
            rt.changes(start + 2, start + 1)
        assert remote.health()  # still serving

    # a plain Flight client: the descriptor is the read request's JSON with "changes"
    client = fl.connect(server.uri)
    descriptor = fl.FlightDescriptor.for_command(json.dumps(
        {"table": "feed", "format": 1, "changes": {"from": start}}).encode())
    info = client.get_flight_info(descriptor)
    ticket = json.loads(info.endpoints[0].ticket.ticket)
    assert ticket["query"]["changes"] == {"from": start, "to": t.version}  # the end, pinned
    t.ingest(rows(["z"], start=9))  # after the plan: not in its answer
    answer = client.do_get(info.endpoints[0].ticket).read_all()
    assert answer.equals(t.changes(start, t.version - 1).read_all())
    assert info.schema.equals(answer.schema)
    bad = fl.FlightDescriptor.for_command(json.dumps(
        {"table": "feed", "format": 1, "keys": ["a"], "changes": {"from": start}}).encode())
    with pytest.raises(fl.FlightError, match="field 'keys' does not go with 'changes'"):
        client.get_flight_info(bad)
    client.close()


def test_a_changes_request_round_trips_and_refuses_bad_shapes() -> None:
    req = sd.ReadRequest(columns=["key"], changes={"from": 3, "to": "v2"})
    assert sd.ReadRequest.from_json(req.to_json()) == req
    assert req.to_json()["changes"] == {"from": 3, "to": "v2"}
    for bad in ({"to": 3}, {"from": 1, "until": 2}, [1, 2], {"from": True}):
        with pytest.raises(BadRequestError, match="changes|version"):
            sd.ReadRequest.from_json({"format": 1, "changes": bad})
