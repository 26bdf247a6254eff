"""Damaged metadata is named, never fatal to the rest: a log entry with a non-numeric time, a
bad tag object, a corrupt catalog entry; and a restore racing an ingest never undoes it.

Each damage is reported as ``CorruptMetadataError`` naming the table and the object's key;
GC keeps whatever an unreadable tag might protect; ``maintain --loop`` reports a damaged table
and goes on maintaining the others, retrying the damaged one every round.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import sediment as sd
from helpers import make_table, rows
from sediment.cli import app
from sediment.errors import CommitConflictError, CorruptMetadataError
from sediment.files.writer import new_data_filename
from sediment.maintenance import continuous
from sediment.state import pending
from sediment.state.log import log_key
from sediment.state.snapshot import snapshot_key
from sediment.workload import benchmark_schema
from support.internals import write_sorted_file
from support.races import as_another_process

SCHEMA = benchmark_schema()
GC_NOW = {"gc.delay_seconds": 0, "retention.seconds": 0, "gc.clock_skew_seconds": 0}
SRC = str(Path(__file__).resolve().parents[2] / "src")


def corrupt_time(table: sd.Table) -> str:
    """Give the table's last log entry a commit time that is not a number; returns its key."""
    objects = table._handle.objects
    key = log_key(table.version)
    doc = json.loads(objects.get(key))
    doc.pop("crc32")  # an unsealed entry (as written before seals) with the damage
    doc["time"] = "yesterday"
    objects.put(key, json.dumps(doc).encode())
    return key


def reopened(table: sd.Table) -> sd.Table:
    """The table as another process sees it (nothing cached)."""
    return as_another_process(sd.Store.open(table.store.uri).table(table.name))


def compacted(tmp_path: Path, **props: Any) -> tuple[sd.Table, list[str]]:
    """Three files compacted into one, the three inputs unreferenced and due for GC."""
    table = make_table(tmp_path / "store", **{"compaction.strategy": "basic",
                                               "compaction.batch_size": 3, **GC_NOW, **props})
    for i in range(3):
        table.ingest(rows(50, i))
    inputs = [r.filename for r in table.files()]
    assert table.compact().jobs_committed == 1
    return table, inputs


# ---- a log entry with a non-numeric time -----------------------------------------------------
READERS: dict[str, Callable[[sd.Table], object]] = {
    "query": lambda t: t.query(), "history": lambda t: t.history(), "gc": lambda t: t.gc(),
    "version": lambda t: t.version,
}


@pytest.mark.parametrize("reader", sorted(READERS))
def test_non_numeric_log_time_is_corrupt_metadata(tmp_path: Path, reader: str) -> None:
    """Queries, history, GC and the version all raise CorruptMetadataError naming the table
    and the entry's key (it was a raw ValueError from float())."""
    table = make_table(tmp_path / "store", name="events")
    table.ingest(rows(20, 1))
    key = corrupt_time(table)
    with pytest.raises(CorruptMetadataError) as e:
        READERS[reader](reopened(table))
    assert "table events" in str(e.value) and key in str(e.value)
    assert "not a number: 'yesterday'" in str(e.value)


def test_non_dict_catalog_entry_is_corrupt_metadata(tmp_path: Path) -> None:
    """A catalog entry that is JSON but not an object (it was an AttributeError)."""
    store = sd.Store.open(str(tmp_path / "store"), create=True)
    store.objects.put("catalog/odd.json", b"[1, 2]")
    with pytest.raises(CorruptMetadataError, match=r"catalog entry catalog/odd\.json .*not a "
                                                   r"JSON object"):
        store.table("odd")


# ---- bad tags --------------------------------------------------------------------------------
BAD_TAGS = {
    "not_json": b"{this is not json",
    "missing_version": json.dumps({"name": "bad", "version": 99, "created": 0.0}).encode(),
}


