"""Box partitioning (``partitioning="dimensions"``): a leaf's region is a :class:`Cell`, a
range on each row-key field, and a split cuts one field (Sleeper's partitions).

A box leaf's rows are not a run of the key order (rows of one leaf are spread over the whole
order), so rows find their leaf by descending the tree (``O(rows x depth)`` Arrow comparisons,
no per-record Python), a sorted batch is split by leaf with each leaf's rows kept in order, a
dump is tiled on the first field at the values the leaves are cut at, and a split picks a
field and cuts it at its median. A read's range that pins leading fields is read as the box
it is, so that it prunes leaves by every field it pins.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sediment.core.model import Partition
from sediment.core.regions import Box, Cell, FieldRange, Range, intersect
from sediment.core.state import TableState
from sediment.core.transactions import SplitPartition
from sediment.errors import PropertyError
from sediment.files.keys import Columnar, cell_mask, key_value, region_mask
from sediment.files.sample import COUNT, merge_samples
from sediment.partitioning.base import Partitioning, Piece, SplitChoice, Tile
from sediment.properties import defaults
from sediment.settings import TableSettings

SPLIT_FIELD_RULES = ("first", "cycle")
"""How a box split picks its field (property ``partition.split.dimension``): ``first`` is
Sleeper's rule, the first field that can be cut; ``cycle`` is a k-d tree's, a leaf at depth
``d`` trying field ``d mod n`` first. Under ``first`` a second field is cut only where the
first is nearly constant, so a first field of many values (users, graph sources) gives a tree
that never bounds the second; ``cycle`` bounds every field, at a leaf count that halves the
leaves a one-field query reads per field cut.
"""


class Dimensions(Partitioning):
    """Leaves over boxes: a range on each row-key field."""

    name: ClassVar[str] = "dimensions"
    cuts_in_order: ClassVar[bool] = False

    def leaf_finder(self, state: TableState) -> BoxLeaves:
        return BoxLeaves(state.partitions, state.leaf_partitions())

    def cut(self, state: TableState, stream: Iterator[pa.RecordBatch], names: Sequence[str]
            ) -> Iterator[tuple[pa.RecordBatch, list[Piece]]]:
        """Each batch split by leaf (:func:`assign_leaves`): each leaf's rows in the batch's
        order, so a sorted batch gives each leaf a sorted piece."""
        for batch in stream:
            yield batch, [Piece(leaf, len(rows), 0, rows)
                          for leaf, rows in assign_leaves(batch, names, state.partitions)]

    def read_ranges(self, ranges: Sequence[Range], names: Sequence[str]) -> list[Range]:
        return [as_box(r, names) for r in ranges]

    def tiles(self, state: TableState, rng: Range) -> list[Tile]:
        return box_tiles(state, rng)

    def dump_fields(self) -> dict[str, Any]:
        return {"partitioning": self.name}  # a load makes a box table cut where the tiles are

    def choose_split(self, state: TableState, leaf: Partition, samples: Sequence[pa.Table],
                     names: Sequence[str], settings: TableSettings) -> SplitChoice:
        """A field (tried from the one ``partition.split.dimension`` names for the leaf's
        depth on) cut at its median over the leaf's samples (:func:`choose_cut`)."""
        cell = leaf.region.cell
        assert cell is not None
        first = first_field(settings.partition_split_dimension, len(state.ancestors(leaf.id)),
                            len(names))
        cut = None
        if samples:
            merged = merge_samples([s.select([*names, COUNT]) for s in samples], names)
            mask = region_mask(merged, names, cell)
            cut = choose_cut(cell, merged if mask is None else merged.filter(mask), names,
                             COUNT, first=first)
        if cut is None:
            return SplitChoice(None, None, "no row-key field has a median strictly between "
                                           "its minimum and maximum in the leaf")
        return SplitChoice((cut[1],), cut[0])

    def import_splits(self, merged: pa.Table, names: Sequence[str], state: TableState,
                      target_rows: int) -> list[SplitPartition]:
        """A leaf getting more than ``target_rows`` of the input's rows is cut as a split
        would cut it (the field ``partition.split.dimension`` picks at its median,
        :func:`choose_cut`, over the input's sample within the leaf), and each side again
        while it gets more."""
        rule = str({**defaults(), **state.properties}["partition.split.dimension"])
        splits: list[SplitPartition] = []
        for leaf in state.leaf_partitions():
            cell = leaf.region.cell
            assert cell is not None
            mask = cell_mask(merged, names, cell)
            _cut_box(leaf.id, cell, merged if mask is None else merged.filter(mask),
                     names, target_rows, splits, rule, len(state.ancestors(leaf.id)))
        return splits


