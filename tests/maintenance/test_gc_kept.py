"""GC explains itself: ``GcResult.kept`` names why each file it did not delete stays (a tag, a
pin, retention, the GC delay, the clock-skew margin; a writer's lease, the orphan timeout),
with files, bytes and when it becomes due, checked against a computation of its own here; then
each class is deleted once (and only once) its time comes. Also ``sediment gc`` (text and
--json) and ``describe()["unreferenced_bytes"]``."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
from typer.testing import CliRunner

import sediment as sd
from helpers import make_table, rows
from sediment.cli import app
from sediment.files.writer import new_data_filename, with_sidecars
from sediment.maintenance.gc import GcResult, gc
from sediment.maintenance.kept import Kept
from sediment.state import pending
from sediment.workload import benchmark_schema
from support.internals import write_sorted_file

SCHEMA = benchmark_schema()
RETENTION, DELAY, SKEW, ORPHAN_TIMEOUT, PIN_TTL = 3600.0, 600.0, 300.0, 7200.0, 20000.0


def sizes(table: sd.Table) -> dict[str, int]:
    return {o.key: o.size for o in table._handle.objects.list("data/")}


def mtime(table: sd.Table, key: str) -> float:
    info = table._handle.objects.head(key)
    assert info is not None, key
    return info.mtime


def written(table: sd.Table, name: str) -> float:
    """When the last object of data file ``name`` (it or a sidecar) was written: GC deletes
    each object once it is old enough, so the file is gone when the last one is."""
    objects = table._handle.objects
    return max(o.mtime for k in with_sidecars([name], legacy=True)
               if (o := objects.head(k)) is not None)


def bytes_of(table: sd.Table, files: set[str]) -> int:
    """Bytes of ``files`` and their sidecars, as stored now."""
    present = sizes(table)
    return sum(present.get(k, 0) for k in with_sidecars(sorted(files), legacy=True))


def expect(table: sd.Table, files: set[str], dues: list[float | None]) -> dict[str, Any]:
    times = [d for d in dues if d is not None]
    return {"files": len(files), "bytes": bytes_of(table, files),
            "due": min(times) if times else None,
            "last_due": None if len(times) < len(dues) else max(times)}


def as_json(kept: dict[str, Kept]) -> dict[str, Any]:
    return {r: k.to_json() for r, k in kept.items()}


def uncommitted(table: sd.Table, seed: int) -> str:
    """A data file + sidecars written as a job writes them, never committed; its writer's
    lease released (so nothing but its age holds it)."""
    data = rows(20, seed).sort_by([("key", "ascending"), ("timestamp", "ascending")])
    name = new_data_filename("root")
    write_sorted_file(table._handle.objects, name, SCHEMA, table.properties, [data])
    pending.release(table._handle.objects, [name])
    return name


def leased(table: sd.Table, seed: int) -> tuple[str, float]:
    """An uncommitted file named by another writer's live lease; when the lease lapses."""
    name = uncommitted(table, seed)
    key = f"{pending.PENDING_PREFIX}{uuid.uuid4().hex}.json"
    table._handle.objects.put(key, json.dumps({"writer": "elsewhere:1",
                                               "files": [name]}).encode())
    return name, mtime(table, key) + pending.lease_timeout()


