"""Lexicographic partitioning (``partitioning="lexicographic"``, the default): a leaf's region
is ``[min, max)`` of whole keys, so the leaves are runs of the key order: a sorted stream is
cut at their ends, a row's leaf is the number of leaf minimums at or below its key, a dump's
tiles are the leaves themselves and a split cuts at the median key."""

from __future__ import annotations

import math
import uuid
from collections.abc import Iterator, Sequence
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sediment.core.keys import Key
from sediment.core.model import Partition
from sediment.core.regions import Range
from sediment.core.state import TableState
from sediment.core.transactions import SplitPartition
from sediment.files.keys import bisect_key, region_mask, row_key
from sediment.files.sample import COUNT, merge_samples, quantile
from sediment.partitioning.base import (
    Partitioning,
    Piece,
    SplitChoice,
    Tile,
)
from sediment.settings import TableSettings


class Lexicographic(Partitioning):
    """Leaves over runs of the lexicographic key order."""

    name: ClassVar[str] = "lexicographic"
    cuts_in_order: ClassVar[bool] = True

    def leaf_finder(self, state: TableState) -> BoundaryLeaves:
        return BoundaryLeaves(boundary_table(state))

    def cut(self, state: TableState, stream: Iterator[pa.RecordBatch], names: Sequence[str]
            ) -> Iterator[tuple[pa.RecordBatch, list[Piece]]]:
        """Each batch cut at the leaves' ends by bisection (the stream is sorted, so the
        leaves come in key order, each once)."""
        leaves = state.leaf_partitions()
        row_keys = list(names)
        li = 0
        for batch in stream:
            pieces = []
            start = 0
            while start < batch.num_rows:
                leaf = leaves[li]
                if leaf.region.max is None:
                    end = batch.num_rows
                else:
                    end = bisect_key(batch, leaf.region.max, row_keys, lo=start)
                if end > start:
                    pieces.append(Piece(leaf, end - start, start))
                if end < batch.num_rows:
                    li += 1
                start = end
            yield batch, pieces

    def read_ranges(self, ranges: Sequence[Range], names: Sequence[str]) -> list[Range]:
        return list(ranges)

    def tiles(self, state: TableState, rng: Range) -> list[Tile]:
        """One tile per leaf ``rng`` meets: the leaf's region, the first starting where
        ``rng`` starts and the last ending where it ends, so the tiles cover ``rng`` exactly
        by construction, also when a bound of ``rng`` is a prefix of a multi-field split
        key. Each reads ``rng`` within its leaf."""
        leaves = [leaf for leaf in state.leaf_partitions() if rng.overlaps(leaf.region)]
        out = []
        for i, leaf in enumerate(leaves):
            start, s_inc = (rng.start, rng.start_inclusive) if i == 0 else \
                (leaves[i - 1].region.max, True)
            end, e_inc = (rng.end, rng.end_inclusive) if i == len(leaves) - 1 else \
                (leaf.region.max, False)
            out.append(Tile(Range(start, end, start_inclusive=s_inc, end_inclusive=e_inc), rng,
                            (leaf.id,)))
        return out

    def dump_fields(self) -> dict[str, Any]:
        return {}  # a dump without "partitioning" loads as lexicographic (older dumps too)

    def choose_split(self, state: TableState, leaf: Partition, samples: Sequence[pa.Table],
                     names: Sequence[str], settings: TableSettings) -> SplitChoice:
        key = choose_split_key(leaf, [s.select([*names, COUNT]) for s in samples], names)
        return SplitChoice(key, None, "" if key is not None else "every record has one row key")

    def import_splits(self, merged: pa.Table, names: Sequence[str], state: TableState,
                      target_rows: int) -> list[SplitPartition]:
        """A leaf getting ``r`` of the sample's rows is cut into ``ceil(r / target_rows)``
        parts at the sample's quantiles within it, halving recursively, so the new subtree
        stays balanced."""
        splits: list[SplitPartition] = []
        for leaf in state.leaf_partitions():
            region = leaf.region
            lo = 0 if region.min is None else bisect_key(merged, region.min, names)
            hi = merged.num_rows if region.max is None else bisect_key(merged, region.max, names)
            part = merged.slice(lo, max(0, hi - lo))
            rows = int(pc.sum(part.column(COUNT)).as_py() or 0)
            parts = math.ceil(rows / target_rows)
            if parts < 2:
                continue
            points: list[Key] = []
            for i in range(1, parts):
                k = quantile(part, names, i / parts)
                if k is not None and region.is_strictly_inside(k) and \
                        (not points or k > points[-1]):
                    points.append(k)
            _split_balanced(leaf.id, points, splits)
        return splits


def _split_balanced(pid: str, points: Sequence[Key], out: list[SplitPartition]) -> None:
    """Split ``pid`` at the middle point, then each side at the middle of its points."""
    if not points:
        return
    mid = len(points) // 2
    left, right = uuid.uuid4().hex[:16], uuid.uuid4().hex[:16]
    out.append(SplitPartition(pid, tuple(points[mid]), left, right))
    _split_balanced(left, points[:mid], out)
    _split_balanced(right, points[mid + 1:], out)


