"""Scoped tokens over Flight (``sediment serve --tokens-file``): every right (read < write <
admin) and table patterns, against one server process shared by the module; each refusal is
a PermissionDeniedError naming the token, logged with its name; ``--token-file`` stays one
token with every right; a bad tokens file is one error line before anything is bound."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from serve_helpers import SCHEMA, Server, rows
from typer.testing import CliRunner

import sediment as sd
from sediment.cli.app import app
from sediment.errors import AuthenticationError, PermissionDeniedError
from sediment.serve.actions import ACTION_RIGHTS, ACTIONS

TOKENS = {  # name: (token, tables, right)
    "reader": ("tok-reader-1", ["logs_*"], "read"),
    "writer": ("tok-writer-2", ["logs_*", "metrics"], "write"),
    "ops": ("tok-ops-3", ["logs_a"], "admin"),
    "root": ("tok-root-4", ["*"], "admin"),
}
LEGACY = "tok-legacy-5"
"""The ``--token-file`` token: every right on every table."""


def _line(name: str) -> str:
    token, tables, right = TOKENS[name]
    return json.dumps({"name": name, "sha256": hashlib.sha256(token.encode()).hexdigest(),
                       "tables": tables, "right": right})


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> sd.Store:
    s = sd.Store.open(str(tmp_path_factory.mktemp("store") / "s"), create=True)
    for name in ("logs_a", "logs_b", "metrics", "secrets"):
        s.create_table(name, SCHEMA).ingest(rows(["a", "b", "c"]))
    return s


@pytest.fixture(scope="module")
def server(store: sd.Store, start_server: Any, tmp_path_factory: pytest.TempPathFactory
           ) -> Server:
    folder = tmp_path_factory.mktemp("tokens")
    (folder / "tokens.jsonl").write_text(
        "# scoped tokens\n" + "\n".join(_line(n) for n in TOKENS) + "\n\n")
    (folder / "token").write_text(LEGACY + "\n")
    return start_server(store.uri, "--tokens-file", str(folder / "tokens.jsonl"),
                        "--token-file", str(folder / "token"), token=LEGACY)


def _as(server: Server, name: str) -> Any:
    return server.connect(TOKENS[name][0] if name in TOKENS else LEGACY)


def _denied(name: str, match: str = "") -> Any:
    return pytest.raises(PermissionDeniedError, match=f"permission denied: .*{match}")


def test_a_read_token_reads_its_tables_only(server: Server, store: sd.Store) -> None:
    c = _as(server, "reader")
    assert c.tables() == ["logs_a", "logs_b"]  # a list shows only the token's tables
    expected = store.table("logs_a").query()
    assert c.table("logs_a").query().equals(expected)
    assert c.table("logs_b").describe()["name"] == "logs_b"
    assert c.health()["status"] == "ok"
    with _denied("reader", "token 'reader' does not reach table metrics"):
        c.table("metrics")
    with _denied("reader", "token 'reader' does not reach table secrets"):
        c.action("describe", {"table": "secrets"})
    t = c.table("logs_a")
    with _denied("reader", "do_put needs the write right on table logs_a; token 'reader' "
                           "has read"):
        t.ingest(rows(["z"]))
    with _denied("reader", "action compact needs the write right"):
        t.compact()
    with _denied("reader", "action tag needs the write right"):
        t.tag("v1")
    assert store.table("logs_a").query().equals(expected)  # nothing written


def test_a_write_token_writes_but_makes_and_reshapes_nothing(server: Server,
                                                             store: sd.Store) -> None:
    c = _as(server, "writer")
    assert c.tables() == ["logs_a", "logs_b", "metrics"]
    before = store.table("metrics").query().num_rows
    c.table("metrics").ingest(rows(["w1", "w2"], start=100))
    assert store.table("metrics").query().num_rows == before + 2
    assert c.table("metrics").delete(keys=["w1"]) > 0
    assert store.table("metrics").query(keys=["w1"]).num_rows == 0
    c.table("logs_b").compact()
    with _denied("writer", "does not reach table secrets"):
        c.action("delete", {"table": "secrets", "keys": {"list": ["a"]}})
    with _denied("writer", "action create-table needs the admin right on table logs_new"):
        c.create_table("logs_new", SCHEMA)
    with _denied("writer", "action alter needs the admin right"):
        c.table("metrics").add_columns([("extra", "int64")])
    with _denied("writer", "action restore needs the admin right"):
        c.table("metrics").restore(1)
    with _denied("writer", "action drop-table needs the admin right"):
        c.drop_table("logs_b")
    assert "logs_new" not in store.tables() and "logs_b" in store.tables()


def test_admin_rights_hold_on_the_admins_tables_only(server: Server, store: sd.Store) -> None:
    ops = _as(server, "ops")
    table = ops.table("logs_a")
    v = table.version
    table.ingest(rows(["o1"], start=200))
    assert table.restore(v) > v  # admin on logs_a: it may rewind it
    assert store.table("logs_a").query(keys=["o1"]).num_rows == 0
    with _denied("ops", "action create-table: token 'ops' does not reach table logs_c"):
        ops.create_table("logs_c", SCHEMA)
    with _denied("ops", "token 'ops' does not reach table logs_b"):
        ops.table("logs_b").query()
    root = _as(server, "root")
    root.create_table("scratch", SCHEMA)
    assert "scratch" in root.tables() and "scratch" not in _as(server, "writer").tables()
    root.drop_table("scratch")
    assert "scratch" not in store.tables()
    legacy = _as(server, "legacy")  # --token-file: every right on every table
    assert legacy.tables() == sorted(store.tables())
    legacy.table("secrets").tag("checked")


def test_every_action_has_its_right() -> None:
    assert set(ACTION_RIGHTS) == set(ACTIONS)


def test_refusals_are_counted_and_logged_with_the_token_name(server: Server) -> None:
    c = _as(server, "reader")
    with _denied("reader"):
        c.table("secrets")
    with pytest.raises(AuthenticationError):
        server.connect("not-a-token").tables()
    assert c.stats()["refused_scope"] >= 1
    log = server.log.read_text()
    assert "reason=scope token=reader right=read table=secrets" in log
    assert "tok-reader-1" not in log and "not-a-token" not in log  # tokens never logged


@pytest.mark.parametrize("line, message", [
    ("not json", "line 1: not a JSON object"),
    ('{"name": "x", "sha256": "00", "tables": ["*"], "right": "read"}',
     "'sha256' must be the token's SHA-256 as 64 hex digits"),
    ('{"name": "x", "sha256": "' + "0" * 64 + '", "tables": "*", "right": "read"}',
     "'tables' must be a list"),
    ('{"name": "x", "sha256": "' + "0" * 64 + '", "tables": ["*"], "right": "root"}',
     "'right' must be one of read, write, admin, not 'root'"),
    ('{"name": "x", "sha256": "' + "0" * 64 + '", "tables": ["*"]}', "missing 'right'"),
    ("# nothing but a comment", "holds no token"),
], ids=["not-json", "short-digest", "tables-not-a-list", "unknown-right", "missing-field",
        "empty"])
def test_a_bad_tokens_file_is_one_error_line(tmp_path: Path, store: sd.Store, line: str,
                                             message: str) -> None:
    path = tmp_path / "tokens.jsonl"
    path.write_text(line + "\n")
    out = CliRunner().invoke(app, ["serve", "--store", store.uri, "--tokens-file", str(path),
                                   "--port", "0"])
    assert out.exit_code == 1
    assert out.output.startswith("error: ") and message in out.output, out.output
