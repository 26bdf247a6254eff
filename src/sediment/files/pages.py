"""Page-sized reads of a data file: its Parquet page index, and one data page decoded by
pyarrow, so a lookup that knows its row group decodes a page per column, not the row group.

pyarrow writes the page index (``write_page_index``: per column chunk an OffsetIndex, each
page's offset, size and first row, and a ColumnIndex, each page's min and max) but cannot
read it from Python. :func:`load_page_index` parses the footer and the index with
:mod:`sediment.files.thrift_compact` into a :class:`PageIndex` (one per file, immutable, for
the caller to cache); :meth:`ColumnPages.pages_holding` bisects a sorted column's pages for a
value and :meth:`ColumnPages.page_of_row` finds the page of a row. :func:`read_page` reads
one page (and its chunk's dictionary page) and decodes it as a one-page Parquet file: ``PAR1``,
the page bytes, a footer describing that page alone, so every encoding, codec, null layout
and page CRC (``verified.VERIFY``) stays pyarrow's own. Measured (pyarrow 26, zstd): building
and opening the one-page file costs ~40 us; the rest is the page's decode, in proportion to
its rows.

All I/O goes through the caller's ``read_range(start, end) -> bytes`` (a local file, an
object store, a counting wrapper). A file written without a page index, or with a nested or
repeated column, has no PageIndex (None): its callers read whole row groups. A footer or index
that does not decode raises CorruptMetadataError naming the file; a damaged page raises
pyarrow's own error, which ``verified.reading`` turns into CorruptDataError.
"""

from __future__ import annotations

import base64
import bisect
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from sediment.errors import CorruptDataError, CorruptMetadataError
from sediment.files import thrift_compact as tc
from sediment.files.page_values import value_decoder
from sediment.files.thrift_compact import (
    BINARY,
    I32,
    I64,
    LIST,
    STRUCT,
    Struct,
    ThriftError,
    TList,
)
from sediment.files.verified import VERIFY

ReadRange = Callable[[int, int], "bytes | bytearray | memoryview"]
"""``read_range(start, end)``: bytes ``[start, end)`` of the file (any bytes-like object)."""

MAGIC = b"PAR1"
TAIL_GUESS = 64 * 1024
"""Bytes read from a file's end when the caller hands no tail: a Sediment footer fits."""

# parquet.thrift field ids (apache/parquet-format src/main/thrift/parquet.thrift)
_FMD_VERSION, _FMD_SCHEMA, _FMD_ROWS, _FMD_GROUPS, _FMD_KV, _FMD_BY, _FMD_ORDERS, _FMD_CRYPT = \
    range(1, 9)
_SE_TYPE, _SE_REPETITION, _SE_NAME, _SE_CHILDREN = 1, 3, 4, 5
_REPEATED = 2
_RG_COLUMNS, _RG_BYTES, _RG_ROWS = 1, 2, 3
(_CC_PATH, _CC_FILE_OFFSET, _CC_META, _CC_OI_OFF, _CC_OI_LEN, _CC_CI_OFF, _CC_CI_LEN,
 _CC_CRYPT) = range(1, 9)
_CM_TYPE, _CM_ENCODINGS, _CM_PATH, _CM_CODEC, _CM_VALUES, _CM_USIZE, _CM_CSIZE = range(1, 8)
_CM_DATA, _CM_DICT, _CM_ENCODING_STATS = 9, 11, 13
_CM_KEPT = (_CM_TYPE, _CM_ENCODINGS, _CM_PATH, _CM_CODEC)
"""ColumnMetaData fields a one-page file keeps (with the encoding stats); statistics, bloom
filter, size statistics and the page index describe the whole chunk and are dropped."""
_OI_PAGES = 1
_PL_OFFSET, _PL_SIZE, _PL_FIRST = 1, 2, 3
_CI_NULL_PAGES, _CI_MINS, _CI_MAXS, _CI_ORDER = 1, 2, 3, 4
_ASCENDING = 1
_ARROW_SCHEMA = b"ARROW:schema"

