"""Prune can never brick a table.

A long-lived writer remembered the digests of every snapshot object it had written and skipped
rewriting them; once ``prune`` had deleted such an object, the writer committed a snapshot
naming it, a second prune took that snapshot as its base and deleted the log below it, and a
fresh reader failed on a log gap. Now the memo forgets digests (``DigestMemo``), prune loads its
base in full before deleting anything older, and prune's times come from the object store's
clock with a margin for skewed machine clocks.

The end-to-end test runs the pruner in a real subprocess with its clock an hour ahead while a
``Table`` in this process commits (ingests, a compaction, a GC) across snapshots; a fresh reader
checks every record after every commit.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import sediment as sd
import sediment.state.versions as versions
from sediment.core.model import FileReference, Partition, Region
from sediment.core.state import ROOT_PARTITION_ID
from sediment.core.transactions import (
    AddFiles,
    AssignJobIds,
    DeleteFiles,
    InitialiseTable,
    JobAssignment,
    ReplaceFileReferences,
    Transaction,
)
from sediment.errors import SedimentError
from sediment.properties import PROPERTIES
from sediment.schema import Schema
from sediment.state.log import log_key
from sediment.state.snapshot import (
    DIGEST_MEMO_SECONDS,
    OBJECT_PREFIX,
    DigestMemo,
    read_pointer,
    read_snapshot,
    snapshot_versions,
)
from sediment.state.store import PRUNE_GRACE_SECONDS, StateStore
from sediment.storage import LocalObjectStore, MemoryObjectStore, ObjectStore

TABLE_ID = "tbl"
SCHEMA = Schema(row_keys=[("key", pa.string())], values=[("value", pa.int64())])
ROOT = [Partition(ROOT_PARTITION_ID, None, Region())]


class FakeClock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


def ref(name: str, records: int = 10) -> FileReference:
    return FileReference(name, ROOT_PARTITION_ID, records, False, None)


@pytest.fixture
def no_time_protection(monkeypatch: pytest.MonkeyPatch) -> None:
    """Prune may delete whatever it judges unneeded at once (no grace, no skew margin)."""
    monkeypatch.setattr(versions, "PRUNE_GRACE_SECONDS", 0.0)
    monkeypatch.setattr(versions, "CLOCK_SKEW_SECONDS", 0.0)
    monkeypatch.setattr(versions, "OBJECT_GRACE_SECONDS", 0.0)


def fresh_head(objects: ObjectStore) -> Any:
    return StateStore(objects, TABLE_ID).head()


def replay(objects: ObjectStore, txns: list[tuple[Transaction, float]]) -> Any:
    """Independent expectation: the transactions applied in order to an empty state."""
    from sediment.core.state import TableState

    state = TableState(TABLE_ID)
    for i, (t, when) in enumerate(txns, 1):
        t.apply(state, when)
        state.version = i
    return state


def snapshot_loads(objects: ObjectStore, v: int) -> bool:
    try:
        read_snapshot(objects, v, TABLE_ID)
        return True
    except SedimentError:
        return False


# ---- the memo ----------------------------------------------------------------------------------
def test_digest_memo_forgets_digests_after_its_ttl() -> None:
    clock = FakeClock()
    memo = DigestMemo(10.0, clock=clock)
    memo.add("a")
    assert "a" in memo and "b" not in memo and len(memo) == 1
    clock.advance(9.9)
    assert "a" in memo
    clock.advance(0.2)
    assert "a" not in memo and len(memo) == 0
    memo.update(["b", "c"], at=clock() - 5)  # learnt 5 s ago
    clock.advance(5.0)
    assert "b" not in memo and "c" not in memo
    memo.add("d")
    memo.add("d", at=clock() - 100)  # an older sighting does not shorten a newer one
    assert "d" in memo
    memo.discard("d")
    assert "d" not in memo
    # a writer trusts a digest for less long than prune keeps the log it may rely on
    assert DIGEST_MEMO_SECONDS < PRUNE_GRACE_SECONDS / 2


def test_the_memo_stays_small() -> None:
    clock = FakeClock()
    memo = DigestMemo(1.0, clock=clock)
    for i in range(5000):
        memo.add(f"d{i}")
        clock.advance(0.01)
    assert len(memo._seen) < 2000


# ---- the defect, step by step ------------------------------------------------------------------
def _history_up_to_the_reused_digest(objects: ObjectStore, memo: DigestMemo
                                     ) -> tuple[StateStore, list[tuple[Transaction, float]]]:
    """Commits whose unreferenced-files list goes from [] to [f0] and (by the caller's next
    DeleteFiles) back to []: the snapshot object of [] comes back after prune deleted it."""
    w = StateStore(objects, TABLE_ID)
    w.heads.known_digests = memo  # type: ignore[assignment]
    txns: list[Transaction] = [
        InitialiseTable(SCHEMA, {"state.snapshot.interval": 1}, ROOT),
        AddFiles([ref("f0")]),
        AssignJobIds([JobAssignment("job0", ROOT_PARTITION_ID, ["f0"])]),
        ReplaceFileReferences("job0", ROOT_PARTITION_ID, ["f0"], ref("out0")),
        AddFiles([ref("g1")]), AddFiles([ref("g2")]), AddFiles([ref("g3")]),
    ]
    done = []
    for t in txns:
        w.commit(t)
        done.append((t, w.history()[-1].time))
    empty = read_pointer(objects, 1, TABLE_ID)["unreferenced"]
    r = versions.prune(w, 0.0)
    assert r.base == 6 and r.unusable_snapshots == ()
    assert not objects.exists(f"{OBJECT_PREFIX}{empty}.json")  # the [] object went
    return w, done


@pytest.mark.parametrize("kind", ["memory", "local"])
def test_a_digest_older_than_the_memo_is_written_again(kind: str, tmp_path: Path,
                                                       no_time_protection: None) -> None:
    objects: ObjectStore = MemoryObjectStore() if kind == "memory" else \
        LocalObjectStore(tmp_path / "o")
    clock = FakeClock()
    w, done = _history_up_to_the_reused_digest(objects, DigestMemo(clock=clock))
    clock.advance(DIGEST_MEMO_SECONDS + 1)
    t = DeleteFiles(["f0"])
    w.commit(t)  # unreferenced is [] again: its object is rewritten, not assumed
    assert snapshot_loads(objects, 8)
    assert versions.prune(w, 0.0).base == 7
    assert fresh_head(objects).version == 8
    assert fresh_head(objects).references(ROOT_PARTITION_ID) == \
        w.head().references(ROOT_PARTITION_ID)


@pytest.mark.parametrize("kind", ["memory", "local"])
def test_prune_never_takes_a_snapshot_that_does_not_load_as_its_base(
        kind: str, tmp_path: Path, no_time_protection: None) -> None:
    """The old behaviour (a digest trusted forever) still cannot brick the table: the broken
    snapshots are never a base, readers skip them, and the log below them stays."""
    objects: ObjectStore = MemoryObjectStore() if kind == "memory" else \
        LocalObjectStore(tmp_path / "o")
    clock = FakeClock()
    w, done = _history_up_to_the_reused_digest(objects, DigestMemo(1e12, clock=clock))
    for t in (DeleteFiles(["f0"]), AddFiles([ref("g4")])):
        w.commit(t)
        done.append((t, w.history()[-1].time))
    assert not snapshot_loads(objects, 8) and not snapshot_loads(objects, 9)  # the defect
    r = versions.prune(w, 0.0)
    assert r.unusable_snapshots == (8,) and r.base == 7, r
    assert "cannot" not in r.note
    for _ in range(2):  # and again: still nothing below the last good snapshot goes
        r = versions.prune(w, 0.0)
        assert r.base == 7 and r.log_entries == 0
    expected = replay(objects, done)
    got = fresh_head(objects)
    assert got.version == 9
    assert got.references(ROOT_PARTITION_ID) == expected.references(ROOT_PARTITION_ID)
    assert [h.version for h in StateStore(objects, TABLE_ID).history()] == [8, 9]
    # once the memo forgets, the next snapshot is whole again and prune moves on
    clock.advance(1e13)
    w.commit(AddFiles([ref("g5")]))
    assert snapshot_loads(objects, 10)
    assert versions.prune(w, 0.0).base == 9  # [] exists again, so 8 and 9 load too
    assert fresh_head(objects).reference_count() == expected.reference_count() + 1


def test_no_snapshot_that_loads_means_nothing_is_deleted(no_time_protection: None) -> None:
    objects = MemoryObjectStore()
    w = StateStore(objects, TABLE_ID)
    w.commit(InitialiseTable(SCHEMA, {"state.snapshot.interval": 2}, ROOT))
    for i in range(6):
        w.commit(AddFiles([ref(f"f{i}")]))
    for v in snapshot_versions(objects):
        objects.delete_many([f"{OBJECT_PREFIX}{read_pointer(objects, v, TABLE_ID)['metarange']}"
                             ".parquet"])
    before = sorted(o.key for o in objects.list(""))
    r = versions.prune(w, 0.0)
    assert r.base is None and r.log_entries == 0 and r.unusable_snapshots == (6, 4, 2)
    assert "no snapshot" in r.note
    assert sorted(o.key for o in objects.list("")) == before
    assert fresh_head(objects).reference_count() == 6


def test_a_gap_after_the_base_stops_pruning(no_time_protection: None) -> None:
    objects = MemoryObjectStore()
    w = StateStore(objects, TABLE_ID)
    w.commit(InitialiseTable(SCHEMA, {"state.snapshot.interval": 2}, ROOT))
    for i in range(8):
        w.commit(AddFiles([ref(f"f{i}")]))
    versions.create_tag(w, "keep", 4)
    objects.delete_many([log_key(6)])
    r = versions.prune(w, 0.0)
    assert r.log_entries == 0 and "missing" in r.note
    assert objects.exists(log_key(1))


# ---- clocks --------------------------------------------------------------------------------
def test_a_clock_running_ahead_prunes_nothing_early(tmp_path: Path) -> None:
    """Production margins, this machine's clock hours ahead: the store's clock decides."""
    objects = LocalObjectStore(tmp_path / "o")
    w = StateStore(objects, TABLE_ID)
    w.commit(InitialiseTable(SCHEMA, {"state.snapshot.interval": 2}, ROOT))
    for i in range(9):
        w.commit(AddFiles([ref(f"f{i}")]))
    for ahead in (0.0, 301.0, 3600.0, 86400.0):
        r = versions.prune(w, 0.0, now=time.time() + ahead)
        assert (r.log_entries, r.snapshots, r.objects) == (0, 0, 0), (ahead, r)
    assert [h.version for h in w.history()] == list(range(1, 11))


def test_entries_inside_the_window_stay_by_the_stores_clock(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch
                                                            ) -> None:
    """Only entries older than the grace period plus the skew margin, by their modification
    times, can go, and never one inside the window (even with a snapshot at it)."""
    monkeypatch.setattr(versions, "PRUNE_GRACE_SECONDS", 100.0)  # margin stays 300 s
    objects = LocalObjectStore(tmp_path / "o")
    w = StateStore(objects, TABLE_ID)
    w.commit(InitialiseTable(SCHEMA, {"state.snapshot.interval": 2}, ROOT))
    for i in range(9):
        w.commit(AddFiles([ref(f"f{i}")]))  # versions 1..10, snapshots 2, 4, 6, 8, 10
    old = time.time() - 450  # older than 100 + 300 s
    for v in range(1, 7):
        os.utime(objects.directory / log_key(v), (old, old))
    r = versions.prune(w, 0.0, now=time.time() + 7200)
    # recent: 7..10, so the base is below 7: the snapshot at 6 (entry 6 is old enough)
    assert r.base == 6 and r.log_entries == 6
    os.utime(objects.directory / log_key(7), (old + 200, old + 200))  # 250 s old: inside
    os.utime(objects.directory / log_key(8), (old, old))
    r = versions.prune(w, 0.0)
    assert r.log_entries == 0 and r.base == 6  # 8 is old, but 7 (inside) is not
    assert objects.exists(log_key(7)) and objects.exists(log_key(8))


# ---- end to end: a pruner process racing a long-lived writer --------------------------------
_PRUNER = textwrap.dedent("""
    import json, os, sys, time
    import sediment as sd
    import sediment.state.versions as versions
    path, name, grace, object_grace, stop = sys.argv[1:6]
    versions.PRUNE_GRACE_SECONDS = float(grace)
    versions.CLOCK_SKEW_SECONDS = 0.0
    versions.OBJECT_GRACE_SECONDS = float(object_grace)
    table = sd.Store.open(path).table(name)
    while not os.path.exists(stop):
        r = versions.prune(table._handle.states, 0.0, now=time.time() + 3600)  # clock an hour ahead
        print(json.dumps({"logs": r.log_entries, "snapshots": r.snapshots,
                          "objects": r.objects, "base": r.base,
                          "unusable": list(r.unusable_snapshots)}), flush=True)
        time.sleep(0.05)
