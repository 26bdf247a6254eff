"""Vectorised key operations on sorted Arrow data: row access, bisection, range masks.

Bisection touches O(log n) rows per call; masks are computed with Arrow compute kernels, so no
path here loops over records in Python.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from typing import Any, TypeAlias

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from sediment.core.keys import Key
from sediment.core.regions import Box, Cell, Range, Region

Columnar: TypeAlias = pa.Table | pa.RecordBatch


_TEMPORAL_SCALARS = (pa.TimestampScalar, pa.Date32Scalar, pa.Date64Scalar)


def key_value(scalar: pa.Scalar) -> Any:
    """One key value in the model's form: temporal values as their Arrow integer (see
    ``sediment.core.keys``), others as Python values."""
    if isinstance(scalar, _TEMPORAL_SCALARS):
        return scalar.value
    return scalar.as_py()


def row_key(data: Columnar, i: int, names: Sequence[str]) -> Key:
    """The key tuple of row ``i``."""
    return tuple(key_value(data.column(n)[i]) for n in names)


def bisect_key(data: Columnar, key: Key, names: Sequence[str], *, right: bool = False,
               lo: int = 0, hi: int | None = None) -> int:
    """First row whose key prefix is >= key (or > key with ``right``), for sorted data.

    ``key`` may be shorter than ``names`` (a prefix): rows are compared on ``len(key)`` fields.
    """
    n = len(key)
    cols = [data.column(c) for c in names[:n]]
    hi = data.num_rows if hi is None else hi
    while lo < hi:
        mid = (lo + hi) // 2
        k = tuple(key_value(c[mid]) for c in cols)
        if k < key or (right and k == key):
            lo = mid + 1
        else:
            hi = mid
    return lo


def _lex_compare(data: Columnar, names: Sequence[str], key: Key, op: str) -> pa.Array:
    """Mask of rows whose key prefix compares to ``key`` by op ('<', '<=', '>', '>=')."""
    strict = {"<": "less", "<=": "less", ">": "greater", ">=": "greater"}[op]
    inclusive = op in ("<=", ">=")
    result: pa.Array | None = None
    eq_so_far: pa.Array | None = None
    for i, (name, value) in enumerate(zip(names, key, strict=False)):
        col = data.column(name)
        scalar = pa.scalar(value, type=col.type)
        part = getattr(pc, strict)(col, scalar)
        if eq_so_far is not None:
            part = pc.and_(eq_so_far, part)
        result = part if result is None else pc.or_(result, part)
        eq = pc.equal(col, scalar)
        eq_so_far = eq if eq_so_far is None else pc.and_(eq_so_far, eq)
        if i == len(key) - 1 and inclusive:
            result = pc.or_(result, eq_so_far)
    assert result is not None
    return result


def cell_mask(data: Columnar, names: Sequence[str], cell: Cell) -> pa.Array | None:
    """Rows inside a box partition: ``lo <= field < hi`` on each bounded field."""
    mask = None
    for name, (lo, hi) in zip(names, cell.bounds, strict=False):
        col = data.column(name)
        for fn, v in ((pc.greater_equal, lo), (pc.less, hi)):
            if v is not None:
                m = fn(col, pa.scalar(v, type=col.type))
                mask = m if mask is None else pc.and_(mask, m)
    return mask


def region_mask(data: Columnar, names: Sequence[str], region: Region) -> pa.Array | None:
    """Rows inside a partition region, or None when the region is unbounded."""
    cell = region.cell
    if cell is not None:
        return cell_mask(data, names, cell)
    mask = None
    if region.min is not None:
        mask = _lex_compare(data, names, region.min, ">=")
    if region.max is not None:
        m = _lex_compare(data, names, region.max, "<")
        mask = m if mask is None else pc.and_(mask, m)
    return mask


def box_mask(data: Columnar, box: Box) -> pa.Array | None:
    """Rows inside a per-field region: each limited field's comparisons, and-ed."""
    mask = None
    for name, f in box.constrained():
        col = data.column(name)
        parts = []
        if f.lo is not None:
            parts.append((pc.greater_equal if f.lo_inc else pc.greater)(
                col, pa.scalar(f.lo, type=col.type)))
        if f.hi is not None:
            parts.append((pc.less_equal if f.hi_inc else pc.less)(
                col, pa.scalar(f.hi, type=col.type)))
        for m in parts:
            mask = m if mask is None else pc.and_(mask, m)
    return mask


