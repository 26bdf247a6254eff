"""Page-sized reads (sediment.files.pages) against pyarrow's own reads of the same files:
every page of random files (types, nulls, dictionary pages, codecs, page versions) decodes to
the rows pyarrow reads for it; the page index bounds and bisects as pyarrow wrote it; a page
read reads that page's bytes alone; damage raises what the verified readers expect."""

from __future__ import annotations

import io
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sediment.errors import CorruptDataError, CorruptMetadataError
from sediment.files import thrift_compact as tc
from sediment.files.chunk_index import page_locations
from sediment.files.keys import key_value
from sediment.files.pages import (
    TAIL_GUESS,
    PageIndex,
    load_page_index,
    page_ranges,
    read_page,
    read_pages,
)
from sediment.files.verified import CRC_FAILURE, page_damage, reading
from sediment.files.writer import writer_options
from sediment.properties import defaults
from sediment.workload import benchmark_schema

CODECS = ["zstd", "snappy", "lz4", "gzip", "none"]  # parquet.compression's choices
KEY_TYPES = [pa.int64(), pa.int32(), pa.string(), pa.binary(), pa.timestamp("us"), pa.date32()]
VALUE_TYPES = [pa.int32(), pa.int64(), pa.float64(), pa.string(), pa.binary(), pa.bool_(),
               pa.timestamp("ms", tz="Europe/Paris"), pa.timestamp("ns"), pa.date32(),
               pa.decimal128(9, 2), pa.decimal128(20, 4), pa.uint32(), pa.large_string(),
               pa.dictionary(pa.int32(), pa.string())]


def _values(rng: np.random.Generator, t: pa.DataType, n: int, distinct: int) -> pa.Array:
    """``n`` values of type ``t`` drawn from ``distinct`` random ones (few: dictionary pages
    that hold; many: dictionaries that fall back to plain pages)."""
    pool = rng.integers(-(1 << 30), 1 << 30, distinct)
    ints = pool[rng.integers(0, distinct, n)]
    if pa.types.is_dictionary(t):
        return _values(rng, t.value_type, n, distinct).dictionary_encode()
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return pa.array([f"s{v:x}" * (1 + v % 3) for v in ints.tolist()], t)
    if pa.types.is_binary(t):
        return pa.array([v.to_bytes(5, "little", signed=True) for v in ints.tolist()], t)
    if pa.types.is_boolean(t):
        return pa.array(ints % 2 == 0)
    if pa.types.is_floating(t):
        return pa.array(ints / 7.0)
    if pa.types.is_decimal(t):
        return pa.array([Decimal(v).scaleb(-t.scale) for v in (ints % 2_000_000).tolist()], t)
    if pa.types.is_unsigned_integer(t):
        return pa.array(ints + (1 << 30), pa.int64()).cast(t)
    if pa.types.is_int32(t) or pa.types.is_date32(t):
        return pa.array(ints.astype(np.int32)).cast(t)
    return pa.array(ints * 1_000_003).cast(t)  # int64, timestamps


@st.composite
def parquet_files(draw: st.DrawFn) -> tuple[bytes, pa.Table]:
    """A random file: a sorted key column (duplicates spanning pages), value columns of
    random types with nulls, random codec, page size, rows per page, page version and
    dictionary columns, with the page index written."""
    rng = np.random.default_rng(draw(st.integers(0, 1 << 32)))
    n = draw(st.integers(1, 400))
    key_type = draw(st.sampled_from(KEY_TYPES))
    keys = _values(rng, key_type, n, draw(st.sampled_from([3, 50, 5000])))
    columns = {"key": keys.take(pc.sort_indices(keys))}
    for i, t in enumerate(draw(st.lists(st.sampled_from(VALUE_TYPES), min_size=1, max_size=4))):
        values = _values(rng, t, n, draw(st.sampled_from([2, 40, 5000])))
        nulls = draw(st.sampled_from([0.0, 0.3, 1.0]))
        mask = pa.array(rng.random(n) < nulls)
        columns[f"c{i}"] = pc.if_else(mask, pa.nulls(n, values.type), values)
    table = pa.table(columns)
    sink = io.BytesIO()
    pq.write_table(
        table, sink, compression=draw(st.sampled_from(CODECS)),
        row_group_size=draw(st.sampled_from([50, 150, 5000])),
        data_page_size=draw(st.sampled_from([64, 300, 4096])),
        max_rows_per_page=draw(st.sampled_from([None, 3, 37])),
        data_page_version=draw(st.sampled_from(["1.0", "2.0"])),
        use_dictionary=draw(st.sampled_from([False, True, ["key"], ["c0"]])),
        store_decimal_as_integer=draw(st.booleans()),
        write_page_index=True, write_page_checksum=True)
    return sink.getvalue(), table


