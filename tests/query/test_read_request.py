"""One read request, one scan object: ``sd.ReadRequest`` (a frozen value with a JSON form
carrying a format number) and ``sd.Scan`` (``Table.prepare``'s answer, owning every output).

A request survives its JSON (hypothesis over keys, ranges, regions, columns, versions and
filters); an unknown or newer format is refused naming the field; every output of a scan
equals the Table verb of the same name and an independent pandas reference; PyCapsule
consumers (pyarrow, Polars, DuckDB) read a scan as it is; the Flight service and
``sediment query`` take the request's JSON, and the Flight JSON documented before the request
had a format is still read.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.flight as fl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import sediment as sd
from sediment.cli.app import app
from sediment.errors import BadRequestError, FilterError, QueryError
from sediment.query.prepare import PreparedQuery
from sediment.query.request import REQUEST_FORMAT
from sediment.serve.protocol import from_flight_error
from sediment.serve.server import SedimentFlightServer

SCHEMA = sd.Schema(row_keys=[("key", pa.string())], sort_keys=[("ts", pa.int64())],
                   values=[("v", pa.int64()), ("s", pa.string())])
KEYS = [f"k{i:02d}" for i in range(30)]


def _data(seed: int) -> pd.DataFrame:
    n = 90
    return pd.DataFrame({
        "key": [KEYS[(i * 7 + seed) % len(KEYS)] for i in range(n)],
        "ts": [seed * 1000 + i for i in range(n)],
        "v": [None if i % 11 == 0 else (i * (seed + 3)) % 50 for i in range(n)],
        "s": [f"s{(i + seed) % 4}" for i in range(n)]}).astype({"v": "Int64"})


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> sd.Store:
    return sd.Store.open(str(tmp_path_factory.mktemp("rr") / "store"), create=True)


@pytest.fixture(scope="module")
def table(store: sd.Store) -> tuple[sd.Table, pd.DataFrame]:
    """Three leaves, three ingests (several files per leaf: the merge is exercised), no
    iterators: the answer is every record, sorted by (key, ts). Tag ``one`` after the first."""
    t = store.create_table("events", SCHEMA, split_points=["k10", "k20"])
    frames = []
    for seed in range(3):
        frame = _data(seed)
        t.ingest(pa.Table.from_pandas(frame, schema=SCHEMA.to_arrow(), preserve_index=False))
        frames.append(frame)
        if seed == 0:
            t.tag("one")
    return t, pd.concat(frames, ignore_index=True)


def _reference(rows: pd.DataFrame, request: sd.ReadRequest) -> pd.DataFrame:
    """The answer by pandas alone: rows selected by keys or ranges (string keys, one field),
    then the filter's conditions (written for the cases below), sorted, columns chosen."""
    keep = pd.Series(request.keys is None and request.ranges is None, index=rows.index)
    for k in request.keys or ():
        keep |= rows.key == (k[0] if isinstance(k, tuple) else k)
    for r in request.ranges or ():
        assert isinstance(r, sd.Range)
        lo = r.start[0] if isinstance(r.start, tuple) else r.start
        hi = r.end[0] if isinstance(r.end, tuple) else r.end
        inside = pd.Series(True, index=rows.index)
        if lo is not None:
            inside &= rows.key >= lo if r.start_inclusive else rows.key > lo
        if hi is not None:
            inside &= rows.key <= hi if r.end_inclusive else rows.key < hi
        keep |= inside
    out = rows[keep]
    flt = request.filter
    if flt is not None:
        out = out[_REFERENCE_FILTERS[json.dumps(sd.ReadRequest(filter=flt).to_json()["filter"],
                                                sort_keys=True)](out)]
    cols = list(request.columns) if request.columns is not None else SCHEMA.field_names
    return out.sort_values(["key", "ts"]).reset_index(drop=True)[cols]


