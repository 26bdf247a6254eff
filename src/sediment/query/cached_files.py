"""Data files read through the disk cache's range reads (sediment.storage.rangereads).

A lookup reads pages by the page index (sediment.query.pointread); a range reads whole row
groups, which pyarrow reads from a file object. :class:`CachedParquetFile` is a ParquetFile
over a :class:`RangeFile`, a Python file whose reads go through :class:`RangeReads`: served
from the disk cache where they are, from the store where not, and held until the reader calls
:func:`keep_reads` after the decode verified them (page CRCs), so only verified bytes enter
the cache. :func:`prefetch_reads` fetches the column chunks a read is about to decode by
coalesced GETs first (pyarrow would ask for them one by one). :func:`footer_bytes` reads a
file's footer as exactly its bytes."""

from __future__ import annotations

import io
from typing import Any

import pyarrow.parquet as pq

from sediment.storage.rangereads import RangeReads


class RangeFile(io.RawIOBase):
    """A data file as a read-only Python file whose reads go through :class:`RangeReads`
    (what pyarrow reads a row group's column chunks from)."""

    def __init__(self, reads: RangeReads, key: str, size: int) -> None:
        super().__init__()
        self._reads = reads
        self._key = key
        self._size = size
        self._at = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._at, io.SEEK_END: self._size}[whence]
        self._at = max(0, base + offset)
        return self._at

    def tell(self) -> int:
        return self._at

    def size(self) -> int:
        return self._size

    def read(self, n: int | None = -1) -> bytes:
        end = self._size if n is None or n < 0 else min(self._size, self._at + n)
        if end <= self._at:
            return b""
        data = self._reads.read(self._key, self._at, end)
        self._at += len(data)
        return data

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[:len(data)] = data
        return len(data)


class CachedParquetFile(pq.ParquetFile):
    """A data file read through the disk cache: the column chunks a read fetched are held
    until :meth:`keep` (the reader calls it once the decode, which verifies page CRCs, has
    returned), so only verified bytes are cached."""

    reads: RangeReads
    key: str
    """The file's name in the store."""
    checked: bool
    """Whether the file carries page CRCs (it has sums): else a range is kept only when a
    second read gives the same bytes."""

    def prefetch(self, groups: list[int], columns: list[str]) -> None:
        """Fetch the column chunks of ``columns`` (top-level names) in row groups ``groups``
        that a read is about to decode, chunks lying close together by one GET (pyarrow
        asks for them one by one, each a round trip, through this Python file one at a
        time); the ranges are exactly those pyarrow then reads."""
        md = self.metadata
        wanted = set(columns)
        ranges = []
        for g in groups:
            rg = md.row_group(g)
            for c in range(rg.num_columns):
                cc = rg.column(c)
                if cc.path_in_schema.split(".", 1)[0] not in wanted:
                    continue
                start = cc.dictionary_page_offset if cc.has_dictionary_page and \
                    cc.dictionary_page_offset else cc.data_page_offset
                ranges.append((start, start + cc.total_compressed_size))
        self.reads.prefetch(self.key, ranges)

    def keep(self) -> None:
        self.reads.keep(checked=self.checked)


def prefetch_reads(pf: pq.ParquetFile, groups: list[int], columns: list[str]) -> None:
    """Before a read of ``pf``: its column chunks fetched together (nothing for a file not
    read through the disk cache's reads)."""
    if isinstance(pf, CachedParquetFile):
        pf.prefetch(groups, columns)


def keep_reads(pf: pq.ParquetFile) -> None:
    """After a verified read of ``pf``: its fetched ranges enter the disk cache (nothing for
    a file not read through it)."""
    if isinstance(pf, CachedParquetFile):
        pf.keep()


def footer_bytes(reads: RangeReads, filename: str, size: int, guess: int) -> bytes:
    """The last bytes of a ``size``-byte data file holding its whole footer (its metadata,
    length and magic), exactly those when the footer says how long it is: its last ``guess``
    bytes read first, then, for a bigger footer, its exact range. Exactly the footer's bytes
    are held (cached), since only they are checked (the footer's CRC-32 in the sums)."""

    def need(last: bytes) -> int:
        length = int.from_bytes(last[-8:-4], "little") if len(last) >= 8 else -1
        return length + 8 if 0 <= length and length + 8 <= size else len(last)

    return bytes(reads.read_suffix(filename, size, guess, need))
