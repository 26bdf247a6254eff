"""S3's side of objects of any size (``sediment.storage.streams``): multipart uploads fed as
bytes come, server-side copies, and the incomplete uploads GC aborts.

- :class:`S3Writer` keeps one part in a buffer; a full part is uploaded by a thread of its
  own while the next fills, at most :data:`UPLOADS_IN_FLIGHT` at once per writer, and every
  buffer holds one of the process's part slots (``streams.PART_BUFFERS``). An object that
  never fills a part is one PUT. A failure aborts the upload.
- :func:`copy_object` copies inside S3: ``CopyObject`` up to ``copy_limit`` bytes (5 GiB, S3's
  limit of one copy), asking S3 for the CRC-32 of the copy; past it ``UploadPartCopy`` of
  ``copy_part_size`` ranges, many at once (no byte passes through this process).
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from sediment.errors import ObjectNotFoundError, StorageError
from sediment.storage.streams import (
    MAX_PARTS,
    CopyResult,
    MultipartUpload,
    ObjectWriter,
    PartSlot,
    part_size_for,
)

S3ObjectStore = Any
"""``sediment.storage.s3.S3ObjectStore`` (which imports this module: the room has no cycles),
whose client, bucket and key mapping these functions use."""

_S3_ERRORS = (ClientError, BotoCoreError)
UPLOADS_IN_FLIGHT = 2
"""Parts one writer uploads at once while it fills the next: S3 takes a part in about the
time the next is made, and each in flight holds a part buffer."""
COPIES_IN_FLIGHT = 8
"""``UploadPartCopy`` requests of one copy at once (no memory: the service moves the bytes)."""


def _code(e: Exception) -> str:
    if isinstance(e, ClientError):
        return str(e.response.get("Error", {}).get("Code", ""))
    return ""


def _crc(value: str | None) -> int | None:
    """S3's ``ChecksumCRC32`` (base64 of the big-endian CRC) as an int; None for a composite
    one (``...-N``, of parts) or none."""
    if not value or "-" in value:
        return None
    return int.from_bytes(base64.b64decode(value), "big")


class S3Writer(ObjectWriter):
    """A streaming write to S3 (see the module)."""

    def __init__(self, store: S3ObjectStore, key: str, size: int | None) -> None:
        super().__init__(key)
        self._store = store
        self._full = store._k(key)
        self._part_size = part_size_for(size, store.part_size)
        self._buf = bytearray()
        self._slot: PartSlot | None = None
        self._upload_id: str | None = None
        self._parts: list[Future[dict[str, Any]]] = []
        self._pool: ThreadPoolExecutor | None = None

    def _client(self) -> Any:
        return self._store._client

    def _fail(self, op: str, e: Exception) -> StorageError:
        error: StorageError = self._store._error(op, self.key, e)
        return error

    def _write(self, data: memoryview) -> None:
        at = 0
        while at < data.nbytes:
            if self._slot is None:
                self._slot = PartSlot()
            room = self._part_size - len(self._buf)
            self._buf += data[at:at + room]
            at += room
            if len(self._buf) >= self._part_size:
                self._send_part()

    def _send_part(self) -> None:
        """Upload the full buffer as the next part, on a thread (at most
        UPLOADS_IN_FLIGHT in flight: the oldest is waited for first)."""
        if self._upload_id is None:
            try:
                self._upload_id = self._client().create_multipart_upload(
                    Bucket=self._store.bucket, Key=self._full)["UploadId"]
            except _S3_ERRORS as e:
                raise self._fail("multipart upload start", e) from e
            self._pool = ThreadPoolExecutor(UPLOADS_IN_FLIGHT,
                                            thread_name_prefix="sediment-s3-part")
        number = len(self._parts) + 1
        if number > MAX_PARTS:
            raise StorageError(f"S3 write of {self.key!r} in {self._store.uri}: more than "
                               f"{MAX_PARTS} parts of {self._part_size} bytes")
        in_flight = [f for f in self._parts if not f.done()]
        if len(in_flight) >= UPLOADS_IN_FLIGHT:
            in_flight[0].result()
        body, slot = bytes(self._buf), self._slot
        self._buf, self._slot = bytearray(), None
        assert self._pool is not None and slot is not None
        self._parts.append(self._pool.submit(self._upload, number, body, slot))

    def _upload(self, number: int, body: bytes, slot: PartSlot) -> dict[str, Any]:
        try:
            r = self._client().upload_part(Bucket=self._store.bucket, Key=self._full,
                                           UploadId=self._upload_id, PartNumber=number,
                                           Body=body)
            return {"PartNumber": number, "ETag": r["ETag"]}
        except _S3_ERRORS as e:
            raise self._fail(f"upload of part {number}", e) from e
        finally:
            slot.release()

    def _commit(self) -> None:
        try:
            if self._upload_id is None:  # never filled a part: one PUT
                body = bytes(self._buf)
                self._release()
                try:
                    self._client().put_object(Bucket=self._store.bucket, Key=self._full,
                                              Body=body)
                except _S3_ERRORS as e:
                    raise self._fail("put", e) from e
                return
            if self._buf:
                self._send_part()
            parts = [f.result() for f in self._parts]
            try:
                self._client().complete_multipart_upload(
                    Bucket=self._store.bucket, Key=self._full, UploadId=self._upload_id,
                    MultipartUpload={"Parts": parts})
            except _S3_ERRORS as e:
                raise self._fail("multipart upload completion", e) from e
        except BaseException:
            self._abort()
            raise
        finally:
            self._release()

    def __del__(self) -> None:
        # a writer dropped without commit or abort gives its part slot back (else the
        # process would hold one slot fewer for good); its upload is GC's to abort
        if self._slot is not None:
            self._slot.release()

    def _release(self) -> None:
        self._buf = bytearray()
        if self._slot is not None:
            self._slot.release()
            self._slot = None
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    def _abort(self) -> None:
        for f in self._parts:
            f.cancel()
        self._release()
        if self._upload_id is not None:
            abort_uploads(self._store, [MultipartUpload(self.key, self._upload_id, 0.0)])


def copy_object(store: S3ObjectStore, source: S3ObjectStore, source_key: str,
                key: str) -> CopyResult:
    """Copy ``source_key`` of ``source`` (same service) to ``key`` of ``store`` in S3 (see
    the module)."""
    client: Any = store._client  # requests built as dicts, as the writer's are
    src_full, full = source._k(source_key), store._k(key)
    copy_source = {"Bucket": source.bucket, "Key": src_full}
    info = source.head(source_key)
    if info is None:
        raise ObjectNotFoundError(f"no object {source_key!r} in {source.uri}")
    size = info.size
    if size <= store.copy_limit:
        try:
            r = client.copy_object(Bucket=store.bucket, Key=full, CopySource=copy_source,
                                   ChecksumAlgorithm="CRC32")
        except _S3_ERRORS as e:
            if _code(e) in ("NoSuchKey", "404"):
                raise ObjectNotFoundError(f"no object {source_key!r} in {source.uri}") from None
            raise store._error("copy", key, e) from e
        return CopyResult(size, _crc(r.get("CopyObjectResult", {}).get("ChecksumCRC32")))
    step = max(part_size_for(size, store.part_size), store.copy_part_size)
    try:
        upload_id = client.create_multipart_upload(Bucket=store.bucket, Key=full)["UploadId"]
    except _S3_ERRORS as e:
        raise store._error("multipart copy start", key, e) from e

    def part(number: int, start: int) -> dict[str, Any]:
        end = min(size, start + step) - 1
        r = client.upload_part_copy(Bucket=store.bucket, Key=full, UploadId=upload_id,
                                    PartNumber=number, CopySource=copy_source,
                                    CopySourceRange=f"bytes={start}-{end}")
        return {"PartNumber": number, "ETag": r["CopyPartResult"]["ETag"]}

    try:
        with ThreadPoolExecutor(COPIES_IN_FLIGHT, thread_name_prefix="sediment-s3-copy") as pool:
            parts = list(pool.map(part, range(1, -(-size // step) + 1), range(0, size, step)))
        client.complete_multipart_upload(Bucket=store.bucket, Key=full, UploadId=upload_id,
                                         MultipartUpload={"Parts": parts})
    except _S3_ERRORS as e:
        abort_uploads(store, [MultipartUpload(key, upload_id, 0.0)])
        raise store._error("multipart copy", key, e) from e
    except BaseException:
        abort_uploads(store, [MultipartUpload(key, upload_id, 0.0)])
        raise
    return CopyResult(size)


def list_uploads(store: S3ObjectStore, prefix: str) -> Iterator[MultipartUpload]:
    """The incomplete multipart uploads under ``prefix`` (keys relative to the store)."""
    try:
        pages = store._client.get_paginator("list_multipart_uploads").paginate(
            Bucket=store.bucket, Prefix=store._k(prefix))
        for page in pages:
            for u in page.get("Uploads", []):
                yield MultipartUpload(store._strip(u["Key"]), u["UploadId"],
                                      u["Initiated"].timestamp())
    except _S3_ERRORS as e:
        raise store._error("multipart upload list", prefix, e) from e


def abort_uploads(store: S3ObjectStore, uploads: Iterable[MultipartUpload]) -> int:
    """Abort each upload (one already gone is no error); how many were aborted."""
    n = 0
    for u in uploads:
        try:
            store._client.abort_multipart_upload(Bucket=store.bucket, Key=store._k(u.key),
                                                 UploadId=u.upload_id)
            n += 1
        except _S3_ERRORS as e:
            if _code(e) not in ("NoSuchUpload", "404"):
                raise store._error("multipart upload abort", u.key, e) from e
    return n
