"""Garbage collection: unreferenced files after the delay, orphans after their timeout, and
never a referenced file, whatever mix of ingest, compaction and splitting came before."""

from __future__ import annotations

import os
import random
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import sediment as sd
from helpers import make_table, rows, run_together
from reference import Reference, assert_matches
from sediment.core.transactions import DeleteFiles
from sediment.files.writer import (
    keys_name,
    new_data_filename,
    sample_name,
    with_sidecars,
)
from sediment.maintenance.gc import GcResult, gc
from sediment.state import pending
from sediment.workload import benchmark_schema
from support.internals import write_sorted_file

SCHEMA = benchmark_schema()


def ingest(table: sd.Table, ref: Reference, n: int, seed: int) -> None:
    data = rows(n, seed)
    table.ingest(data)
    ref.add(data)


def stored(table: sd.Table) -> set[str]:
    """Objects under data/ (not S3 folder markers, which pyarrow's writer leaves)."""
    return {o.key for o in table._handle.objects.list("data/") if not o.key.endswith("/")}


def assert_referenced_files_exist(table: sd.Table) -> None:
    keys = stored(table)
    for f in table.state().refcount:
        assert f in keys, f"referenced file {f} was deleted"
        assert sample_name(f) in keys, f"sample of referenced file {f} was deleted"
        assert keys_name(f) in keys, f"key filters of referenced file {f} were deleted"


def write_orphan(table: sd.Table, seed: int = 0) -> str:
    """A data file + sample written like a job's output, never committed."""
    data = rows(20, seed).sort_by([("key", "ascending"), ("timestamp", "ascending")])
    name = new_data_filename("root")
    write_sorted_file(table._handle.objects, name, SCHEMA, table.properties, [data])
    pending.release(table._handle.objects, [name])  # its writer is gone: nothing holds it any more
    return name


def compacted_table(uri: str | Path, options: dict[str, Any] | None = None, **props: Any
                    ) -> tuple[sd.Table, Reference, list[str]]:
    """Three files compacted into one: returns the table, reference and the three inputs."""
    # retention 0 (the default is 2 days): these tests are about gc.delay_seconds
    table = make_table(uri, options, **{"compaction.strategy": "basic",
                                        "compaction.batch_size": 3, "retention.seconds": 0,
                                        **props})
    ref = Reference(SCHEMA)
    for i in range(3):
        ingest(table, ref, 100, i)
    inputs = [r.filename for r in table.files()]
    assert table.compact().jobs_committed == 1
    return table, ref, inputs


# ---- unreferenced files ----------------------------------------------------------------------
def test_unreferenced_files_deleted_after_delay(store_uri: tuple[str, dict[str, Any]]) -> None:
    uri, options = store_uri
    table, ref, inputs = compacted_table(uri, options)
    (out,) = [r.filename for r in table.files()]
    assert set(table.state().unreferenced) == set(inputs)
    # younger than the default delay (15 min): kept
    r = table.gc()
    assert r == GcResult(0, 0, r.seconds, kept=r.kept) and not r.did_work
    assert set(inputs) <= stored(table)
    version = table.version
    assert gc(table._handle, now=time.time() + 901).deleted == 0  # within the clock-skew margin
    r = gc(table._handle, now=time.time() + 1201)
    assert r.deleted == 3 and r.orphans_deleted == 0
    keys = stored(table)
    for f in inputs:
        assert not set(with_sidecars([f])) & keys
    assert keys == set(with_sidecars([out]))
    assert table.state().unreferenced == {}
    (txn,) = [e.transaction for e in table._handle.states.log.read_after(version)]
    assert isinstance(txn, DeleteFiles) and sorted(txn.filenames) == sorted(inputs)
    assert table.history()[-1].kind == "delete_files"
    assert_matches(table.query(), ref)
    assert not gc(table._handle, now=time.time() + 1201).did_work


