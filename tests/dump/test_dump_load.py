"""Bulk dump and bulk load, on a local folder and on S3 (the dump on the same kind of store).

A dump pins one version and writes, per task (a leaf's share of the range) and batch, data,
sample and manifest files plus a job manifest; load verifies every checksum, path and range
before committing anything. Expected contents come from the independent reference in
``reference.py``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import sediment as sd
import sediment.dump.dump as dump_mod
from helpers import make_table, rows
from reference import Reference, assert_matches, result_rows
from sediment.dump.dump import LOCK_KEY
from sediment.dump.manifest import range_to_json
from sediment.errors import (
    CorruptMetadataError,
    JobError,
    QueryError,
    SchemaError,
    StorageError,
    TableNotFoundError,
)
from sediment.storage import ObjectStore, open_object_store
from sediment.workload import benchmark_schema, generate

SCHEMA = benchmark_schema()
SRC = Path(__file__).resolve().parents[2] / "src"

StoreUri = tuple[str, dict[str, Any]]


# ---- helpers ---------------------------------------------------------------------------------
def open_store(store_uri: StoreUri) -> sd.Store:
    uri, options = store_uri
    return sd.Store.open(uri, **options, create=True)


def dump_root(store_uri: StoreUri, name: str = "dumps") -> str:
    """A dump destination on the same kind of store, outside the store's own root."""
    uri, _ = store_uri
    if uri.startswith("s3://"):
        bucket = uri[len("s3://"):].split("/", 1)[0]
        return f"s3://{bucket}/{name}"
    return str(Path(uri).parent / name)


def dump_objects(store_uri: StoreUri, root: str) -> ObjectStore:
    return open_object_store(root, **store_uri[1])


def ingest(table: sd.Table, ref: Reference, n: int, seed: int) -> int:
    data = rows(n, seed)
    table.ingest(data)
    ref.add(data)
    return table.version


def source_table(store: sd.Store, n: int = 300, files: int = 3, **props: Any
                 ) -> tuple[sd.Table, Reference]:
    table = make_table(store, split_points=["g", "p"], **props)
    ref = Reference(SCHEMA)
    for i in range(files):
        ingest(table, ref, n, i)
    return table, ref


def leaf_regions(table: sd.Table) -> list[sd.Region]:
    return sorted((p.region for p in table.partitions() if p.is_leaf),
                  key=lambda r: (r.min is not None, r.min or ()))


def snapshot_objects(objects: ObjectStore, prefix: str = "") -> dict[str, bytes]:
    return {o.key: objects.get(o.key) for o in objects.list(prefix) if not o.key.endswith("/")}


def table_keys(store: sd.Store) -> set[str]:
    """Every object of every table but writers' leases (a heartbeat rewrites or deletes them
    at any moment: see sediment.state.pending)."""
    return {o.key for o in store.objects.list("tables/") if "/pending/" not in o.key}


# ---- round trips -----------------------------------------------------------------------------
def test_dump_and_load_round_trip(store_uri: StoreUri) -> None:
    store = open_store(store_uri)
    table, ref = source_table(store)
    # a split without compaction leaves references in a non-leaf partition: the dump reads them
    table.set_properties({"partition.split.threshold": 250})
    assert table.split().splits >= 1
    v = ingest(table, ref, 100, 7)
    root = dump_root(store_uri)
    job = table.dump(root)
    assert job.version == v and job.rows == len(ref.rows)
    assert job.tasks == len(leaf_regions(table))
    assert job.manifest_uri == f"{root}/{job.job_id}/job-manifest.json"
    assert not table._handle.objects.exists(LOCK_KEY)
    assert [t.name for t in table.tags()] == []  # the job's tag is gone with the job

    # the layout: <job>/<task>/<batch>/<version>-{data,sample,manifest}
    dest = dump_objects(store_uri, root)
    doc = json.loads(dest.get(f"{job.job_id}/job-manifest.json"))
    assert doc["version"] == v and doc["rows"] == job.rows and doc["table"] == table.name
    assert len(doc["tasks"]) == job.tasks
    pattern = re.compile(rf"{job.job_id}/task-\d{{5}}/batch-\d{{5}}/{v}-manifest\.json")
    total = 0
    for task in doc["tasks"]:
        for m in task["manifests"]:
            assert pattern.fullmatch(m["path"]), m["path"]
            raw = dest.get(m["path"])
            assert hashlib.sha256(raw).hexdigest() == m["sha256"]
            manifest = json.loads(raw)
            assert manifest["version"] == v and manifest["final"]
            kinds = {f["kind"]: f for f in manifest["files"]}
            data = dest.get(kinds["data"]["path"])
            assert kinds["data"]["path"].endswith(f"/{v}-data.parquet")
            assert kinds["sample"]["path"].endswith(f"/{v}-sample.parquet")
            assert hashlib.sha256(data).hexdigest() == kinds["data"]["sha256"]
            t = pq.read_table(pa.BufferReader(data))
            assert t.num_rows == manifest["rows"] == kinds["data"]["rows"]
            keys = list(zip(t.column("key").to_pylist(), t.column("timestamp").to_pylist(),
                            strict=True))
            assert keys == sorted(keys)
            total += t.num_rows
    assert total == len(ref.rows)

    loaded = store.load(job.manifest_uri, "copy")
    assert "copy" in store.tables()
    assert_matches(loaded.query(), ref)
    assert leaf_regions(loaded) == leaf_regions(table)
    assert sum(r.records for r in loaded.files()) == len(ref.rows)
    assert all(not r.approximate for r in loaded.files())
    # the loaded table owns copies: dropping the source and the dump changes nothing
    store.drop_table(table.name)
    dest.delete_many([o.key for o in dest.list("")])
    fresh = open_store(store_uri).table("copy")
    assert_matches(fresh.query(), ref)
    assert_matches(fresh.query(ranges=[sd.Range("d", "s")]), ref, ranges=[sd.Range("d", "s")])
    # and it is an ordinary table (splits and compactions; on local disk only, for time)
    if not store_uri[0].startswith("s3://"):
        fresh.set_properties({"compaction.strategy": "basic", "compaction.batch_size": 2,
                              "partition.split.threshold": 120})
        fresh.maintain()
        assert_matches(fresh.query(), ref)