@pytest.mark.parametrize("damage", sorted(BAD_TAGS))
def test_gc_keeps_what_a_bad_tag_might_protect(tmp_path: Path, damage: str) -> None:
    """GC reports the bad tag (table and key) and deletes no unreferenced file, since the tag
    might pin a version that references any of them; deleting the tag lets GC go on."""
    table, inputs = compacted(tmp_path)
    table._handle.objects.put("tags/bad.json", BAD_TAGS[damage])
    r = table.gc()
    assert r.deleted == 0
    (problem,) = r.unreadable_tags
    assert f"table {table.name}" in problem and "tags/bad.json" in problem
    stored = {o.key for o in table._handle.objects.list("data/")}
    assert set(inputs) <= stored, "GC deleted a file the bad tag might protect"
    assert table.query().num_rows == 150
    if damage == "not_json":  # listing tags names it too, and says how to remove it
        with pytest.raises(CorruptMetadataError, match=r"tags/bad\.json .* --delete"):
            table.tags()
    table.delete_tag("bad")  # a damaged tag can be deleted
    assert table.gc().deleted == 3


def test_gc_with_a_bad_tag_still_honours_the_good_ones(tmp_path: Path) -> None:
    """A good tag's files are kept as before; the orphan pass (files no version referenced,
    which no tag can protect) still runs."""
    table, inputs = compacted(tmp_path)
    table.tag("before", 4)  # the version whose files are the three inputs
    table._handle.objects.put("tags/bad.json", b"\x00\xff")
    orphan = new_data_filename("root")
    data = rows(10, 9).sort_by([("key", "ascending"), ("timestamp", "ascending")])
    write_sorted_file(table._handle.objects, orphan, SCHEMA, table.properties, [data])
    pending.release(table._handle.objects, [orphan])
    r = table.gc(orphan_timeout=0)
    assert (r.deleted, r.orphans_deleted, len(r.unreadable_tags)) == (0, 1, 1)
    assert set(inputs) <= {o.key for o in table._handle.objects.list("data/")}


def test_prune_with_a_bad_tag_deletes_nothing(tmp_path: Path) -> None:
    """Prune cannot tell which version an unreadable tag pins: it deletes nothing, says why."""
    table, _ = compacted(tmp_path, **{"state.snapshot.interval": 2})
    table._handle.objects.put("tags/bad.json", b"nope")
    before = sorted(o.key for o in table._handle.objects.list(""))
    r = table.prune()
    assert (r.log_entries, r.snapshots, r.objects) == (0, 0, 0)
    assert "tags/bad.json" in r.note
    assert sorted(o.key for o in table._handle.objects.list("")) == before


