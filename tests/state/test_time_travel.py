"""Time travel that explains itself: reading a version past retention whose
files GC deleted, or whose log prune removed, raises VersionExpiredError naming the table, the
version and ``retention.seconds`` with its value; a file lost any other way stays a missing-file
error; the default retention keeps yesterday's versions."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pyarrow as pa
import pytest

import sediment as sd
from helpers import make_table, rows
from sediment.errors import ObjectNotFoundError, QueryError, VersionExpiredError
from sediment.maintenance.gc import gc
from sediment.properties import defaults
from sediment.state.log import log_key
from sediment.state.versions import prune

RETENTION = 60.0  # shortened for the test (the default is 2 days)


def compacted(tmp_path: Path, **props: object) -> tuple[sd.Table, int]:
    """A table after three ingests (version ``old`` reads their three files) and a full
    compaction that replaced them."""
    table = make_table(tmp_path / "s", name="events", **{
        "gc.delay_seconds": 0, "gc.clock_skew_seconds": 0, **props})
    for seed in range(3):
        table.ingest(rows(200, seed))
    old = table.version
    table.compact(full=True)
    assert len(table.files()) == 1
    return table, old


def expired_message(e: pytest.ExceptionInfo[VersionExpiredError], version: int) -> None:
    msg = str(e.value)
    assert "table events" in msg
    assert f"version {version}" in msg
    assert f"retention.seconds = {RETENTION:g} s" in msg
    assert isinstance(e.value, QueryError)  # the family unknown versions raise


def test_default_retention_keeps_yesterdays_versions(tmp_path: Path) -> None:
    assert defaults()["retention.seconds"] == 172800.0
    table, old = compacted(tmp_path, **{"gc.clock_skew_seconds": 300})
    expected = table.query(version=old)
    assert gc(table._handle, now=time.time() + 86400).deleted == 0  # a day later
    assert table.query(version=old).equals(expected)
    assert gc(table._handle, now=time.time() + 172800 + 301).deleted == 3  # past 2 days + skew
    with pytest.raises(VersionExpiredError, match=r"retention.seconds = 172800 s \(2 days\)"):
        table.query(version=old)


def test_reading_a_version_gc_collected_raises_version_expired(tmp_path: Path) -> None:
    table, old = compacted(tmp_path, **{"retention.seconds": RETENTION})
    ref = table.query()
    prepared_before = table.prepare(version=old)  # planned while its files still existed
    assert table.gc().deleted == 0  # inside the retention window
    assert gc(table._handle, now=time.time() + RETENTION + 1).deleted == 3

    for read in (lambda: table.query(version=old),
                 lambda: table.scan(version=old).read_all(),
                 lambda: table.prepare(keys=["a"], version=old),
                 lambda: table.plan(version=old),
                 lambda: table.restore(old),
                 lambda: table.dump(str(tmp_path / "dump"), version=old)):
        with pytest.raises(VersionExpiredError) as e:
            read()
        expired_message(e, old)
        assert "garbage collection deleted" in str(e.value)
    # a query planned before GC fails on read, and is explained there
    with pytest.raises(VersionExpiredError) as e:
        prepared_before.run()
    expired_message(e, old)
    with pytest.raises(VersionExpiredError):
        prepared_before.reader().read_all()
    # a diff reads only the log, never data files: it still answers (until prune)
    assert len(table.diff(old).files_removed) == 3
    # nothing was committed or left behind by the refused calls; the head reads as before
    assert [t.name for t in table.tags()] == []  # (dump's tag on the version: never made)
    assert table.query().equals(ref)
    assert table.query(version=table.version).equals(ref)


def test_a_scan_prepared_at_the_head_and_read_after_gc_raises_version_expired(
        tmp_path: Path) -> None:
    """A scan prepared at the head reads that version: once later commits replaced its
    files and GC collected them, reading it is VersionExpiredError on every route (the
    Scan's own, Arrow's and Polars' through the PyCapsule stream), as for a version asked
    by number (it was ObjectNotFoundError, which reads like lost data)."""
    import polars as pl

    table = make_table(tmp_path / "s", name="events", **{
        "gc.delay_seconds": 0, "gc.clock_skew_seconds": 0, "retention.seconds": RETENTION})
    for seed in range(3):
        table.ingest(rows(200, seed))
    scans = [table.prepare() for _ in range(4)]
    table.compact(full=True)
    assert gc(table._handle, now=time.time() + RETENTION + 1).deleted == 3
    with pytest.raises(VersionExpiredError, match="garbage collection deleted"):
        scans[0].to_arrow()
    with pytest.raises(VersionExpiredError):
        scans[1].to_batches().read_all()
    with pytest.raises(pa.ArrowInvalid, match="version 4 has expired"):
        pa.table(scans[2])
    with pytest.raises(pl.exceptions.ComputeError, match="version 4 has expired"):
        pl.DataFrame(scans[3])
    assert table.query().num_rows == 600


def test_a_file_deleted_by_hand_stays_a_missing_file_error(tmp_path: Path) -> None:
    table, old = compacted(tmp_path, **{"retention.seconds": RETENTION})
    inputs = sorted(table.state(old).refcount)
    table._handle.objects.delete_many([inputs[0]])  # not GC: the head still knows the file
    for read in (lambda: table.query(version=old),
                 lambda: table.scan(version=old).read_all()):
        with pytest.raises(ObjectNotFoundError, match=inputs[0]) as e:
            read()
        assert not isinstance(e.value, VersionExpiredError)
    # even past the retention window, as long as GC did not collect it
    head_file = next(iter(table.state().refcount))
    table._handle.objects.delete_many([head_file])
    with pytest.raises(ObjectNotFoundError) as e2:
        table.query()
    assert not isinstance(e2.value, VersionExpiredError)


def test_a_pruned_version_raises_version_expired(tmp_path: Path) -> None:
    table, old = compacted(tmp_path, **{"retention.seconds": RETENTION,
                                        "state.snapshot.interval": 2})
    for seed in range(3, 7):
        table.ingest(rows(20, seed))
    objects = table._handle.objects
    long_ago = time.time() - 3600  # every entry but the last two: past the window
    for v in range(1, table.version - 1):
        os.utime(objects.path(log_key(v)), (long_ago, long_ago))
    assert prune(table._handle.states, RETENTION).log_entries > 0
    earliest = table._handle.states.earliest_version()
    assert earliest > 1
    for read in (lambda: table.state(1), lambda: table.query(version=1),
                 lambda: table.diff(1), lambda: table.restore(1), lambda: table.files(1)):
        with pytest.raises(VersionExpiredError) as e:
            read()
        expired_message(e, 1)
        assert "log entries were pruned" in str(e.value)
        assert f"oldest readable version is {earliest}" in str(e.value)
    # an unknown version stays a plain QueryError
    with pytest.raises(QueryError) as e3:
        table.query(version=table.version + 5)
    assert not isinstance(e3.value, VersionExpiredError)
