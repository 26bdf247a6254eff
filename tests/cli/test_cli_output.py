"""What commands print, consistently: ``--json`` times in ISO 8601 UTC, ``compact --json`` in
``CompactionResult``'s names, ``report tasks`` rounded with short ids, ``maintain --loop`` one
line per interval under a legend, ``dump --print-manifest`` the path alone, and ``serve`` /
``dashboard`` on a busy port one ``error:`` line (real processes on a port this test holds)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner, Result

import sediment as sd
from helpers import rows, stop_process
from sediment.cli import app
from sediment.compaction.runner import CompactionResult
from sediment.workload import benchmark_schema

SCHEMA = benchmark_schema()
PROPS = {"state.cache.refresh_seconds": 0, "compaction.strategy": "basic",
         "compaction.batch_size": 3}
ISO_UTC = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
HEX_ID = re.compile(r"\b[0-9a-f]{16,}\b")
LONG_FLOAT = re.compile(r"\d+\.\d{4,}")


@pytest.fixture(autouse=True)
def _no_store_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SEDIMENT_STORE", raising=False)


@pytest.fixture
def root(tmp_path: Path) -> str:
    """A store with table ``events``: 3 ingests (files), compacted once (jobs and events)."""
    where = str(tmp_path / "store")
    t = sd.Store.open(where, create=True).create_table("events", SCHEMA, properties=PROPS)
    for i in range(3):
        t.ingest(rows(200, seed=i))
    t.compact()
    return where


def ok(*args: str) -> Result:
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 0, (result.stdout, result.stderr, result.exception)
    return result


def js(*args: str) -> Any:
    return json.loads(ok(*args, "--json").stdout)


def assert_recent_iso(value: Any) -> None:
    """An ISO 8601 UTC time (as ``history --json`` prints) within the last hour or next day."""
    assert isinstance(value, str) and ISO_UTC.match(value), value
    when = dt.datetime.fromisoformat(value)
    assert when.tzinfo is not None and when.utcoffset() == dt.timedelta(0)
    now = dt.datetime.now(dt.UTC)
    assert now - dt.timedelta(hours=1) < when < now + dt.timedelta(days=1), value


def test_json_times_are_iso_utc_in_every_command(root: str, tmp_path: Path) -> None:
    ok("tag", "events", "v1", "--store", root)
    pin = js("pin", "events", "reader", "--ttl", "600", "--store", root)
    assert_recent_iso(pin["expires"])
    tags = js("tags", "events", "--store", root)
    for t in tags:
        assert_recent_iso(t["created"])
    assert [t["expires"] for t in tags if t["tag"] == "v1"] == [None]
    for t in js("describe", "events", "--store", root)["tags"]:
        assert_recent_iso(t["created"])
    for h in js("history", "events", "--store", root):
        assert_recent_iso(h["time"])
    tasks = js("report", "tasks", "--table", "events", "--store", root)
    assert tasks and all(ISO_UTC.match(t["time"]) for t in tasks)
    assert [t["time"] for t in tasks] == sorted(t["time"] for t in tasks)
    jobs = js("report", "jobs", "--table", "events", "--store", root)
    assert jobs
    for j in jobs:
        assert_recent_iso(j["created"])
        assert_recent_iso(j["updated"])
    pq.write_table(rows(10, seed=9), tmp_path / "more.parquet")
    (queued,) = js("batcher", "submit", "events", str(tmp_path / "more.parquet"),
                   "--store", root)["submitted"]
    assert_recent_iso(queued["submitted"])
    # durations stay numbers
    assert isinstance(js("compact", "--store", root)[0]["seconds"], float)


def test_compact_json_uses_compaction_result_names(root: str) -> None:
    table = sd.Store.open(root).table("events")
    for i in range(3):
        table.ingest(rows(50, seed=10 + i))
    (row,) = js("compact", "--store", root, "--table", "events")
    names = {f.name for f in dataclasses.fields(CompactionResult)} - {"errors"}
    assert set(row) == names | {"table"}
    assert row["jobs_created"] == row["jobs_committed"] == 1
    assert row["references_pushed_down"] == 0 and row["jobs_failed"] == 0


def test_report_tasks_rounds_numbers_and_shortens_ids(root: str) -> None:
    tasks = js("report", "tasks", "--table", "events", "--store", root)
    compaction = [t for t in tasks if t["kind"] == "compaction"]
    assert compaction and len(compaction[0]["job_id"]) == 32  # JSON keeps the whole id
    text = CliRunner(env={"COLUMNS": "250"}).invoke(
        app, ["report", "tasks", "--table", "events", "--store", root]).stdout
    assert f"{len(tasks)} events" in text
    assert compaction[0]["job_id"][:8] in text and compaction[0]["partition_id"][:8] in text
    assert not HEX_ID.search(text), text
    assert not LONG_FLOAT.search(text), text
    assert "rows_per_second=" in text and "/s" in text


def test_maintain_loop_prints_one_line_per_interval_under_a_legend(root: str) -> None:
    sd.Store.open(root).create_table("other", SCHEMA, properties=PROPS)
    out = ok("maintain", "--store", root, "--loop", "--interval", "0.1", "--max-loops", "3",
             "--workers", "thread").stdout.splitlines()
    header = next(i for i, line in enumerate(out) if line.startswith("time "))
    legend, lines = out[:header], out[header + 1:]
    assert legend[0].startswith("maintain --loop: a line every 0.1 s")
    for column in out[header].split()[1:]:
        assert f"{column}:" in "\n".join(legend), column  # every column explained
    assert len(lines) == 3, out  # one per interval, two tables or not
    for line in lines:
        when, tables, *numbers = line.split()
        assert ISO_UTC.match(when) and tables == "2", line
        assert len(numbers) == len(out[header].split()) - 2


def test_dump_print_manifest_prints_only_the_path(root: str, tmp_path: Path) -> None:
    result = ok("dump", "events", str(tmp_path / "exports"), "--print-manifest",
                "--store", root)
    assert result.stdout.count("\n") == 1
    manifest = result.stdout.strip()
    assert manifest.endswith("/job-manifest.json") and Path(manifest).is_file()
    ok("load", manifest, "copy", "--store", root)
    assert sd.Store.open(root).table("copy").describe()["records"] == 600
    both = CliRunner().invoke(app, ["dump", "events", str(tmp_path / "e2"), "--print-manifest",
                                    "--json", "--store", root])
    assert both.exit_code == 1 and both.stderr.startswith("error: --print-manifest")


# ---- servers: real processes ---------------------------------------------------------------
def _env(root: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SEDIMENT_")}
    return {**env, "SEDIMENT_STORE": root, **extra}


def _sediment(*args: str) -> list[str]:
    return [sys.executable, "-m", "sediment.cli", *args]


@pytest.mark.parametrize("command", ["serve", "dashboard"])
def test_a_busy_port_is_one_error_line(root: str, command: str) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        done = subprocess.run(_sediment(command, "--port", str(port)), env=_env(root),
                              capture_output=True, text=True, timeout=120,
                              stdin=subprocess.DEVNULL)
    assert done.returncode != 0
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    assert f"127.0.0.1:{port}" in lines[0] and "Address already in use" in lines[0]
    assert done.stdout == ""


def test_serve_start_line_says_a_token_is_required(root: str) -> None:
    proc = subprocess.Popen(_sediment("serve", "--port", "0", "--token-env", "TEST_TOKEN"),
                            env=_env(root, TEST_TOKEN="s3cret"), stderr=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, stdin=subprocess.DEVNULL, text=True)
    try:
        assert proc.stderr is not None
        deadline = time.monotonic() + 120
        line = ""
        while "serving" not in line and time.monotonic() < deadline:
            line = proc.stderr.readline()
            assert line or proc.poll() is None, "serve exited before its start line"
        assert "serving" in line and line.rstrip().endswith("(token required)"), line
    finally:
        stop_process(proc)
