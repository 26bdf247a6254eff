"""Query ranges over row keys: inclusive or exclusive ends, open ends, prefixes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sediment.core.keys import Key, as_key
from sediment.core.model import Region


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

    def __init__(self, start: Any = None, end: Any = None, *, start_inclusive: bool = True,
                 end_inclusive: bool = False, min_inclusive: bool | None = None,
                 max_inclusive: bool | None = None) -> None:
        # Sleeper's names for the same ends (a per-field region's ranges read as Sleeper's)
        if min_inclusive is not None:
            start_inclusive = min_inclusive
        if max_inclusive is not None:
            end_inclusive = max_inclusive
        object.__setattr__(self, "start", None if start is None else as_key(start))
        object.__setattr__(self, "end", None if end is None else as_key(end))
        object.__setattr__(self, "start_inclusive", start_inclusive)
        object.__setattr__(self, "end_inclusive", end_inclusive)

    @classmethod
    def exact(cls, key: Any) -> Range:
        """Every record whose row key equals (or, for a prefix, starts with) ``key``."""
        k = as_key(key)
        return cls(k, k, start_inclusive=True, end_inclusive=True)

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
