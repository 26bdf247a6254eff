"""Merge rules: what a table keeps of the records that share a record key.

A table's ``merge`` property names its rule; the record key is a record's row keys plus sort
keys. The stream an iterator sees is sorted by (row keys, sort keys, sequence), so the records
of one record key are a run, in commit order (then input order within one write:
``sediment.files.sequence``):

- ``none`` (the default): every record is kept; no iterator.
- ``last``: one record per record key, the latest write (Paimon's ``deduplicate``):
  :class:`KeepLast`.
- ``first``: one record per record key, the earliest write (Paimon's ``first-row``):
  :class:`KeepFirst`.
- ``partial``: one record per record key whose every value field is the latest non-null value
  written to it (null when none is; Paimon's ``partial-update``): :class:`PartialUpdate`.
- ``aggregate``: one record per record key, each value field combined by its function in
  ``merge.functions`` (a JSON object ``{field: function}`` with the aggregate iterator's
  function names: sum, min, max, last, concat, map_sum, map_min, map_max; fields not named
  take ``last``; Paimon's ``aggregation``): :class:`~sediment.iterators.combine.Aggregate`.

The rule runs first among the table's iterators on every read and compaction (after the
tombstones), so answers do not depend on how far compaction got.

Whether a compaction job may merge any subset of a leaf's files (``needs_consecutive_inputs``;
see ``sediment.compaction.strategy``) depends on the rule. A compacted record keeps a
sequence: a kept record its own, a combined one its latest record's. Then:

- ``last`` and ``first`` keep one whole record with its own sequence: merged later with the
  files a job left out, it sorts where the original stood, so the latest (earliest) write
  still wins. Any subset may merge.
- ``aggregate`` with sum, min, max, map_* (commutative and associative) and ``last`` (the
  combined record takes the latest record's value and sequence, so it still sorts after
  every record written before it) gives the same answer for any subset; ``concat`` joins in
  order, so a file committed between a job's inputs would read as coming after them: only
  consecutive inputs (the whole leaf) may merge.
- ``partial`` fills each field from the latest record that has it: merging files 1 and 3 of
  a leaf without 2 would let 1's value of a field that 3 leaves null overwrite 2's once
  the combined record (sequence 3) reads after 2. Only consecutive inputs may merge.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import pyarrow as pa

from sediment.errors import PropertyError
from sediment.iterators.base import RecordIterator, json_object
from sediment.iterators.combine import (
    FUNCTIONS,
    Aggregate,
    RunCombiner,
    key_changes,
    same_key,
)
from sediment.schema import Schema

MERGE_RULES = ("none", "last", "first", "partial", "aggregate")
"""The values of the ``merge`` table property."""


# built from buffers: pa.array([True]) would import pandas (pyarrow looks for a Series on
# its first call), some 0.2 s of every command's start-up
_TRUE = pa.Array.from_buffers(pa.bool_(), 1, [None, pa.py_buffer(b"\x01")])
_FALSE = pa.Array.from_buffers(pa.bool_(), 1, [None, pa.py_buffer(b"\x00")])


def _keep(batch: pa.RecordBatch, keep: pa.BooleanArray) -> pa.RecordBatch | None:
    """The rows of ``batch`` that ``keep`` marks: the batch itself when it marks them all (no
    copy: a table without repeated keys costs the comparisons only), None when it marks
    none."""
    kept = keep.true_count
    if kept == batch.num_rows:
        return batch
    if not kept:
        return None
    return batch.filter(keep)


class _OnePerKey(RecordIterator):
    """One whole record per record key, chosen by position in its run: no aggregation, a
    mask per batch from vectorised comparisons of each row's key with its neighbour's (in
    Arrow: the mask never goes through numpy)."""

    def __init__(self, schema: Schema | None = None) -> None:
        self.schema = schema

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"

    def _names(self) -> list[str]:
        if self.schema is None:
            raise PropertyError(f"{type(self).__name__} merge rule built without the table "
                                "schema cannot run")
        return self.schema.key_names

    def fields(self) -> set[str]:
        return set(self.schema.key_names) if self.schema is not None else set()


class KeepLast(_OnePerKey):
    """``merge = "last"``: the last record of each run of equal record keys.

    A row is kept when the next row's key differs. The last row of a batch is decided by the
    next batch's first row, so each batch is held back until the next one arrives (never
    copied or concatenated: a run straddling batches leaves its earlier rows unkept in the
    earlier batches). Any subset of a leaf's files may be compacted: see the module docs."""

    def apply(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        names = self._names()
        held: pa.RecordBatch | None = None
        held_changes = _FALSE  # of the held batch: does each row's next row start a new key?
        for b in batches:
            if not b.num_rows:
                continue
            if held is not None:
                last = _FALSE if same_key(held, held.num_rows - 1, b, 0, names) else _TRUE
                out = _keep(held, pa.concat_arrays([held_changes, last]))
                if out is not None:
                    yield out
            held, held_changes = b, key_changes(b, names)
        if held is not None:
            out = _keep(held, pa.concat_arrays([held_changes, _TRUE]))
            if out is not None:
                yield out


class KeepFirst(_OnePerKey):
    """``merge = "first"``: the first record of each run of equal record keys.

    A row is kept when its key differs from the previous row's (the previous batch's last
    row for a batch's first): nothing is held back. The kept record keeps its own sequence, so
    any subset of a leaf's files may be compacted: see the module docs."""

    def apply(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        names = self._names()
        previous: pa.RecordBatch | None = None  # the last row seen
        for b in batches:
            if not b.num_rows:
                continue
            first = _FALSE if previous is not None and same_key(previous, 0, b, 0, names) \
                else _TRUE
            previous = b.slice(b.num_rows - 1)
            out = _keep(b, pa.concat_arrays([first, key_changes(b, names)]))
            if out is not None:
                yield out


class PartialUpdate(RunCombiner):
    """``merge = "partial"``: one record per run of equal record keys, each value field the
    latest non-null value of the run (null when every one is null).

    Per field, vectorised: the position of the latest valid value up to each row is a running
    maximum over the rows (``np.maximum.accumulate``), read at each run's last row, and is the
    run's value when it lies inside the run. Columns outside the schema (the compaction
    stream's hidden sequence) take the run's last row. Depends on the order of records
    across files: a compaction job merges a whole leaf (see the module docs)."""

    def __init__(self, schema: Schema | None = None) -> None:
        self.schema = schema

    def __repr__(self) -> str:
        return "PartialUpdate()"

    def group_names(self) -> list[str]:
        assert self.schema is not None
        return self.schema.key_names

    def fields(self) -> set[str]:
        return set(self.schema.key_names) if self.schema is not None else set()

    def needs_consecutive_inputs(self) -> bool:
        return True

    def reduce(self, table: pa.Table, starts: np.ndarray, group: np.ndarray) -> pa.Table:
        assert self.schema is not None
        n = table.num_rows
        if len(starts) == n:
            return table
        ends = np.append(starts[1:], n) - 1
        values = set(self.schema.value_names)
        rows = np.arange(n, dtype=np.int64)
        arrays = []
        for name in table.column_names:
            col = table.column(name)
            if name not in values or col.null_count == 0:
                arrays.append(col.take(pa.array(ends)))
                continue
            valid = np.asarray(col.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
            latest = np.maximum.accumulate(np.where(valid, rows, -1))[ends]
            inside = latest >= starts
            arrays.append(col.take(pa.array(np.where(inside, latest, 0), mask=~inside)))
        return pa.Table.from_arrays(arrays, schema=table.schema)


# ---- configuration -----------------------------------------------------------------------------
def parse_functions(text: str, schema: Schema | None, where: str) -> dict[str, str]:
    """``merge.functions`` as a dict (``''`` for none), PropertyError after ``where``: not a
    JSON object of strings, a field named twice, an unknown function; with the ``schema``,
    an unknown field, a key field, or a function that does not fit its field's type."""
    if not text.strip():
        return {}
    try:
        doc = json.loads(text, object_pairs_hook=json_object)
    except (json.JSONDecodeError, RecursionError) as e:
        raise PropertyError(f"{where}: not a JSON object of field -> function: {e}") from None
    if not isinstance(doc, dict) or not all(isinstance(v, str) for v in doc.values()):
        raise PropertyError(f"{where}: must be a JSON object of field name -> function name "
                            f"({', '.join(FUNCTIONS)}), not {text!r}")
    try:
        Aggregate(doc, schema)
    except PropertyError as e:
        msg = str(e).removeprefix("aggregate: ")
        raise PropertyError(f"{where}: {msg}") from None
    return dict(doc)


def merge_rule(rule: str, functions: str, schema: Schema | None, *, where: str = "merge"
               ) -> RecordIterator | None:
    """The iterator of merge rule ``rule`` (None for ``none``), ``functions`` the
    ``merge.functions`` text (read by ``aggregate`` only); PropertyError after ``where`` for
    an unknown rule or functions that cannot run (see :func:`parse_functions`)."""
    if rule == "none":
        return None
    if rule == "last":
        return KeepLast(schema)
    if rule == "first":
        return KeepFirst(schema)
    if rule == "partial":
        return PartialUpdate(schema)
    if rule == "aggregate":
        return Aggregate(parse_functions(functions, schema, f"{where}.functions"), schema)
    raise PropertyError(f"{where}: unknown merge rule {rule!r} ({', '.join(MERGE_RULES)})")


def merge_rule_of(properties: Mapping[str, Any], schema: Schema | None, table: str
                  ) -> RecordIterator | None:
    """The merge rule of a table whose effective properties (defaults included) are
    ``properties``; errors name the table and the property."""
    return merge_rule(str(properties["merge"]), str(properties["merge.functions"]), schema,
                      where=f"table {table} property merge")


def needs_consecutive_inputs(rule: str, functions: str) -> bool:
    """Whether rule ``rule`` makes compaction merge only a leaf's consecutive files (see the
    module docs), known without the schema: ``partial``, and ``aggregate`` with ``concat``.
    A value that cannot be read says no: it is refused wherever it is used."""
    if rule == "partial":
        return True
    if rule != "aggregate":
        return False
    try:
        return "concat" in parse_functions(functions, None, "merge.functions").values()
    except PropertyError:
        return False


def same_functions(a: str, b: str) -> bool:
    """Whether two ``merge.functions`` texts say the same (whitespace and field order aside)."""
    def read(text: str) -> Any:
        try:
            return json.loads(text) if text.strip() else {}
        except (json.JSONDecodeError, RecursionError):
            return text
    return bool(read(a) == read(b))
