"""A data file's Parquet page index, parsed: for every row group and column the offset, size
and first row of each data page (OffsetIndex), its min and max (ColumnIndex), and where the
chunk's dictionary page lies, so a caller finds the one page holding a key or a row.

pyarrow writes the page index (``write_page_index``) but cannot read it from Python: the
footer and the index are decoded here with :mod:`sediment.files.thrift_compact`. All I/O goes
through the caller's ``read_range(start, end)``: the footer (unless the caller hands its
tail), then every chunk's index bytes in one range (they lie together before the footer);
a chunk's index is parsed when first asked. A file written without a page index, or with a
nested, repeated or encrypted column, has none (None): its callers read whole row groups.
Bytes that do not decode raise CorruptMetadataError naming the file.
"""

from __future__ import annotations

import base64
import bisect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa

from sediment.errors import CorruptDataError, CorruptMetadataError
from sediment.files import thrift_compact as tc
from sediment.files.chunk_index import Bounds, column_bounds, offset_index
from sediment.files.page_values import value_decoder
from sediment.files.parquet_meta import (
    ARROW_SCHEMA,
    CC_CI_LEN,
    CC_CI_OFF,
    CC_CRYPT,
    CC_META,
    CC_OI_LEN,
    CC_OI_OFF,
    CC_PATH,
    CM_DATA,
    CM_DICT,
    CM_TEMPLATE,
    FMD_BY,
    FMD_CRYPT,
    FMD_GROUPS,
    FMD_KV,
    FMD_ORDERS,
    FMD_SCHEMA,
    FMD_VERSION,
    MAGIC,
    REPEATED,
    RG_COLUMNS,
    RG_ROWS,
    SE_CHILDREN,
    SE_NAME,
    SE_REPETITION,
    SE_TYPE,
    Template,
    get_field,
    struct_list,
    template,
)
from sediment.files.thrift_compact import BINARY, I32, I64, STRUCT, Struct, ThriftError

ReadRange = Callable[[int, int], "bytes | bytearray | memoryview"]
"""``read_range(start, end)``: bytes ``[start, end)`` of the file (any bytes-like object)."""

TAIL_GUESS = 64 * 1024
"""Bytes read from a file's end when the caller hands no tail: a Sediment footer fits."""

# a chunk's numbers in PageIndex._chunks: [template, dictionary offset (-1: none), data page
# offset, offset index offset, length, column index offset, length (-1: none)]
_S_TEMPLATE, _S_DICT, _S_DATA, _S_OI, _S_OI_LEN, _S_CI, _S_CI_LEN = range(7)


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
    _read_bounds: Callable[[], Bounds] = field(repr=False)
    """Decodes the chunk's ColumnIndex: only a lookup's key column needs its pages' bounds,
    so the other columns' (strings decoded to values) are never decoded."""
    _bounds: list[Bounds] = field(default_factory=list, repr=False)
    """The bounds once decoded (two threads may both decode: the same value)."""

    def _known_bounds(self) -> Bounds:
        if not self._bounds:
            self._bounds.append(self._read_bounds())
        return self._bounds[0]

    @property
    def mins(self) -> tuple[Any, ...] | None:
        """Each page's minimum in the model's form (ints for temporal values, ``str`` for
        strings, ``bytes`` for binaries; None for an all-null page); None when the chunk has
        no column index (pyarrow drops it for values past its statistics size limit)."""
        return self._known_bounds()[0]

    @property
    def maxs(self) -> tuple[Any, ...] | None:
        return self._known_bounds()[1]

    @property
    def ascending(self) -> bool:
        """Whether the column index says the pages' bounds ascend (a sorted column)."""
        return self._known_bounds()[2]

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
        # (bisect over the few pages, not np.searchsorted: that gives up the GIL, and a
        # lookup asks this of every column, which with many threads hands it over each time)
        return bisect.bisect_right(self.first_rows, row) - 1

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


