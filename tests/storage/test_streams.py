"""Objects of any size through the store's seam (sediment.storage.streams): streaming writes
(S3 multipart uploads past a part), reads part by part, server-side copies, incomplete uploads
listed and aborted. Parts are lowered to a few hundred KiB (the moto server takes parts down to
``support.s3.PART_MIN_SIZE``), so objects of a few MiB take many parts.
"""

from __future__ import annotations

import os
import zlib
from typing import Any

import pytest

from sediment.errors import ObjectNotFoundError
from sediment.storage import ObjectStore, open_object_store
from sediment.storage.checksums import ChecksumMismatch
from sediment.storage.s3 import S3ObjectStore
from sediment.storage.transfer import Expected, transfer
from support.s3 import s3_client

PART = 256 * 1024
DATA = os.urandom(2 * 1024 * 1024 + 12_345)  # 9 parts, the last short


def _chunks(data: bytes) -> list[bytes]:
    """Writes of uneven sizes, some larger than a part, some tiny."""
    out, at, sizes = [], 0, [1, 7_000, 600_000, 100, PART, 3 * PART + 5]
    i = 0
    while at < len(data):
        n = sizes[i % len(sizes)]
        out.append(data[at:at + n])
        at += n
        i += 1
    return out


@pytest.fixture(params=["memory", "local", pytest.param("s3", marks=pytest.mark.s3)])
def store(request: pytest.FixtureRequest, tmp_path: Any) -> ObjectStore:
    if request.param == "memory":
        s = open_object_store(f"memory://streams-{os.getpid()}-{id(request)}")
    elif request.param == "local":
        s = open_object_store(str(tmp_path / "objects"))
    else:
        uri, options = request.getfixturevalue("s3_store_uri")
        s = open_object_store(uri, **options)
    s.part_size = PART
    return s


def _etag(objects: ObjectStore, key: str) -> str:
    assert isinstance(objects, S3ObjectStore)
    r = objects._client.head_object(Bucket=objects.bucket, Key=objects._k(key))
    return str(r["ETag"])


def test_a_streamed_write_appears_whole_at_commit_and_reads_back_part_by_part(
        store: ObjectStore) -> None:
    with store.open_writer("big/object.bin") as w:
        for c in _chunks(DATA):
            w.write(c)
        assert store.head("big/object.bin") is None  # nothing visible before the commit
    assert store.get("big/object.bin") == DATA
    parts = list(store.read_parts("big/object.bin"))
    assert b"".join(parts) == DATA and len(parts) == -(-len(DATA) // PART)
    assert all(len(p) <= PART for p in parts)
    if isinstance(store, S3ObjectStore):  # a multipart upload: S3's ETag counts its parts
        assert _etag(store, "big/object.bin").strip('"').endswith(f"-{-(-len(DATA) // PART)}")
        assert list(store.multipart_uploads("big/")) == []
    # a small object is one put; an aborted one leaves nothing, not even an upload
    with store.open_writer("small.bin") as w:
        w.write(b"abc")
    assert store.get("small.bin") == b"abc"
    with pytest.raises(RuntimeError), store.open_writer("gone.bin") as w:
        w.write(DATA[: 2 * PART + 1])
        raise RuntimeError("the producer failed")
    assert store.head("gone.bin") is None and list(store.multipart_uploads("")) == []
    assert list(store.temporaries("")) == []
    with pytest.raises(ObjectNotFoundError):
        list(store.read_parts("missing.bin"))


@pytest.mark.s3
def test_incomplete_uploads_are_listed_and_aborted(s3_store_uri: tuple[str, dict[str, Any]]
                                                   ) -> None:
    """An upload a killed writer left (parts sent, never completed) is listed under its
    prefix, by key and start time, and aborted; aborting one already gone is no error."""
    uri, options = s3_store_uri
    store = open_object_store(uri, **options)
    table = store.child("tables/t1")
    assert isinstance(store, S3ObjectStore)
    client = store._client
    up = client.create_multipart_upload(Bucket=store.bucket, Key=store._k("tables/t1/data/x"))
    client.upload_part(Bucket=store.bucket, Key=store._k("tables/t1/data/x"),
                       UploadId=up["UploadId"], PartNumber=1, Body=DATA[:PART])
    listed = list(table.multipart_uploads(""))
    assert [(u.key, u.upload_id) for u in listed] == [("data/x", up["UploadId"])]
    assert list(table.multipart_uploads("log/")) == []
    assert table.abort_uploads(listed) == 1
    assert list(store.multipart_uploads("")) == []
    assert table.abort_uploads(listed) == 0


@pytest.mark.faults
def test_a_copy_on_one_service_moves_no_data_through_the_client(
        proxied_s3: Any, s3_server: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Both ends behind the same endpoint: ``CopyObject`` (S3's CRC-32 of the copy checked)
    and, past ``copy_limit``, ``UploadPartCopy``; the proxy counts the bodies that pass, a
    few KiB of XML for 2 MiB copied. A store on another endpoint (the server direct, not
    through the proxy) is another service: the bytes are streamed, every one through the
    client, and checked."""
    monkeypatch.setattr(S3ObjectStore, "part_size", PART)
    monkeypatch.setattr(S3ObjectStore, "copy_part_size", PART)
    src = open_object_store(proxied_s3.uri + "/src", **proxied_s3.options)
    dest = open_object_store(proxied_s3.uri + "/dest", **proxied_s3.options)
    open_object_store(proxied_s3.uri + "/src", **proxied_s3.direct_options).put("a", DATA)
    counts = proxied_s3.proxy.counts
    before = counts["body_bytes_up"] + counts["body_bytes_down"]
    done = transfer(src, "a", dest, "one", expect=Expected(len(DATA), zlib.crc32(DATA)))
    assert done.server_side and done.crc32 == zlib.crc32(DATA) and done.size == len(DATA)
    monkeypatch.setattr(S3ObjectStore, "copy_limit", 2 * PART)
    done = transfer(src, "a", dest, "parts", expect=Expected(len(DATA)))
    assert done.server_side and done.size == len(DATA)
    moved = counts["body_bytes_up"] + counts["body_bytes_down"] - before
    assert moved < 64 * 1024, moved
    check = open_object_store(proxied_s3.uri + "/dest", **proxied_s3.direct_options)
    assert check.get("one") == DATA and check.get("parts") == DATA
    assert _etag(check, "parts").strip('"').endswith(f"-{-(-len(DATA) // PART)}")
    # a copy the service says differs from what was expected is deleted, and refused
    with pytest.raises(ChecksumMismatch):
        monkeypatch.setattr(S3ObjectStore, "copy_limit", 5 * 1024**3)
        transfer(src, "a", dest, "wrong", expect=Expected(len(DATA), zlib.crc32(DATA) ^ 1))
    assert check.head("wrong") is None
    # another endpoint: streamed, checked, aborted when it differs
    direct = open_object_store(proxied_s3.uri + "/dest", **proxied_s3.direct_options)
    done = transfer(src, "a", direct, "streamed", expect=Expected(len(DATA), zlib.crc32(DATA)))
    assert not done.server_side and done.crc32 == zlib.crc32(DATA)
    assert direct.get("streamed") == DATA
    with pytest.raises(ChecksumMismatch):
        transfer(src, "a", direct, "bad", expect=Expected(sha256="0" * 64))
    assert direct.head("bad") is None and list(direct.multipart_uploads("")) == []
    assert s3_client(s3_server).list_multipart_uploads(
        Bucket=direct.bucket).get("Uploads", []) == []  # type: ignore[attr-defined]
