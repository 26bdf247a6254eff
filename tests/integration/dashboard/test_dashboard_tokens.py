"""Scoped tokens on the dashboard (``sediment dashboard --tokens-file``), one process for the
module: the dashboard only reads, so every right reaches it; each token sees the tables its
patterns match (the store's page and API list only those) and gets 403 for the others'
pages and API, logged with its name; the login and cookie work with any token of the file."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from dashboard_helpers import Server, fetch, page_data, start, stop

import sediment as sd
from helpers import SCHEMA, rows

TOKENS = {  # name: (token, tables, right)
    "reader": ("dash-reader-1", ["logs_*"], "read"),
    "writer": ("dash-writer-2", ["metrics"], "write"),
    "admin": ("dash-admin-3", ["logs_a", "metr?cs"], "admin"),
}
LEGACY = "dash-legacy-4"
TABLES = ["logs_a", "logs_b", "metrics"]
VISIBLE = {"reader": ["logs_a", "logs_b"], "writer": ["metrics"],
           "admin": ["logs_a", "metrics"]}
"""What each token reaches, worked out by hand from its patterns."""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    root = tmp_path_factory.mktemp("dash-tokens")
    store = sd.Store.open(str(root / "store"), create=True)
    for name in TABLES:
        store.create_table(name, SCHEMA).ingest(rows(20, seed=len(name)))
    tokens = root / "tokens.jsonl"
    tokens.write_text("\n".join(json.dumps({
        "name": name, "sha256": hashlib.sha256(token.encode()).hexdigest(),
        "tables": tables, "right": right}) for name, (token, tables, right) in TOKENS.items()))
    # (with $SEDIMENT_DASHBOARD_TOKEN too: one more token, on every table)
    proc, srv = start(store.uri, root / "dashboard.log", token=LEGACY,
                      args=("--tokens-file", str(tokens)))
    yield srv
    stop(proc)


def _get(server: Server, path: str, name: str) -> tuple[int, bytes]:
    code, _, body = fetch(server.url + path,
                          headers={"Authorization": f"Bearer {TOKENS[name][0]}"})
    return code, body


@pytest.mark.parametrize("name", list(TOKENS))
def test_each_right_sees_and_opens_its_tables_only(server: Server, name: str) -> None:
    code, body = _get(server, "/api/store", name)
    assert code == 200
    assert sorted(r["name"] for r in json.loads(body)["tables"]) == VISIBLE[name]
    code, body = _get(server, "/", name)
    assert code == 200 and sorted(r["name"] for r in page_data(body)["tables"]) == \
        VISIBLE[name]
    for table in TABLES:
        allowed = table in VISIBLE[name]
        for path in (f"/api/tables/{table}", f"/api/tables/{table}/partitions",
                     f"/api/tables/{table}/query?keys=a", f"/tables/{table}",
                     f"/tables/{table}/query"):
            code, body = _get(server, path, name)
            if allowed:
                assert code in (200, 400), (path, body[:300])  # 400: a query form's error
            else:
                assert code == 403, (path, code)
                assert f"token '{name}' does not reach table {table}".encode() in body


def test_login_keeps_a_scoped_token_and_refusals_are_logged(server: Server) -> None:
    code, headers, _ = fetch(f"{server.url}/?token={TOKENS['writer'][0]}", follow=False)
    assert code == 303 and headers["location"] == "/"
    cookie = headers["set-cookie"].split(";")[0]
    code, _, body = fetch(server.url + "/", headers={"Cookie": cookie})
    assert code == 200 and [r["name"] for r in page_data(body)["tables"]] == ["metrics"]
    code, _, _ = fetch(server.url + "/api/tables/logs_a", headers={"Cookie": cookie})
    assert code == 403
    code, _, _ = fetch(server.url + "/api/store", headers={"Authorization": "Bearer nope"})
    assert code == 401
    log = Path(server.log).read_text()
    assert "reason=scope token='writer' table='logs_a'" in log
    assert TOKENS["writer"][0] not in log
    code, _, body = fetch(server.url + "/api/store",
                          headers={"Authorization": f"Bearer {LEGACY}"})
    assert code == 200 and sorted(r["name"] for r in json.loads(body)["tables"]) == TABLES
