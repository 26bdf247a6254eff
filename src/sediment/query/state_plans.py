"""What every lookup of one table state would work out again, worked out once per state.

Planning a lookup is a pure function of the state and the keys (sediment.query.planner), but
most of it depends on the state alone: the leaves in key order (a sort of every partition),
each leaf's file references with its ancestors', their checksums and the deletions pending
in the leaf, and, for a request without a filter or extra iterators, the columns read. A
warm lookup spent about a third of its time there (36 us of 110 us, 10M rows). A state is
never changed once made (a commit makes a new one; the head cache hands the same object to
every reader until it re-reads), so :class:`StatePlans` keeps these per state object, filled
in as leaves are asked for: a lookup then finds its leaf by bisection and builds its
:class:`~sediment.query.planner.SubQuery` from the leaf's parts.

Only exact keys of every row-key field on a partitioning whose leaves are runs of the key
order (``cuts_in_order``: a key's leaf is the number of leaf minimums at or below it) take
this route; any other read is planned by :func:`~sediment.query.planner.plan_query`, which
gives the same plan (a test compares them).
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from sediment.core.deletions import Deletion, applicable
from sediment.core.model import FileReference, FileSums
from sediment.core.regions import Range
from sediment.core.state import TableState
from sediment.partitioning import partitioning_of
from sediment.query.planner import QueryPlan, SubQuery, leaf_references, sums_of


class _Leaf(NamedTuple):
    """A leaf's part of every sub-query of it: what reading it takes but the ranges."""

    references: tuple[FileReference, ...]
    sums: Mapping[str, FileSums]
    deletions: tuple[Deletion, ...]


class StatePlans:
    """A state's leaves and their parts of a plan, kept while the state is read (see the
    module). Shared by threads: each part is worked out by whoever asks first (two may both
    work it out: the same value, one kept)."""

    def __init__(self, state: TableState) -> None:
        self.state = state
        assert state.schema is not None
        self.width = len(state.schema.row_key_names)
        self.in_order = partitioning_of(state).cuts_in_order
        self.leaves = state.leaf_partitions() if self.in_order else []
        self._mins: list[Any] = [leaf.region.min for leaf in self.leaves[1:]]
        """The leaves' minimums after the first's (the first has none: it starts the order)."""
        self._parts: dict[str, _Leaf | None] = {}
        self._lock = threading.Lock()
        self._columns: dict[Any, list[str]] = {}

    def plan(self, ranges: Sequence[Range]) -> QueryPlan | None:
        """The plan of exact whole keys (``plan_query``'s), or None when ``ranges`` are not
        all such keys or the leaves are not runs of the key order (then the caller plans)."""
        if not self.in_order or not self.leaves:
            return None
        width, mins, leaves = self.width, self._mins, self.leaves
        hits: dict[int, list[Range]] = {}
        for r in ranges:
            start = r.start
            if start is None or start != r.end or len(start) != width or \
                    not (r.start_inclusive and r.end_inclusive):
                return None
            at = bisect.bisect_right(mins, start)
            if not leaves[at].region.contains(start):
                return None  # (never, for leaves that tile the key order: planned as ever)
            hits.setdefault(at, []).append(r)
        subs = []
        for at in sorted(hits):
            leaf = leaves[at]
            part = self._part(at)
            if part is not None:
                subs.append(SubQuery(leaf.id, leaf.region, part.references, tuple(hits[at]),
                                     part.sums, part.deletions))
        return QueryPlan(self.state.version, tuple(subs))

    def _part(self, at: int) -> _Leaf | None:
        leaf = self.leaves[at]
        try:
            return self._parts[leaf.id]
        except KeyError:
            pass
        refs = leaf_references(self.state, leaf)
        part = _Leaf(tuple(refs), sums_of(self.state, refs),
                     applicable(self.state.deletions, leaf.id, leaf.region)) if refs else None
        with self._lock:
            return self._parts.setdefault(leaf.id, part)

    def columns(self, key: Any) -> list[str] | None:
        """The columns read for a request of ``key`` (its kept form: see ``prepare``)."""
        return self._columns.get(key)

    def keep_columns(self, key: Any, read: list[str]) -> None:
        if len(self._columns) > 256:  # a bound, not a policy: a table's reads ask for few
            self._columns.clear()
        self._columns[key] = read
