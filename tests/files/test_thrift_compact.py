"""The generic Thrift compact-protocol codec: any struct survives encode then decode, and what
pyarrow writes (footers, page index, page headers) decodes and re-encodes byte for byte."""

from __future__ import annotations

import io
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sediment.files import thrift_compact as tc
from sediment.files.thrift_compact import (
    BINARY,
    BOOL,
    BYTE,
    DOUBLE,
    FALSE,
    I16,
    I32,
    I64,
    LIST,
    MAP,
    SET,
    STRUCT,
    UUID,
    ThriftError,
    TList,
    TMap,
)

_SCALARS: dict[int, st.SearchStrategy[Any]] = {
    BOOL: st.booleans(),
    BYTE: st.integers(-128, 127),
    I16: st.integers(-(1 << 15), (1 << 15) - 1),
    I32: st.integers(-(1 << 31), (1 << 31) - 1),
    I64: st.integers(-(1 << 63), (1 << 63) - 1),
    DOUBLE: st.floats(allow_nan=False),
    BINARY: st.binary(max_size=40),
    UUID: st.binary(min_size=16, max_size=16),
}
_FIELD_TYPES = [*_SCALARS, LIST, SET, MAP, STRUCT]


def _types(depth: int) -> list[int]:
    """Types a value may have with ``depth`` more levels of nesting allowed."""
    return _FIELD_TYPES if depth > 0 else list(_SCALARS)


def _values(t: int, depth: int) -> st.SearchStrategy[Any]:
    """Values of type ``t`` (a container: ``depth`` > 0) in the generic form."""
    if t in _SCALARS:
        return _SCALARS[t]
    if t == FALSE:  # a bool list's element type as some writers write it
        return st.booleans()
    inner = _types(depth - 1)
    if t in (LIST, SET):
        return st.sampled_from([*inner, FALSE]).flatmap(
            lambda e: st.lists(_values(e, depth - 1), max_size=20).map(
                lambda items: TList(e, items)))
    if t == MAP:
        return st.tuples(st.sampled_from(inner), st.sampled_from(inner)).flatmap(
            lambda kv: st.lists(st.tuples(_values(kv[0], depth - 1), _values(kv[1], depth - 1)),
                                max_size=5).map(
                lambda pairs: TMap(kv[0], kv[1], pairs) if pairs else TMap(0, 0, [])))
    return _structs(depth - 1)


def _structs(depth: int) -> st.SearchStrategy[dict[int, tuple[int, Any]]]:
    """Structs whose field ids go up by short steps, long jumps and backwards (both header
    forms), with values of every type (containers nesting ``depth`` more levels)."""
    field = st.tuples(st.one_of(st.integers(1, 20), st.integers(-(1 << 15), (1 << 15) - 1)),
                      st.sampled_from(_types(depth)))
    return st.lists(field, max_size=8, unique_by=lambda f: f[0]).flatmap(
        lambda fields: st.fixed_dictionaries(
            {fid: _values(t, depth).map(lambda v, t=t: (t, v)) for fid, t in fields}))


@given(_structs(2))
@settings(max_examples=100, deadline=None)
def test_a_struct_survives_encode_then_decode(struct: dict[int, tuple[int, Any]]) -> None:
    data = tc.encode(struct)
    assert tc.decode(data) == struct
    assert tc.decode_struct(data + b"\x07tail") == (struct, len(data))  # what it consumed


def _parquet(**options: Any) -> bytes:
    rng = np.random.default_rng(5)
    n = 3000
    table = pa.table({
        "k": pa.array(np.sort(rng.integers(0, 1 << 40, n))),
        "s": pa.array([f"v{i % 97}" if i % 7 else None for i in range(n)]),
        "f": pa.array(rng.random(n)),
        "b": pa.array(rng.random(n) < 0.5),
        "t": pa.array(rng.integers(0, 1 << 50, n), pa.timestamp("us", tz="Europe/Paris")),
        "d": pa.array([None if i % 5 == 0 else i for i in range(n)], pa.decimal128(12, 3)),
    })
    sink = io.BytesIO()
    pq.write_table(table, sink, row_group_size=700, data_page_size=512, **options)
    return sink.getvalue()