def _ranges(data: bytes) -> tuple[Callable[[int, int], bytes], list[tuple[int, int]]]:
    """A read_range over ``data`` that records what it reads."""
    calls: list[tuple[int, int]] = []

    def read_range(start: int, end: int) -> bytes:
        calls.append((start, end))
        return data[start:end]
    return read_range, calls


def _plain(values: pa.Array) -> pa.Array:
    """``values`` with an Arrow dictionary decoded (a page's dictionary holds what its page,
    or its chunk's dictionary page, holds; a whole chunk's, what the chunk holds)."""
    return values.dictionary_decode() if pa.types.is_dictionary(values.type) else values


def _model(scalar: pa.Scalar) -> Any:
    return None if not scalar.is_valid else key_value(scalar)


@given(parquet_files(), st.data())
@settings(max_examples=20, deadline=None)
def test_every_page_reads_as_pyarrow_reads_its_rows(file: tuple[bytes, pa.Table],
                                                    data: st.DataObject) -> None:
    raw, table = file
    read_range, _ = _ranges(raw)
    index = load_page_index(read_range, len(raw), "f.parquet")
    assert index is not None
    pf = pq.ParquetFile(pa.BufferReader(raw))
    assert index.num_row_groups == pf.metadata.num_row_groups
    assert [c.name for c in index.columns] == table.column_names
    for g in range(index.num_row_groups):
        group = pf.read_row_group(g)
        for c in range(len(index.columns)):
            pages = index.pages(g, c)
            assert pages.num_rows == group.num_rows
            assert pages.first_rows[0] == 0
            for p in range(len(pages)):
                page = read_page(index, read_range, g, c, p)
                assert (page.first_row, page.rows) == pages.rows(p)
                want = group.column(c).slice(page.first_row, page.rows).combine_chunks()
                assert page.values.type == want.type
                assert _plain(page.values).equals(_plain(want)), (g, c, p)
                if pages.mins is not None and not pa.types.is_dictionary(want.type):
                    low, high = pc.min_max(want).values()
                    assert (pages.mins[p], pages.maxs[p]) == (_model(low), _model(high))
        # the pages of every column holding one row, read together where they can be
        row = data.draw(st.integers(0, group.num_rows - 1))
        columns = data.draw(st.permutations(range(len(index.columns))))
        for c, page in zip(columns, read_pages(index, read_range, g, columns, row), strict=True):
            assert page.first_row <= row < page.first_row + page.rows
            assert _plain(page.values).equals(
                _plain(group.column(c).slice(page.first_row, page.rows).combine_chunks()))


@given(parquet_files(), st.data())
@settings(max_examples=15, deadline=None)
def test_a_sorted_key_bisects_to_the_pages_that_hold_it(file: tuple[bytes, pa.Table],
                                                        data: st.DataObject) -> None:
    raw, table = file
    index = load_page_index(_ranges(raw)[0], len(raw), "f.parquet")
    assert index is not None
    pf = pq.ParquetFile(pa.BufferReader(raw))
    g = data.draw(st.integers(0, index.num_row_groups - 1))
    keys = pf.read_row_group(g, columns=["key"]).column(0)
    pages = index.pages(g, 0)
    assert pages.ascending and pages.mins is not None and pages.maxs is not None
    for row in data.draw(st.lists(st.integers(0, keys.length() - 1), min_size=1, max_size=5)):
        key = key_value(keys[row])
        holding = pages.pages_holding(key)
        assert pages.page_of_row(row) in holding
        first = pages.rows(holding[0])[0]
        last = sum(pages.rows(holding[-1]))
        on_first = pc.sum(pc.equal(keys, keys[row])).as_py()
        assert on_first == pc.sum(pc.equal(keys.slice(first, last - first), keys[row])).as_py()
    low, high = pages.mins[0], pages.maxs[-1]
    if isinstance(low, int):  # a key below, above and between every page: no page holds it
        assert list(pages.pages_holding(low - 1)) == [] == list(pages.pages_holding(high + 1))