def range_mask(data: Columnar, names: Sequence[str], rng: Range) -> pa.Array | None:
    box = rng.per_field
    if box is not None:
        return box_mask(data, box)
    mask = None
    if rng.start is not None:
        mask = _lex_compare(data, names, rng.start, ">=" if rng.start_inclusive else ">")
    if rng.end is not None:
        m = _lex_compare(data, names, rng.end, "<=" if rng.end_inclusive else "<")
        mask = m if mask is None else pc.and_(mask, m)
    return mask


def rows_in(data: Columnar, names: Sequence[str], region: Region,
            ranges: Sequence[Range] | None) -> Any:
    """Filter ``data`` to rows inside ``region`` and any of ``ranges`` (None: all ranges)."""
    mask = region_mask(data, names, region)
    if ranges is not None:
        any_range = None
        for r in ranges:
            m = range_mask(data, names, r)
            if m is None:
                any_range = None
                break
            any_range = m if any_range is None else pc.or_(any_range, m)
        else:
            if any_range is None:
                return data.slice(0, 0)
        if any_range is not None:
            mask = any_range if mask is None else pc.and_(mask, any_range)
    return data if mask is None else data.filter(mask)


def sorted_span(column: pa.Array, value: Any) -> tuple[int, int] | None:
    """The rows ``[start, end)`` of a column sorted ascending, without nulls, that equal
    ``value`` (the model's form: temporal values as integers), found by binary search over
    the column's buffers: a lookup in a decoded row group costs a dozen comparisons, not a
    pass over its rows (measured on a 4,096-row string group: 3 us against 50-80 us for a
    compute mask and filter). None for a type it does not search (the caller filters)."""
    search = _searcher(column, value)
    if search is None:
        return None
    if isinstance(search, tuple):
        return bisect_span(len(column), *search)
    return search(False), search(True)


def sorted_bound(column: pa.Array, value: Any, *, right: bool = False) -> int | None:
    """The first row of a column sorted ascending, without nulls, whose value is >=
    ``value`` (> with ``right``), by binary search as :func:`sorted_span`; None for a type
    it does not search."""
    search = _searcher(column, value)
    if search is None:
        return None
    if isinstance(search, tuple):
        target, at = search
        return (bisect.bisect_right if right else bisect.bisect_left)(
            range(len(column)), target, key=at)
    return search(right)


def _searcher(column: pa.Array, value: Any
              ) -> tuple[bytes, Callable[[int], bytes]] | Callable[[bool], int] | None:
    """How to search a sorted column for ``value``: for strings and binaries the target
    bytes and the ``i``-th value's bytes; for integers and temporal values a
    ``search(right)`` giving the first row >= (> with ``right``) the value; None for other
    types, or a value not of the column's kind."""
    t = column.type
    n = len(column)
    if pa.types.is_string(t) or pa.types.is_binary(t) or \
            pa.types.is_large_string(t) or pa.types.is_large_binary(t):
        if not isinstance(value, str | bytes):
            return None
        target = value.encode() if isinstance(value, str) else value
        wide = pa.types.is_large_string(t) or pa.types.is_large_binary(t)
        # (memoryviews index faster than numpy scalars; UTF-8 orders as code points do)
        offsets = memoryview(column.buffers()[1]).cast("q" if wide else "i")[
            column.offset:column.offset + n + 1]
        data = memoryview(column.buffers()[2] or b"")

        def at(i: int) -> bytes:
            return data[offsets[i]:offsets[i + 1]].tobytes()
        return target, at
    if pa.types.is_integer(t) or pa.types.is_timestamp(t) or pa.types.is_date(t) or \
            pa.types.is_time(t) or pa.types.is_duration(t):
        if isinstance(value, bool) or not isinstance(value, int):
            return None
        width = t.bit_width // 8
        kind = "u" if pa.types.is_unsigned_integer(t) else "i"
        values = np.frombuffer(column.buffers()[1], dtype=f"<{kind}{width}", count=n,
                               offset=column.offset * width)

        def search(right: bool) -> int:
            try:
                return int(np.searchsorted(values, value, "right" if right else "left"))
            except OverflowError:  # outside the type's range: before or after every row
                return 0 if value < 0 else n
        return search
    return None