def choose_split_key(leaf: Partition, samples: Sequence[pa.Table],
                     names: Sequence[str]) -> Key | None:
    """The median row key of the leaf's samples, strictly inside its region, or None.

    The median is the key at sorted position ``floor(n/2)`` of the leaf's ``n`` sampled records
    (``quantile``), the first key of the right child, as in Sleeper: for distinct keys 0..999
    it is 500 and each child gets 500 records; for 1..100 it is 51. A sample that keeps every
    k-th key gives the key of a record less than one sample step (k) below that position, so
    for distinct keys the left child holds within k records of half; with repeated keys it
    holds the records below that key's run. When the key is the leaf's smallest (most records
    share it), the next sampled key up is taken.
    """
    if not samples:
        return None
    merged = merge_samples(samples, names)
    mask = region_mask(merged, names, leaf.region)
    if mask is not None:
        merged = merged.filter(mask)
    if merged.num_rows == 0:
        return None
    # Both halves must get records: the key must be above the smallest sampled key (an actual
    # key of the leaf), not merely inside the region (whose min may be -inf or below the data).
    first = row_key(merged, 0, names)
    key = quantile(merged, names, 0.5)
    if key is not None and key > first and leaf.region.is_strictly_inside(key):
        return key
    # Many rows share the smallest key: take the first sampled key above it.
    i = bisect_key(merged, first, names, right=True)
    if i < merged.num_rows:
        k = row_key(merged, i, names)
        if leaf.region.is_strictly_inside(k):
            return k
    return None


# ---- where a row goes (bulk import) -------------------------------------------------------
class BoundaryLeaves:
    """Leaves found by their minimums (:func:`boundary_table`): plain data, pickled by Spark."""

    def __init__(self, boundaries: pa.Table) -> None:
        self.boundaries: pa.Table | None = boundaries

    def indices(self, data: pa.Table | pa.RecordBatch, names: Sequence[str]) -> np.ndarray:
        assert self.boundaries is not None
        return leaf_indices(data, names, self.boundaries)


def _type_minimum(t: pa.DataType) -> Any:
    if pa.types.is_integer(t):
        return -(2 ** (t.bit_width - 1))
    if pa.types.is_string(t):
        return ""
    if pa.types.is_binary(t):
        return b""
    return 0


def boundary_table(state: TableState) -> pa.Table:
    """Row-key mins of every leaf but the first, in key order (prefixes padded with minima)."""
    assert state.schema is not None
    fields = list(state.schema.row_keys)
    mins = [leaf.region.min for leaf in state.leaf_partitions()[1:]]
    cols = []
    for i, f in enumerate(fields):
        vals = [m[i] if m is not None and i < len(m) else _type_minimum(f.type) for m in mins]
        cols.append(pa.array(vals, type=f.type))
    return pa.Table.from_arrays(cols, schema=pa.schema(fields))


# pyarrow's binary search over a sorted array (added in pyarrow 26); None before it
_SEARCH_SORTED = getattr(pc, "search_sorted", None)


def leaf_indices(data: pa.Table | pa.RecordBatch, names: Sequence[str],
                 boundaries: pa.Table) -> np.ndarray:
    """Index (in key order) of each row's leaf partition, vectorised.

    A row's leaf is the number of boundaries at or below its key: a binary search of the
    (sorted) boundaries on the first row-key field (``pc.search_sorted``, O(n log b)). Rows whose
    first field equals a boundary's, when there are more row-key fields, are resolved on the
    whole key by :func:`_leaf_indices_by_sort`.
    """
    n = data.num_rows
    if boundaries.num_rows == 0 or n == 0:  # (no rows: no column type to compare with)
        return np.zeros(n, dtype=np.int32)
    if _SEARCH_SORTED is None:  # pyarrow before 26: the joint sort gives the same answer
        return _leaf_indices_by_sort(data, names, boundaries)
    first = data.column(names[0])
    bounds = boundaries.column(0).combine_chunks()
    if not bounds.type.equals(first.type):
        bounds = bounds.cast(first.type)
    hi = _SEARCH_SORTED(bounds, first, side="right").to_numpy().astype(np.int32)
    if len(names) == 1:
        return hi
    lo = _SEARCH_SORTED(bounds, first, side="left").to_numpy()
    tied = np.flatnonzero(lo != hi)
    if len(tied):
        hi[tied] = _leaf_indices_by_sort(data.take(pa.array(tied)), names, boundaries)
    return hi


def _leaf_indices_by_sort(data: pa.Table | pa.RecordBatch, names: Sequence[str],
                          boundaries: pa.Table) -> np.ndarray:
    """:func:`leaf_indices` on the whole key: boundaries and keys are sorted together (a
    stable sort, boundaries first); a row's leaf is the number of boundaries sorted before it.
    """
    n = data.num_rows
    nb = boundaries.num_rows
    keys = pa.Table.from_arrays([data.column(c) for c in names], names=list(names))
    combined = pa.concat_tables([boundaries.cast(keys.schema), keys])
    order = pc.sort_indices(combined, sort_keys=[(c, "ascending") for c in names]).to_numpy()
    is_boundary = order < nb
    cum = np.cumsum(is_boundary)
    out = np.empty(n, dtype=np.int32)
    out[order[~is_boundary] - nb] = cum[~is_boundary]
    return out