# ---- maintain --loop -------------------------------------------------------------------------
@pytest.mark.slow  # a `sediment maintain --loop` process over several passes: the full lane
def test_maintain_loop_goes_on_past_corrupt_tables(tmp_path: Path) -> None:
    """One table's log entry has a non-numeric time, another's catalog entry is not JSON:
    ``maintain --loop`` reports both every round (on stderr and in its rows), retries them,
    and compacts the healthy table."""
    root = str(tmp_path / "store")
    store = sd.Store.open(root, create=True)
    props = {"compaction.strategy": "basic", "compaction.batch_size": 3, **GC_NOW}
    healthy = store.create_table("healthy", SCHEMA, properties=props)
    broken = store.create_table("broken", SCHEMA, properties=props)
    for i in range(3):
        healthy.ingest(rows(40, i))
        broken.ingest(rows(40, 10 + i))
    key = corrupt_time(broken)
    store.objects.put("catalog/garbled.json", b"{not json")
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}
    loop = subprocess.run([sys.executable, "-m", "sediment.cli", "maintain", "--store", root,
                           "--json", "--loop", "--max-loops", "3", "--interval", "0.01"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert loop.returncode == 0, loop.stderr
    assert "Traceback" not in loop.stderr
    out = [json.loads(line) for line in loop.stdout.splitlines()]  # JSON lines
    assert all(isinstance(r, dict) for r in out)
    # the store steps ("(unnamed tables)": which folders no catalog entry names, which the
    # garbled entry keeps it from telling) run on the GC thread: their row is in the rounds
    # they finished in, not in every round
    steps = [r for r in out if r["table"].startswith("(")]
    assert all("catalog/garbled.json" in str(r.get("error")) for r in steps), steps
    lines = [r for r in out if not r["table"].startswith("(")]
    tables = {r["table"] for r in lines}
    assert tables == {"broken", "garbled", "healthy"}
    assert len(lines) == 3 * len(tables)
    for n in range(3):  # every round: the damaged ones reported (so retried), healthy fine
        by_table = {r["table"]: r for r in lines[n * len(tables):(n + 1) * len(tables)]}
        assert "CorruptMetadataError" in by_table["broken"]["error"]
        assert key in by_table["broken"]["error"]
        assert "catalog/garbled.json" in by_table["garbled"]["error"]
        assert "error" not in by_table["healthy"]
    assert "maintain: table broken: CorruptMetadataError: log entry" in loop.stderr
    assert "maintain: table garbled: CorruptMetadataError" in loop.stderr
    assert len(sd.Store.open(root).table("healthy").files()) == 1  # it was compacted


@pytest.mark.slow  # a `sediment maintain --loop` process over several passes: the full lane
def test_maintain_loop_reports_a_bad_tag(tmp_path: Path) -> None:
    """GC's report of an unreadable tag reaches the loop's rows; the table is still
    maintained and its unreferenced files kept."""
    table, inputs = compacted(tmp_path)
    table._handle.objects.put("tags/bad.json", b"{")
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}
    loop = subprocess.run([sys.executable, "-m", "sediment.cli", "maintain", "--store",
                           str(tmp_path / "store"), "--json", "--loop", "--max-loops", "1",
                           "--interval", "0.01"], capture_output=True, text=True, env=env,
                          timeout=120)
    assert loop.returncode == 0, loop.stderr
    (row,) = [json.loads(line) for line in loop.stdout.splitlines()]
    assert "gc kept every unreferenced file" in row["error"] and "tags/bad.json" in row["error"]
    assert set(inputs) <= {o.key for o in table._handle.objects.list("data/")}


# ---- a restore racing another writer ---------------------------------------------------------
def race(monkeypatch: pytest.MonkeyPatch, table: sd.Table,
         other: Callable[[sd.Table], object]) -> None:
    """Run ``other`` on a second handle of ``table`` between restore's read of the old
    version and its commit (the race window)."""
    second = reopened(table)
    read = sd.Table._readable_state

    def racing(self: sd.Table, version: int | str) -> Any:
        state = read(self, version)
        other(second)
        return state

    monkeypatch.setattr(sd.Table, "_readable_state", racing)


def test_restore_racing_an_ingest_keeps_the_ingest(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The ingest committed during the restore is not undone: CommitConflictError names the
    table, the version and what to do, and nothing is committed (it used to restore over the
    ingest, silently dropping its records)."""
    table = make_table(tmp_path / "store", name="events")
    table.ingest(rows(30, 1))
    table.ingest(rows(30, 2))
    race(monkeypatch, table, lambda t: t.ingest(rows(30, 3)))
    with pytest.raises(CommitConflictError, match=r"table events: version 4 \(add_files: .*"
                                                  r"while version 2 was being restored.*"
                                                  r"Restore again"):
        table.restore(2)
    monkeypatch.undo()
    assert table.version == 4 and table.query().num_rows == 90
    assert table.restore(2) == 5  # asked again: the ingest is discarded as asked
    assert table.query().num_rows == 30


def test_restore_racing_a_compaction_restores(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A compaction leaves the content as it was: the restore plans again over it."""
    table = make_table(tmp_path / "store", **{"compaction.strategy": "basic",
                                               "compaction.batch_size": 2})
    table.ingest(rows(30, 1))
    table.ingest(rows(30, 2))
    table.ingest(rows(30, 3))
    expected = table.query(version=2)
    race(monkeypatch, table, lambda t: t.compact(full=True))
    v = table.restore(2)
    assert table.history()[-1].kind == "restore" and v == table.version
    assert table.query().equals(expected)


@pytest.mark.parametrize("gc_every", [0.0, 3600.0])
def test_maintainer_survives_any_table_failure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               gc_every: float) -> None:
    """Even a failure that is no SedimentError (a bug) in one table is reported in every
    report row of it and the other table is compacted; the failing table is tried again once
    a GC period (``--interval``), not on every tick."""
    store = sd.Store.open(str(tmp_path / "store"), create=True)
    props = {"compaction.strategy": "basic", "compaction.batch_size": 3, **GC_NOW}
    tables = [store.create_table(n, SCHEMA, properties=props) for n in ("healthy", "buggy")]
    for t in tables:
        for i in range(3):
            t.ingest(rows(20, i))
    tries: list[float] = []
    real = continuous.Maintainer._tick_table

    def tick_table(self: continuous.Maintainer, t: Any, now: float, *args: Any) -> int:
        if t.name == "buggy":
            tries.append(now)
            raise RuntimeError("a bug")
        return real(self, t, now, *args)

    monkeypatch.setattr(continuous.Maintainer, "_tick_table", tick_table)
    reports: list[list[dict[str, object]]] = []
    continuous.Maintainer(lambda: tables, threads=1, tick_seconds=0.01, gc_every=gc_every
                          ).run(report_every=0.05, max_reports=3, on_report=reports.append)
    assert len(reports) == 3
    for rows_ in reports:
        by_table = {r["table"]: r for r in rows_}
        assert by_table["buggy"]["error"] == "RuntimeError: a bug"
        assert "error" not in by_table.get("healthy", {})
    assert len(store.table("healthy").files()) == 1
    assert (len(tries) == 1) == (gc_every == 3600.0)


@pytest.mark.parametrize("command", ["gc", "maintain"])
def test_single_pass_reports_a_bad_tag(tmp_path: Path, command: str) -> None:
    """``sediment gc`` / ``maintain`` (one pass) succeed, keep the files, and say on stderr and
    in the row that a tag could not be read."""
    table, inputs = compacted(tmp_path)
    table._handle.objects.put("tags/bad.json", b"{")
    result = CliRunner().invoke(app, [command, "--store", str(tmp_path / "store"), "--json"])
    assert result.exit_code == 0, (result.stdout, result.stderr, result.exception)
    (row,) = json.loads(result.stdout)
    assert "tags/bad.json" in row["error"] and row["deleted"] == 0
    assert f"{command}: table {table.name}: gc kept every unreferenced file" in result.stderr
    assert set(inputs) <= {o.key for o in table._handle.objects.list("data/")}


def test_malformed_snapshot_falls_back_to_the_log(tmp_path: Path) -> None:
    """A snapshot pointer of the wrong shape (its jobs a list: an AttributeError before) is
    damage like any other: loading uses an older snapshot and replays the log; queries and
    diff still answer."""
    table = make_table(tmp_path / "store", **{"state.snapshot.interval": 2})
    for i in range(3):
        table.ingest(rows(20, i))  # versions 2..4: snapshots at 2 and 4
    expected = table.query()
    objects = table._handle.objects
    doc = json.loads(objects.get(snapshot_key(4)))
    doc.pop("crc32")  # an unsealed pointer (as written before seals) with the damage
    doc["jobs"] = [1]
    objects.put(snapshot_key(4), json.dumps(doc).encode())
    again = reopened(table)
    assert again.query().equals(expected)
    assert again.diff(2, 4).records_change == 40
