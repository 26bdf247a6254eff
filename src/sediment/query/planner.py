"""Query planning, a pure function of a TableState.

A query names exact keys and/or ranges. The plan has one sub-query per leaf partition that
overlaps a range; each reads the file references of the leaf and of its ancestors, keeping only
rows inside the leaf's region (leaves do not overlap, so no row is read twice) and the ranges.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sediment.core.deletions import Deletion, applicable
from sediment.core.model import FileReference, FileSums, Partition, is_upsert
from sediment.core.regions import Range, Region
from sediment.core.state import TableState
from sediment.errors import DataError, QueryError
from sediment.partitioning import partitioning_of
from sediment.query.regions import bind_region
from sediment.schema import Schema


@dataclass(frozen=True, slots=True)
class SubQuery:
    """Read ``references`` restricted to ``region`` and ``ranges`` (None: everything);
    ``sums``: the checksums the table has for those files (by filename; files written before
    checksums are absent), against which a footer is checked when it is first read."""

    leaf_id: str
    region: Region
    references: tuple[FileReference, ...]
    ranges: tuple[Range, ...] | None
    sums: Mapping[str, FileSums] = field(default_factory=dict)
    deletions: tuple[Deletion, ...] = ()
    """The table's deletions pending in this leaf (sediment.core.deletions): the read drops
    the records they remove."""

    @property
    def upserts(self) -> bool:
        """Whether a file of the leaf holds upserted records (their sequences say so): the
        read settles them (sediment.files.upserts)."""
        return any(is_upsert(r.sequence) for r in self.references)

    @property
    def as_stored(self) -> bool:
        """Whether the leaf's answer is its one file's rows as they are (no merge, no upsert
        to settle, no deletion): what a reader of Parquet may take without Sediment."""
        return len(self.references) == 1 and not self.deletions and not self.upserts


@dataclass(frozen=True, slots=True)
class QueryPlan:
    version: int
    subqueries: tuple[SubQuery, ...]

    @property
    def files(self) -> set[str]:
        return {r.filename for s in self.subqueries for r in s.references}


def normalise_ranges(state: TableState, keys: Sequence[Any] | None,
                     ranges: Sequence[Range] | Range | None,
                     table: str = "") -> tuple[Range, ...] | None:
    """Keys and ranges as one tuple of Ranges checked against the schema (None: all rows).

    A range whose start is after its end is refused (QueryError naming both ends); one whose
    ends are equal and not both inclusive selects nothing. A per-field region
    (``sd.Region({...})``, a :class:`Box`) is checked and bound to the row keys (see
    sediment.query.regions)."""
    schema = state.schema
    assert schema is not None
    if keys is None and ranges is None:
        return None
    if isinstance(keys, str | bytes):  # iterating would query each character as a key
        raise QueryError(f"{f'table {table}: ' if table else ''}keys must be a list of row "
                         f"keys, not one {type(keys).__name__} (write keys=[{keys!r}])")
    out: list[Range] = []
    for k in keys or ():
        try:
            out.append(Range.exact(schema.check_row_key(k, what="query key")))
        except DataError as e:  # a lone surrogate: refused as ingest refuses it
            raise DataError(f"query of table {table or '?'}: {e}") from None
        except Exception as e:  # SchemaError -> QueryError with the same message
            raise QueryError(str(e)) from None
    if isinstance(ranges, Range):  # a Box is a Range too
        ranges = [ranges]
    for r in ranges or ():
        out.append(check_range(schema, r, table or "?"))
    out = partitioning_of(state).read_ranges(out, schema.row_key_names)
    return tuple(r for r in out if not r.is_empty())


def check_range(schema: Schema, r: Any, table: str) -> Range:
    """One range of a read checked against the row keys, its ends in the model's form
    (temporal values as ints): QueryError for a value of the wrong type or a start after its
    end, DataError for a string end with a lone surrogate (as ingest refuses it). A per-field
    region is checked and bound by :func:`bind_region`."""
    box = r.per_field if isinstance(r, Range) else None
    if box is not None:
        return bind_region(schema, table, box)
    if not isinstance(r, Range):
        raise QueryError(f"ranges must be sediment.Range or sediment.Region values, "
                         f"got {r!r}")
    ends = []
    for end, what in ((r.start, "range start"), (r.end, "range end")):
        try:  # checked, and temporal values as the model's integers
            ends.append(None if end is None else schema.check_row_key(end, what=what))
        except DataError as e:
            raise DataError(f"query of table {table}: {e}") from None
        except Exception as e:
            raise QueryError(str(e)) from None
    lo, hi = ends
    if lo is not None and hi is not None and r.start is not None and r.end is not None:
        n = min(len(lo), len(hi))
        if lo[:n] > hi[:n]:  # a mistake, not a query for nothing
            one = len(schema.row_key_names) == 1  # show a one-field key as its value
            raise QueryError(f"range start {r.start[0] if one else r.start!r} is after "
                             f"its end {r.end[0] if one else r.end!r}")
    return Range(lo, hi, start_inclusive=r.start_inclusive, end_inclusive=r.end_inclusive)


def plan_query(state: TableState, ranges: tuple[Range, ...] | None) -> QueryPlan:
    """Sub-queries for the leaves the ranges touch, in key order."""
    subs: list[SubQuery] = []
    if ranges is None:
        state.decode_all_references()
    above = _InheritedReferences(state)
    for leaf, hit in partitioning_of(state).prune(state, ranges):
        refs = above.of_leaf(leaf)
        if refs:
            subs.append(SubQuery(leaf.id, leaf.region, tuple(refs), hit,
                                 sums_of(state, refs),
                                 applicable(state.deletions, leaf.id, leaf.region)))
    return QueryPlan(state.version, tuple(subs))


def leaf_references(state: TableState, leaf: Partition) -> list[FileReference]:
    """The references a read of ``leaf`` reads: its own, then its ancestors', nearest
    first (as :func:`plan_query` gives them)."""
    return _InheritedReferences(state).of_leaf(leaf)


def sums_of(state: TableState, refs: Sequence[FileReference]) -> dict[str, FileSums]:
    """The checksums ``state`` has for the files of ``refs`` (those it has: files written
    before checksums have none), looked up through each reference's partition so a state
    loaded from a snapshot decodes only those partitions' sums."""
    out: dict[str, FileSums] = {}
    for r in refs:
        found = state.file_sums(r.filename, r.partition_id)
        if found is not None:
            out[r.filename] = found
    return out


