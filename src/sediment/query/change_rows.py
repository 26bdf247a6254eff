"""Change rows: what the records of one commit did, as rows of the change feed (pure Arrow).

A commit's changes are the difference between what a read returned before it and after it,
restricted to the records it could have touched. :func:`record_changes` takes both reads and
labels each record that differs: a record key (row keys + sort keys) present only before is a
``delete``, only after an ``insert``, on both sides with different records an
``update_preimage`` / ``update_postimage`` pair. Records are compared whole, as multisets
(tables with ``merge = "none"`` may hold equal records several times): a record found
equally on both sides changed nothing and is left out.

Vectorised: both sides are sorted together by every comparable column then side, so equal
records sit next to each other, old before new; equal runs are paired off by counting, and
what is left is labelled per record key with one ``bincount``. Columns Arrow cannot order or
compare (lists, structs, maps) do not take part in the comparison: two records differing only
there count as equal.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sediment.files.upserts import run_starts
from sediment.schema import Schema

CHANGE_TYPE = "_change_type"
COMMIT_VERSION = "_commit_version"
COMMIT_TIMESTAMP = "_commit_timestamp"
CHANGE_COLUMNS = (CHANGE_TYPE, COMMIT_VERSION, COMMIT_TIMESTAMP)
"""The columns every change row carries after the table's own."""

CHANGE_FIELDS = (pa.field(CHANGE_TYPE, pa.string(), nullable=False),
                 pa.field(COMMIT_VERSION, pa.int64(), nullable=False),
                 pa.field(COMMIT_TIMESTAMP, pa.timestamp("ms", tz="UTC"), nullable=False))

INSERT, PREIMAGE, POSTIMAGE, DELETE = ("insert", "update_preimage", "update_postimage",
                                       "delete")
_LABELS = pa.array([DELETE, PREIMAGE, POSTIMAGE, INSERT], pa.string())
"""Labels by rank: the order change rows of one record key come in."""


def _comparable(t: pa.DataType) -> bool:
    return not (pa.types.is_nested(t) or pa.types.is_dictionary(t) or pa.types.is_null(t))


def record_changes(before: pa.Table, after: pa.Table, key_names: Sequence[str]
                   ) -> tuple[pa.Table, np.ndarray]:
    """The records that differ between ``before`` and ``after`` (one schema, any order) and
    the label rank of each (0 delete, 1 update_preimage, 2 update_postimage, 3 insert),
    ordered by record key, then rank."""
    if not before.num_rows or not after.num_rows:
        rows = after if before.num_rows == 0 else before
        return rows, np.full(rows.num_rows, 3 if before.num_rows == 0 else 0, dtype=np.int8)
    after = after.cast(before.schema) if after.schema != before.schema else after
    both = pa.concat_tables([before, after]).combine_chunks()
    side = np.concatenate([np.zeros(before.num_rows, np.int8),
                           np.ones(after.num_rows, np.int8)])
    names = [f.name for f in both.schema if _comparable(f.type)]
    values = [n for n in names if n not in key_names]
    order = pc.sort_indices(
        both.append_column("__side", pa.array(side)),
        sort_keys=[(n, "ascending") for n in [*key_names, *values, "__side"]]).to_numpy()
    rows, side = both.take(order), side[order]
    n = rows.num_rows

    # Pair off equal records: in each run of equal records the old ones come first.
    same_run = np.cumsum(run_starts(rows, names), dtype=np.int64) - 1
    run_first = np.flatnonzero(np.r_[True, same_run[1:] != same_run[:-1]])
    olds = np.bincount(same_run, weights=(side == 0), minlength=len(run_first)).astype(np.int64)
    news = np.bincount(same_run, minlength=len(run_first)) - olds
    paired = np.minimum(olds, news)
    pos = np.arange(n) - run_first[same_run]
    unchanged = np.where(side == 0, pos < paired[same_run],
                         (pos - olds[same_run]) < paired[same_run])
    keep = ~unchanged
    if not keep.any():
        return rows.slice(0, 0), np.zeros(0, np.int8)
    rows, side = rows.filter(pa.array(keep)), side[keep]

    # Label what is left by record key: both sides there is an update, else a delete/insert.
    key_run = np.cumsum(run_starts(rows, key_names), dtype=np.int64) - 1
    old_left = np.bincount(key_run, weights=(side == 0)) > 0
    new_left = np.bincount(key_run, weights=(side == 1)) > 0
    rank = np.where(side == 0, np.where(new_left[key_run], 1, 0),
                    np.where(old_left[key_run], 2, 3)).astype(np.int8)
    by = np.lexsort((rank, key_run))
    return rows.take(pa.array(by)), rank[by]


def labelled(rows: pa.Table, rank: np.ndarray | int, version: int, time: float) -> pa.Table:
    """``rows`` with the change columns: the label of each rank, the commit's version and
    time (seconds since the epoch, as the log keeps it)."""
    n = rows.num_rows
    ranks = np.full(n, rank, np.int8) if isinstance(rank, int) else rank
    labels = _LABELS.take(pa.array(ranks))  # no Python string per row
    millis = int(round(time * 1000))
    columns = [labels, pa.array(np.full(n, version, np.int64)),
               pa.array(np.full(n, millis, np.int64)).cast(CHANGE_FIELDS[2].type)]
    out = rows
    for f, col in zip(CHANGE_FIELDS, columns, strict=True):
        out = out.append_column(f, col)
    return out


def empty_changes(schema: Schema) -> pa.Schema:
    """The schema of change rows for a table of ``schema``."""
    return pa.schema([*schema.to_arrow(), *CHANGE_FIELDS])
