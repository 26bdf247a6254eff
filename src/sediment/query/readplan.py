"""What a sub-query's read takes, decided from its plan and the cached footers alone (pure):
which row groups may hold wanted rows, read in which runs, and how the files' records are
merged (settled upserts, the last record of a key, boxes). The executor does the reading.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Sequence
from typing import Any

from sediment.core.regions import Range, Region
from sediment.files.keys import bounds_inside
from sediment.iterators.base import RecordIterator
from sediment.iterators.merge_rules import KeepFirst, KeepLast
from sediment.query.footers import FileFooter
from sediment.query.planner import SubQuery


def bounds_on_first(region: Region, ranges: tuple[Range, ...] | None) -> list[tuple[Any, Any]]:
    """Closed intervals on the first key field that may hold wanted rows (None: unbounded)."""
    lo_r = None if region.min is None else region.min[0]
    hi_r = None if region.max is None else region.max[0]
    if ranges is None:
        return [(lo_r, hi_r)]
    out = []
    for r in ranges:
        lo = None if r.start is None else r.start[0]
        hi = None if r.end is None else r.end[0]
        lo = lo_r if lo is None else (lo if lo_r is None else max(lo, lo_r))
        hi = hi_r if hi is None else (hi if hi_r is None else min(hi, hi_r))
        if lo is not None and hi is not None and lo > hi:
            continue
        out.append((lo, hi))
    return out


def row_groups_meeting(footer: FileFooter, intervals: list[tuple[Any, Any]]) -> list[int]:
    """Row groups whose [min, max] on the first key field meets any interval."""
    n = len(footer.mins)
    if not footer.bounded:
        return list(range(n))
    keep: set[int] = set()
    for lo, hi in intervals:
        # row groups are sorted: first whose max >= lo, last whose min <= hi
        a = 0 if lo is None else bisect.bisect_left(footer.maxs, lo)
        b = n if hi is None else bisect.bisect_right(footer.mins, hi)
        keep.update(range(a, b))
    return sorted(keep)


RUN_GROUPS = 16
"""Consecutive row groups read in one call when a query reads many (a scan): Arrow decodes
them on its threads (measured: 4M-row scan 9.7 -> 15+ M rows/s against one call per group)."""


def runs(groups: list[int], most: int) -> Iterator[list[int]]:
    """Runs of consecutive row-group indices, at most ``most`` long."""
    run: list[int] = []
    for g in groups:
        if run and (g != run[-1] + 1 or len(run) == most):
            yield run
            run = []
        run.append(g)
    if run:
        yield run


def inside(footer: FileFooter, first: int, last: int, region: Region) -> bool:
    """Whether row groups ``first..last`` lie inside the region by their statistics on the
    first key field: then a whole-region read needs no row filter."""
    return bounds_inside(footer.mins[first], footer.maxs[last], region)


def first_field_points(ranges: tuple[Range, ...] | None) -> list[Any] | None:
    """The values of the first key field the ranges allow, when every range pins it to one
    value (exact keys, and prefixes or ranges inside one first-field value); else None."""
    if not ranges:
        return None
    points = []
    for r in ranges:
        if r.start is None or r.end is None or r.start[0] != r.end[0]:
            return None
        points.append(r.start[0])
    return points


def exact_single_keys(ranges: tuple[Range, ...] | None) -> list[Any] | None:
    if not ranges:
        return None
    keys = []
    for r in ranges:
        if r.start is None or r.start != r.end or len(r.start) != 1 or \
                not (r.start_inclusive and r.end_inclusive):
            return None
        keys.append(r.start[0])
    return keys


def settles(sub: SubQuery, iterators: Sequence[RecordIterator]) -> bool:
    """Whether a read of the sub-query settles upserts (sediment.files.upserts): when a file
    holds upserted records, unless the merge rule keeps the last record of each key anyway
    (``merge="last"``, first among the iterators: it keeps what settling keeps) and no
    delete by filter could remove an upserted record but not the older one it replaced."""
    if not sub.upserts:
        return False
    return not (iterators and isinstance(iterators[0], KeepLast)
                and all(d.filter is None for d in sub.deletions))


def last_of(sub: SubQuery, iterators: Sequence[RecordIterator],
             key_names: Sequence[str]) -> list[str] | None:
    """The record key, when the merge of the sub-query's files may leave out records that a
    later one of the same key follows (``merge_sorted``'s ``last_of``): the merge rule keeps
    the last record of each key (``merge="last"``, first among the iterators) and no
    deletion judges records before it; else None."""
    if iterators and isinstance(iterators[0], KeepLast) and not sub.deletions:
        return list(key_names)
    return None


def one_record_kept(iterators: Sequence[RecordIterator]) -> bool:
    """Whether the iterators are merge rules that keep one whole record of each key, and
    nothing else (``merge="last"`` or ``"first"``): an answer of at most one record passes
    them unchanged, so a lookup of one record need not run them."""
    return all(isinstance(it, KeepLast | KeepFirst) for it in iterators)


def boxes(subs: Sequence[SubQuery]) -> bool:
    """Whether several sub-queries read box partitions (cells: sediment.core.regions), whose
    rows are not runs of the key order."""
    return len(subs) > 1 and any(s.region.cell is not None for s in subs)