FILTERS: list[tuple[Any, Any]] = [
    (pc.field("v") > 30, lambda d: d.v.fillna(-1) > 30),
    ("s = 's1' AND key >= 'k12'", lambda d: (d.s == "s1") & (d.key >= "k12")),
    ({"call": "is_null", "args": [{"field": "v"}]}, lambda d: d.v.isna()),
    (pc.field("key").isin(["k03", "k25"]) | (pc.field("v") == 7),
     lambda d: d.key.isin(["k03", "k25"]) | (d.v.fillna(-1) == 7)),
]
_REFERENCE_FILTERS = {json.dumps(sd.ReadRequest(filter=f).to_json()["filter"], sort_keys=True): r
                      for f, r in FILTERS}

REQUESTS = [
    sd.ReadRequest(),
    sd.ReadRequest(keys=["k03", "k17", "k29"]),
    sd.ReadRequest(ranges=[sd.Range("k05", "k22")], columns=["v", "key"]),
    sd.ReadRequest(ranges=sd.Range("k15", None), filter=FILTERS[0][0]),
    sd.ReadRequest(filter=FILTERS[1][0], columns=["ts", "s"]),
    sd.ReadRequest(filter=FILTERS[2][0]),
    sd.ReadRequest(keys=["k01"], ranges=[sd.Range("k20", "k24", end_inclusive=True)],
                   filter=FILTERS[3][0]),
]


# ---- the value and its JSON ---------------------------------------------------------------
_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=6)
_value = st.one_of(_text, st.integers(-2**63, 2**63 - 1), st.binary(max_size=5))
_key = st.one_of(_value, st.tuples(_value, _value))
_end = st.one_of(st.none(), st.tuples(_value), st.tuples(_value, _value))


@st.composite
def _ranges(draw: Any) -> Any:
    if draw(st.booleans()):
        return sd.Range(draw(_end), draw(_end), start_inclusive=draw(st.booleans()),
                        end_inclusive=draw(st.booleans()))
    fields = draw(st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=3,
                           unique=True))
    return sd.Region({f: sd.Range(draw(st.one_of(st.none(), _value)),
                                  draw(st.one_of(st.none(), _value))) for f in fields})


_leaf = st.one_of(
    st.builds(lambda n, x: pc.field(n) > x, st.sampled_from(["v", "s"]), st.integers(-9, 9)),
    st.builds(lambda n, x: pc.field(n) == x, st.sampled_from(["key", "s"]), _text),
    st.builds(lambda n: pc.field(n).is_null(), st.sampled_from(["v", "s"])),
    st.builds(lambda xs: pc.field("key").isin(xs), st.lists(_text, min_size=1, max_size=4)),
)
_filter = st.recursive(_leaf, lambda inner: st.one_of(
    st.builds(lambda a, b: a & b, inner, inner), st.builds(lambda a, b: a | b, inner, inner),
    st.builds(lambda a: ~a, inner)), max_leaves=6)

_requests = st.builds(
    sd.ReadRequest,
    keys=st.one_of(st.none(), st.lists(_key, max_size=4)),
    ranges=st.one_of(st.none(), st.lists(_ranges(), max_size=3)),
    columns=st.one_of(st.none(), st.lists(st.sampled_from(SCHEMA.field_names), max_size=4,
                                          unique=True)),
    version=st.one_of(st.none(), st.integers(0, 10**6), st.sampled_from(["v1", "release"])),
    filter=st.one_of(st.none(), _filter, st.sampled_from(["v > 3", "s IS NULL"])),
    iterators=st.one_of(st.none(), st.just([{"type": "keep_latest", "by": "ts"}])),
    raw=st.booleans())


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_requests)
def test_a_request_survives_its_json(request: sd.ReadRequest) -> None:
    doc = request.to_json()
    assert next(iter(doc)) == "format" and doc["format"] == REQUEST_FORMAT
    text = json.dumps(doc)  # plain JSON data: nothing but JSON types inside
    back = sd.ReadRequest.from_json(text)
    assert back == request
    assert back.to_json() == doc
    assert sd.ReadRequest.from_json(json.loads(text)) == back


