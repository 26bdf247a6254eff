"""Verified reads of data files: what a damaged page, footer or whole file raises, and the
one re-read that tells a byte changed on the way from a byte changed at rest.

Every pyarrow read of a data file turns on ``page_checksum_verification`` (:data:`VERIFY`):
a page written with a CRC (``write_page_checksum``) whose bytes differ raises pyarrow's
``OSError`` ("... CRC checksum verification failed ..."); a page without one that fails to
decode raises ``OSError`` or ``ArrowInvalid`` too. Either is read once more from a freshly
opened file (a remote store, a proxy or a network card may have handed over bad bytes once),
then raised as :class:`~sediment.errors.CorruptDataError` naming the table and the file
(:func:`damaged`). DataFusion, DuckDB and Polars verify nothing, so the readers that hand them
files (compaction's local merge) check a whole-file CRC instead, when the file's sums are known.

A file's *sums* (``core.model.FileSums``, recorded in the state) are its
size, the CRC-32 of its footer (the last ``length + 8`` bytes), of the whole file and of its
sample; a reader given sums checks what it reads against them, and one given None (a file
written before sums) reads as before, with page CRCs only.

Every check here consults ``storage.checksums.VERIFY_READS`` when it runs, which only the
checksum benchmark turns off (to time the same reads unchecked).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.parquet as pq

from sediment.core.model import FileSums
from sediment.errors import CorruptDataError, StorageError
from sediment.storage import checksums
from sediment.storage.checksums import ChecksumMismatch, crc32


class _PageVerification(Mapping[str, bool]):
    """``{"page_checksum_verification": True}``, read when a reader unpacks it: False while
    ``storage.checksums.VERIFY_READS`` is off (the checksum benchmark's unchecked runs)."""

    KEY = "page_checksum_verification"

    def __getitem__(self, key: str) -> bool:
        if key != self.KEY:
            raise KeyError(key)
        return checksums.VERIFY_READS

    def __iter__(self) -> Iterator[str]:
        return iter((self.KEY,))

    def __len__(self) -> int:
        return 1


VERIFY: Mapping[str, bool] = _PageVerification()
"""Keyword arguments of every pyarrow read of a data file (``ParquetFile``, ``read_table``,
``ParquetFragmentScanOptions``): ``**VERIFY``."""

CRC_FAILURE = "CRC checksum verification failed"
"""What pyarrow (26) says when a page fails its CRC."""

READS = 2
"""Reads of damaged bytes before they count as damaged at rest: the first, then one re-read
(on local disk the page cache gives the same bytes again, so more would only be slower)."""

_T = TypeVar("_T")


Sums = FileSums
"""What a reader checks a data file against: the sums its commit recorded (one name for the
readers' signatures; tests may pass any object with these fields)."""


def page_damage(e: BaseException) -> bool:
    """Whether a pyarrow error reading a data file's pages says its bytes are damaged (a CRC
    mismatch, a page that does not decode), not that the store failed to hand them over."""
    if isinstance(e, ChecksumMismatch):  # the store's own check of the body (S3's CRC)
        return True
    if isinstance(e, FileNotFoundError | pa.ArrowMemoryError):
        return False
    if isinstance(e, OSError):  # pyarrow's IOError: a failed CRC, a failed decompression
        return e.errno is None and "AWS Error" not in str(e)  # else the OS or S3 failed
    return isinstance(e, pa.ArrowException)  # invalid data, an unknown codec or encoding


def damaged(table: str, filename: str, where: str, e: BaseException,
            what: str = "data file") -> CorruptDataError:
    """The error for damaged bytes of ``filename`` (``where``: the store's URI), read
    :data:`READS` times."""
    reason = "a page fails its CRC" if CRC_FAILURE in str(e) else \
        "it fails its checksum" if isinstance(e, ChecksumMismatch) else "it does not decode"
    return CorruptDataError(f"{what} {filename} of table {table or '?'} in {where} is damaged "
                            f"({reason}, read {READS} times): {e}", table=table or None,
                            key=filename)


def reading(table: str, filename: str, where: str, read: Callable[[int], _T]) -> _T:
    """``read(attempt)`` for attempt 0, then, when it raised damage (:func:`page_damage`),
    once more for attempt 1 (``read`` opens the file afresh for it); damage that persists is
    a CorruptDataError and a store that fails a StorageError, both naming the file."""
    for attempt in range(READS):
        try:
            return read(attempt)
        except (pa.ArrowException, OSError, ChecksumMismatch) as e:
            if isinstance(e, FileNotFoundError):
                raise
            if not page_damage(e):
                raise StorageError(f"reading {filename} of table {table or '?'} in {where}: "
                                   f"{e}") from e
            if attempt == READS - 1:
                raise damaged(table, filename, where, e) from e
    raise AssertionError("unreachable")


def footer_crc(tail: bytes | memoryview) -> int:
    """CRC-32 of a Parquet footer from bytes ending at the file's end: its last
    ``length + 8`` bytes (the metadata, its length, ``PAR1``)."""
    view = memoryview(tail)
    length = int.from_bytes(view[-8:-4], "little")
    return crc32(view[max(0, len(view) - length - 8):])


def footer_problem(tail: bytes, size: int, sums: Sums | None) -> str | None:
    """What is wrong with a file of ``size`` bytes whose last bytes are ``tail`` (holding its
    whole footer) against its ``sums``; None when they agree, there are no sums or checks
    are off (``storage.checksums.VERIFY_READS``)."""
    if sums is None or not checksums.VERIFY_READS:
        return None
    if size != sums.size:
        return f"{size} bytes where {sums.size} were written"
    if len(tail) < 12 or tail[-4:] != b"PAR1":
        return "no Parquet footer"
    got = footer_crc(tail)
    if got != sums.footer:
        return f"footer CRC-32 {got:08x} where {sums.footer:08x} was written"
    return None


CHUNK = 1 << 20
"""Bytes hashed at a time by :func:`file_crc` (bounded memory whatever the file's size)."""


def file_crc(path: str) -> tuple[int, int]:
    """(size, CRC-32) of a local file, streamed."""
    crc = size = 0
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            crc = crc32(chunk, crc)
            size += len(chunk)
    return size, crc


def whole_problem(size: int, crc: int, sums: Sums) -> str | None:
    """What is wrong with a whole file of ``size`` bytes and CRC-32 ``crc`` against its
    ``sums``; None when they agree (or checks are off: ``storage.checksums.VERIFY_READS``)."""
    if not checksums.VERIFY_READS:
        return None
    if size != sums.size:
        return f"{size} bytes where {sums.size} were written"
    if crc != sums.crc:
        return f"CRC-32 {crc:08x} where {sums.crc:08x} was written"
    return None


def decode_all(source: Any) -> None:
    """Decode every page of a Parquet file (a path or an open file), one row group at a
    time, verifying page CRCs: what a reader that verifies nothing (DataFusion) is preceded
    by when the file's sums are not known. Raises pyarrow's error on damage; does nothing
    while checks are off (``storage.checksums.VERIFY_READS``)."""
    if not checksums.VERIFY_READS:
        return
    pf = pq.ParquetFile(source, **VERIFY)
    for g in range(pf.metadata.num_row_groups):
        pf.read_row_group(g, use_threads=False)
