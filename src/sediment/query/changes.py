"""The change feed: the record changes a table's commits made, derived from its log.

``Table.changes(a, b)`` walks the log entries of versions ``(a, b]``, replaying each on the
state before it (no state is loaded twice), and asks of each commit only what it could have
changed. What each kind of commit yields (:func:`commit_reads` decides it, purely):

- **add files** (ingest, bulk import, load, a stream's batch) on a table whose iterators
  judge each record on its own (no merge rule; age-off and filters allowed): the records of
  the new files, read alone, as ``insert`` rows. Nothing older can have changed.
- **add files as an upsert, or on a table with a merge rule** (``merge = "last"``, ``"first"``,
  ``"partial"``, ``"aggregate"``, or a combining iterator): the record keys the new files
  carry are looked up at the version before and at the commit's version, and the difference
  is the change: ``insert`` for a new key, ``update_preimage`` / ``update_postimage`` for a
  key whose merged record became another, nothing for a key whose record stayed the same
  (a ``merge = "first"`` table ignoring a late write). Lookups read what the keys' leaves
  hold, so the cost follows the commit's size, not the table's.
- **delete by key, range or predicate**: the records it removed, as ``delete`` rows, read at
  the version before (its ranges, its filter); on a table with a merge rule both sides of
  its ranges are compared, since removing older records can change what a key merges to.
- **overwrite, restore**: the difference of the whole content before and after.
- **clear**: every record before, as ``delete`` rows.
- **compaction, splits, garbage collection, jobs, property and online changes, schema
  changes, re-initialisation**: nothing. They change how records are stored, not which
  records are read. (A property change of the merge rule or the iterators changes what a
  read returns from then on without a change row: the feed follows commits of records.)

Consecutive plain ingests, upserts and deletes by key on such a table are read as one run
(sediment.query.change_runs): their pre-images come from one read at the run's start and the
records the run adds, not from a read of the version before each.

Rows come out in the shape of the end version's schema: a column renamed later carries its
new name, a widened one its new type, a column added later is null in older rows and a
dropped one is absent (matched by field id, sediment.schema_changes).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sediment.core.deletions import Deletion
from sediment.core.regions import Range
from sediment.core.state import TableState
from sediment.errors import QueryError, SchemaError, WhereError
from sediment.query.change_rows import (
    CHANGE_COLUMNS,
    empty_changes,
    labelled,
    record_changes,
)
from sediment.query.change_runs import RUN_ROWS, STORAGE_KINDS, Step, run_rows
from sediment.query.prepare import check_columns_once
from sediment.query.where import parse_where
from sediment.query.wire import from_wire
from sediment.schema import Schema
from sediment.schema_changes import conformed
from sediment.state.log import LogEntry

LOOKUP_ROWS = 500
"""What one exact-key lookup costs, in rows of a sorted read (a lookup decodes a page or a row
group of each file that may hold the key, ~0.5 ms; a sorted read decodes ~1 row/us): a
commit's row keys are looked up one by one while that costs less than reading the span they
cover once and joining it with them."""

RUN_STEPS = 1_000
"""At most this many commits are looked ahead in one run of keyed commits (each holds its
states until the run is read)."""

Read = Callable[..., pa.Table]
"""``read(state, keys=None, ranges=None, filter=None, columns=None, raw=False)``: ``state``'s
records (every column unless ``columns``), after its merge rule and iterators (``raw``: as
stored, without them), as a read of that version returns them."""


@dataclass(frozen=True, slots=True)
class CommitReads:
    """What to read for one commit's changes. ``how``: "none", "inserts" (the new files
    alone), "keys" (the new files' record keys before and after), "replaced" (an upsert on a
    table whose iterators judge each record alone: its keys before, and after that its own
    records replace theirs), "deleted" (``deletion``'s records before), "ranges"
    (``deletion``'s ranges before and after), "whole" (everything before and after) or
    "cleared" (everything before)."""

    how: str
    files: tuple[str, ...] = ()
    deletion: Deletion | None = None


def commit_reads(entry: LogEntry, before: TableState, after: TableState,
                 record_by_record: bool) -> CommitReads:
    """What ``entry`` (taking ``before`` to ``after``) can have changed (module docstring).
    ``record_by_record``: whether the table's iterators keep or drop each record on its own."""
    t = entry.transaction
    kind = t.kind
    if kind in ("add_files", "add_files_with_splits"):
        if getattr(t, "overwrite", False):
            return CommitReads("whole")
        files = tuple(t.new_files())
        if not files:
            return CommitReads("none")
        upsert = bool(getattr(t, "upsert", False))
        how = "inserts" if not upsert else "replaced"
        return CommitReads(how if record_by_record else "keys", files)
    if kind == "delete_records":
        new = [d for d in after.deletions if d.version == entry.version]
        if not new:
            return CommitReads("none")
        return CommitReads("deleted" if record_by_record else "ranges", deletion=new[0])
    if kind == "restore":
        return CommitReads("whole")
    if kind == "clear":
        return CommitReads("cleared")
    return CommitReads("none")


class ChangeFeed:
    """The record changes of versions ``(start, end]`` of one table, version by version.

    ``states``: the state at ``start``, then each log entry after it (``replay`` applies one
    to a copy). ``read``: reads one state (see :data:`Read`); ``record_by_record``: of a
    state, whether its iterators judge each record alone. Columns and the filter apply to
    the change rows, shaped by ``target`` (the end version's schema)."""

    def __init__(self, table: str, target: Schema | None, read: Read,
                 record_by_record: Callable[[TableState], bool], *,
                 columns: Sequence[str] | None = None, filter: Any = None) -> None:  # noqa: A002
        self.table, self.target, self._read = table, target, read
        self._record_by_record = record_by_record
        self.columns = list(columns) if columns is not None else None
        self._filter = filter
        self._shapes: dict[Schema, tuple[pa.Schema, pc.Expression | None]] = {}
        if target is not None:
            self.shape(target)  # bad columns and filters fail before anything is read

    def shape(self, schema: Schema) -> tuple[pa.Schema, pc.Expression | None]:
        """The change rows' schema for a table of ``schema`` (after ``columns``), and the
        filter as an expression over them; checked once per schema."""
        known = self._shapes.get(schema)
        if known is not None:
            return known
        for name in CHANGE_COLUMNS:
            if name in schema.field_names:
                raise SchemaError(
                    f"table {self.table} has a column named {name!r}, the name of a "
                    f"change-feed column: rename it (table.rename_column) to read its changes")
        full = empty_changes(schema)
        if self.columns is not None:
            for c in self.columns:
                if c not in full.names:
                    raise QueryError(f"table {self.table} has no column {c!r} for its change "
                                     f"feed (columns: {', '.join(full.names)})")
            check_columns_once(self.columns, f"table {self.table}'s change feed")
        out = full if self.columns is None else pa.schema([full.field(c) for c in self.columns])
        shaped = (out, self._compile(self._filter, full))
        self._shapes[schema] = shaped
        return shaped

    @property
    def out_schema(self) -> pa.Schema:
        """The change rows' schema, for a feed with a fixed ``target``."""
        assert self.target is not None
        return self.shape(self.target)[0]

    def _compile(self, filter: Any, schema: pa.Schema) -> pc.Expression | None:  # noqa: A002
        """The filter as an expression over the change rows (their change columns too)."""
        if filter is None:
            return None
        if isinstance(filter, str):
            try:
                return parse_where(filter, schema)
            except WhereError as e:
                raise WhereError(f"filter on the change feed of table {self.table}: "
                                 f"{str(e).removeprefix('where: ')}") from None
        if isinstance(filter, Mapping):
            return from_wire(dict(filter), schema)
        if isinstance(filter, pc.Expression):
            return filter
        raise QueryError(f"filter must be a pyarrow.compute.Expression or --where text, "
                         f"not {type(filter).__name__}")

    def commit_changes(self, entry: LogEntry, before: TableState, after: TableState
                       ) -> pa.Table:
        """The change rows of one commit (``entry`` takes ``before`` to ``after``), shaped,
        filtered and projected."""
        if (self.target or after.schema) is None:  # before the first commit: no shape
            return pa.table({})
        what = commit_reads(entry, before, after, self._record_by_record(after))
        return self._shaped(entry, after, *self._rows(what, before, after))

    def _shaped(self, entry: LogEntry, after: TableState, rows: pa.Table,
                rank: np.ndarray | int) -> pa.Table:
        """A commit's change rows (read under ``after``'s schema) labelled, shaped by the
        target schema, filtered and projected."""
        target = self.target or after.schema
        assert target is not None
        _, keep = self.shape(target)
        if after.schema is not None and rows.num_rows:
            rows = conformed(rows, after.schema, target)
        elif not rows.num_rows:
            rows = target.to_arrow().empty_table()
        out = labelled(rows, rank, entry.version, entry.time)
        if keep is not None and out.num_rows:
            out = out.filter(keep)
        if self.columns is not None:
            out = out.select(self.columns)
        return out

    def _rows(self, what: CommitReads, before: TableState, after: TableState
              ) -> tuple[pa.Table, np.ndarray | int]:
        keys = after.schema.key_names if after.schema else []

        def read(state: TableState, **how: Any) -> pa.Table:
            """A read of ``state``, shaped by ``after``'s schema (a restore may change it)."""
            rows = self._read(state, **how)
            if state is before and before.schema is not None and after.schema is not None \
                    and before.schema != after.schema and "columns" not in how:
                rows = conformed(rows, before.schema, after.schema)
            return rows

        if what.how == "inserts":
            return read(after.only(what.files)), 3
        if what.how == "cleared":
            return read(before), 0
        if what.how == "whole":
            return record_changes(read(before), read(after), keys)
        d = what.deletion
        if d is not None and what.how in ("deleted", "ranges"):
            exact = _exact_keys(d.ranges, after.schema) if after.schema is not None else None
            if what.how == "deleted":
                if exact is None:
                    return read(before, ranges=list(d.ranges) if d.ranges else None,
                                filter=dict(d.filter) if d.filter else None), 0
                rows = self._of_keys(read, before, exact)
                if d.filter and rows.num_rows:
                    assert before.schema is not None
                    rows = rows.filter(from_wire(dict(d.filter), before.schema.to_arrow()))
                return rows, 0
            if exact is not None:
                return record_changes(self._of_keys(read, before, exact),
                                      self._of_keys(read, after, exact), keys)
            ranges = list(d.ranges) if d.ranges else None
            return record_changes(read(before, ranges=ranges), read(after, ranges=ranges), keys)
        if what.how in ("keys", "replaced"):
            assert after.schema is not None
            row_keys = after.schema.row_key_names
            sort_keys = after.schema.sort_key_names
            if what.how == "replaced":
                mine = read(after.only(what.files))  # the upsert's records, settled
                if not any(mine.column(n).null_count for n in sort_keys):
                    # after it, its record keys hold its records and nothing else: the
                    # version after is the version before with them replaced (one read)
                    # every record key it carries, also those whose own record the
                    # iterators drop (an upsert of an aged-off record still replaces)
                    carried = read(after.only(what.files), columns=keys, raw=True)
                    wanted = carried.group_by(row_keys).aggregate([]).select(row_keys)
                    old = self._of_keys(read, before, wanted)
                    kept = old.join(carried.group_by(keys).aggregate([]), keys,
                                    join_type="left anti") if old.num_rows else old
                    return record_changes(old, pa.concat_tables(
                        [kept, mine.cast(kept.schema)]), keys)
            mine = read(after.only(what.files), columns=row_keys)
            wanted = mine.group_by(row_keys).aggregate([]).select(row_keys)
            return record_changes(self._of_keys(read, before, wanted),
                                  self._of_keys(read, after, wanted), keys)
        return pa.table({}), 3

    @staticmethod
    def _of_keys(read: Callable[..., pa.Table], state: TableState, wanted: pa.Table
                 ) -> pa.Table:
        """The records of ``state`` whose row keys are rows of ``wanted`` (distinct row keys,
        columns named as the row-key fields): looked up one by one when that reads less than
        the key span they cover, else the span read once and joined with them."""
        if state.schema is None:
            return pa.table({})
        if not wanted.num_rows:
            return state.schema.to_arrow().empty_table()
        row_keys = wanted.column_names
        first = wanted.column(row_keys[0])
        lo, hi = pc.min(first).as_py(), pc.max(first).as_py()
        span = Range(lo, hi, end_inclusive=True)
        if wanted.num_rows * LOOKUP_ROWS <= _records_in(state, span):
            keys: list[Any] = list(zip(*(wanted.column(n).to_pylist() for n in row_keys),
                                       strict=True))
            return read(state, keys=[k[0] for k in keys] if len(row_keys) == 1 else keys)
        rows = read(state, ranges=[span])
        return rows.join(wanted, row_keys, join_type="left semi") if rows.num_rows else rows

    def batches(self, entries: Iterator[LogEntry], start: TableState,
                replay: Callable[[TableState, LogEntry], None]
                ) -> Iterator[tuple[int, pa.Table]]:
        """(version, change rows) of each entry, in commit order: runs of keyed commits are
        read together (sediment.query.change_runs), every other commit on its own."""
        before = start
        run: list[Step] = []
        looked = 0
        for entry in entries:
            after = before.copy()
            replay(after, entry)
            step = self._step(entry, before, after)
            size = 0 if step is None else step.size
            if run and (step is None or looked + size > RUN_ROWS or len(run) >= RUN_STEPS):
                yield from self._run(run)
                run, looked = [], 0
            if step is None:
                yield entry.version, self.commit_changes(entry, before, after)
            else:
                run.append(step)
                looked += size
            before = after
        yield from self._run(run)

    def _step(self, entry: LogEntry, before: TableState, after: TableState) -> Step | None:
        """``entry`` as a step of a run of keyed commits, or None when it must be read on
        its own (sediment.query.change_runs says which)."""
        schema = after.schema
        if schema is None or before.schema != schema or not self._record_by_record(after):
            return None
        what = commit_reads(entry, before, after, True)
        if what.how == "none":
            kind = entry.transaction.kind
            passes = kind in STORAGE_KINDS or kind in ("add_files", "add_files_with_splits",
                                                       "delete_records")
            return Step(entry, before, after, "none") if passes else None
        if what.how == "inserts":
            return Step(entry, before, after, "inserts", what.files)
        if what.how == "replaced":
            keys = [*schema.row_key_names, *schema.sort_key_names]
            mine = self._read(after.only(what.files))
            refs = getattr(entry.transaction, "references", ())
            # the record keys it carries are its records' when the iterators dropped none of
            # them (they only drop: equal counts are equal sets), else read as stored
            carried = (mine.select(keys) if len(refs) == len(what.files) and
                       sum(r.records for r in refs) == mine.num_rows else
                       self._read(after.only(what.files), columns=keys, raw=True))
            if any(carried.column(n).null_count for n in schema.sort_key_names):
                return None
            return Step(entry, before, after, "replaced", what.files,
                        carried.group_by(keys).aggregate([]).select(keys), mine)
        d = what.deletion
        if what.how == "deleted" and d is not None and not d.filter:
            exact = _exact_keys(d.ranges, schema)
            if exact is not None:
                return Step(entry, before, after, "deleted", keys=exact)
        return None

    def _run(self, run: list[Step]) -> Iterator[tuple[int, pa.Table]]:
        """(version, change rows) of each step of a run: read together when it holds an
        upsert or a delete, else each commit as any commit is read."""
        if not any(s.keys is not None for s in run):
            for s in run:
                yield s.entry.version, self.commit_changes(s.entry, s.before, s.after)
            return
        schema = run[0].before.schema
        assert schema is not None
        rows = run_rows(run, schema, self._read,
                        lambda state, wanted: self._of_keys(self._read, state, wanted))
        for s, (changed, rank) in zip(run, rows, strict=True):
            yield s.entry.version, self._shaped(s.entry, s.after, changed, rank)


def _records_in(state: TableState, span: Range) -> int:
    """Records of the partitions of ``state`` that ``span`` meets (what reading it costs)."""
    return sum(records for pid, (_, records) in state.partition_totals().items()
               if span.overlaps(state.partitions[pid].region))


def _exact_keys(ranges: Sequence[Range] | None, schema: Schema) -> pa.Table | None:
    """``ranges`` as a table of row keys when each is one whole key (a delete by keys), else
    None."""
    if not ranges:
        return None
    n = len(schema.row_key_names)
    for r in ranges:
        if r.start is None or r.start != r.end or len(r.start) != n or \
                not (r.start_inclusive and r.end_inclusive):
            return None
    arrow = schema.to_arrow()
    table = pa.table({name: pa.array([r.start[i] for r in ranges],  # type: ignore[index]
                                     arrow.field(name).type)
                      for i, name in enumerate(schema.row_key_names)})
    return table.group_by(schema.row_key_names).aggregate([]).select(schema.row_key_names)


def reader_of(schema: pa.Schema, tables: Iterator[tuple[int, pa.Table]]
              ) -> pa.RecordBatchReader:
    """A RecordBatchReader streaming the change rows of ``tables``, one version at a time."""
    def batches() -> Iterator[pa.RecordBatch]:
        for _, t in tables:
            yield from t.to_batches()

    return pa.RecordBatchReader.from_batches(schema, batches())
