"""Co-located joins: two member tables of one partition scheme joined leaf by leaf.

Members of a scheme follow one partition tree, so records with one row key lie in the same
leaf of both tables: the join of the tables is the union of the joins of their leaves, with no
shuffle. Each leaf's records of each table are read as a query reads them (every file of the
leaf and its ancestors, merged, the table's query iterators applied), then joined by Arrow's
hash join. Leaves are joined in parallel, a few at a time, and streamed in key order of the
leaves, so memory holds a few leaves, never the tables.

The two tables may be read at versions whose trees are at different scheme versions (one may
not have followed a split yet): the join runs over the common refinement of both trees (every
leaf boundary of either), reading in each piece the references of every partition of each
table that overlaps it, cut to the piece. Planning (``plan_pieces``, ``subquery``) is pure.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from sediment.core.keys import Key
from sediment.core.model import FileReference
from sediment.core.prefetch import read_ahead
from sediment.core.regions import Range, Region
from sediment.core.state import TableState
from sediment.errors import NotCoShardedError, QueryError, did_you_mean
from sediment.files.sample import COUNT, cut_keys
from sediment.handle import handle_of
from sediment.query.planner import SubQuery, sums_of

if TYPE_CHECKING:
    from sediment.query.prepare import PreparedQuery
    from sediment.table import Table

HOW = {"inner": "inner", "left": "left outer"}
TARGET_ROWS = 1_000_000
"""Records of both tables per piece when the left table does not set
``spark.read.target_partition_rows``: a bigger leaf is joined in key sub-ranges."""
RIGHT_SUFFIX = "_right"
"""Added to a right-table value column whose name the left table also has."""


@dataclass(frozen=True, slots=True)
class JoinPiece:
    """One unit of a co-located join: a region of the key space and what each table reads
    there (one Spark task, or one read-ahead slot of ``sd.join``)."""

    index: int
    region: Region
    left: SubQuery
    right: SubQuery


def _overlaps(a: Region, b: Region) -> bool:
    return ((a.max is None or b.min is None or b.min < a.max)
            and (b.max is None or a.min is None or a.min < b.max))


def plan_pieces(left: TableState, right: TableState,
                ranges: tuple[Range, ...] | None) -> list[JoinPiece]:
    """The common refinement of both tables' leaves (in key order), each with both tables'
    sub-queries, keeping the pieces the ranges touch. Pure."""
    bounds: set[Key] = {p.region.min for s in (left, right) for p in s.leaf_partitions()
                        if p.region.min is not None}
    cuts: list[Key | None] = [None, *sorted(bounds), None]
    out: list[JoinPiece] = []
    for lo, hi in zip(cuts, cuts[1:], strict=False):
        region = Region(lo, hi)
        hit = None if ranges is None else tuple(r for r in ranges if r.overlaps(region))
        if hit is not None and not hit:
            continue
        i = len(out)
        out.append(JoinPiece(i, region, subquery(left, region, hit, i),
                             subquery(right, region, hit, i)))
    return out


def cut_pieces(pieces: Sequence[JoinPiece], samples: Callable[[JoinPiece], list[pa.Table]],
               names: Sequence[str], target_rows: int) -> list[JoinPiece]:
    """Pieces whose references hold more than ``target_rows`` records (both tables; counts
    of ancestors' references overstate, which only costs a sample read) cut into key
    sub-ranges of about ``target_rows`` records each, at whole row keys from both tables'
    samples (``samples(piece)``: key columns named ``names``, and the count), so that every
    row of one key is in one sub-range and a join holds a bounded number of records at once.
    Pure, given ``samples``."""
    out: list[JoinPiece] = []
    for piece in pieces:
        total = sum(r.records for r in (*piece.left.references, *piece.right.references))
        cuts = cut_keys(samples(piece), names, piece.region, target_rows) \
            if total > target_rows else []
        bounds: list[Key | None] = [piece.region.min, *cuts, piece.region.max]
        for lo, hi in zip(bounds, bounds[1:], strict=False):
            region = Region(lo, hi)
            ranges = piece.left.ranges
            hit = None if ranges is None else tuple(r for r in ranges if r.overlaps(region))
            if hit is not None and not hit:
                continue
            i = len(out)
            out.append(JoinPiece(i, region,
                                 replace(piece.left, leaf_id=f"piece-{i}", region=region,
                                         ranges=hit),
                                 replace(piece.right, leaf_id=f"piece-{i}", region=region,
                                         ranges=hit)))
    return out


def subquery(state: TableState, region: Region, ranges: tuple[Range, ...] | None,
             index: int = 0) -> SubQuery:
    """What ``state`` holds in ``region``: the references of every partition overlapping it
    (each record is in exactly one of them), read cut to the region. Pure."""
    refs: list[FileReference] = []
    leaves: set[str] = set()
    for p in state.partitions.values():
        if _overlaps(p.region, region):
            refs.extend(state.references(p.id).values())
            leaves.add(p.id)
    # a deletion pending in any of them (applied where it is settled already, it drops
    # nothing more: what it covers there is gone)
    deletions = tuple(d for d in state.deletions if d.pending & leaves and d.overlaps(region))
    return SubQuery(f"piece-{index}", region, tuple(refs), ranges, sums_of(state, refs),
                    deletions)


def check_co_sharded(left: TableState, right: TableState, lname: str, rname: str) -> None:
    """NotCoShardedError (saying why, suggesting an ordinary join) unless both tables follow
    one partition scheme."""
    ls = left.properties.get("partition.scheme") or ""
    rs = right.properties.get("partition.scheme") or ""
    if not ls or not rs or ls != rs:
        why = (f"table {lname if not ls else rname} is not a member of a partition scheme"
               if not (ls and rs) else
               f"tables {lname} and {rname} are members of different partition schemes")
        raise NotCoShardedError(
            f"cannot join {lname} and {rname} leaf by leaf: {why}, so their leaves do not "
            "align. Join their query results instead (e.g. DuckDB or pandas.merge on "
            "table.to_arrow(), or Spark's join of two format('sediment') reads), or create "
            "the tables in one scheme (store.create_table(..., scheme=NAME))")


def join_keys(left: TableState, right: TableState, on: str | Sequence[str] | None
              ) -> tuple[list[str], list[str]]:
    """(left key names, right key names): all row-key fields, matched by position (a member's
    row keys have its scheme's types, whatever their names)."""
    assert left.schema is not None and right.schema is not None
    lk, rk = left.schema.row_key_names, right.schema.row_key_names
    if on is None:
        return lk, rk
    names = [on] if isinstance(on, str) else list(on)
    if sorted(names) != sorted(lk) and sorted(names) != sorted(rk):
        raise QueryError(f"a co-located join is on every row-key field ({', '.join(lk)} of the "
                         f"left table, {', '.join(rk)} of the right), not on {names}: only "
                         "equal row keys are sure to share a leaf; join other fields with an "
                         "ordinary join")
    return lk, rk


@dataclass(frozen=True, slots=True)
class PreparedJoin:
    """A co-located join planned: both tables' prepared queries and the pieces."""

    left: PreparedQuery
    right: PreparedQuery
    left_on: list[str]
    right_on: list[str]
    how: str
    pieces: tuple[JoinPiece, ...]
    schema: pa.Schema

    def read_piece(self, piece: JoinPiece) -> pa.Table:
        """One piece's joined records (both sides read, merged with iterators, joined)."""
        lt = self.left.read_subquery(piece.left)
        if lt.num_rows == 0:
            return self.schema.empty_table()
        rt = self.right.read_subquery(piece.right)
        if rt.num_rows == 0 and self.how == "inner":
            return self.schema.empty_table()
        out = _arrow_join(lt, rt, self.left_on, self.right_on, self.how)
        return out if out.schema == self.schema else out.cast(self.schema)

    def _piece_batches(self, piece: JoinPiece) -> Iterator[pa.RecordBatch]:
        yield from self.read_piece(piece).to_batches()

    def reader(self, threads: int | None = None) -> pa.RecordBatchReader:
        """The joined records streamed piece by piece (pieces in key order), ``threads``
        pieces at once (default: the CPU count)."""
        width = threads or os.cpu_count() or 2

        def batches() -> Iterator[pa.RecordBatch]:
            yield from read_ahead((functools.partial(self._piece_batches, p)
                                   for p in self.pieces), width=width, name="sediment-join")

        return pa.RecordBatchReader.from_batches(self.schema, batches())


def _arrow_join(lt: pa.Table, rt: pa.Table, lon: list[str], ron: list[str],
                how: str) -> pa.Table:
    """``lt`` joined with ``rt`` on the keys: the left columns (keys once), then the right's
    value columns (``_right`` added to a name the left has too).

    Arrow's hash join refuses a list, struct, map (or null, string_view) payload column, so
    it joins the keys and each side's row numbers only, and every value column is gathered
    with ``take`` (a null row number, a left row without a match, gives nulls)."""
    clash = (set(lt.column_names) - set(lon)) & (set(rt.column_names) - set(ron))
    lrow, rrow = _free_name(lt, rt, "left"), _free_name(lt, rt, "right")
    pairs = lt.select(lon).append_column(lrow, _row_numbers(lt.num_rows)).join(
        rt.select(ron).append_column(rrow, _row_numbers(rt.num_rows)),
        keys=lon, right_keys=ron, join_type=HOW[how], coalesce_keys=True)
    li, ri = pairs.column(lrow), pairs.column(rrow)
    fields, columns = [], []  # every field nullable, as Arrow's join makes them
    for f in lt.schema:
        fields.append(pa.field(f.name, f.type))
        columns.append(pairs.column(f.name) if f.name in lon else lt.column(f.name).take(li))
    for f in rt.schema:
        if f.name in ron:
            continue
        fields.append(pa.field(f.name + RIGHT_SUFFIX if f.name in clash else f.name, f.type))
        columns.append(rt.column(f.name).take(ri))
    return pa.Table.from_arrays(columns, schema=pa.schema(fields))


def _row_numbers(n: int) -> pa.Array:
    return pa.array(np.arange(n, dtype=np.int64))


def _free_name(lt: pa.Table, rt: pa.Table, side: str) -> str:
    """A column name neither table has (for one side's row numbers)."""
    name = f"__sediment_{side}_row"
    while name in lt.column_names or name in rt.column_names:
        name += "_"
    return name


def _versions(version: Any) -> tuple[Any, Any]:
    if version is None or isinstance(version, str):
        return version, version
    if isinstance(version, tuple | list) and len(version) == 2:
        return version[0], version[1]
    raise QueryError(f"version= takes a tag both tables carry or a pair (left_version, "
                     f"right_version), not {version!r}")


def prepare_join(left: Table, right: Table, *, on: str | Sequence[str] | None = None,
                 how: str = "inner", columns: Sequence[str] | None = None,
                 keys: Sequence[Any] | None = None, ranges: Any = None,
                 version: Any = None) -> PreparedJoin:
    """Plan a co-located join (see :func:`join`)."""
    from sediment.query.planner import normalise_ranges

    if how not in HOW:
        raise QueryError(f"how must be 'inner' or 'left', not {how!r}")
    if columns is not None:
        # each table reads the columns it has: one neither has is a mistake, not a column
        # to leave out (as query(columns=...) refuses it)
        held = {*left.schema.to_arrow().names, *right.schema.to_arrow().names}
        missing = [c for c in columns if c not in held]
        if missing:
            raise QueryError(f"join of tables {left.name} and {right.name}: neither has "
                             f"column {missing[0]!r}{did_you_mean(missing[0], sorted(held))}")
    lv, rv = _versions(version)
    lp = _prepare(left, keys, ranges, columns, lv)
    rp = _prepare(right, keys, ranges, columns, rv)
    ls = left.state(lp.plan.version)
    rs = right.state(rp.plan.version)
    check_co_sharded(ls, rs, left.name, right.name)
    lon, ron = join_keys(ls, rs, on)
    wanted = normalise_ranges(ls, keys, ranges)
    lh, rh = handle_of(left), handle_of(right)
    target = int(ls.properties.get("spark.read.target_partition_rows", TARGET_ROWS))

    def samples(piece: JoinPiece) -> list[pa.Table]:
        out = [lh.samples.sample(r.filename).select([*lon, COUNT])
               for r in piece.left.references]
        out += [rh.samples.sample(r.filename).select([*ron, COUNT])
                .rename_columns([*lon, COUNT]) for r in piece.right.references]
        return out

    pieces = tuple(cut_pieces(plan_pieces(ls, rs, wanted), samples, lon, target))
    empty_l = pa.schema([lp.schema.field(c) for c in lp.wanted]).empty_table()
    empty_r = pa.schema([rp.schema.field(c) for c in rp.wanted]).empty_table()
    schema = _arrow_join(empty_l, empty_r, lon, ron, how).schema
    return PreparedJoin(lp, rp, lon, ron, how, pieces, schema)


def _prepare(table: Table, keys: Sequence[Any] | None, ranges: Any,
             columns: Sequence[str] | None, version: Any) -> PreparedQuery:
    """The table's prepared query: the columns asked for that it has, and its row keys."""
    cols = None
    if columns is not None:
        names = table.schema.to_arrow().names
        cols = [*table.schema.row_key_names,
                *(c for c in columns if c in names and c not in table.schema.row_key_names)]
    return table.prepare(keys, ranges, columns=cols, version=version)


def join(left: Table, right: Table, on: str | Sequence[str] | None = None,
         how: str = "inner", columns: Sequence[str] | None = None,
         keys: Sequence[Any] | None = None, ranges: Any = None,
         version: Any = None) -> pa.Table:
    """Join two member tables of one partition scheme on their row keys, leaf by leaf.

    ``on``: the row-key fields (default: all of them; a right table whose row keys are named
    otherwise is matched by position). ``how``: ``"inner"`` or ``"left"``. ``columns``: the
    columns to read (each table reads those it has, with its row keys). ``keys``/``ranges``:
    as ``table.query``, on both tables. ``version``: a tag both tables carry, or a pair
    ``(left_version, right_version)``. A right value column named as a left one gets the
    suffix ``_right``. Rows come leaf by leaf in key order of the leaves; within a leaf, in
    the order of Arrow's hash join.

    Raises NotCoShardedError: the tables are not members of one scheme (use an ordinary join);
    QueryError: a bad ``on``, ``how``, version, key, range or column; what ``table.query``
    raises."""
    return join_reader(left, right, on=on, how=how, columns=columns, keys=keys,
                       ranges=ranges, version=version).read_all()


def join_reader(left: Table, right: Table, *, on: str | Sequence[str] | None = None,
                how: str = "inner", columns: Sequence[str] | None = None,
                keys: Sequence[Any] | None = None, ranges: Any = None,
                version: Any = None, threads: int | None = None) -> pa.RecordBatchReader:
    """:func:`join` streamed in bounded memory: a few leaves at a time (``threads``)."""
    return prepare_join(left, right, on=on, how=how, columns=columns, keys=keys,
                        ranges=ranges, version=version).reader(threads)
