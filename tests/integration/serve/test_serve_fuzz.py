"""No request can crash ``sediment serve``: 1,000+ malformed and hostile requests (a fixed seed)
go to one real server process, through every Flight method: malformed JSON, wrong types, huge
strings, lone surrogates, control characters, unknown actions and tables, bad tickets,
malformed put streams, hostile ``where`` texts and filter payloads (the old
``{"expression": <base64>}`` form and JSON trees), bad tokens. The server answers ``health``
throughout, every error it sends is a short message without a traceback, its log has no
forged line, and it exits 0 on SIGTERM.

One payload still crashes the process until the wirefilter branch lands (Arrow recurses on a
15,000-term ``OR`` chain until it overflows its stack): it has its own server and test, an
expected failure.
"""

from __future__ import annotations

import base64
import json
import random
import re
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.flight as fl
import pytest
from serve_helpers import SCHEMA, Server, rows

import sediment as sd
from sediment.serve.protocol import END_OF_STREAM, MESSAGE_BYTES

SEED = 34
TOKEN = "fuzz-token-5c1d"
HEALTH_EVERY = 20
STAMP = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} sediment\.serve [A-Z]+ ")
ABSL = re.compile(r"^(WARNING: All log messages before absl|[EWI]\d{4} )")
"""Lines of gRPC's own logger (protobuf's refusal of invalid UTF-8 in a string field)."""

Request = Callable[[], Any]

STRINGS = ["", " ", "\x00", "a\x00b", "\n", "x\nFORGED-LINE outcome=ok", "\r\n", "\x1b[2J",
           "\u2028", "\ud800", "\udfff\ud800", "é", "\U0001F600" * 50, "../../etc/passwd",
           "/abs", "..", "events/../events", "a" * 129, "%s%s%n", "{}", "null",
           "' OR 1=1 --", "<script>", "\\", "events\x00", "EVENTS", "évents", "events "]
VALUES: list[Any] = [
    None, True, False, 0, -1, 2**63, 2**64, -(2**70), 1.5, 1e308, float("nan"),
    float("-inf"), [], {}, [[[]]], {"a": 1}, {"base64": "!!"}, {"base64": 5},
    {"datetime": "zz"}, {"date": 5}, {"range": 5}, {"range": {"start": {"x": 1}}},
    {"region": 5}, {"region": {"key": {"range": 5}}}, {"region": {"nokey": 1}},
    {"range": {"start": "a", "end": "b", "start_inclusive": "yes"}}, *STRINGS]


def huge(rng: random.Random) -> str:
    return rng.choice(["x" * 200_000, "\x01" * 50_000, "\U0001F600" * 20_000,
                       "\ud800" * 20_000, "é" * 60_000])


def value(rng: random.Random) -> Any:
    pick = rng.random()
    if pick < 0.08:
        return huge(rng)
    if pick < 0.15:
        return [value(rng) for _ in range(rng.randint(0, 4))]
    if pick < 0.2:
        return {rng.choice(["base64", "range", "region", "x"]): value(rng)}
    return rng.choice(VALUES)


def deep(depth: int, leaf: Any, key: str | None = None) -> Any:
    out = leaf
    for _ in range(depth):
        out = [out] if key is None else {key: out}
    return out


def raw_bodies(rng: random.Random) -> list[bytes]:
    return [rng.randbytes(rng.randint(0, 64)), b"", b"{", b"[]", b"null", b"\xff\xfe",
            b'{"table": "events"', b"[" * 100_000, b'{"a":' * 50_000,
            b'"\\ud800"', b'{"table": 1e999}', b'{"table": "events", "version": 1' +
            b"0" * 5000 + b"}", b'{"table": "events", "keys": [' + b"1," * 50_000 + b"1]}",
            b'{"table": "events", "columns": ["key", "key"]}', b"\x00" * 10,
            b'{"table": "events", "table": ["x"]}', "{\"table\": \"\ud800\"}".encode(
                "utf-8", "surrogatepass")]


WHERE_TOKENS = ["value", "key", "ts", "note", "nope", ">", "<", "=", "!=", ">=", "AND", "OR",
                "NOT", "(", ")", "'a'", "'", '"', "3", "-1", "1e999", "NULL", "IS", "IN",
                "BETWEEN", "LIKE", ",", "\x00", "\ud800", "é", "9" * 5000, "0x10", "--",
                "value.x", "[", "]"]