def test_a_request_is_a_frozen_value() -> None:
    r = sd.ReadRequest(keys=["a", "b"], ranges=sd.Range("c", "d"), columns=["key"])
    assert r.keys == ("a", "b") and r.ranges == (sd.Range("c", "d"),)
    assert r.columns == ("key",)
    with pytest.raises(AttributeError):
        r.keys = ("z",)  # type: ignore[misc]
    assert r == sd.ReadRequest(keys=("a", "b"), ranges=[sd.Range("c", "d")], columns=("key",))
    assert r != r.replace(version=3) and hash(r) == hash(r.replace(keys=["a", "b"]))
    assert sd.ReadRequest(filter=pc.field("v") > 1) == sd.ReadRequest(filter=pc.field("v") > 1)
    assert sd.ReadRequest(filter=pc.field("v") > 1) != sd.ReadRequest(filter=pc.field("v") > 2)


@pytest.mark.parametrize(("doc", "message"), [
    ({"keys": ["a"]}, "field 'format' is missing"),
    ({"format": REQUEST_FORMAT + 1}, f"field 'format' is {REQUEST_FORMAT + 1}, newer than"),
    ({"format": 99, "keys": "whatever", "novel": 1}, "field 'format' is 99"),
    ({"format": "1"}, "field 'format' must be a format number"),
    ({"format": True}, "field 'format' must be a format number"),
    ({"format": 0}, "field 'format' must be a format number"),
    ({"format": 1, "colums": ["key"]}, "unknown field 'colums'"),
    ({"format": 1, "keys": {"a": 1}}, "field 'keys' must be a list"),
    ({"format": 1, "ranges": 5}, "field 'ranges' must be a list"),
    ({"format": 1, "columns": "key"}, "field 'columns' must be a list"),
    ({"format": 1, "version": 1.5}, "field 'version' must be a version number"),
    ({"format": 1, "iterators": ["keep_latest"]}, "field 'iterators' must be a list"),
    ({"format": 1, "raw": "yes"}, "field 'raw' must be true or false"),
    ({"format": 1, "keys": [{"base64": "%%"}]}, "keys: malformed value"),
    ([1, 2], "expected a JSON object"),
    ("{not json", "not JSON"),
])
def test_a_request_it_cannot_read_is_refused_naming_the_field(doc: Any, message: str) -> None:
    with pytest.raises(BadRequestError, match=message):
        sd.ReadRequest.from_json(doc if isinstance(doc, str) else json.dumps(doc))


def test_a_filter_outside_the_wire_form_is_refused_either_way() -> None:
    with pytest.raises(FilterError, match="serialised Arrow expressions"):
        sd.ReadRequest.from_json({"format": 1, "filter": {"expression": "AAAA"}})
    with pytest.raises(FilterError, match="unknown function 'add'"):
        sd.ReadRequest.from_json({"format": 1, "filter": {"call": "add", "args": []}})
    local = sd.ReadRequest(filter=pc.field("v") + 1 > 3)  # fine locally...
    with pytest.raises(FilterError, match="add_checked"):  # ...but it has no JSON form
        local.to_json()
    with pytest.raises(BadRequestError, match="RowFilter object cannot be sent"):
        from sediment.iterators.base import RowFilter

        sd.ReadRequest(iterators=[RowFilter("v", ">", 3)]).to_json()


