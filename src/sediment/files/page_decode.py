"""One data page decoded straight from its bytes, where its layout is simple enough.

A cold lookup decodes a page per column (sediment.files.pages). pyarrow decodes pages only
inside a Parquet file, so each page used to be framed as a one-page file: a footer encoded
for it, a ``ParquetFile`` opened on it (its footer parsed again) and a row group read, some
0.3 ms of a 1.2 ms cold lookup around 0.25 ms of decoding. The pages Sediment writes by
default are the simplest Parquet has: a flat column, a version 1 data page, PLAIN values
(or, for the columns of ``parquet.dictionary_columns`` and the hidden sequence column,
indices into the chunk's dictionary page). Those are decoded here with a few numpy calls on
the page's bytes:

* the page header (Thrift compact) gives the sizes, the CRC and the encodings;
* the CRC-32 of the compressed bytes is checked (``storage.checksums.VERIFY_READS``) and a
  mismatch raised as pyarrow raises it, so ``files.verified.reading`` reads again and then
  reports the damage as it does for pyarrow's reads;
* the body is decompressed (zstd by the ``zstandard`` module when installed, else by
  pyarrow's codec, which also does snappy; gzip by zlib);
* a nullable column's definition levels (RLE/bit-packed hybrid, bit width 1) become the
  validity bitmap, a run at a time;
* fixed-width values (int32, int64, date32, timestamps of the unit stored, floats) are the
  values buffer as they are (``np.frombuffer``), spread over the valid slots when some are
  null; byte arrays (strings, binaries) whose values all have one length are cut out of
  their 4-byte length prefixes by a reshape, and their offsets are a range;
* dictionary indices (RLE/bit-packed hybrid of the width the page says) pick their values
  from the dictionary page, decoded as PLAIN values are (``take``).

Anything else (another encoding, a version 2 page, byte arrays of different lengths, other
types or codecs) returns None, and the caller decodes the page with pyarrow as before: the
answer is the same either way (a property test compares them).
"""

from __future__ import annotations

import importlib
import threading
import zlib
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from sediment.files import thrift_compact as tc
from sediment.files.page_index import PageIndex
from sediment.files.page_values import BYTE_ARRAY, DOUBLE, FLOAT, INT32, INT64
from sediment.files.parquet_meta import CM_CODEC, SE_REPETITION, SE_TYPE, get_field
from sediment.files.thrift_compact import I32, STRUCT, Struct, ThriftError
from sediment.files.verified import CRC_FAILURE

# PageHeader, DataPageHeader fields; page types, encodings, codecs (parquet.thrift)
PH_TYPE, PH_USIZE, PH_CSIZE, PH_CRC, PH_DATA, PH_DICTIONARY = 1, 2, 3, 4, 5, 7
DP_VALUES, DP_ENCODING, DP_DEF_ENCODING = 1, 2, 3
DICT_VALUES, DICT_ENCODING = 1, 2
DATA_PAGE, DICTIONARY_PAGE = 0, 2
PLAIN, PLAIN_DICTIONARY, RLE, RLE_DICTIONARY = 0, 2, 3, 8
UNCOMPRESSED, SNAPPY, GZIP, ZSTD = 0, 1, 2, 6
OPTIONAL = 1
_LOGICAL, _L_TIMESTAMP, _TS_UNIT = 10, 8, 2
_UNITS = {"ms": 1, "us": 2, "ns": 3}
"""An Arrow timestamp unit -> the TimeUnit member Parquet's TIMESTAMP logical type sets."""


@dataclass(frozen=True, slots=True)
class DirectColumn:
    """How the pages of one column chunk decode here."""

    type: pa.DataType
    """The Arrow type pyarrow reads the column as (the file's stored Arrow schema)."""
    dtype: str | None
    """The values' numpy type; None: byte arrays."""
    optional: bool
    """Whether the column has definition levels (it may hold nulls)."""
    codec: int
    offsets: str
    """The numpy type of a byte-array column's offsets (int32; int64 for large types)."""