# ---- where a row goes ---------------------------------------------------------------------
def split_of(parent: Partition, left: Partition) -> tuple[int, object]:
    """The field a box split cut and the value it cut at (read off the children's cells)."""
    above, below = parent.region.cell, left.region.cell
    assert above is not None and below is not None
    for i, (a, b) in enumerate(zip(above.bounds, below.bounds, strict=True)):
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


class BoxLeaves:
    """A box tree's leaves in the order of ``TableState.leaf_partitions()``: what a bulk
    import's tasks need to give each row its leaf's index. Plain data: Spark pickles it."""

    boundaries: pa.Table | None = None  # a row's leaf is found by descending the tree

    def __init__(self, partitions: Mapping[str, Partition], leaves: Sequence[Partition]):
        self.partitions = dict(partitions)
        self.position = {p.id: i for i, p in enumerate(leaves)}

    def indices(self, data: Columnar, names: Sequence[str]) -> np.ndarray:
        out = np.zeros(data.num_rows, dtype=np.int32)
        for leaf, rows in assign_leaves(data, names, self.partitions):
            out[rows] = self.position[leaf.id]
        return out


# ---- how a plan is pruned -----------------------------------------------------------------
def as_box(r: Range, names: Sequence[str]) -> Range:
    """A checked range as the per-field region it exactly is, when it is one: ends of equal
    length ``n`` sharing their first ``n - 1`` values select those values and a range of the
    ``n``-th field (``Range(("s", 5), ("s", 9))``, ``Range.exact(("s",))``). On box partitions
    that prunes leaves and row groups by every field it pins; anything else is kept as it is."""
    if r.per_field is not None or r.start is None or r.end is None \
            or len(r.start) != len(r.end) or r.start[:-1] != r.end[:-1]:
        return r
    n = len(r.start)
    given = {names[i]: Range.exact(v) for i, v in enumerate(r.start[:-1])}
    given[names[n - 1]] = Range(r.start[-1], r.end[-1], start_inclusive=r.start_inclusive,
                                end_inclusive=r.end_inclusive)
    fields = [FieldRange(v, True, v, True) for v in r.start[:-1]]
    fields.append(FieldRange(r.start[-1], r.start_inclusive, r.end[-1], r.end_inclusive))
    fields += [FieldRange()] * (len(names) - n)
    return Box(given).bind(names, fields)


# ---- how a range is tiled for a dump ------------------------------------------------------
def _first_bounds(r: Range) -> tuple[Any, Any]:
    return (None if r.start is None else r.start[0], None if r.end is None else r.end[0])