""")


def _keys(table: sd.Table) -> list[str]:
    return sorted(table.query().column("key").to_pylist())


@pytest.mark.slow
@pytest.mark.parametrize("memo_ttl", [0.2, 1e12], ids=["memo-expires", "memo-forever"])
def test_long_lived_writer_against_a_pruning_process(tmp_path: Path, memo_ttl: float) -> None:
    """``memo-expires``: the writer's memo is shorter than the pruner's grace, as in production
    (60 s against 300 s), scaled down: no snapshot is ever broken. ``memo-forever``: the old
    behaviour, so snapshots naming deleted objects are written; prune must never take one as
    its base, and every fresh reader must still load every record."""
    path = str(tmp_path / "store")
    props: dict[str, Any] = {"state.snapshot.interval": 2, "gc.delay_seconds": 0,
                             "retention.seconds": 0,
                             "compaction.strategy": "basic", "compaction.batch_size": 2,
                             "state.cache.refresh_seconds": 0}
    if "gc.clock_skew_seconds" in PROPERTIES:
        props["gc.clock_skew_seconds"] = 0
    table = sd.Store.open(path, create=True).create_table("events", SCHEMA, properties=props)
    table._handle.states.heads.known_digests = DigestMemo(memo_ttl)  # type: ignore[assignment]
    stop = tmp_path / "stop"
    errors = tmp_path / "pruner.err"  # a file, not a pipe: its warnings must never block it
    with open(errors, "w") as err:
        pruner = subprocess.Popen(
            [sys.executable, "-c", _PRUNER, path, "events", "0.8", "0.8", str(stop)],
            stdout=subprocess.PIPE, stderr=err, text=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(pruner.stdout or []), daemon=True)
    reader.start()
    expected: list[str] = []
    checks = 0

    def commit_and_check(n: int = 1) -> None:
        nonlocal checks
        for _ in range(n):
            keys = [uuid.uuid4().hex[:12] for _ in range(3)]
            table.ingest(pa.table({"key": keys, "value": [1, 2, 3]}))
            expected.extend(keys)
            fresh = sd.Store.open(path).table("events")  # loads from storage, no cache
            assert _keys(fresh) == sorted(expected), f"after {len(expected)} records"
            checks += 1

    def for_seconds(seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            commit_and_check()

    try:
        for _ in range(2):
            for_seconds(1.5)
            assert table.compact().jobs_committed > 0  # files become unreferenced
            for_seconds(1.5)
            table.gc()  # unreferenced is [] again: that snapshot object comes back
            for_seconds(1.5)
    finally:
        stop.touch()
        try:
            pruner.wait(timeout=30)
        finally:
            if pruner.poll() is None:
                pruner.kill()
    reader.join(timeout=10)
    assert pruner.returncode == 0, errors.read_text()[-3000:]
    results = [json.loads(x) for x in lines]
    assert sum(r["logs"] for r in results) > 0, "the pruner never pruned"
    unusable = {v for r in results for v in r["unusable"]}
    if memo_ttl < 1:
        assert not unusable, f"snapshots naming deleted objects: {sorted(unusable)}"
    else:
        assert unusable, "the old defect was not provoked"
    fresh = sd.Store.open(path).table("events")
    assert _keys(fresh) == sorted(expected)
    versions_left = [h.version for h in fresh.history()]
    assert versions_left == list(range(versions_left[0], fresh.version + 1))
    assert checks > 10
    assert not any(o.key.startswith("clock/") for o in LocalObjectStore(path).list(""))


def test_the_store_clock_probe(object_store: ObjectStore) -> None:
    """The object store's time, read off a probe object that is deleted at once (S3 times have
    one-second resolution)."""
    from sediment.storage.clock import deletion_clock, object_store_time

    t = object_store_time(object_store.child("tables/x"))
    assert t is not None and abs(t - time.time()) < 5
    assert list(object_store.list("")) == []  # the probe is gone, at the root of the store
    assert deletion_clock(object_store, time.time() + 3600) <= time.time() + 5
    assert deletion_clock(object_store, 1000.0) == 1000.0  # a clock behind is more careful


PRUNE_ALL = {"retention.seconds": 0, "gc.delay_seconds": 0, "gc.clock_skew_seconds": 0,
             "state.snapshot.interval": 1}


@pytest.mark.parametrize("when", ["before its floor", "after its floor"])
def test_a_pin_racing_prune_either_holds_its_version_or_is_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_prune_grace: None,
        when: str) -> None:
    """A reader pins an old version while prune runs (the pin of PostHog PR #78455's reader
    against a short-retention vacuum): prune held after it read the pins. Before it records
    its floor, the pin is written unseen: prune reads the pins again after its floor, sees
    it, and deletes nothing; the version reads. After the floor, the pin reads it and is
    refused (VersionExpiredError, the pin let go); prune goes on. Never a pin that succeeds
    over a version whose log is gone."""
    from helpers import make_table, rows
    from reference import Reference, assert_matches
    from sediment.errors import VersionExpiredError
    from support.races import Gate, InThread

    table = make_table(tmp_path / "store", split_points=None, **PRUNE_ALL)
    reference = Reference(table.schema)
    counts: dict[int, int] = {}
    for seed in range(6):
        data = rows(20, seed=seed)
        table.ingest(data)
        reference.add(data)
        counts[table.version] = len(reference.history)
    old = min(counts)
    gate = Gate()
    if when == "before its floor":
        real = versions.forget_expired_pins

        def held(*args: Any, **kwargs: Any) -> Any:  # right after prune read the pins
            out = real(*args, **kwargs)
            gate.arrive()
            return out
        monkeypatch.setattr(versions, "forget_expired_pins", held)
    else:
        real_floor = versions.record_floor

        def held(*args: Any, **kwargs: Any) -> Any:  # its floor recorded, pins not read again
            out = real_floor(*args, **kwargs)
            gate.arrive()
            return out
        monkeypatch.setattr(versions, "record_floor", held)
    job = InThread(table.prune)
    gate.wait_arrived("prune to read the pins")
    if when == "before its floor":
        table.pin("reader", old, 600)
        gate.release()
        result = job.result()
        assert result.log_entries == 0 and "holds version" in result.note, result
        assert_matches(table.query(version=old), reference.upto(counts[old]))
        table.unpin("reader")
        assert table.prune().log_entries > 0  # the next prune goes on
    else:
        with pytest.raises(VersionExpiredError, match="prune"):
            table.pin("reader", old, 600)
        assert "reader" not in {t.name for t in table.tags()}, "a refused pin is let go"
        gate.release()
        assert job.result().log_entries > 0
    with pytest.raises(VersionExpiredError):
        table.query(version=old)
    assert not list(table._handle.states.objects.list("prune/")), "floors are deleted"
    assert_matches(table.query(), reference)