def _file(**options: Any) -> bytes:
    rng = np.random.default_rng(7)
    n = 5000
    table = pa.table({"key": pa.array(np.arange(n) * 3),
                      "word": pa.array([f"w{v}" for v in rng.integers(0, 30, n)]),
                      "value": pa.array(rng.random(n))})
    sink = io.BytesIO()
    pq.write_table(table, sink, **{"row_group_size": 2500, "max_rows_per_page": 300,
                                   "use_dictionary": ["word"], "write_page_index": True,
                                   "write_page_checksum": True, **options})
    return sink.getvalue()


def test_a_page_read_reads_that_page_and_its_dictionary_alone() -> None:
    raw = _file()
    read_range, calls = _ranges(raw)
    length = int.from_bytes(raw[-8:-4], "little")
    index = load_page_index(read_range, len(raw), "f.parquet")
    assert index is not None
    assert calls[0] == (len(raw) - TAIL_GUESS, len(raw)) and len(calls) == 2  # tail, index
    start, end = calls[1]
    assert end <= len(raw) - length - 8 and end - start < 2000  # the page index alone
    calls.clear()
    index = load_page_index(read_range, len(raw), "f.parquet", tail=raw[-length - 8:])
    assert index is not None and calls == [(start, end)]  # given the tail: the index alone
    md = pq.ParquetFile(pa.BufferReader(raw)).metadata
    for c in range(3):
        chunk = md.row_group(1).column(c)
        pages = index.pages(1, c)
        assert len(pages) > 3
        calls.clear()
        p = len(pages) - 2
        read_page(index, read_range, 1, c, p)
        page = (int(pages.offsets[p]), int(pages.offsets[p] + pages.sizes[p]))
        assert calls == page_ranges(index, 1, c, p)
        if c == 1:  # dictionary-encoded: its dictionary page, then the page
            assert pages.dictionary is not None
            assert calls == [(chunk.dictionary_page_offset, int(pages.offsets[0])), page]
        else:
            assert pages.dictionary is None and calls == [page]
        read = sum(e - s for s, e in calls)
        assert read < chunk.total_compressed_size / 3


def test_a_damaged_page_raises_what_verified_reads_turn_into_corrupt_data() -> None:
    raw = bytearray(_file(compression="none"))
    read_range, _ = _ranges(bytes(raw))
    index = load_page_index(read_range, len(raw), "f.parquet")
    assert index is not None
    for c, damage in ((2, "page"), (1, "dictionary")):
        pages = index.pages(0, c)
        at = int(pages.offsets[1] + pages.sizes[1]) - 3 if damage == "page" else \
            pages.dictionary[0] + pages.dictionary[1] - 3  # type: ignore[index]
        broken = bytearray(raw)
        broken[at] ^= 0xFF
        read_broken, _ = _ranges(bytes(broken))
        with pytest.raises(OSError, match=CRC_FAILURE) as e:
            read_page(index, read_broken, 0, c, 1)
        assert page_damage(e.value)
        with pytest.raises(CorruptDataError, match="f.parquet"):
            reading("t", "f.parquet", "memory",
                    lambda _attempt, c=c, read=read_broken: read_page(index, read, 0, c, 1))
        read_page(index, read_range, 0, c, 1)  # the other pages still read


def test_a_file_ending_early_is_corrupt_data() -> None:
    raw = _file()
    index = load_page_index(_ranges(raw)[0], len(raw), "f.parquet")
    assert index is not None
    with pytest.raises(CorruptDataError, match="f.parquet ends before byte"):
        read_page(index, lambda s, e: raw[s:e - 1], 0, 0, 0)


def test_a_footer_or_index_that_does_not_decode_is_corrupt_metadata() -> None:
    raw = _file()
    length = int.from_bytes(raw[-8:-4], "little")
    garbage = raw[:-length - 8] + b"\x1e" * length + raw[-8:]
    with pytest.raises(CorruptMetadataError, match="footer of data file f.parquet"):
        load_page_index(_ranges(garbage)[0], len(raw), "f.parquet")
    with pytest.raises(CorruptMetadataError, match="no Parquet footer"):
        load_page_index(_ranges(raw[:-1] + b"X")[0], len(raw), "f.parquet")
    index = load_page_index(_ranges(raw)[0], len(raw), "f.parquet")
    assert isinstance(index, PageIndex)
    start = index._index_start
    broken = raw[:start] + b"\x1e" * len(index._index) + raw[start + len(index._index):]
    damaged = load_page_index(_ranges(broken)[0], len(raw), "f.parquet")
    assert damaged is not None
    with pytest.raises(CorruptMetadataError, match="page index of data file f.parquet"):
        damaged.pages(0, 0)