# ---- the scan and its outputs -------------------------------------------------------------
@pytest.mark.parametrize("request_", REQUESTS, ids=range(len(REQUESTS)))
def test_every_output_of_a_scan_equals_the_table_verb_and_pandas(
        table: tuple[sd.Table, pd.DataFrame], request_: sd.ReadRequest) -> None:
    t, rows = table
    want = _reference(rows, request_)
    args = {k: v for k, v in (("keys", request_.keys), ("ranges", request_.ranges),
                              ("columns", request_.columns), ("filter", request_.filter))
            if v is not None}
    scan = t.prepare(request_)
    assert isinstance(scan, sd.Scan) and PreparedQuery is sd.Scan
    assert scan.request == request_ and scan.version == t.version
    answer = scan.to_arrow()
    assert answer.to_pylist() == want.astype(object).where(want.notna(), None) \
        .to_dict("records")
    assert answer.equals(t.query(**args))
    assert t.prepare(**args).to_arrow().equals(answer)  # the arguments make the same request
    assert t.to_arrow(**args).equals(answer)
    assert t.to_batches(**args).read_all().equals(answer)
    assert scan.to_batches().read_all().equals(answer)
    assert t.scan(**args).read_all().equals(answer)
    assert isinstance(t.scan(**args), pa.RecordBatchReader)
    pd.testing.assert_frame_equal(scan.to_pandas(), t.to_pandas(**args))
    pd.testing.assert_frame_equal(scan.to_pandas(), answer.to_pandas())
    assert scan.to_polars().equals(t.to_polars(False, **args))
    assert scan.to_polars(lazy=True).collect().equals(pl.from_arrow(answer))
    assert scan.plan == t.plan(request_.keys, request_.ranges, filter=request_.filter)
    assert scan.plan_files() == t.plan_files(request_.keys, request_.ranges,
                                             filter=request_.filter)
    con = duckdb.connect()
    scan.to_duckdb(con, "view")
    order = [(c, "ascending") for c in answer.column_names]
    got = pa.table(con.sql("SELECT * FROM view").arrow()).sort_by(order)  # a reader or a table
    assert got.to_pylist() == answer.sort_by(order).to_pylist()  # (DuckDB drops NOT NULL)


def test_pycapsule_consumers_read_a_scan_without_glue(
        table: tuple[sd.Table, pd.DataFrame]) -> None:
    t, _ = table
    scan = t.prepare(ranges=[sd.Range("k04", "k19")], columns=["key", "ts", "v"],
                     filter="v >= 10")
    want = scan.to_arrow()
    assert want.num_rows > 10
    assert pa.table(scan).equals(want)  # each read is a fresh stream
    assert pa.table(scan).equals(want)
    assert pa.RecordBatchReader.from_stream(scan).read_all().equals(want)
    assert pl.DataFrame(scan).equals(pl.from_arrow(want))
    con = duckdb.connect()
    assert con.sql("SELECT count(*), sum(v) FROM scan").fetchall() == \
        [(want.num_rows, pc.sum(want["v"]).as_py())]
    # a requested schema the stream can be cast to
    wider = pa.schema([("key", pa.large_string()), ("ts", pa.int64()), ("v", pa.int64())])
    assert _capsule_table(scan.__arrow_c_stream__(wider.__arrow_c_schema__())) \
        .equals(want.cast(wider))


def _capsule_table(capsule: Any) -> pa.Table:
    class Holder:
        def __arrow_c_stream__(self, requested_schema: object | None = None) -> object:
            return capsule

    return pa.table(Holder())


def test_a_scan_reads_its_pinned_version_and_its_request_everywhere(
        store: sd.Store) -> None:
    """Lazy outputs (a DuckDB view, a lazy Polars frame) read the scan's version and apply its
    request after the table moves on; the old version through a tag too."""
    t = store.create_table("moving", SCHEMA, split_points=["k10"])
    t.ingest(pa.Table.from_pandas(_data(0), schema=SCHEMA.to_arrow(), preserve_index=False))
    scan = t.prepare(sd.ReadRequest(ranges=[sd.Range("k05", "k15")], filter="v > 5",
                                    columns=["key", "v"]))
    want = scan.to_arrow()
    con = duckdb.connect()
    scan.to_duckdb(con, "frozen")
    lazy = scan.to_polars(lazy=True)
    t.ingest(pa.Table.from_pandas(_data(1), schema=SCHEMA.to_arrow(), preserve_index=False))
    assert t.prepare(scan.request).to_arrow().num_rows > want.num_rows
    assert con.sql("SELECT count(*) FROM frozen").fetchall() == [(want.num_rows,)]
    assert con.sql("SELECT count(*) FROM frozen WHERE key >= 'k10'").fetchall() == \
        [(pc.sum(pc.greater_equal(want["key"], "k10")).as_py(),)]
    assert lazy.collect().equals(pl.from_arrow(want))
    assert lazy.filter(pl.col("key") == "k07").collect().equals(
        pl.from_arrow(want).filter(pl.col("key") == "k07"))
    assert t.prepare(scan.pinned()).to_arrow().equals(want)


