"""The request log of ``sediment serve`` cannot be forged: a client's values (table names,
action types) are escaped and bounded, every refused authentication is one line that never
holds the token, and an unexpected error is logged under a reference the client is given
instead of a traceback. A real server process with a token; raw Flight clients."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pyarrow.flight as fl
import pytest
from serve_helpers import SCHEMA, Server, rows

import sediment as sd
from sediment.serve.protocol import MESSAGE_BYTES

TOKEN = "log-test-token-7f3a"
STAMP = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} sediment\.serve [A-Z]+ ")
FORGED = "2026-01-01 00:00:00,000 sediment.serve INFO method=do_get table=events rows=9 " \
         "duration_ms=0.01 outcome=ok"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, start_server: Any) -> Server:
    store = sd.Store.open(str(tmp_path_factory.mktemp("store") / "s"), create=True)
    store.create_table("events", SCHEMA).ingest(rows(["a", "b", "c"]))
    token_file = tmp_path_factory.mktemp("token") / "token"
    token_file.write_text(TOKEN)
    return start_server(store.uri, "--token-file", str(token_file), token=TOKEN)


def options(token: str | None = TOKEN) -> fl.FlightCallOptions:
    headers = [] if token is None else [(b"authorization", f"Bearer {token}".encode())]
    return fl.FlightCallOptions(headers=headers)


def wait_for(log: Path, text: str, count: int = 1) -> list[str]:
    """The log's lines holding ``text``, once there are ``count`` of them."""
    deadline = time.monotonic() + 10
    while True:
        lines = [ln for ln in log.read_text(errors="strict").splitlines() if text in ln]
        if len(lines) >= count:
            return lines
        assert time.monotonic() < deadline, (text, log.read_text()[-3000:])
        time.sleep(0.05)


def describe(client: fl.FlightClient, table: str) -> fl.FlightError:
    body = json.dumps({"table": table}).encode()
    with pytest.raises(fl.FlightError) as caught:
        list(client.do_action(fl.Action("describe", body), options()))
    return caught.value


def test_a_table_name_cannot_forge_a_line_or_a_field(server: Server) -> None:
    client = fl.FlightClient(server.uri)
    names = {"newline": f"x\n{FORGED}", "return": f"y\r{FORGED}",
             "field": "z outcome=ok rows=100", "escape": "\x1b[2J\x1b[31mred\u2028\u0085",
             "surrogate": "s\udfff\ud800", "long": "L" * 100_000}
    for name in names.values():
        describe(client, name)
        ticket = json.dumps({"query": {"table": name}, "leaf": None}).encode()
        with pytest.raises(fl.FlightError):
            client.do_get(fl.Ticket(ticket), options()).read_all()
    lines = wait_for(server.log, "method=action:describe table=\"", len(names))
    lines += wait_for(server.log, "method=do_get table=\"", len(names))
    text = server.log.read_text(errors="strict")
    assert "Logging error" not in text
    for line in text.splitlines():  # every line is the server's own (or a traceback frame)
        assert STAMP.match(line) or line.startswith("  "), line
    assert not any(ln.startswith(FORGED[:20]) for ln in text.splitlines())
    for line in lines:
        assert line.endswith("outcome=error:InvalidTableNameError"), line
        assert len(line) < 600  # the long name is cut
    assert any('table="x\\n2026-01-01' in ln for ln in lines)
    assert any('table="z outcome=ok rows=100"' in ln for ln in lines)
    assert any('"\\u001b[2J\\u001b[31mred\\u2028\\u0085"' in ln for ln in lines)
    assert any('table="s\\udfff\\ud800"' in ln for ln in lines)
    assert any('...(99800 more characters)"' in ln for ln in lines)


def test_an_unknown_action_is_one_counter(server: Server) -> None:
    client = fl.FlightClient(server.uri)
    for kind in ("nope", "x\ny", "a" * 5000):
        with pytest.raises(fl.FlightError, match="unknown action"):
            list(client.do_action(fl.Action(kind, b"{}"), options()))
    wait_for(server.log, "method=action:unknown table=- rows=0", 3)
    methods = sd.connect(server.uri, token=TOKEN).stats()["methods"]
    assert [m for m in methods if m.startswith("action:") and m != "action:describe"
            and m not in ("action:stats", "action:health")] == ["action:unknown"]