def box_tiles(state: TableState, rng: Range) -> list[Tile]:
    """The tiles cut ``rng``'s lexicographic bounds on the first row-key field, at the
    values the leaves are cut at, so they cover it exactly; each task reads every leaf whose
    cell meets its tile, merged into key order, and keeps its ``query``: the tile, or the
    per-field region ``rng`` narrowed to the tile's first field. A load of such a dump makes
    a box table cut at the same first-field values."""
    leaves = [(p, cell) for p in state.leaf_partitions() if rng.overlaps(p.region)
              and (cell := p.region.cell) is not None]
    if not leaves:
        return []
    lo, hi = _first_bounds(rng)
    cuts = sorted({v for _, cell in leaves for v in cell.bounds[0] if v is not None
                   and (lo is None or v > lo) and (hi is None or v < hi)})
    ends: list[tuple[Any, bool]] = [(rng.start, rng.start_inclusive),
                                    *(((v,), True) for v in cuts), (rng.end, rng.end_inclusive)]
    box = rng.per_field
    out = []
    for i in range(len(ends) - 1):
        (start, s_inc), (end, e_inc) = ends[i], ends[i + 1]
        if 0 < i + 1 < len(ends) - 1:
            e_inc = False  # an inner cut starts the next tile
        tile = Range(start, end, start_inclusive=s_inc, end_inclusive=e_inc)
        t_lo, t_hi = _first_bounds(tile)
        field0 = FieldRange(t_lo, True, t_hi, True)
        hit = tuple(p.id for p, cell in leaves
                    if intersect(cell.field_ranges()[0], field0) is not None)
        query: Range = tile
        if box is not None and box.bound:
            narrowed = intersect(box.fields[0], FieldRange(t_lo, True, t_hi,
                                                           i + 1 == len(ends) - 1))
            if narrowed is None:
                narrowed = FieldRange(t_lo, True, t_lo, False)  # selects nothing
            assert box.names is not None
            query = box.bind(box.names, [narrowed, *box.fields[1:]])
        out.append(Tile(tile, query, hit))
    return out


# ---- how a split is chosen ----------------------------------------------------------------
def median_dimension(cell: Cell, medians: Sequence[Any], mins: Sequence[Any],
                     maxs: Sequence[Any], *, first: int = 0) -> int | None:
    """The field to cut: trying the fields in order from ``first`` (wrapping round), the first
    whose median (over the leaf's records) is neither the minimum nor the maximum of that
    field in the leaf, and strictly inside the cell's range on it (None: no field can be
    cut). With ``first`` 0 this is Sleeper's choice."""
    n = len(medians)
    for i in ((first + j) % n for j in range(n)):
        med, lo, hi = medians[i], mins[i], maxs[i]
        if med is None or med == lo or med == hi:
            continue
        if cell.can_cut(i, med):
            return i
    return None


def first_field(rule: str, depth: int, fields: int) -> int:
    """The field a split of a leaf ``depth`` levels below the root tries first under ``rule``
    (see SPLIT_FIELD_RULES)."""
    if rule not in SPLIT_FIELD_RULES:
        raise PropertyError(f"partition.split.dimension: {rule!r} is not one of "
                            f"{', '.join(SPLIT_FIELD_RULES)}")
    return depth % fields if rule == "cycle" else 0


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
    trying the fields from ``first`` on (:func:`first_field`: 0 is Sleeper's choice), the
    first whose median is neither its minimum nor its maximum in the leaf, cut at that
    median; None when no field can be cut."""
    if sample.num_rows == 0:
        return None
    counts = sample.column(count).to_numpy(zero_copy_only=False).astype(np.int64)
    stats = [field_median(sample, n, counts) for n in names]
    dim = median_dimension(cell, [s[0] for s in stats], [s[1] for s in stats],
                           [s[2] for s in stats], first=first)
    return None if dim is None else (dim, stats[dim][0])


def _cut_box(pid: str, cell: Cell, sample: pa.Table, names: Sequence[str], target: int,
             out: list[SplitPartition], rule: str, depth: int) -> None:
    rows = int(pc.sum(sample.column(COUNT)).as_py() or 0) if sample.num_rows else 0
    cut = choose_cut(cell, sample, names, COUNT, first=first_field(rule, depth, len(names))) \
        if rows > target else None
    if cut is None:
        return
    dim, value = cut
    left, right = uuid.uuid4().hex[:16], uuid.uuid4().hex[:16]
    out.append(SplitPartition(pid, (value,), left, right, dim))
    low_cell, high_cell = cell.cut(dim, value)
    column = sample.column(names[dim])
    low = pc.less(column, pa.scalar(value, type=column.type))
    _cut_box(left, low_cell, sample.filter(low), names, target, out, rule, depth + 1)
    _cut_box(right, high_cell, sample.filter(pc.invert(low)), names, target, out, rule,
             depth + 1)
