"""Parquet's own bloom filters (split-block, xxhash64), read by Sediment itself.

A table's ``parquet.bloom_columns`` makes the writer (pyarrow's ``bloom_filter_options``)
store a split-block bloom filter per row group for those columns, in the Parquet format's own
layout, so DuckDB, DataFusion and Spark read them too. pyarrow cannot read them from Python:
this module finds them in the footer (ColumnMetaData fields 14 and 15, decoded with
:mod:`sediment.files.thrift_compact`), checks their headers, and answers "may row group g hold
any of these values?" for a filter's few literals, checked against every row group of a file
at once with numpy (nothing is hashed per record).

The format (apache/parquet-format ``BloomFilter.md``): a value is plain-encoded (ints and
floats little-endian, strings and binaries their bytes alone) and hashed with xxhash64, seed
0. The bitset is ``n`` blocks of eight 32-bit words; the hash's upper 32 bits pick the block
(``(h >> 32) * n >> 32``) and its lower 32 bits set one bit in each word (``(low * SALT[i]
mod 2**32) >> 27``). A value may be present only if all eight bits are set.

xxhash64 is written here in Python (no dependency for a few literals a query): it is checked
against the reference vectors and against filters pyarrow wrote (tests/files/test_bloom.py).
"""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from sediment.files import thrift_compact as tc
from sediment.files.parquet_meta import CC_META, FMD_GROUPS, RG_COLUMNS, get_field, struct_list
from sediment.files.thrift_compact import I32, I64, STRUCT, Struct, ThriftError

_M64 = (1 << 64) - 1
_P1, _P2, _P3 = 0x9E3779B185EBCA87, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9
_P4, _P5 = 0x85EBCA77C2B2AE63, 0x27D4EB2F165667C5


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (64 - r))) & _M64


def _round(acc: int, lane: int) -> int:
    return (_rotl((acc + lane * _P2) & _M64, 31) * _P1) & _M64


def _merge(acc: int, val: int) -> int:
    return ((acc ^ _round(0, val)) * _P1 + _P4) & _M64


def xxhash64(data: bytes, seed: int = 0) -> int:
    """XXH64 of ``data`` (Yann Collet's xxHash, 64-bit): Parquet's bloom-filter hash."""
    n = len(data)
    pos = 0
    if n >= 32:
        v1 = (seed + _P1 + _P2) & _M64
        v2 = (seed + _P2) & _M64
        v3 = seed
        v4 = (seed - _P1) & _M64
        while pos + 32 <= n:
            a, b, c, d = struct.unpack_from("<4Q", data, pos)
            v1, v2, v3, v4 = _round(v1, a), _round(v2, b), _round(v3, c), _round(v4, d)
            pos += 32
        h = (_rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)) & _M64
        for v in (v1, v2, v3, v4):
            h = _merge(h, v)
    else:
        h = (seed + _P5) & _M64
    h = (h + n) & _M64
    while pos + 8 <= n:
        (k,) = struct.unpack_from("<Q", data, pos)
        h = (_rotl(h ^ _round(0, k), 27) * _P1 + _P4) & _M64
        pos += 8
    if pos + 4 <= n:
        (k,) = struct.unpack_from("<I", data, pos)
        h = (_rotl(h ^ (k * _P1) & _M64, 23) * _P2 + _P3) & _M64
        pos += 4
    while pos < n:
        h = (_rotl(h ^ (data[pos] * _P5) & _M64, 11) * _P1) & _M64
        pos += 1
    h ^= h >> 33
    h = (h * _P2) & _M64
    h ^= h >> 29
    h = (h * _P3) & _M64
    return h ^ (h >> 32)


def plain_bytes(value: Any, typ: pa.DataType) -> bytes | None:
    """``value`` (a Python value of a column of type ``typ``) plain-encoded as Parquet hashes
    it for its bloom filter; None for a type this module does not hash (then no row group is
    ruled out) or a value that does not fit the type."""
    try:
        if pa.types.is_string(typ) or pa.types.is_large_string(typ):
            return value.encode("utf-8") if isinstance(value, str) else None
        if pa.types.is_binary(typ) or pa.types.is_large_binary(typ):
            return bytes(value) if isinstance(value, bytes | bytearray) else None
        if pa.types.is_integer(typ) or pa.types.is_temporal(typ):
            if pa.types.is_time(typ) or pa.types.is_interval(typ) or \
                    pa.types.is_duration(typ):
                return None
            if isinstance(value, bool) or not isinstance(value, int):
                return None
            width = 4 if typ.bit_width <= 32 else 8
            # Parquet stores int8-int32 (and uint8-uint16) as INT32, uint32 too (its bits)
            return (value & ((1 << 8 * width) - 1)).to_bytes(width, "little")
        if pa.types.is_float64(typ) and isinstance(value, float) and not math.isnan(value):
            return struct.pack("<d", value)
        if pa.types.is_float32(typ) and isinstance(value, float) and not math.isnan(value):
            return struct.pack("<f", value)
    except (OverflowError, ValueError, struct.error):
        return None
    return None