@dataclass(frozen=True, slots=True, eq=False)
class PageIndex:
    """A file's page index: its columns, row groups, where each column chunk's pages lie and
    their bounds. Built by :func:`load_page_index`; a chunk's pages are parsed when first
    asked (:meth:`pages`) from the index bytes read at load, so no further I/O is needed."""

    filename: str
    size: int
    columns: tuple[LeafColumn, ...]
    row_group_rows: tuple[int, ...]
    top: Struct = field(repr=False)
    """FileMetaData's version, root schema element and created_by, for one-page files."""
    arrow: tuple[pa.Field, ...] | None = field(repr=False)
    """The file's stored Arrow schema, so pages read as the file's types."""
    _templates: tuple[Template, ...] = field(repr=False)
    _chunks: np.ndarray = field(repr=False)
    """int64 [row group, column, 7]: template, dictionary, data page and index places."""
    _index: bytes = field(repr=False)
    _index_start: int = field(repr=False)
    _parsed: dict[tuple[int, int], ColumnPages] = field(default_factory=dict, repr=False)
    frames: dict[tuple[int, ...], tuple[bytes, bytes]] = field(default_factory=dict,
                                                             repr=False)
    """One-page footer pieces by column set, kept by ``sediment.files.pages``."""
    decoders: dict[Any, Any] = field(default_factory=dict, repr=False)
    """How each column's pages decode from their bytes, kept by
    ``sediment.files.page_decode``."""

    @property
    def num_row_groups(self) -> int:
        return len(self.row_group_rows)

    @property
    def byte_range(self) -> tuple[int, int]:
        """Where the index bytes lie in the file, ``[start, end)`` (one range for every
        column chunk's indexes)."""
        return self._index_start, self._index_start + len(self._index)

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

    def template(self, row_group: int, column: int) -> Template:
        """What a one-page file of this column chunk keeps of its ColumnMetaData."""
        return self._templates[int(self._chunks[row_group, column, _S_TEMPLATE])]

    def _slice(self, start: int, length: int) -> bytes:
        at = start - self._index_start
        return self._index[at:at + length]

    def _parse(self, g: int, c: int) -> ColumnPages:
        chunk = self._chunks[g, c]
        places = offset_index(self._slice(int(chunk[_S_OI]), int(chunk[_S_OI_LEN])),
                              self.filename, g, c)
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
        d = int(chunk[_S_DICT])
        dictionary = (d, places[0][0] - d) if 0 <= d < places[0][0] else None
        ci, ci_len = int(chunk[_S_CI]), int(chunk[_S_CI_LEN])
        index, at, value, name = self._index, self._index_start, self.columns[c].value, \
            self.filename
        # (the closure holds the index bytes, not this object: no cycle keeps an evicted
        # index alive)
        return ColumnPages(g, c, rows, offsets, sizes, first, dictionary, lambda: column_bounds(
            index[ci - at:ci - at + ci_len] if ci >= 0 else None, len(places), value,
            name, g, c))


def read_exactly(read_range: ReadRange, start: int, end: int, filename: str
          ) -> bytes | bytearray | memoryview:
    """Bytes ``[start, end)`` through ``read_range``; fewer are damage: the file is shorter
    than its footer says."""
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
        tail = bytes(read_exactly(read_range, max(0, size - TAIL_GUESS), size, filename))
    if len(tail) < 8 or tail[-4:] != MAGIC or size < 12:
        raise CorruptMetadataError(f"data file {filename} has no Parquet footer")
    length = int.from_bytes(tail[-8:-4], "little")
    if length + 12 > size:
        raise CorruptMetadataError(f"data file {filename}: a footer of {length} bytes in a "
                                   f"file of {size}")
    if length + 8 > len(tail):
        tail = bytes(read_exactly(read_range, size - length - 8, size, filename))
    try:
        md = tc.decode(tail[len(tail) - length - 8:len(tail) - 8])
        layout = _layout(md, filename)
    except (ThriftError, TypeError, ValueError) as e:
        raise CorruptMetadataError(f"the footer of data file {filename} does not decode: {e}"
                                   ) from e
    if layout is None:
        return None
    flat = layout.chunks.reshape(-1, 7)
    places = [(int(c[_S_OI]), int(c[_S_OI_LEN])) for c in flat] + \
        [(int(c[_S_CI]), int(c[_S_CI_LEN])) for c in flat if c[_S_CI] >= 0]
    start = min((p for p, _ in places), default=0)
    end = max((p + n for p, n in places), default=0)
    if places and (start < len(MAGIC) or end > size - length - 8 or
                   any(n <= 0 for _, n in places)):
        raise CorruptMetadataError(f"the footer of data file {filename} places its page index "
                                   "outside the file")
    index = bytes(read_exactly(read_range, start, end, filename)) if places else b""
    return PageIndex(filename, size, layout.columns, layout.rows, layout.top, layout.arrow,
                     layout.templates, layout.chunks, index, start)


