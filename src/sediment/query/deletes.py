"""Applying deletions to records read: which of a leaf's merged records a delete removed.

A :class:`~sediment.core.deletions.Deletion` removes the records committed before it (a
sequence below its bound) in its key ranges that match its filter. Readers and compaction
call :meth:`Deletes.apply` on records that still carry their sequence column
(sediment.files.sequence), before the merge rule and the iterators, so a deleted record never
reaches them. Vectorised: exact keys are one ``is_in`` (one-field keys) or one semi-join
(composite keys) however many a delete names, other ranges one comparison each, the filter
one Arrow evaluation.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sediment.core.deletions import Deletion
from sediment.core.model import UPSERT_BIT
from sediment.core.regions import Range
from sediment.files.keys import range_mask
from sediment.files.sequence import SEQ
from sediment.files.slab_order import ordered_prefix
from sediment.files.upserts import complete_runs
from sediment.iterators.base import RecordIterator
from sediment.iterators.combine import Aggregate
from sediment.iterators.merge_rules import KeepFirst, KeepLast, PartialUpdate
from sediment.query.expressions import decompose, field_names
from sediment.query.lru import lru_get
from sediment.query.wire import from_wire
from sediment.schema import Schema

_ROW = "__sediment_row"
KEPT_DELETIONS = 256
"""Compiled deletions a table's reader keeps, the least recently used dropped first: a
long-lived server sees every delete ever committed, and each keeps its keys as a table (and,
once a lookup needed them, sorted)."""


@dataclass(frozen=True, slots=True)
class _Compiled:
    """One deletion ready to apply: its bound, exact keys as a table, other ranges, filter."""

    bound: int
    points: pa.Table | None
    """Exact whole row keys it deletes (one column per row-key field)."""
    ranges: tuple[Range, ...]
    everything: bool
    """No ranges: every row key."""
    expression: pc.Expression | None
    fields: frozenset[str]
    version: int
    """The deletion's version (its compiled forms are kept by it)."""