def sorted_rows_in(data: pa.Table, name: str, region: Region,
                   ranges: Sequence[Range] | None) -> pa.Table | None:
    """:func:`rows_in` for data sorted by its one key field ``name``: the rows of the region
    and of each range found by binary search and sliced, no mask built nor rows copied (a
    0.1% range of 10M rows reads ~3 row groups, where comparing every row to the ends and
    filtering cost ~0.7 ms). None where it does not apply (a box partition, a per-field
    range, a key type :func:`sorted_bound` does not search): the caller uses rows_in."""
    if region.cell is not None:
        return None
    col = data.column(name)
    col = col.chunk(0) if col.num_chunks == 1 else col.combine_chunks()
    n = len(col)

    def bound(key: Key | None, right: bool, default: int) -> int | None:
        if key is None:
            return default
        return sorted_bound(col, key[0], right=right) if len(key) == 1 else None

    lo, hi = bound(region.min, False, 0), bound(region.max, False, n)
    if lo is None or hi is None:
        return None
    spans = [(lo, hi)]
    if ranges is not None:
        spans = []
        for r in ranges:
            if r.per_field is not None:
                return None
            a = bound(r.start, not r.start_inclusive, 0)
            b = bound(r.end, r.end_inclusive, n)
            if a is None or b is None:
                return None
            spans.append((max(a, lo), min(b, hi)))
    merged: list[list[int]] = []
    for a, b in sorted(s for s in spans if s[1] > s[0]):
        if merged and a <= merged[-1][1]:  # overlapping ranges: their rows once
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    if len(merged) == 1 and merged[0] == [0, n]:
        return data
    if not merged:
        return data.slice(0, 0)
    parts = [data.slice(a, b - a) for a, b in merged]
    return parts[0] if len(parts) == 1 else pa.concat_tables(parts)


def bisect_span(n: int, target: Any, at: Callable[[int], Any]) -> tuple[int, int]:
    """The rows ``[start, end)`` of ``n`` sorted values (the ``i``-th is ``at(i)``) equal to
    ``target``: a binary search, one look past the first match for a unique key (the common
    case), a second search only for repeated ones."""
    start = bisect.bisect_left(range(n), target, key=at)
    if start == n or at(start) != target:
        return start, start
    if start + 1 == n or at(start + 1) != target:  # a unique key: the common case
        return start, start + 1
    return start, bisect.bisect_right(range(n), target, lo=start, key=at)


def sort_indices(data: Columnar, names: Sequence[str]) -> pa.Array:
    """Indices that sort ``data`` by ``names`` ascending (strings by bytes)."""
    return pc.sort_indices(data, sort_keys=[(n, "ascending") for n in names])


def first_field_bounds(md: pq.FileMetaData, name: str) -> tuple[list[Any], list[Any]]:
    """Each row group's [min, max] of the key field ``name`` by its statistics (None where a
    row group has none), in the model's form (temporal values as integers)."""
    col = md.schema.names.index(name)
    # temporal keys are integers in the model (sediment.core.keys): use the raw statistics
    raw = md.schema.column(col).logical_type.type in ("TIMESTAMP", "DATE")
    mins: list[Any] = []
    maxs: list[Any] = []
    for i in range(md.num_row_groups):
        st = md.row_group(i).column(col).statistics
        if st is None or not st.has_min_max:
            mins.append(None)
            maxs.append(None)
        elif raw:
            mins.append(st.min_raw)
            maxs.append(st.max_raw)
        else:
            mins.append(st.min)
            maxs.append(st.max)
    return mins, maxs


def bounds_inside(lo: Any, hi: Any, region: Region) -> bool:
    """Whether rows whose first key field lies in [lo, hi] (a sorted file's or row groups'
    statistics) all lie inside ``region``, strictly, so that a multi-field key equal on the
    first field is still filtered: then reading them needs no row filter."""
    cell = region.cell
    if lo is None or hi is None or (cell is not None and cell.limited() not in ([], [0])):
        return False  # a box partition bounds other fields: only a row filter can tell
    return (region.min is None or lo > region.min[0]) and \
        (region.max is None or hi < region.max[0])