class _Layout(NamedTuple):
    columns: tuple[LeafColumn, ...]
    rows: tuple[int, ...]
    top: Struct
    arrow: tuple[pa.Field, ...] | None
    templates: tuple[Template, ...]
    chunks: np.ndarray


def _layout(md: Struct, filename: str) -> _Layout | None:
    """What a PageIndex holds of a decoded FileMetaData; None for a file it cannot serve."""
    if FMD_CRYPT in md:
        return None
    schema = struct_list(md, FMD_SCHEMA)
    if not schema:
        raise ThriftError("no schema")
    leaves = schema[1:]
    if get_field(schema[0], SE_CHILDREN, I32, 0) != len(leaves) or any(
            SE_CHILDREN in e or SE_TYPE not in e or
            get_field(e, SE_REPETITION, I32, 0) == REPEATED for e in leaves):
        return None  # nested or repeated: a page's values are not one per row
    arrow = _arrow_fields(md, filename)
    if arrow is not None and len(arrow) != len(leaves):
        return None
    orders = struct_list(md, FMD_ORDERS) if FMD_ORDERS in md else []
    columns = tuple(
        LeafColumn(i, get_field(e, SE_NAME, BINARY).decode("utf-8", "replace"), tc.encode(e),
                   tc.encode(orders[i]) if i < len(orders) else None, value_decoder(e))
        for i, e in enumerate(leaves))
    groups = struct_list(md, FMD_GROUPS)
    templates: dict[Template, int] = {}
    last: list[tuple[list[Any] | None, int]] = [(None, -1)] * len(leaves)
    chunks = np.full((len(groups), len(leaves), 7), -1, dtype=np.int64)
    rows = []
    for g, group in enumerate(groups):
        rows.append(get_field(group, RG_ROWS, I64))
        ccs = struct_list(group, RG_COLUMNS)
        if len(ccs) != len(leaves):
            raise ThriftError(f"row group {g} has {len(ccs)} columns where the schema has "
                              f"{len(leaves)}")
        for c, cc in enumerate(ccs):
            if CC_OI_OFF not in cc or CC_PATH in cc or CC_CRYPT in cc or CC_META not in cc:
                return None  # no offset index, another file's chunk, or encrypted
            meta = get_field(cc, CC_META, STRUCT)
            chunk = chunks[g, c]
            kept = [meta.get(k) for k in CM_TEMPLATE]
            if kept != last[c][0]:  # a column's chunks mostly share theirs: encode it once
                last[c] = (kept, templates.setdefault(template(meta), len(templates)))
            chunk[_S_TEMPLATE] = last[c][1]
            chunk[_S_DATA] = get_field(meta, CM_DATA, I64)
            dictionary = get_field(meta, CM_DICT, I64, -1)
            if dictionary < len(MAGIC):  # none (some writers write 0 for none) ...
                dictionary = chunk[_S_DATA]  # ... or where legacy writers put it: see _parse
            chunk[_S_DICT] = dictionary
            chunk[_S_OI] = get_field(cc, CC_OI_OFF, I64)
            chunk[_S_OI_LEN] = get_field(cc, CC_OI_LEN, I32)
            if CC_CI_OFF in cc:
                chunk[_S_CI] = get_field(cc, CC_CI_OFF, I64)
                chunk[_S_CI_LEN] = get_field(cc, CC_CI_LEN, I32)
    top: Struct = {FMD_VERSION: md[FMD_VERSION], FMD_SCHEMA: (STRUCT, schema[0])}
    if FMD_BY in md:
        top[FMD_BY] = md[FMD_BY]
    return _Layout(columns, tuple(rows), top, arrow, tuple(templates), chunks)


def _arrow_fields(md: Struct, filename: str) -> tuple[pa.Field, ...] | None:
    """The fields of the file's stored Arrow schema (None when it has none)."""
    for kv in struct_list(md, FMD_KV) if FMD_KV in md else []:
        if get_field(kv, 1, BINARY) == ARROW_SCHEMA and 2 in kv:
            try:
                return tuple(pa.ipc.read_schema(pa.py_buffer(
                    base64.b64decode(get_field(kv, 2, BINARY)))))
            except (ValueError, pa.ArrowException) as e:
                raise CorruptMetadataError(f"the Arrow schema in data file {filename}'s footer "
                                           f"does not decode: {e}") from e
    return None