@pytest.mark.parametrize("rng", [
    sd.Range("d", "s"), sd.Range("g", "p"), sd.Range(None, "h", end_inclusive=True),
    sd.Range("k", None, start_inclusive=False), sd.Range("b", "c"), sd.Range("m", "n"),
    sd.Range("zzz", None),
], ids=repr)
def test_dump_range_single_field(tmp_path: Path, rng: sd.Range) -> None:
    store = sd.Store.open(str(tmp_path / "s"), create=True)
    table, ref = source_table(store, n=200, files=2)
    job = table.dump(str(tmp_path / "dumps"), range=rng)
    loaded = store.load(job.manifest_uri, "copy")
    assert_matches(loaded.query(), ref, ranges=[rng])
    assert job.rows == len(ref.query(ranges=[rng]))


MULTI = sd.Schema(row_keys=[("a", pa.string()), ("b", pa.int64())],
                  sort_keys=[("ts", pa.int64())], values=[("v", pa.int64())])


@pytest.mark.parametrize("rng", [
    sd.Range(None, ("m",), end_inclusive=True),  # a prefix end past a split key with it
    sd.Range(("m",), None, start_inclusive=False),  # an exclusive prefix start
    sd.Range(("m",), ("m",), end_inclusive=True),  # every key whose first field is "m"
    sd.Range(("g",), ("m", 5)),
    sd.Range(("m", 3), ("t", 0), start_inclusive=False, end_inclusive=True),
    sd.Range(("f", 2), ("m", 3)),
    sd.Range(),
], ids=repr)
def test_dump_range_multi_field_keys(tmp_path: Path, rng: sd.Range) -> None:
    store = sd.Store.open(str(tmp_path / "s"), create=True)
    table = make_table(store, split_points=[("m", 3), ("t",)], schema=MULTI)
    ref = Reference(MULTI)
    gen = __import__("random").Random(5)
    for part in range(2):
        data = pa.Table.from_pylist(
            [{"a": gen.choice("fgmmmmtux"), "b": gen.randint(0, 6), "ts": gen.randint(0, 9),
              "v": part * 1000 + i} for i in range(300)], schema=MULTI.to_arrow())
        table.ingest(data)
        ref.add(data)
    job = table.dump(str(tmp_path / "dumps"), range=rng)
    assert job.rows == len(ref.query(ranges=[rng]))
    loaded = store.load(job.manifest_uri, "copy")
    assert_matches(loaded.query(), ref, ranges=[rng])
    # into an existing table cut elsewhere (reference splitting)
    other = make_table(store, split_points=[("g",), ("m", 0), ("m", 5)], schema=MULTI)
    store.load(job.manifest_uri, other.name)
    assert_matches(other.query(), ref, ranges=[rng])


def test_dump_at_a_tagged_version(tmp_path: Path) -> None:
    store_uri: StoreUri = (str(tmp_path / "store"), {})
    store = open_store(store_uri)
    table, ref = source_table(store, n=150, **{"gc.delay_seconds": 0,
                                               "retention.seconds": 0, "gc.clock_skew_seconds": 0,
                                               "compaction.strategy": "basic",
                                               "compaction.batch_size": 2})
    table.tag("release")
    tagged = table.version
    ingest(table, ref, 150, 11)
    table.compact()
    table.gc()  # the tag keeps the tagged version's files
    job = table.dump(dump_root(store_uri), version="release")
    assert job.version == tagged
    assert_matches(store.load(job.manifest_uri, "at_tag").query(), ref.upto(3))
    job2 = table.dump(dump_root(store_uri), version=tagged - 1)
    assert_matches(store.load(job2.manifest_uri, "older").query(), ref.upto(2))
    assert [t.name for t in table.tags()] == ["release"]


