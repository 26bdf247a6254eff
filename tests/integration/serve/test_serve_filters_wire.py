"""Filters on the wire against a real ``sediment serve`` process (issue 34, item 3).

Before: a malformed ``{"filter": {"expression": <base64>}}`` reached Arrow's expression
deserialiser and aborted the server (SIGABRT); 20,000 ORs in ``--where`` segfaulted it; deep
text sent back the server's Python traceback. Now the server deserialises no expression
bytes: a filter is ``--where`` text or the JSON tree of ``sediment.query.wire``, and every
hostile one is a clean Sediment error while the server keeps answering ``health``.
"""

from __future__ import annotations

import base64
import json
import os
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.flight as fl
import pytest
from serve_helpers import SCHEMA, Server, rows

import sediment as sd
from sediment.errors import BadRequestError, FilterError, SedimentError, WhereError
from sediment.serve.protocol import from_flight_error

KEYS = [f"k{i:05d}" for i in range(3_000)]


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> sd.Store:
    s = sd.Store.open(str(tmp_path_factory.mktemp("store") / "s"), create=True)
    s.create_table("events", SCHEMA, split_points=["k01000", "k02000"]).ingest(rows(KEYS))
    return s


@pytest.fixture(scope="module")
def server(store: sd.Store, start_server: Any) -> Server:
    return start_server(store.uri)


def _descriptor(filter: Any) -> fl.FlightDescriptor:  # noqa: A002 (as the field is named)
    return fl.FlightDescriptor.for_command(
        json.dumps({"table": "events", "filter": filter}).encode())


def _refused(server: Server, call: Any) -> SedimentError:
    """The Sediment error a raw Flight call gets; the server still answers afterwards."""
    client = fl.FlightClient(server.uri)
    try:
        with pytest.raises(fl.FlightError) as raised:
            call(client)
    finally:
        client.close()
    assert "Traceback" not in str(raised.value)
    assert server.proc.poll() is None, "the server died"
    with server.connect() as remote:
        assert remote.health()["status"] == "ok"
    return from_flight_error(raised.value)


def _serialised(expr: pc.Expression) -> str:
    return base64.b64encode(memoryview(expr.__reduce__()[1][0])).decode()


def _not_nested(depth: int) -> dict[str, Any]:
    doc: dict[str, Any] = {"call": "less", "args": [{"field": "value"}, {"literal": 5}]}
    for _ in range(depth):
        doc = {"call": "not", "args": [doc]}
    return doc


_LESS = {"call": "less", "args": [{"field": "value"}, {"literal": 5}]}

HOSTILE: list[tuple[str, Any, type[SedimentError], str]] = [
    ("random bytes as an expression", {"expression": base64.b64encode(os.urandom(64)).decode()},
     FilterError, "serialised Arrow expressions are not accepted"),
    ("a truncated Arrow expression",
     {"expression": _serialised(pc.field("value") > 3)[:40]}, FilterError, "not accepted"),
    ("a valid Arrow expression", {"expression": _serialised(pc.field("value") > 3)},
     FilterError, "not accepted"),
    ("not base64", {"expression": "***"}, FilterError, "not accepted"),
    ("a number", 5, FilterError, "filter must be --where text or a JSON filter tree"),
    ("a list", [_LESS], FilterError, "filter must be"),
    ("an unknown function", {"call": "system", "args": [{"literal": "rm -rf /"}]},
     FilterError, "unknown function 'system'"),
    ("a lone surrogate", {"call": "equal", "args": [{"field": "key"}, {"literal": "\ud800"}]},
     FilterError, "filter at args[1]: literal"),
    ("a bogus type", {"call": "equal", "args": [{"field": "value"},
                                                 {"literal": 1, "type": "pickle"}]},
     FilterError, "unknown or unsupported type 'pickle'"),
    ("an unknown column", {"call": "is_null", "args": [{"field": "nope"}]},
     sd.errors.QueryError, "names no column 'nope'"),
    ("a number as the filter", {"literal": 3}, sd.errors.QueryError, "cannot be evaluated"),
    ("120 nested NOTs", _not_nested(120), FilterError, "nests deeper than 100 levels"),
    ("300 nested NOTs", _not_nested(300), BadRequestError, "deep (at most 256)"),
    ("20,000 ORs as a tree", {"call": "or", "args": [_LESS] * 20_000}, FilterError,
     "more than 4096 parts"),
    ("20,000 ORs of < as text", " OR ".join(f"value < {i}" for i in range(20_000)),
     WhereError, "parts (at most 4096)"),
    ("3,000 parentheses", "(" * 3_000 + "value = 1" + ")" * 3_000, WhereError,
     "nests more than 100 levels"),
    ("5,000 NOTs", "NOT " * 5_000 + "value = 1", WhereError, "nests more than 100 levels"),
]


