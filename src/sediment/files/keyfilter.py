"""Key filters: one Bloom filter per Parquet row group over the first row-key field.

Why: data files are sorted, so a row group's [min, max] statistics prune well for a key range,
but with random keys nearly every file of a leaf has a row group whose [min, max] covers any
key. Without a filter an exact-key lookup decodes one row group in each of the leaf's files,
so its cost grows with the files per leaf, which is exactly what rises while compaction
catches up with ingest. With a filter a lookup probes a few bytes per file and decodes only
the row groups that may hold the key (about one, plus false positives at ~1% for 10 bits
per key), as LSM stores (RocksDB, Paimon's file index) do.

The filters live in a sidecar ``_<stem>.keys`` (named by sediment.files.sidecars) written
next to the data file while it is written (streamed: bounded memory whatever the file size),
so readers that do not know about them (DataFusion, Spark, pyarrow) read the Parquet file
unchanged. Format 2, little-endian::

    b"SDKF" | u16 format (2) | u16 probes k | u32 block bytes B | u32 rows per group R
    | u32 CRC-32 of the 16 bytes before it
    then per row group, in row-group order: its block of B bytes | u32 CRC-32 of the block

A reader checks the CRC of what it reads (the header, one block), so a flipped bit, which
would clear a bit of a block and so hide a row (a false negative, i.e. missing rows), is
found: the filter is then bypassed (sediment.query.footers). Format 1 (no CRCs: the header's
first 16 bytes, then blocks of B bytes) is still read, unchecked; older Sediment finds format
2 an unknown header and bypasses it the same way: slower, never wrong.

Hashes are 64-bit and stable across processes and versions (they are persisted): integer and
temporal keys are their int64 value through splitmix64; strings and binaries a polynomial over
their bytes, mixed with the length, through splitmix64. All of it is numpy over Arrow buffers:
no Python loop per key.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from typing import cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sediment.errors import CorruptDataError, CorruptMetadataError
from sediment.storage import checksums
from sediment.storage.checksums import crc32

MAGIC = b"SDKF"
FORMAT = 2
FORMATS = (1, 2)
HEADER_V1 = struct.Struct("<4sHHII")
HEADER = struct.Struct("<4sHHIII")
HEADER_BYTES = HEADER.size
"""Bytes a reader reads for the header: format 2's (a format 1 file is longer than that)."""
CRC_BYTES = 4

_M1 = np.uint64(0x9E3779B97F4A7C15)
_M2 = np.uint64(0xBF58476D1CE4E5B9)
_M3 = np.uint64(0x94D049BB133111EB)
_POLY = np.uint64(0x100000001B3)  # the 64-bit FNV prime: odd, so powers never vanish
_LOW32 = np.uint64(0xFFFFFFFF)


def _splitmix64(z: np.ndarray) -> np.ndarray:
    z = z + _M1
    z = (z ^ (z >> np.uint64(30))) * _M2
    z = (z ^ (z >> np.uint64(27))) * _M3
    return z ^ (z >> np.uint64(31))


_MASK = (1 << 64) - 1
SMALL = 16
"""Up to this many keys, hashing and probing run in plain Python: an exact-key lookup hashes
one key, where a dozen numpy calls would cost more than the work (measured: ~75 us vs ~5 us)."""


def _splitmix64_int(z: int) -> int:
    z = (z + int(_M1)) & _MASK
    z = ((z ^ (z >> 30)) * int(_M2)) & _MASK
    z = ((z ^ (z >> 27)) * int(_M3)) & _MASK
    return z ^ (z >> 31)


def _hash_small(values: list[object]) -> np.ndarray:
    """The same hashes as the numpy paths, for a few keys (ints, str or bytes)."""
    out = []
    poly, m2 = int(_POLY), int(_M2)
    for v in values:
        if isinstance(v, int):
            out.append(_splitmix64_int(v & _MASK))
            continue
        raw = v.encode() if isinstance(v, str) else bytes(cast(bytes, v))
        h = 0
        for c in raw:
            h = (h * poly + c) & _MASK
        out.append(_splitmix64_int(h ^ ((len(raw) * m2) & _MASK)))
    return np.array(out, dtype=np.uint64)


def hash_key_values(values: list[object]) -> np.ndarray:
    """:func:`hash_keys` of a few key values in hand (str, bytes or int: the model's), with
    no Arrow array made of them."""
    return _hash_small(values)


