"""Combining iterators: aggregation per key and keep-latest per row key.

Both group *runs* of equal key values: the input is one partition's stream sorted by (row keys,
sort keys), so equal keys are adjacent and a group is a run of rows. Runs are found with
vectorised comparisons of each row with the previous one; groups are reduced with Arrow's hash
aggregation (keyed by run number, so it keeps run order) and ``take``. A run may straddle batches:
the trailing run of each batch is held back and prepended to the next one, and flushed at the
end; a batch that only continues the held-back run is appended to it without any copying.

- ``{"type": "aggregate", "functions": {"count": "sum", "tags": "map_sum", ...}}``: rows with
  equal row keys and sort keys combine into one. Each listed value field gets its function:
  ``sum``, ``min``, ``max`` (nulls skipped; null when every value is null), ``last`` (the value
  of the last row in stream order, null or not), or ``map_sum``/``map_min``/``map_max`` for
  ``map<K, V>`` fields (maps combine key by key with the function on V; a null map is skipped,
  the result is null only when every map of the group is null; keys come out sorted). Value
  fields not listed take ``last``. Sums wrap around on overflow of the field's type.
  ``concat`` (string and binary fields) joins the group's non-null values in stream order with
  no separator (null when every value is null). A combined record keeps one sequence (its
  latest record's), so with ``concat`` compaction merges only files consecutive in commit
  order (``needs_consecutive_inputs``; see ``sediment.compaction.strategy``); ``sum``, ``min``,
  ``max`` and ``last`` do not depend on it. ``"group_by": ["f", ...]`` (value fields) splits
  the groups further: rows combine only when those fields are equal too (null equal to null),
  and the fields keep their value; a key's groups come out in the order of their last records
  (each combined record stands where its latest one stood, so the order does not depend on
  how far compaction got).
- ``{"type": "keep_latest", "by": "timestamp"}``: one row per row key (sort keys not part of
  the key): the one with the greatest ``by`` (null below every value; ties: the last in stream
  order).

Stream order among equal keys is commit order, then input position (``sediment.files.sequence``):
``last`` and keep-latest's ties pick the latest record, the same for every reader.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sediment.errors import PropertyError
from sediment.iterators.base import RecordIterator, repeated_names
from sediment.schema import Schema

FUNCTIONS = ("sum", "min", "max", "last", "concat", "map_sum", "map_min", "map_max")
_GROUP_COL = "__sediment_group"


# ---- runs of equal keys ------------------------------------------------------------------------
def key_changes(data: pa.Table | pa.RecordBatch, names: Sequence[str]) -> pa.BooleanArray:
    """Bool per row but the first (``num_rows - 1`` of them, none null: keys never are): does
    the row's key (``names``) differ from the previous row's? Compared and combined in Arrow,
    without a conversion to numpy per field."""
    n = data.num_rows
    if n < 2:
        return pa.array([], type=pa.bool_())
    out = None
    for name in names:
        col = data.column(name)
        ne = pc.not_equal(col.slice(1), col.slice(0, n - 1))
        out = ne if out is None else pc.or_(out, ne)
    return _array(out) if out is not None else pa.array(np.zeros(n - 1, dtype=bool))


def starts_new_run(data: pa.Table | pa.RecordBatch, names: Sequence[str]) -> np.ndarray:
    """Bool per row: does the row's key (``names``) differ from the previous row's? Row 0: True."""
    n = data.num_rows
    change = np.zeros(n, dtype=bool)
    if n:
        change[0] = True
    if n > 1:
        ne = key_changes(data, names)
        change[1:] = np.asarray(ne.to_numpy(zero_copy_only=False), dtype=bool)
    return change


def same_key(a: pa.RecordBatch, i: int, b: pa.RecordBatch, j: int,
              names: Sequence[str]) -> bool:
    """Do row ``i`` of ``a`` and row ``j`` of ``b`` have equal ``names``?"""
    return all(pc.equal(a.column(n).slice(i, 1), b.column(n).slice(j, 1))[0].as_py()
               for n in names)


def _array(col: pa.ChunkedArray | pa.Array) -> pa.Array:
    if isinstance(col, pa.Array):
        return col
    if col.num_chunks == 1:
        return col.chunk(0)
    return pa.concat_arrays(col.chunks) if col.num_chunks else pa.array([], type=col.type)


class RunCombiner(RecordIterator):
    """Reduces each run of rows with equal :meth:`group_names` values to one row."""

    schema: Schema | None

    @abstractmethod
    def group_names(self) -> list[str]:
        """The fields whose equal values make a group."""

    @abstractmethod
    def reduce(self, table: pa.Table, starts: np.ndarray, group: np.ndarray) -> pa.Table:
        """One row per group of ``table`` (only whole groups; ``starts``: first row of each,
        ``group``: group number of each row), in group order, with ``table``'s schema."""

    def apply(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        if self.schema is None:
            raise PropertyError(f"{type(self).__name__} iterator built without the table "
                                "schema cannot run")
        names = self.group_names()
        held: list[pa.RecordBatch] = []  # the trailing (maybe unfinished) group
        for b in batches:
            if not b.num_rows:
                continue
            change = starts_new_run(b, names)
            if held:
                change[0] = not same_key(held[-1], held[-1].num_rows - 1, b, 0, names)
            starts = np.flatnonzero(change)
            if not len(starts):  # continues the held-back group
                held.append(b)
                continue
            last = int(starts[-1])
            done = held + ([b.slice(0, last)] if last else [])
            held = [b.slice(last)]
            if done:
                yield from self._combine(done, names)
        if held:
            yield from self._combine(held, names)

    def _combine(self, batches: list[pa.RecordBatch], names: Sequence[str]
                 ) -> Iterator[pa.RecordBatch]:
        table = pa.Table.from_batches(batches).combine_chunks()
        change = starts_new_run(table, names)
        starts = np.flatnonzero(change)
        group = np.cumsum(change, dtype=np.int64) - 1
        out = self.reduce(table, starts, group)
        yield from out.combine_chunks().to_batches()


# ---- aggregation ---------------------------------------------------------------------------------
def _sums(t: pa.DataType) -> bool:
    return pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t)


