"""The dashboard shows records that change: a table's merge rule beside its properties,
upserts and deletes in the commit timeline and the latest commits (a delete saying what it
deleted), and the deletes compaction has not settled yet; checked over HTTP against a real
``sediment dashboard`` process and the library's own history and state."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pyarrow as pa
import pytest
from dashboard_helpers import Server, fetch, get_json, page_data, start, stop

import sediment as sd

SCHEMA = sd.Schema(row_keys=[("key", pa.string())], sort_keys=[("ts", pa.int64())],
                   values=[("clicks", pa.int64()), ("note", pa.string())])
HTML_KEY = "<i>k</i>"


@pytest.fixture(scope="module")
def store_uri(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("changes") / "s")


@pytest.fixture(scope="module")
def table(store_uri: str) -> sd.Table:
    store = sd.Store.open(store_uri, create=True)
    t = store.create_table("ledger", SCHEMA, split_points=["m"], properties={
        "state.cache.refresh_seconds": 0, "merge": "aggregate",
        "merge.functions": json.dumps({"clicks": "sum"})})
    t.ingest(pa.table({"key": ["a", "b", "n", "x", HTML_KEY], "ts": [1, 1, 1, 1, 1],
                       "clicks": [1, 2, 3, 400, 5], "note": ["p", "q", "r", "s", "t"]}))
    t.upsert(pa.table({"key": ["a"], "ts": [1], "clicks": [10], "note": ["u"]}))
    t.delete(keys=["b", HTML_KEY])
    t.delete(filter="clicks > 100")
    t.delete(ranges=[sd.Range("n", "p", end_inclusive=True)])
    return t


@pytest.fixture(scope="module")
def server(store_uri: str, table: sd.Table,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    log = tmp_path_factory.mktemp("dash-log") / "dashboard.log"
    proc, srv = start(store_uri, log)
    yield srv
    stop(proc)


def test_merge_rule_upserts_and_deletes_show(server: Server, table: sd.Table) -> None:
    view = get_json(server, "/api/tables/ledger")
    assert view["merge"] == {"rule": "aggregate", "functions": {"clicks": "sum"}}
    assert {p["name"]: p["value"] for p in view["properties"]}["merge"] == "aggregate"

    # the timeline counts the upsert apart from the ingest, and the deletes
    counts = {k: sum(v) for k, v in view["timeline"]["windows"][0]["counts"].items()}
    assert counts == {"initialise": 1, "add_files": 1, "add_files (upsert)": 1,
                      "delete_records": 3}
    # the latest commits: as table.history() has them, a delete saying what it deleted
    history = table.history()
    assert [(h["version"], h["kind"], h["summary"]) for h in view["history"]] == \
        [(h.version, h.kind, h.summary) for h in reversed(history)]
    detail = {h["version"]: h["detail"] for h in view["history"]}
    v = table.version
    assert detail[v - 2] == f"key 'b', key {HTML_KEY!r}"
    assert detail[v - 1] == "where (clicks > 100)"
    assert detail[v] == "['n', 'p']"
    assert detail[v - 3] is None  # the upsert: its summary says it all
    assert history[-4].summary.startswith("upsert: ")

    # the deletes not settled yet: the state's, newest first
    pending = table._handle.states.head().deletions
    assert [(d["version"], d["leaves"]) for d in view["deletes"]] == \
        [(d.version, len(d.pending)) for d in reversed(pending)]
    assert [d["version"] for d in view["deletes"]] == [v, v - 1, v - 2]

    # the page embeds the same and has where to draw it; keys from the store stay text
    code, _, body = fetch(server.url + "/tables/ledger")
    assert code == 200
    assert b'id="merge-rule"' in body and b'id="deletes"' in body
    data = page_data(body)["view"]
    assert data["merge"] == view["merge"] and data["deletes"] == view["deletes"]
    assert HTML_KEY.encode() not in body


def test_compaction_settles_the_deletes(server: Server, table: sd.Table) -> None:
    assert get_json(server, "/api/tables/ledger")["deletes"]
    table.compact(full=True)
    assert table._handle.states.head().deletions == ()
    assert get_json(server, "/api/tables/ledger")["deletes"] == []
    assert table.query().to_pylist() == [{"key": "a", "ts": 1, "clicks": 10, "note": "u"}]


def test_schema_history_shows_each_change(server: Server, table: sd.Table) -> None:
    table.add_columns([("score", pa.float32())])
    table.widen_column("score", pa.float64())
    table.rename_column("note", "memo")
    view = get_json(server, "/api/tables/ledger")
    rows = [(h["version"], h["change"]) for h in view["schema_history"]]
    v = table.version
    assert rows == [(v, "renamed note to memo"), (v - 1, "widened score to double"),
                    (v - 2, "added score:float"), (1, "created")]
    assert view["schema_history"][0]["columns"] == \
        "key:string, ts:int64, clicks:int64, memo:string, score:double"
    code, _, body = fetch(server.url + "/tables/ledger")
    assert code == 200 and b'id="schema-history"' in body
    assert page_data(body)["view"]["schema_history"] == view["schema_history"]