def direct_column(index: PageIndex, g: int, c: int) -> DirectColumn | None:
    """How column ``c``'s pages of row group ``g`` decode here, or None when this module
    does not decode them (the caller uses pyarrow). Worked out once per column and codec
    (kept on the index)."""
    if index.arrow is None:
        return None
    template = index.template(g, c)
    memo = (c, template)
    try:
        return index.decoders[memo]
    except KeyError:
        pass
    try:
        head = tc.decode(template.head + tc.END)
        codec = get_field(head, CM_CODEC, I32)
        got = _column(tc.decode(index.columns[c].element), index.arrow[c].type, codec)
    except ThriftError:
        got = None  # pyarrow judges the chunk
    index.decoders[memo] = got
    return got


def _column(element: Struct, t: pa.DataType, codec: int) -> DirectColumn | None:
    if codec not in (UNCOMPRESSED, SNAPPY, GZIP, ZSTD):
        return None
    physical = get_field(element, SE_TYPE, I32)
    optional = get_field(element, SE_REPETITION, I32, 0) == OPTIONAL
    dtype = None
    if physical == BYTE_ARRAY and (pa.types.is_string(t) or pa.types.is_binary(t) or
                                   pa.types.is_large_string(t) or pa.types.is_large_binary(t)):
        wide = pa.types.is_large_string(t) or pa.types.is_large_binary(t)
        return DirectColumn(t, None, optional, codec, "<i8" if wide else "<i4")
    if physical == INT32 and (pa.types.is_int32(t) or pa.types.is_date32(t)):
        dtype = "<i4"
    elif physical == INT64 and pa.types.is_int64(t):
        dtype = "<i8"
    elif physical == INT64 and pa.types.is_timestamp(t):
        logical = element.get(_LOGICAL)
        ts = logical[1].get(_L_TIMESTAMP) if logical is not None and \
            logical[0] == STRUCT else None
        unit = ts[1].get(_TS_UNIT) if ts is not None and ts[0] == STRUCT else None
        if unit is None or unit[0] != STRUCT or set(unit[1]) != {_UNITS.get(t.unit, -1)}:
            return None  # stored in another unit than read: pyarrow converts it
        dtype = "<i8"
    elif physical == FLOAT and pa.types.is_float32(t):
        dtype = "<f4"
    elif physical == DOUBLE and pa.types.is_float64(t):
        dtype = "<f8"
    if dtype is None:
        return None
    return DirectColumn(t, dtype, optional, codec, "")


def _header(raw: bytes | bytearray | memoryview) -> tuple[Struct, int]:
    try:
        return tc.decode_struct(raw)
    except ThriftError as e:
        raise pa.ArrowInvalid(f"a page header does not decode: {e}") from e


def _body(column: DirectColumn, raw: bytes | bytearray | memoryview, header: Struct, at: int,
          verify: bool) -> Any:
    """The page's body (after its header at ``at``), its CRC checked, decompressed."""
    try:
        csize, usize = get_field(header, PH_CSIZE, I32), get_field(header, PH_USIZE, I32)
    except ThriftError as e:
        raise pa.ArrowInvalid(f"a page header does not decode: {e}") from e
    body = memoryview(raw)[at:at + csize]
    if len(body) != csize or csize < 0 or usize < 0:
        raise pa.ArrowInvalid(f"a page of {csize} bytes where {len(body)} follow its header")
    crc = header.get(PH_CRC)
    if verify and crc is not None and zlib.crc32(body) != crc[1] & 0xFFFFFFFF:
        raise OSError(f"a page: {CRC_FAILURE}")  # (what pyarrow raises)
    return _decompress(column.codec, body, usize)


