"""K-way merge of sorted record-batch streams, vectorised chunk by chunk.

Each round takes, from every stream's current batch, the rows whose key is <= the smallest "last
key" among those batches (found by bisection), orders that slab (it holds only the overlapping
rows; :mod:`sediment.files.slab_order` chooses how) and emits it. Memory holds one batch per
stream plus one slab, whatever the stream sizes.

The merge is stable: rows with equal keys come out in stream order (all of stream 0's, then
stream 1's, ...), each stream's in its own order. Rows equal to the cutoff key are taken only
from the streams up to the first one whose batch ends with that key (its next batch may hold
more of them); later streams' wait for the next round.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

import pyarrow as pa

from sediment.files.keys import bisect_key, row_key
from sediment.files.slab_order import slab_order


def merge_sorted(streams: Sequence[Iterable[pa.RecordBatch]], names: Sequence[str],
                 schema: pa.Schema, *, last_of: Sequence[str] | None = None
                 ) -> Iterator[pa.RecordBatch]:
    """Merge streams each sorted by ``names`` into one sorted stream.

    ``last_of`` (a prefix of ``names``): the caller keeps only the last row of each run of
    equal ``last_of`` fields (``merge="last"``), so the merge may leave out rows that a later
    row of the same slab with equal fields follows, rather than gather them for the rule to
    drop (:func:`~sediment.files.slab_order.slab_order`); runs that straddle slabs and
    streams the merge passes through are the caller's to settle."""
    iters = [iter(s) for s in streams]
    heads: list[pa.RecordBatch | None] = [_next_nonempty(it) for it in iters]
    if sum(h is not None for h in heads) <= 1:
        for i, h in enumerate(heads):
            if h is not None:
                yield h
                yield from (b for b in iters[i] if b.num_rows)
        return
    while True:
        active = [i for i, h in enumerate(heads) if h is not None]
        if not active:
            return
        if len(active) == 1:
            i = active[0]
            yield heads[i]
            yield from (b for b in iters[i] if b.num_rows)
            return
        lasts = [row_key(heads[i], heads[i].num_rows - 1, names)  # type: ignore[union-attr]
                 for i in active]
        cutoff = min(lasts)
        limiting = active[lasts.index(cutoff)]  # the first stream whose batch ends at cutoff
        pieces: list[pa.RecordBatch] = []
        for i in active:
            h = heads[i]
            assert h is not None
            cut = bisect_key(h, cutoff, names, right=i <= limiting)
            if cut:
                pieces.append(h.slice(0, cut))
            if cut >= h.num_rows:
                heads[i] = _next_nonempty(iters[i])
            else:
                heads[i] = h.slice(cut)
        if len(pieces) == 1:
            yield pieces[0]
            continue
        # gathered from the pieces as they are (Arrow's take reads across chunks; measured
        # on a 68k-row slab: 4.2 ms, against 6.4 ms after combining them)
        slab = pa.Table.from_batches(pieces, schema=schema)
        yield from slab.take(slab_order(pieces, names, last_of)).combine_chunks().to_batches()


def _next_nonempty(it: Iterator[pa.RecordBatch]) -> pa.RecordBatch | None:
    for b in it:
        if b.num_rows:
            return b
    return None