def hostile_where(rng: random.Random) -> str:
    structured = [
        "(" * rng.choice([10, 100, 900, 3000]) + "value > 1" + ")" * rng.choice([10, 900]),
        "NOT " * rng.choice([10, 900, 5000]) + "value > 1",
        " OR ".join(f"value = {i}" for i in range(rng.choice([10, 500, 1000]))),
        " AND ".join(f"value != {i}" for i in range(rng.choice([10, 1000]))),
        "value IN (" + ",".join(str(i) for i in range(rng.choice([10, 5000]))) + ")",
        "key = '" + "x" * 100_000 + "'", "key = 'abc", "value > " + "9" * 5000,
        "key = '\ud800'", "note IS NULL OR note IS NOT NULL", huge(rng)]
    if rng.random() < 0.3:
        return rng.choice(structured)
    return " ".join(rng.choice(WHERE_TOKENS) for _ in range(rng.randint(1, 30)))


def _serialised(expr: pc.Expression) -> bytes:
    return bytes(expr.__reduce__()[1][0])


def _crafted_expressions() -> list[bytes]:
    """Arrow IPC files shaped like a serialised expression whose metadata names a call
    without its arguments (printing what ``Expression._deserialize`` makes of them crashes a
    process; the server refuses them, today when it binds them)."""
    out = []
    for meta in ({b"call": b"greater", b"field_ref": b"value", b"end": b"greater"},
                 {b"call": b"greater", b"end": b"x"}):
        table = pa.table({"x": [1]}).replace_schema_metadata(meta)
        sink = pa.BufferOutputStream()
        with pa.ipc.new_file(sink, table.schema) as writer:
            writer.write_table(table)
        out.append(sink.getvalue().to_pybytes())
    return out


