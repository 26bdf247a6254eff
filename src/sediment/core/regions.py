"""Regions of the row-key space, one name per idea.

A query selects keys by:

- :class:`Range`: a range of whole keys in their lexicographic order (``sd.Range``);
- :class:`Box`: a range on each row-key field (``sd.Region({"key1": sd.Range("c", "p")})``
  makes one), Sleeper's regions: its ``start`` and ``end`` are the smallest lexicographic
  (prefix) range holding it, so code that only prunes by a range's ends stays correct;

a partition covers, by the table's partitioning (``sediment.partitioning``):

- :class:`Region`: ``[min, max)`` of whole keys (``partitioning="lexicographic"``);
- :class:`Cell`: ``[lo, hi)`` on each row-key field (``partitioning="dimensions"``), its
  ``min`` and ``max`` its lexicographic bounds on the first field;

and :class:`FieldRange` is a range on one field, as boxes and cells hold them.

The keys inside a range or a region are one run of the key order; those of a box or a cell
are not. The few places that must be exact (row masks, whole-file and whole-row-group
shortcuts, merging leaves, encoding a request) ask a value for its per-field form
(``Range.per_field``, ``Region.cell``: None when it has none) rather than its class.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple

from sediment.core.keys import Key, as_key, decode_key, decode_value, encode_key, encode_value
from sediment.errors import QueryError


# ---- partition regions --------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Region:
    """Half-open interval ``[min, max)`` of row-key tuples; ``None`` ends are unbounded.

    ``Region({"key1": Range("c", "p"), ...})`` (a mapping of field to range) is the other
    form, a range per row-key field: it makes a :class:`Box`."""

    min: Key | None = None
    max: Key | None = None

    partitioning: ClassVar[str] = "lexicographic"
    """The partitioning whose partitions have regions of this class."""

    def __new__(cls, min: Any = None, max: Any = None) -> Any:  # noqa: A002 (field names)
        if isinstance(min, Mapping) and max is None:
            return Box(min)
        return object.__new__(cls)

    def contains(self, key: Key) -> bool:
        if self.min is not None and key < self.min:
            return False
        return self.max is None or key < self.max

    def is_strictly_inside(self, key: Key) -> bool:
        """True when ``key`` can split this region into two non-empty halves."""
        if self.min is not None and key <= self.min:
            return False
        return self.max is None or key < self.max

    @property
    def cell(self) -> Cell | None:
        """The region as a cell (a range on each field), or None: a run of the key order."""
        return None

    def split(self, key: Key, dimension: int | None = None) -> tuple[Region, Region]:
        """The regions below and from ``key`` (a whole key; ``dimension`` is a cell's)."""
        return Region(self.min, key), Region(key, self.max)

    def to_json(self) -> dict[str, Any]:
        return {"min": encode_key(self.min), "max": encode_key(self.max)}

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Region:
        if "cell" in doc:  # a box partition's region
            return Cell([(decode_value(lo), decode_value(hi)) for lo, hi in doc["cell"]])
        return cls(decode_key(doc.get("min")), decode_key(doc.get("max")))

    def __str__(self) -> str:
        lo = "-inf" if self.min is None else repr(self.min if len(self.min) > 1 else self.min[0])
        hi = "+inf" if self.max is None else repr(self.max if len(self.max) > 1 else self.max[0])
        return f"[{lo}, {hi})"


@dataclass(frozen=True, slots=True, init=False)
class Cell(Region):
    """``[lo, hi)`` on each row-key field, in the schema's order (None ends: unbounded).

    Its ``min`` and ``max`` are its lexicographic bounds on the first field (``[(lo,),
    (hi,))``): every key of the cell lies inside them, so code that only prunes by a region's
    ends stays correct; code that must be exact asks a region for its ``cell``."""

    bounds: tuple[tuple[Any, Any], ...] = ()

    partitioning: ClassVar[str] = "dimensions"

    def __init__(self, bounds: Sequence[tuple[Any, Any]]) -> None:
        bounds = tuple((lo, hi) for lo, hi in bounds)
        lo0, hi0 = bounds[0]
        object.__setattr__(self, "min", None if lo0 is None else (lo0,))
        object.__setattr__(self, "max", None if hi0 is None else (hi0,))
        object.__setattr__(self, "bounds", bounds)

    @property
    def cell(self) -> Cell:
        return self

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

    def split(self, key: Key, dimension: int | None = None) -> tuple[Region, Region]:
        """The cells below and from ``key`` (one value) on field ``dimension`` (the split
        transaction checks it names one: without, the key cuts the key order)."""
        if dimension is None:
            return Region.split(self, key)
        return self.cut(dimension, key[0])

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


def whole_region(partitioning: str, fields: int) -> Region:
    """The root's region of a tree of ``partitioning`` over ``fields`` row-key fields."""
    return Cell.whole(fields) if partitioning == Cell.partitioning else Region()


# ---- query ranges -------------------------------------------------------------------------
def _one_of(name: str, value: bool | None, alias: str, alias_value: bool | None,
            default: bool) -> bool:
    """An end's inclusiveness given by its name or its Sleeper alias (QueryError when both
    are given and disagree)."""
    if value is not None and alias_value is not None and bool(value) != bool(alias_value):
        raise QueryError(f"Range: {name}={value} and {alias}={alias_value} name the same end "
                         "and disagree: give one")
    chosen = value if value is not None else alias_value
    return default if chosen is None else bool(chosen)


@dataclass(frozen=True, slots=True, init=False)
class Range:
    """A range of row keys. ``Range("a", "m")`` is ``["a", "m")``; ``None`` ends are open.

    With multi-field row keys, an end may be a tuple shorter than the key (a prefix):
    ``Range(("a",), ("a",), end_inclusive=True)`` is every key whose first field is "a".
    """

    start: Key | None
    end: Key | None
    start_inclusive: bool
    end_inclusive: bool

    def __init__(self, start: Any = None, end: Any = None, *,
                 start_inclusive: bool | None = None, end_inclusive: bool | None = None,
                 min_inclusive: bool | None = None, max_inclusive: bool | None = None) -> None:
        # Sleeper's names for the same ends (a per-field region's ranges read as Sleeper's);
        # both names given must agree (one silently winning would change the range)
        object.__setattr__(self, "start", None if start is None else as_key(start))
        object.__setattr__(self, "end", None if end is None else as_key(end))
        object.__setattr__(self, "start_inclusive",
                           _one_of("start_inclusive", start_inclusive, "min_inclusive",
                                   min_inclusive, True))
        object.__setattr__(self, "end_inclusive",
                           _one_of("end_inclusive", end_inclusive, "max_inclusive",
                                   max_inclusive, False))

    def __str__(self) -> str:
        def end(k: Key | None, inf: str) -> str:
            return inf if k is None else repr(k if len(k) > 1 else k[0])

        return (f"{'[' if self.start_inclusive else '('}{end(self.start, '-inf')}, "
                f"{end(self.end, '+inf')}{']' if self.end_inclusive else ')'}")

    @classmethod
    def of(cls, start: Key | None, end: Key | None, start_inclusive: bool,
           end_inclusive: bool) -> Range:
        """A range of ends that are already key tuples (or None): what decoding a log entry
        builds, thousands at a time for a delete by keys, without the user-facing
        conversions of the constructor."""
        r = object.__new__(cls)
        object.__setattr__(r, "start", start)
        object.__setattr__(r, "end", end)
        object.__setattr__(r, "start_inclusive", start_inclusive)
        object.__setattr__(r, "end_inclusive", end_inclusive)
        return r

    @classmethod
    def exact_many(cls, keys: Iterable[Any]) -> tuple[Range, ...]:
        """``Range.of(k, k, True, True)`` of each key tuple: what a logged delete by many keys
        decodes to, tens of thousands at a time. The slots are set through their
        descriptors, bound once, which takes ~30% less time than ``of`` per range."""
        new = object.__new__
        slot = vars(cls)  # the slots' member descriptors
        start, end = slot["start"].__set__, slot["end"].__set__
        lo, hi = slot["start_inclusive"].__set__, slot["end_inclusive"].__set__
        out = []
        for k in keys:
            r = new(cls)
            start(r, k)
            end(r, k)
            lo(r, True)
            hi(r, True)
            out.append(r)
        return tuple(out)

    @classmethod
    def exact(cls, key: Any) -> Range:
        """Every record whose row key equals (or, for a prefix, starts with) ``key``."""
        k = as_key(key)
        return cls(k, k, start_inclusive=True, end_inclusive=True)

    @property
    def per_field(self) -> Box | None:
        """The range as a per-field region (a :class:`Box`), or None: a run of the key
        order."""
        return None

    def _prefix_cmp(self, key: Key, bound: Key) -> int:
        """Compare ``key`` with ``bound`` on the bound's length (prefix semantics)."""
        head = key[: len(bound)]
        return (head > bound) - (head < bound)

    def contains(self, key: Key) -> bool:
        if self.start is not None:
            c = self._prefix_cmp(key, self.start)
            if c < 0 or (c == 0 and not self.start_inclusive):
                return False
        if self.end is not None:
            c = self._prefix_cmp(key, self.end)
            if c > 0 or (c == 0 and not self.end_inclusive):
                return False
        return True

    def is_empty(self) -> bool:
        if self.start is None or self.end is None:
            return False
        n = min(len(self.start), len(self.end))
        a, b = self.start[:n], self.end[:n]
        if a != b:
            return a > b
        if len(self.start) == len(self.end):
            return not (self.start_inclusive and self.end_inclusive)
        return False

    def overlaps(self, region: Region) -> bool:
        """True when some key in ``region`` may be inside this range."""
        if self.is_empty():
            return False
        if region.max is not None and self.start is not None:
            # every key of the region is < region.max; the range needs keys >= start
            head = region.max[: len(self.start)]
            if head < self.start:
                return False
            if head == self.start and len(region.max) <= len(self.start):
                return False
        if region.min is not None and self.end is not None:
            c = self._prefix_cmp(region.min, self.end)
            if c > 0 or (c == 0 and not self.end_inclusive):
                return False
        return True


# ---- per-field regions (boxes) ------------------------------------------------------------
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
    the ranges' own. Build it through ``sd.Region({...})``.

    A box is built from the user's ranges first (unchecked, unordered) and bound to a table's
    row keys by :meth:`bind` once the values are checked."""

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
    def per_field(self) -> Box:
        return self

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
        cell = region.cell
        if cell is not None:
            return cell.meets(self.fields)
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
