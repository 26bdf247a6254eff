"""Sorting large Arrow tables by key, as fast as two cores allow.

Measured on the benchmark schema (3M rows, string key + int64 sort key, 2 busy cores):
pyarrow ``sort_indices`` ~4 s, DataFusion's multi-threaded sort 2.6-3.4 s, the normalised-key
sort below ~0.6 s. The normalised-key sort (as DuckDB and Polars do) orders rows by the first
8 bytes of the leading string key packed into a uint64 (numpy's radix-friendly argsort), then
re-sorts only the rows whose 8-byte prefixes tie, by the full keys, with Arrow. When ties are
common (keys sharing long prefixes) or the key types do not suit it, DataFusion sorts instead
(below ~64k rows pyarrow does); below ~2k rows pyarrow always does. Measured on 50k rows of the
benchmark schema: pyarrow's sort_indices ~20 ms, the normalised-key order ~5 ms.

Every path is stable: rows with equal keys keep their input order (the later input row stays
later, which is how "the later record wins" holds within one write; see
``sediment.files.sequence``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sediment.files.keys import sort_indices
from sediment.files.sample import int64s
from sediment.types import quote_identifier

_DATAFUSION_MIN_ROWS = 65_536
_NORMALISED_MIN_ROWS = 2_048
_MAX_TIE_FRACTION = 0.05
_PREFIX = 8
_RUN = "__sediment_run"
_POS = "__sediment_pos"


def sort_table(table: pa.Table, names: Sequence[str]) -> pa.Table:
    """``table`` sorted ascending by ``names`` (strings by bytes); same schema."""
    order = sort_order(table, names)
    if order is None:
        return _datafusion_sort(table, names)
    if table.num_rows < _DATAFUSION_MIN_ROWS:
        return table.take(order)
    return _parallel_take(table, order)


def sort_order(table: pa.Table, names: Sequence[str]) -> pa.Array | None:
    """Indices that sort ``table`` by ``names`` (stably), or None when DataFusion sorts it
    faster (:func:`sort_table`): for a caller that gathers the rows piece by piece."""
    if table.num_rows >= _NORMALISED_MIN_ROWS:
        idx = _normalised_key_order(table, names)
        if idx is not None:
            return int64s(idx)
        if table.num_rows >= _DATAFUSION_MIN_ROWS:
            return None
    return sort_indices(table, names)


def _parallel_take(table: pa.Table, indices: pa.Array) -> pa.Table:
    """``table.take(indices)`` with the columns gathered on all cores (the gather is memory
    bound and Arrow releases the GIL)."""
    from concurrent.futures import ThreadPoolExecutor

    cols = table.columns
    with ThreadPoolExecutor(min(len(cols), os.cpu_count() or 2)) as pool:
        taken = list(pool.map(lambda c: c.take(indices), cols))
    return pa.Table.from_arrays(taken, schema=table.schema)


def prefix_keys(col: pa.Array) -> np.ndarray | None:
    """Big-endian uint64 of the first 8 bytes of each string/binary value (zero padded).

    One gather: the value bytes are viewed as a big-endian uint64 at every byte offset (a
    stride of one byte), read at each value's start, then the bytes past a shorter value's
    end are cleared (2M 10-byte keys: ~0.09 s, against ~0.5 s for eight masked passes, one
    per byte). The view is of the array's own bytes, but for the values starting in the
    last 7 bytes, read from a zero-padded copy of those: no copy of the strings is made."""
    if col.null_count or not (pa.types.is_string(col.type) or pa.types.is_binary(col.type)):
        return None
    n = len(col)
    offsets = np.frombuffer(col.buffers()[1], dtype=np.int32)[col.offset: col.offset + n + 1]
    lo, hi = (int(offsets[0]), int(offsets[-1])) if n else (0, 0)
    data = col.buffers()[2]
    raw = np.frombuffer(data, dtype=np.uint8, count=hi - lo, offset=lo) \
        if data is not None and hi > lo else np.zeros(0, np.uint8)
    starts = offsets[:-1] - lo  # (int32: the index needs no 64-bit copy)
    whole = hi - lo - _PREFIX + 1  # values starting before it have 8 bytes to read here
    out = np.empty(n, dtype=np.uint64)
    inside = starts < whole
    if whole > 0:
        words = np.ndarray((whole,), dtype=">u8", buffer=raw, strides=(1,))
        if inside.all():
            out[:] = words[starts]
        else:
            out[inside] = words[starts[inside]]
    if not inside.all():  # the last values: their bytes, zero padded
        tail_from = max(0, whole)
        tail = np.zeros(hi - lo - tail_from + _PREFIX, dtype=np.uint8)
        tail[:hi - lo - tail_from] = raw[tail_from:]
        tail_words = np.ndarray((len(tail) - _PREFIX + 1,), dtype=">u8", buffer=tail,
                                strides=(1,))
        out[~inside] = tail_words[starts[~inside] - tail_from]
    lengths = offsets[1:] - offsets[:-1]
    short = lengths < _PREFIX
    if short.any():
        drop = (8 * (_PREFIX - lengths[short])).astype(np.uint64)
        keep = np.where(drop >= 64, np.uint64(0), ~np.uint64(0) << np.minimum(drop, 63))
        out[short] &= keep
    return out


def _normalised_key_order(table: pa.Table, names: Sequence[str]) -> np.ndarray | None:
    prefix = prefix_keys(table.column(names[0]).combine_chunks())
    if prefix is None:
        return None
    return _prefix_order(table, names, prefix, None)


def _prefix_order(table: pa.Table, names: Sequence[str], prefix: np.ndarray,
                  rows: np.ndarray | None) -> np.ndarray | None:
    """The row numbers of ``rows`` (None: every row) in key order, stably: by ``prefix``
    (each row's :func:`prefix_keys`), rows of tied prefixes by the full keys, then input
    position. None when too many prefixes tie (DataFusion sorts faster)."""
    p = prefix if rows is None else prefix[rows]
    # not stable: tied prefixes are re-sorted below by the full keys and the input position
    order = np.argsort(p)
    sp = p[order]
    del p
    if rows is not None:
        order = rows[order]
    tie = np.zeros(len(sp), dtype=bool)
    eq = sp[1:] == sp[:-1]
    tie[1:] |= eq
    tie[:-1] |= eq
    n_tie = int(tie.sum())
    if n_tie == 0:  # all prefixes differ: the first key alone decides the order
        return order
    if n_tie > _MAX_TIE_FRACTION * len(sp):
        return None
    positions = np.flatnonzero(tie)
    # runs of equal prefixes, numbered in position order, sorted inside by the full keys
    run_start = np.ones(len(positions), dtype=bool)
    run_start[1:] = ~((positions[1:] == positions[:-1] + 1) & eq[positions[1:] - 1])
    run_id = np.cumsum(run_start) - 1
    tied = order[positions]
    sub = table.select(list(names)).take(int64s(tied))
    # ... and by input position: the argsort above is not stable, so within a run the rows'
    # order no longer tells which came first (sorting by position keeps equal keys in order)
    sub = sub.append_column(_RUN, int64s(run_id)).append_column(_POS, int64s(tied))
    sub_order = pc.sort_indices(sub, sort_keys=[(_RUN, "ascending"),
                                                *((n, "ascending") for n in names),
                                                (_POS, "ascending")])
    order[positions] = tied[sub_order.to_numpy()]
    return order


_SPLIT_SAMPLE = 4096
"""Prefixes sampled to choose where :func:`split_orders` cuts the key order."""


def split_orders(table: pa.Table, names: Sequence[str], parts: int
                 ) -> list[pa.Array] | None:
    """The rows of ``table`` in key order (stably, as :func:`sort_order`), as up to ``parts``
    consecutive runs of that order, each sorted on a thread of its own: the rows are cut
    into runs by their 8-byte key prefixes (at quantiles of a sample of them), so rows of
    equal keys are always in the same run. For writers that write the runs side by side
    (``sediment.ingest.spill``). None when the first key is not a string or binary without
    nulls, or the rows do not cut into two runs (one prefix for all)."""
    if parts < 2 or table.num_rows < _NORMALISED_MIN_ROWS:
        return None
    from concurrent.futures import ThreadPoolExecutor

    column = table.column(names[0])
    first = column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
    n = len(first)
    sample = prefix_keys(first.take(np.arange(0, n, max(1, n // _SPLIT_SAMPLE))))
    if sample is None:
        return None
    sample.sort()
    pivots = np.unique(sample[[len(sample) * k // parts for k in range(1, parts)]])

    def cut(start: int, end: int) -> tuple[np.ndarray, list[np.ndarray]] | None:
        """The prefixes of rows ``start:end``, and those rows by run: a run is how many
        pivots a row's prefix reaches (equal prefixes, equal runs). None: nulls."""
        prefix = prefix_keys(first.slice(start, end - start))
        if prefix is None:
            return None
        run = np.zeros(len(prefix), np.uint8)  # (a byte a row: runs are as many as cores)
        for pivot in pivots:
            run += prefix >= pivot
        return prefix, [np.flatnonzero(run == r) + start for r in range(len(pivots) + 1)]

    bounds = [n * k // parts for k in range(parts + 1)]
    # a thread per slice of the rows (numpy's gathers, casts and searches release the GIL)
    with ThreadPoolExecutor(parts) as pool:
        got = list(pool.map(cut, bounds, bounds[1:]))
    slices = [s for s in got if s is not None]
    if len(slices) < len(got):
        return None
    prefix = np.concatenate([p for p, _ in slices])
    groups = [g for g in (np.concatenate([runs[r] for _, runs in slices])
                          for r in range(len(pivots) + 1)) if len(g)]
    del got, slices  # (the slices' copies: a large input's memory is counted)
    if len(groups) < 2:
        return None

    def order_of(rows: np.ndarray) -> pa.Array:
        order = _prefix_order(table, names, prefix, rows)
        if order is None:  # many tied prefixes: Arrow's (stable) sort of the run's keys
            keys = table.select(list(names)).take(int64s(rows))
            order = rows[np.asarray(sort_indices(keys, names).to_numpy(), dtype=np.int64)]
        return int64s(order)

    # numpy's argsort and Arrow's sort release the GIL: the runs sort on all cores
    with ThreadPoolExecutor(len(groups)) as pool:
        return list(pool.map(order_of, groups))


def _datafusion_sort(table: pa.Table, names: Sequence[str]) -> pa.Table:
    import datafusion

    ctx = datafusion.SessionContext()
    # DataFusion's sort is not stable: the input position as the last key keeps equal keys
    # in input order
    positioned = table.append_column(_POS, pa.array(np.arange(table.num_rows, dtype=np.int64)))
    df = ctx.from_arrow(positioned).sort(
        *(datafusion.col(quote_identifier(n)).sort() for n in (*names, _POS)))
    batches = df.collect()
    out = pa.Table.from_batches(batches).drop_columns([_POS]) if batches \
        else table.schema.empty_table()
    if not out.schema.equals(table.schema):
        out = out.cast(table.schema)
    return out
