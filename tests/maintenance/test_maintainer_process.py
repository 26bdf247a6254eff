"""Issue 46 items 2-4 with the maintainer as a process: one ``sediment maintain --loop`` over
one store serves every test of this module (each test has tables of its own in the store), so
what is tested is what a deployment runs: records past an age-off TTL freeing their bytes,
``sediment du`` as a command, a table created offline left alone until it goes online, and
``compaction.max_bytes_per_second`` bounding the process's compaction.

Each test checks against what it measures itself: sizes of the files on disk, the records it
wrote, the times of the job events."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import sediment as sd
from helpers import rows
from reference import Reference, assert_matches
from sediment.files.sidecars import data_file_of
from sediment.workload import benchmark_schema

# the tests share the module's maintainer process: on one xdist worker
pytestmark = pytest.mark.xdist_group("module:test_maintainer_process.py")

SCHEMA = benchmark_schema()
INTERVAL = 0.2
"""The loop's report and GC period (its prune period is six of them)."""
QUIET = {"state.cache.refresh_seconds": 0, "gc.delay_seconds": 0, "retention.seconds": 0,
         "gc.clock_skew_seconds": 0}
"""Garbage collected at the loop's next GC pass."""


@dataclass
class Loop:
    """The module's maintainer process over ``root``, its JSON lines in ``out``."""

    root: Path
    proc: subprocess.Popen[bytes]
    out: Path
    err: Path

    @property
    def store(self) -> sd.Store:
        return sd.Store.open(str(self.root))

    def rows(self, table: str) -> list[dict[str, Any]]:
        """The loop's report rows of ``table`` so far."""
        out = []
        for line in self.out.read_text().splitlines():
            try:
                row = json.loads(line)
            except ValueError:  # a line being written
                continue
            if row.get("table") == table:
                out.append(row)
        return out

    def wait(self, what: str, cond: Callable[[], bool], timeout: float = 60.0) -> None:
        """Until ``cond()``; fails (naming ``what`` and the loop's stderr) past ``timeout``
        or when the process ends."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"maintainer exited: {self.err.read_text()}"
            if cond():
                return
            time.sleep(0.05)
        raise AssertionError(f"{what}: not within {timeout} s; maintainer stderr: "
                             f"{self.err.read_text()[-2000:]}")


@pytest.fixture(scope="module")
def loop(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Loop]:
    root = tmp_path_factory.mktemp("maintained")
    sd.Store.open(str(root), create=True)
    out, err = root.parent / "loop.out", root.parent / "loop.err"
    with open(out, "wb") as o, open(err, "wb") as e:
        proc = subprocess.Popen(
            [sys.executable, "-m", "sediment.cli", "maintain", "--store", str(root), "--loop",
             "--interval", str(INTERVAL), "--workers", "thread", "--threads", "2",
             "--batcher-threads", "0", "--json",
             # its leases beaten every half second: a new table is taken at the next beat
             "--lease-timeout", "2"], stdout=o, stderr=e)
    try:
        yield Loop(root, proc, out, err)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(30)


def files_on_disk(table: sd.Table, prefix: str = "") -> dict[str, int]:
    """Key -> size of every object of ``table`` under ``prefix``, listed from the disk."""
    root = Path(table._handle.objects.local_path(""))
    return {p.relative_to(root).as_posix(): p.stat().st_size
            for p in (root / prefix).rglob("*") if p.is_file()}


def with_sidecars(objects: dict[str, int], filenames: set[str]) -> int:
    """Bytes of the data files ``filenames`` and their sidecars among ``objects``."""
    return sum(n for k, n in objects.items() if data_file_of(k) in filenames)


# ---- storage that shrinks (item 2) -------------------------------------------------------------
TTL = 2.0


def stamped(prefix: str, n: int, ms: int) -> pa.Table:
    """``n`` records keyed ``<prefix><i>``, each stamped ``ms`` (milliseconds)."""
    return pa.table({"key": [f"{prefix}{i:05d}" for i in range(n)],
                     "timestamp": pa.array(np.full(n, ms), pa.int64()),
                     "value": [f"v{i}" for i in range(n)],
                     "nullable_value": pa.nulls(n, pa.string())})


def test_records_past_the_ttl_free_their_bytes(loop: Loop) -> None:
    """A file whose records all pass the age-off TTL is rewritten (to nothing) by the
    maintainer once they have, and collected: the table's data bytes drop to those of the
    file that holds live records, which stays as it is."""
    iterators = json.dumps([{"type": "age_off", "field": "timestamp", "ttl_seconds": TTL}])
    table = loop.store.create_table("ttl", SCHEMA, properties={
        **QUIET, "compaction.iterators": iterators, "parquet.row_group_rows": 128,
        # two files never merge for their number: only expiry rewrites one
        "compaction.strategy": "basic", "compaction.batch_size": 10})
    now_ms = int(time.time() * 1000)
    soon = stamped("a", 1280, now_ms)  # every record past the TTL 2 s from now
    later = stamped("b", 1280, now_ms + 3_600_000)  # live for the whole test
    table.ingest(soon)
    table.ingest(later)
    [later_file] = [r.filename for r in table.files()
                    if str(_first_key(table, r.filename)).startswith("b")]
    before = files_on_disk(table, "data/")
    kept = with_sidecars(before, {later_file})
    assert sum(before.values()) > 1.8 * kept  # the expiring file holds about half the bytes

    loop.wait("the expired file's bytes collected",
              lambda: sum(files_on_disk(table, "data/").values()) == kept)
    assert [r.filename for r in table.files()] == [later_file]  # left as it was
    jobs = [e for e in table.events("compaction") if e.status == "created"]
    # not rewritten before its records expired (one clock: this machine's)
    assert jobs and min(e.time for e in jobs) >= now_ms / 1000 + TTL - 0.01
    ref = Reference(SCHEMA)
    ref.add(later)
    assert_matches(table.query(), ref)


def _first_key(table: sd.Table, filename: str) -> Any:
    import pyarrow.parquet as pq

    path = table._handle.objects.local_path(filename)
    return pq.read_table(path, columns=["key"])["key"][0]


# ---- where the bytes go: du as a command (item 3) ----------------------------------------------
def test_du_as_a_command_sorts_the_bytes_on_disk(loop: Loop) -> None:
    """``sediment du --table T --json`` beside the running maintainer: live files and their
    sidecars, the files the maintainer's compaction replaced (kept by retention: the default
    2 days) and the rest, each equal to the sizes on disk."""
    table = loop.store.create_table("sized", SCHEMA, properties={
        "state.cache.refresh_seconds": 0, "compaction.strategy": "basic",
        "compaction.batch_size": 2})
    for i in range(2):
        table.ingest(rows(400, seed=i))
    replaced = {r.filename for r in table.files()}
    loop.wait("the two files merged", lambda: len(table.files()) == 1 and any(
        e.status == "committed" for e in table.events("compaction")))
    live = {r.filename for r in table.files()}
    # the maintainer still tidies after its commit (its job's lease, status events): du is
    # compared with the folder as it was both before and after it ran
    for _ in range(10):
        disk = files_on_disk(table)
        proc = subprocess.run([sys.executable, "-m", "sediment.cli", "du", "--store",
                               str(loop.root), "--table", "sized", "--json"],
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        if files_on_disk(table) == disk:
            break
    else:
        raise AssertionError("the table's folder never stood still around a du")
    du = json.loads(proc.stdout)
    assert du["table"] == "sized"
    assert du["total"] == sum(disk.values())
    assert du["live"] == sum(disk[f] for f in live)
    assert du["live"] + du["sidecars"] == with_sidecars(disk, live)
    assert du["unreferenced"] == {"retention": with_sidecars(disk, replaced)}
    assert du["orphaned"] == {}
    status = sum(n for k, n in disk.items() if k.startswith("status/"))
    assert du["status"] == status
    assert du["metadata"] == sum(n for k, n in disk.items()
                                 if not k.startswith(("data/", "status/")))
    assert du["files"] == len(live)


# ---- a table created offline (item 4) ----------------------------------------------------------
def test_a_table_created_offline_waits_for_online(loop: Loop) -> None:
    """The maintainer compacts an online twin of the table while the table created offline
    keeps its files (the loop reports on it meanwhile); once online, it is compacted."""
    props = {"state.cache.refresh_seconds": 0, "compaction.strategy": "basic",
             "compaction.batch_size": 3}
    quiet = loop.store.create_table("quiet", SCHEMA, online=False, properties=props)
    twin = loop.store.create_table("twin", SCHEMA, properties=props)
    ref = Reference(SCHEMA)
    for i in range(3):
        data = rows(100, seed=i)
        quiet.ingest(data)
        twin.ingest(data)
        ref.add(data)
    seen = len(loop.rows("quiet"))
    loop.wait("the online twin compacted", lambda: len(twin.files()) == 1)
    loop.wait("two more report rows of the offline table",
              lambda: len(loop.rows("quiet")) >= seen + 2)
    assert len(quiet.files()) == 3 and not quiet.online
    assert not list(quiet.events("compaction"))  # no job was even planned
    quiet.set_online(True)
    loop.wait("the table compacted once online", lambda: len(quiet.files()) == 1)
    assert_matches(quiet.query(), ref)


# ---- the compaction throttle (item 4) ----------------------------------------------------------
def test_the_throttle_bounds_the_maintainers_compaction(loop: Loop) -> None:
    """With ``compaction.max_bytes_per_second`` at half the bytes a job reads, the job takes
    at least the time those bytes take at that rate, less the one second the bucket holds
    (its output's bytes are charged too: more, never less)."""
    table = loop.store.create_table("slow", SCHEMA, online=False, properties={
        "state.cache.refresh_seconds": 0, "compaction.strategy": "basic",
        "compaction.batch_size": 2})
    ref = Reference(SCHEMA)
    for i in range(2):
        data = rows(2000, seed=10 + i)
        table.ingest(data)
        ref.add(data)
    disk = files_on_disk(table, "data/")
    inputs = sum(disk[r.filename] for r in table.files())
    rate = inputs // 2
    table.set_properties({"compaction.max_bytes_per_second": rate})
    table.set_online(True)
    loop.wait("the throttled job committed", lambda: len(table.files()) == 1)
    events = {e.status: e for e in table.events("compaction")}
    took = events["finished"].time - events["started"].time
    assert took >= inputs / rate - 1 - 0.1
    output = os.path.getsize(table._handle.objects.local_path(table.files()[0].filename))
    assert took < (inputs + output) / rate + 30  # bounded, not stuck (a loaded machine)
    assert_matches(table.query(), ref)