# a dump reads one pinned version whatever the store: local disk only (round trips and
# resumes run on S3 too)
@pytest.mark.parametrize("store_uri", ["local"], indirect=True)
def test_dump_while_ingesting_is_consistent(store_uri: StoreUri,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    store = open_store(store_uri)
    table, ref = source_table(store, n=200, files=2)
    stop = threading.Event()
    errors: list[BaseException] = []

    def writer() -> None:
        seed = 100
        try:
            while not stop.is_set():
                ingest(table, ref, 50, seed)  # only this thread adds to ref from here on
                seed += 1
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    real = dump_mod.run_dump_task
    pinned: list[int] = []

    def slow_task(t: sd.Table, dest: ObjectStore, job_id: str, version: int,
                  task: Any) -> list[str]:
        pinned.append(version)
        deadline = time.monotonic() + 20
        while table.version <= version + 1 and time.monotonic() < deadline:
            time.sleep(0.01)  # let the writer commit while the dump is under way
        return real(t, dest, job_id, version, task)

    monkeypatch.setattr(dump_mod, "run_dump_task", slow_task)
    th = threading.Thread(target=writer)
    th.start()
    try:
        while table.version < 5:
            time.sleep(0.01)
        job = table.dump(dump_root(store_uri))
    finally:
        stop.set()
        th.join(60)
    assert not errors, errors
    assert set(pinned) == {job.version}
    assert table.version > job.version + 1  # commits landed during the dump
    expected = table.query(version=job.version)
    loaded = store.load(job.manifest_uri, "snap")
    assert result_rows(loaded.query(), ref.key_names) == result_rows(expected, ref.key_names)
    assert_matches(loaded.query(), ref.upto(job.version - 1))  # one add per version after 1
    assert_matches(table.query(), ref)


def test_dump_splits_tasks_into_batches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                        ) -> None:
    monkeypatch.setattr(dump_mod, "BATCH_ROWS", 70)
    store = sd.Store.open(str(tmp_path / "s"), create=True)
    table, ref = source_table(store, n=200, files=2)
    job = table.dump(str(tmp_path / "dumps"))
    doc = json.loads((tmp_path / "dumps" / job.job_id / "job-manifest.json").read_text())
    for task in doc["tasks"]:
        docs = [json.loads((tmp_path / "dumps" / m["path"]).read_text())
                for m in task["manifests"]]
        assert len(docs) >= 2
        assert [d["final"] for d in docs] == [False] * (len(docs) - 1) + [True]
        assert all(d["rows"] <= 70 + 1024 for d in docs)
    assert_matches(store.load(job.manifest_uri, "copy").query(), ref)


def test_dump_of_an_empty_range_or_table_loads_empty(tmp_path: Path) -> None:
    store = sd.Store.open(str(tmp_path / "s"), create=True)
    table, ref = source_table(store, n=100, files=1)
    rng = sd.Range("zzzzzzzzzzz", None)
    job = table.dump(str(tmp_path / "dumps"), range=rng)
    assert job.rows == 0
    assert store.load(job.manifest_uri, "none").query().num_rows == 0
    with pytest.raises(QueryError, match="empty"):  # (it could not be loaded)
        table.dump(str(tmp_path / "dumps"), range=sd.Range("m", "c"))
    assert not table._handle.objects.exists(LOCK_KEY)
    empty = make_table(store)
    job = empty.dump(str(tmp_path / "dumps"))
    assert job.rows == 0
    assert store.load(job.manifest_uri, "empty_copy").query().num_rows == 0


# ---- one job at a time, resume, retry ----------------------------------------------------------
def lock_doc(root: str, heartbeat: float, version: int, job_id: str = "other",
             rng: sd.Range | None = None) -> bytes:
    return json.dumps({"job_id": job_id, "root": root, "range": range_to_json(rng or sd.Range()),
                       "version": version, "started": heartbeat,
                       "heartbeat": heartbeat}).encode()


# the dump lock is a create-once, which tests/storage proves on S3 (with faults): local disk
# only
@pytest.mark.parametrize("store_uri", ["local"], indirect=True)
def test_one_dump_job_per_table(store_uri: StoreUri) -> None:
    store = open_store(store_uri)
    table, ref = source_table(store, n=100, files=1)
    root = dump_root(store_uri)
    dest = dump_objects(store_uri, root)
    table._handle.objects.put(LOCK_KEY, lock_doc(root + "-elsewhere", time.time(), table.version))
    with pytest.raises(JobError, match="one dump job per table"):
        table.dump(root)
    assert not list(dest.list(""))  # nothing written
    # a stale lock of a job to another root must be resumed or abandoned first
    table._handle.objects.put(LOCK_KEY, lock_doc(root + "-elsewhere", time.time() - 3600,
                                         table.version))
    with pytest.raises(JobError, match="abandon"):
        table.dump(root)
    table.abandon_dump()
    assert not table._handle.objects.exists(LOCK_KEY)
    job = table.dump(root)
    assert_matches(store.load(job.manifest_uri, "copy").query(), ref)
    # a stale lock of a job to this root that crashed before tagging its version: resumed
    table._handle.objects.put(LOCK_KEY, lock_doc(root, 0.0, table.version, job_id="crashed"))
    job = table.dump(root)
    assert job.job_id == "crashed" and job.resumed_tasks == 0
    assert table.tags() == [] and not table._handle.objects.exists(LOCK_KEY)
    assert_matches(store.load(job.manifest_uri, "copy2").query(), ref)
    # a dump with an unknown version fails at once and leaves no lock behind
    with pytest.raises(sd.SedimentError):
        table.dump(root, version=table.version + 10)
    assert not table._handle.objects.exists(LOCK_KEY)
    assert table.dump(root).rows == len(ref.rows)


