"""Page-sized reads of a data file: its Parquet page index, and one data page decoded by
pyarrow, so a lookup that knows its row group decodes a page per column, not the row group.

pyarrow writes the page index (``write_page_index``: per column chunk an OffsetIndex, each
page's offset, size and first row, and a ColumnIndex, each page's min and max) but cannot
read it from Python. :func:`load_page_index` parses the footer and the index with
:mod:`sediment.files.thrift_compact` into a :class:`PageIndex` (one per file, immutable, for
the caller to cache); :meth:`ColumnPages.pages_holding` bisects a sorted column's pages for a
value and :meth:`ColumnPages.page_of_row` finds the page of a row. :func:`read_page` reads
one page (and its chunk's dictionary page) and decodes it: straight from its bytes where
its layout is simple (:mod:`sediment.files.page_decode`: the default pages Sediment writes),
else as a one-page Parquet file: ``PAR1``, the page bytes, a footer describing that page
alone, so every encoding, codec, null layout and page CRC (``verified.VERIFY``) stays
pyarrow's own. Measured (pyarrow 26, zstd, the
benchmark schema): a one-page file decodes as fast as pyarrow's own read of the same rows
from the whole file; encoding its footer and opening it add some 0.05-0.1 ms. So a page read
pays off when pages hold fewer rows than row groups; pages of several columns cut at the
same rows (``max_rows_per_page``) are read as one file (:func:`read_pages`), one open for all.

All I/O goes through the caller's ``read_range(start, end) -> bytes`` (a local file, an
object store, a counting wrapper). A file written without a page index, or with a nested or
repeated column, has no PageIndex (None): its callers read whole row groups. A footer or index
that does not decode raises CorruptMetadataError naming the file; a damaged page raises
pyarrow's own error, which ``verified.reading`` turns into CorruptDataError.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq

from sediment.files import thrift_compact as tc
from sediment.files.page_decode import decode_page, direct_column
from sediment.files.page_index import (
    TAIL_GUESS,
    ColumnPages,
    LeafColumn,
    PageIndex,
    ReadRange,
    load_page_index,
    read_exactly,
)
from sediment.files.parquet_meta import (
    ARROW_SCHEMA,
    CC_FILE_OFFSET,
    CC_META,
    CM_CODEC,
    CM_CSIZE,
    CM_DATA,
    CM_DICT,
    CM_USIZE,
    CM_VALUES,
    FMD_BY,
    FMD_GROUPS,
    FMD_KV,
    FMD_ORDERS,
    FMD_ROWS,
    FMD_SCHEMA,
    FMD_VERSION,
    MAGIC,
    RG_BYTES,
    RG_COLUMNS,
    RG_ROWS,
    SE_CHILDREN,
)
from sediment.files.thrift_compact import BINARY, I32, I64, LIST, STRUCT, Struct, TList
from sediment.files.verified import VERIFY
from sediment.storage import checksums

__all__ = ["TAIL_GUESS", "ColumnPages", "LeafColumn", "Page", "PageIndex", "ReadRange",
           "load_page_index", "page_ranges", "read_page", "read_pages"]


@dataclass(frozen=True, slots=True)
class Page:
    """A decoded data page: its values and the rows of its row group it holds."""

    values: pa.Array
    first_row: int
    rows: int


FRAMES_MEMO = 64
"""Column sets whose one-page footer pieces a PageIndex keeps (a table's lookups ask for a
few projections; others are encoded each time, some 30 us)."""


def tiny_footer(index: PageIndex, g: int, parts: Sequence[tuple[int, int, int]],
                rows: int) -> bytes:
    """The footer of a one-row-group file of ``rows`` rows whose column chunks are
    ``parts``, (column, dictionary page bytes (0: none), data page bytes) of row group
    ``g``, laid one after the other from the leading magic on."""
    at = len(MAGIC)
    chunks = []
    for c, dictionary, page in parts:
        t = index.template(g, c)
        total = dictionary + page
        sizes: Struct = {CM_VALUES: (I64, rows),  # a flat column: one value per row
                         CM_USIZE: (I64, total), CM_CSIZE: (I64, total),
                         CM_DATA: (I64, at + dictionary)}
        if dictionary:
            sizes[CM_DICT] = (I64, at)
        meta = b"".join((t.head, tc.encode_fields(sizes, after=CM_CODEC),
                         t.after_dictionary if dictionary else t.after_data, tc.END))
        chunks.append({CC_FILE_OFFSET: (I64, at), CC_META: (STRUCT, meta)})
        at += total
    head, tail = _frame(index, tuple(c for c, _, _ in parts))
    group: Struct = {RG_COLUMNS: (LIST, TList(STRUCT, chunks)),
                     RG_BYTES: (I64, at - len(MAGIC)), RG_ROWS: (I64, rows)}
    return b"".join((head, tc.encode_fields({FMD_ROWS: (I64, rows), FMD_GROUPS: (
        LIST, TList(STRUCT, [group]))}, after=FMD_SCHEMA), tail))


def _frame(index: PageIndex, columns: tuple[int, ...]) -> tuple[bytes, bytes]:
    """The constant pieces of a one-page file's FileMetaData for ``columns``: its fields
    before the row count (version, schema) and after the row groups (the Arrow schema,
    created_by, column orders, the struct's end)."""
    got = index.frames.get(columns)
    if got is not None:
        return got
    leaves = [index.columns[c] for c in columns]
    top = index.top
    root = dict(top[FMD_SCHEMA][1])
    root[SE_CHILDREN] = (I32, len(leaves))
    after: Struct = {}
    if index.arrow is not None:
        arrow = pa.schema([index.arrow[c] for c in columns]).serialize().to_pybytes()
        after[FMD_KV] = (LIST, TList(STRUCT, [{1: (BINARY, ARROW_SCHEMA),
                                                2: (BINARY, base64.b64encode(arrow))}]))
    if FMD_BY in top:  # readers work around known writers' bugs by it: keep it
        after[FMD_BY] = top[FMD_BY]
    if all(f.order is not None for f in leaves):
        after[FMD_ORDERS] = (LIST, TList(STRUCT, [f.order for f in leaves]))
    got = (tc.encode_fields({
        FMD_VERSION: top[FMD_VERSION],
        FMD_SCHEMA: (LIST, TList(STRUCT, [root, *(f.element for f in leaves)]))}),
        tc.encode_fields(after, after=FMD_GROUPS) + tc.END)
    if len(index.frames) < FRAMES_MEMO:
        index.frames[columns] = got
    return got


def page_ranges(index: PageIndex, row_group: int, column: int, page: int
                ) -> list[tuple[int, int]]:
    """The byte ranges :func:`read_page` reads for a page: its chunk's dictionary page (when
    it has one), then the page; one range when they touch."""
    pages = index.pages(row_group, column)
    start = int(pages.offsets[page])
    end = start + int(pages.sizes[page])
    if pages.dictionary is None:
        return [(start, end)]
    d, n = pages.dictionary
    return [(d, end)] if d + n == start else [(d, d + n), (start, end)]


def read_page(index: PageIndex, read_range: ReadRange, row_group: int, column: int,
              page: int) -> Page:
    """Data page ``page`` of column ``column`` in row group ``row_group``, decoded: its bytes
    (and its chunk's dictionary page) read through ``read_range``, then read by pyarrow as a
    one-page file, page CRCs verified. Raises pyarrow's error for a damaged page (for
    ``verified.reading``) and CorruptDataError when the file ends early."""
    first, rows = index.pages(row_group, column).rows(page)
    return Page(_decode(index, read_range, row_group, [(column, page)], rows)[0], first, rows)


def read_pages(index: PageIndex, read_range: ReadRange, row_group: int,
               columns: Sequence[int], row: int) -> list[Page]:
    """The page holding ``row`` (of the row group) of each of ``columns``, decoded as
    :func:`read_page` does; columns whose pages hold the same rows (pages cut at the same
    rows: ``max_rows_per_page``) are read as one file, which costs little more than one."""
    together: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for c in dict.fromkeys(columns):
        pages = index.pages(row_group, c)
        p = pages.page_of_row(row)
        together.setdefault(pages.rows(p), []).append((c, p))
    got: dict[int, Page] = {}
    for (first, rows), members in together.items():
        arrays = _decode(index, read_range, row_group, members, rows)
        got.update((c, Page(a, first, rows)) for (c, _), a in zip(members, arrays, strict=True))
    return [got[c] for c in columns]


def _decode(index: PageIndex, read_range: ReadRange, g: int, members: list[tuple[int, int]],
            rows: int) -> list[pa.Array]:
    """The values of pages (column, page) of row group ``g``, all of ``rows`` rows, in the
    order of ``members``: each straight from its bytes where it can be
    (sediment.files.page_decode), the others read by pyarrow as one one-page file."""
    got: dict[int, pa.Array] = {}
    raw: dict[int, list[bytes | bytearray | memoryview]] = {}
    for c, p in members:
        column = direct_column(index, g, c)
        if column is not None:
            raw[c] = [read_exactly(read_range, s, e, index.filename)
                      for s, e in page_ranges(index, g, c, p)]
            dictionary = index.pages(g, c).dictionary
            page: bytes | bytearray | memoryview = raw[c][-1]
            words = None
            if dictionary is not None:  # its bytes, then the page's (one range or two)
                words = raw[c][0] if len(raw[c]) == 2 else \
                    memoryview(raw[c][0])[:dictionary[1]]
                if len(raw[c]) == 1:
                    page = memoryview(raw[c][0])[dictionary[1]:]
            values = decode_page(column, page, rows, checksums.VERIFY_READS, words)
            if values is not None:
                got[c] = values
    rest = [m for m in members if m[0] not in got]
    if rest:
        got.update(zip((c for c, _ in rest),
                       _decode_file(index, read_range, g, rest, rows, raw), strict=True))
    return [got[c] for c, _ in members]


def _decode_file(index: PageIndex, read_range: ReadRange, g: int,
                 members: list[tuple[int, int]], rows: int,
                 read: dict[int, list[bytes | bytearray | memoryview]]) -> list[pa.Array]:
    """The values of pages (column, page) of row group ``g``, all of ``rows`` rows, in the
    order of ``members``, read by pyarrow as a one-page file of those columns (``read``:
    the bytes of those pages already read, by column)."""
    pieces: list[bytes | bytearray | memoryview] = [MAGIC]
    parts = []
    for c, p in members:
        if c in read:
            pieces.extend(read[c])
        else:
            pieces.extend(read_exactly(read_range, s, e, index.filename)
                          for s, e in page_ranges(index, g, c, p))
        pages = index.pages(g, c)
        parts.append((c, 0 if pages.dictionary is None else pages.dictionary[1],
                      int(pages.sizes[p])))
    footer = tiny_footer(index, g, parts, rows)
    data = b"".join((*pieces, footer, len(footer).to_bytes(4, "little"), MAGIC))
    table = pq.ParquetFile(pa.BufferReader(data), **VERIFY).read_row_group(0, use_threads=False)
    return [col.chunk(0) if col.num_chunks == 1 else col.combine_chunks()
            for col in table.columns]