class _InheritedReferences:
    """The references a leaf's read takes from its ancestors, each ancestor's list built
    once per plan: leaves share ancestors, and a whole-table plan of 10,000 leaves would
    otherwise look up ~140,000 (mostly empty) ancestor partitions."""

    def __init__(self, state: TableState) -> None:
        self.state = state
        self.holding = set(state.partitions_with_references())
        self.memo: dict[str, list[FileReference]] = {}

    def own(self, partition_id: str) -> list[FileReference]:
        if partition_id not in self.holding:
            return []
        return list(self.state.references(partition_id).values())

    def of_leaf(self, leaf: Partition) -> list[FileReference]:
        """The leaf's own references, then those it inherits."""
        refs = self.own(leaf.id)
        if leaf.parent_id is not None:
            refs = refs + self.inherited(leaf.parent_id)
        return refs

    def inherited(self, partition_id: str) -> list[FileReference]:
        """References held by ``partition_id`` and its ancestors, nearest first."""
        chain: list[str] = []
        pid: str | None = partition_id
        while pid is not None and pid not in self.memo:
            chain.append(pid)
            pid = self.state.partitions[pid].parent_id
        tail = self.memo[pid] if pid is not None else []
        for p in reversed(chain):  # the topmost first: each extends its parent's list
            mine = self.own(p)
            tail = mine + tail if mine else tail
            self.memo[p] = tail
        return self.memo[partition_id]
