"""CLI commands for versions, dumps and loads: tag, tags, diff, restore, prune, dump, load
(plus history), through typer's CliRunner, human and ``--json`` output, and clean errors."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

import sediment as sd
from helpers import rows
from reference import Reference, assert_matches
from sediment.cli import app
from sediment.dump.dump import LOCK_KEY
from sediment.workload import benchmark_schema

SCHEMA = benchmark_schema()


@pytest.fixture(autouse=True)
def _no_store_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SEDIMENT_STORE", raising=False)


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


def run(runner: CliRunner, *args: str) -> Result:
    return runner.invoke(app, list(args))


def ok(runner: CliRunner, *args: str) -> Result:
    result = run(runner, *args)
    assert result.exit_code == 0, (result.stdout, result.stderr, result.exception)
    return result


def js(runner: CliRunner, *args: str) -> Any:
    return json.loads(ok(runner, *args, "--json").stdout)


def fails(runner: CliRunner, *args: str) -> str:
    result = run(runner, *args)
    assert result.exit_code == 1, (result.stdout, result.stderr, result.exception)
    assert isinstance(result.exception, SystemExit)
    assert result.stderr.startswith("error: "), result.stderr
    assert "Traceback" not in result.output
    return result.stderr


@pytest.fixture
def setup(tmp_path: Path) -> tuple[str, sd.Table, Reference]:
    """A store with table ``events`` (3 leaves) holding three ingests (versions 2..4)."""
    store = str(tmp_path / "store")
    table = sd.Store.open(store, create=True).create_table(
        "events", SCHEMA, split_points=["g", "p"],
        properties={"state.cache.refresh_seconds": 0, "gc.delay_seconds": 0, "retention.seconds": 0,
                    "gc.clock_skew_seconds": 0,
                    "state.snapshot.interval": 2, "compaction.strategy": "basic",
                    "compaction.batch_size": 3})
    ref = Reference(SCHEMA)
    for i in range(3):
        data = rows(150, i)
        table.ingest(data)
        ref.add(data)
    return store, table, ref


def test_tag_tags_and_delete(runner: CliRunner, setup: tuple[str, sd.Table, Reference]
                             ) -> None:
    store, table, _ = setup
    assert js(runner, "tag", "events", "v2", "--version", "2", "--store", store) == {
        "table": "events", "tag": "v2", "version": 2}
    out = ok(runner, "tag", "events", "latest", "--store", store).stdout
    assert "tagged version 4 of events as latest" in out
    tags = js(runner, "tags", "events", "--store", store)
    assert [(t["tag"], t["version"]) for t in tags] == [("v2", 2), ("latest", 4)]
    assert all(t["created"].endswith("Z") for t in tags)  # ISO 8601 UTC
    human = ok(runner, "tags", "events", "--store", store).stdout
    assert "v2" in human and "latest" in human
    assert [(t.name, t.version) for t in table.tags()] == [("v2", 2), ("latest", 4)]

    assert "already exists" in fails(runner, "tag", "events", "v2", "--store", store)
    for bad in ("12", "../x", "a/b"):
        assert "invalid tag name" in fails(runner, "tag", "events", bad, "--store", store)
    assert "no version" in fails(runner, "tag", "events", "x", "--version", "99",
                                 "--store", store)
    assert js(runner, "tag", "events", "v2", "--delete", "--store", store) == {
        "table": "events", "deleted": "v2"}
    assert "no tag" in fails(runner, "tag", "events", "v2", "--delete", "--store", store)
    assert [t["tag"] for t in js(runner, "tags", "events", "--store", store)] == ["latest"]
    assert "no table" in fails(runner, "tags", "nosuch", "--store", store)


def test_history_and_diff(runner: CliRunner, setup: tuple[str, sd.Table, Reference]) -> None:
    store, table, _ = setup
    hist = js(runner, "history", "events", "--store", store)
    assert [h["version"] for h in hist] == [1, 2, 3, 4]
    assert [h["kind"] for h in hist] == ["initialise"] + ["add_files"] * 3
    ok(runner, "tag", "events", "start", "--version", "2", "--store", store)

    d = js(runner, "diff", "events", "2", "4", "--store", store)
    files2 = {r.filename for r in table.files(2)}
    files4 = {r.filename for r in table.files(4)}
    assert d["from_version"] == 2 and d["to_version"] == 4
    assert set(d["files_added"]) == files4 - files2 and len(d["files_added"]) == 6
    assert d["files_removed"] == [] and d["partitions_added"] == []
    assert d["records_change"] == 300 and d["references_added"] == 6
    # by tag, with the latest version as the default end
    assert js(runner, "diff", "events", "start", "--store", store) == d
    back = js(runner, "diff", "events", "4", "start", "--store", store)
    assert set(back["files_removed"]) == set(d["files_added"])
    assert back["records_change"] == -300
    human = ok(runner, "diff", "events", "2", "4", "--store", store).stdout
    assert "diff 2 -> 4" in human and "records_change" in human
    assert "no version" in fails(runner, "diff", "events", "2", "40", "--store", store)
    assert "no tag" in fails(runner, "diff", "events", "nosuch", "--store", store)


def test_restore_and_prune(runner: CliRunner, setup: tuple[str, sd.Table, Reference],
                           no_prune_grace: None) -> None:
    store, table, ref = setup
    table.compact()
    assert js(runner, "restore", "events", "3", "--store", store) == {
        "table": "events", "restored": "3", "version": table.version}
    assert table.history()[-1].kind == "restore"
    assert_matches(table.query(), ref.upto(2))
    ok(runner, "tag", "events", "full", "--version", "4", "--store", store)
    out = ok(runner, "restore", "events", "full", "--store", store).stdout
    assert f"restored events to full as version {table.version}" in out
    assert_matches(table.query(), ref)
    # the version before compaction lost its files to GC: restore fails cleanly
    table.delete_tag("full")
    table.compact()
    table.gc()
    assert "garbage collection deleted" in fails(runner, "restore", "events", "2", "--store",
                                                 store)

    head = table.version
    r = js(runner, "prune", "events", "--store", store)
    assert set(r) == {"log_entries", "snapshots", "objects"}
    assert r["log_entries"] > 0 and r["snapshots"] > 0
    first = js(runner, "history", "events", "--store", store)[0]["version"]
    assert first > 2 and js(runner, "history", "events", "--store", store)[-1]["version"] == head
    err = fails(runner, "diff", "events", "2", "--store", store)
    assert "pruned" in err or "no version" in err
    assert "pruned" in ok(runner, "prune", "events", "--store", store).stdout
    assert_matches(table.query(), ref)


def test_dump_and_load(runner: CliRunner, setup: tuple[str, sd.Table, Reference],
                       tmp_path: Path) -> None:
    store, table, ref = setup
    root = str(tmp_path / "dumps")
    ok(runner, "tag", "events", "two", "--version", "3", "--store", store)
    job = js(runner, "dump", "events", root, "--store", store)
    assert job["version"] == 4 and job["rows"] == 450 and job["tasks"] == 3
    assert job["resumed_tasks"] == 0 and job["manifest"].endswith("/job-manifest.json")
    assert Path(job["manifest"]).exists()
    loaded = js(runner, "load", job["manifest"], "copy", "--store", store)
    assert loaded["table"] == "copy" and loaded["records"] == 450 and loaded["files"] == 3
    assert loaded["loaded_records"] == 450 and loaded["replayed"] is False
    # the same dump again (a retry): answered with the first load's version, nothing added
    again = js(runner, "load", job["manifest"], "copy", "--store", store)
    assert again["replayed"] is True and again["version"] == loaded["version"]
    assert again["records"] == 450
    assert_matches(sd.Store.open(store).table("copy").query(), ref)

    # a key range at a tagged version, with the human output
    out = ok(runner, "dump", "events", root, "--range", "[d,s)", "--version", "two",
             "--store", store).stdout
    assert "dump" in out and "rows" in out
    manifests = sorted(Path(root).glob("*/job-manifest.json"), key=lambda p: p.stat().st_mtime)
    part = js(runner, "load", str(manifests[-1]), "part", "--store", store)
    rng = sd.Range("d", "s")
    assert_matches(sd.Store.open(store).table("part").query(), ref.upto(2), ranges=[rng])
    assert part["records"] == len(ref.upto(2).query(ranges=[rng]))
    # loading into the existing table (same schema) adds the dumped rows once more
    more = js(runner, "load", job["manifest"], "part", "--store", store)
    assert more["loaded_records"] == 450 and more["records"] == part["records"] + 450
    assert sd.Store.open(store).table("part").query().num_rows == part["records"] + 450

    # a corrupt dump fails naming the file, and creates nothing
    data = next(Path(root).glob(f"{job['job_id']}/task-00001/*/4-data.parquet"))
    data.write_bytes(data.read_bytes()[:-10])
    err = fails(runner, "load", job["manifest"], "broken", "--store", store)
    assert "task-00001" in err and "4-data.parquet" in err
    assert "broken" not in sd.Store.open(store).tables()
    assert "range" in fails(runner, "dump", "events", root, "--range", "d-s", "--store", store)


def test_dump_lock_and_abandon(runner: CliRunner, setup: tuple[str, sd.Table, Reference],
                               tmp_path: Path) -> None:
    store, table, ref = setup
    stale = {"job_id": uuid.uuid4().hex[:16], "root": str(tmp_path / "elsewhere"),
             "range": {"start": None, "end": None, "start_inclusive": True,
                       "end_inclusive": False},
             "version": 4, "started": 0.0, "heartbeat": 0.0}
    table._handle.objects.put(LOCK_KEY, json.dumps(stale).encode())
    err = fails(runner, "dump", "events", str(tmp_path / "dumps"), "--store", store)
    assert "abandon" in err and stale["job_id"] in err
    # a ROOT that is not the locked job's is refused, naming the job's
    err = fails(runner, "dump", "events", str(tmp_path / "other"), "--abandon", "--store", store)
    assert str(tmp_path / "elsewhere") in err and table._handle.objects.exists(LOCK_KEY)
    assert js(runner, "dump", "events", str(tmp_path / "elsewhere"), "--abandon", "--store",
              store) == {"table": "events", "abandoned": True, "job_id": stale["job_id"]}
    assert not table._handle.objects.exists(LOCK_KEY)
    assert js(runner, "dump", "events", str(tmp_path / "elsewhere"), "--abandon", "--store",
              store) == {"table": "events", "abandoned": False, "job_id": None}
    # a fresh heartbeat: the dump may be running, so its lock is kept unless --force
    fresh = {**stale, "heartbeat": time.time()}
    table._handle.objects.put(LOCK_KEY, json.dumps(fresh).encode())
    err = fails(runner, "dump", "events", str(tmp_path / "elsewhere"), "--abandon", "--store",
                store)
    assert "may be running" in err and table._handle.objects.exists(LOCK_KEY)
    assert js(runner, "dump", "events", str(tmp_path / "elsewhere"), "--abandon", "--force",
              "--store", store)["abandoned"] is True
    assert not table._handle.objects.exists(LOCK_KEY)
    job = js(runner, "dump", "events", str(tmp_path / "dumps"), "--store", store)
    js(runner, "load", job["manifest"], "copy", "--store", store)
    assert_matches(sd.Store.open(store).table("copy").query(), ref)