def test_every_refused_authentication_is_one_line_without_the_token(server: Server) -> None:
    client = fl.FlightClient(server.uri)
    before = len(wait_for(server.log, "reason=authentication", 0))
    wrong = "wrong-token-value-a91"
    attempts = [options(None), options(wrong), options(TOKEN + "x"),
                fl.FlightCallOptions(headers=[(b"authorization", f"Basic {TOKEN}".encode())]),
                fl.FlightCallOptions(headers=[(b"authorization", b"Bearer ")])]
    for opts in attempts:
        with pytest.raises(fl.FlightUnauthenticatedError):
            list(client.do_action(fl.Action("health", b"{}"), opts))
    with pytest.raises(fl.FlightUnauthenticatedError):
        client.get_flight_info(fl.FlightDescriptor.for_command(b'{"table": "events"}'),
                               options(wrong))
    lines = wait_for(server.log, "reason=authentication", before + len(attempts) + 1)
    new = lines[before:]
    assert len(new) == len(attempts) + 1
    assert [ln.split("detail=")[1] for ln in new] == [
        '"no token"', '"wrong token"', '"wrong token"', '"not a bearer token"',
        '"not a bearer token"', '"wrong token"']
    assert "method=get_flight_info" in new[-1] and "method=do_action" in new[0]
    text = server.log.read_text()
    assert wrong not in text and TOKEN not in text


def test_an_unexpected_error_is_logged_with_a_reference_not_sent(server: Server) -> None:
    """A lone surrogate in a key is no key the server can encode (a raw error until the
    read routes refuse it themselves): whatever the error, the client gets a reference."""
    client = fl.FlightClient(server.uri)
    descriptor = fl.FlightDescriptor.for_command(
        b'{"table": "events", "keys": ["\\ud800"], "columns": ["key"]}')
    try:
        info = client.get_flight_info(descriptor, options())
        client.do_get(info.endpoints[0].ticket, options()).read_all()
    except fl.FlightError as e:
        message = str(e)
        assert "Traceback" not in message and 'File "' not in message
        found = re.search(r"internal error \(reference ([0-9a-f]{12})\)", message)
        if found is not None:  # else the server refused the key cleanly
            line = wait_for(server.log, f"internal error reference={found[1]}")[0]
            assert STAMP.match(line) and "message=" in line
            text = server.log.read_text()
            after = text[text.index(line) + len(line):].splitlines()[1:]
            assert after and after[0].startswith("  File ")  # the frames, indented


def test_error_messages_quote_a_bounded_prefix(server: Server) -> None:
    """Messages that quote the request stay within gRPC's metadata (else the client sees
    'resource exhausted' instead of the error), whatever characters they quote."""
    client = fl.FlightClient(server.uri)
    for big in ("x" * 200_000, "\x01" * 50_000, "\U0001F600" * 50_000, "\ud800" * 50_000):
        for doc in ({"table": big}, {"table": "events", "filter": {"bogus": big}},
                    {"table": "events", "filter": big + " > 1"},
                    {"table": "events", "keys": [{"base64": big}]}):
            with pytest.raises(fl.FlightError) as caught:
                client.get_flight_info(fl.FlightDescriptor.for_command(
                    json.dumps(doc).encode()), options())
            message = str(caught.value).split(". Detail:")[0]
            assert "resource exhausted" not in message.lower()
            assert len(message.encode()) <= MESSAGE_BYTES + 64, message[:200]


def test_the_internal_error_path(caplog: pytest.LogCaptureFixture) -> None:
    """In-process, for any exception the server did not expect: the client's error names a
    reference and nothing else; the log line has it, the message escaped, then the frames."""
    from sediment.serve.server import for_client
    from sediment.serve.stats import Request

    def fails() -> None:
        raise RuntimeError(f"boom\n{FORGED}")

    try:
        fails()
    except RuntimeError as e:
        with caplog.at_level("ERROR", logger="sediment.serve"):
            sent = for_client(e, Request("do_get", "t\nx"))
    assert isinstance(sent, fl.FlightError)
    found = re.fullmatch(r"internal error \(reference ([0-9a-f]{12})\): the server could not "
                         r"answer this request; its log has the details", str(sent))
    assert found is not None, str(sent)
    [record] = caplog.records
    first, *frames = record.getMessage().splitlines()
    assert first == (f'internal error reference={found[1]} method=do_get table="t\\nx" '
                     f'error=RuntimeError message="boom\\n{FORGED}"')
    assert frames and all(f.startswith("  ") for f in frames)
    assert any("in fails" in f for f in frames)
