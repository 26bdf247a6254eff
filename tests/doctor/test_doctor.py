"""``sediment doctor [--json] --store URI``: a healthy store passes (exit 0, no finding); each
kind of damage or leftover made by hand below is found, named by its check with what to do,
and makes the command exit 1 (after printing); one run is a real process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from typer.testing import CliRunner, Result

import sediment as sd
from sediment.cli import app
from sediment.compaction.runner import create_jobs
from sediment.dump.lock import LOCK_KEY
from sediment.ingest.batcher_store import JOBS, put_json
from sediment.state.log import log_key
from sediment.state.snapshot import snapshot_key

SCHEMA = sd.Schema(row_keys=[("k", pa.string())], values=[("v", pa.int64())])
HOURS_AGO = time.time() - 3 * 3600


@pytest.fixture(autouse=True)
def _no_store_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SEDIMENT_STORE", raising=False)


def _table(root: Path, name: str = "t", **props: Any) -> sd.Table:
    store = sd.Store.open(str(root), create=True)
    table = store.create_table(name, SCHEMA, properties=props)
    for i in range(3):
        table.ingest(pa.table({"k": [f"k{i}"], "v": [i]}))
    return table


def _doctor(root: Path, *args: str) -> tuple[Result, dict[str, Any]]:
    result = CliRunner().invoke(app, ["doctor", "--store", str(root), "--json", *args])
    return result, json.loads(result.stdout)


def _checks(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {f["check"]: f for f in doc["findings"]}


def _local(table: sd.Table, key: str) -> Path:
    return Path(table._handle.objects.local_path(key) or "")


def _aged(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    os.utime(path, (HOURS_AGO, HOURS_AGO))


def test_a_healthy_store_passes(tmp_path: Path) -> None:
    table = _table(tmp_path / "s")
    table.tag("v1")
    table.compact(full=True)
    _table(tmp_path / "s", "other")
    result, doc = _doctor(tmp_path / "s")
    assert result.exit_code == 0, result.stdout
    assert doc["ok"] is True and doc["findings"] == [] and doc["tables"] == ["other", "t"]
    text = CliRunner().invoke(app, ["doctor", "--store", str(tmp_path / "s")])
    assert text.exit_code == 0
    assert text.stdout.splitlines() == [f"store {doc['store']}: 2 tables checked",
                                        "ok: nothing needs attention"]


def test_damaged_metadata_is_found(tmp_path: Path) -> None:
    table = _table(tmp_path / "s", **{"state.snapshot.interval": 2})
    table.tag("v1")
    table.ingest(pa.table({"k": ["k9"], "v": [9]}))  # versions 1-5: snapshots at 2 and 4
    _local(table, "tags/v1.json").write_text("not json")
    _local(table, log_key(3)).unlink()
    snapshot = _local(table, snapshot_key(4))
    snapshot.write_bytes(snapshot.read_bytes()[:-7])
    result, doc = _doctor(tmp_path / "s")
    assert result.exit_code == 1 and doc["ok"] is False
    found = _checks(doc)
    assert {"unreadable_tag", "log_gap", "unreadable_snapshot"} <= set(found)
    assert log_key(3) in found["log_gap"]["problem"]
    assert "sediment verify t" in found["log_gap"]["action"]
    assert "sediment tag t v1 --delete" in found["unreadable_tag"]["action"]
    assert snapshot_key(4) in found["unreadable_snapshot"]["problem"]
    assert all(f["table"] == "t" and f["attention"] for f in doc["findings"])


def _leftovers(root: Path) -> sd.Table:
    """A table with a dead pending-file lease, an orphan past the orphan timeout, a dump
    whose heartbeat stopped and a batcher job abandoned by its runner; a maintainer killed
    hours ago (its heartbeat left) and one beating now."""
    table = _table(root)
    for name, age in (("killed", HOURS_AGO), ("running", time.time())):
        member = root / "maintainers" / "members" / f"{name}.json"
        member.parent.mkdir(parents=True, exist_ok=True)
        member.write_text(json.dumps({"member": name, "host": "h", "pid": 1, "timeout": 10.0,
                                      "leases": []}))
        os.utime(member, (age, age))
    _aged(_local(table, "pending/dead-writer.json"), b"{}")
    _aged(_local(table, "data/root/orphan.parquet"), b"written by a killed writer")
    _aged(_local(table, LOCK_KEY), json.dumps({"job_id": "d1", "root": "/dumps/x"}).encode())
    put_json(table._handle, f"{JOBS}b1.json", {"id": "b1", "state": "staged",
                                                "created": HOURS_AGO, "updated": HOURS_AGO})
    return table


def test_leftovers_past_their_time_are_found(tmp_path: Path) -> None:
    _leftovers(tmp_path / "s")
    result, doc = _doctor(tmp_path / "s")
    assert result.exit_code == 1
    found = _checks(doc)
    assert set(found) == {"stale_lease", "orphans_due", "dump_stuck", "batcher_stuck",
                          "maintainer_stopped"}
    assert "maintainers/members/killed.json" in found["maintainer_stopped"]["problem"]
    assert "the 1 running took its leases" in found["maintainer_stopped"]["action"]
    assert found["maintainer_stopped"]["table"] is None
    assert [f["check"] for f in doc["findings"]].count("maintainer_stopped") == 1
    assert "pending/dead-writer.json" in found["stale_lease"]["problem"]
    assert "sediment gc" in found["stale_lease"]["action"]
    assert "data/root/orphan.parquet" in found["orphans_due"]["problem"]
    assert "d1" in found["dump_stuck"]["problem"]
    assert "sediment dump t /dumps/x --abandon" in found["dump_stuck"]["action"]
    assert "sediment batcher run t" in found["batcher_stuck"]["action"]


def test_crowded_leaves_and_stalled_jobs_are_found(tmp_path: Path) -> None:
    table = _table(tmp_path / "s", **{"compaction.strategy": "basic",
                                      "compaction.batch_size": 2})
    table.set_properties({"ingest.stall_files": 2, "compaction.job_timeout_seconds": 0})
    (job,) = create_jobs(table._handle, full=True)  # assigned, never run: its runner "died"
    result, doc = _doctor(tmp_path / "s")
    assert result.exit_code == 1
    found = _checks(doc)
    assert set(found) == {"files_per_leaf", "stalled_jobs"}
    assert "more than 2 files (most: root, 3 files)" in found["files_per_leaf"]["problem"]
    assert job.job_id in found["stalled_jobs"]["problem"]
    assert "sediment maintain --loop" in found["stalled_jobs"]["action"]


def test_the_command_as_a_process(tmp_path: Path) -> None:
    """The installed command, in its own process: the findings of a store with leftovers
    as JSON on stdout, exit status 1."""
    _leftovers(tmp_path / "s")
    done = subprocess.run([sys.executable, "-m", "sediment.cli", "doctor", "--store",
                           str(tmp_path / "s"), "--json"], capture_output=True, text=True,
                          timeout=120, env={k: v for k, v in os.environ.items()
                                            if k != "SEDIMENT_STORE"})
    assert done.returncode == 1, done.stderr
    doc = json.loads(done.stdout)
    assert doc["ok"] is False and len(doc["findings"]) == 5


def test_a_stopped_maintainer_alone_is_said_to_leave_its_tables_unmaintained(
        tmp_path: Path) -> None:
    _table(tmp_path / "s")
    member = tmp_path / "s" / "maintainers" / "members" / "only.json"
    member.parent.mkdir(parents=True, exist_ok=True)
    member.write_text(json.dumps({"member": "only", "host": "h", "pid": 1, "timeout": 10.0,
                                  "leases": []}))
    os.utime(member, (HOURS_AGO, HOURS_AGO))
    result, doc = _doctor(tmp_path / "s")
    action = _checks(doc)["maintainer_stopped"]["action"]
    assert "no other maintainer is running" in action and "took its leases" not in action
