"""Settling upserts: a record written by an upsert replaces every older record of its key.

An upsert's records carry ``UPSERT_BIT`` in their sequence (sediment.core.model). A merged
stream of a leaf is sorted by (row keys, sort keys, sequence), so the records of one record
key are a run, oldest first: in each run, every record before the run's last upsert record is
replaced and dropped. Within one upsert (records of one sequence), the last occurrence of a
key in input order wins the same way, since every merge is stable. Later records of the key
(plain writes after the upsert) stay: a later write wins, as it does everywhere.

Runs may straddle batches: the trailing run of each batch is held back until the next batch
shows where it ends. Vectorised: runs are found with one comparison per key field, the last
upsert of each run with one ``maximum.at``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sediment.core.model import UPSERT_BIT
from sediment.files.sequence import SEQ


def run_starts(data: pa.Table | pa.RecordBatch, names: Sequence[str]) -> np.ndarray:
    """Bool per row: does its record key differ from the previous row's (row 0: True)?
    Nulls (sort keys may be null) equal nulls."""
    n = data.num_rows
    change = np.zeros(n, dtype=bool)
    if n:
        change[0] = True
    if n > 1:
        for name in names:
            col = data.column(name)
            a, b = col.slice(1), col.slice(0, n - 1)
            ne = pc.fill_null(pc.not_equal(a, b), False)
            if col.null_count:
                ne = pc.or_(ne, pc.xor(pc.is_null(a), pc.is_null(b)))
            change[1:] |= np.asarray(ne.to_numpy(zero_copy_only=False), dtype=bool)
    return change


def settle_table(data: pa.Table, names: Sequence[str]) -> pa.Table:
    """``data`` (sorted by ``names`` then :data:`SEQ`, whole runs only) without the records
    an upsert replaced; ``names``: the record key's fields."""
    n = data.num_rows
    if not n:
        return data
    seq = data.column(SEQ).to_numpy()
    upsert = (seq & UPSERT_BIT) != 0
    if not upsert.any():
        return data
    run = np.cumsum(run_starts(data, names), dtype=np.int64) - 1
    last = np.full(int(run[-1]) + 1, -1, dtype=np.int64)
    np.maximum.at(last, run[upsert], np.flatnonzero(upsert))
    keep = np.arange(n) >= last[run]
    return data if keep.all() else data.filter(pa.array(keep))


def complete_runs(batches: Iterator[pa.RecordBatch], names: Sequence[str]
                  ) -> Iterator[pa.Table]:
    """A sorted stream as tables of whole runs of equal ``names``: each batch's trailing run
    (and the batches it goes on through) is held back until the run ends."""
    held: list[pa.RecordBatch] = []  # one run, maybe unfinished
    for b in batches:
        if not b.num_rows:
            continue
        starts = np.flatnonzero(run_starts(b, names))
        if held:
            tail = held[-1]
            pair = pa.Table.from_batches([tail.slice(tail.num_rows - 1), b.slice(0, 1)])
            if run_starts(pair, names)[1]:  # the held run ended with the last batch
                yield pa.Table.from_batches(held)
            elif len(starts) == 1:  # the whole batch goes on with the held run
                held.append(b)
                continue
            else:  # the run ends inside this batch
                end = int(starts[1])
                yield pa.Table.from_batches([*held, b.slice(0, end)])
                b, starts = b.slice(end), starts[1:] - end
            held = []
        last = int(starts[-1])
        if last:
            yield pa.Table.from_batches([b.slice(0, last)])
        held = [b.slice(last)]
    if held:
        yield pa.Table.from_batches(held)


def settle_batches(batches: Iterator[pa.RecordBatch], names: Sequence[str]
                   ) -> Iterator[pa.RecordBatch]:
    """:func:`settle_table` over a sorted stream (whole runs at a time)."""
    for run in complete_runs(batches, names):
        out = settle_table(run, names)
        if out.num_rows:
            yield from out.combine_chunks().to_batches()


def without_upsert_marks(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Settled records with their sequences' ``UPSERT_BIT`` cleared: what a compaction that
    merged every record of its partition writes (nothing older is left for them to replace,
    and reads of its output then need not settle it)."""
    mask = pa.scalar(~UPSERT_BIT, pa.int64())
    for b in batches:
        i = b.schema.get_field_index(SEQ)
        yield b.set_column(i, b.schema.field(i), pc.bit_wise_and(b.column(i), mask))
