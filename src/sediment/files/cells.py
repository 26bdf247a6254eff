"""Which box partition each row belongs to, vectorised: the rows descend the partition tree,
each split comparing one column with its value (``O(rows x depth)`` Arrow comparisons, no
per-record Python). Rows keep their order within a leaf, so a sorted batch gives each leaf a
sorted piece."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sediment.core.cells import Cell, median_dimension
from sediment.core.model import Partition
from sediment.files.keys import Columnar, key_value


def split_of(parent: Partition, left: Partition) -> tuple[int, object]:
    """The field a box split cut and the value it cut at (read off the children's cells)."""
    assert isinstance(parent.region, Cell) and isinstance(left.region, Cell)
    for i, (a, b) in enumerate(zip(parent.region.bounds, left.region.bounds, strict=True)):
        if a[1] != b[1]:
            return i, b[1]
    raise ValueError(f"partition {parent.id}: its children do not cut its cell")


def assign_leaves(data: Columnar, names: Sequence[str],
                  partitions: Mapping[str, Partition]) -> list[tuple[Partition, np.ndarray]]:
    """Each leaf holding rows of ``data`` with the (ascending) indices of its rows."""
    root = next(p for p in partitions.values() if p.parent_id is None)
    out: list[tuple[Partition, np.ndarray]] = []
    stack = [(root, np.arange(data.num_rows, dtype=np.int64))]
    while stack:
        node, rows = stack.pop()
        if not len(rows):
            continue
        if node.is_leaf:
            out.append((node, rows))
            continue
        left, right = (partitions[c] for c in node.children)
        dim, value = split_of(node, left)
        col = data.column(names[dim])
        values = col.take(pa.array(rows)) if len(rows) < data.num_rows else col
        low = pc.less(values, pa.scalar(value, type=col.type))
        mask = np.asarray(low.to_numpy(zero_copy_only=False), dtype=bool) \
            if isinstance(low, pa.Array) else \
            np.asarray(low.combine_chunks().to_numpy(zero_copy_only=False), dtype=bool)
        stack.append((right, rows[~mask]))
        stack.append((left, rows[mask]))
    return out


def field_median(sample: Columnar, name: str, counts: np.ndarray) -> tuple[object, object,
                                                                           object]:
    """(median, min, max) of one field over a sample's records (each sample row standing
    for ``counts`` records): the value at sorted position ``floor(n/2)``, as the key median
    of a lexicographic split is (see sediment.files.sample.quantile)."""
    col = sample.column(name)
    order = pc.sort_indices(col).to_numpy()
    cum = np.cumsum(counts[order])
    pos = int(np.searchsorted(cum, cum[-1] // 2, side="right"))
    pos = min(pos, len(order) - 1)
    values = col.take(pa.array(order[[pos, 0, len(order) - 1]]))
    med, lo, hi = (key_value(v) for v in values)  # the model's values (temporal as int)
    return med, lo, hi


def choose_cut(cell: Cell, sample: Columnar, names: Sequence[str], count: str, *,
               first: int = 0) -> tuple[int, object] | None:
    """Where to split a box leaf, from the merged sample of its files restricted to it:
    trying the fields from ``first`` on (core/cells.first_field: 0 is Sleeper's choice), the
    first whose median is neither its minimum nor its maximum in the leaf, cut at that
    median; None when no field can be cut."""
    if sample.num_rows == 0:
        return None
    counts = sample.column(count).to_numpy(zero_copy_only=False).astype(np.int64)
    stats = [field_median(sample, n, counts) for n in names]
    dim = median_dimension(cell, [s[0] for s in stats], [s[1] for s in stats],
                           [s[2] for s in stats], first=first)
    return None if dim is None else (dim, stats[dim][0])


class BoxLeaves:
    """A box tree's leaves in the order of ``TableState.leaf_partitions()``: what a bulk
    import's tasks need to give each row its leaf's index (the lexicographic form is a table
    of boundaries; see sediment.spark.tasks.boundary_table). Plain data: Spark pickles it."""

    def __init__(self, partitions: Mapping[str, Partition], leaves: Sequence[Partition]):
        self.partitions = dict(partitions)
        self.position = {p.id: i for i, p in enumerate(leaves)}

    def indices(self, data: Columnar, names: Sequence[str]) -> np.ndarray:
        out = np.zeros(data.num_rows, dtype=np.int32)
        for leaf, rows in assign_leaves(data, names, self.partitions):
            out[rows] = self.position[leaf.id]
        return out