def test_younger_unreferenced_files_are_kept(tmp_path: Path) -> None:
    table = make_table(tmp_path, **{"compaction.strategy": "basic", "compaction.batch_size": 2,
                                    "gc.delay_seconds": 100, "retention.seconds": 0,
                                    "gc.clock_skew_seconds": 0})
    ref = Reference(SCHEMA)
    ingest(table, ref, 50, 1)
    ingest(table, ref, 50, 2)
    table.compact()
    first = dict(table.state().unreferenced)
    assert len(first) == 2
    time.sleep(0.05)
    ingest(table, ref, 50, 3)
    table.compact()  # merges the first output with the new file
    second = {f: t for f, t in table.state().unreferenced.items() if f not in first}
    assert len(second) == 2
    t1, t2 = max(first.values()), min(second.values())
    assert t2 > t1
    r = gc(table._handle, now=t1 + 100 + (t2 - t1) / 2)
    assert r.deleted == 2
    keys = stored(table)
    assert not set(first) & keys
    assert set(with_sidecars(second)) <= keys
    assert set(table.state().unreferenced) == set(second)
    assert gc(table._handle, now=t2 + 100).deleted == 2
    assert_matches(table.query(), ref)
    assert_referenced_files_exist(table)


def test_retention_keeps_files_past_the_gc_delay(tmp_path: Path) -> None:
    table, ref, inputs = compacted_table(tmp_path, **{"gc.delay_seconds": 0,
                                                      "gc.clock_skew_seconds": 0,
                                                      "retention.seconds": 1000})
    assert table.gc().deleted == 0
    assert set(inputs) <= stored(table)
    assert gc(table._handle, now=time.time() + 1001).deleted == 3
    assert_matches(table.query(), ref)


def test_racing_collectors_record_each_deletion_once(tmp_path: Path) -> None:
    table, ref, inputs = compacted_table(tmp_path, **{"gc.delay_seconds": 0, "retention.seconds": 0,
                                                      "gc.clock_skew_seconds": 0})
    tables = [sd.Store.open(str(tmp_path)).table(table.name) for _ in range(2)]
    for t in tables:
        t._handle.states.head()
    results: list[GcResult] = run_together(tables, lambda t: t.gc())
    assert sum(r.deleted for r in results) == 3
    deletes = [e.transaction for e in table._handle.states.log.read_after(0)
               if isinstance(e.transaction, DeleteFiles)]
    assert sorted(f for d in deletes for f in d.filenames) == sorted(inputs)
    assert not set(inputs) & stored(table)
    assert_matches(table.query(), ref)


# ---- orphans ---------------------------------------------------------------------------------
def test_orphans_deleted_after_timeout(store_uri: tuple[str, dict[str, Any]]) -> None:
    uri, options = store_uri
    table = make_table(uri, options)
    ref = Reference(SCHEMA)
    ingest(table, ref, 100, 1)
    orphan = write_orphan(table)
    assert set(with_sidecars([orphan])) <= stored(table)
    assert table.gc().orphans_deleted == 0  # younger than the default hour
    assert orphan in stored(table)
    r = gc(table._handle, now=time.time() + 3601)
    assert r.orphans_deleted == 1 and r.deleted == 0
    keys = stored(table)
    assert not set(with_sidecars([orphan])) & keys
    assert_referenced_files_exist(table)
    assert_matches(table.query(), ref)
    # nothing recorded in the log: no transaction ever knew the orphan
    assert table.history()[-1].kind == "add_files"


@pytest.mark.s3
def test_incomplete_multipart_uploads_aborted_after_the_orphan_timeout(
        s3_store_uri: tuple[str, dict[str, Any]]) -> None:
    """A writer killed mid-object leaves a multipart upload that S3 keeps (and bills) until
    it is aborted: pyarrow's own writes of data files (a CreateMultipartUpload on the data
    file's key, parts sent, never completed: made here by those very requests) and
    Sediment's streamed writes alike. GC aborts the table's once older than the orphan
    timeout, by the store's clock; a young one, and another table's, are kept."""
    uri, options = s3_store_uri
    table = make_table(uri, options)
    ref = Reference(SCHEMA)
    ingest(table, ref, 100, 1)
    objects = table._handle.objects
    found, key = objects.locate(new_data_filename("root"))
    root: Any = found  # the S3 store: its client, bucket and keys
    other = root.child("tables/other-table")
    for k in (key, "tables/other-table/data/root/x.parquet"):
        up = root._client.create_multipart_upload(Bucket=root.bucket, Key=root._k(k))
        root._client.upload_part(Bucket=root.bucket, Key=root._k(k), UploadId=up["UploadId"],
                                 PartNumber=1, Body=b"x" * 1000)
    (upload,) = objects.multipart_uploads("")
    assert upload.key == key.split("/", 2)[2]
    # by the store's clock against the upload's listed start
    assert gc(table._handle, now=upload.initiated + 60).uploads_aborted == 0
    assert len(list(objects.multipart_uploads(""))) == 1
    r = gc(table._handle, now=upload.initiated + 3601)
    assert r.uploads_aborted == 1 and r.did_work
    assert list(objects.multipart_uploads("")) == []
    assert len(list(other.multipart_uploads(""))) == 1  # not this table's
    assert_matches(table.query(), ref)