def decode_page(column: DirectColumn, raw: bytes | bytearray | memoryview, rows: int,
                verify: bool, dictionary: bytes | bytearray | memoryview | None = None
                ) -> pa.Array | None:
    """The values of the data page ``raw`` (its header, then its body) of ``rows`` rows, or
    None when its layout is not one decoded here; ``dictionary``: its chunk's dictionary
    page, when it has one. Damage (a CRC that fails with ``verify``, a header or body that
    does not decode) raises as pyarrow's read of the page would: an ``OSError`` saying its
    CRC failed, ``pa.ArrowInvalid`` for bytes that do not decode."""
    header, at = _header(raw)
    page = header.get(PH_DATA)
    if header.get(PH_TYPE) != (I32, DATA_PAGE) or page is None or page[0] != STRUCT:
        return None
    data_page: Struct = page[1]
    encoding = data_page.get(DP_ENCODING)
    if encoding not in ((I32, PLAIN), (I32, PLAIN_DICTIONARY), (I32, RLE_DICTIONARY)) or \
            data_page.get(DP_VALUES) != (I32, rows) or \
            (encoding != (I32, PLAIN) and dictionary is None):
        return None
    if column.optional and data_page.get(DP_DEF_ENCODING) != (I32, RLE):
        return None
    words = None
    if encoding != (I32, PLAIN):  # indices into the chunk's dictionary
        assert dictionary is not None
        words = _dictionary(column, dictionary, verify)
        if words is None:
            return None
    data = _body(column, raw, header, at, verify)
    valid = None
    pos = 0
    if column.optional:
        length = int.from_bytes(data[:4], "little")
        valid = _runs(data[4:4 + length], rows, 1).astype(bool)
        pos = 4 + length
    count = rows if valid is None else int(np.count_nonzero(valid))
    values = data[pos:]
    bitmap = None if valid is None or count == rows else \
        pa.py_buffer(np.packbits(valid, bitorder="little"))
    if words is not None:
        if not values and count:
            raise pa.ArrowInvalid("a dictionary-encoded page without its indices")
        indices = _runs(values[1:], count, values[0]) if count else np.zeros(0, np.int64)
        if count and int(indices.max()) >= len(words):
            raise pa.ArrowInvalid(f"a page's index {int(indices.max())} past its dictionary "
                                  f"of {len(words)} values")
        full = indices.astype(np.int32)
        if valid is not None and count < rows:
            full = np.zeros(rows, np.int32)
            full[valid] = indices
        return words.take(pa.Array.from_buffers(pa.int32(), rows, [bitmap, pa.py_buffer(full)],
                                                null_count=rows - count))
    if column.dtype is not None:
        width = np.dtype(column.dtype).itemsize
        if len(values) < count * width:
            raise pa.ArrowInvalid(f"a page of {rows} values holds {len(values)} bytes of them")
        got = np.frombuffer(values, column.dtype, count=count)
        if got.ctypes.data % width:  # (Arrow's kernels expect values at their alignment)
            got = got.copy()
        if valid is not None and count < rows:
            full = np.zeros(rows, column.dtype)
            full[valid] = got
            got = full
        return pa.Array.from_buffers(column.type, rows, [bitmap, pa.py_buffer(got)],
                                     null_count=rows - count)
    return _byte_arrays(column, values, rows, count, valid, bitmap)


def _byte_arrays(column: DirectColumn, values: Any, rows: int, count: int,
                 valid: np.ndarray | None, bitmap: pa.Buffer | None) -> pa.Array | None:
    """PLAIN byte arrays (each value its 4-byte length, then its bytes) of one length,
    as an Arrow string or binary array; None when their lengths differ."""
    length = int.from_bytes(values[:4], "little") if count else 0
    stride = 4 + length
    if len(values) != count * stride:
        return None  # values of different lengths (or damage: pyarrow says which)
    lengths = np.ndarray((count,), "<i4", values, 0, (stride,))  # (each value's prefix)
    if count and not (lengths == length).all():
        return None
    grid = np.frombuffer(values, np.uint8, count=count * stride).reshape(count, stride)
    chars = np.ascontiguousarray(grid[:, 4:])
    if valid is None or count == rows:
        offsets = np.arange(0, (rows + 1) * length, length, dtype=column.offsets) \
            if length else np.zeros(rows + 1, column.offsets)
    else:
        offsets = np.zeros(rows + 1, column.offsets)
        np.cumsum(valid * length, out=offsets[1:])
    return pa.Array.from_buffers(column.type, rows, [bitmap, pa.py_buffer(offsets),
                                                     pa.py_buffer(chars)],
                                 null_count=rows - count)


def _dictionary(column: DirectColumn, raw: bytes | bytearray | memoryview, verify: bool
                ) -> pa.Array | None:
    """The values of a chunk's dictionary page (PLAIN), or None when they are not decoded
    here."""
    header, at = _header(raw)
    page = header.get(PH_DICTIONARY)
    if header.get(PH_TYPE) != (I32, DICTIONARY_PAGE) or page is None or page[0] != STRUCT or \
            page[1].get(DICT_ENCODING, (I32, PLAIN)) not in ((I32, PLAIN),
                                                             (I32, PLAIN_DICTIONARY)):
        return None
    n = page[1].get(DICT_VALUES)
    if n is None or n[0] != I32 or n[1] < 0:
        raise pa.ArrowInvalid("a dictionary page without its count of values")
    data = _body(column, raw, header, at, verify)
    if column.dtype is None:
        return _byte_arrays(column, data, n[1], n[1], None, None)
    if len(data) < n[1] * np.dtype(column.dtype).itemsize:
        raise pa.ArrowInvalid(f"a dictionary of {n[1]} values holds {len(data)} bytes")
    got = np.frombuffer(data, column.dtype, count=n[1]).copy()
    return pa.Array.from_buffers(column.type, n[1], [None, pa.py_buffer(got)])