# a chunk's numbers in PageIndex._chunks: [template, dictionary offset (-1: none), data page
# offset, offset index offset, length, column index offset, length (-1: none)]
_T, _DICT, _DATA, _OI, _OI_LEN, _CI, _CI_LEN = range(7)


def _field(s: Struct, fid: int, t: int, default: Any = ThriftError) -> Any:
    """Field ``fid`` of a decoded struct, checked to be of type ``t``; ``default`` when absent
    (a missing required field is damage)."""
    got = s.get(fid)
    if got is None:
        if default is ThriftError:
            raise ThriftError(f"field {fid} is missing")
        return default
    if got[0] != t:
        raise ThriftError(f"field {fid} has type {got[0]} where {t} is expected")
    return got[1]


def _structs(s: Struct, fid: int) -> list[Struct]:
    items = _field(s, fid, LIST).items
    if items and not isinstance(items[0], dict):
        raise ThriftError(f"field {fid} is not a list of structs")
    return items


@dataclass(frozen=True, slots=True)
class LeafColumn:
    """One column of a flat file: its place, name and what decodes its min/max values."""

    index: int
    name: str
    element: bytes = field(repr=False)
    """Its SchemaElement, encoded, for a one-page file's schema."""
    order: bytes | None = field(repr=False)
    """Its ColumnOrder, encoded, when the file has them."""
    value: Callable[[bytes], Any] = field(repr=False)
    """Decodes a ColumnIndex min or max (plain encoding) to the model's value."""


@dataclass(frozen=True, slots=True)
class Page:
    """A decoded data page: its values and the rows of its row group it holds."""

    values: pa.Array
    first_row: int
    rows: int


@dataclass(frozen=True, slots=True, eq=False)
class ColumnPages:
    """The pages of one column chunk (one row group, one column), from the page index."""

    row_group: int
    column: int
    num_rows: int
    """Rows of the row group."""
    offsets: np.ndarray
    """File offset of each data page (its header first), int64."""
    sizes: np.ndarray
    """Bytes of each data page, header included, int64."""
    first_rows: np.ndarray
    """First row (of the row group) of each page, int64, ascending from 0."""
    dictionary: tuple[int, int] | None
    """(offset, bytes) of the chunk's dictionary page, when it has one."""
    mins: tuple[Any, ...] | None
    """Each page's minimum in the model's form (ints for temporal values, ``str`` for
    strings, ``bytes`` for binaries; None for an all-null page); None when the chunk has no
    column index (pyarrow drops it for values past its statistics size limit)."""
    maxs: tuple[Any, ...] | None
    ascending: bool
    """Whether the column index says the pages' bounds ascend (a sorted column)."""

    def __len__(self) -> int:
        return len(self.offsets)

    def rows(self, page: int) -> tuple[int, int]:
        """(first row, rows) of the row group that ``page`` holds."""
        first = int(self.first_rows[page])
        end = int(self.first_rows[page + 1]) if page + 1 < len(self) else self.num_rows
        return first, end - first

    def page_of_row(self, row: int) -> int:
        """The page holding ``row`` of the row group (bisecting the first rows)."""
        if not 0 <= row < self.num_rows:
            raise IndexError(f"row {row} of a row group of {self.num_rows} rows")
        return int(np.searchsorted(self.first_rows, row, side="right")) - 1

    def pages_holding(self, value: Any) -> Sequence[int]:
        """The pages whose [min, max] may hold ``value`` (in the model's form): for a sorted
        column a run found by bisection (empty when the value falls between two pages), for
        an unsorted one each page that bounds it; every page when the bounds are unknown."""
        mins, maxs = self.mins, self.maxs
        if mins is None or maxs is None or None in mins or None in maxs:
            return range(len(self))
        if self.ascending:
            a = bisect.bisect_left(maxs, value)
            return range(a, max(a, bisect.bisect_right(mins, value)))
        return [p for p, (lo, hi) in enumerate(zip(mins, maxs, strict=True)) if lo <= value <= hi]


