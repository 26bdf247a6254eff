"""Filters on the row-key fields after the first, pushed down as per-field regions.

The reader pushes comparisons on the first row-key field down as ranges; comparisons on the
other row-key fields (``key2 > 'h'``) cannot narrow a lexicographic range, but a per-field
region (:class:`sediment.core.regions.Box`) holds them exactly: the leaves whose regions
cannot meet it are not read (all leaves, on a box-partitioned table, by every field), and row
groups are pruned by every field's statistics.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql.datasource import (
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    LessThan,
    LessThanOrEqual,
)

from sediment.core.regions import Box, FieldRange, Range

PUSHABLE = (EqualTo, GreaterThan, GreaterThanOrEqual, LessThan, LessThanOrEqual)


def other_field(f: Filter, names: list[str]) -> str | None:
    """The row-key field after the first that ``f`` compares with a value, if it does."""
    attr = getattr(f, "attribute", None)
    if isinstance(f, PUSHABLE) and getattr(f, "value", None) is not None \
            and isinstance(attr, tuple) \
            and len(attr) == 1 and attr[0] in names[1:]:
        return str(attr[0])
    return None


def _bounds(filters: list[Filter]) -> Range:
    """The comparisons on one field as one range of single values."""
    lo: tuple[Any, bool] | None = None
    hi: tuple[Any, bool] | None = None
    for f in filters:
        v = getattr(f, "value", None)
        if isinstance(f, EqualTo | GreaterThan | GreaterThanOrEqual):
            inc = not isinstance(f, GreaterThan)
            if lo is None or v > lo[0] or (v == lo[0] and not inc):
                lo = (v, inc)
        if isinstance(f, EqualTo | LessThan | LessThanOrEqual):
            inc = not isinstance(f, LessThan)
            if hi is None or v < hi[0] or (v == hi[0] and not inc):
                hi = (v, inc)
    return Range(None if lo is None else (lo[0],), None if hi is None else (hi[0],),
                 start_inclusive=True if lo is None else lo[1],
                 end_inclusive=True if hi is None else hi[1])


def _empty(r: Range) -> bool:
    def end(k: Any) -> Any:
        return None if k is None else k[0]

    return FieldRange(end(r.start), r.start_inclusive, end(r.end), r.end_inclusive).is_empty()


def with_other_fields(ranges: list[Range] | None, others: dict[str, list[Filter]],
                      first: str) -> list[Range]:
    """Each range on the first field (None: one open range) as a per-field region that also
    holds the comparisons on the other fields. An empty combination (``key2 > 5 and key2 <
    3``) selects nothing, as Spark would."""
    fields = {name: _bounds(fs) for name, fs in others.items()}
    if any(_empty(r) for r in fields.values()):
        return []
    out: list[Range] = []
    for r in ranges if ranges is not None else [Range()]:
        if not _empty(r):
            out.append(Box({first: r, **fields}))
    return out


def bloom_point(f: Filter, columns: set[str]) -> tuple[str, list[Any]] | None:
    """The column and values of an ``=`` or ``IN`` filter on a column with bloom filters
    (``parquet.bloom_columns``), when its values are JSON strings or numbers (the wire
    filter's untyped literals, cast to the column's type); else None. Spark still applies
    the filter: pushed, it only lets the read skip what the blooms rule out
    (sediment.query.skipindex)."""
    attr = getattr(f, "attribute", None)
    if not (isinstance(attr, tuple) and len(attr) == 1 and attr[0] in columns):
        return None
    values = [f.value] if isinstance(f, EqualTo) else list(f.value) if isinstance(f, In) \
        else None
    if not values or not all(isinstance(v, str | int | float) and not isinstance(v, bool)
                             for v in values):
        return None
    return str(attr[0]), values


def bloom_filter(points: dict[str, list[Any]]) -> dict[str, Any] | None:
    """The pushed points as one wire filter (an ``and`` of ``is_in``s), or None."""
    parts = [{"call": "is_in", "args": [{"field": c}], "values": v} for c, v in points.items()]
    if not parts:
        return None
    return parts[0] if len(parts) == 1 else {"call": "and", "args": parts}
