"""Schema changes over Flight against a real ``sediment serve`` process: the ``alter`` action
(the Python client's ``add_columns``, ``drop_columns``, ``rename_column``, ``widen_column``,
and a plain Flight client's action), reads through Flight after each change, the refusals
(the library's SchemaError naming the table, nothing committed, the server still serving),
malformed bodies, and a read-only server's refusal.

Answers are compared with an independent pandas reference to which the same change is
applied: an added column is null in every record written before, a widened one keeps every
value, a renamed one keeps its values under the new name, a dropped one is gone."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.flight as fl
import pytest
from serve_helpers import SCHEMA, Server, rows

import sediment as sd
from sediment.errors import BadRequestError, ReadOnlyError, SchemaError


def _table(store: sd.Store) -> sd.Table:
    """A new table of two leaves holding 20 records."""
    t = store.create_table(f"t{uuid.uuid4().hex[:8]}", SCHEMA, split_points=["k"],
                           properties={"state.cache.refresh_seconds": 0})
    t.ingest(rows([f"{c}{i}" for c in "aegkpz" for i in range(3)][:20]))
    return t


def _plain(df: pd.DataFrame) -> list[dict[str, Any]]:
    out = df.sort_values("key").to_dict("records")
    return [{k: None if v is None or v != v else v for k, v in r.items()} for r in out]


def test_each_change_over_flight_then_reads_through_flight(server: Server,
                                                           store: sd.Store) -> None:
    table = _table(store)
    ref = table.query().to_pandas()
    remote = server.connect().table(table.name)
    v0 = table.version

    # add: two columns in one transaction, null in every record written before
    assert remote.add_columns([("colour", pa.string()), ("n", "int32")]) == v0 + 1
    ref = ref.assign(colour=None, n=None)
    got = remote.query()
    assert got.schema.names == ["key", "ts", "value", "note", "colour", "n"]
    assert got.schema.field("n").type == pa.int32()
    assert _plain(got.to_pandas()) == _plain(ref)
    more = pa.table({"key": ["b0", "q0"], "ts": [100, 101], "value": [7, 8],
                     "note": ["x", None], "colour": ["red", None],
                     "n": pa.array([-2**31, 2**31 - 1], pa.int32())})
    remote.ingest(more)
    ref = pd.concat([ref, more.to_pandas()], ignore_index=True)

    # widen: the old files' values cast exactly
    assert remote.widen_column("n", pa.int64()) == table.version
    got = remote.query()
    assert got.schema.field("n").type == pa.int64()
    assert _plain(got.to_pandas()) == _plain(ref)

    # rename: the values stay with the column; filters and projections take the new name
    assert remote.rename_column("value", "amount") == table.version
    ref = ref.rename(columns={"value": "amount"})
    got = remote.query()
    assert got.schema.names == ["key", "ts", "amount", "note", "colour", "n"]
    assert _plain(got.to_pandas()) == _plain(ref)
    assert _plain(remote.query(filter="amount >= 15", columns=["key", "amount"]).to_pandas()) \
        == _plain(ref[ref.amount >= 15][["key", "amount"]])

    # drop: gone from reads, still there at an earlier version (time travel)
    assert remote.drop_columns(["colour", "note"]) == table.version
    ref = ref.drop(columns=["colour", "note"])
    assert _plain(remote.query().to_pandas()) == _plain(ref)
    assert remote.query(version=v0).schema.names == ["key", "ts", "value", "note"]

    assert [h.summary for h in remote.history() if h.kind == "alter_schema"] == [
        "added colour:string, n:int32", "widened n to int64", "renamed value to amount",
        "dropped colour, note"]
    # an in-process handle sees the server's changes
    assert sd.Store.open(store.uri).table(table.name).schema.value_names == ["amount", "n"]


def test_the_action_body_and_its_answer(server: Server, store: sd.Store) -> None:
    """The body a plain Flight client sends (args as the alter_schema transaction stores
    them) and the answer: the version and the new schema."""
    table = _table(store)
    body = {"table": table.name, "op": "rename_column",
            "args": {"old": "note", "new": "comment"}}
    results = list(fl.FlightClient(server.uri).do_action(
        fl.Action("alter", json.dumps(body).encode())))
    answer = json.loads(results[0].body.to_pybytes())
    assert answer["version"] == table.version
    assert sd.Schema.from_json(answer["schema"]).value_names == ["value", "comment"]
    client = server.connect()
    answer = client.action("alter", {"table": table.name, "op": "add_columns",
                                     "args": {"columns": [["when", "timestamp[us]"]]}})
    assert sd.Schema.from_json(answer["schema"]).to_arrow().field("when").type == \
        pa.timestamp("us")
    answer = client.action("alter", {"table": table.name, "op": "drop_columns",
                                     "args": {"names": ["when"]}})
    assert answer["version"] == table.version
    assert client.action("alter", {"table": table.name, "op": "widen_column",
                                   "args": {"name": "comment", "type": "large_string"}}
                         )["schema"]["values"][1]["type"] == "large_string"
    assert server.connect().table(table.name).query().schema.field("comment").type == \
        pa.large_string()


def test_bad_changes_are_the_schema_error_naming_the_table(server: Server,
                                                            store: sd.Store) -> None:
    table = _table(store)
    before, records = table.version, table.query()
    remote = server.connect().table(table.name)
    t = table.name
    for change, message in [
        (lambda: remote.drop_columns(["key"]), rf"table {t}: cannot drop key field 'key'"),
        (lambda: remote.rename_column("ts", "time"), rf"table {t}: cannot rename key field"),
        (lambda: remote.widen_column("ts", "int64"), rf"table {t}: cannot widen key field"),
        (lambda: remote.drop_columns(["ghost"]), rf"table {t}: no value column 'ghost'"),
        (lambda: remote.rename_column("ghost", "g"), rf"table {t}: no value column 'ghost'"),
        (lambda: remote.widen_column("value", pa.int32()),
         rf"table {t}: column 'value': int64 -> int32 is not a widening"),
        (lambda: remote.widen_column("value", "float64"),
         rf"table {t}: column 'value': int64 -> double is not a widening"),
        (lambda: remote.add_columns([("note", pa.string())]),
         rf"table {t}: column 'note' already exists"),
        (lambda: remote.rename_column("note", "value"), rf"table {t}: .*'value' already"),
        (lambda: remote.add_columns([("__sediment_x", pa.int64())]), "reserved"),
        (lambda: remote.add_columns([("c", "strng")]),
         rf"table {t}: column 'c': unknown type 'strng'"),
        (lambda: remote.widen_column("value", "int128"),
         rf"table {t}: column 'value': unknown type 'int128'"),
        (lambda: remote.drop_columns("note"), rf"table {t}: drop_columns takes a list"),
    ]:
        with pytest.raises(SchemaError, match=message):
            change()
    client = server.connect()
    for body, message in [
        ({"op": "truncate", "args": {}}, "'op' must be one of add_columns, drop_columns"),
        ({"op": "drop_columns", "args": {"columns": ["note"]}},
         "drop_columns's 'args' must be an object of names"),
        ({"op": "drop_columns", "args": {"names": "note"}}, "'names' must be a list"),
        ({"op": "add_columns", "args": {"columns": [["c"]]}}, "'columns' must be a list of"),
        ({"op": "rename_column", "args": {"old": "note", "new": 3}}, "must be strings"),
        ({"op": "rename_column", "args": {"old": "note", "new": "n"}, "version": 1},
         "unknown field 'version'"),
    ]:
        with pytest.raises(BadRequestError, match=rf"malformed alter body for table {t}: "
                                                  rf".*{message}"):
            client.action("alter", {"table": t, **body})
    assert table.version == before
    assert client.health()["status"] == "ok"
    assert remote.query().equals(records)


def test_a_read_only_server_refuses_alters(store: sd.Store, start_server: Any) -> None:
    table = _table(store)
    before = table.version
    remote = start_server(store.uri, "--read-only").connect().table(table.name)
    for change in (lambda: remote.add_columns([("c", "int8")]),
                   lambda: remote.drop_columns(["note"]),
                   lambda: remote.rename_column("note", "comment"),
                   lambda: remote.widen_column("note", "large_string")):
        with pytest.raises(ReadOnlyError, match="read-only.*action alter"):
            change()
    assert table.version == before
    assert remote.query().schema.names == ["key", "ts", "value", "note"]
