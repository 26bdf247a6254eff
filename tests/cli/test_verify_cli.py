"""``sediment verify TABLE [--version V] [--deep] [--json]``: a report for people (or JSON),
exit status 1 when anything is damaged (after printing), 0 otherwise; errors name the table."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from typer.testing import CliRunner, Result

import sediment as sd
from sediment.cli import app
from sediment.cli.verify import spans_text

SCHEMA = sd.Schema(row_keys=[("key", pa.string())], values=[("value", pa.string())])


@pytest.fixture(autouse=True)
def _no_store_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SEDIMENT_STORE", raising=False)


@pytest.fixture
def root(tmp_path: Path) -> str:
    """Table ``t``: two ingests (versions 2 and 3), tag ``one`` at 2."""
    path = str(tmp_path / "s")
    table = sd.Store.open(path, create=True).create_table("t", SCHEMA)
    table.ingest(pa.table({"key": ["a", "b"], "value": ["x", "y"]}))
    table.tag("one")
    table.ingest(pa.table({"key": ["c"], "value": ["z"]}))
    return path


def _run(*args: str) -> Result:
    return CliRunner().invoke(app, ["verify", *args])


def _damage_first_file(root: str) -> str:
    table = sd.Store.open(root).table("t")
    (ref,) = table.files(2)
    path = Path(table._handle.objects.local_path(ref.filename) or "")
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 3] ^= 0x01
    path.write_bytes(bytes(raw))
    return ref.filename


def test_a_clean_table_prints_its_counts_and_exits_0(root: str) -> None:
    result = _run("t", "--store", root)
    assert result.exit_code == 0, (result.stdout, result.stderr)
    lines = result.stdout.splitlines()
    assert lines[0].startswith("table t: versions 2, 3 verified in ")
    assert lines[1].startswith("checked: 1 store file, 1 catalog entry, 1 tag, 3 log "
                               "entries, 2 data files, 2 samples, 2 key filters")
    assert lines[-1] == "ok: nothing damaged"
    doc = json.loads(_run("t", "--store", root, "--json", "--deep").stdout)
    assert doc["ok"] is True and doc["deep"] is True and doc["damaged"] == []
    assert doc["versions"] == [2, 3] and doc["checked"]["data file"] == 2
    only = json.loads(_run("t", "--store", root, "--json", "--version", "one").stdout)
    assert only["versions"] == [2] and only["checked"]["data file"] == 1


def test_damage_is_printed_then_exit_1(root: str) -> None:
    filename = _damage_first_file(root)
    result = _run("t", "--store", root)
    assert result.exit_code == 1, (result.stdout, result.stderr)
    out = result.stdout
    assert filename in out and "data file" in out and "2-3" in out and "one" in out
    assert out.splitlines()[-1] == "damaged: 1 object"
    doc = json.loads(_run("t", "--store", root, "--json").stdout)
    (damage,) = doc["damaged"]
    assert damage["key"] == filename and damage["versions"] == [{"first": 2, "last": 3}]
    assert damage["tags"] == ["one"]
    # the damage is in every version checked: --version 3 (the head) finds it too
    assert _run("t", "--store", root, "--version", "3").exit_code == 1


def test_errors_name_the_table(root: str) -> None:
    result = _run("t", "--store", root, "--version", "9")
    assert result.exit_code == 1 and "table t has no version 9" in result.stderr
    result = _run("t", "--store", root, "--version", "nope")
    assert result.exit_code == 1 and "table t" in result.stderr and "nope" in result.stderr
    result = _run("missing", "--store", root)
    assert result.exit_code == 1 and "missing" in result.stderr


def test_spans_text() -> None:
    assert spans_text((range(2, 5), range(7, 8))) == "2-4, 7"
    assert spans_text(()) == ""
