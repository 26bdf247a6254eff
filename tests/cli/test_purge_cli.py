"""``sediment purge``: the records leave the answers and, after gc, the stored files; the
output says what still reads them."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

import sediment as sd
from sediment.cli import app

SCHEMA = sd.Schema(row_keys=[("key", pa.string())], values=[("secret", pa.string())])


@pytest.fixture(autouse=True)
def _no_store_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SEDIMENT_STORE", raising=False)


def _values(root: Path) -> set[str]:
    return {v for p in root.rglob("*.parquet") if "data" in p.parts
            for v in pq.read_table(p).to_pydict().get("secret", [])}


def test_purge_removes_the_records_from_answers_and_from_storage(tmp_path: Path) -> None:
    store = str(tmp_path / "store")
    table = sd.Store.open(store, create=True).create_table(
        "users", SCHEMA, properties={"state.cache.refresh_seconds": 0, "gc.delay_seconds": 0,
                                     "retention.seconds": 0, "gc.clock_skew_seconds": 0})
    table.ingest(pa.table({"key": ["a", "b", "c"], "secret": ["sa", "sb", "sc"]}))
    table.tag("audit")
    run = CliRunner().invoke
    r = run(app, ["purge", "users", "--key", "b", "--store", store, "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert doc["version"] == table.version and doc["held_by_tags"] == ["audit"]
    assert doc["held_by_versions"] == [2] and doc["expires"] is None
    assert table.query().column("key").to_pylist() == ["a", "c"]
    gc = ["gc", "--table", "users", "--store", store, "--orphan-timeout", "0"]
    r = run(app, gc)
    assert r.exit_code == 0, r.output
    assert "sb" in _values(tmp_path)  # the tag still reads it
    table.delete_tag("audit")
    assert run(app, gc).exit_code == 0
    assert _values(tmp_path) == {"sa", "sc"}
    r = run(app, ["purge", "users", "--where", "secret = 'sa'", "--store", store])
    assert r.exit_code == 0 and f"version {table.version}" in r.output, r.output


def test_purge_of_nothing_named_is_refused(tmp_path: Path) -> None:
    store = str(tmp_path / "store")
    sd.Store.open(store, create=True).create_table("users", SCHEMA)
    r = CliRunner().invoke(app, ["purge", "users", "--store", store])
    assert r.exit_code != 0 and "sediment clear users" in r.output