def _hash_binary(arr: pa.Array) -> np.ndarray:
    """Horner's polynomial over each key's bytes, then mixed with the length."""
    large = pa.types.is_large_string(arr.type) or pa.types.is_large_binary(arr.type)
    arr = arr.cast(pa.large_binary() if large else pa.binary())
    off_type = np.int64 if large else np.int32
    n = len(arr)
    offsets = np.frombuffer(arr.buffers()[1], dtype=off_type)[arr.offset : arr.offset + n + 1]
    offsets = offsets.astype(np.int64)
    starts = offsets[:-1]
    lengths = np.diff(offsets)
    longest = int(lengths.max()) if n else 0
    data_buf = arr.buffers()[2]
    data = (np.frombuffer(data_buf, dtype=np.uint8)[: int(offsets[-1])] if data_buf is not None
            else np.zeros(0, dtype=np.uint8))
    h = np.zeros(n, dtype=np.uint64)
    if n and int(lengths.min()) == longest:
        # all keys one length (ids, hashes, fixed codes): a 2-D view, one column at a time
        rows = data[int(starts[0]) : int(offsets[-1])].reshape(n, longest)
        for j in range(longest):
            h = h * _POLY + rows[:, j]
    elif n:
        # longest first, so the keys still going at byte j are a prefix of ``order``: the
        # work is the total bytes, however uneven the lengths
        order = np.argsort(-lengths, kind="stable")
        going = np.searchsorted(np.sort(lengths), np.arange(longest), side="right")
        going = n - going
        src = starts[order]
        acc = np.zeros(n, dtype=np.uint64)
        for j in range(longest):
            m = int(going[j])
            acc[:m] = acc[:m] * _POLY + data[src[:m] + j]
        h[order] = acc
    return _splitmix64(h ^ (lengths.astype(np.uint64) * _M2))