class _Template(NamedTuple):
    """The constant pieces of a chunk's ColumnMetaData in a one-page file: fields 1-4 (type,
    encodings, path, codec), then its encoding stats as they follow field 9 or 11 (empty
    when it has none)."""

    head: bytes
    after_data: bytes
    after_dictionary: bytes


FRAMES_MEMO = 64
"""Column sets whose one-page footer pieces a PageIndex keeps (a table's lookups ask for a
few projections; others are encoded each time, some 30 us)."""


@dataclass(frozen=True, slots=True, eq=False)
class PageIndex:
    """A file's page index: its columns, row groups, where each column chunk's pages lie and
    their bounds. Built by :func:`load_page_index`; a chunk's pages are parsed when first
    asked (:meth:`pages`) from the index bytes read at load, so no further I/O is needed."""

    filename: str
    size: int
    columns: tuple[LeafColumn, ...]
    row_group_rows: tuple[int, ...]
    _top: Struct = field(repr=False)
    """FileMetaData's version, root schema element and created_by, for one-page files."""
    _arrow: tuple[pa.Field, ...] | None = field(repr=False)
    """The file's stored Arrow schema, so pages read as the file's types."""
    _templates: tuple[_Template, ...] = field(repr=False)
    _chunks: np.ndarray = field(repr=False)
    """int64 [row group, column, 7]: template, dictionary, data page and index places."""
    _index: bytes = field(repr=False)
    _index_start: int = field(repr=False)
    _parsed: dict[tuple[int, int], ColumnPages] = field(default_factory=dict, repr=False)
    _frames: dict[tuple[int, ...], tuple[bytes, bytes]] = field(default_factory=dict,
                                                              repr=False)

    @property
    def num_row_groups(self) -> int:
        return len(self.row_group_rows)

    @property
    def nbytes(self) -> int:
        """About what this object holds in memory (for a cache bounded in bytes)."""
        parsed = sum(p.offsets.nbytes * 3 + 64 * len(p) + 200 for p in self._parsed.values())
        return len(self._index) + self._chunks.nbytes + 1024 * len(self.columns) + parsed

    def column(self, name: str) -> int:
        """The index of the column named ``name``."""
        for c in self.columns:
            if c.name == name:
                return c.index
        raise KeyError(f"no column {name!r} in data file {self.filename}")

    def pages(self, row_group: int, column: int) -> ColumnPages:
        """The pages of one column chunk."""
        key = (row_group, column)
        got = self._parsed.get(key)
        if got is None:  # two threads may both parse: the same value, one kept
            got = self._parsed.setdefault(key, self._parse(row_group, column))
        return got

    def _slice(self, start: int, length: int) -> bytes:
        at = start - self._index_start
        return self._index[at:at + length]

    def _parse(self, g: int, c: int) -> ColumnPages:
        chunk = self._chunks[g, c]
        try:
            oi = tc.decode_struct(self._slice(int(chunk[_OI]), int(chunk[_OI_LEN])),
                                  until=_OI_PAGES)[0]
            places = [(_field(p, _PL_OFFSET, I64), _field(p, _PL_SIZE, I32),
                       _field(p, _PL_FIRST, I64)) for p in _structs(oi, _OI_PAGES)]
            mins = maxs = None
            ascending = False
            if chunk[_CI] >= 0:
                ci = tc.decode_struct(self._slice(int(chunk[_CI]), int(chunk[_CI_LEN])),
                                      until=_CI_ORDER)[0]
                nulls = _field(ci, _CI_NULL_PAGES, LIST).items
                lows = _field(ci, _CI_MINS, LIST).items
                highs = _field(ci, _CI_MAXS, LIST).items
                ascending = _field(ci, _CI_ORDER, I32) == _ASCENDING
                if not len(nulls) == len(lows) == len(highs) == len(places):
                    raise ThriftError("column index and offset index count different pages")
                value = self.columns[c].value
                mins = tuple(None if n else value(v) for n, v in zip(nulls, lows, strict=True))
                maxs = tuple(None if n else value(v) for n, v in zip(nulls, highs, strict=True))
        except (ThriftError, TypeError, ValueError, struct.error) as e:
            raise CorruptMetadataError(f"the page index of data file {self.filename} "
                                       f"(row group {g}, column {c}) does not decode: {e}"
                                       ) from e
        rows = self.row_group_rows[g]
        end = self.size - 8 - len(MAGIC)  # where the footer starts
        # a few pages a chunk: checked in Python, faster than numpy on arrays this small
        if not places or places[0][2] != 0 or places[-1][2] >= max(rows, 1) or \
                any(a[2] >= b[2] for a, b in pairwise(places)) or \
                any(size <= 0 or at < len(MAGIC) or at + size > end for at, size, _ in places):
            raise CorruptMetadataError(f"the page index of data file {self.filename} (row "
                                       f"group {g}, column {c}) places pages outside the file "
                                       "or rows out of order")
        table = np.array(places, dtype=np.int64)
        offsets, sizes, first = table[:, 0], table[:, 1], table[:, 2]
        d = int(chunk[_DICT])
        dictionary = (d, places[0][0] - d) if 0 <= d < places[0][0] else None
        return ColumnPages(g, c, rows, offsets, sizes, first, dictionary, mins, maxs, ascending)

    def tiny_footer(self, g: int, parts: Sequence[tuple[int, int, int]], rows: int) -> bytes:
        """The footer of a one-row-group file of ``rows`` rows whose column chunks are
        ``parts``, (column, dictionary page bytes (0: none), data page bytes) of row group
        ``g``, laid one after the other from the leading magic on."""
        at = len(MAGIC)
        chunks = []
        for c, dictionary, page in parts:
            t = self._templates[int(self._chunks[g, c, _T])]
            total = dictionary + page
            sizes: Struct = {_CM_VALUES: (I64, rows),  # a flat column: one value per row
                             _CM_USIZE: (I64, total), _CM_CSIZE: (I64, total),
                             _CM_DATA: (I64, at + dictionary)}
            if dictionary:
                sizes[_CM_DICT] = (I64, at)
            meta = b"".join((t.head, tc.encode_fields(sizes, after=_CM_CODEC),
                             t.after_dictionary if dictionary else t.after_data, tc.END))
            chunks.append({_CC_FILE_OFFSET: (I64, at), _CC_META: (STRUCT, meta)})
            at += total
        head, tail = self._frame(tuple(c for c, _, _ in parts))
        group: Struct = {_RG_COLUMNS: (LIST, TList(STRUCT, chunks)),
                         _RG_BYTES: (I64, at - len(MAGIC)), _RG_ROWS: (I64, rows)}
        return b"".join((head, tc.encode_fields({_FMD_ROWS: (I64, rows), _FMD_GROUPS: (
            LIST, TList(STRUCT, [group]))}, after=_FMD_SCHEMA), tail))

    def _frame(self, columns: tuple[int, ...]) -> tuple[bytes, bytes]:
        """The constant pieces of a one-page file's FileMetaData for ``columns``: its fields
        before the row count (version, schema) and after the row groups (the Arrow schema,
        created_by, column orders, the struct's end)."""
        got = self._frames.get(columns)
        if got is not None:
            return got
        leaves = [self.columns[c] for c in columns]
        top = self._top
        root = dict(top[_FMD_SCHEMA][1])
        root[_SE_CHILDREN] = (I32, len(leaves))
        after: Struct = {}
        if self._arrow is not None:
            arrow = pa.schema([self._arrow[c] for c in columns]).serialize().to_pybytes()
            after[_FMD_KV] = (LIST, TList(STRUCT, [{1: (BINARY, _ARROW_SCHEMA),
                                                    2: (BINARY, base64.b64encode(arrow))}]))
        if _FMD_BY in top:  # readers work around known writers' bugs by it: keep it
            after[_FMD_BY] = top[_FMD_BY]
        if all(f.order is not None for f in leaves):
            after[_FMD_ORDERS] = (LIST, TList(STRUCT, [f.order for f in leaves]))
        got = (tc.encode_fields({
            _FMD_VERSION: top[_FMD_VERSION],
            _FMD_SCHEMA: (LIST, TList(STRUCT, [root, *(f.element for f in leaves)]))}),
            tc.encode_fields(after, after=_FMD_GROUPS) + tc.END)
        if len(self._frames) < FRAMES_MEMO:
            self._frames[columns] = got
        return got


