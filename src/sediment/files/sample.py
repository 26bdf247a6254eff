"""Sidecar samples: an exact equi-depth sample of a sorted file's row keys, with counts.

Row ``i`` of a sample holds the row key of the file's row ``i*k`` and ``count`` = the number of
file rows it stands for (``k``, the last one the remainder). From samples we estimate how many
records of a file fall in a key range (error below ``k`` per end) and, merged across files, find
quantiles such as the median used to split partitions.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sediment.core.keys import Key
from sediment.core.regions import Region
from sediment.files.keys import bisect_key, cell_mask, region_mask, row_key, sort_indices

COUNT = "__count"


def int64s(values: np.ndarray) -> pa.Array:
    """``values`` as an Arrow int64 array, built from their buffer (``pa.array`` of a NumPy
    array imports pandas the first time: 0.2-0.6 s of a process's start)."""
    values = np.ascontiguousarray(values, dtype=np.int64)
    return pa.Array.from_buffers(pa.int64(), len(values), [None, pa.py_buffer(values)])


class KeySampler:
    """Keeps the row key of every k-th row of a sorted stream, k doubling as rows arrive.

    The keys are kept in Arrow, their row numbers in NumPy, and the two meet only through
    buffers: ``pa.array`` of a NumPy array, ``to_numpy`` and ``pa.scalar`` (so a compute call
    given a Python number) import pandas on their first call in a process (pyarrow looks for
    pandas types), some 0.2 s of CPU that the first file a process wrote paid: the batcher
    lane's first job in a maintainer took 2-4 s on a loaded machine, the next ones 0.3-0.8 s.
    """

    def __init__(self, names: Sequence[str], size: int) -> None:
        self.names = list(names)
        self.size = size
        self.k = 1
        self.rows = 0
        self._parts: list[pa.Table] = []
        self._idx: list[np.ndarray] = []
        """The row number of each kept key, by part."""

    def add(self, data: pa.Table) -> None:
        n = data.num_rows
        # k is the smallest power of two (at least the current one) that keeps at most twice
        # the sample size of the rows so far: the keys of the rows at multiples of k, so the
        # same keys as doubling k one step at a time after taking the batch, without taking
        # keys of the batch only to drop them (a first batch of 64k rows took every key)
        k = self.k
        while -(-(self.rows + n) // k) > 2 * self.size:
            k *= 2
        if k != self.k:
            self.k = k
            if self._parts:
                idx = np.concatenate(self._idx)
                keep = np.flatnonzero((idx & (k - 1)) == 0)
                self._parts = [pa.concat_tables(self._parts).take(int64s(keep))]
                self._idx = [idx[keep]]
        first = (-self.rows) % k
        idx = np.arange(first, n, k, dtype=np.int64)
        if len(idx):
            self._parts.append(data.select(self.names).take(int64s(idx)))
            self._idx.append(idx + self.rows)
        self.rows += n

    def sample(self, key_schema: pa.Schema) -> pa.Table:
        """The sample: keys plus the count of rows each kept key stands for."""
        if not self._parts:
            return key_schema.empty_table().append_column(COUNT, int64s(np.empty(0)))
        t = pa.concat_tables(self._parts).combine_chunks()
        counts = np.minimum(self.k, self.rows - np.concatenate(self._idx))
        return t.append_column(COUNT, int64s(counts))


def merge_samples(samples: Sequence[pa.Table], names: Sequence[str]) -> pa.Table:
    """One sample standing for all the given files: concatenated and sorted by key."""
    if not samples:
        raise ValueError("no samples to merge")
    t = pa.concat_tables([s.select([*names, COUNT]) for s in samples]).combine_chunks()
    return t.take(sort_indices(t, names))


def estimate_count(sample: pa.Table, names: Sequence[str], region: Region) -> int:
    """Estimated records of the sampled data inside ``region``."""
    cell = region.cell
    if cell is not None:  # a box partition: its rows are not one run of the order
        mask = cell_mask(sample, names, cell)
        counts = sample.column(COUNT) if mask is None else sample.column(COUNT).filter(mask)
        return int(pc.sum(counts).as_py() or 0)
    lo = 0 if region.min is None else bisect_key(sample, region.min, names)
    hi = sample.num_rows if region.max is None else bisect_key(sample, region.max, names)
    if hi <= lo:
        return 0
    return int(pc.sum(sample.column(COUNT).slice(lo, hi - lo)).as_py() or 0)


def quantile(sample: pa.Table, names: Sequence[str], q: float) -> Key | None:
    """The key at sorted position ``floor(q * n)`` (0-based) of the ``n`` sampled records of a
    (merged, sorted) sample; None when empty.

    That is the first key of the upper part, as Sleeper's split point is: for distinct keys
    0..999 the median (``q`` 0.5) is 500, and keys below it are exactly half of the records.
    A sample row stands for the records from its own key up to the next row's, so with a
    sample step ``k`` the key returned is that of a record less than ``k`` positions below
    ``floor(q * n)``.
    """
    if sample.num_rows == 0:
        return None
    cum = np.cumsum(sample.column(COUNT).to_numpy())
    position = math.floor(q * int(cum[-1]))
    # The row standing for the record at ``position``: the first whose cumulative count
    # passes it (records before row i number cum[i-1]).
    i = int(np.searchsorted(cum, position, side="right"))
    return row_key(sample, min(i, sample.num_rows - 1), names)


def cut_keys(samples: Sequence[pa.Table], names: Sequence[str], region: Region,
             target_rows: int) -> list[Key]:
    """Row keys that cut a leaf into pieces of about ``target_rows`` records, ascending.

    From the leaf's files' exact samples (every k-th key with the rows it stands for),
    restricted to the leaf's region: the keys at the 1/n, 2/n... quantiles of its records,
    each a whole row key strictly above the smallest sampled one, so no piece is empty by
    construction and all records of one row key fall in one piece (iterators merge per row
    key). A leaf of at most ``target_rows`` records, or of one row key, is not cut."""
    if not samples:
        return []
    merged = merge_samples(list(samples), names)
    mask = region_mask(merged, names, region)
    if mask is not None:
        merged = merged.filter(mask)
    if merged.num_rows == 0:
        return []
    cum = np.cumsum(merged.column(COUNT).to_numpy())
    pieces = math.ceil(int(cum[-1]) / target_rows)
    if pieces <= 1:
        return []
    positions = (np.arange(1, pieces) * int(cum[-1])) // pieces
    rows = np.unique(np.minimum(np.searchsorted(cum, positions, side="right"),
                                merged.num_rows - 1))
    first = row_key(merged, 0, names)
    out: list[Key] = []
    for i in rows.tolist():  # at most `pieces` keys, not records
        k = row_key(merged, int(i), names)
        if k > first and (not out or k > out[-1]):
            out.append(k)
    return out