def hash_keys(arr: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """64-bit hashes (uint64) of key values: the same value hashes the same everywhere."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks() if arr.num_chunks != 1 else arr.chunk(0)
    t = arr.type
    binary = pa.types.is_string(t) or pa.types.is_binary(t) or pa.types.is_large_string(t) \
        or pa.types.is_large_binary(t)
    if pa.types.is_timestamp(t) or pa.types.is_date64(t):
        arr = arr.view(pa.int64())
    elif pa.types.is_date32(t):
        arr = arr.view(pa.int32())
    if len(arr) <= SMALL:
        return _hash_small(arr.to_pylist())
    if binary:
        return _hash_binary(arr)
    values = pc.cast(arr, pa.int64()).to_numpy(zero_copy_only=False)
    return _splitmix64(values.view(np.uint64))


@dataclass(frozen=True, slots=True)
class FilterLayout:
    """The shape of one file's filters: probes per key, bytes per row-group block."""

    probes: int
    block_bytes: int
    group_rows: int
    format: int = FORMAT
    """2: the header and each block carry a CRC-32; 1 (written before checksums): none."""

    @classmethod
    def for_rows(cls, group_rows: int, bits_per_key: int) -> FilterLayout:
        block_bytes = max(8, math.ceil(group_rows * bits_per_key / 64) * 8)
        # k = bits * ln 2 minimises false positives, but each probe costs a pass at write
        # time; past 5 the gain is small (10 bits per key: 0.94% with 5, 0.82% with 7)
        return cls(max(1, min(5, round(bits_per_key * math.log(2)))), block_bytes, group_rows)

    @property
    def bits(self) -> int:
        return self.block_bytes * 8

    @property
    def header_bytes(self) -> int:
        return HEADER_BYTES if self.format >= 2 else HEADER_V1.size

    @property
    def stride(self) -> int:
        """Bytes per row group in the sidecar: its block, and in format 2 the block's CRC."""
        return self.block_bytes + (CRC_BYTES if self.format >= 2 else 0)

    def header(self) -> bytes:
        head = HEADER_V1.pack(MAGIC, self.format, self.probes, self.block_bytes,
                              self.group_rows)
        return head if self.format < 2 else head + crc32(head).to_bytes(CRC_BYTES, "little")

    @classmethod
    def parse(cls, raw: bytes, where: str) -> FilterLayout:
        """The layout a sidecar's first bytes (:data:`HEADER_BYTES` of them, or fewer for a
        format 1 file) say: CorruptMetadataError for a header it does not know,
        CorruptDataError for a format 2 header that fails its CRC."""
        if len(raw) < HEADER_V1.size:
            raise CorruptMetadataError(f"key filter {where} is truncated ({len(raw)} bytes)")
        magic, fmt, probes, block, rows = HEADER_V1.unpack(raw[:HEADER_V1.size])
        if magic != MAGIC or fmt not in FORMATS or not probes or not block:
            raise CorruptMetadataError(f"key filter {where} has an unknown header "
                                       f"({magic!r}, format {fmt})")
        if fmt >= 2:
            if len(raw) < HEADER_BYTES:
                raise CorruptMetadataError(f"key filter {where} is truncated "
                                           f"({len(raw)} bytes)")
            want = int.from_bytes(raw[HEADER_V1.size:HEADER_BYTES], "little")
            if checksums.VERIFY_READS and crc32(raw[:HEADER_V1.size]) != want:
                raise CorruptDataError(f"key filter {where}: its header fails its CRC-32",
                                       key=where)
        return cls(probes, block, rows, fmt)

    def block_range(self, group: int) -> tuple[int, int]:
        """Byte range ``[start, end)`` of a row group's block (and its CRC) in the sidecar."""
        start = self.header_bytes + group * self.stride
        return start, start + self.stride

    def block(self, raw: bytes, where: str) -> bytes:
        """The block of a row group from the bytes of its :meth:`block_range`, its CRC
        checked (format 2): CorruptDataError when it is short or fails it."""
        if len(raw) != self.stride:
            raise CorruptDataError(f"key filter {where} has {len(raw)} bytes for a block of "
                                   f"{self.stride}", key=where)
        if self.format < 2:
            return raw
        body = raw[:self.block_bytes]
        if checksums.VERIFY_READS and \
                crc32(body) != int.from_bytes(raw[self.block_bytes:], "little"):
            raise CorruptDataError(f"key filter {where}: a block fails its CRC-32", key=where)
        return body

    def _positions(self, hashes: np.ndarray) -> np.ndarray:
        """Bit positions in a block, shape (probes, keys): double hashing h1 + i * h2 in
        32 bits, reduced to the block by multiply-shift (no division)."""
        h1 = (hashes & _LOW32).astype(np.uint32)
        h2 = (hashes >> np.uint64(32)).astype(np.uint32) | np.uint32(1)
        out = np.empty((self.probes, len(hashes)), dtype=np.int64)
        x = h1.copy()
        for i in range(self.probes):
            np.right_shift(x.astype(np.uint64) * np.uint64(self.bits), np.uint64(32),
                           out=out[i].view(np.uint64))
            x += h2  # wraps in 32 bits
        return out

    def build(self, hashes: np.ndarray) -> bytes:
        """The blocks of consecutive row groups of ``group_rows`` keys (the last may be
        shorter), concatenated, each followed by its CRC-32 in format 2."""
        n = len(hashes)
        groups = max(1, -(-n // self.group_rows))
        pos = self._positions(hashes)
        pos += (np.arange(n, dtype=np.int64) // self.group_rows) * self.bits
        bits = np.zeros(groups * self.bits, dtype=np.bool_)
        bits[pos.ravel()] = True
        packed = np.packbits(bits, bitorder="little").tobytes()
        if self.format < 2:
            return packed
        size = self.block_bytes
        view = memoryview(packed)
        return b"".join(  # one step per row group: a CRC over the block's bytes
            part for g in range(groups) for part in (
                view[g * size:(g + 1) * size],
                crc32(view[g * size:(g + 1) * size]).to_bytes(CRC_BYTES, "little")))

    def _probe_one(self, block: bytes, h: int) -> bool:
        """``may_contain`` for one key in plain Python (the same positions)."""
        h2 = (h >> 32) | 1
        x = h & 0xFFFFFFFF
        bits = self.bits
        for _ in range(self.probes):
            p = (x * bits) >> 32
            if not (block[p >> 3] >> (p & 7)) & 1:
                return False
            x = (x + h2) & 0xFFFFFFFF
        return True

    def may_contain_any(self, block: bytes, hashes: np.ndarray) -> bool:
        """Whether the row group may hold any of the keys (a lookup's few keys probed in
        plain Python: no array built, no numpy reduction)."""
        if len(hashes) <= SMALL:
            return any(self._probe_one(block, h) for h in hashes.tolist())
        return bool(self.may_contain(block, hashes).any())

    def may_contain(self, block: bytes, hashes: np.ndarray) -> np.ndarray:
        """Per key: False when the row group certainly lacks it, True when it may hold it."""
        if len(hashes) <= SMALL:
            return np.array([self._probe_one(block, h) for h in hashes.tolist()], dtype=bool)
        b = np.frombuffer(block, dtype=np.uint8)
        pos = self._positions(hashes)
        hit = (b[pos >> 3] >> (pos & 7).astype(np.uint8)) & 1
        return hit.all(axis=0)

