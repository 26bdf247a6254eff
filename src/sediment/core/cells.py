"""Box partitions (``partitioning="dimensions"``): a partition's region is a range on each
row-key field, and a split cuts one field (Sleeper's partitions).

A :class:`Cell` is a :class:`Region` whose ``min`` and ``max`` are its lexicographic bounds on
the first field (``[(lo,), (hi,))``): every key of the cell lies inside them, so code that only
prunes by a region's ends stays correct; code that must be exact (row masks, the sorted-stream
cut of ingest, the "whole row group inside" shortcut) asks :func:`is_cell` and treats the
cell per field. The kind of a table's tree is its root's region, never a property read at run
time: a tree and its kind cannot disagree.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sediment.core.boxes import FieldRange
from sediment.core.keys import Key, decode_value, encode_value
from sediment.core.model import Partition, Region
from sediment.errors import PropertyError, SchemaError
from sediment.schema import Schema

PARTITIONINGS = ("lexicographic", "dimensions")

SPLIT_FIELD_RULES = ("first", "cycle")
"""How a box split picks its field (property ``partition.split.dimension``): ``first`` is
Sleeper's rule, the first field that can be cut; ``cycle`` is a k-d tree's, a leaf at depth
``d`` trying field ``d mod n`` first. Under ``first`` a second field is cut only where the
first is nearly constant, so a first field of many values (users, graph sources) gives a tree
that never bounds the second; ``cycle`` bounds every field, at a leaf count that halves the
leaves a one-field query reads per field cut.
"""


@dataclass(frozen=True, slots=True, init=False)
class Cell(Region):
    """``[lo, hi)`` on each row-key field, in the schema's order (None ends: unbounded)."""

    bounds: tuple[tuple[Any, Any], ...] = ()

    def __init__(self, bounds: Sequence[tuple[Any, Any]]) -> None:
        bounds = tuple((lo, hi) for lo, hi in bounds)
        lo0, hi0 = bounds[0]
        object.__setattr__(self, "min", None if lo0 is None else (lo0,))
        object.__setattr__(self, "max", None if hi0 is None else (hi0,))
        object.__setattr__(self, "bounds", bounds)

    @classmethod
    def whole(cls, fields: int) -> Cell:
        return cls([(None, None)] * fields)

    def contains(self, key: Key) -> bool:
        return all((lo is None or v >= lo) and (hi is None or v < hi)
                   for (lo, hi), v in zip(self.bounds, key, strict=False))

    def is_strictly_inside(self, key: Key) -> bool:
        """A cell is cut on one field (:meth:`can_cut`), never at a whole key."""
        return False

    def can_cut(self, dimension: int, value: Any) -> bool:
        """Whether cutting field ``dimension`` at ``value`` leaves two non-empty cells."""
        if not 0 <= dimension < len(self.bounds):
            return False
        lo, hi = self.bounds[dimension]
        return (lo is None or value > lo) and (hi is None or value < hi)

    def cut(self, dimension: int, value: Any) -> tuple[Cell, Cell]:
        """The cells below and from ``value`` on field ``dimension``."""
        lo, hi = self.bounds[dimension]
        left, right = list(self.bounds), list(self.bounds)
        left[dimension] = (lo, value)
        right[dimension] = (value, hi)
        return Cell(left), Cell(right)

    def field_ranges(self) -> list[FieldRange]:
        return [FieldRange(lo, True, hi, False) for lo, hi in self.bounds]

    def meets(self, fields: Sequence[FieldRange]) -> bool:
        """Whether a per-field region (a box's bound fields) can hold a key of the cell
        (densely: see FieldRange.is_empty). Plain comparisons: the planner asks it of every
        leaf for every region."""
        for (lo, hi), f in zip(self.bounds, fields, strict=False):
            if hi is not None and f.lo is not None and f.lo >= hi:
                return False
            if lo is not None and f.hi is not None and (f.hi < lo or
                                                        (f.hi == lo and not f.hi_inc)):
                return False
        return True

    def limited(self) -> list[int]:
        """The fields the cell bounds."""
        return [i for i, (lo, hi) in enumerate(self.bounds) if lo is not None or hi is not None]

    def to_json(self) -> dict[str, Any]:
        doc = Region.to_json(self)
        doc["cell"] = [[encode_value(lo), encode_value(hi)] for lo, hi in self.bounds]
        return doc

    def __str__(self) -> str:
        def end(v: Any, inf: str) -> str:
            return inf if v is None else repr(v)

        return " x ".join(f"[{end(lo, '-inf')}, {end(hi, '+inf')})" for lo, hi in self.bounds)


def cell_from_json(doc: dict[str, Any]) -> Cell:
    return Cell([(decode_value(lo), decode_value(hi)) for lo, hi in doc["cell"]])


def is_cell(region: Region) -> bool:
    return isinstance(region, Cell)


def is_box_tree(partitions: dict[str, Partition]) -> bool:
    """Whether a table's partitions are boxes (its root's region is a cell)."""
    return any(p.parent_id is None and isinstance(p.region, Cell) for p in partitions.values())


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


def box_tree(schema: Schema, split_points: Sequence[Any] | None, root: str) -> list[Partition]:
    """A balanced tree of box partitions cut on the first row-key field at ``split_points``
    (values of that field, or keys whose first value is taken)."""
    name = schema.row_key_names[0]
    values = []
    for k in split_points or ():
        v = k[0] if isinstance(k, tuple | list) else k
        if isinstance(k, tuple | list) and len(k) != 1:
            raise SchemaError(f"split point {k!r}: a table with partitioning=dimensions is "
                              f"split on its first row-key field {name!r}: give its values")
        values.append(schema.check_key_field(name, v, what="split point"))
    for a, b in zip(values, values[1:], strict=False):
        if not a < b:
            raise SchemaError(f"split points must be strictly increasing: {a!r} >= {b!r}")
    out: list[Partition] = []

    def build(pid: str, parent: str | None, cell: Cell, cuts: list[Any]) -> None:
        if not cuts:
            out.append(Partition(pid, parent, cell))
            return
        mid = len(cuts) // 2
        left, right = uuid.uuid4().hex[:16], uuid.uuid4().hex[:16]
        out.append(Partition(pid, parent, cell, (left, right), (cuts[mid],)))
        low, high = cell.cut(0, cuts[mid])
        build(left, pid, low, cuts[:mid])
        build(right, pid, high, cuts[mid + 1 :])

    build(root, None, Cell.whole(len(schema.row_keys)), values)
    return out


Region.cell_from_json = cell_from_json