def _read(read_range: ReadRange, start: int, end: int, filename: str
          ) -> bytes | bytearray | memoryview:
    got = read_range(start, end)
    if len(got) != end - start:
        raise CorruptDataError(f"data file {filename} ends before byte {end} its footer points "
                               f"to ({len(got)} bytes at {start} where {end - start} were asked)",
                               key=filename)
    return got


def load_page_index(read_range: ReadRange, size: int, filename: str, *,
                    tail: bytes | None = None) -> PageIndex | None:
    """The page index of the ``size``-byte data file ``filename``, or None when it has none
    (written without ``write_page_index``) or has a nested, repeated or encrypted column.

    ``tail`` is the file's last bytes when the caller has them (a footer cache reads them
    to check the footer): else they are read. The index bytes of every column chunk lie
    together before the footer and are read in one range; they are parsed lazily.
    """
    if tail is None:
        tail = bytes(_read(read_range, max(0, size - TAIL_GUESS), size, filename))
    if len(tail) < 8 or tail[-4:] != MAGIC or size < 12:
        raise CorruptMetadataError(f"data file {filename} has no Parquet footer")
    length = int.from_bytes(tail[-8:-4], "little")
    if length + 12 > size:
        raise CorruptMetadataError(f"data file {filename}: a footer of {length} bytes in a "
                                   f"file of {size}")
    if length + 8 > len(tail):
        tail = bytes(_read(read_range, size - length - 8, size, filename))
    try:
        md = tc.decode(tail[len(tail) - length - 8:len(tail) - 8])
        layout = _layout(md, filename)
    except (ThriftError, TypeError, ValueError) as e:
        raise CorruptMetadataError(f"the footer of data file {filename} does not decode: {e}"
                                   ) from e
    if layout is None:
        return None
    flat = layout.chunks.reshape(-1, 7)
    places = [(int(c[_OI]), int(c[_OI_LEN])) for c in flat] + \
        [(int(c[_CI]), int(c[_CI_LEN])) for c in flat if c[_CI] >= 0]
    start = min((p for p, _ in places), default=0)
    end = max((p + n for p, n in places), default=0)
    if start < len(MAGIC) and places or end > size - length - 8 or \
            any(n <= 0 for _, n in places):
        raise CorruptMetadataError(f"the footer of data file {filename} places its page index "
                                   "outside the file")
    index = bytes(_read(read_range, start, end, filename)) if places else b""
    return PageIndex(filename, size, layout.columns, layout.rows, layout.top, layout.arrow,
                     layout.templates, layout.chunks, index, start)


