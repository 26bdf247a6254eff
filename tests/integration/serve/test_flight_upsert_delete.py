"""Upserts and deletes over Flight against a real ``sediment serve`` process: ``do_put`` with
``"write": "upsert"`` (the Python client's ``upsert``, and a plain Flight client's put), the
``delete`` action by keys, ranges and filter, their refusals (one clear error, nothing
committed, the server still serving) and a read-only server's refusal.

Answers are compared with an independent pandas reference: an upsert keeps the last of its
records of each record key (key, ts) in the order sent, drops every earlier record of those
keys and adds its own; a delete drops the records of its keys, ranges and/or filter."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.flight as fl
import pytest
from serve_helpers import SCHEMA, Server, rows

import sediment as sd
from sediment.errors import BadRequestError, DataError, QueryError, ReadOnlyError

COLUMNS = ["key", "ts", "value", "note"]
RECORD_KEY = ["key", "ts"]


def _table(store: sd.Store) -> sd.Table:
    """A new table of three leaves holding 60 records (keys a00..z09, ts 0..59)."""
    t = store.create_table(f"t{uuid.uuid4().hex[:8]}", SCHEMA, split_points=["g", "p"],
                           properties={"state.cache.refresh_seconds": 0})
    t.ingest(rows([f"{c}{i:02d}" for c in "adgkpz" for i in range(10)]))
    return t


def _frame(table: pa.Table) -> pd.DataFrame:
    return table.to_pandas()


def _sorted(df: pd.DataFrame) -> list[dict[str, Any]]:
    out = df[COLUMNS].sort_values(RECORD_KEY + ["value"]).to_dict("records")
    return [{k: (None if v is None or v != v else v) for k, v in r.items()} for r in out]


def _upserted(ref: pd.DataFrame, new: pd.DataFrame) -> pd.DataFrame:
    new = new.drop_duplicates(RECORD_KEY, keep="last")
    hit = ref.set_index(RECORD_KEY).index.isin(new.set_index(RECORD_KEY).index)
    return pd.concat([ref[~hit], new], ignore_index=True)


def test_upsert_over_flight(server: Server, store: sd.Store) -> None:
    table = _table(store)
    ref = _frame(table.query())
    remote = server.connect().table(table.name)
    # overwrites of existing record keys, new ones, and one key sent twice (the last wins)
    first = rows(["a01", "d05", "k09", "q00"], start=100)
    first = first.set_column(1, "ts", pa.array([1, 15, 39, 7], pa.int64()))
    twice = rows(["d05", "d05"], start=200).set_column(1, "ts", pa.array([15, 15], pa.int64()))
    data = pa.concat_tables([first, twice])
    result = remote.upsert(data)
    assert result.rows == 6 and result.version == table.version
    ref = _upserted(ref, _frame(data))
    assert _sorted(_frame(table.query())) == _sorted(ref)
    assert _sorted(_frame(remote.query())) == _sorted(ref)
    assert table.history()[-1].summary.startswith("upsert: ")

    # a plain Flight client: a command descriptor saying "write": "upsert", no end marker
    more = rows(["g03", "z00"], start=300).set_column(1, "ts", pa.array([23, 50], pa.int64()))
    descriptor = fl.FlightDescriptor.for_command(
        json.dumps({"table": table.name, "write": "upsert"}).encode())
    writer, meta = fl.FlightClient(server.uri).do_put(descriptor, more.schema)
    writer.write_table(more)
    writer.done_writing()
    answer = json.loads(meta.read().to_pybytes())
    writer.close()
    assert answer["version"] == table.version and answer["rows"] == 2
    ref = _upserted(ref, _frame(more))
    assert _sorted(_frame(table.query())) == _sorted(ref)


def test_delete_over_flight_by_keys_ranges_and_filter(server: Server, store: sd.Store) -> None:
    table = _table(store)
    ref = _frame(table.query())
    remote = server.connect().table(table.name)
    steps: list[tuple[dict[str, Any], Any]] = [
        ({"keys": ["a01", "k05", "nope"]}, lambda r: r[~r.key.isin(["a01", "k05"])]),
        ({"ranges": [sd.Range("d03", "g02")]},
         lambda r: r[~((r.key >= "d03") & (r.key < "g02"))]),
        ({"filter": "value >= 55 OR note IS NULL"},
         lambda r: r[~((r.value >= 55) | r.note.isna())]),
        ({"keys": ["p01", "p02", "p03"], "filter": pc.field("value") > 41},
         lambda r: r[~(r.key.isin(["p01", "p02", "p03"]) & (r.value > 41))]),
        ({"ranges": sd.Range("z", None, start_inclusive=False)}, lambda r: r[r.key <= "z"]),
    ]
    for args, apply in steps:
        version = remote.delete(**args)
        assert version == table.version
        assert table.history()[-1].kind == "delete_records"
        ref = apply(ref)
        assert _sorted(_frame(table.query())) == _sorted(ref), args
        assert _sorted(_frame(remote.query())) == _sorted(ref), args
    # the records deleted are still there at an earlier version (time travel)
    assert remote.query(keys=["a01"], version=table.version - len(steps)).num_rows == 1


def test_refusals_are_one_clear_error_and_the_server_keeps_serving(server: Server,
                                                                  store: sd.Store) -> None:
    table = _table(store)
    before, records = table.version, table.query()
    remote = server.connect().table(table.name)
    with pytest.raises(QueryError, match=rf"table {table.name}.*'colour'"):
        remote.delete(filter="colour = 'red'")
    with pytest.raises(QueryError, match=rf"table {table.name}.*'colour'"):
        remote.delete(filter=pc.field("colour") == "red")
    with pytest.raises(QueryError, match=rf"table {table.name}.*clear\(\)"):
        remote.delete()
    with pytest.raises(DataError, match=rf"table {table.name}.*'colour'"):
        remote.upsert(pa.table({"key": ["a"], "ts": [1], "value": [1], "colour": ["red"]}))
    client = server.connect()
    with pytest.raises(BadRequestError, match=r"delete body .*unknown field 'columns'"):
        client.action("delete", {"table": table.name, "keys": ["a01"], "columns": ["key"]})
    descriptor = fl.FlightDescriptor.for_command(
        json.dumps({"table": table.name, "write": "replace"}).encode())
    with pytest.raises(fl.FlightError, match="'write' must be one of ingest, upsert"):
        writer, _ = fl.FlightClient(server.uri).do_put(descriptor, records.schema)
        writer.write_table(records)
        writer.close()
    # a misspelt field is refused, not ignored (ignored, it would turn exactly-once or the
    # upsert off without a word)
    for doc in ({"table": table.name, "idempotencyKey": "k1"},
                {"table": table.name, "mode": "upsert"}):
        descriptor = fl.FlightDescriptor.for_command(json.dumps(doc).encode())
        field = next(k for k in doc if k != "table")
        with pytest.raises(fl.FlightError, match=rf"put descriptor: unknown field '{field}' "
                                                 r"\(fields: table, write, idempotency_key"):
            writer, _ = fl.FlightClient(server.uri).do_put(descriptor, records.schema)
            writer.write_table(records)
            writer.close()
    assert table.version == before
    assert client.health()["status"] == "ok"
    assert remote.query().equals(records)


def test_a_read_only_server_refuses_upserts_and_deletes(store: sd.Store,
                                                        start_server: Any) -> None:
    table = _table(store)
    before = table.version
    remote = start_server(store.uri, "--read-only").connect().table(table.name)
    with pytest.raises(ReadOnlyError, match=rf"read-only.*upsert into table {table.name}"):
        remote.upsert(rows(["a01"]))
    with pytest.raises(ReadOnlyError, match="read-only.*action delete"):
        remote.delete(keys=["a01"])
    assert table.version == before
    assert remote.query(keys=["a01"]).num_rows == 1
