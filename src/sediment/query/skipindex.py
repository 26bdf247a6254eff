"""Skip indexes: a filter's point values on a column with bloom filters narrow the plan.

A table's ``parquet.bloom_columns`` gives those columns Parquet's own bloom filter in every
row group (sediment.files.bloom). A filter pinning such a column to a few values
(``v == x``, ``v.isin([...])``, and/or of them: :func:`sediment.query.filters.point_values`)
then rules out the row groups, and files, whose filters hold none of them. The values are
hashed once per query; each file's filters are checked for all its row groups at once.

Never changing an answer decides how the narrowing is used:

* **Records judged one by one** (no merge rule, iterators that keep or drop each record on
  its own, no upserted record in the leaf): a record passes or fails on its own values, so a
  row group (and a file: :func:`narrow_plan`) without the values holds no record of the
  answer. The executor prunes row groups (``QueryFilter.blooms``); the plan drops files.
* **Records merged by key** (a merge rule, upserts, iterators combining records): a key's
  answer is made of all its records, so a file without the value may still hold the newer
  record that replaces a matching one. The index then only finds *candidate keys*: the keys
  with a record holding one of the values, read from the row groups the filters keep; the
  plan becomes an exact-key read of those keys, which fetches every record of each (all
  files of the key's leaf and its ancestors, through the key filters) before merging, so a
  stale record is never returned. This is sound when the merged value of the column is
  always one of its records' values (last, first, partial, keep-latest, aggregate functions
  that pick: last, min, max), which :func:`picks_values` checks; else (a sum, a custom
  iterator) the plan is left as it is.

On merged tables a comparison of a column with a literal (``v >= 10``) finds candidate keys
the same way from the row groups whose min/max statistics may hold a match (on tables judged
record by record the executor prunes row groups by statistics already): worth it where the
column's values are clustered (times, counters), given up where they are not.

Files written without the filters are candidates, whole.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sediment.core.model import FileReference
from sediment.core.state import TableState
from sediment.files.bloom import value_hashes
from sediment.iterators.base import AgeOff, RecordIterator, RowFilter
from sediment.iterators.combine import Aggregate, KeepLatest
from sediment.iterators.merge_rules import KeepFirst, KeepLast, PartialUpdate
from sediment.properties import bloom_columns, defaults
from sediment.query.executor import Executor
from sediment.query.expressions import MAX_FILTER_VALUES, Call, Field, Literal, Node, decompose
from sediment.query.filters import QueryFilter
from sediment.query.planner import QueryPlan, SubQuery, normalise_ranges, plan_query
from sediment.schema import Schema

MAX_CANDIDATE_KEYS = 10_000
"""Candidate keys past which a merged read gives the index up and reads as without it (each
candidate is an exact-key read: many of them cost more than a scan)."""

MAX_KEPT_FRACTION = 0.25
"""Share of row groups the filters may keep before a merged read gives the index up (a
filter matching that much is cheaper to scan)."""

_PICKING = frozenset({"last", "min", "max"})


def _point_value(value: pa.Scalar, typ: pa.DataType) -> Any:
    """A literal as the value a column of type ``typ`` stores (temporal: the integer Arrow
    stores, dates included), or raises when it cannot be cast exactly."""
    if not value.is_valid:
        raise ValueError("null")
    cast = value.cast(typ)  # safe: raises on overflow or truncation
    if pa.types.is_temporal(typ):
        storage = pa.int32() if typ.bit_width == 32 else pa.int64()
        return pa.array([cast], typ).view(storage)[0].as_py()
    v = cast.as_py()
    if isinstance(v, float) and math.isnan(v):
        raise ValueError("NaN")
    return v


def point_values(tree: Node, name: str, typ: pa.DataType) -> list[Any] | None:
    """The values of field ``name`` outside which the expression is never true, when it pins
    the field to a few values (``==``, ``is_in``, or/and of them); None otherwise. Values are
    the model's (temporal as integers); a null among ``is_in``'s values (which matches null
    fields) gives None: bloom filters hold no nulls."""
    if not isinstance(tree, Call):
        return None
    fn = tree.name
    if fn in ("and", "and_kleene"):
        found = [p for a in tree.args if (p := point_values(a, name, typ)) is not None]
        if not found:
            return None
        out = set(found[0])
        for p in found[1:]:
            out &= set(p)
        return sorted(out, key=repr)
    if fn in ("or", "or_kleene"):
        acc: list[Any] = []
        for a in tree.args:
            part = point_values(a, name, typ)
            if part is None:
                return None
            acc += part
        return None if len(acc) > MAX_FILTER_VALUES else acc
    if fn == "equal" and len(tree.args) == 2:
        a, b = tree.args
        if isinstance(b, Field) and isinstance(a, Literal):
            a, b = b, a
        if isinstance(a, Field) and a.name == name and isinstance(b, Literal):
            try:
                return [_point_value(b.value, typ)]
            except Exception:
                return None
        return None
    if fn == "is_in" and len(tree.args) == 1 and isinstance(tree.args[0], Field) \
            and tree.args[0].name == name and tree.options is not None:
        values = tree.options.get("value_set")
        if not isinstance(values, list) or any(v is None for v in values):
            return None
        try:
            return [_point_value(pa.scalar(v), typ) for v in values]
        except Exception:
            return None
    return None


@dataclass(frozen=True, slots=True)
class PointIndex:
    """A filter's values on one column with bloom filters, hashed as Parquet hashes them."""

    column: str
    values: tuple[Any, ...]
    hashes: tuple[int, ...]


