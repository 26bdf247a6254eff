"""Checksums of stored bytes: what Sediment writes carries one, and what it reads is checked.

CRC-32 (``zlib.crc32``, the polynomial of Parquet's page CRCs and of S3's
``x-amz-checksum-crc32``) everywhere new: about 1 GB/s here, under 5% of decoding, and no
compiled dependency.

JSON metadata is *sealed*: the document is serialised as before (a JSON object, any
separators or indent) and its closing brace becomes a last field over the bytes before it,
``...,"crc32":"xxxxxxxx"}``. The object stays valid JSON that older Sediment (and jq) reads as
before, ignoring the extra key, and the check needs no canonical re-encoding: the trailer is
always the last 20 bytes, and its CRC covers every byte before them.

Objects written before seals existed have no trailer and read unchecked (``unseal_json`` says
None). A trailer with a wrong CRC, and a damaged trailer (the last 20 bytes within two bytes of
the trailer's shape), are mismatches: :func:`get_verified` reads such an object again, since a
wrong byte on the way (a proxy, a network card) is gone on the next read, and raises the
caller's error naming the object when the damage persists.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Callable
from typing import TypeVar

from sediment.errors import CorruptDataError, CorruptionError
from sediment.storage.base import ObjectStore

VERIFY_READS = True
"""Check what is read: metadata seals and snapshot objects' SHA-256, data files' page CRCs,
footers, sizes and whole-file CRCs, samples' CRCs and key filters' header and block CRCs.
Read at every check (so it takes effect at once). For ``benchmarks/checksums.py`` only, which
turns it off to measure what the checks cost: no property, option or environment variable
reaches it, and nothing else may set it."""

WRITE_SUMS = True
"""Write data files with their page CRCs and take their sums (whole-file, footer and sample
CRC-32) as the bytes stream out (``sediment.files.writer``). Off, a data file is written as
before checksums and committed without sums (read unchecked, as an old file). For
``benchmarks/checksums.py`` only, as :data:`VERIFY_READS`."""

TRAILER_BYTES = 20
"""``,"crc32":"xxxxxxxx"}``: the sealed document's last bytes."""

_TRAILER = re.compile(rb',"crc32":"([0-9a-f]{8})"\}\Z')
_SHAPE = b',"crc32":"________"}'
_HEX = frozenset(b"0123456789abcdef")
_T = TypeVar("_T")


class ChecksumMismatch(CorruptionError):  # noqa: N818 - a condition, caught and turned into the caller's error
    """Bytes that fail their checksum. :func:`get_verified` catches it to read again (it may be
    a transient fault of the transport) before raising the caller's error; a reader without a
    store to read again from turns it into its own error at once. ``detail`` says what failed
    without naming the object (the final error names it)."""

    def __init__(self, message: str, detail: str | None = None) -> None:
        super().__init__(message)
        self.detail = detail or message


def crc32(buf: bytes | bytearray | memoryview, prev: int = 0) -> int:
    """CRC-32 of ``buf``, continuing from ``prev`` (the CRC of the bytes before it)."""
    return zlib.crc32(buf, prev)


def seal_json(body: bytes) -> bytes:
    """``body`` (a serialised, non-empty JSON object) with its CRC-32 as a last field: the
    closing brace becomes ``,"crc32":"xxxxxxxx"}``, the CRC of every byte before it."""
    head = body[:-1]
    if not body.lstrip().startswith(b"{") or not body.endswith(b"}") or \
            head.rstrip().endswith(b"{"):
        raise ValueError("seal_json seals a serialised, non-empty JSON object")
    return b'%s,"crc32":"%08x"}' % (head, crc32(head))


def _damaged_trailer(tail: bytes) -> bool:
    """The last bytes of an object without a valid trailer look like a trailer with a byte or
    two changed: a seal damaged in place, not an object written before seals."""
    if len(tail) != TRAILER_BYTES:
        return False
    wrong = 0
    for i, (got, want) in enumerate(zip(tail, _SHAPE, strict=True)):
        wrong += (got not in _HEX) if 10 <= i < 18 else (got != want)
    return wrong <= 2


def unseal_json(data: bytes | bytearray | memoryview) -> bool | None:
    """Check the seal of a JSON object: True when it holds, None when there is none (written
    before seals, or checks turned off). Raises ChecksumMismatch when the CRC differs or the
    trailer itself is damaged."""
    if not VERIFY_READS:
        return None
    view = memoryview(data)
    tail = bytes(view[-TRAILER_BYTES:])
    m = _TRAILER.match(tail)
    if m is None:
        if _damaged_trailer(tail):
            raise ChecksumMismatch(f"its checksum trailer is damaged ({tail!r})")
        return None
    want = int(m.group(1), 16)
    got = crc32(view[:-TRAILER_BYTES])
    if got != want:
        raise ChecksumMismatch(f"CRC-32 {got:08x} where {want:08x} was written")
    return True


def get_verified(objects: ObjectStore, key: str, check: Callable[[bytes], _T], *,
                 error_cls: type[CorruptionError], where: str, attempts: int = 3,
                 table: str | None = None) -> _T:
    """``check`` of the object at ``key``: ``check`` returns what the bytes hold or raises
    ChecksumMismatch, and a mismatch reads the object again (a byte changed on the way is gone
    on the next read) up to ``attempts`` reads in all. Then it raises ``error_cls`` (a
    CorruptionError; for CorruptDataError with ``table`` and ``key`` set) naming ``where``
    and the key. A store that checks bodies itself (S3's CRC of a whole GET) and reads again
    on its own raises ChecksumMismatch from ``get`` when the damage persists: that is the
    caller's error at once. ObjectNotFoundError and the store's other errors pass through."""
    last: ChecksumMismatch | None = None
    reads = 0
    for _ in range(max(1, attempts)):
        try:
            data = objects.get(key)
        except ChecksumMismatch as e:  # the store's own check (S3's CRC), past its re-reads
            last = e
            break
        reads += 1
        try:
            return check(data)
        except ChecksumMismatch as e:
            last = e
    place = where if key in where else f"{where} ({key})"
    detail = last.detail if last is not None else "?"
    after = f" after {reads} reads" if reads else ""
    message = f"{place}: checksum mismatch{after}: {detail}"
    if error_cls is CorruptDataError:
        raise CorruptDataError(message, table=table, key=key) from last
    raise error_cls(message) from last

