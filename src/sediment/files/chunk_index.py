"""A column chunk's page index decoded: its OffsetIndex (where each page lies and its first
row) and its ColumnIndex (each page's min and max), for :mod:`sediment.files.page_index`.

A cold lookup decodes the OffsetIndex of every chunk it reads first, and the ColumnIndex of
its key column alone: the first by a loop over the bytes of the layout writers give it
(:func:`page_locations`: 14-21 us a chunk, where the generic decoder took 59 for both
indexes), the second, rarer, by the generic decoder (:mod:`sediment.files.thrift_compact`).
Bytes that do not decode raise CorruptMetadataError naming the file, row group and column.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from sediment.errors import CorruptMetadataError
from sediment.files import thrift_compact as tc
from sediment.files.parquet_meta import (
    ASCENDING,
    CI_MAXS,
    CI_MINS,
    CI_NULL_PAGES,
    CI_ORDER,
    OI_PAGES,
    PL_FIRST,
    PL_OFFSET,
    PL_SIZE,
    get_field,
    struct_list,
)
from sediment.files.thrift_compact import I32, I64, LIST, ThriftError

Bounds = tuple[tuple[Any, ...] | None, tuple[Any, ...] | None, bool]
"""A chunk's page bounds: (mins, maxs, ascending), as ColumnPages gives them."""


def offset_index(data: bytes, filename: str, g: int, c: int) -> list[tuple[int, int, int]]:
    """The OffsetIndex ``data`` of chunk (row group ``g``, column ``c``) of ``filename``: its
    pages as (offset, compressed size, first row)."""
    places = page_locations(data)
    if places is not None:
        return places
    try:  # another writer's layout: the generic decoder reads it
        oi = tc.decode_struct(data, until=OI_PAGES)[0]
        return [(get_field(p, PL_OFFSET, I64), get_field(p, PL_SIZE, I32),
                 get_field(p, PL_FIRST, I64)) for p in struct_list(oi, OI_PAGES)]
    except (ThriftError, TypeError, ValueError, struct.error) as e:
        raise index_damage(filename, g, c, e) from e


def index_damage(filename: str, g: int, c: int, e: Exception) -> CorruptMetadataError:
    """The error for chunk (row group ``g``, column ``c``) of ``filename`` whose index bytes
    do not decode (``e`` says why)."""
    return CorruptMetadataError(f"the page index of data file {filename} (row group {g}, "
                                f"column {c}) does not decode: {e}")


def column_bounds(ci: bytes | None, pages: int, value: Callable[[bytes], Any],
                  filename: str, g: int, c: int) -> Bounds:
    """A chunk's ColumnIndex bytes (None: it has none) of ``pages`` pages, decoded: each
    page's min and max in the model's form, and whether they ascend."""
    if ci is None:
        return None, None, False
    try:
        index = tc.decode_struct(ci, until=CI_ORDER)[0]
        nulls = get_field(index, CI_NULL_PAGES, LIST).items
        lows = get_field(index, CI_MINS, LIST).items
        highs = get_field(index, CI_MAXS, LIST).items
        ascending = get_field(index, CI_ORDER, I32) == ASCENDING
        if not len(nulls) == len(lows) == len(highs) == pages:
            raise ThriftError("column index and offset index count different pages")
        mins = tuple(None if n else value(v) for n, v in zip(nulls, lows, strict=True))
        maxs = tuple(None if n else value(v) for n, v in zip(nulls, highs, strict=True))
    except (ThriftError, TypeError, ValueError, struct.error) as e:
        raise index_damage(filename, g, c, e) from e
    return mins, maxs, ascending


def page_locations(data: bytes) -> list[tuple[int, int, int]] | None:
    """An OffsetIndex's pages as (offset, compressed size, first row), read straight from the
    layout writers give it: field 1, a list of PageLocation structs of fields 1 (i64), 2
    (i32) and 3 (i64) in order; what follows the list is not read. A loop over the bytes
    where the generic decoder builds a dict a struct: a lookup parses the index of each
    column chunk it reads first. None for any other layout (the generic decoder reads it,
    and names what is wrong)."""
    varint = tc.read_varint
    try:
        if data[0] != _OI_LIST or data[1] & 0x0F != tc.STRUCT:
            return None
        count, pos = data[1] >> 4, 2
        if count == 15:
            count, pos = varint(data, pos)
        places = []
        for _ in range(count):
            if data[pos] != _PL_OFFSET:
                return None
            at, pos = varint(data, pos + 1)
            if data[pos] != _PL_SIZE:
                return None
            size, pos = varint(data, pos + 1)
            if data[pos] != _PL_FIRST:
                return None
            first, pos = varint(data, pos + 1)
            if data[pos] != tc.STOP:
                return None
            pos += 1
            places.append(((at >> 1) ^ -(at & 1), (size >> 1) ^ -(size & 1),
                           (first >> 1) ^ -(first & 1)))
        return places
    except (IndexError, ThriftError):
        return None


# compact-protocol field headers (id delta << 4 | type) of the layout page_locations reads
_OI_LIST = 1 << 4 | LIST
_PL_OFFSET, _PL_SIZE, _PL_FIRST = 1 << 4 | I64, 1 << 4 | I32, 1 << 4 | I64
