"""Runs of keyed commits read together: the change feed's pre-images without a read of the
table per commit.

An upsert's pre-images and a delete's removed records are the records its keys held at the
version before. Read commit by commit, that is one read of the table (or one lookup per key)
for every upsert and delete: a mix of small upserts and deletes costs a whole-table read each.
Over a run of consecutive commits that each judge records one by one (plain ingests, upserts
and deletes by key on a table without a merge rule, and the storage-only commits between
them), those records are known without reading the table again:

- the keys the run touches are known before any record is read: a delete by keys logs its
  keys, an upsert's record keys are its files' key columns;
- a record of those keys alive at the run's start is read once, at the start;
- every record the run adds is read anyway, as its commit's ``insert`` or ``update_postimage``
  rows;
- a record dies at the first later commit of the run that deletes its row key or upserts its
  record key (a delete covers every record committed before it; an upsert replaces every older
  record of its record keys).

So each record of the touched keys gets its death version once, with one hash join against the
run's deletes and upserts, and each upsert or delete takes the records that die at it. Only
records of touched keys are kept, so memory follows what the run changes, not the table.

Anything else ends a run and is read as before (sediment.query.changes): a merge rule or a
combining iterator, a delete by range or filter, an overwrite, a restore or clear, a schema or
property change (the iterators may change), an upsert carrying a null sort key (a null matches
no key in a join).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sediment.core.state import TableState
from sediment.query.change_rows import record_changes
from sediment.schema import Schema
from sediment.state.log import LogEntry

STORAGE_KINDS = frozenset({
    "delete_files", "expire_leases", "assign_job_ids", "replace_file_references",
    "replace_file_references_batch", "split_file_references", "split_partition",
    "follow_scheme"})
"""Commit kinds that move records between files and leaves without changing what a read of
the table returns (nor its schema, iterators or merge rule): a run goes on past them."""

RUN_ROWS = 4_000_000
"""A run holds at most about this many keys and records: the keys it deletes and upserts, and
the records its commits add (every one is read before the run's first rows are handed out).
A single commit larger than that is a run of its own."""

_V = "__sediment_change_version"
_DEL = "__sediment_change_delete"
_RID = "__sediment_change_row"
_SORT = "__sediment_change_sort_"


@dataclass(frozen=True, slots=True)
class Step:
    """One commit of a run: ``entry`` takes ``before`` to ``after``; ``how`` as
    sediment.query.changes.CommitReads (``inserts``, ``replaced``, ``deleted`` or ``none``);
    ``files`` its new files; ``keys``: a delete's row keys or an upsert's distinct record
    keys."""

    entry: LogEntry
    before: TableState
    after: TableState
    how: str
    files: tuple[str, ...] = ()
    keys: pa.Table | None = None
    rows: pa.Table | None = None
    """An upsert's records, read when its keys were."""

    @property
    def size(self) -> int:
        """What the step holds in a run: its keys and the records it adds (by its files'
        references)."""
        refs = getattr(self.entry.transaction, "references", ())
        added = sum(r.records for r in refs) if self.files else 0
        return added + (0 if self.keys is None else self.keys.num_rows)


class KeyHistory:
    """The records of a run's touched keys and the version at which each dies.

    ``deletes``: the run's deleted row keys with the deleting version (``_V``); ``upserts``:
    its upserted record keys with the upserting version. Records are added as they are read
    (each with the version that added it); :meth:`dying_at` hands out those a version kills."""

    def __init__(self, schema: Schema, deletes: pa.Table, upserts: pa.Table) -> None:
        self.row_keys = list(schema.row_key_names)
        self.sort_keys = list(schema.sort_key_names)
        self.key_names = [*self.row_keys, *self.sort_keys]
        # one build side keyed by row key: a delete matches every record of its row key, an
        # upsert only the records whose sort keys equal its own
        arrow = schema.to_arrow()
        sorts = {f"{_SORT}{n}": upserts.column(n) for n in self.sort_keys}
        up = pa.table({**{n: upserts.column(n) for n in self.row_keys}, **sorts,
                       _V: upserts.column(_V),
                       _DEL: pa.array(np.zeros(upserts.num_rows, bool))})
        dl = pa.table({**{n: deletes.column(n) for n in self.row_keys},
                       **{f"{_SORT}{n}": pa.nulls(deletes.num_rows, arrow.field(n).type)
                          for n in self.sort_keys},
                       _V: deletes.column(_V),
                       _DEL: pa.array(np.ones(deletes.num_rows, bool))})
        self.events = pa.concat_tables([up.cast(dl.schema), dl])
        self._held: list[tuple[pa.Table, np.ndarray]] = []

    def add(self, added: list[tuple[pa.Table, int]]) -> None:
        """Keep those of the records ``added`` (each table with the version that added it,
        or the run's start for those alive then) that a later commit of the run kills, with
        their death versions. One join for all: its build side is the run's keys."""
        added = [(t, v) for t, v in added if t.num_rows]
        if not added or not self.events.num_rows:
            return
        sizes = np.array([t.num_rows for t, _ in added], dtype=np.int64)
        starts = np.concatenate([[0], np.cumsum(sizes)])
        # the key columns of every table end to end (reads differ only in nullability)
        probe = pa.table({
            **{n: pa.chunked_array([c for t, _ in added for c in t.column(n).chunks],
                                   self.events.schema.field(n).type) for n in self.key_names
               if n in self.row_keys},
            **{n: pa.chunked_array([c for t, _ in added for c in t.column(n).chunks],
                                   self.events.schema.field(f"{_SORT}{n}").type)
               for n in self.sort_keys},
            _RID: pa.array(np.arange(starts[-1], dtype=np.int64))})
        born = np.repeat(np.array([v for _, v in added], dtype=np.int64), sizes)
        hits = probe.join(self.events, self.row_keys, join_type="inner")
        if not hits.num_rows:
            return
        rid = hits.column(_RID).to_numpy()
        keep = hits.column(_V).to_numpy() > born[rid]
        # a delete kills every record of its row key; an upsert those whose sort keys all
        # equal its own (with no sort keys, every record of its row key: its record key)
        same_sort: pa.ChunkedArray | None = None
        for n in self.sort_keys:
            equal = pc.equal(hits.column(n), hits.column(f"{_SORT}{n}"))
            same_sort = equal if same_sort is None else pc.and_kleene(same_sort, equal)
        if same_sort is not None:  # else every hit kills: a delete or the same record key
            same = pc.or_kleene(hits.column(_DEL), same_sort)
            keep &= pc.fill_null(same, False).to_numpy(zero_copy_only=False)
        if not keep.any():
            return
        rid, death = rid[keep], hits.column(_V).to_numpy()[keep]
        # the first death of each record: sorted by record, then version
        order = np.lexsort((death, rid))
        rid, death = rid[order], death[order]
        first = np.r_[True, rid[1:] != rid[:-1]]
        rid, death = rid[first], death[first]
        which = np.searchsorted(starts, rid, side="right") - 1
        for i, (rows, _) in enumerate(added):
            mine = which == i
            if mine.any():
                self._held.append((rows.take(pa.array(rid[mine] - starts[i])), death[mine]))

    def dying_at(self, version: int) -> pa.Table | None:
        """The records kept that ``version`` kills (None: none), in record-key order."""
        out = []
        for rows, death in self._held:
            mask = death == version
            if mask.any():
                out.append(rows.filter(pa.array(mask)))
        self._held = [(r, d) for r, d in self._held if (d > version).any()]
        if not out:
            return None
        dead = pa.concat_tables([t.cast(out[0].schema) for t in out])
        return dead.sort_by([(n, "ascending") for n in self.key_names])


Rows = tuple[pa.Table, np.ndarray | int]
"""A commit's change rows before shaping, and their label rank (sediment.query.change_rows)."""


def run_rows(steps: list[Step], schema: Schema, read: Callable[..., pa.Table],
             of_keys: Callable[[TableState, pa.Table], pa.Table]) -> Iterator[Rows]:
    """The change rows of each step of a run, in order (module docstring). ``read(state,
    **how)`` reads a state as the feed reads it; ``of_keys(state, row_keys)`` the records of
    ``state`` of those row keys."""
    keys = [*schema.row_key_names, *schema.sort_key_names]
    row_keys = list(schema.row_key_names)
    deletes = [s.keys.append_column(_V, pa.array(np.full(s.keys.num_rows, s.entry.version)))
               for s in steps if s.how == "deleted" and s.keys is not None]
    upserts = [s.keys.append_column(_V, pa.array(np.full(s.keys.num_rows, s.entry.version)))
               for s in steps if s.how == "replaced" and s.keys is not None]
    arrow = schema.to_arrow()
    empty_del = pa.table({n: pa.array([], arrow.field(n).type) for n in row_keys}
                         ).append_column(_V, pa.array([], pa.int64()))
    empty_up = pa.table({n: pa.array([], arrow.field(n).type) for n in keys}
                        ).append_column(_V, pa.array([], pa.int64()))
    history = KeyHistory(schema, _concat(deletes, empty_del), _concat(upserts, empty_up))
    # every record the run adds is read first (its commit's rows), so that one join finds
    # which of them, and of those alive at the start, a later commit of the run kills
    own = [s.rows if s.rows is not None else read(s.after.only(s.files))
           if s.how in ("inserts", "replaced") else None for s in steps]
    if history.events.num_rows:
        touched = history.events.select(row_keys).group_by(row_keys).aggregate([])
        start = of_keys(steps[0].before, touched.select(row_keys))
        history.add([(start, steps[0].before.version),
                     *((t, s.entry.version) for s, t in zip(steps, own, strict=True)
                       if t is not None)])
    for s, mine in zip(steps, own, strict=True):
        v = s.entry.version
        if s.how == "inserts":
            assert mine is not None
            yield mine, 3
        elif s.how == "replaced":
            assert mine is not None
            old = history.dying_at(v)
            yield (record_changes(old.cast(mine.schema), mine, keys) if old is not None
                   else (mine, 3))
        elif s.how == "deleted":
            old = history.dying_at(v)
            yield (old, 0) if old is not None else (pa.table({}), 0)
        else:
            yield pa.table({}), 3


def _concat(tables: list[pa.Table], empty: pa.Table) -> pa.Table:
    return pa.concat_tables([t.cast(empty.schema) for t in tables]) if tables else empty
