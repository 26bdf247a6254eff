"""Dumps and loads of any size: files of tens of MiB cross the store's seam in parts (S3
multipart uploads, ranged reads), inside the storage service where both ends are on it, in
bounded memory, and a dump killed mid-upload resumes. Parts are lowered to a few hundred KiB
(the moto server takes parts down to ``support.s3.PART_MIN_SIZE``), so tens of MiB are many
parts; the expected rows are the generated ones, sorted here.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import sediment as sd
from sediment.storage import open_object_store
from sediment.storage.s3 import S3ObjectStore
from support.s3 import s3_client

SRC = Path(__file__).resolve().parents[2] / "src"
SCHEMA = sd.Schema(row_keys=[("key", pa.string())], values=[("blob", pa.binary())])
PART = 256 * 1024


def blobs(n: int, size: int, seed: int) -> pa.Table:
    """``n`` rows of ``size`` random (incompressible) bytes each, keys shuffled."""
    rng = np.random.default_rng(seed)
    keys = [f"k{seed}-{i:06d}" for i in rng.permutation(n)]
    raw = rng.integers(0, 256, n * size, dtype=np.uint8).tobytes()
    return pa.table({"key": keys, "blob": [raw[i * size:(i + 1) * size] for i in range(n)]})


def expected(*parts: pa.Table) -> pa.Table:
    return pa.concat_tables(parts).sort_by("key").cast(SCHEMA.to_arrow())


def one_file_table(store: sd.Store, data: pa.Table, name: str = "big") -> sd.Table:
    """A one-leaf table holding ``data`` in one file: a dump copies it whole."""
    table = store.create_table(name, SCHEMA)
    table.ingest(data)
    assert len(table.files()) == 1
    return table


@pytest.mark.faults
def test_a_dump_and_load_on_one_service_copy_inside_it(
        proxied_s3: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Table, dump and loaded table on one S3 endpoint: the dump copies the 12 MiB file by
    ``UploadPartCopy`` (past a lowered ``copy_limit``), and the load, after reading the
    dump once to verify it, copies it into the table the same way. The proxy counts the
    bodies: the data never goes up from the client, and comes down once (the load's check)."""
    monkeypatch.setattr(S3ObjectStore, "part_size", PART)
    monkeypatch.setattr(S3ObjectStore, "copy_limit", 4 * 1024 * 1024)
    monkeypatch.setattr(S3ObjectStore, "copy_part_size", 2 * 1024 * 1024)
    store = proxied_s3.open()
    data = blobs(1_500, 8 * 1024, 1)
    one_file_table(proxied_s3.open_direct(), data)  # the bytes put not counted
    counts = proxied_s3.proxy.counts
    up, down = counts["body_bytes_up"], counts["body_bytes_down"]
    root = proxied_s3.uri.rsplit("/", 1)[0] + "/dumps"
    job = store.table("big").dump(root)
    assert counts["body_bytes_up"] - up < 512 * 1024  # manifests and the sample
    assert counts["body_bytes_down"] - down < 512 * 1024  # footer, sample
    dest: Any = open_object_store(root, **proxied_s3.direct_options)
    (manifest,) = [json.loads(dest.get(o.key)) for o in dest.list(f"{job.job_id}/")
                   if o.key.endswith("-manifest.json") and "job-" not in o.key]
    entry = next(f for f in manifest["files"] if f["kind"] == "data")
    assert manifest["copied"] and "sha256" not in entry and len(entry["crc32"]) == 8
    assert entry["bytes"] >= 11 * 1024 * 1024
    parts = -(-entry["bytes"] // (2 * 1024 * 1024))  # copied in parts: S3's ETag counts them
    assert dest._client.head_object(Bucket=dest.bucket, Key=dest._k(entry["path"]))[
        "ETag"].strip('"').endswith(f"-{parts}")
    up, down = counts["body_bytes_up"], counts["body_bytes_down"]
    store.load(job.manifest_uri, "loaded")
    assert counts["body_bytes_up"] - up < 512 * 1024
    assert counts["body_bytes_down"] - down < entry["bytes"] + 2 * 1024 * 1024  # read once
    assert proxied_s3.open_direct().table("loaded").query().equals(expected(data))
    assert list(store.objects.multipart_uploads("")) == []


_MEASURED = """
import io, json, sys
sys.path.insert(0, sys.argv[1])
import pyarrow as pa, pyarrow.parquet as pq
import sediment as sd
from sediment.storage.local import LocalObjectStore

def peak():  # this process's high-water RSS (ru_maxrss keeps the forking parent's)
    with open("/proc/self/status") as f:
        return next(int(x.split()[1]) * 1024 for x in f if x.startswith("VmHWM:"))

LocalObjectStore.part_size = int(sys.argv[4])
store = sd.Store.open(sys.argv[2])
table = store.table("big")
buf = io.BytesIO()  # pyarrow's readers and writers loaded (some 50 MiB whatever the data)
pq.write_table(pa.table({"k": ["a"]}), buf)
pq.read_table(io.BytesIO(buf.getvalue()))
base = peak()
job = table.dump(sys.argv[3])
after_dump = peak()
loaded = store.load(job.manifest_uri, "loaded")
print(json.dumps({"base": base, "dump": after_dump, "peak": peak(),
                  "rows": loaded.files()[0].records}))
"""


def test_a_dump_and_load_stream_in_bounded_memory(tmp_path: Path) -> None:
    """A 40 MiB file dumped and loaded (local disk, streamed: no service copies between
    folders) by a process whose peak RSS grows by far less than the file: parts of 256 KiB,
    never the whole file. The old whole-object reads grew it by the file's size at least."""
    store = sd.Store.open(str(tmp_path / "s"), create=True)
    data = blobs(5_000, 8 * 1024, 2)
    table = one_file_table(store, data)
    size = os.path.getsize(table._handle.objects.local_path(table.files()[0].filename) or "")
    assert size >= 38 * 1024 * 1024
    out = subprocess.run([sys.executable, "-c", _MEASURED, str(SRC), str(tmp_path / "s"),
                          str(tmp_path / "dumps"), str(PART)],
                         capture_output=True, text=True, timeout=120, check=True)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    grew = got["peak"] - got["base"]
    print(f"file {size / 2**20:.1f} MiB; peak RSS {got['peak'] / 2**20:.1f} MiB, grew "
          f"{grew / 2**20:.1f} MiB")
    assert got["rows"] == data.num_rows
    assert grew < size / 2 and got["peak"] < 256 * 2**20, got
    assert store.table("loaded").query().equals(expected(data))


_KILLED = """
import sys
sys.path.insert(0, sys.argv[1])
import sediment as sd
from sediment.storage.s3 import S3ObjectStore
import sediment.storage.s3_multipart as mp
S3ObjectStore.part_size = int(sys.argv[5])
mp.UPLOADS_IN_FLIGHT = 1
options = {"endpoint_url": sys.argv[6], "region": "us-east-1",
           "access_key_id": "testing", "secret_access_key": "testing"}
store = sd.Store.open(sys.argv[2], **options)
store.table(sys.argv[3]).dump(sys.argv[4])
"""


@pytest.mark.slow
@pytest.mark.s3
def test_a_dump_killed_mid_upload_resumes_and_aborts_the_upload(
        s3_store_uri: tuple[str, dict[str, Any]], s3_server: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """kill -9 of a dump process while a data file's multipart upload is in flight (the
    leaf's two files are merged, so the dump encodes and streams a new file): the next dump
    to the same root, once the lock is stale, resumes the job, aborts the upload the kill
    left and writes the file again from its first part; the load answers the rows. Slow
    (a process started and killed, some 10 s on moto): in the full lane."""
    import sediment.dump.dump as dump_mod

    uri, options = s3_store_uri
    store = sd.Store.open(uri, **options, create=True)
    first, second = blobs(200, 8 * 1024, 3), blobs(200, 8 * 1024, 4)
    table = store.create_table("big", SCHEMA)
    table.ingest(first)
    table.ingest(second)
    bucket = uri[len("s3://"):].split("/", 1)[0]
    root = f"s3://{bucket}/dumps-{uuid.uuid4().hex[:8]}"
    client = s3_client(s3_server)
    prefix = root.split("/", 3)[3] + "/"

    def uploads() -> list[dict[str, Any]]:
        return list(client.list_multipart_uploads(Bucket=bucket, Prefix=prefix)
                    .get("Uploads", []))

    proc = subprocess.Popen([sys.executable, "-c", _KILLED, str(SRC), uri, "big", root,
                             str(64 * 1024), s3_server])
    try:
        deadline = time.monotonic() + 60
        while not uploads() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert uploads(), "the dump process started no multipart upload"
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
    assert len(uploads()) == 1  # left incomplete by the kill
    monkeypatch.setattr(dump_mod, "LOCK_TIMEOUT_SECONDS", 0.2)
    time.sleep(0.3)
    job = table.dump(root)
    assert uploads() == []  # aborted when the task was restarted
    assert job.rows == 400
    assert store.load(job.manifest_uri, "loaded").query().equals(expected(first, second))


@pytest.mark.s3
def test_abandoning_a_dump_aborts_the_uploads_its_tasks_left(
        s3_store_uri: tuple[str, dict[str, Any]], monkeypatch: pytest.MonkeyPatch) -> None:
    """A dump that stopped mid-upload (here a task that starts an upload, sends a part and
    dies with it unfinished, as a killed process does) and is then abandoned leaves no
    incomplete upload under its job's folder: S3 would keep its parts, and bill them."""
    import sediment.dump.dump as dump_mod

    uri, options = s3_store_uri
    store = sd.Store.open(uri, **options, create=True)
    table = store.create_table("t", SCHEMA)
    table.ingest(blobs(10, 100, 5))
    bucket = uri[len("s3://"):].split("/", 1)[0]
    root = f"s3://{bucket}/dumps-{uuid.uuid4().hex[:8]}"
    dest: Any = open_object_store(root, **options)

    def dies_mid_upload(_table: Any, _dest: Any, job_id: str, *_: Any) -> list[str]:
        key = dest._k(f"{job_id}/task-00000/batch-00000/1-data.parquet")
        up = dest._client.create_multipart_upload(Bucket=bucket, Key=key)
        dest._client.upload_part(Bucket=bucket, Key=key, UploadId=up["UploadId"],
                                 PartNumber=1, Body=b"x" * 100)
        raise RuntimeError("killed")  # not a SedimentError: the job stops, lock held

    monkeypatch.setattr(dump_mod, "run_dump_task", dies_mid_upload)
    with pytest.raises(RuntimeError, match="killed"):
        table.dump(root)
    assert len(list(dest.multipart_uploads(""))) == 1
    table.abandon_dump()
    assert list(dest.multipart_uploads("")) == []
