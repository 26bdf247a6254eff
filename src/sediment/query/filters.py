"""Query-time filters: what a pyarrow compute expression says about the rows a query reads.

A filter (``table.query(filter=pc.field("v") > 3)``) always applies to merged records, after
the table's iterators. Before that, two conservative uses of it save reading:

* **Row-key ranges**: conjunctions and disjunctions of comparisons (and ``is_in``) of the
  first row-key field with literals become key ranges, which narrow the leaves, files and row
  groups read exactly as ``ranges=`` does. Records of one row key are merged together, so this
  is safe whatever the iterators. Anything the analysis does not understand reads everything.
* **Row-group statistics**: with iterators that act record by record (none, filters,
  age-off), a row group whose Parquet min/max/null counts show that no row can pass is
  skipped. With merging iterators (aggregation, keep-latest) it is not: dropping an older
  record's row group first would let it through instead of the newer one, or change a sum.

The expression is taken apart by :mod:`sediment.query.expressions`, which also holds the
limits of size and depth every filter is held to (Arrow crashes on huge ones).

The ``--where`` syntax that builds such an expression from a string is in
:mod:`sediment.query.where`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from sediment.core.regions import Range, Region
from sediment.errors import QueryError, WhereError
from sediment.query.expressions import (
    MAX_FILTER_DEPTH,
    MAX_FILTER_NODES,
    MAX_FILTER_VALUES,
    Call,
    Field,
    Literal,
    Node,
    decompose,
    field_names,
    in_values,
    tree_shape,
)
from sediment.query.where import parse_where
from sediment.schema import Schema

# ---- row-key ranges ---------------------------------------------------------------------------

Interval = tuple[Any, bool, Any, bool]
"""(low, low inclusive, high, high inclusive) on one field; None ends are open."""

_MAX_INTERVALS = 1024
_FLIP = {"less": "greater", "less_equal": "greater_equal", "greater": "less",
         "greater_equal": "less_equal", "equal": "equal"}


def _model_value(value: pa.Scalar, typ: pa.DataType) -> Any:
    """A literal as the model's value of a field of type ``typ`` (temporal as integers), or
    raises when it cannot be cast exactly."""
    if not value.is_valid:
        raise ValueError("null")
    cast = value.cast(typ)  # safe: raises on overflow or truncation
    if pa.types.is_temporal(typ):
        return cast.cast(pa.int64()).as_py()
    v = cast.as_py()
    if isinstance(v, float) and math.isnan(v):
        raise ValueError("NaN")
    return v


def _intersect(a: Interval, b: Interval) -> Interval | None:
    lo, lo_inc, hi, hi_inc = a
    if b[0] is not None and (lo is None or b[0] > lo or (b[0] == lo and not b[1])):
        lo, lo_inc = b[0], b[1]
    if b[2] is not None and (hi is None or b[2] < hi or (b[2] == hi and not b[3])):
        hi, hi_inc = b[2], b[3]
    if lo is not None and hi is not None and (lo > hi or (lo == hi and not (lo_inc and hi_inc))):
        return None
    return (lo, lo_inc, hi, hi_inc)


def key_intervals(tree: Node, name: str, typ: pa.DataType) -> list[Interval] | None:
    """Intervals of field ``name`` outside which the expression cannot be true (None: no
    constraint found: any value may pass)."""
    if not isinstance(tree, Call):
        return None
    fn = tree.name
    if fn in ("and", "and_kleene"):
        parts = [key_intervals(a, name, typ) for a in tree.args]
        known = [p for p in parts if p is not None]
        if not known:
            return None
        out = known[0]
        for p in known[1:]:
            out = [i for x in out for y in p if (i := _intersect(x, y)) is not None]
            if len(out) > _MAX_INTERVALS:
                return None
        return out
    if fn in ("or", "or_kleene"):
        acc: list[Interval] = []
        for a in tree.args:
            part = key_intervals(a, name, typ)
            if part is None:
                return None
            acc += part
        return None if len(acc) > _MAX_INTERVALS else acc
    if fn in _FLIP and len(tree.args) == 2:
        a, b = tree.args
        if isinstance(b, Field) and isinstance(a, Literal):
            a, b, fn = b, a, _FLIP[fn]
        if not (isinstance(a, Field) and a.name == name and isinstance(b, Literal)):
            return None
        try:
            v = _model_value(b.value, typ)
        except Exception:
            return None
        return [{"equal": (v, True, v, True), "less": (None, True, v, False),
                 "less_equal": (None, True, v, True), "greater": (v, False, None, False),
                 "greater_equal": (v, True, None, False)}[fn]]
    if fn == "is_in" and len(tree.args) == 1 and isinstance(tree.args[0], Field) \
            and tree.args[0].name == name and tree.options is not None:
        values = tree.options.get("value_set")
        if not isinstance(values, list) or len(values) > _MAX_INTERVALS:
            return None
        out2: list[Interval] = []
        for x in values:
            if x is None:
                continue  # a null key never matches a row key (row keys are not null)
            try:
                v = _model_value(pa.scalar(x), typ)
            except Exception:
                return None
            out2.append((v, True, v, True))
        return out2
    return None


def intervals_to_ranges(intervals: Sequence[Interval]) -> tuple[Range, ...]:
    """Intervals on the first row-key field as (prefix) Ranges."""
    return tuple(Range(None if lo is None else (lo,), None if hi is None else (hi,),
                       start_inclusive=lo_inc, end_inclusive=hi_inc)
                 for lo, lo_inc, hi, hi_inc in intervals)


def region_meets(region: Region, ranges: Iterable[Range]) -> bool:
    """Whether any range may hold a key of the region (on the first field, conservatively)."""
    lo = None if region.min is None else region.min[0]
    hi = None if region.max is None else region.max[0]
    for r in ranges:
        s = None if r.start is None else r.start[0]
        e = None if r.end is None else r.end[0]
        if (s is None or hi is None or s <= hi) and (e is None or lo is None or e >= lo):
            return True
    return False


def keys_only(tree: Node, name: str) -> bool:
    """Whether the expression is made only of what :func:`key_intervals` reads exactly:
    and/or of comparisons and ``is_in`` of field ``name`` with literals. Then its intervals
    hold exactly the values that pass, and a read restricted to them needs no filtering."""
    if not isinstance(tree, Call):
        return False
    if tree.name in ("and", "and_kleene", "or", "or_kleene"):
        return all(keys_only(a, name) for a in tree.args)
    if tree.name in _FLIP and len(tree.args) == 2:
        fields = [a for a in tree.args if isinstance(a, Field)]
        literals = [a for a in tree.args if isinstance(a, Literal)]
        return len(fields) == 1 and len(literals) == 1 and fields[0].name == name
    return tree.name == "is_in" and len(tree.args) == 1 \
        and isinstance(tree.args[0], Field) and tree.args[0].name == name


def _plainly_boolean(tree: Node, types: dict[str, pa.DataType]) -> bool:
    """Whether Arrow surely evaluates the expression on these columns to booleans: and/or/not
    of boolean columns and literals, null checks, comparisons and ``is_in`` whose literals
    have their field's type. Anything else is checked by evaluating it on an empty table
    (which costs a query plan)."""
    if isinstance(tree, Field):
        return types.get(tree.name) == pa.bool_()
    if isinstance(tree, Literal):
        return tree.value.type == pa.bool_()
    if not isinstance(tree, Call):
        return False
    if tree.name in ("and", "and_kleene", "or", "or_kleene"):
        return len(tree.args) >= 2 and all(_plainly_boolean(a, types) for a in tree.args)
    if tree.name == "invert":
        return len(tree.args) == 1 and _plainly_boolean(tree.args[0], types)
    if tree.name in ("is_null", "is_valid"):
        return len(tree.args) == 1 and (isinstance(tree.args[0], Literal) or isinstance(
            tree.args[0], Field) and tree.args[0].name in types)
    if tree.name in _FLIP and len(tree.args) == 2:
        a, b = tree.args
        if isinstance(b, Field):
            a, b = b, a
        return isinstance(a, Field) and a.name in types and isinstance(b, Literal) \
            and b.value.type == types[a.name]
    if tree.name == "is_in" and len(tree.args) == 1 and isinstance(tree.args[0], Field) \
            and tree.options is not None and tree.args[0].name in types:
        typ = types[tree.args[0].name]
        values = tree.options.get("value_set")
        return isinstance(values, list) and (pa.types.is_string(typ) and all(
            v is None or isinstance(v, str) for v in values))
    return False


# ---- row-group statistics ---------------------------------------------------------------------

_STAT_OPS = ("equal", "less", "less_equal", "greater", "greater_equal")


def _may(tree: Node, stats: dict[str, Any], types: dict[str, pa.DataType]) -> bool:
    """Whether any row of a row group with these statistics may pass (True when unsure)."""
    if not isinstance(tree, Call):
        return True
    fn = tree.name
    try:
        if fn in ("and", "and_kleene"):
            return all(_may(a, stats, types) for a in tree.args)
        if fn in ("or", "or_kleene"):
            return any(_may(a, stats, types) for a in tree.args)
        if fn in ("is_null", "is_valid") and isinstance(tree.args[0], Field):
            st = stats.get(tree.args[0].name)
            if st is None or not st.has_null_count:
                return True
            if fn == "is_null":
                return bool(st.null_count > 0)
            return bool(st.num_values > 0)
        if fn in _STAT_OPS and len(tree.args) == 2:
            a, b = tree.args
            if isinstance(b, Field) and isinstance(a, Literal):
                a, b, fn = b, a, _FLIP[fn]
            if not (isinstance(a, Field) and isinstance(b, Literal)):
                return True
            st = stats.get(a.name)
            if st is None or not st.has_min_max:
                return True
            if not b.value.is_valid:
                return False  # a comparison with null is null: no row passes
            v = b.value.cast(types[a.name]).as_py()
            lo, hi = st.min, st.max
            return bool({"equal": lo <= v <= hi, "less": lo < v, "less_equal": lo <= v,
                         "greater": hi > v, "greater_equal": hi >= v}[fn])
        if fn == "is_in" and isinstance(tree.args[0], Field) and tree.options is not None:
            st = stats.get(tree.args[0].name)
            values = tree.options.get("value_set")
            if st is None or not st.has_min_max or not isinstance(values, list) \
                    or any(x is None for x in values):
                return True
            typ = types[tree.args[0].name]
            return any(st.min <= pa.scalar(x).cast(typ).as_py() <= st.max for x in values)
    except Exception:  # incomparable statistics (time zones, say): keep the row group
        return True
    return True


# ---- a compiled filter --------------------------------------------------------------------------


@dataclass(frozen=True)
class QueryFilter:
    """A query's ``filter=`` expression, checked and analysed for one table."""

    expression: pc.Expression
    fields: list[str]
    """Columns the expression reads (every column when it cannot tell)."""
    key_ranges: tuple[Range, ...] | None
    """Ranges of the first row-key field outside which no row passes (None: unknown)."""
    tree: Node | None
    """The tree row groups are pruned by (None: no statistics pruning)."""
    types: dict[str, pa.DataType] = field(default_factory=dict)
    keys_only: bool = False
    """The expression constrains only the first row-key field, exactly as ``key_ranges``
    says: a read restricted to those ranges already holds just the rows that pass."""
    blooms: dict[str, tuple[int, ...]] = field(default_factory=dict)
    """Hashes of the expression's point values on columns with Parquet bloom filters, by
    column (sediment.query.skipindex): row groups whose filters hold none are pruned when
    ``tree`` allows pruning."""

    def row_groups(self, metadata: pq.FileMetaData, groups: list[int]) -> list[int]:
        """The row groups whose statistics do not rule every row out."""
        if self.tree is None or not groups:
            return groups
        index = {}
        for i in range(metadata.num_columns):
            col = metadata.schema.column(i)
            if col.path in self.types:
                index[col.path] = i
        if not index:
            return groups
        out = []
        for g in groups:
            rg = metadata.row_group(g)
            stats = {name: rg.column(i).statistics for name, i in index.items()}
            if _may(self.tree, stats, self.types):
                out.append(g)
        return out

    def apply(self, data: pa.Table) -> pa.Table:
        return data.filter(self.expression) if data.num_rows else data

    def apply_batches(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for b in batches:
            # what RecordBatch.filter(expression) does, less its empty answer, which pyarrow
            # before 26 fails to build (IndexError): the same work on every version
            out = pa.Table.from_batches([b]).filter(self.expression)
            if out.num_rows:
                yield out.combine_chunks().to_batches()[0]


def check_size(tree: Node, what: str, error: type[QueryError]) -> None:
    """Raise ``error`` (a QueryError) when the tree is past the limits every filter is held
    to (see :mod:`sediment.query.expressions`): Arrow would crash or crawl on it."""
    depth, nodes = tree_shape(tree)
    if depth > MAX_FILTER_DEPTH:
        raise error(f"{what} nests {depth} levels deep (at most {MAX_FILTER_DEPTH}): "
                    f"flatten it")
    if nodes > MAX_FILTER_NODES:
        raise error(f"{what} has {nodes} parts (at most {MAX_FILTER_NODES}): for many values "
                    f"of one field use is_in (--where: field IN (...))")
    values = in_values(tree)
    if values > MAX_FILTER_VALUES:
        raise error(f"{what} lists {values} is_in values (at most {MAX_FILTER_VALUES})")


def filter_expression(expression: Any, schema: Schema, table: str) -> pc.Expression:
    """What a ``filter=`` argument says, as a pyarrow expression: an expression as it is,
    ``--where`` text (``"status >= 500"``) parsed against the table's schema, so that every
    route that takes a filter (local, remote, the CLI) takes the same text. Raises
    WhereError naming the table for text that does not parse (or is past the limits),
    QueryError for anything else."""
    if isinstance(expression, str):
        try:
            return parse_where(expression, schema.to_arrow())
        except WhereError as e:
            raise WhereError(f"filter on table {table}: {str(e).removeprefix('where: ')}"
                             ) from None
    if not isinstance(expression, pc.Expression):
        raise QueryError(f"filter must be a pyarrow.compute.Expression such as "
                         f"pc.field('v') > 3, or --where text such as \"v > 3\", "
                         f"not {type(expression).__name__}")
    return expression


def compile_filter(expression: Any, schema: Schema, table: str, *,
                   record_by_record: bool) -> QueryFilter:
    """Check ``expression`` (an expression or ``--where`` text: :func:`filter_expression`)
    against the table's schema and analyse it.

    ``record_by_record``: whether every iterator keeps or drops each record on its own (then
    row groups may be pruned by statistics on any column). Raises QueryError: not an
    expression, one too big or too deeply nested (past MAX_FILTER_NODES or
    MAX_FILTER_DEPTH), an unknown field (named), or an expression Arrow cannot evaluate to
    booleans on the table's columns (mismatched types, an unknown function, a number).
    """
    expression = filter_expression(expression, schema, table)
    tree = decompose(expression)
    check_size(tree, f"filter on table {table}", QueryError)
    names = field_names(tree)
    if names is not None:
        unknown = sorted(n for n in names if n not in schema.field_names)
        if unknown:
            raise QueryError(f"filter on table {table} names no column {unknown[0]!r} "
                             f"(columns: {', '.join(schema.field_names)})")
    arrow = schema.to_arrow()
    types = {f.name: f.type for f in arrow}
    if not _plainly_boolean(tree, types):
        try:  # an unknown function, a non-boolean result, mismatched types: Arrow says which
            arrow.empty_table().filter(expression)
        except pa.ArrowException as e:
            raise QueryError(f"filter on table {table} cannot be evaluated: {e}") from None
    first = schema.row_keys[0]
    intervals = key_intervals(tree, first.name, first.type)
    return QueryFilter(
        expression,
        [n for n in schema.field_names if names is None or n in names],
        None if intervals is None else intervals_to_ranges(intervals),
        tree if record_by_record and names else None,
        types,
        intervals is not None and keys_only(tree, first.name))