@given(parquet_files())
@settings(max_examples=15, deadline=None)
def test_the_offset_index_loop_reads_what_the_generic_decoder_reads(
        file: tuple[bytes, pa.Table]) -> None:
    raw, _ = file
    index = load_page_index(_ranges(raw)[0], len(raw), "f.parquet")
    assert index is not None
    for g in range(index.num_row_groups):
        for c in range(len(index.columns)):
            chunk = index._chunks[g, c]
            located = index._slice(int(chunk[3]), int(chunk[4]))
            generic = tc.decode_struct(located)[0]
            want = [(p[1][1], p[2][1], p[3][1]) for p in generic[1][1].items]
            assert page_locations(located) == want
            pages = index.pages(g, c)
            assert list(zip(pages.offsets.tolist(), pages.sizes.tolist(),
                            pages.first_rows.tolist(), strict=True)) == want


def test_an_offset_index_of_another_layout_is_read_by_the_generic_decoder() -> None:
    # a PageLocation with a field the loop does not know, and one written long-form
    places = tc.TList(tc.STRUCT, [{1: (tc.I64, 4), 2: (tc.I32, 100), 3: (tc.I64, 0),
                                   9: (tc.I32, 7)}])
    assert page_locations(tc.encode({1: (tc.LIST, places)})) is None
    plain = tc.encode({1: (tc.LIST, tc.TList(tc.STRUCT, [
        {1: (tc.I64, 4), 2: (tc.I32, 100), 3: (tc.I64, 0)},
        {1: (tc.I64, 104), 2: (tc.I32, 50), 3: (tc.I64, 1 << 40)}]))})
    assert page_locations(plain) == [(4, 100, 0), (104, 50, 1 << 40)]
    assert page_locations(plain[:-3]) is None  # cut short
    assert page_locations(b"") is None


def test_a_damaged_column_index_is_corrupt_metadata_when_its_bounds_are_read() -> None:
    raw = _file()
    index = load_page_index(_ranges(raw)[0], len(raw), "f.parquet")
    assert index is not None
    chunk = index._chunks[0, 0]
    start, length = int(chunk[5]), int(chunk[6])
    broken = raw[:start] + b"\x1e" * length + raw[start + length:]
    damaged = load_page_index(_ranges(broken)[0], len(raw), "f.parquet")
    assert damaged is not None
    pages = damaged.pages(0, 0)  # the offset index alone: every page still found
    assert len(pages) == len(index.pages(0, 0))
    with pytest.raises(CorruptMetadataError, match="page index of data file f.parquet"):
        pages.pages_holding(3)
    assert damaged.pages(0, 1).mins == index.pages(0, 1).mins  # other chunks unharmed


@pytest.mark.parametrize("table, options", [
    (pa.table({"k": [1, 2, 3]}), {}),  # no page index
    (pa.table({"k": [1, 2], "s": [{"a": 1}, {"a": 2}]}), {"write_page_index": True}),
    (pa.table({"k": [1, 2], "l": [[1], [2, 3]]}), {"write_page_index": True}),
], ids=["no-page-index", "struct", "list"])
def test_files_without_a_page_index_or_with_nested_columns_have_none(
        table: pa.Table, options: dict[str, Any]) -> None:
    sink = io.BytesIO()
    pq.write_table(table, sink, **options)
    raw = sink.getvalue()
    assert load_page_index(_ranges(raw)[0], len(raw), "f.parquet") is None


def test_data_files_are_written_with_a_page_index() -> None:
    schema = benchmark_schema()
    rows = 3000
    arrow = schema.to_arrow()
    table = pa.table({
        "key": pa.array([f"k{i:06d}" for i in range(rows)]),
        "timestamp": pa.array(np.arange(rows, dtype=np.int64)),
        "value": pa.array(["v"] * rows),
        "nullable_value": pa.array([None] * rows, pa.string()),
    }).cast(arrow)
    sink = io.BytesIO()
    pq.write_table(table, sink, row_group_size=1000, **writer_options(schema, defaults()))
    raw = sink.getvalue()
    index = load_page_index(_ranges(raw)[0], len(raw), "f.parquet")
    assert index is not None and index.pages(2, 0).mins == ("k002000",)
