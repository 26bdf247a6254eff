"""Dump tasks of a box-partitioned table (``partitioning="dimensions"``).

A dump's tasks tile the dump range in key order (the load checks it, and a new table is cut
at the tiles' starts). Box leaves are not runs of that order, so a box table's tiles are cut
on the first row-key field, at the values its leaves are cut at: each task reads every leaf
whose cell meets its tile, merged into key order, and keeps the rows inside the tile (and the
dump range). A load of such a dump makes a box table cut at the same first-field values.
"""

from __future__ import annotations

from typing import Any

from sediment.core.boxes import Box, FieldRange, intersect
from sediment.core.cells import Cell
from sediment.core.ranges import Range
from sediment.core.state import TableState


def _first_bounds(r: Range) -> tuple[Any, Any]:
    return (None if r.start is None else r.start[0], None if r.end is None else r.end[0])


def box_tiles(state: TableState, rng: Range) -> list[tuple[Range, Range, tuple[str, ...]]]:
    """``(tile, query, leaf ids)`` per task, in key order: the tiles cover ``rng``'s
    lexicographic bounds exactly; ``query`` is what the task keeps (the tile, or the
    per-field region ``rng`` narrowed to the tile's first field)."""
    leaves = [p for p in state.leaf_partitions() if rng.overlaps(p.region)]
    if not leaves:
        return []
    lo, hi = _first_bounds(rng)
    cuts = sorted({v for p in leaves if isinstance(p.region, Cell)
                   for v in p.region.bounds[0] if v is not None
                   and (lo is None or v > lo) and (hi is None or v < hi)})
    ends: list[tuple[Any, bool]] = [(rng.start, rng.start_inclusive),
                                    *(((v,), True) for v in cuts), (rng.end, rng.end_inclusive)]
    out = []
    for i in range(len(ends) - 1):
        (start, s_inc), (end, e_inc) = ends[i], ends[i + 1]
        if 0 < i + 1 < len(ends) - 1:
            e_inc = False  # an inner cut starts the next tile
        tile = Range(start, end, start_inclusive=s_inc, end_inclusive=e_inc)
        t_lo, t_hi = _first_bounds(tile)
        field0 = FieldRange(t_lo, True, t_hi, True)
        hit = tuple(p.id for p in leaves if isinstance(p.region, Cell)
                    and intersect(p.region.field_ranges()[0], field0) is not None)
        query: Range = tile
        if isinstance(rng, Box) and rng.bound:
            narrowed = intersect(rng.fields[0], FieldRange(t_lo, True, t_hi,
                                                           i + 1 == len(ends) - 1))
            if narrowed is None:
                narrowed = FieldRange(t_lo, True, t_lo, False)  # selects nothing
            assert rng.names is not None
            query = rng.bind(rng.names, [narrowed, *rng.fields[1:]])
        out.append((tile, query, hit))
    return out