SALT = np.array([0x47B6137B, 0x44974D91, 0x8824AD5B, 0xA2B7289D,
                 0x705495C7, 0x2DF1424B, 0x9EFC4947, 0x5C6BFB31], dtype=np.uint64)

# BloomFilterHeader: numBytes, algorithm (union: 1 split block), hash (union: 1 xxhash),
# compression (union: 1 uncompressed)
_BF_BYTES, _BF_ALGORITHM, _BF_HASH, _BF_COMPRESSION = 1, 2, 3, 4
CM_BLOOM_OFFSET, CM_BLOOM_LENGTH = 14, 15
"""ColumnMetaData's bloom_filter_offset and bloom_filter_length."""


def bloom_places(footer: Struct, column: int) -> list[tuple[int, int]] | None:
    """(offset, length) of column ``column``'s bloom filter in each row group of a decoded
    FileMetaData, or None when a row group has none (a file written without them: it may
    hold any value). A length of -1 means the writer did not record it (the header says)."""
    out = []
    for group in struct_list(footer, FMD_GROUPS):
        ccs = struct_list(group, RG_COLUMNS)
        if column >= len(ccs) or CC_META not in ccs[column]:
            return None
        meta = get_field(ccs[column], CC_META, STRUCT)
        offset = get_field(meta, CM_BLOOM_OFFSET, I64, None)
        if offset is None:
            return None
        out.append((offset, get_field(meta, CM_BLOOM_LENGTH, I32, -1)))
    return out


def parse_filter(raw: bytes | bytearray | memoryview) -> np.ndarray:
    """The bitset of one bloom filter (header then bitset), as uint32 words; raises
    ThriftError for a header this module cannot read (another algorithm, hash or a
    compressed bitset, or bytes that run short)."""
    header, at = tc.decode_struct(raw)
    size = tc_int(header, _BF_BYTES)
    for fid in (_BF_ALGORITHM, _BF_HASH, _BF_COMPRESSION):
        got = header.get(fid)
        if got is None or got[0] != STRUCT or set(got[1]) != {1}:
            raise ThriftError(f"bloom filter header field {fid} is not the split-block, "
                              "xxhash, uncompressed kind")
    if size <= 0 or size % 32 or at + size > len(raw):
        raise ThriftError(f"bloom filter of {size} bytes where {len(raw) - at} follow")
    return np.frombuffer(bytes(raw[at:at + size]), dtype="<u4").astype(np.uint32)


def tc_int(s: Struct, fid: int) -> int:
    got = s.get(fid)
    if got is None or got[0] != I32:
        raise ThriftError(f"bloom filter header has no field {fid}")
    return int(got[1])


@dataclass(frozen=True, slots=True, eq=False)
class ColumnBlooms:
    """One column's bloom filters in every row group of a file, as one word array."""

    words: np.ndarray
    """Every row group's bitset, concatenated (uint32)."""
    starts: np.ndarray = field(repr=False)
    """Index in ``words`` of each row group's first word (uint64)."""
    blocks: np.ndarray = field(repr=False)
    """Blocks of each row group's bitset (uint64)."""

    @classmethod
    def of(cls, bitsets: Sequence[np.ndarray]) -> ColumnBlooms:
        sizes = np.array([len(b) for b in bitsets], dtype=np.uint64)
        starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.uint64)
        words = np.concatenate(bitsets) if bitsets else np.zeros(0, np.uint32)
        return cls(words, starts, sizes // np.uint64(8))

    @property
    def nbytes(self) -> int:
        return int(self.words.nbytes + self.starts.nbytes + self.blocks.nbytes)

    def may_contain(self, hashes: Sequence[int]) -> np.ndarray:
        """Per row group, whether it may hold any of the values whose xxhash64 are
        ``hashes`` (bool array)."""
        out = np.zeros(len(self.starts), dtype=bool)
        for h in hashes:
            block = ((np.uint64(h >> 32) * self.blocks) >> np.uint64(32))
            base = self.starts + block * np.uint64(8)
            low = np.uint64(h & 0xFFFFFFFF)
            bits = ((low * SALT) & np.uint64(0xFFFFFFFF)) >> np.uint64(27)
            masks = (np.uint64(1) << bits).astype(np.uint32)
            words = self.words[(base[:, None] + np.arange(8, dtype=np.uint64)).astype(np.int64)]
            out |= ((words & masks) == masks).all(axis=1)
        return out


def value_hashes(values: Sequence[Any], typ: pa.DataType) -> list[int] | None:
    """The xxhash64 of each value as Parquet's bloom filters hash it, or None when one
    cannot be hashed (then the filters cannot rule anything out)."""
    out = []
    for v in values:
        raw = plain_bytes(v, typ)
        if raw is None:
            return None
        out.append(xxhash64(raw))
    return out