def test_prepare_takes_a_request_or_arguments_not_both(
        table: tuple[sd.Table, pd.DataFrame]) -> None:
    t, _ = table
    with pytest.raises(QueryError, match="not both"):
        t.prepare(sd.ReadRequest(keys=["k01"]), columns=["key"])
    # a request's errors are the arguments' errors
    for request in (sd.ReadRequest(columns=["nope"]), sd.ReadRequest(keys="k01"),
                    sd.ReadRequest(version=999), sd.ReadRequest(filter="v >")):
        with pytest.raises(QueryError) as by_request:
            t.prepare(request)
        with pytest.raises(QueryError) as by_arguments:
            t.query(request.keys, request.ranges, columns=request.columns,
                    version=request.version, filter=request.filter)
        assert str(by_request.value) == str(by_arguments.value)


def test_a_raw_request_skips_the_tables_iterators(store: sd.Store) -> None:
    t = store.create_table("latest", SCHEMA, properties={
        "query.iterators": json.dumps([{"type": "keep_latest", "by": "ts"}])})
    data = pa.Table.from_pandas(_data(0), schema=SCHEMA.to_arrow(), preserve_index=False)
    t.ingest(data)
    assert t.query().num_rows == len(set(data["key"].to_pylist())) < data.num_rows
    raw = t.prepare(sd.ReadRequest(raw=True)).to_arrow()
    assert raw.num_rows == data.num_rows
    assert raw.equals(data.sort_by([("key", "ascending"), ("ts", "ascending")]))


def test_a_request_reads_an_old_version_by_number_or_tag(
        table: tuple[sd.Table, pd.DataFrame]) -> None:
    t, rows = table
    first = _data(0)
    by_tag = t.prepare(sd.ReadRequest.from_json({"format": 1, "version": "one"}))
    assert by_tag.version == t.tag_version("one")
    want = _reference(first, sd.ReadRequest())
    got = by_tag.to_pandas()
    assert got[["key", "ts"]].equals(want[["key", "ts"]])
    assert t.prepare(by_tag.pinned()).to_arrow().equals(by_tag.to_arrow())
    assert len(rows) > len(first)


# ---- the Flight service and the CLI take the request's JSON ---------------------------------
@pytest.fixture(scope="module")
def server(store: sd.Store, table: Any) -> Iterator[SedimentFlightServer]:
    srv = SedimentFlightServer(store, "grpc://127.0.0.1:0")
    yield srv
    srv.shutdown()


def _flight_read(client: fl.FlightClient, descriptor: dict[str, Any]) -> pa.Table:
    """A query through a plain Flight client: plan, then every endpoint's ticket, joined."""
    info = client.get_flight_info(fl.FlightDescriptor.for_command(json.dumps(descriptor)))
    parts = [client.do_get(e.ticket).read_all() for e in info.endpoints]
    return pa.concat_tables(parts) if parts else info.schema.empty_table()