def point_index(query_filter: QueryFilter | None, schema: Schema, text: str
                ) -> PointIndex | None:
    """The filter's most selective point constraint on a column of ``parquet.bloom_columns``
    (``text``), or None."""
    if query_filter is None:
        return None
    tree = decompose(query_filter.expression)
    best: PointIndex | None = None
    arrow = schema.to_arrow()
    for column in bloom_columns(schema, text):
        typ = arrow.field(column).type
        values = point_values(tree, column, typ)
        if values is None:
            continue
        # -0.0 == 0.0, but neither hashes nor is_in's lookups find one for the other
        values += [-v for v in values if isinstance(v, float) and v == 0.0]
        hashes = value_hashes(values, typ)
        if hashes is not None and (best is None or len(hashes) < len(best.hashes)):
            best = PointIndex(column, tuple(values), tuple(hashes))
    return best


_FLIP = {"less": "greater", "less_equal": "greater_equal", "greater": "less",
         "greater_equal": "less_equal", "equal": "equal"}


@dataclass(frozen=True, slots=True)
class RangeIndex:
    """A filter's comparison of one column with a literal (``v >= 10``), which the row
    groups' min/max statistics rule row groups out by."""

    column: str
    op: str
    """A pyarrow.compute comparison, the column on its left: equal, less, greater, ..."""
    value: pa.Scalar
    pruner: QueryFilter
    """The comparison alone, to prune row groups by (``QueryFilter.row_groups``)."""

    def mask(self, column: pa.ChunkedArray) -> pa.ChunkedArray:
        return pc.fill_null(getattr(pc, self.op)(column, self.value), False)


def range_index(query_filter: QueryFilter, schema: Schema) -> RangeIndex | None:
    """The first comparison of a column (other than the first row-key field, which the key
    ranges serve) with a literal among the filter's conjuncts, or None."""
    tree = decompose(query_filter.expression)
    parts = tree.args if isinstance(tree, Call) and tree.name in ("and", "and_kleene") \
        else (tree,)
    types = {f.name: f.type for f in schema.to_arrow()}
    for part in parts:
        if not (isinstance(part, Call) and part.name in _FLIP and len(part.args) == 2):
            continue
        a, b = part.args
        op = part.name
        if isinstance(b, Field) and isinstance(a, Literal):
            a, b, op = b, a, _FLIP[op]
        if not (isinstance(a, Field) and isinstance(b, Literal)) or \
                a.name == schema.row_key_names[0] or a.name not in types:
            continue
        try:
            value = b.value.cast(types[a.name])
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
            continue
        if not value.is_valid:
            continue
        pruner = QueryFilter(query_filter.expression, [a.name], None,
                             Call(op, (a, Literal(value)), None, None), types)
        return RangeIndex(a.name, op, value, pruner)
    return None


def picks_values(iterators: Sequence[RecordIterator], column: str) -> bool:
    """Whether every iterator's output value of ``column`` is one of its input records'
    (or the record is dropped): then a key whose answer holds a value has a record with it."""
    for it in iterators:
        if isinstance(it, AgeOff | RowFilter | KeepLast | KeepFirst | PartialUpdate |
                      KeepLatest):
            continue
        if isinstance(it, Aggregate) and it.functions.get(column, "last") in _PICKING:
            continue
        return False
    return True


def _record_by_record(iterators: Sequence[RecordIterator]) -> bool:
    return all(isinstance(it, AgeOff | RowFilter) for it in iterators)


def kept_groups(executor: Executor, ref: FileReference, sub: SubQuery,
                index: PointIndex | RangeIndex) -> np.ndarray | None:
    """Per row group of the file, whether it may hold a record the index selects: by its
    bloom filters (a PointIndex) or its min/max statistics (a RangeIndex); None when the file
    has no bloom filters for the column (or reads it under another name)."""
    footer = executor.footers.cached(ref.filename)
    if footer is None:
        _, footer = executor.footers.open(ref.filename, sub.sums.get(ref.filename))
    if not executor.column_map(ref, footer).identity:
        return None
    groups = footer.metadata.num_row_groups
    if isinstance(index, RangeIndex):
        kept = np.zeros(groups, dtype=bool)
        kept[index.pruner.row_groups(footer.metadata, list(range(groups)))] = True
        return kept
    blooms = executor.footers.blooms(ref.filename, index.column, sub.sums.get(ref.filename))
    if blooms is None or len(blooms.starts) != groups:
        return None
    return blooms.may_contain(index.hashes)


