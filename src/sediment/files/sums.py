"""Checksums of data files as they are written (``FileSums``): a sink wrapper that takes the
whole-file CRC-32 from the bytes the Parquet writer streams through it, and the same sums
from bytes already in hand (a copied file)."""

from __future__ import annotations

import zlib
from typing import Any

from sediment.core.model import FileSums

TAIL_BYTES = 1 << 20
"""How many of the last bytes written a :class:`SummingSink` keeps for the footer CRC; a
larger footer is whole in what it keeps after :meth:`SummingSink.mark` (else read back)."""


def footer_length(tail: bytes | bytearray | memoryview) -> int:
    """The length of the Parquet footer ending ``tail`` (the file's last bytes, ``PAR1`` last),
    from the 4-byte little-endian length before the magic."""
    return int.from_bytes(bytes(tail[-8:-4]), "little")


def footer_crc(tail: bytes | bytearray | memoryview) -> int | None:
    """CRC-32 of the footer, its length and the magic (the last ``len + 8`` bytes) when
    ``tail`` holds all of them, else None."""
    if len(tail) < 8:
        return None
    n = footer_length(tail) + 8
    return zlib.crc32(memoryview(tail)[-n:]) if n <= len(tail) else None


def sums_of(data: bytes | bytearray | memoryview, sample: bytes | None = None) -> FileSums:
    """The sums of a whole data file in hand (and of its sample's bytes)."""
    footer = footer_crc(data)
    if footer is None:  # not a Parquet file: no footer to check; the whole CRC still is
        footer = 0
    return FileSums(len(data), footer, zlib.crc32(data),
                    None if sample is None else zlib.crc32(sample))


class SummingSink:
    """A writable file object forwarding every byte to ``sink`` (an Arrow output stream) while
    it takes their CRC-32 and length and keeps the last :data:`TAIL_BYTES` (for the footer).
    ``pq.ParquetWriter`` writes into it as into any Python file."""

    def __init__(self, sink: Any) -> None:
        self._sink = sink
        self.crc = 0
        self.size = 0
        self._tail = bytearray()
        self._since: bytearray | None = None
        self.closed = False

    def mark(self) -> None:
        """Keep every byte written from now on (call it before the Parquet writer's close,
        which writes the page indexes and the footer: the footer is then whole in ``tail``
        however large)."""
        self._since = bytearray()

    def write(self, data: Any) -> int:
        mv = memoryview(data).cast("B")
        self._sink.write(mv)
        self.crc = zlib.crc32(mv, self.crc)
        self.size += len(mv)
        if self._since is not None:
            self._since += mv
        tail = self._tail
        if len(mv) >= TAIL_BYTES:
            self._tail = bytearray(mv[-TAIL_BYTES:])
        else:
            tail += mv
            if len(tail) > 2 * TAIL_BYTES:
                del tail[:-TAIL_BYTES]
        return len(mv)

    @property
    def tail(self) -> bytes:
        """The last bytes written: all since :meth:`mark` when more than TAIL_BYTES."""
        if self._since is not None and len(self._since) > TAIL_BYTES:
            return bytes(self._since)
        return bytes(self._tail[-TAIL_BYTES:])

    def tell(self) -> int:
        return self.size

    def flush(self) -> None:
        self._sink.flush()

    def writable(self) -> bool:
        return True

    def readable(self) -> bool:
        return False

    def seekable(self) -> bool:
        return False

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._sink.close()