def test_flight_takes_the_request_json_and_the_documented_form(
        server: SedimentFlightServer, table: tuple[sd.Table, pd.DataFrame]) -> None:
    t, _ = table
    client = fl.FlightClient(f"grpc://127.0.0.1:{server.port}")
    for request in REQUESTS:
        want = t.prepare(request).to_arrow()
        doc = {"table": "events", **request.to_json()}
        assert _flight_read(client, doc).equals(want)
        whole = client.do_get(fl.Ticket(json.dumps({"query": doc, "leaf": None}))).read_all()
        assert whole.equals(want)
    # the tickets the server writes carry the request's JSON, its version pinned
    info = client.get_flight_info(fl.FlightDescriptor.for_command(json.dumps(
        {"table": "events", **REQUESTS[2].to_json()})))
    ticket = json.loads(info.endpoints[0].ticket.ticket)
    assert sd.ReadRequest.from_json({k: v for k, v in ticket["query"].items()
                                     if k != "table"}) == REQUESTS[2].replace(version=t.version)
    # the form docs/howto/serve.md documented before the request had a format
    old = {"table": "events", "keys": ["k03", ["k17"]],
           "ranges": [{"range": {"start": "k20", "end": "k24", "start_inclusive": True,
                                 "end_inclusive": False}}],
           "columns": ["key", "v"], "filter": "v > 3", "version": "one"}
    want = t.query(["k03", "k17"], [sd.Range("k20", "k24")], columns=["key", "v"],
                   filter="v > 3", version="one")
    assert want.num_rows > 0
    assert _flight_read(client, old).equals(want)
    ticket_doc = {"query": {"table": "events", "keys": ["k03"]}, "leaf": None}
    assert client.do_get(fl.Ticket(json.dumps(ticket_doc))).read_all().equals(
        t.query(keys=["k03"]))
    # the Python client sends the request's JSON and answers as the table
    with sd.connect(f"grpc://127.0.0.1:{server.port}") as remote:
        assert remote.table("events").query(REQUESTS[3]).equals(t.prepare(REQUESTS[3])
                                                                 .to_arrow())


@pytest.mark.parametrize(("fields", "message"), [
    ({"format": REQUEST_FORMAT + 1, "keys": ["k01"]}, "field 'format' is"),
    ({"format": 1, "raw": True}, "raw read"),
    ({"format": 1, "colums": ["key"]}, "unknown field 'colums'"),
])
def test_flight_refuses_a_request_it_cannot_read(
        server: SedimentFlightServer, fields: dict[str, Any], message: str) -> None:
    client = fl.FlightClient(f"grpc://127.0.0.1:{server.port}")
    body = json.dumps({"table": "events", **fields})
    with pytest.raises(fl.FlightServerError) as got:
        client.get_flight_info(fl.FlightDescriptor.for_command(body))
    error = from_flight_error(got.value)
    assert isinstance(error, BadRequestError) and message in str(error)
    with pytest.raises(fl.FlightServerError, match=message):
        client.do_get(fl.Ticket(json.dumps({"query": json.loads(body), "leaf": None}))) \
            .read_all()


def test_the_cli_takes_the_request_json(store: sd.Store, table: tuple[sd.Table, pd.DataFrame],
                                        tmp_path: Path) -> None:
    t, _ = table
    runner = CliRunner()
    request = sd.ReadRequest(ranges=[sd.Range("k05", "k12")], columns=["key", "ts", "v"],
                             filter=pc.field("v") > 20, version="one")
    want = t.prepare(request).to_arrow().to_pylist()
    assert want

    def query(*args: str) -> Any:
        return runner.invoke(app, ["query", "events", "--store", store.uri, "--json", *args])

    result = query("--request", request.to_json_text())
    assert result.exit_code == 0, result.output
    assert [json.loads(line) for line in result.stdout.splitlines()] == want
    path = tmp_path / "request.json"
    path.write_text(json.dumps(request.to_json()))
    assert query("--request", f"@{path}").stdout == result.stdout
    # the options make the same request
    same = query("--range", "[k05,k12)", "--columns", "key,ts,v", "--where", "v > 20",
                 "--version", "one")
    assert same.stdout == result.stdout
    for args, message in ((["--request", request.to_json_text(), "--key", "k01"], "not both"),
                          (["--request", '{"format": 7}'], "field 'format' is 7"),
                          (["--request", f"@{tmp_path / 'missing.json'}"], "cannot read")):
        bad = query(*args)
        assert bad.exit_code == 1 and message in bad.stderr, bad.output


def test_datetimes_and_bytes_travel_in_a_request() -> None:
    r = sd.ReadRequest(keys=[b"\x00\x01", (dt.datetime(2024, 1, 2, 3, 4, 5),)],
                       ranges=[sd.Range(dt.date(2024, 1, 1), None)])
    doc = r.to_json()
    assert doc["keys"][0] == {"base64": "AAE="}
    assert sd.ReadRequest.from_json(json.dumps(doc)) == r