def _orders(t: pa.DataType) -> bool:
    return (_sums(t) or pa.types.is_boolean(t) or pa.types.is_string(t)
            or pa.types.is_large_string(t) or pa.types.is_binary(t)
            or pa.types.is_large_binary(t) or pa.types.is_temporal(t))


def _concats(t: pa.DataType) -> bool:
    return (pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t)
            or pa.types.is_large_binary(t))


def _groups_by(t: pa.DataType) -> bool:
    """Whether values of ``t`` can be compared for equality to group by (no nested types)."""
    return not pa.types.is_nested(t) and not pa.types.is_dictionary(t)


def _check_function(name: str, fn: str, field: pa.Field) -> None:
    t = field.type
    if fn in ("map_sum", "map_min", "map_max"):
        if not pa.types.is_map(t):
            raise PropertyError(f"aggregate: {fn} on field {name!r} needs a map field, "
                                f"not {t}")
        fn, t = fn[4:], t.item_type
        name = f"{name} (map values)"
    if fn == "sum" and not _sums(t):
        raise PropertyError(f"aggregate: sum on field {name!r} needs a numeric type, not {t}")
    if fn == "concat" and not _concats(t):
        raise PropertyError(f"aggregate: concat on field {name!r} needs a string or binary "
                            f"type, not {t}")
    if fn in ("min", "max") and not _orders(t):
        raise PropertyError(f"aggregate: {fn} on field {name!r} needs an ordered scalar type "
                            f"(number, string, binary, temporal, bool), not {t}")


def _group_aggregate(columns: Mapping[str, pa.ChunkedArray | pa.Array], by: Sequence[str],
                     aggregates: Sequence[tuple[str, str]]) -> pa.Table:
    """Hash aggregation in order of first appearance of each ``by`` value."""
    table = pa.table(dict(columns))
    return table.group_by(list(by), use_threads=False).aggregate(list(aggregates))