@pytest.mark.parametrize(("what", "filter", "error", "message"), HOSTILE,
                         ids=[h[0] for h in HOSTILE])
def test_a_hostile_filter_gets_a_clean_error_and_the_server_keeps_answering(
        server: Server, what: str, filter: Any, error: type[SedimentError],  # noqa: A002
        message: str) -> None:
    got = _refused(server, lambda c: c.get_flight_info(_descriptor(filter)))
    assert isinstance(got, error), (what, got)
    assert message in str(got)
    ticket = fl.Ticket(json.dumps({"query": {"table": "events", "filter": filter},
                                   "leaf": None}).encode())
    got = _refused(server, lambda c: c.do_get(ticket).read_all())
    assert isinstance(got, error) and message in str(got)


def test_json_nested_past_the_recursion_limit_is_a_bad_request(server: Server) -> None:
    body = b'{"table": "events", "filter": ' + b'{"call": "not", "args": [' * 50_000
    got = _refused(server, lambda c: c.get_flight_info(fl.FlightDescriptor.for_command(body)))
    assert isinstance(got, BadRequestError) and "nested too deeply" in str(got)
    got = _refused(server, lambda c: c.do_get(fl.Ticket(b"[" * 100_000)).read_all())
    assert isinstance(got, BadRequestError)
    keys = b'{"table": "events", "keys": ' + b"[" * 900 + b"]" * 900 + b"}"  # decodes, but
    got = _refused(server, lambda c: c.get_flight_info(  # would recurse past Python's limit
        fl.FlightDescriptor.for_command(keys)))
    assert isinstance(got, BadRequestError) and "JSON nested 901 deep (at most 256)" in str(got)


def test_filters_answer_as_the_local_api(server: Server, store: sd.Store) -> None:
    local = store.table("events")
    with server.connect() as remote:
        table = remote.table("events")
        expr = ((pc.field("value") > 5) & (pc.field("key") < "k02500")) | \
            pc.field("note").is_null()
        assert table.query(filter=expr).equals(local.query(filter=expr))
        chain = " OR ".join(f"key = '{k}'" for k in KEYS[::3] + ["zz", "k99999"])  # 1,002
        assert table.query(filter=chain).equals(local.query(
            filter=pc.field("key").isin(KEYS[::3])))
        many = " OR ".join(f"key = 'k{i:05d}'" for i in range(0, 40_000, 2))  # 20,000
        assert table.query(filter=many).equals(local.query(
            filter=pc.field("key").isin(KEYS[::2])))
        tree = {"call": "and", "args": [
            {"call": "is_in", "args": [{"field": "key"}], "values": KEYS[:50]},
            {"call": "greater_equal", "args": [{"field": "value"}, {"literal": 10}]}]}
        doc = json.dumps({"table": "events", "filter": tree}).encode()
        info = remote.client.get_flight_info(fl.FlightDescriptor.for_command(doc),
                                             remote.options)
        got = pa.concat_tables(remote.client.do_get(e.ticket, remote.options).read_all()
                               for e in info.endpoints)
        assert got.equals(local.query(keys=KEYS[10:50]))


def test_what_the_form_cannot_say_is_refused_before_sending(server: Server) -> None:
    with server.connect() as remote:
        table = remote.table("events")
        before = remote.stats()["methods"]
        for expr, name in [(pc.field("value") + 1 > 3, "'add_checked'"),
                           (pc.utf8_lower(pc.field("key")) == "a", "'utf8_lower'")]:
            with pytest.raises(FilterError, match=name):
                table.query(filter=expr)
            with pytest.raises(FilterError, match=name):
                table.scan(filter=expr)
        after = remote.stats()["methods"]
    for method in ("get_flight_info", "do_get"):  # nothing reached the server
        assert after.get(method, {}).get("calls") == before.get(method, {}).get("calls")


def test_the_server_logged_no_internal_error(server: Server) -> None:
    with server.connect() as remote:
        assert remote.health()["status"] == "ok"
    log = server.log.read_text(errors="replace")
    assert "Traceback" not in log and "internal" not in log.lower()