@pytest.mark.parametrize("options", [
    {}, {"write_page_index": True, "write_page_checksum": True, "compression": "zstd"},
    {"write_page_index": True, "data_page_version": "2.0", "use_dictionary": ["s"]},
], ids=["plain", "page-index", "v2-pages"])
def test_pyarrow_footers_and_page_index_re_encode_byte_for_byte(options: dict[str, Any]
                                                                ) -> None:
    data = _parquet(**options)
    length = int.from_bytes(data[-8:-4], "little")
    footer = data[-8 - length:-8]
    md = tc.decode(footer)
    assert tc.encode(md) == footer
    structs = 0
    for group in md[4][1].items:
        for chunk in group[1][1].items:
            for at, size in ((4, 5), (6, 7)):  # offset index, column index
                if at in chunk:
                    start, n = chunk[at][1], chunk[size][1]
                    assert tc.encode(tc.decode(data[start:start + n])) == data[start:start + n]
                    structs += 1
            # the chunk's pages: each header, then its bytes, up to the chunk's end
            meta = chunk[3][1]
            pos = meta.get(11, meta[9])[1]
            end = pos + meta[7][1]
            while pos < end:
                header, body = tc.decode_struct(data, pos)
                assert tc.encode(header) == data[pos:body]
                pos = body + header[3][1]  # compressed_page_size
            assert pos == end
    assert structs > 0 or not options.get("write_page_index")


@pytest.mark.parametrize("data, what", [
    (b"", "past the end"),
    (b"\x15", "past the end"),  # an i32 field with no value
    (b"\x18\x05ab\x00", "past the end"),  # a 5-byte binary holding 2
    (b"\x19\xf5\xff\xff\xff\x0f\x00", "past the end"),  # a list claiming 4G elements
    (b"\x1e\x00", "unknown type"),
    (b"\x1c" * 100 + b"\x00" * 101, "deeper"),
    (b"\x15\x02\x00\x00", "bytes after"),
    (b"\x16" + b"\xff" * 11, "longer than 10 bytes"),
], ids=["empty", "no-value", "short-binary", "huge-list", "unknown-type", "too-deep",
        "trailing-bytes", "long-varint"])
def test_bytes_that_are_not_a_struct_raise_thrift_error(data: bytes, what: str) -> None:
    with pytest.raises(ThriftError, match=what):
        tc.decode(data)


def test_encode_writes_pre_encoded_structs_and_pieces() -> None:
    inner = {1: (I32, 7), 2: (BINARY, b"x")}
    whole = {1: (I64, 1), 3: (STRUCT, inner), 20: (LIST, TList(STRUCT, [inner, inner]))}
    pre = {1: (I64, 1), 3: (STRUCT, tc.encode(inner)),
           20: (LIST, TList(STRUCT, [tc.encode(inner)] * 2))}
    assert tc.encode(pre) == tc.encode(whole)
    pieces = tc.encode_fields({1: (I64, 1)}) + \
        tc.encode_fields({3: (STRUCT, inner), 20: whole[20]}, after=1) + tc.END
    assert pieces == tc.encode(whole)


def test_decode_struct_until_a_field_stops_before_the_next() -> None:
    whole = {1: (LIST, TList(I64, [1, 2])), 2: (BINARY, b"x"), 4: (I32, 3),
             5: (LIST, TList(I64, list(range(100))))}
    data = tc.encode(whole)
    head, at = tc.decode_struct(data, until=4)
    assert head == {k: whole[k] for k in (1, 2, 4)}
    assert data[at] >> 4 == 1 and tc.decode_struct(data, until=99) == (whole, len(data))