def test_young_orphans_kept_old_ones_deleted(tmp_path: Path) -> None:
    table = make_table(tmp_path)
    ref = Reference(SCHEMA)
    ingest(table, ref, 100, 1)
    old, young = write_orphan(table, 1), write_orphan(table, 2)
    stray_sample = sample_name(new_data_filename("root"))  # a sample whose data never landed
    table._handle.objects.put(stray_sample, b"x")
    stray_filter = keys_name(new_data_filename("root"))
    table._handle.objects.put(stray_filter, b"x")
    past = time.time() - 3601
    for key in (*with_sidecars([old]), stray_sample, stray_filter):
        os.utime(table._handle.objects.path(key), (past, past))
    r = table.gc()
    assert r.orphans_deleted == 1
    keys = stored(table)
    assert not {*with_sidecars([old]), stray_sample, stray_filter} & keys
    assert set(with_sidecars([young])) <= keys
    assert table.gc(orphan_timeout=0).orphans_deleted == 1
    assert young not in stored(table)
    assert_referenced_files_exist(table)
    assert_matches(table.query(), ref)


def test_gc_events(tmp_path: Path) -> None:
    table, _, _ = compacted_table(tmp_path, **{"gc.delay_seconds": 0, "retention.seconds": 0,
                                               "gc.clock_skew_seconds": 0})
    write_orphan(table)
    table.gc(orphan_timeout=0)
    (ev,) = list(table._handle.status.events("gc"))
    assert ev.status == "finished"
    assert ev.details["deleted"] == 3 and ev.details["orphans_deleted"] == 1
    table.gc()  # nothing to do: no event
    assert len(list(table._handle.status.events("gc"))) == 1


# ---- referenced files are never deleted -------------------------------------------------------
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_mixes_never_delete_referenced_files(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    table = make_table(tmp_path, **{"gc.delay_seconds": 0,
                                    "retention.seconds": 0, "gc.clock_skew_seconds": 0,
                                    "partition.split.threshold": 600,
                                    "compaction.batch_size": rng.choice([2, 3, 4]),
                                    "compaction.strategy": rng.choice(["basic", "size_ratio"]),
                                    "ingest.write_strategy":
                                        rng.choice(["per_partition", "shared_file"])})
    ref = Reference(SCHEMA)
    ops = ["ingest"] * 4 + ["compact"] * 3 + ["split"] * 2 + ["gc"] * 3
    for step in range(18):
        op = rng.choice(ops)
        if op == "ingest":
            ingest(table, ref, rng.randint(1, 300), seed * 100 + step)
        elif op == "compact":
            table.compact()
        elif op == "split":
            table.split()
        else:
            table.gc(orphan_timeout=0)
            assert table.state().unreferenced == {}
        assert_referenced_files_exist(table)
        assert_matches(table.query(), ref)
    table.maintain(orphan_timeout=0)
    table.gc(orphan_timeout=0)
    assert_referenced_files_exist(table)
    referenced = set(table.state().refcount)
    assert stored(table) == set(with_sidecars(referenced))
    assert_matches(table.query(), ref)


def test_gc_racing_compaction_keeps_referenced_files(tmp_path: Path) -> None:
    table = make_table(tmp_path, **{"gc.delay_seconds": 0, "retention.seconds": 0,
                                    "gc.clock_skew_seconds": 0, "compaction.strategy": "basic",
                                    "compaction.batch_size": 2,
                                    "partition.split.threshold": 800})
    ref = Reference(SCHEMA)
    collector = sd.Store.open(str(tmp_path)).table(table.name)
    stop = threading.Event()
    errors: list[BaseException] = []

    def collect() -> None:
        try:
            while not stop.is_set():
                collector.gc(orphan_timeout=0)  # leases protect live writers
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    th = threading.Thread(target=collect)
    th.start()
    try:
        for i in range(8):
            ingest(table, ref, 150, 500 + i)
            table.split()
            table.compact()
            assert_matches(table.query(), ref)
    finally:
        stop.set()
        th.join(60)
    assert not errors, errors
    assert_referenced_files_exist(table)
    assert_matches(table.query(), ref)
