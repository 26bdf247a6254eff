"""Moving an object of any size from one store to another, checked, in bounded memory.

:func:`transfer` asks the destination for a server-side copy first
(:meth:`ObjectStore.copy_from`: S3 to S3 on one service, local file to local file), so the
bytes never pass through this process; otherwise it streams the object part by part
(:meth:`ObjectStore.read_parts` into :meth:`ObjectStore.open_writer`), taking its CRC-32 and
SHA-256 on the way. Given what the bytes must be (:class:`Expected`), a streamed object that
differs is aborted before it appears, and a copied one that the service says differs is
deleted: either way ChecksumMismatch, which the caller turns into its own error naming the
file.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from sediment.storage.base import ObjectStore
from sediment.storage.checksums import ChecksumMismatch, crc32


class Digest:
    """CRC-32 (the project's checksum) and SHA-256 (a dump manifest's) of bytes as they
    pass, and their count."""

    def __init__(self) -> None:
        self.crc = 0
        self.size = 0
        self._sha = hashlib.sha256()

    def update(self, data: Any) -> None:
        view = memoryview(data).cast("B")
        self.crc = crc32(view, self.crc)
        self._sha.update(view)
        self.size += view.nbytes

    @property
    def sha256(self) -> str:
        return self._sha.hexdigest()


class DigestingWriter:
    """A writable file forwarding to ``sink`` (an ObjectWriter) while it takes the bytes'
    :class:`Digest` (``pq.ParquetWriter`` writes into it as into any file)."""

    closed = False

    def __init__(self, sink: Any) -> None:
        self._sink = sink
        self.digest = Digest()

    def write(self, data: Any) -> int:
        self.digest.update(data)
        return int(self._sink.write(data))

    def tell(self) -> int:
        return self.digest.size

    def flush(self) -> None:
        return None

    def writable(self) -> bool:
        return True

    def close(self) -> None:
        return None


@dataclass(frozen=True, slots=True)
class Expected:
    """What an object's bytes must be: any of size, CRC-32, SHA-256 (None: not checked)."""

    size: int | None = None
    crc32: int | None = None
    sha256: str | None = None

    def problem(self, size: int, crc: int | None, sha: str | None) -> str | None:
        """What differs (None when nothing known does)."""
        if self.size is not None and size != self.size:
            return f"{size} bytes where {self.size} were expected"
        if self.crc32 is not None and crc is not None and crc != self.crc32:
            return f"CRC-32 {crc:08x} where {self.crc32:08x} was expected"
        if self.sha256 is not None and sha is not None and sha != self.sha256:
            return f"SHA-256 {sha} where {self.sha256} was expected"
        return None


@dataclass(frozen=True, slots=True)
class Transferred:
    """A transferred object: its size, its CRC-32 and SHA-256 where known (a server-side
    copy knows the CRC-32 only when the service computed it, and never the SHA-256), and
    whether the service copied it."""

    size: int
    crc32: int | None
    sha256: str | None
    server_side: bool


def transfer(source: ObjectStore, source_key: str, dest: ObjectStore, key: str, *,
             size: int | None = None, expect: Expected | None = None,
             server_side: bool = True) -> Transferred:
    """Copy ``source_key`` of ``source`` to ``key`` of ``dest`` (see the module);
    ``size`` spares a HEAD when known; ``server_side=False`` streams even where the service
    could copy (to read every byte). ObjectNotFoundError when the source is missing."""
    expect = expect or Expected()
    copied = dest.copy_from(source, source_key, key) if server_side else None
    if copied is not None:
        problem = expect.problem(copied.size, copied.crc32, None)
        if problem is not None:
            dest.delete_many([key])
            raise ChecksumMismatch(f"copy of {source_key} to {key}: {problem}", problem)
        return Transferred(copied.size, copied.crc32, None, True)
    digest = Digest()
    with dest.open_writer(key, size=size) as out:
        for part in source.read_parts(source_key, size=size):
            digest.update(part)
            out.write(part)
        problem = expect.problem(digest.size, digest.crc, digest.sha256)
        if problem is not None:  # aborted by the writer's exit: the object never appears
            raise ChecksumMismatch(f"copy of {source_key} to {key}: {problem}", problem)
    return Transferred(digest.size, digest.crc, digest.sha256, False)
