"""Objects of any size: streaming writes, reads part by part, server-side copies, and the
multipart uploads a crash leaves behind.

A whole-object ``get``/``put`` holds the object in memory, and S3 refuses a single PUT over
5 GiB. These are the seam's answers (every store has them; :class:`ObjectStore` gives the
defaults):

- :meth:`ObjectStore.open_writer` returns an :class:`ObjectWriter`: bytes go in as they are
  made, and the object appears whole at :meth:`ObjectWriter.commit` (S3: a multipart upload of
  ``part_size`` parts; local disk: a temp file renamed; memory: a buffer put);
  :meth:`ObjectWriter.abort` leaves nothing (S3: the upload aborted).
- :meth:`ObjectStore.read_parts` yields the object in ranged reads of ``part_size`` bytes.
- :meth:`ObjectStore.copy_from` copies an object inside the storage service when both ends
  are on it (S3: same endpoint and credentials: ``CopyObject``, or ``UploadPartCopy`` past
  ``copy_limit``), and says ``None`` otherwise: the caller then streams
  (:func:`sediment.storage.transfer.transfer`).
- :meth:`ObjectStore.multipart_uploads` lists the uploads a killed writer left incomplete
  (S3 keeps, and bills, their parts until someone aborts them); GC aborts the table's.

Memory: every part buffer a writer fills or has in flight holds one of :data:`PART_BUFFERS`
slots of the process, so however many writers run, at most ``PART_BUFFERS`` parts are held
(``PART_BUFFERS * part_size``: 8 * 8 MiB by default).
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from dataclasses import dataclass
from types import TracebackType
from typing import Any

PART_SIZE = 8 * 1024 * 1024
"""Default bytes per part of an upload and per ranged read: above S3's 5 MiB minimum part,
small enough that :data:`PART_BUFFERS` of them stay far below the 256 MiB a process may
hold. With S3's 10,000 parts a stream of unknown size may reach 80 GiB; a write that knows
its size (a copy) takes larger parts (:func:`part_size_for`)."""
MAX_PARTS = 10_000
"""S3's most parts in one upload."""
PART_BUFFERS = 8
"""Part buffers held at once in a process, by all writers together (see the module)."""
_SLOTS = threading.BoundedSemaphore(PART_BUFFERS)


def part_size_for(size: int | None, part_size: int) -> int:
    """The part size for an object of ``size`` bytes (None: unknown): ``part_size``, or
    larger when that many parts would exceed :data:`MAX_PARTS`."""
    if size is None:
        return part_size
    return max(part_size, -(-size // MAX_PARTS))


class PartSlot:
    """One of the process's :data:`PART_BUFFERS` part buffers, held from the first byte of a
    part until its upload is done (``release``, once)."""

    def __init__(self) -> None:
        _SLOTS.acquire()
        self._held = True

    def release(self) -> None:
        if self._held:
            self._held = False
            _SLOTS.release()


@dataclass(frozen=True, slots=True)
class MultipartUpload:
    """An upload started and neither completed nor aborted (a writer killed mid-object)."""

    key: str
    upload_id: str
    initiated: float
    """When it started, by the storage service's clock (seconds since the epoch)."""


@dataclass(frozen=True, slots=True)
class CopyResult:
    """A server-side copy: the object's size and, when the service computed it over the
    copy (S3's ``x-amz-checksum-crc32`` of ``CopyObject``), its CRC-32; None when it did
    not (a multipart copy on a service that gives no checksum of the parts)."""

    size: int
    crc32: int | None = None


class ObjectWriter(ABC):
    """A streaming write of one object: a writable file (``pq.ParquetWriter`` writes into
    it), committed whole or aborted. As a context manager it commits when the block ends
    and aborts when it raises."""

    closed = False

    def __init__(self, key: str) -> None:
        self.key = key
        self.size = 0
        self._done = False

    @abstractmethod
    def _write(self, data: memoryview) -> None:
        """Take the bytes (copied or written out before this returns)."""

    @abstractmethod
    def _commit(self) -> None:
        """Make the object visible, whole."""

    @abstractmethod
    def _abort(self) -> None:
        """Leave nothing behind."""

    def write(self, data: Any) -> int:
        if self._done:
            raise ValueError(f"write to {self.key!r} after it was committed or aborted")
        view = memoryview(data).cast("B")
        if view.nbytes:
            self._write(view)
            self.size += view.nbytes
        return view.nbytes

    def tell(self) -> int:
        return self.size

    def flush(self) -> None:
        return None

    def writable(self) -> bool:
        return True

    def close(self) -> None:
        """Nothing: a file-like ``close`` (a Parquet writer's) does not decide the object's
        fate; :meth:`commit` or :meth:`abort` does."""
        return None

    def commit(self) -> None:
        if not self._done:
            self._done = True
            self._commit()

    def abort(self) -> None:
        if not self._done:
            self._done = True
            self._abort()

    def __enter__(self) -> ObjectWriter:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if kind is None:
            self.commit()
        else:
            self.abort()


class BufferedWriter(ObjectWriter):
    """The default writer: the bytes gathered, then one ``put`` (the memory store's, whose
    objects are in memory anyway)."""

    def __init__(self, store: Any, key: str) -> None:
        super().__init__(key)
        self._store = store
        self._buf = bytearray()

    def _write(self, data: memoryview) -> None:
        self._buf += data

    def _commit(self) -> None:
        self._store.put(self.key, bytes(self._buf))
        self._buf = bytearray()

    def _abort(self) -> None:
        self._buf = bytearray()

