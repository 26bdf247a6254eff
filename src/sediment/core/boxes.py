"""Regions with a range on each row-key field (boxes), as Sleeper has them.

``sd.Region({"key1": sd.Range("c", "p"), "key2": sd.Range("h", None)})`` selects every row
whose ``key1`` is in ``["c", "p")`` and whose ``key2`` is at least ``"h"``, whatever the
lexicographic order of the whole key says. A :class:`Box` is a :class:`Range` whose ``start``
and ``end`` are the smallest lexicographic (prefix) range holding the box: code that only
prunes by a range's ends (leaves, row groups, key filters) stays correct unchanged, and the
few places that must be exact (the row mask, leaf overlap) ask the box itself.

A box is built from the user's ranges first (:meth:`Box.__init__`, unchecked, unordered) and
bound to a table's row keys by :meth:`Box.bind` once the values are checked.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from sediment.core.keys import Key
from sediment.core.model import Region
from sediment.core.ranges import Range


class FieldRange(NamedTuple):
    """A range on one field; ``None`` ends are open."""

    lo: Any = None
    lo_inc: bool = True
    hi: Any = None
    hi_inc: bool = False

    def contains(self, v: Any) -> bool:
        if self.lo is not None and (v < self.lo or (v == self.lo and not self.lo_inc)):
            return False
        return self.hi is None or v < self.hi or (v == self.hi and self.hi_inc)

    def is_empty(self) -> bool:
        """Empty in a dense order (an integer range such as ``(3, 4)`` is not called empty:
        being conservative only costs reading)."""
        if self.lo is None or self.hi is None:
            return False
        return self.lo > self.hi or (self.lo == self.hi and not (self.lo_inc and self.hi_inc))

    def is_point(self) -> bool:
        return self.lo is not None and self.lo == self.hi and self.lo_inc and self.hi_inc

    def is_open(self) -> bool:
        return self.lo is None and self.hi is None

    def meets(self, lo: Any, lo_inc: bool, hi: Any, hi_inc: bool) -> bool:
        """Whether this range and ``(lo, hi)`` share a value (densely)."""
        both = intersect(self, FieldRange(lo, lo_inc, hi, hi_inc))
        return both is not None


def intersect(a: FieldRange, b: FieldRange) -> FieldRange | None:
    """The values in both ranges (None when densely empty)."""
    lo, lo_inc, hi, hi_inc = a
    if b.lo is not None and (lo is None or b.lo > lo or (b.lo == lo and not b.lo_inc)):
        lo, lo_inc = b.lo, b.lo_inc
    if b.hi is not None and (hi is None or b.hi < hi or (b.hi == hi and not b.hi_inc)):
        hi, hi_inc = b.hi, b.hi_inc
    out = FieldRange(lo, lo_inc, hi, hi_inc)
    return None if out.is_empty() else out


def bounding(fields: Sequence[FieldRange]) -> tuple[Key | None, bool, Key | None, bool]:
    """The smallest lexicographic prefix range ``(start, start_inclusive, end,
    end_inclusive)`` holding every key of the box: the leading fields pinned to one value
    make a common prefix, and the first field that is not pinned ends it."""
    prefix: list[Any] = []
    for f in fields:
        if f.is_point():
            prefix.append(f.lo)
            continue
        base = tuple(prefix)
        start, s_inc = ((*base, f.lo), f.lo_inc) if f.lo is not None else (base or None, True)
        end, e_inc = ((*base, f.hi), f.hi_inc) if f.hi is not None else (base or None, True)
        return start, s_inc, end, e_inc
    key = tuple(prefix)
    return key, True, key, True


def meets_interval(fields: Sequence[FieldRange], lo: Key | None, hi: Key | None) -> bool:
    """Whether some key of the box lies in the lexicographic interval ``[lo, hi)`` (a
    partition's region; keys as long as ``fields``). Exact in a dense order, so
    conservative for integers.

    Field by field, a key either still equals the bound's prefix (it is *tight* against it)
    or has left it; at each field it may take the bound's value (staying tight) or a value
    strictly between the bounds (leaving both), so at most three ways per field."""
    n = len(fields)

    def walk(i: int, tight_lo: bool, tight_hi: bool) -> bool:
        if tight_lo and lo is not None and i >= len(lo):
            tight_lo = False  # the key extends lo: it is >= lo
        if tight_hi and hi is not None and i >= len(hi):
            return False  # the key extends (or equals) hi: it is not < hi
        if i == n:
            return True
        f = fields[i]
        a = lo[i] if tight_lo and lo is not None else None
        b = hi[i] if tight_hi and hi is not None else None
        if a is not None and f.contains(a) and (b is None or a <= b) \
                and walk(i + 1, True, b is not None and a == b):
            return True
        if b is not None and f.contains(b) and (a is None or b > a) \
                and walk(i + 1, False, True):
            return True
        # a value strictly between the tight bounds: both are left behind
        return f.meets(a, False, b, False)

    return walk(0, lo is not None, hi is not None)


@dataclass(frozen=True, slots=True, init=False)
class Box(Range):
    """A range on each row-key field (unnamed fields are unbounded). ``Box({"key1":
    Range("c", "p"), "key2": Range("h", None)})``; Sleeper's inclusive and exclusive ends are
    the ranges' own. Build it through ``sd.Region({...})``."""

    given: tuple[tuple[str, Range], ...]
    """The user's ranges by field, as given."""
    names: tuple[str, ...] | None
    """The table's row-key fields, once bound (then ``fields`` lines up with them)."""
    fields: tuple[FieldRange, ...]

    def __init__(self, ranges: Mapping[str, Range]) -> None:
        super(Box, self).__init__()
        object.__setattr__(self, "given", tuple(ranges.items()))
        object.__setattr__(self, "names", None)
        object.__setattr__(self, "fields", ())

    def bind(self, names: Sequence[str], fields: Sequence[FieldRange]) -> Box:
        """The box over a table's row keys ``names`` (in order), ``fields`` checked values."""
        out = object.__new__(Box)
        start, s_inc, end, e_inc = bounding(fields)
        for attr, value in (("start", start), ("end", end), ("start_inclusive", s_inc),
                            ("end_inclusive", e_inc), ("given", self.given),
                            ("names", tuple(names)), ("fields", tuple(fields))):
            object.__setattr__(out, attr, value)
        return out

    @property
    def bound(self) -> bool:
        return self.names is not None

    def contains(self, key: Key) -> bool:
        return all(f.contains(v) for f, v in zip(self.fields, key, strict=False))

    def is_empty(self) -> bool:
        return any(f.is_empty() for f in self.fields)

    def overlaps(self, region: Region) -> bool:
        if self.is_empty():
            return False
        meets = getattr(region, "meets", None)  # a box partition's cell (core/cells.py)
        if meets is not None:
            return bool(meets(self.fields))
        return meets_interval(self.fields, region.min, region.max)

    def constrained(self) -> list[tuple[str, FieldRange]]:
        """The fields the box limits, by name."""
        assert self.names is not None
        return [(n, f) for n, f in zip(self.names, self.fields, strict=True)
                if not f.is_open()]

    def __repr__(self) -> str:
        def show(f: FieldRange) -> str:
            lb = "[" if f.lo_inc else "("
            rb = "]" if f.hi_inc else ")"
            return f"{lb}{f.lo!r}, {f.hi!r}{rb}"

        if self.names is None:
            return f"Region({dict(self.given)!r})"
        return "Region({" + ", ".join(f"{n!r}: {show(f)}"
                                      for n, f in self.constrained()) + "})"


Region.per_field = Box