def narrow_plan(state: TableState, plan: QueryPlan, executor: Executor,
                query_filter: QueryFilter | None, iterators: Sequence[RecordIterator],
                table: str) -> tuple[QueryPlan, QueryFilter | None]:
    """The plan narrowed by the filter's skip index (see the module docstring), and the
    filter carrying the point hashes the executor prunes row groups by; both unchanged when
    the filter neither pins a column with bloom filters nor compares a column with a
    literal."""
    schema = state.schema
    assert schema is not None
    text = str({**defaults(), **state.properties}["parquet.bloom_columns"])
    if query_filter is None:
        return plan, query_filter
    points = point_index(query_filter, schema, text) if text.strip() else None
    index = points or range_index(query_filter, schema)
    if index is None:
        return plan, query_filter
    if points is not None:
        query_filter = replace(query_filter, blooms={points.column: points.hashes})
    plain = _record_by_record(iterators)
    merged = picks_values(iterators, index.column)
    subs: list[SubQuery] = []
    candidates: list[SubQuery] = []
    for sub in plan.subqueries:
        if plain and not sub.upserts:
            if points is None:  # (the executor prunes row groups by statistics)
                subs.append(sub)
                continue
            refs = tuple(r for r in sub.references
                         if (k := kept_groups(executor, r, sub, index)) is None or k.any())
            if refs:
                subs.append(replace(sub, references=refs))
        elif merged:
            candidates.append(sub)
        else:
            subs.append(sub)
    if candidates:
        keys = candidate_keys(executor, candidates, index, schema)
        if keys is None:
            subs += candidates
        elif keys:
            ranges = normalise_ranges(state, keys, None, table)
            subs += plan_query(state, ranges).subqueries
    subs.sort(key=lambda s: _order(plan, s))
    return QueryPlan(plan.version, tuple(subs)), query_filter


def _order(plan: QueryPlan, sub: SubQuery) -> int:
    """The place of a sub-query's leaf in the plan (leaves come in key order)."""
    for i, s in enumerate(plan.subqueries):
        if s.leaf_id == sub.leaf_id:
            return i
    return len(plan.subqueries)


def candidate_keys(executor: Executor, subs: Sequence[SubQuery],
                   index: PointIndex | RangeIndex, schema: Schema) -> list[Any] | None:
    """The row keys (tuples for several fields, else values) of records holding one of the
    index's values in the sub-queries' files, from the row groups the bloom filters keep;
    None when that is too many to be worth it (:data:`MAX_CANDIDATE_KEYS`,
    :data:`MAX_KEPT_FRACTION`) or the column cannot be compared with them."""
    names = schema.row_key_names
    columns = [*dict.fromkeys([*names, index.column])]
    if isinstance(index, PointIndex):
        typ = schema.to_arrow().field(index.column).type
        try:
            if pa.types.is_temporal(typ):  # the model's integers, as Arrow stores them
                wanted = pa.array(list(index.values), pa.int32() if typ.bit_width == 32
                                  else pa.int64()).view(typ)
            else:
                wanted = pa.array(list(index.values), typ)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
            return None

        def select(column: pa.ChunkedArray) -> pa.ChunkedArray:
            return pc.is_in(column, value_set=wanted)
    else:
        select = index.mask
    found: list[pa.Table] = []
    indexed = False
    for sub in subs:
        for ref in sub.references:
            got = _candidate_rows(executor, ref, sub, index, columns)
            if got is None:
                return None
            pieces, had = got
            indexed |= had
            for t in pieces:
                hit = t.filter(select(t.column(index.column)))
                if hit.num_rows:
                    found.append(hit.select(names))
            if sum(t.num_rows for t in found) > 4 * MAX_CANDIDATE_KEYS:
                return None
    if not indexed:
        return None  # no file has bloom filters yet: a scan is cheaper than two reads
    if not found:
        return []
    keys = pa.concat_tables(found).group_by(names).aggregate([])
    if keys.num_rows > MAX_CANDIDATE_KEYS:
        return None
    cols = [_model(keys.column(n)) for n in names]
    return cols[0] if len(names) == 1 else list(zip(*cols, strict=True))


def _model(column: pa.ChunkedArray) -> list[Any]:
    """A key column as Python values, which ``normalise_ranges`` checks and turns into the
    model's (temporal values as integers)."""
    return column.to_pylist()


def _candidate_rows(executor: Executor, ref: FileReference, sub: SubQuery,
                    index: PointIndex | RangeIndex, columns: list[str]
                    ) -> tuple[list[pa.Table], bool] | None:
    """The rows of the file's row groups that its bloom filters keep (inside the leaf and the
    sub-query's ranges; every row group of a file without filters), and whether it had
    filters; None when they keep too many to be worth it."""
    kept = kept_groups(executor, ref, sub, index)
    pf, footer, groups = executor.row_groups(ref, sub, executor.point_hashes(sub))
    if kept is not None:
        if len(groups) > 8 and kept[groups].mean() > MAX_KEPT_FRACTION:
            return None
        groups = [g for g in groups if kept[g]]
    return list(executor.read_groups(ref, sub, columns, groups, pf, footer)), \
        kept is not None