def test_each_reason_is_reported_then_deleted_when_due(tmp_path: Path) -> None:
    table = make_table(tmp_path, **{"compaction.strategy": "basic",
                                    "compaction.batch_size": 2, "retention.seconds": RETENTION,
                                    "gc.delay_seconds": DELAY, "gc.clock_skew_seconds": SKEW})
    h = table._handle
    table.ingest(rows(50, 1))
    table.ingest(rows(50, 2))
    first = {r.filename for r in table.files()}
    table.pin("job", table.version, PIN_TTL)  # keeps the first two files
    table.compact()
    (merged,) = {r.filename for r in table.files()}
    table.tag("keep")  # keeps the merged file
    table.ingest(rows(50, 3))
    third = {r.filename for r in table.files()} - {merged}
    table.compact()  # merged + third -> one: both unreferenced
    orphan = uncommitted(table, 4)
    lease_file, lapse = leased(table, 5)

    unref = dict(table.state().unreferenced)
    assert set(unref) == first | third | {merged}
    t0 = max(unref.values())
    pin_expires = mtime(table, "tags/job.json") + PIN_TTL
    orphan_due = written(table, orphan) + ORPHAN_TIMEOUT
    lease_due = max(lapse, written(table, lease_file) + ORPHAN_TIMEOUT)
    time_due = {f: unref[f] + RETENTION + SKEW for f in third}

    def run(now: float) -> GcResult:
        return gc(h, now=now, orphan_timeout=ORPHAN_TIMEOUT)

    # young: every reason but the clock-skew margin holds something
    r = run(t0 + 10)
    assert r.deleted == r.orphans_deleted == 0
    assert as_json(r.kept.unreferenced) == {
        "tag": expect(table, {merged}, [None]),
        "pin": expect(table, first, [pin_expires] * 2),
        "retention": expect(table, third, list(time_due.values())),
    }
    assert as_json(r.kept.orphans) == {
        "lease": expect(table, {lease_file}, [lease_due]),
        "orphan_timeout": expect(table, {orphan}, [orphan_due]),
    }
    assert r.kept.unreferenced["pin"].names == tuple(sorted(first))
    assert r.kept.bytes == bytes_of(table, first | third | {merged, orphan, lease_file})
    assert table.describe()["unreferenced_bytes"] == bytes_of(table, set(unref))
    assert table.describe()["orphan_bytes"] == bytes_of(table, {orphan, lease_file})

    # past retention, inside the margin; the lease lapsed: its file is an ordinary orphan
    r = run(t0 + RETENTION + 1)
    assert r.deleted == r.orphans_deleted == 0
    assert set(r.kept.unreferenced) == {"tag", "pin", "clock_skew"}
    assert r.kept.unreferenced["clock_skew"].to_json() == \
        expect(table, third, list(time_due.values()))
    assert as_json(r.kept.orphans) == {
        "orphan_timeout": expect(table, {orphan, lease_file},
                                 [orphan_due, written(table, lease_file) + ORPHAN_TIMEOUT])}

    # each due time: held a second before, deleted a second after
    assert run(min(time_due.values()) - 1).deleted == 0
    r = run(max(time_due.values()) + 1)
    assert r.deleted == len(third) and set(r.kept.unreferenced) == {"tag", "pin"}
    assert not set(with_sidecars(sorted(third), legacy=True)) & set(sizes(table))
    assert run(max(orphan_due, lease_due) - 1).orphans_deleted == 0
    r = run(max(orphan_due, lease_due) + 1)
    assert r.orphans_deleted == 2 and r.kept.orphans == {}
    assert run(pin_expires - 1).deleted == 0
    r = run(pin_expires + 1)
    assert r.deleted == len(first) and set(r.kept.unreferenced) == {"tag"}
    # the tag holds for ever; deleting it frees its file at the next pass
    assert run(t0 + 10 * PIN_TTL).deleted == 0
    table.delete_tag("keep")
    r = run(t0 + 10 * PIN_TTL)
    assert r.deleted == 1 and r.kept.files == 0 and r.kept.bytes == 0
    assert table.describe()["unreferenced_bytes"] == 0
    assert set(sizes(table)) == set(with_sidecars([r.filename for r in table.files()]))


def test_the_delay_and_the_margin(tmp_path: Path) -> None:
    """With a GC delay longer than retention, the delay is what holds young files, then the
    margin; lowering a setting moves them on at once (no pass is needed to notice)."""
    table = make_table(tmp_path, **{"compaction.strategy": "basic",
                                    "compaction.batch_size": 2, "retention.seconds": 0,
                                    "gc.delay_seconds": DELAY, "gc.clock_skew_seconds": SKEW})
    table.ingest(rows(30, 1))
    table.ingest(rows(30, 2))
    table.compact()
    unref = dict(table.state().unreferenced)
    t0 = max(unref.values())
    dues = [t + DELAY + SKEW for t in unref.values()]
    r = gc(table._handle, now=t0 + 1)
    assert as_json(r.kept.unreferenced) == {"gc_delay": expect(table, set(unref), dues)}
    r = gc(table._handle, now=t0 + DELAY + 1)
    assert as_json(r.kept.unreferenced) == {"clock_skew": expect(table, set(unref), dues)}
    # the "free the space now" recipe: no delay, no margin (retention is already 0)
    table.set_properties({"gc.delay_seconds": 0, "gc.clock_skew_seconds": 0})
    r = table.gc()
    assert r.deleted == 2 and r.kept.files == 0


def test_cli_gc_says_what_it_kept(tmp_path: Path) -> None:
    store = sd.Store.open(str(tmp_path / "s"), create=True)
    schema = sd.Schema(row_keys=[("k", pa.string())], values=[("v", pa.int64())])
    table = store.create_table("events", schema, properties={"retention.seconds": 3600})
    table.ingest(pa.table({"k": ["a"], "v": [1]}))
    table.ingest(pa.table({"k": ["b"], "v": [2]}))
    table.tag("before")
    table.compact(full=True)
    unref = set(table.state().unreferenced)
    runner = CliRunner()
    out = runner.invoke(app, ["gc", "--store", store.uri, "--json"])
    assert out.exit_code == 0, out.output
    (row,) = json.loads(out.stdout)
    assert row["deleted"] == 0
    assert row["kept"] == {"unreferenced": {"tag": {
        "files": 2, "bytes": bytes_of(table, unref), "due": None, "last_due": None}},
        "orphans": {}}
    assert row["kept_bytes"] == bytes_of(table, unref)
    table.delete_tag("before")
    out = runner.invoke(app, ["gc", "--store", store.uri, "--json"])
    (row,) = json.loads(out.stdout)
    kept = row["kept"]["unreferenced"]["retention"]
    assert kept["files"] == 2 and kept["due"].endswith("Z")  # ISO 8601 UTC
    due = max(table.state().unreferenced.values()) + 3600 + 300
    assert kept["last_due"][:16] == time.strftime("%Y-%m-%dT%H:%M", time.gmtime(due))
    out = runner.invoke(app, ["gc", "--store", store.uri], env={"COLUMNS": "200"})
    assert out.exit_code == 0, out.output
    assert "retention: 2 files" in out.stdout and "due in 1 h 0" in out.stdout, out.stdout