def hostile_filter(rng: random.Random) -> Any:
    """Filter payloads other than text: JSON trees (shapes a tree form may take, wrong and
    deep ones) and the old serialised-expression form with bytes Arrow refuses cleanly."""
    cmp = {"op": ">", "args": [{"field": "value"}, {"literal": 3}]}
    good = _serialised(pc.field("value") > 3)
    trees = [
        {"field": "value"}, {"field": 5}, {"literal": 3}, {"literal": {"x": 1}},
        {"op": "and", "args": []}, {"and": []}, {"or": [cmp, cmp]}, {"not": cmp},
        {"call": "greater", "args": [{"field": "value"}, {"literal": 3}]},
        {"call": "system", "args": ["rm -rf /"]}, {"op": "__import__", "args": ["os"]},
        {"is_in": {"field": "key", "values": ["a", "b"]}}, {"is_null": {"field": "note"}},
        {"op": "is_in", "args": [{"field": "key"}], "values": [value(rng)]},
        {"op": rng.choice(["==", "<", "is_null", "and", "or", "not"]),
         "args": [value(rng), value(rng)]},
        deep(rng.choice([10, 100, 900, 5000]), cmp, rng.choice(["not", "and"])),
        {"or": [cmp] * rng.choice([10, 5000])}, {"field": huge(rng)}, value(rng),
        {"expression": base64.b64encode(rng.randbytes(rng.randint(0, 200))).decode()},
        {"expression": "!!!"}, {"expression": 5}, {"expression": None},
        {"expression": base64.b64encode(good).decode()},
        {"expression": base64.b64encode(good[: len(good) // 2]).decode()},
        {"expression": base64.b64encode(good[:-8]).decode()},
        {"expression": "A" * 100_000},
        *({"expression": base64.b64encode(b).decode()} for b in _crafted_expressions())]
    return rng.choice(trees)


class Fuzzer:
    """Sends requests, checks every answer and the server's health."""

    def __init__(self, server: Server, seed: int) -> None:
        self.server = server
        self.rng = random.Random(seed)
        self.client = fl.FlightClient(server.uri)
        self.auth = fl.FlightCallOptions(
            headers=[(b"authorization", f"Bearer {TOKEN}".encode())])
        self.outcomes: Counter[str] = Counter()

    # ---- checking ---------------------------------------------------------------------
    def send(self, request: Request) -> None:
        try:
            request()
            self.outcomes["ok"] += 1
        except (fl.FlightError, OSError) as e:  # (the client's get_schema: an OSError)
            self.check_error(e)
            self.outcomes[type(e).__name__] += 1
        except (pa.ArrowException, ValueError, TypeError, OverflowError) as e:
            # refused by the client library before anything was sent, or by gRPC itself
            # (a request's own headers past its limit: they list the request's headers)
            text = str(e)
            assert "Traceback" not in text, text[:2000]
            assert "gRPC" not in text or ("exceeds soft limit" in text and
                                          "authorization:" in text), text[:500]
            self.outcomes["client-side"] += 1
        assert self.server.proc.poll() is None, "the server died"
        if sum(self.outcomes.values()) % HEALTH_EVERY == 0:
            self.health()

    def check_error(self, e: Exception) -> None:
        text = str(e)
        assert "Traceback" not in text and 'File "' not in text, text[:2000]
        assert "resource exhausted" not in text.lower(), text[:500]
        if isinstance(e, fl.FlightUnavailableError):  # only "busy" may say so
            assert "server busy" in text or "shutting down" in text, text[:500]
        message = text.split(". Detail:")[0].split(". gRPC client debug context")[0]
        assert len(message.encode()) <= MESSAGE_BYTES + 64, message[:300]

    def health(self) -> None:
        result = list(self.client.do_action(fl.Action("health", b"{}"), self.auth))
        assert json.loads(result[0].body.to_pybytes())["status"] == "ok"

    # ---- requests ---------------------------------------------------------------------
    def info(self, command: bytes) -> Request:
        def request() -> None:
            info = self.client.get_flight_info(fl.FlightDescriptor.for_command(command),
                                               self.auth)
            for endpoint in info.endpoints[:2]:
                self.client.do_get(endpoint.ticket, self.auth).read_all()
        return request

    def get(self, ticket: bytes) -> Request:
        return lambda: self.client.do_get(fl.Ticket(ticket), self.auth).read_all()

    def action(self, kind: str | bytes, body: bytes) -> Request:
        return lambda: list(self.client.do_action(fl.Action(kind, body), self.auth))

    def put(self, descriptor: fl.FlightDescriptor, schema: pa.Schema,
            messages: list[pa.Table | bytes]) -> Request:
        def request() -> None:
            writer, meta = self.client.do_put(descriptor, schema, self.auth)
            try:
                for m in messages:
                    if isinstance(m, bytes):
                        writer.write_metadata(pa.py_buffer(m))
                    else:
                        writer.write_table(m)
                writer.done_writing()
                meta.read()
            finally:
                writer.close()
        return request

    @staticmethod
    def dumps(doc: Any) -> bytes:
        return json.dumps(doc).encode()

    def descriptors(self, n: int) -> Iterator[Request]:
        rng = self.rng
        fields = ["table", "keys", "ranges", "columns", "version", "iterators", "filter",
                  "unknown"]
        for _ in range(n):
            pick = rng.random()
            if pick < 0.15:
                yield self.info(rng.choice(raw_bodies(rng)))
                continue
            doc: dict[str, Any] = {"table": "events"}
            for field in rng.sample(fields, rng.randint(1, 3)):
                doc[field] = value(rng)
            if pick < 0.3:
                doc["table"] = rng.choice([*STRINGS, huge(rng), "nope", "fuzz_new"])
            if pick > 0.85:
                doc["keys"] = deep(rng.choice([50, 500]), "a")
            yield self.info(self.dumps(doc))

    def tickets(self, n: int) -> Iterator[Request]:
        rng = self.rng
        for _ in range(n):
            pick = rng.random()
            if pick < 0.2:
                yield self.get(rng.choice(raw_bodies(rng)))
            elif pick < 0.4:
                yield self.get(self.dumps(value(rng)))
            elif pick < 0.6:
                yield self.get(self.dumps({"query": value(rng), "leaf": value(rng)}))
            else:
                query = {"table": "events", rng.choice(["version", "keys", "ranges",
                                                        "columns", "filter"]): value(rng)}
                yield self.get(self.dumps({"query": query, "leaf": rng.choice(
                    [None, "root", "nope", *STRINGS])}))

    def filters(self, n: int) -> Iterator[Request]:
        rng = self.rng
        for i in range(n):
            payload = hostile_where(rng) if i % 2 else hostile_filter(rng)
            doc = {"table": "events", "filter": payload}
            if rng.random() < 0.3:
                yield self.get(self.dumps({"query": doc, "leaf": None}))
            else:
                yield self.info(self.dumps(doc))

    def actions(self, n: int) -> Iterator[Request]:
        rng = self.rng
        kinds = ["create-table", "drop-table", "open-table", "describe", "history", "tag",
                 "restore", "compact", "health", "stats"]
        for _ in range(n):
            pick = rng.random()
            if pick < 0.15:
                kind: str | bytes = rng.choice([*STRINGS, "nope", huge(rng)[:5000]])
                yield self.action(kind, b"{}")
            elif pick < 0.18:
                yield self.action(rng.choice([b"\xff\xfe", b"health\xff"]), b"{}")
            elif pick < 0.35:
                yield self.action(rng.choice(kinds), rng.choice(raw_bodies(rng)))
            else:
                kind = rng.choice(kinds)
                name = rng.choice([*STRINGS, "events", "nope", f"fuzz_{rng.randrange(5)}",
                                   value(rng)])
                body: dict[str, Any] = {"table": name, "name": name}
                if kind in ("restore", "tag", "drop-table", "compact"):
                    body["table"] = body["name"] = rng.choice([*STRINGS, "nope", value(rng)])
                    if kind == "tag":  # a hostile tag name on the real table
                        body["table"] = "events"
                for field in rng.sample(["version", "schema", "split_points", "properties",
                                         "full"], rng.randint(0, 3)):
                    body[field] = value(rng)
                if kind == "create-table" and rng.random() < 0.5:
                    body["schema"] = rng.choice([
                        {"arrow": base64.b64encode(rng.randbytes(40)).decode(),
                         "row_keys": [1]},
                        {"row_keys": [{"name": value(rng), "type": value(rng)}]},
                        {"row_keys": [{"name": "k", "type": "string"}],
                         "values": [{"name": "k", "type": "string"}]},
                        {"row_keys": "x"}, {"row_keys": [{"name": "k", "type": "map<"}]}])
                yield self.action(kind, self.dumps(body))

    def puts(self, n: int) -> Iterator[Request]:
        rng = self.rng
        arrow = SCHEMA.to_arrow()
        good = rows(["p1", "p2"], 1)
        marked = fl.FlightDescriptor.for_command(b'{"table": "sink", "end_marker": true}')
        plain = fl.FlightDescriptor.for_command(b'{"table": "sink"}')
        wrong = [
            pa.schema([("key", pa.int64())]), pa.schema([]),
            pa.schema([*arrow, pa.field("extra", pa.string())]),
            pa.schema([pa.field("key", pa.string()), pa.field("key", pa.string())]),
            pa.schema([("key", pa.dictionary(pa.int8(), pa.string())), ("ts", pa.int64()),
                       ("value", pa.int64()), ("note", pa.string())]),
            pa.schema([("key", pa.struct([("a", pa.int64())])), ("ts", pa.int64()),
                       ("value", pa.int64()), ("note", pa.string())])]
        for _ in range(n):
            pick = rng.random()
            if pick < 0.2:
                command = rng.choice(raw_bodies(rng)[:8] + [self.dumps(value(rng)),
                                                            self.dumps({"table": value(rng)})])
                descriptor = fl.FlightDescriptor.for_command(command)
                yield self.put(descriptor, arrow, [good])
            elif pick < 0.3:
                path = rng.choice([[], ["sink", "x"], [rng.choice(STRINGS) or "e"],
                                   ["nope"]])
                yield self.put(fl.FlightDescriptor.for_path(*[p.encode("utf-8",
                                                                        "surrogatepass")
                                                              for p in path]), arrow, [good])
            elif pick < 0.45:
                schema = rng.choice(wrong)
                yield self.put(marked, schema, [schema.empty_table(), END_OF_STREAM])
            elif pick < 0.55:
                yield self.put(marked, arrow, [])  # nothing at all
            elif pick < 0.65:
                yield self.put(marked, arrow, [END_OF_STREAM, good, END_OF_STREAM])
            elif pick < 0.75:
                yield self.put(rng.choice([marked, plain]), arrow,
                               [rng.randbytes(rng.randint(0, 100)) for _ in range(3)])
            elif pick < 0.85:
                nulls = pa.table({"key": pa.array([None, "k"], pa.string()), "ts": [1, 2],
                                  "value": [1, 2], "note": ["a", "b"]})
                yield self.put(marked, nulls.schema, [nulls, END_OF_STREAM])
            else:
                keys = [rng.choice(["\x00", "x\nFORGED-LINE", "é", "k" * 1000, "a"])]
                yield self.put(marked, arrow, [rows(keys, 5)] * rng.randint(1, 20) +
                               [END_OF_STREAM])

    def auth_and_misc(self, n: int) -> Iterator[Request]:
        rng = self.rng
        for _ in range(n):
            header = rng.choice([None, b"Bearer wrong", b"Bearer " + TOKEN.encode() + b"x",
                                 b"Basic " + TOKEN.encode(), b"bearer", b"Bearer ",
                                 b"Bearer " + b"t" * 10_000, "Bearer é".encode(),
                                 b"Bearer \x7f"])
            options = fl.FlightCallOptions(headers=[] if header is None else
                                           [(b"authorization", header)])
            kind = rng.random()
            if kind < 0.5:
                yield lambda o=options: list(self.client.do_action(
                    fl.Action("health", b"{}"), o))
            elif kind < 0.7:
                yield lambda o=options: list(self.client.list_flights(b"", o))
            elif kind < 0.8:
                yield lambda: list(self.client.list_flights(rng.randbytes(50), self.auth))
            elif kind < 0.9:
                yield lambda: self.client.get_schema(
                    fl.FlightDescriptor.for_command(b'{"table": "events"}'), self.auth)
            else:
                def exchange() -> None:
                    writer, reader = self.client.do_exchange(
                        fl.FlightDescriptor.for_command(b"{}"), self.auth)
                    writer.close()
                yield exchange


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> sd.Store:
    s = sd.Store.open(str(tmp_path_factory.mktemp("store") / "s"), create=True)
    s.create_table("events", SCHEMA, split_points=["m"]).ingest(
        rows([f"{c}{i}" for c in "aksz" for i in range(5)]))
    s.create_table("sink", SCHEMA)
    return s


def _token_args(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    token_file = tmp_path_factory.mktemp("token") / "token"
    token_file.write_text(TOKEN)
    return ["--token-file", str(token_file)]


@pytest.mark.slow  # a thousand requests to a server process: the full lane
@pytest.mark.skipif(
    tuple(int(x) for x in re.findall(r"\d+", pa.__version__)[:3]) < (26, 0, 1),
    reason="the hostile bytes need pyarrow >= 26.0.1's Flight stack: before it, its gRPC "
           "client aborts the process on an illegal header value, and its protobuf drops the "
           "connection on invalid UTF-8 (logging an error of its own)")
def test_a_thousand_hostile_requests(store: sd.Store, start_server: Any,
                                     tmp_path_factory: pytest.TempPathFactory) -> None:
    server: Server = start_server(store.uri, *_token_args(tmp_path_factory), token=TOKEN)
    expected = store.table("events").query()
    fuzz = Fuzzer(server, SEED)
    requests = [*fuzz.descriptors(360), *fuzz.tickets(150), *fuzz.filters(160),
                *fuzz.actions(230), *fuzz.puts(90), *fuzz.auth_and_misc(60)]
    random.Random(SEED).shuffle(requests)
    for request in requests:
        fuzz.send(request)
    fuzz.health()
    sent = sum(fuzz.outcomes.values())
    assert sent >= 1_000 and fuzz.outcomes["client-side"] < sent // 10, fuzz.outcomes
    assert fuzz.outcomes["FlightUnauthenticatedError"] > 0, fuzz.outcomes
    # the data is the same, the request counters stay bounded, the log has no forged line
    with server.connect() as c:
        assert c.table("events").query().equals(expected)
        assert len(c.stats()["methods"]) < 30
    assert server.stop() == 0
    text = server.log.read_text(errors="strict")
    assert "Logging error" not in text
    for line in text.splitlines():
        assert STAMP.match(line) or ABSL.match(line) or line.startswith("  "), line[:300]
        assert len(line) < 2_000, line[:300]
    assert "FORGED-LINE" in text and not re.search(r"^\S*FORGED-LINE", text, re.MULTILINE)


@pytest.mark.slow  # a server process fed chains that crashed Arrow: the full lane
def test_where_chains_that_crash_arrow(store: sd.Store, start_server: Any,
                                       tmp_path_factory: pytest.TempPathFactory) -> None:
    """A ``--where`` of 15,000 ``OR`` terms (a tree Arrow recursed on until the process died):
    refused or answered, the server still up (``--where`` is bounded)."""
    server: Server = start_server(store.uri, *_token_args(tmp_path_factory), token=TOKEN)
    fuzz = Fuzzer(server, SEED)
    payloads = [" OR ".join(f"value = {i}" for i in range(15_000)),
                " OR ".join(f"key = 'k{i}'" for i in range(20_000))]
    for payload in payloads:
        fuzz.send(fuzz.info(Fuzzer.dumps({"table": "events", "filter": payload})))
        fuzz.health()
    assert server.stop() == 0