class Deletes:
    """Compiles a table's deletions once each (by version) and applies them to records."""

    def __init__(self, schema: Schema) -> None:
        self.schema = schema
        self.names = schema.row_key_names
        self._arrow = schema.to_arrow()
        self._compiled: OrderedDict[int, _Compiled] = OrderedDict()
        self._by_first: dict[int, tuple[pa.Table, np.ndarray | None]] = {}
        self._lock = threading.Lock()

    def fields(self, deletions: Sequence[Deletion]) -> set[str]:
        """Columns a read must fetch to apply ``deletions``: the row keys, and the fields
        their filters read."""
        out = set(self.names)
        for d in deletions:
            out |= self._compile(d).fields
        return out

    def _compile(self, d: Deletion) -> _Compiled:
        found = lru_get(self._compiled, self._lock, d.version, None)
        if found is not None:
            return found
        points: list[tuple[object, ...]] = []
        others: list[Range] = []
        n = len(self.names)
        for r in d.ranges or ():
            if r.start is not None and r.start == r.end and len(r.start) == n \
                    and r.start_inclusive and r.end_inclusive:
                points.append(r.start)
            else:
                others.append(r)
        table = None
        if points:
            table = pa.table({name: pa.array([p[i] for p in points],
                                             type=self._arrow.field(name).type)
                              for i, name in enumerate(self.names)})
        expression: pc.Expression | None = None
        fields: frozenset[str] = frozenset()
        if d.filter is not None:
            expression = from_wire(dict(d.filter), self._arrow)
            named = field_names(decompose(expression))
            fields = frozenset(self.schema.field_names if named is None else named)
        compiled = _Compiled(d.bound, table, tuple(others), d.ranges is None, expression,
                             fields, d.version)
        with self._lock:
            self._compiled[d.version] = compiled
            while len(self._compiled) > KEPT_DELETIONS:
                old, _ = self._compiled.popitem(last=False)
                self._by_first.pop(old, None)
        return compiled

    def apply(self, data: pa.Table, deletions: Sequence[Deletion],
              sparing: Collection[int] = (), merge: RecordIterator | None = None
              ) -> pa.Table:
        """``data`` (with its :data:`~sediment.files.sequence.SEQ` column) without the
        records ``deletions`` remove; those whose version is in ``sparing`` leave upserted
        records (compaction keeps what still hides older records in files it does not
        merge). ``merge``: the table's merge rule (``data`` then holds whole runs of record
        keys): a filter judges the record the rule makes of a key's records older than the
        delete and left by the deletes before it, and removes all of them or none, so the
        answer does not depend on how far compaction had combined them."""
        if not deletions or not data.num_rows:
            return data
        dead = np.zeros(data.num_rows, dtype=bool)
        seq = data.column(SEQ).to_numpy()
        upserted = (seq & UPSERT_BIT) != 0 if sparing else None
        for d in sorted(deletions, key=lambda d: d.version):  # in commit order
            c = self._compile(d)
            older = seq < c.bound
            if upserted is not None and d.version in sparing:
                older &= ~upserted
            if not older.any():
                continue
            hit = self._in_ranges(data, c)
            if c.expression is not None and merge is not None:
                # the rule's record of what earlier deletes left: a key deleted, then written
                # again, is judged by its new records alone
                hit &= self._merged_matching(data, older & hit & ~dead, c.expression, merge)
            elif c.expression is not None:
                hit &= self._matching(data, c.expression)
            dead |= older & hit
        return data.filter(pa.array(~dead)) if dead.any() else data

    def apply_batches(self, batches: Iterator[pa.RecordBatch], deletions: Sequence[Deletion],
                      sparing: Collection[int] = (), merge: RecordIterator | None = None
                      ) -> Iterator[pa.RecordBatch]:
        """:meth:`apply` batch by batch (each record judged on its own), or run by run of
        record keys where a merge rule judges a key's records together."""
        if not deletions:
            yield from batches
            return
        chunks: Iterator[pa.Table]
        if merge is not None and any(d.filter is not None for d in deletions):
            chunks = complete_runs(batches, self.schema.key_names)
        else:
            chunks = (pa.Table.from_batches([b]) for b in batches)
        for t in chunks:
            out = self.apply(t, deletions, sparing, merge)
            if out.num_rows:
                yield from out.combine_chunks().to_batches()

    def _merged_matching(self, data: pa.Table, candidates: np.ndarray,
                         expression: pc.Expression, merge: RecordIterator) -> np.ndarray:
        """Rows of ``data`` whose record key's ``candidates`` (its records older than the
        delete, in its ranges) make, by the merge rule, a record the filter passes."""
        out = np.zeros(data.num_rows, dtype=bool)
        if not candidates.any():
            return out
        older = data.filter(pa.array(candidates))
        merged = pa.Table.from_batches(list(merge.apply(iter(older.to_batches()))),
                                       schema=older.schema)
        names = self.schema.key_names
        passed = merged.filter(expression).select(names) if merged.num_rows else None
        if passed is None or not passed.num_rows:
            return out
        keys = data.select(names).append_column(
            _ROW, pa.array(np.arange(data.num_rows, dtype=np.int64)))
        rows = keys.join(passed, names, join_type="left semi").column(_ROW)
        out[rows.to_numpy()] = True
        return out

    def _in_ranges(self, data: pa.Table, c: _Compiled) -> np.ndarray:
        n = data.num_rows
        if c.everything:
            return np.ones(n, dtype=bool)
        hit = np.zeros(n, dtype=bool)
        if c.points is not None:
            if len(self.names) == 1:
                col = data.column(self.names[0])
                # few records against many deleted keys (a lookup under a large delete):
                # is_in hashes its value set on every call, so only the deleted keys near
                # the records' are its value set (50k keys: ~8 ms a lookup -> ~1)
                near = self._sharing_first_field(c, data) if 4 * n < c.points.num_rows \
                    else c.points
                found = pc.is_in(col, value_set=near.column(0).cast(col.type))
                hit |= np.asarray(found.to_numpy(zero_copy_only=False), dtype=bool)
            else:
                points = c.points
                if 4 * n < points.num_rows:  # as above (the join hashes its right side)
                    points = self._sharing_first_field(c, data)
                    found = _few_keys_in(data, points, self.names)
                    if found is not None:
                        return self._in_other_ranges(data, c, found)
                keys = data.select(self.names).append_column(
                    _ROW, pa.array(np.arange(n, dtype=np.int64)))
                rows = keys.join(points, self.names, join_type="left semi").column(_ROW)
                hit[rows.to_numpy()] = True
        return self._in_other_ranges(data, c, hit)

    def _sharing_first_field(self, c: _Compiled, data: pa.Table) -> pa.Table:
        """The deleted whole keys of ``c`` whose first field some record of ``data`` has:
        found by binary search in the keys sorted by that field (sorted once per deletion,
        on first use), of its order-preserving uint64 prefix, so a read costs in its
        records, not in the deleted keys (hashing 50k keys a lookup: ~0.5 ms); by hashing
        the records' first fields where the field has no prefix (nulls, floats, ...)."""
        assert c.points is not None
        with self._lock:
            found = self._by_first.get(c.version)
        if found is None:
            by_first = c.points.sort_by(self.names[0])
            found = (by_first, ordered_prefix(by_first.column(0).combine_chunks()))
            with self._lock:
                if c.version in self._compiled:  # (not one dropped meanwhile)
                    self._by_first[c.version] = found
        points, prefix = found
        first = data.column(self.names[0]).cast(points.schema.field(0).type)
        asked = ordered_prefix(first.combine_chunks()) if prefix is not None else None
        if prefix is None or asked is None:
            return points.filter(pc.is_in(points.column(0), value_set=first))
        lo = np.searchsorted(prefix, asked, "left")
        spans = np.searchsorted(prefix, asked, "right") - lo
        total = int(spans.sum())
        # each record's span of rows of its prefix, end to end, then each row once
        rows = np.repeat(lo - np.cumsum(spans) + spans, spans) + np.arange(total)
        return points.take(pa.array(np.unique(rows)))

    def _in_other_ranges(self, data: pa.Table, c: _Compiled, hit: np.ndarray) -> np.ndarray:
        """``hit`` or'ed with the rows of ``data`` in the deletion's ranges that are not whole
        keys (one comparison each)."""
        for r in c.ranges:
            m = range_mask(data, self.names, r)
            if m is None:
                return np.ones(data.num_rows, dtype=bool)
            hit |= np.asarray(pc.fill_null(m, False).to_numpy(zero_copy_only=False),
                              dtype=bool)
        return hit

    @staticmethod
    def _matching(data: pa.Table, expression: pc.Expression) -> np.ndarray:
        """Rows the filter passes (a null result passes none, as a query's filter)."""
        n = data.num_rows
        rows = data.append_column(_ROW, pa.array(np.arange(n, dtype=np.int64))) \
            .filter(expression).column(_ROW)
        out = np.zeros(n, dtype=bool)
        out[rows.to_numpy()] = True
        return out