def test_concurrent_dumps_of_one_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = sd.Store.open(str(tmp_path / "s"), create=True)
    table, ref = source_table(store, n=100, files=1)
    started, release = threading.Event(), threading.Event()
    real = dump_mod.run_dump_task

    def held(*args: Any) -> list[str]:
        started.set()
        release.wait(30)
        return real(*args)

    monkeypatch.setattr(dump_mod, "run_dump_task", held)
    out: list[Any] = []
    th = threading.Thread(target=lambda: out.append(table.dump(str(tmp_path / "a"))))
    th.start()
    try:
        assert started.wait(30)
        other = sd.Store.open(str(tmp_path / "s")).table(table.name)  # e.g. another process
        with pytest.raises(JobError, match="one dump job per table"):
            other.dump(str(tmp_path / "b"))
    finally:
        release.set()
        th.join(60)
    assert len(out) == 1
    assert not (tmp_path / "b").exists()
    assert_matches(store.load(out[0].manifest_uri, "copy").query(), ref)


def test_dump_interrupted_midway_resumes(store_uri: StoreUri,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    store = open_store(store_uri)
    table = make_table(store, split_points=["f", "m", "t"],
                       **{"gc.delay_seconds": 0, "retention.seconds": 0, "gc.clock_skew_seconds": 0,
                          "compaction.strategy": "basic",
                          "compaction.batch_size": 2})
    ref = Reference(SCHEMA)
    ingest(table, ref, 200, 1)
    pinned = ingest(table, ref, 200, 2)
    root = dump_root(store_uri)
    real = dump_mod.run_dump_task
    calls: list[str] = []
    lock = threading.Lock()

    def dies_after_two(t: sd.Table, dest: ObjectStore, job_id: str, version: int,
                       task: Any) -> list[str]:
        with lock:
            calls.append(task.task_id)
            n = len(calls)
        if n > 2:
            raise RuntimeError("killed")  # not a SedimentError: no retry, the job stops
        return real(t, dest, job_id, version, task)

    monkeypatch.setattr(dump_mod, "run_dump_task", dies_after_two)
    with pytest.raises(RuntimeError, match="killed"):
        table.dump(root)
    held = json.loads(table._handle.objects.get(LOCK_KEY))
    assert held["heartbeat"] == 0.0 and held["version"] == pinned
    dest = dump_objects(store_uri, root)
    assert not dest.exists(f"{held['job_id']}/job-manifest.json")
    # the table moves on meanwhile; the job's tag keeps its version's files
    ingest(table, ref, 200, 3)
    table.compact()
    table.gc()
    stored = {o.key for o in table._handle.objects.list("data/")}
    pinned_files = {r.filename for r in table.files(pinned)}
    assert pinned_files - {r.filename for r in table.files()}  # some compacted away...
    assert pinned_files <= stored  # ...yet kept: the job's tag protects them
    monkeypatch.setattr(dump_mod, "run_dump_task", real)
    job = table.dump(root)
    assert job.job_id == held["job_id"] and job.version == pinned
    assert job.resumed_tasks == 2 and job.tasks == 4
    assert not table._handle.objects.exists(LOCK_KEY) and table.tags() == []
    assert_matches(store.load(job.manifest_uri, "resumed").query(), ref.upto(2))


_KILLED_DUMP = """
import sys, time
sys.path.insert(0, sys.argv[1])
import sediment as sd
import sediment.dump.dump as d
store = sd.Store.open(sys.argv[2], create=True)
table = store.table(sys.argv[3])
real = d.run_dump_task
done = []
def task(*a):
    if len(done) == 2:
        open(sys.argv[5], "w").write("2")
        time.sleep(600)
    out = real(*a)
    done.append(out)
    return out
d.run_dump_task = task
d.dump_table(table._handle, sys.argv[4], threads=1)
"""


def test_dump_process_killed_midway_resumes(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    store = sd.Store.open(str(tmp_path / "s"), create=True)
    table = make_table(store, split_points=["d", "h", "m", "r"])
    ref = Reference(SCHEMA)
    ingest(table, ref, 400, 1)
    root, marker = str(tmp_path / "dumps"), tmp_path / "marker"
    proc = subprocess.Popen([sys.executable, "-c", _KILLED_DUMP, str(SRC), str(tmp_path / "s"),
                             table.name, root, str(marker)])
    try:
        deadline = time.monotonic() + 60
        while not marker.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert marker.exists(), "the dump process did not reach its third task"
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
    ingest(table, ref, 100, 2)
    # the killed job's lock is still fresh: a new dump is refused until its heartbeat is stale
    with pytest.raises(JobError, match="one dump job per table"):
        table.dump(root)
    monkeypatch.setattr(dump_mod, "LOCK_TIMEOUT_SECONDS", 0.2)
    time.sleep(0.3)
    job = table.dump(root)
    assert job.resumed_tasks == 2 and job.tasks == 5
    assert_matches(store.load(job.manifest_uri, "copy").query(), ref.upto(1))


def test_failing_task_is_retried_and_clears_its_folder(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    store_uri: StoreUri = (str(tmp_path / "store"), {})
    store = open_store(store_uri)
    table, ref = source_table(store, n=200, files=2)
    root = dump_root(store_uri)
    dest = dump_objects(store_uri, root)
    real = dump_mod._write_batch
    failures: list[str] = []

    def flaky(d: ObjectStore, prefix: str, *args: Any, **kw: Any) -> dict[str, Any]:
        if "/task-00001/" in prefix and not failures:
            failures.append(prefix)
            d.put(f"{prefix}/stray.bin", b"left by the failed attempt")
            d.put(f"{prefix.rsplit('/', 1)[0]}/batch-00009/{args[0]}-data.parquet", b"partial")
            raise StorageError("connection reset")
        return real(d, prefix, *args, **kw)

    monkeypatch.setattr(dump_mod, "_write_batch", flaky)
    job = table.dump(root)
    assert failures and job.resumed_tasks == 0
    keys = [o.key for o in dest.list(f"{job.job_id}/task-00001/")]
    assert keys and not [k for k in keys if "stray" in k or "batch-00009" in k]
    assert_matches(store.load(job.manifest_uri, "copy").query(), ref)

    # a task that always fails: the job fails naming it, and the next dump resumes the rest
    def broken(d: ObjectStore, prefix: str, *args: Any, **kw: Any) -> dict[str, Any]:
        if "/task-00002/" in prefix:
            raise StorageError("disk full")
        return real(d, prefix, *args, **kw)

    monkeypatch.setattr(dump_mod, "_write_batch", broken)
    with pytest.raises(JobError, match="task-00002 failed 3 times"):
        table.dump(root)
    monkeypatch.setattr(dump_mod, "_write_batch", real)
    job = table.dump(root)
    assert job.resumed_tasks == 2
    assert_matches(store.load(job.manifest_uri, "copy2").query(), ref)


# ---- load verification -----------------------------------------------------------------------
def _sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


class Recorder:
    """An object store's get/put/delete, remembering the keys written or deleted."""

    def __init__(self, inner: ObjectStore) -> None:
        self.inner = inner
        self.touched: set[str] = set()

    def get(self, key: str) -> bytes:
        return self.inner.get(key)

    def put(self, key: str, data: bytes) -> None:
        self.touched.add(key)
        self.inner.put(key, data)

    def delete_many(self, keys: list[str]) -> None:
        self.touched.update(keys)
        self.inner.delete_many(keys)

    def restore(self, original: dict[str, bytes]) -> None:
        """Put every touched key back as it was."""
        for k in sorted(self.touched):
            if k in original:
                self.inner.put(k, original[k])
            else:
                self.inner.delete_many([k])
        self.touched.clear()


class Dump:
    """Edits to a dump through its object store (local folder or S3)."""

    def __init__(self, dest: ObjectStore, job_id: str) -> None:
        self.dest = Recorder(dest)
        self.job_key = f"{job_id}/job-manifest.json"

    def job(self) -> dict[str, Any]:
        return _unsealed(self.dest.get(self.job_key))

    def put_job(self, doc: dict[str, Any]) -> None:
        self.dest.put(self.job_key, json.dumps(doc).encode())

    def manifest_path(self, task: int = 0) -> str:
        return str(self.job()["tasks"][task]["manifests"][0]["path"])

    def manifest(self, task: int = 0) -> dict[str, Any]:
        return _unsealed(self.dest.get(self.manifest_path(task)))

    def file_path(self, kind: str, task: int = 0) -> str:
        return next(f["path"] for f in self.manifest(task)["files"] if f["kind"] == kind)

    def put_manifest(self, doc: dict[str, Any], task: int = 0, *, rehash: bool = True) -> None:
        """Rewrite a task manifest; ``rehash`` updates the job manifest's checksum (a
        consistent, if hostile, dump)."""
        raw = json.dumps(doc).encode()
        self.dest.put(self.manifest_path(task), raw)
        if rehash:
            job = self.job()
            job["tasks"][task]["manifests"][0]["sha256"] = _sha(raw)
            self.put_job(job)

    def replace_file(self, kind: str, data: bytes, task: int = 0, **changes: Any) -> str:
        """Replace a data/sample file and rewrite the manifests to match it."""
        path = self.file_path(kind, task)
        self.dest.put(path, data)
        doc = self.manifest(task)
        for f in doc["files"]:
            if f["kind"] == kind:
                f.update(sha256=_sha(data), crc32=f"{zlib.crc32(data):08x}", bytes=len(data),
                         **changes)
        self.put_manifest(doc, task)
        return path


def _unsealed(raw: bytes) -> dict[str, Any]:
    """A manifest without its seal ("crc32"): re-encoded, it reads as one written before
    seals, so an edit reaches the check it is about rather than the manifest's checksum."""
    return {k: v for k, v in json.loads(raw).items() if k != "crc32"}


def _flip(d: Dump, kind: str) -> str:
    path = d.file_path(kind)
    raw = bytearray(d.dest.get(path))
    raw[len(raw) // 2] ^= 0xFF
    d.dest.put(path, bytes(raw))
    return path


def _truncate(d: Dump, key: str) -> str:
    d.dest.put(key, d.dest.get(key)[: 40])
    return key


def _delete(d: Dump, key: str) -> str:
    d.dest.delete_many([key])
    return key


def _set_manifest_path(d: Dump, path: str) -> str:
    job = d.job()
    job["tasks"][1]["manifests"][0]["path"] = path
    d.put_job(job)
    return path


def _set_file_path(d: Dump, path: str) -> str:
    doc = d.manifest()
    doc["files"][0]["path"] = path
    d.put_manifest(doc)
    return path


def _rows_lie(d: Dump) -> str:
    doc = d.manifest()
    for f in doc["files"]:
        if f["kind"] == "data":
            f["rows"] += 5
    doc["rows"] += 5
    d.put_manifest(doc)
    return d.file_path("data")


def _drop_task(d: Dump) -> str:
    job = d.job()
    del job["tasks"][1]
    d.put_job(job)
    return "do not tile"


def _overlap_tasks(d: Dump) -> str:
    job = d.job()
    job["tasks"][1]["range"] = job["tasks"][0]["range"] | {"end": job["tasks"][1]["range"]["end"]}
    d.put_job(job)
    return "do not tile"


def _tasks_out_of_order(d: Dump) -> str:
    job = d.job()
    a, b, c = (t["range"] for t in job["tasks"])  # [None, g) [g, p) [p, None)
    a["end"], b["start"], b["end"], c["start"] = b["end"], b["end"], a["end"], a["end"]
    d.put_job(job)  # [None, p) [p, g) [g, None): the ends meet, but one range runs backwards
    return "do not tile"


def _version_mismatch(d: Dump) -> str:
    doc = d.manifest()
    doc["version"] += 1
    d.put_manifest(doc)
    return d.manifest_path()


def _garbage_manifest(d: Dump) -> str:
    path = d.manifest_path()
    raw = b'{"format": 1, "files": [unterminated'
    d.dest.put(path, raw)
    job = d.job()
    job["tasks"][0]["manifests"][0]["sha256"] = _sha(raw)
    d.put_job(job)
    return path


def _bad_checksum(d: Dump) -> str:
    job = d.job()
    job["tasks"][0]["manifests"][0]["sha256"] = "0" * 64
    d.put_job(job)
    return d.manifest_path()


def _other_schema_file(d: Dump) -> str:
    t = pq.read_table(pa.BufferReader(d.dest.get(d.file_path("data"))))
    t = t.set_column(3, "nullable_value", pc.cast(t.column("timestamp"), pa.string()))
    t = t.rename_columns(["key", "timestamp", "value", "other"])
    buf = pa.BufferOutputStream()
    pq.write_table(t, buf)
    return d.replace_file("data", buf.getvalue().to_pybytes())


def _other_tasks_data(d: Dump) -> str:
    """Task 1's (valid, sorted) data file in place of task 0's: keys outside task 0's range."""
    data = d.dest.get(d.file_path("data", task=1))
    rows = pq.ParquetFile(pa.BufferReader(data)).metadata.num_rows
    return d.replace_file("data", data, rows=rows)


def _unsorted_data(d: Dump) -> str:
    t = pq.read_table(pa.BufferReader(d.dest.get(d.file_path("data"))))
    buf = pa.BufferOutputStream()
    pq.write_table(t.take(pa.array(range(t.num_rows - 1, -1, -1))), buf)
    return d.replace_file("data", buf.getvalue().to_pybytes())


CORRUPTIONS: list[tuple[str, Callable[[Dump], str]]] = [
    ("data file bytes flipped", lambda d: _flip(d, "data")),
    ("sample file bytes flipped", lambda d: _flip(d, "sample")),
    ("data file truncated", lambda d: _truncate(d, d.file_path("data"))),
    ("data file missing", lambda d: _delete(d, d.file_path("data"))),
    ("sample file missing", lambda d: _delete(d, d.file_path("sample"))),
    ("data file not parquet, checksums rewritten",
     lambda d: d.replace_file("data", b"PAR1 this is not parquet PAR1")),
    ("data file rows differ from manifest", _rows_lie),
    ("data file of another schema", _other_schema_file),
    ("data file outside its task's range, checksums rewritten", _other_tasks_data),
    ("data file not sorted, checksums rewritten", _unsorted_data),
    ("task manifest truncated", lambda d: _truncate(d, d.manifest_path())),
    ("task manifest not JSON, checksum rewritten", _garbage_manifest),
    ("task manifest missing", lambda d: _delete(d, d.manifest_path())),
    ("task manifest checksum mismatch", _bad_checksum),
    ("task manifest of another version", _version_mismatch),
    ("job manifest truncated", lambda d: _truncate(d, d.job_key)),
    ("job manifest missing", lambda d: _delete(d, d.job_key)),
    ("manifest path with ..", lambda d: _set_manifest_path(d, "../outside/1-manifest.json")),
    ("absolute manifest path", lambda d: _set_manifest_path(d, "/etc/passwd")),
    ("manifest path with scheme", lambda d: _set_manifest_path(d, "file:///etc/passwd")),
    ("data path with ..", lambda d: _set_file_path(d, "../../outside/1-data.parquet")),
    ("data path absolute", lambda d: _set_file_path(d, "/etc/passwd")),
    ("data path in another task's folder",
     lambda d: _set_file_path(d, d.file_path("data", task=1))),
    ("task ranges with a gap", _drop_task),
    ("task ranges overlapping", _overlap_tasks),
    ("task ranges out of order", _tasks_out_of_order),
]


# On S3 a representative subset (the moto server is slow); every case runs on a local folder.
S3_CORRUPTIONS = {"data file bytes flipped", "data file not parquet, checksums rewritten",
                  "task manifest truncated", "manifest path with ..", "task ranges with a gap"}


def test_load_rejects_corrupt_or_hostile_dumps(store_uri: StoreUri) -> None:
    on_s3 = store_uri[0].startswith("s3://")
    cases = [(n, c) for n, c in CORRUPTIONS if not on_s3 or n in S3_CORRUPTIONS]
    store = open_store(store_uri)
    table, ref = source_table(store, n=150, files=2)
    root = dump_root(store_uri)
    job = table.dump(root)
    dest = dump_objects(store_uri, root)
    if not on_s3:  # a real file where a '..' path would lead
        outside = Path(root).parent / "outside"
        outside.mkdir()
        (outside / "1-manifest.json").write_text("{}")
        (outside / "1-data.parquet").write_bytes(b"x")
    original = snapshot_objects(dest)
    existing = make_table(store, split_points=["k"])
    ingest(existing, Reference(SCHEMA), 50, 99)
    existing_version = existing.version
    tables, keys = store.tables(), table_keys(store)
    d = Dump(dest, job.job_id)
    for i, (name, corrupt) in enumerate(cases):
        named = corrupt(d)
        for target in ("fresh", existing.name) if i % 2 == 0 or not on_s3 else ("fresh",):
            with pytest.raises(CorruptMetadataError) as err:
                store.load(job.manifest_uri, target)
            assert named in str(err.value), (name, str(err.value))
        assert store.tables() == tables, name  # nothing committed, nothing half-created
        assert table_keys(store) == keys, name  # not even a copied file
        assert existing.version == existing_version, name
        d.dest.restore(original)  # put the dump back as it was
    with pytest.raises(TableNotFoundError):
        store.table("fresh")
    # the untouched dump loads
    assert_matches(store.load(job.manifest_uri, "fresh").query(), ref)
    with pytest.raises(CorruptMetadataError):
        store.load(f"{root}/no-such-job/job-manifest.json", "other")


def test_load_into_existing_table_with_other_partitions(store_uri: StoreUri) -> None:
    store = open_store(store_uri)
    table, ref = source_table(store, n=300, files=2)
    job = table.dump(dump_root(store_uri))
    target = make_table(store, split_points=["c", "k", "x"],
                        **{"compaction.strategy": "basic", "compaction.batch_size": 2})
    both = Reference(SCHEMA)
    ingest(target, both, 200, 42)
    both.rows.extend(ref.rows)  # the dumped rows, loaded on top
    before = target.version
    store.load(job.manifest_uri, target.name)
    assert target.version == before + 1  # one transaction
    assert target.history()[-1].kind == "add_files"
    assert_matches(target.query(), both)
    r = sd.Range("f", "q")
    assert_matches(target.query(ranges=[r]), both, ranges=[r])
    refs = target.files()
    assert {p.region for p in target.partitions() if p.is_leaf} == \
        {sd.Region(None, ("c",)), sd.Region(("c",), ("k",)), sd.Region(("k",), ("x",)),
         sd.Region(("x",), None)}
    loaded_refs = [x for x in refs if x.approximate]
    assert loaded_refs  # dumped files spanning several leaves are referenced from each
    assert len({x.filename for x in loaded_refs}) < len(loaded_refs)
    target.compact()
    assert_matches(target.query(), both)
    assert sum(x.records for x in target.files()) == len(both.rows)


def test_a_load_retried_adds_the_dump_once(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """A load is committed under the dump's identity (its job manifest's SHA-256) as an
    idempotency key: run again (a retry after a lost answer or a crash, a second run of the
    same command) it answers the first load's version and adds nothing, into a new table
    (created by the first) or an existing one; another dump still loads."""
    from sediment.dump.load import KeyedLoad, load_key, open_dump
    from sediment.ingest.idempotency import KeyRecord, record_key
    from sediment.state.documents import read_sealed

    store = sd.Store.open(str(tmp_path / "s"), create=True)
    table, ref = source_table(store, n=200, files=2)
    job = table.dump(str(tmp_path / "dumps"))
    copy, first = store._load(job.manifest_uri, "copy")
    assert not first.replayed and first.rows == 400 and first.version == copy.version
    for _ in range(2):
        again = store._load(job.manifest_uri, "copy")[1]
        assert again.replayed and again.version == first.version
    assert_matches(copy.query(), ref)

    # into an existing table: once; the key's record left as claimed (a crash after the
    # commit, before the record was updated): the log holds the key, and the copies made
    # again are deleted
    target = make_table(store, name="target")
    loaded = store._load(job.manifest_uri, "target")[1]
    assert not loaded.replayed and store.table("target").version == loaded.version
    dump = open_dump(job.manifest_uri, store.object_store_at)
    target_objects = target._handle.objects
    path = record_key(load_key(dump).key)
    held = KeyRecord.from_doc(read_sealed(target_objects, path, path))
    assert held.version == loaded.version
    target_objects.put(path, dataclasses.replace(held, version=None, result={}).to_bytes())
    data_before = {o.key for o in target_objects.list("data/")}
    again = KeyedLoad(dump).into(target._handle)
    assert again.replayed and again.version == loaded.version
    assert {o.key for o in target_objects.list("data/")} == data_before
    assert store.table("target").version == loaded.version
    assert_matches(store.table("target").query(), ref)

    # another dump of the same table (one more ingest since) is another load
    ingest(table, ref, 50, 7)
    job2 = table.dump(str(tmp_path / "dumps2"))
    more = store._load(job2.manifest_uri, "target")[1]
    assert not more.replayed and more.rows == 450
    assert store.table("target").query().num_rows == 400 + 450


def test_load_into_table_with_other_schema(tmp_path: Path) -> None:
    store = sd.Store.open(str(tmp_path / "s"), create=True)
    table, ref = source_table(store, n=100, files=1)
    job = table.dump(str(tmp_path / "dumps"))
    other_schema = sd.Schema(row_keys=[("key", pa.string())], sort_keys=[("timestamp", pa.int64())],
                             values=[("value", pa.string())])
    other = store.create_table("other", other_schema)
    other_keys = sd.Schema(row_keys=[("key", pa.binary())], sort_keys=[("timestamp", pa.int64())],
                           values=[("value", pa.string()), ("nullable_value", pa.string())])
    third = store.create_table("third", other_keys)
    said = {"other": "value field 'nullable_value' is not in the existing schema",
            "third": "row key field 'key' is binary"}
    for t in (other, third):
        v = t.version
        with pytest.raises(SchemaError, match=said[t.name]):  # names the field that differs
            store.load(job.manifest_uri, t.name)
        assert t.version == v and t.files() == []
    assert_matches(store.load(job.manifest_uri, "same").query(), ref)


def test_dump_copies_whole_compacted_files_byte_for_byte(tmp_path: Path) -> None:
    """A leaf whose one file lies inside the range is dumped by copying bytes, not rewriting."""
    import json

    import pyarrow as pa

    from sediment.workload import benchmark_schema

    store = sd.Store.open(str(tmp_path / "store"), create=True)
    table = store.create_table("ev", benchmark_schema(), split_points=["h", "p"],
                               properties={"compaction.strategy": "basic",
                                           "compaction.batch_size": 2})
    for b in generate(30_000, batch_rows=15_000, seed=5):
        table.ingest(b)
    table.compact()
    assert all(len([f for f in table.files() if f.partition_id == leaf.id]) == 1
               for leaf in table.partitions() if leaf.is_leaf)
    job = table.dump(str(tmp_path / "dump"))
    manifests = [json.loads(p.read_text()) for p in (tmp_path / "dump").rglob("*-manifest.json")
                 if p.name != "job-manifest.json"]
    assert manifests and all(m.get("copied") for m in manifests)
    data = {f.filename: table._handle.objects.get(f.filename) for f in table.files()}
    dumped = [p.read_bytes() for p in (tmp_path / "dump").rglob("*-data.parquet")]
    assert sorted(dumped) == sorted(data.values())  # the very same bytes
    copy = store.load(job.manifest_uri, "copy")
    assert copy.query().equals(table.query())
    assert pa.Table.from_batches(list(copy.scan())).num_rows == 30_000


def test_a_root_inside_the_store_is_refused(tmp_path: Path) -> None:
    """Among the store's table folders a dump would be taken for a dropped table's folder,
    which the collection of unnamed folders deletes."""
    store = sd.Store.open(str(tmp_path / "s"), create=True)
    table, _ = source_table(store, n=10, files=1)
    for root in (str(tmp_path / "s" / "tables" / "backup"), str(tmp_path / "s" / "tables"),
                 f"file://{tmp_path / 's' / 'tables' / 'x'}"):
        with pytest.raises(QueryError, match="inside the store's table folders"):
            table.dump(root)
    table.dump(str(tmp_path / "s" / "tables-dumps"))  # a sibling named alike is outside
    table.dump(str(tmp_path / "s" / "dumps"))  # beside the table folders: nothing takes it
