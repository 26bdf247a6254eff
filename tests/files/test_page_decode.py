"""Pages decoded straight from their bytes (sediment.files.page_decode) against pyarrow's
decoding of the same pages: for every page of random files of the types the direct path
takes (integers, dates, timestamps, floats, strings and binaries, with nulls), the direct
decode, where it answers, equals pyarrow's read of the page and of the whole file; it
answers for every version 1 page of values of one width (PLAIN, as Sediment writes by
default, or dictionary-encoded); and damage raises what the verified readers expect."""

from __future__ import annotations

import io

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sediment.files.page_decode import decode_page, direct_column
from sediment.files.pages import _decode_file, load_page_index
from sediment.files.verified import CRC_FAILURE, page_damage

TYPES = [pa.int32(), pa.int64(), pa.date32(), pa.timestamp("ms"), pa.timestamp("us", tz="UTC"),
         pa.timestamp("ns"), pa.timestamp("s"), pa.float32(), pa.float64(), pa.string(),
         pa.binary(), pa.large_string(), pa.large_binary()]
CODECS = ["zstd", "snappy", "gzip", "none", "lz4"]
DIRECT_CODECS = {"zstd", "snappy", "gzip", "none"}


def _column(rng: np.random.Generator, t: pa.DataType, n: int, width: int | None) -> pa.Array:
    """``n`` random values of ``t``; byte arrays all ``width`` long (None: 0 to 12 long)."""
    ints = rng.integers(-(1 << 40), 1 << 40, n)
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t) or \
            pa.types.is_large_binary(t):
        lengths = rng.integers(0, 13, n) if width is None else np.full(n, width)
        chars = rng.integers(0x61, 0x7B, int(lengths.sum()), dtype=np.uint8)
        if width is not None and width >= 2:  # some two-byte characters (é) too
            grid = chars.reshape(n, width)
            grid[1::2, 0], grid[1::2, 1] = 0xC3, 0xA9
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
        plain = pa.Array.from_buffers(pa.string() if pa.types.is_string(t) or
                                      pa.types.is_large_string(t) else pa.binary(), n,
                                      [None, pa.py_buffer(offsets), pa.py_buffer(chars)])
        return plain.cast(t)
    if pa.types.is_floating(t):
        return pa.array(ints / 7.0).cast(t)
    if pa.types.is_int32(t) or pa.types.is_date32(t):
        return pa.array((ints >> 12).astype(np.int32)).cast(t)
    return pa.array(ints).cast(t)


@st.composite
def files(draw: st.DrawFn) -> tuple[bytes, pa.Table, dict[str, bool]]:
    """A random file of direct-path types with nulls, and whether each column's pages
    must decode directly (one width of values, version 1 pages, a codec it takes)."""
    rng = np.random.default_rng(draw(st.integers(0, 1 << 32)))
    n = draw(st.integers(1, 300))
    codec = draw(st.sampled_from(CODECS))
    version = draw(st.sampled_from(["1.0", "1.0", "2.0"]))
    columns: dict[str, pa.Array] = {}
    direct: dict[str, bool] = {}
    fields = []
    for i, t in enumerate(draw(st.lists(st.sampled_from(TYPES), min_size=1, max_size=4))):
        width = draw(st.sampled_from([None, 0, 1, 10]))
        values = _column(rng, t, n, width)
        # few distinct values too: dictionary indices of every width, in runs and packed
        pool = draw(st.sampled_from([1, 3, 40, n]))
        values = values.take(pa.array(rng.integers(0, min(pool, n), n)))
        nulls = draw(st.sampled_from([0.0, 0.1, 0.5, 1.0]))
        mask = pa.array(rng.random(n) < nulls)
        name = f"c{i}"
        nullable = nulls > 0 or draw(st.booleans())
        columns[name] = pc.if_else(mask, pa.nulls(n, t), values) if nulls else values
        fields.append(pa.field(name, t, nullable=nullable))
        fixed = not (pa.types.is_string(t) or pa.types.is_large_string(t) or
                     pa.types.is_binary(t) or pa.types.is_large_binary(t)) or width is not None
        direct[name] = fixed and version == "1.0" and codec in DIRECT_CODECS and \
            t != pa.timestamp("s")
    table = pa.table(columns, schema=pa.schema(fields))
    sink = io.BytesIO()
    pq.write_table(table, sink, compression=codec, use_dictionary=draw(st.booleans()),
                   row_group_size=draw(st.sampled_from([40, 1000])),
                   data_page_size=draw(st.sampled_from([64, 4096])),
                   max_rows_per_page=draw(st.sampled_from([None, 7, 64])),
                   data_page_version=version, write_page_index=True,
                   write_page_checksum=True)
    return sink.getvalue(), table, direct


@given(files())
@settings(max_examples=60, deadline=None)
def test_direct_decoding_gives_what_pyarrow_gives(file: tuple[bytes, pa.Table,
                                                              dict[str, bool]]) -> None:
    raw, table, direct = file
    index = load_page_index(lambda s, e: raw[s:e], len(raw), "f.parquet")
    assert index is not None
    pf = pq.ParquetFile(pa.BufferReader(raw))
    for g in range(index.num_row_groups):
        group = pf.read_row_group(g)
        for c, leaf in enumerate(index.columns):
            pages = index.pages(g, c)
            column = direct_column(index, g, c)
            assert (column is not None) or not direct[leaf.name]
            for p in range(len(pages)):
                first, rows = pages.rows(p)
                start = int(pages.offsets[p])
                words = None if pages.dictionary is None else \
                    raw[pages.dictionary[0]:sum(pages.dictionary)]
                got = None if column is None else decode_page(
                    column, raw[start:start + int(pages.sizes[p])], rows, True, words)
                assert got is not None or not direct[leaf.name], (leaf.name, g, p)
                if got is None:
                    continue
                by_pyarrow = _decode_file(index, lambda s, e: raw[s:e], g, [(c, p)], rows,
                                          {})[0]
                assert got.type == by_pyarrow.type
                assert got.equals(by_pyarrow), (leaf.name, g, p)
                got.validate(full=True)
                assert got.equals(group.column(c).slice(first, rows).combine_chunks())


def test_a_damaged_page_fails_its_crc_as_pyarrow_says_it() -> None:
    table = pa.table({"k": pa.array([f"k{i:04}" for i in range(200)]),
                      "v": pa.array(range(200), pa.int64())})
    sink = io.BytesIO()
    pq.write_table(table, sink, compression="zstd", use_dictionary=False,
                   max_rows_per_page=50, write_page_index=True, write_page_checksum=True)
    raw = sink.getvalue()
    index = load_page_index(lambda s, e: raw[s:e], len(raw), "f.parquet")
    assert index is not None
    for c in (0, 1):
        pages = index.pages(0, c)
        column = direct_column(index, 0, c)
        assert column is not None
        page = bytearray(raw[int(pages.offsets[1]):int(pages.offsets[1] + pages.sizes[1])])
        assert decode_page(column, page, 50, True) is not None
        page[-2] ^= 0xFF
        with pytest.raises(OSError, match=CRC_FAILURE) as e:
            decode_page(column, page, 50, True)
        assert page_damage(e.value)
        with pytest.raises((OSError, pa.ArrowInvalid)) as bad:  # unchecked: no decompressing
            decode_page(column, page, 50, False)
        assert page_damage(bad.value)