_FEW_CODES = 1 << 62
"""The most composite-key codes :func:`_few_keys_in` numbers (an int64 stays exact)."""


def _few_keys_in(data: pa.Table, points: pa.Table, names: Sequence[str]) -> np.ndarray | None:
    """Which rows of ``data`` have a whole key (``names``) among the rows of ``points``, for a
    few records against the few deleted keys that share their first field, without a join
    (an Acero plan per read: some 2 ms of a 3 ms lookup under a delete of 50k two-field
    keys). Each field's values become their positions among the points' distinct values
    (``index_in``: a hash of the few), the positions of a key one int64 in mixed radix, and
    membership one ``np.isin``. Exact: equal codes are equal keys. None when the codes would
    not fit an int64 (many distinct values per field: the join is the way)."""
    n = data.num_rows
    if not points.num_rows:
        return np.zeros(n, dtype=bool)
    code_data = np.zeros(n, dtype=np.int64)
    code_points = np.zeros(points.num_rows, dtype=np.int64)
    known = np.ones(n, dtype=bool)
    radix = 1
    for i, name in enumerate(names):
        values = points.column(i)
        distinct = pc.unique(values)
        radix *= len(distinct) + 1
        if radix >= _FEW_CODES:
            return None
        at = pc.index_in(data.column(name).cast(values.type), value_set=distinct)
        known &= np.asarray(at.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
        scale = radix // (len(distinct) + 1)
        code_data += np.asarray(pc.fill_null(at, 0).to_numpy(zero_copy_only=False),
                                dtype=np.int64) * scale
        code_points += np.asarray(pc.index_in(values, value_set=distinct).to_numpy(
            zero_copy_only=False), dtype=np.int64) * scale
    return known & np.isin(code_data, code_points)


def merge_of(iterators: Sequence[RecordIterator]) -> RecordIterator | None:
    """The merge rule among ``iterators`` (first when there is one: see
    ``sediment.query.prepare.table_iterators``), which deletes by filter judge keys by."""
    first = iterators[0] if iterators else None
    return first if isinstance(first, KeepLast | KeepFirst | PartialUpdate | Aggregate) \
        else None