def _combine_maps(col: pa.ChunkedArray, group: np.ndarray, n_groups: int, fn: str,
                  typ: pa.MapType) -> pa.Array:
    """Key-by-key ``fn`` (sum/min/max) of the maps of each group (``group``: group number of
    each row, 0 .. n_groups - 1)."""
    arr = _array(col)
    offsets = np.asarray(arr.offsets.to_numpy(zero_copy_only=False), dtype=np.int64)
    valid = np.asarray(arr.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
    base, end = int(offsets[0]), int(offsets[-1])
    # ``keys``/``items`` are the unsliced children: entries [base, end) belong to this array
    entry_row = np.repeat(np.arange(len(arr)), np.diff(offsets))
    keep = valid[entry_row]  # a null map's segment (normally empty) is not data
    keys = arr.keys.slice(base, end - base).filter(pa.array(keep))
    items = arr.items.slice(base, end - base).filter(pa.array(keep))
    agg = _group_aggregate({"g": group[entry_row[keep]], "k": keys, "v": items}, ["g", "k"],
                           [("v", fn)])
    agg = agg.take(pc.sort_indices(agg, sort_keys=[("g", "ascending"), ("k", "ascending")]))
    counts = np.bincount(agg.column("g").to_numpy(), minlength=n_groups)
    new_offsets = np.zeros(n_groups + 1, dtype=np.int32)
    np.cumsum(counts, out=new_offsets[1:])
    values = _array(agg.column(f"v_{fn}")).cast(typ.item_type, safe=False)
    group_valid = np.bincount(group, weights=valid, minlength=n_groups) > 0
    return pa.MapArray.from_arrays(pa.array(new_offsets, type=pa.int32()),
                                   _array(agg.column("k")), values, type=typ,
                                   mask=pa.array(~group_valid))


def _concat(col: pa.ChunkedArray, group: np.ndarray, order: np.ndarray, n_groups: int
            ) -> pa.Array:
    """The non-null values of each group joined in stream order (``order``: row numbers
    stably sorted by group); null when every value of the group is null."""
    values = _array(col).take(pa.array(order))
    valid = np.asarray(values.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
    kept = values.filter(pa.array(valid))
    counts = np.bincount(group[order][valid], minlength=n_groups)
    offsets = np.zeros(n_groups + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    lists = pa.LargeListArray.from_arrays(pa.array(offsets, type=pa.int64()), kept)
    empty = "" if pa.types.is_string(col.type) or pa.types.is_large_string(col.type) else b""
    joined = pc.binary_join(lists, pa.scalar(empty, type=col.type))
    return pc.if_else(pa.array(counts > 0), joined, pa.scalar(None, type=col.type))


def _subgroups(table: pa.Table, group: np.ndarray, names: Sequence[str]
               ) -> tuple[np.ndarray, int]:
    """Split each run (``group``) further by the values of ``names`` (null equal to null):
    the subgroup number of each row and their count. Subgroups are numbered in the order of
    their last records: a combined record stands where its latest record stood and takes its
    sequence (``last``), so output stays sorted by (keys, sequence), and the order is the same
    before and after any compaction."""
    codes = [group]
    for name in names:
        enc = pc.dictionary_encode(_array(table.column(name)), null_encoding="encode")
        codes.append(np.asarray(enc.indices.to_numpy(zero_copy_only=False), dtype=np.int64))
    _, inverse = np.unique(np.stack(codes, axis=1), axis=0, return_inverse=True)
    inverse = np.asarray(inverse).reshape(-1)
    n = int(inverse.max()) + 1 if len(inverse) else 0
    last = np.zeros(n, dtype=np.int64)
    np.maximum.at(last, inverse, np.arange(len(inverse), dtype=np.int64))
    rank = np.empty(n, dtype=np.int64)
    rank[np.argsort(last, kind="stable")] = np.arange(n)
    return rank[inverse], n


class Aggregate(RunCombiner):
    """Combine rows with equal row keys and sort keys, a function per value field."""

    def __init__(self, functions: Mapping[str, str] | Iterable[tuple[str, str]],
                 schema: Schema | None = None, *, group_by: Sequence[str] = ()) -> None:
        twice = repeated_names(functions)
        if twice:
            raise PropertyError(f"aggregate: field {twice[0]!r} is given more than one "
                                "function; name each field once")
        self.functions = dict(functions)
        self.schema = schema
        self.group_by = list(group_by)
        self._check_group_by()
        for name, fn in self.functions.items():
            if fn not in FUNCTIONS:
                raise PropertyError(f"aggregate: unknown function {fn!r} for field {name!r} "
                                    f"({', '.join(FUNCTIONS)})")
            if schema is None:
                continue
            if name not in schema.field_names:
                raise PropertyError(f"aggregate: unknown field {name!r} (fields: "
                                    f"{', '.join(schema.field_names)})")
            if name in schema.key_names:
                raise PropertyError(f"aggregate: field {name!r} is a key field; only value "
                                    "fields take functions")
            _check_function(name, fn, schema.field(name))

    def _check_group_by(self) -> None:
        gb = self.group_by
        if not all(isinstance(n, str) and n for n in gb):
            raise PropertyError("aggregate: 'group_by' must be a list of field names")
        twice = sorted({n for n in gb if gb.count(n) > 1})
        if twice:
            raise PropertyError(f"aggregate: field {twice[0]!r} is named twice in 'group_by'")
        both = [n for n in gb if n in self.functions]
        if both:
            raise PropertyError(f"aggregate: field {both[0]!r} is both grouped by and given a "
                                "function; a group_by field keeps its value")
        if self.schema is None:
            return
        for name in gb:
            if name not in self.schema.field_names:
                raise PropertyError(f"aggregate: unknown field {name!r} in 'group_by' "
                                    f"(fields: {', '.join(self.schema.field_names)})")
            if name in self.schema.key_names:
                raise PropertyError(f"aggregate: field {name!r} in 'group_by' is a key field; "
                                    "rows are always grouped by the row and sort keys")
            t = self.schema.field(name).type
            if not _groups_by(t):
                raise PropertyError(f"aggregate: cannot group by field {name!r} of type {t}")

    def __repr__(self) -> str:
        if self.group_by:
            return f"Aggregate({self.functions!r}, group_by={self.group_by!r})"
        return f"Aggregate({self.functions!r})"

    def group_names(self) -> list[str]:
        assert self.schema is not None
        return self.schema.key_names

    def fields(self) -> set[str]:
        keys = set(self.schema.key_names) if self.schema is not None else set()
        return keys | set(self.functions) | set(self.group_by)

    def needs_consecutive_inputs(self) -> bool:
        return "concat" in self.functions.values()

    def reduce(self, table: pa.Table, starts: np.ndarray, group: np.ndarray) -> pa.Table:
        assert self.schema is not None
        keys = set(self.schema.key_names) | set(self.group_by)
        if self.group_by:  # runs of equal keys split further by the group_by values
            group, n = _subgroups(table, group, self.group_by)
            order = np.argsort(group, kind="stable")
            offsets = np.zeros(n + 1, dtype=np.int64)
            np.cumsum(np.bincount(group, minlength=n), out=offsets[1:])
            firsts, lasts = order[offsets[:-1]], order[offsets[1:] - 1]
        else:  # runs are the groups, in order
            n, order = len(starts), np.arange(table.num_rows)
            firsts, lasts = starts, np.append(starts[1:], table.num_rows) - 1
        scalar = [(c, self.functions[c]) for c in table.column_names
                  if c not in keys and self.functions.get(c) in ("sum", "min", "max")]
        agg = None
        if scalar:
            cols = {f"c{i}": table.column(c) for i, (c, _) in enumerate(scalar)}
            agg = _group_aggregate({_GROUP_COL: group, **cols}, [_GROUP_COL],
                                   [(f"c{i}", fn) for i, (_, fn) in enumerate(scalar)])
            got = agg.column(_GROUP_COL).to_numpy()
            if not np.array_equal(got, np.arange(n)):  # not in group order: sort
                agg = agg.take(pc.sort_indices(agg, sort_keys=[(_GROUP_COL, "ascending")]))
        arrays = []
        for c in table.column_names:
            col, fn = table.column(c), self.functions.get(c, "last")
            if c in keys:
                arrays.append(col.take(firsts))
            elif fn in ("sum", "min", "max"):
                assert agg is not None
                i = next(i for i, (name, _) in enumerate(scalar) if name == c)
                arrays.append(agg.column(f"c{i}_{fn}").cast(col.type, safe=False))
            elif fn == "concat":
                arrays.append(_concat(col, group, order, n))
            elif fn.startswith("map_"):
                arrays.append(_combine_maps(col, group, n, fn[4:], col.type))
            else:
                arrays.append(col.take(lasts))
        return pa.Table.from_arrays(arrays, schema=table.schema)


def latest_last_options() -> pc.SortOptions:
    """Sort options for columns ``g`` then ``b``, ascending, ``b``'s nulls first (``g`` has
    none), as keep-latest sorts. pyarrow 25 took the null placement into each sort key and
    deprecated the global option; before 25 only the global option exists (a three-item key
    fails to unpack, a ``ValueError``). Built once, so the choice costs nothing per batch."""
    try:
        return pc.SortOptions([("g", "ascending"), ("b", "ascending", "at_start")])
    except ValueError:
        return pc.SortOptions([("g", "ascending"), ("b", "ascending")],
                              null_placement="at_start")


_LATEST_LAST = latest_last_options()


class KeepLatest(RunCombiner):
    """One row per row key: the one with the greatest ``by`` (ties: last in stream order)."""

    def __init__(self, by: str, schema: Schema | None = None) -> None:
        self.by = by
        self.schema = schema
        if schema is not None:
            if by not in schema.field_names:
                raise PropertyError(f"keep_latest: unknown field {by!r} for 'by' (fields: "
                                    f"{', '.join(schema.field_names)})")
            t = schema.field(by).type
            if not _orders(t):
                raise PropertyError(f"keep_latest: field {by!r} of type {t} has no order")

    def __repr__(self) -> str:
        return f"KeepLatest(by={self.by!r})"

    def group_names(self) -> list[str]:
        assert self.schema is not None
        return self.schema.row_key_names

    def fields(self) -> set[str]:
        keys = set(self.schema.row_key_names) if self.schema is not None else set()
        return keys | {self.by}

    def reduce(self, table: pa.Table, starts: np.ndarray, group: np.ndarray) -> pa.Table:
        if len(starts) == table.num_rows:
            return table
        # stable sort by (group, by) with nulls first: a group's last row is its latest
        order = pc.sort_indices(pa.table({"g": group, "b": table.column(self.by)}),
                                options=_LATEST_LAST).to_numpy()
        g = group[order]
        last = np.append(g[1:] != g[:-1], True)
        return table.take(order[last])


# ---- configs -----------------------------------------------------------------------------------
def _check_options(cfg: Mapping[str, Any], kind: str, allowed: set[str]) -> None:
    extra = sorted(set(cfg) - allowed - {"type"})
    if extra:
        raise PropertyError(f"{kind} iterator: unknown option(s) {', '.join(map(repr, extra))} "
                            f"(options: {', '.join(sorted(allowed))})")


def aggregate_from_config(cfg: Mapping[str, Any], schema: Schema | None) -> Aggregate:
    _check_options(cfg, "aggregate", {"functions", "group_by"})
    functions = cfg.get("functions", {})
    if not isinstance(functions, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in functions.items()):
        raise PropertyError("aggregate iterator: 'functions' must be an object of "
                            "field name -> function name")
    group_by = cfg.get("group_by", [])
    if not isinstance(group_by, list) or not all(isinstance(n, str) for n in group_by):
        raise PropertyError("aggregate iterator: 'group_by' must be a list of field names")
    return Aggregate(functions, schema, group_by=group_by)


def keep_latest_from_config(cfg: Mapping[str, Any], schema: Schema | None) -> KeepLatest:
    _check_options(cfg, "keep_latest", {"by"})
    by = cfg.get("by")
    if not isinstance(by, str) or not by:
        raise PropertyError("keep_latest iterator needs 'by': the field whose greatest value "
                            "wins")
    return KeepLatest(by, schema)

