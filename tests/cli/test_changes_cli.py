"""``sediment changes``: the change rows of ``Table.changes`` as JSON lines or a table, bad
input refused with one ``error:`` line, and ``--follow`` as a real process printing each
version as it lands and stopping cleanly on SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest
from typer.testing import CliRunner

import sediment as sd
from sediment.cli import app

SCRIPT = Path(sys.executable).with_name("sediment")
SCHEMA = sd.Schema(row_keys=[("k", pa.string())], sort_keys=[("ts", pa.int64())],
                   values=[("v", pa.int64())])


@pytest.fixture(autouse=True)
def _no_store_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SEDIMENT_STORE", raising=False)


def _table(tmp_path: Path) -> tuple[str, sd.Table]:
    store = str(tmp_path / "store")
    t = sd.Store.open(store, create=True).create_table(
        "events", SCHEMA, properties={"state.cache.refresh_seconds": 0})
    return store, t


def _batch(k: str, v: int) -> pa.Table:
    return pa.table({"k": [k], "ts": [1], "v": [v]})


def test_changes_prints_what_the_library_gives(tmp_path: Path) -> None:
    store, t = _table(tmp_path)
    start = t.version
    t.ingest(_batch("a", 1))
    t.upsert(_batch("a", 2))
    t.tag("after-upsert")
    t.delete(keys=["a"])
    runner = CliRunner()
    out = runner.invoke(app, ["changes", "events", "--from", str(start), "--json",
                              "--store", store])
    assert out.exit_code == 0, out.output
    lines = [json.loads(line) for line in out.stdout.splitlines()]
    expected = t.changes(start).read_all().to_pylist()
    assert [(r["k"], r["v"], r["_change_type"], r["_commit_version"]) for r in lines] == [
        (r["k"], r["v"], r["_change_type"], r["_commit_version"]) for r in expected]
    assert [r["_change_type"] for r in lines] == ["insert", "update_preimage",
                                                  "update_postimage", "delete"]
    # a commit time in --json's one time format: UTC ending in Z, to the millisecond
    assert [r["_commit_timestamp"] for r in lines] == [
        r["_commit_timestamp"].isoformat(timespec="milliseconds").replace("+00:00", "Z")
        for r in expected]
    # --to a tag, --columns and --where (on a change column)
    out = runner.invoke(app, ["changes", "events", "--from", str(start), "--to", "after-upsert",
                              "--columns", "k,v,_change_type", "--where",
                              "_change_type <> 'update_preimage'", "--json", "--store", store])
    assert out.exit_code == 0, out.output
    assert [json.loads(line) for line in out.stdout.splitlines()] == [
        {"k": "a", "v": 1, "_change_type": "insert"},
        {"k": "a", "v": 2, "_change_type": "update_postimage"}]
    table_out = runner.invoke(app, ["changes", "events", "--from", "0", "--store", store])
    assert table_out.exit_code == 0 and "4 change rows" in table_out.stdout


@pytest.mark.parametrize("args, message", [
    (["--from", "3", "--to", "2"], "changes from version 3 to 2: the start is after the end"),
    (["--from", "nope"], "nope"),
    (["--from", "1", "--columns", "zz"], "has no column 'zz'"),
    (["--from", "1", "--to", "2", "--follow"], "give --to or --follow, not both"),
    (["--from", ""], "--from needs a version number or a tag name"),
])
def test_bad_input_is_one_error_line(tmp_path: Path, args: list[str], message: str) -> None:
    store, t = _table(tmp_path)
    t.ingest(_batch("a", 1))
    t.ingest(_batch("b", 1))
    out = CliRunner().invoke(app, ["changes", "events", *args, "--store", store])
    assert out.exit_code != 0
    assert message in out.output
    assert "Traceback" not in out.output


@pytest.mark.slow
def test_follow_prints_each_version_as_it_lands_and_stops_on_sigterm(tmp_path: Path) -> None:
    store, t = _table(tmp_path)
    t.ingest(_batch("a", 1))
    proc = subprocess.Popen(
        [str(SCRIPT), "changes", "events", "--from", "0", "--follow", "--json",
         "--poll-seconds", "0.05", "--store", store],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        assert proc.stdout is not None
        first = json.loads(proc.stdout.readline())  # the changes so far
        assert (first["k"], first["_change_type"]) == ("a", "insert")
        t.upsert(_batch("a", 5))
        pre, post = json.loads(proc.stdout.readline()), json.loads(proc.stdout.readline())
        assert (pre["v"], pre["_change_type"]) == (1, "update_preimage")
        assert (post["v"], post["_change_type"]) == (5, "update_postimage")
        assert post["_commit_version"] == t.version
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert out == ""
    assert "stopping: following events" in err
    assert "Traceback" not in err
