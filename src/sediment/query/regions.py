"""Per-field query regions (``sd.Region({field: sd.Range(...)})``): checking them against a
table, and what the reader needs from them besides their lexicographic bounds (which the
planner and the first-field pruning use as for any range): the row-group test on every
field's statistics. (A box partitioning reads a plain range as the box it is: see
sediment.partitioning.dimensions.)

Checking is strict: a region is a user's statement about named fields, so an unknown field,
a value of the wrong type, a multi-value end or an empty range is a mistake to report (with
the table and the field), never a query for nothing.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from sediment.core.regions import Box, FieldRange, Range
from sediment.errors import DataError, QueryError
from sediment.schema import Schema


def _end(schema: Schema, table: str, name: str, end: Any) -> Any:
    if end is None:
        return None
    if len(end) != 1:
        raise QueryError(f"region on table {table}: the range on field {name!r} must have "
                         f"single values as ends, not {end!r}")
    try:
        return schema.check_key_field(name, end[0], what=f"range end on field {name!r}:")
    except DataError as e:  # a lone surrogate: refused as ingest refuses it
        raise DataError(f"region on table {table}: {e}") from None
    except Exception as e:  # SchemaError -> QueryError with the table named
        raise QueryError(f"region on table {table}: {e}") from None


def bind_region(schema: Schema, table: str, box: Box) -> Box:
    """``box`` checked against the table's row keys and bound to them. Raises QueryError:
    no fields, an unknown or non-row-key field, a value not of the field's type, or an
    empty range (start after end, or equal ends not both inclusive)."""
    names = schema.row_key_names
    if not box.given:
        raise QueryError(f"region on table {table} names no field "
                         f"(row key fields: {', '.join(names)})")
    by_name: dict[str, FieldRange] = {}
    for name, rng in box.given:
        if name not in names:
            what = "a row key field" if name in schema.field_names else "a field"
            raise QueryError(f"region on table {table} names {name!r}, which is not {what} "
                             f"of the table (row key fields: {', '.join(names)})")
        if not isinstance(rng, Range) or rng.per_field is not None:
            raise QueryError(f"region on table {table}: field {name!r} needs a "
                             f"sediment.Range, not {rng!r}")
        f = FieldRange(_end(schema, table, name, rng.start), rng.start_inclusive,
                       _end(schema, table, name, rng.end), rng.end_inclusive)
        if f.is_empty():
            raise QueryError(f"region on table {table}: the range on field {name!r} is empty "
                             f"({f.lo!r} to {f.hi!r}, "
                             f"{'inclusive' if f.lo_inc else 'exclusive'} start, "
                             f"{'inclusive' if f.hi_inc else 'exclusive'} end)")
        by_name[name] = f
    return box.bind(names, [by_name.get(n, FieldRange()) for n in names])


_PRUNABLE = (pa.types.is_integer, pa.types.is_string, pa.types.is_large_string,
             pa.types.is_binary, pa.types.is_large_binary)


def box_row_groups(schema: Schema, metadata: pq.FileMetaData, groups: list[int],
                   ranges: tuple[Range, ...]) -> list[int]:
    """The row groups some range may hold rows of, judged by every key field's min/max
    statistics for boxes (a plain range keeps every group: the first-field pruning already
    judged it). Fields without usable statistics (temporal ones, whose statistics are not
    in the model's integers) never rule a group out."""
    boxes = [b for b in (r.per_field for r in ranges) if b is not None]
    if not groups or len(boxes) < len(ranges) or not boxes:
        return groups
    types = {f.name: f.type for f in schema.row_keys}
    wanted = {n for b in boxes for n, _ in b.constrained()
              if any(p(types[n]) for p in _PRUNABLE)}
    index = {}
    for i in range(metadata.num_columns):
        path = metadata.schema.column(i).path
        if path in wanted:
            index[path] = i
    if not index:
        return groups
    out = []
    for g in groups:
        rg = metadata.row_group(g)
        stats = {}
        for name, i in index.items():
            st = rg.column(i).statistics
            if st is not None and st.has_min_max:
                stats[name] = (st.min, st.max)
        if any(_may_hold(b, stats) for b in boxes):
            out.append(g)
    return out


def _may_hold(box: Box, stats: dict[str, tuple[Any, Any]]) -> bool:
    for name, f in box.constrained():
        mm = stats.get(name)
        if mm is None:
            continue
        try:
            if not f.meets(mm[0], True, mm[1], True):
                return False
        except TypeError:  # statistics of another form than the model's values
            continue
    return True