def _runs(data: Any, rows: int, width: int) -> np.ndarray:
    """``rows`` values of ``width`` bits (RLE/bit-packed hybrid: definition levels,
    dictionary indices), a run at a time (a page has a few: the writer packs all but long
    repeats)."""
    if width > 32:
        raise pa.ArrowInvalid(f"a bit width of {width}")
    runs = []
    pos = got = 0
    size = len(data)
    while got < rows:
        if pos >= size:
            raise pa.ArrowInvalid(f"definition levels end after {got} of {rows} values")
        header = shift = 0
        while True:  # (a varint)
            b = data[pos]
            pos += 1
            header |= (b & 0x7F) << shift
            if b < 0x80:
                break
            shift += 7
        if header & 1:  # bit-packed: groups of 8 values, ``width`` bytes a group
            n = (header >> 1) * width
            if pos + n > size:
                raise pa.ArrowInvalid("bit-packed values run past their bytes")
            bits = np.unpackbits(np.frombuffer(data, np.uint8, count=n, offset=pos),
                                 bitorder="little")
            runs.append(bits if width == 1 else
                        (bits.reshape(-1, width).astype(np.int64) << _SHIFTS[:width]).sum(1)
                        if width else np.zeros(8 * (header >> 1), np.int64))
            pos += n
            got += 8 * (header >> 1)
        else:  # a repeat: its count, then its value in whole bytes
            n = header >> 1
            end = pos + (width + 7) // 8
            if end > size or n == 0:
                raise pa.ArrowInvalid("a repeated run without its value")
            runs.append(np.full(n, int.from_bytes(data[pos:end], "little"),
                                np.uint8 if width == 1 else np.int64))
            pos = end
            got += n
    values = runs[0] if len(runs) == 1 else np.concatenate(runs)
    return values[:rows]


_SHIFTS = np.arange(32, dtype=np.int64)


_zstd: Any = None
try:  # (optional: pyarrow's codec does the same, a little slower)
    _zstd = importlib.import_module("zstandard")
except ImportError:
    pass
_local = threading.local()
_CODECS = {SNAPPY: "snappy", ZSTD: "zstd"}
_codecs: dict[int, pa.Codec] = {}


def _codec(codec: int) -> pa.Codec:
    """pyarrow's codec (one a process: its one-shot decompression keeps no state)."""
    got = _codecs.get(codec)
    if got is None:
        got = _codecs[codec] = pa.Codec(_CODECS[codec])
    return got


def _decompress(codec: int, body: memoryview, size: int) -> Any:
    """``body`` decompressed to ``size`` bytes (pa.ArrowInvalid when it does not)."""
    if codec == UNCOMPRESSED:
        out: Any = body
    elif codec == ZSTD and _zstd is not None:
        decompressor = getattr(_local, "zstd", None)
        if decompressor is None:  # (one a thread: a decompressor is not shared)
            decompressor = _local.zstd = _zstd.ZstdDecompressor()
        try:
            out = decompressor.decompress(body, max_output_size=size)
        except _zstd.ZstdError as e:
            raise pa.ArrowInvalid(f"a page does not decompress: {e}") from e
    elif codec == GZIP:
        try:
            out = zlib.decompress(body, 47)  # (a gzip or zlib header, found by zlib)
        except zlib.error as e:
            raise pa.ArrowInvalid(f"a page does not decompress: {e}") from e
    else:
        out = _codec(codec).decompress(body, decompressed_size=size)
    if len(out) != size:
        raise pa.ArrowInvalid(f"a page decompresses to {len(out)} bytes where its header "
                              f"says {size}")
    return memoryview(out).cast("B")  # (bytes, whatever the buffer says it holds)