class _Layout(NamedTuple):
    columns: tuple[LeafColumn, ...]
    rows: tuple[int, ...]
    top: Struct
    arrow: tuple[pa.Field, ...] | None
    templates: tuple[_Template, ...]
    chunks: np.ndarray


def _layout(md: Struct, filename: str) -> _Layout | None:
    """What a PageIndex holds of a decoded FileMetaData; None for a file it cannot serve."""
    if _FMD_CRYPT in md:
        return None
    schema = _structs(md, _FMD_SCHEMA)
    if not schema:
        raise ThriftError("no schema")
    leaves = schema[1:]
    if _field(schema[0], _SE_CHILDREN, I32, 0) != len(leaves) or any(
            _SE_CHILDREN in e or _SE_TYPE not in e or
            _field(e, _SE_REPETITION, I32, 0) == _REPEATED for e in leaves):
        return None  # nested or repeated: a page's values are not one per row
    arrow = _arrow_fields(md, filename)
    if arrow is not None and len(arrow) != len(leaves):
        return None
    orders = _structs(md, _FMD_ORDERS) if _FMD_ORDERS in md else []
    columns = tuple(
        LeafColumn(i, _field(e, _SE_NAME, BINARY).decode("utf-8", "replace"), tc.encode(e),
                   tc.encode(orders[i]) if i < len(orders) else None, value_decoder(e))
        for i, e in enumerate(leaves))
    groups = _structs(md, _FMD_GROUPS)
    templates: dict[_Template, int] = {}
    chunks = np.full((len(groups), len(leaves), 7), -1, dtype=np.int64)
    rows = []
    for g, group in enumerate(groups):
        rows.append(_field(group, _RG_ROWS, I64))
        ccs = _structs(group, _RG_COLUMNS)
        if len(ccs) != len(leaves):
            raise ThriftError(f"row group {g} has {len(ccs)} columns where the schema has "
                              f"{len(leaves)}")
        for c, cc in enumerate(ccs):
            if _CC_OI_OFF not in cc or _CC_PATH in cc or _CC_CRYPT in cc or _CC_META not in cc:
                return None  # no offset index, another file's chunk, or encrypted
            meta = _field(cc, _CC_META, STRUCT)
            chunk = chunks[g, c]
            chunk[_T] = templates.setdefault(_template(meta), len(templates))
            chunk[_DATA] = _field(meta, _CM_DATA, I64)
            dictionary = _field(meta, _CM_DICT, I64, -1)
            if dictionary < len(MAGIC):  # none (some writers write 0 for none) ...
                dictionary = chunk[_DATA]  # ... or where legacy writers put it: see _parse
            chunk[_DICT] = dictionary
            chunk[_OI] = _field(cc, _CC_OI_OFF, I64)
            chunk[_OI_LEN] = _field(cc, _CC_OI_LEN, I32)
            if _CC_CI_OFF in cc:
                chunk[_CI] = _field(cc, _CC_CI_OFF, I64)
                chunk[_CI_LEN] = _field(cc, _CC_CI_LEN, I32)
    top: Struct = {_FMD_VERSION: md[_FMD_VERSION], _FMD_SCHEMA: (STRUCT, schema[0])}
    if _FMD_BY in md:
        top[_FMD_BY] = md[_FMD_BY]
    return _Layout(columns, tuple(rows), top, arrow, tuple(templates), chunks)


