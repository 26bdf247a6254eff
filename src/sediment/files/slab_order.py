"""The order of one merge slab: the rows of several sorted pieces, sorted by key, stably.

:func:`~sediment.files.merge.merge_sorted` cuts, from each stream's current batch, the rows up
to a cutoff key, and orders them here. Every strategy gives the same order: by key, rows with
equal keys in piece order, each piece's rows in their own order (the stable merge the
sequence rules rely on: ``sediment.files.sequence``). The first strategy that applies orders
the slab:

- :func:`place_into_largest`: a leaf after upserts holds one large sorted file and a few
  small ones, so a slab is one large run plus a few small ones. The small runs' rows are
  sorted among themselves (few) and placed into the large run by binary search of a uint64
  key prefix (its order agrees with the key's); only rows whose prefix equals one of the
  large run's are ordered exactly, with the large run's rows of that prefix. Linear in the
  large run where a sort of the slab is n log n on every key field (measured on the 35
  slabs of a 2M-row leaf of the benchmark schema with 5 upserted files of 650 rows a slab
  each, best of 5 on a busy machine: 3.6 ms a slab against 5.5 ms).
- :func:`sort_all`: Arrow's multi-key sort of the whole slab.

The result indexes the pieces' rows as if concatenated in order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sediment.files.keys import sort_indices
from sediment.files.sort import prefix_keys

SlabOrder = Callable[[Sequence[pa.RecordBatch], Sequence[str], Sequence[str] | None],
                     "np.ndarray | pa.Array | None"]
"""A strategy: the slab's order (``last_of``: see :func:`slab_order`), or None when it does
not apply to these pieces."""

SMALL_FRACTION = 0.125
"""Placement applies when the pieces other than the largest hold at most this fraction of its
rows: past it, the exact ordering of their many rows (and of the large run's rows they tie
with) approaches a sort of the slab."""

_RANK = "__sediment_piece"

_SIGN = np.uint64(1 << 63)

def ordered_prefix(col: pa.Array) -> np.ndarray | None:
    """A uint64 per value whose order agrees with the values' (equal prefixes may hide
    different values; a smaller prefix means a smaller value): the first 8 bytes of strings
    and binaries, integers and temporal values themselves (signed ones with the sign bit
    flipped). None for other types and for columns with nulls."""
    t = col.type
    if col.null_count:
        return None
    if pa.types.is_string(t) or pa.types.is_binary(t):
        return prefix_keys(col)
    if pa.types.is_unsigned_integer(t):
        return np.asarray(col.to_numpy(), dtype=np.uint64)
    if pa.types.is_integer(t):
        return np.asarray(col.to_numpy(), dtype=np.int64).view(np.uint64) ^ _SIGN
    if pa.types.is_timestamp(t) or pa.types.is_duration(t) or pa.types.is_date(t) or \
            pa.types.is_time(t):
        ints = col.view(pa.int64() if t.bit_width == 64 else pa.int32())
        return np.asarray(ints.to_numpy(), dtype=np.int64).view(np.uint64) ^ _SIGN
    return None


def place_into_largest(pieces: Sequence[pa.RecordBatch], names: Sequence[str],
                       last_of: Sequence[str] | None = None) -> np.ndarray | None:
    """The slab's order by placing the other pieces' rows into the largest piece (see the
    module docs); None when they are not few or the first key field has no prefix. With
    ``last_of``, rows followed by a tied row of equal ``last_of`` fields are left out."""
    sizes = [p.num_rows for p in pieces]
    big = int(np.argmax(sizes))
    n_big = sizes[big]
    n_small = sum(sizes) - n_big
    if n_small > SMALL_FRACTION * n_big:
        return None
    large = pieces[big]
    p_large = ordered_prefix(large.column(names[0]))
    if p_large is None:
        return None
    starts = np.cumsum([0, *sizes])
    smalls = [i for i in range(len(pieces)) if i != big]
    small = pa.Table.from_batches([pieces[i].select(list(names)) for i in smalls])
    # concatenated in piece order, so the stable sort keeps equal keys in piece order
    small_order = np.asarray(sort_indices(small, names).to_numpy(), dtype=np.int64)
    keys = small.take(pa.array(small_order)).combine_chunks()
    p_small = ordered_prefix(keys.column(names[0]).chunk(0))
    if p_small is None:
        return None
    at = np.searchsorted(p_large, p_small, "left")  # rows of the large piece before each
    hi = np.searchsorted(p_large, p_small, "right")
    tied = np.flatnonzero(at < hi)
    dropped_large = dropped_small = np.zeros(0, dtype=np.int64)
    if len(tied):
        at[tied], dropped_large, dropped_small = _tied_places(
            large, keys, names, tied, at[tied], hi[tied], big,
            np.repeat(smalls, [sizes[i] for i in smalls])[small_order], last_of)
    rows = np.concatenate([np.arange(starts[i], starts[i + 1]) for i in smalls])
    # (``at`` is ascending: the small rows are sorted, so each goes after the previous one)
    order = np.insert(starts[big] + np.arange(n_big), at, rows[small_order])
    if len(dropped_large) or len(dropped_small):
        keep = np.ones(len(order), dtype=bool)
        keep[dropped_large + np.searchsorted(at, dropped_large, "right")] = False
        keep[at[dropped_small] + dropped_small] = False
        order = order[keep]
    return order


def _tied_places(large: pa.RecordBatch, keys: pa.Table, names: Sequence[str],
                 tied: np.ndarray, lo: np.ndarray, hi: np.ndarray, big: int,
                 ranks: np.ndarray, last_of: Sequence[str] | None
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows of the large piece before each tied small row (``keys[tied]``, sorted; ``lo``,
    ``hi``: the large piece's rows of its prefix; ``ranks``: every small row's piece). With
    ``last_of``, also the rows to leave out: of the large piece (its row numbers) and of the
    small rows (their numbers in ``keys``), each followed in the merged order by a row of
    equal ``last_of`` fields. Prefixes are independent of each other: those of one large row
    and one small row are ordered as pairs (:func:`_pairs`), the others by a sort."""
    step = np.diff(lo) > 0
    single = (hi - lo == 1) & np.r_[True, step] & np.r_[step, True]
    if single.any():
        pairs = _pairs(large, keys, names, tied[single], lo[single], big, ranks, last_of)
        if pairs is not None:
            if single.all():
                return pairs
            rest = ~single
            sorted_ = _sorted_places(large, keys, names, tied[rest], lo[rest], hi[rest], big,
                                     ranks, last_of)
            places = np.empty(len(tied), dtype=np.int64)
            places[single], places[rest] = pairs[0], sorted_[0]
            return places, np.concatenate([pairs[1], sorted_[1]]), \
                np.concatenate([pairs[2], sorted_[2]])
    return _sorted_places(large, keys, names, tied, lo, hi, big, ranks, last_of)


