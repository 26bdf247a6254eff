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
unchanged. Format, little-endian::

    b"SDKF" | u16 format (1) | u16 probes k | u32 block bytes B | u32 rows per group R
    then one block of B bytes per row group, in row-group order

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

MAGIC = b"SDKF"
FORMAT = 1
HEADER = struct.Struct("<4sHHII")
HEADER_BYTES = HEADER.size

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

    @classmethod
    def for_rows(cls, group_rows: int, bits_per_key: int) -> FilterLayout:
        block_bytes = max(8, math.ceil(group_rows * bits_per_key / 64) * 8)
        # k = bits * ln 2 minimises false positives, but each probe costs a pass at write
        # time; past 5 the gain is small (10 bits per key: 0.94% with 5, 0.82% with 7)
        return cls(max(1, min(5, round(bits_per_key * math.log(2)))), block_bytes, group_rows)

    @property
    def bits(self) -> int:
        return self.block_bytes * 8

    def header(self) -> bytes:
        return HEADER.pack(MAGIC, FORMAT, self.probes, self.block_bytes, self.group_rows)

    @classmethod
    def parse(cls, raw: bytes, where: str) -> FilterLayout:
        from sediment.errors import CorruptMetadataError

        if len(raw) < HEADER_BYTES:
            raise CorruptMetadataError(f"key filter {where} is truncated ({len(raw)} bytes)")
        magic, fmt, probes, block, rows = HEADER.unpack(raw[:HEADER_BYTES])
        if magic != MAGIC or fmt != FORMAT or not probes or not block:
            raise CorruptMetadataError(f"key filter {where} has an unknown header "
                                       f"({magic!r}, format {fmt})")
        return cls(probes, block, rows)

    def block_range(self, group: int) -> tuple[int, int]:
        """Byte range ``[start, end)`` of a row group's block in the sidecar."""
        start = HEADER_BYTES + group * self.block_bytes
        return start, start + self.block_bytes

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
        shorter), concatenated."""
        n = len(hashes)
        groups = max(1, -(-n // self.group_rows))
        pos = self._positions(hashes)
        pos += (np.arange(n, dtype=np.int64) // self.group_rows) * self.bits
        bits = np.zeros(groups * self.bits, dtype=np.bool_)
        bits[pos.ravel()] = True
        return np.packbits(bits, bitorder="little").tobytes()

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

    def may_contain(self, block: bytes, hashes: np.ndarray) -> np.ndarray:
        """Per key: False when the row group certainly lacks it, True when it may hold it."""
        if len(hashes) <= SMALL:
            return np.array([self._probe_one(block, h) for h in hashes.tolist()], dtype=bool)
        b = np.frombuffer(block, dtype=np.uint8)
        pos = self._positions(hashes)
        hit = (b[pos >> 3] >> (pos & 7).astype(np.uint8)) & 1
        return hit.all(axis=0)