def _template(meta: Struct) -> _Template:
    head: Struct = {}
    for k in _CM_KEPT:
        _field(meta, k, LIST if k in (_CM_ENCODINGS, _CM_PATH) else I32)
        head[k] = meta[k]
    stats = {k: meta[k] for k in (_CM_ENCODING_STATS,) if k in meta}
    return _Template(tc.encode_fields(head), tc.encode_fields(stats, after=_CM_DATA),
                     tc.encode_fields(stats, after=_CM_DICT))


def _arrow_fields(md: Struct, filename: str) -> tuple[pa.Field, ...] | None:
    """The fields of the file's stored Arrow schema (None when it has none)."""
    for kv in _structs(md, _FMD_KV) if _FMD_KV in md else []:
        if _field(kv, 1, BINARY) == _ARROW_SCHEMA and 2 in kv:
            try:
                return tuple(pa.ipc.read_schema(pa.py_buffer(
                    base64.b64decode(_field(kv, 2, BINARY)))))
            except (ValueError, pa.ArrowException) as e:
                raise CorruptMetadataError(f"the Arrow schema in data file {filename}'s footer "
                                           f"does not decode: {e}") from e
    return None


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
    order of ``members`` (ascending columns: a file's order)."""
    pieces: list[bytes | bytearray | memoryview] = [MAGIC]
    parts = []
    for c, p in members:
        pieces.extend(_read(read_range, s, e, index.filename)
                      for s, e in page_ranges(index, g, c, p))
        pages = index.pages(g, c)
        parts.append((c, 0 if pages.dictionary is None else pages.dictionary[1],
                      int(pages.sizes[p])))
    footer = index.tiny_footer(g, parts, rows)
    data = b"".join((*pieces, footer, len(footer).to_bytes(4, "little"), MAGIC))
    table = pq.ParquetFile(pa.BufferReader(data), **VERIFY).read_row_group(0, use_threads=False)
    return [col.chunk(0) if col.num_chunks == 1 else col.combine_chunks()
            for col in table.columns]