def _sorted_places(large: pa.RecordBatch, keys: pa.Table, names: Sequence[str],
                   tied: np.ndarray, lo: np.ndarray, hi: np.ndarray, big: int,
                   ranks: np.ndarray, last_of: Sequence[str] | None
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`_tied_places` by a sort: the tied rows and the large piece's rows of their
    prefixes sorted together by the full key, then piece (the stable merge's tie rule); the
    rows left out are those followed in that order by a row of equal ``last_of`` fields
    (every row between two rows of equal keys has their prefix, so it is among these)."""
    # the large piece's rows of each prefix: one range per distinct prefix (ranges of equal
    # prefixes are equal, of different ones disjoint), expanded to row numbers
    first, at = np.unique(lo, return_index=True)
    lengths = hi[at] - first
    ends = np.cumsum(lengths)
    spans = np.repeat(first - (ends - lengths), lengths) + np.arange(int(ends[-1]))
    both = pa.concat_tables([
        pa.Table.from_batches([large.select(list(names))]).take(pa.array(spans))
        .append_column(_RANK, pa.array(np.full(len(spans), big, dtype=np.int64))),
        keys.take(pa.array(tied)).append_column(_RANK, pa.array(ranks[tied]))])
    # stable: tied rows keep their sorted order, the large piece's rows theirs
    order = np.asarray(pc.sort_indices(
        both, sort_keys=[*((n, "ascending") for n in names), (_RANK, "ascending")]
    ).to_numpy(), dtype=np.int64)
    is_large = order < len(spans)
    before = np.cumsum(is_large)[~is_large]  # large rows before each tied row, in order
    after = spans[np.maximum(before - 1, 0)] + 1
    places = np.where(before > 0, np.maximum(lo, after), lo)
    none = np.zeros(0, dtype=np.int64)
    if not last_of or len(order) < 2:
        return places, none, none
    ordered = both.select(list(last_of)).take(pa.array(order))
    repeated = np.ones(len(order), dtype=bool)  # is the next row's key the same?
    repeated[-1] = False
    for name in last_of:
        col = ordered.column(name)
        same = pc.equal(col.slice(1), col.slice(0, len(order) - 1))
        if col.null_count:  # (sort keys may be null: nulls equal nulls, as in a run)
            same = pc.or_kleene(same, pc.and_(pc.is_null(col.slice(1)),
                                              pc.is_null(col.slice(0, len(order) - 1))))
        repeated[:-1] &= np.asarray(pc.fill_null(same, False).to_numpy(
            zero_copy_only=False), dtype=bool)
    gone = order[repeated]
    return places, spans[gone[gone < len(spans)]], \
        tied[gone[gone >= len(spans)] - len(spans)]


def _pairs(large: pa.RecordBatch, keys: pa.Table, names: Sequence[str], tied: np.ndarray,
           lo: np.ndarray, big: int, ranks: np.ndarray, last_of: Sequence[str] | None
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """:func:`_tied_places` where each tied prefix is one large row and one small row (an
    upsert of a record the base holds, keys whose first 8 bytes tell them apart): each pair
    ordered by comparing its two keys field by field, no sort. None when a key has nulls
    (the sort's order of nulls is left to the sort)."""
    pair = pa.Table.from_batches([large.select(list(names))]).take(pa.array(lo))
    mine = keys.take(pa.array(tied))
    if any(pair.column(n).null_count or mine.column(n).null_count for n in names):
        return None
    first = np.zeros(len(tied), dtype=bool)  # does the small row sort before its pair?
    equal = np.ones(len(tied), dtype=bool)  # are the keys equal on the fields so far?
    same = equal
    for i, name in enumerate(names):
        a, b = mine.column(name), pair.column(name)
        first |= equal & np.asarray(pc.less(a, b).to_numpy(), dtype=bool)
        equal &= np.asarray(pc.equal(a, b).to_numpy(), dtype=bool)
        if last_of and i == len(last_of) - 1:
            same = equal.copy()
    first |= equal & (ranks[tied] < big)  # equal keys: in piece order
    places = lo + ~first
    none = np.zeros(0, dtype=np.int64)
    if not last_of:
        return places, none, none
    # of two records of one record key, the earlier is left out
    return places, lo[same & ~first], tied[same & first]


def sort_all(pieces: Sequence[pa.RecordBatch], names: Sequence[str],
             last_of: Sequence[str] | None = None) -> pa.Array:
    """The slab's order by Arrow's stable multi-key sort of all its rows (``last_of``: no
    row left out)."""
    return sort_indices(pa.Table.from_batches(pieces), names)


STRATEGIES: tuple[SlabOrder, ...] = (place_into_largest, sort_all)
"""Tried in order; the last always applies."""


def slab_order(pieces: Sequence[pa.RecordBatch], names: Sequence[str],
               last_of: Sequence[str] | None = None) -> np.ndarray | pa.Array:
    """Indices that order the rows of ``pieces`` (each sorted by ``names``, concatenated in
    order) by ``names``, stably: the first of :data:`STRATEGIES` that applies. With
    ``last_of`` (a prefix of ``names``), a strategy may leave out rows that a later row of
    the slab with equal ``last_of`` fields follows (so a merge for a ``merge="last"`` read
    gathers no record its rule drops); it never leaves out the last of them."""
    for strategy in STRATEGIES:
        order = strategy(pieces, names, last_of)
        if order is not None:
            return order
    raise AssertionError("sort_all always applies")
