"""The partitioning protocol: what ingest, the planner, dump, splitting and bulk import ask of
a table's partition tree, answered by its strategy (:mod:`sediment.partitioning`)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple, Protocol

import numpy as np
import pyarrow as pa

from sediment.core.keys import Key
from sediment.core.model import Partition
from sediment.core.regions import Range
from sediment.core.state import TableState
from sediment.core.transactions import SplitPartition
from sediment.settings import TableSettings


class Piece(NamedTuple):
    """The rows of one batch that go to one leaf: ``rows`` rows from ``start`` on (a run of
    the batch), or those at ``indices`` (ascending) when the leaf's rows are not one run."""

    leaf: Partition
    rows: int
    start: int = 0
    indices: np.ndarray | None = None

    def of(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """The piece's rows of ``batch``, in the batch's order (so sorted when it is)."""
        if self.indices is None:
            return batch.slice(self.start, self.rows)
        return batch.take(pa.array(self.indices))


@dataclass(frozen=True, slots=True)
class Tile:
    """One dump task: ``range`` is its tile (the tiles cover the dump range in key order,
    and a load cuts the new table at their starts), ``query`` what it keeps, ``leaves`` the
    leaves it reads (merged in key order)."""

    range: Range
    query: Range
    leaves: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class SplitChoice:
    """Where to split a leaf: ``key`` (with ``dimension``, the row-key field a box split
    cuts, ``key`` being its one value), or None with the ``reason`` it cannot split."""

    key: Key | None
    dimension: int | None = None
    reason: str = ""


class LeafFinder(Protocol):
    """Finds each row's leaf in an unsorted batch (bulk import's tasks): plain data, so
    Spark pickles it to its executors."""

    boundaries: pa.Table | None
    """The row-key minimums of every leaf but the first, in key order, when a row's leaf is
    the number of them at or below its key (so a JVM can count them); else None."""

    def indices(self, data: pa.Table | pa.RecordBatch, names: Sequence[str]) -> np.ndarray:
        """The index of each row's leaf in ``TableState.leaf_partitions()`` (int32)."""
        ...


class Partitioning(Protocol):
    """A way to cut the row-key space into leaves; a table's is chosen once from its state
    (:func:`sediment.partitioning.partitioning_of`) and callers never ask which it is."""

    name: ClassVar[str]
    """The ``partitioning`` property's value naming it."""
    cuts_in_order: ClassVar[bool]
    """Whether :meth:`cut` yields each leaf's rows together, leaves in key order (so a
    leaf's file is finished once the next leaf's rows come)."""

    # ---- where a key goes ------------------------------------------------------------------
    def leaf_finder(self, state: TableState) -> LeafFinder:
        """What finds the leaf of each row of an unsorted batch, among ``state``'s leaves."""
        ...

    def cut(self, state: TableState, stream: Iterator[pa.RecordBatch], names: Sequence[str]
            ) -> Iterator[tuple[pa.RecordBatch, list[Piece]]]:
        """Each batch of a sorted stream with its pieces: the rows of each leaf it holds."""
        ...

    # ---- how a plan is pruned --------------------------------------------------------------
    def read_ranges(self, ranges: Sequence[Range], names: Sequence[str]) -> list[Range]:
        """A read's checked ranges in the form that prunes this partitioning's leaves best
        (and row groups: a box's fields each prune)."""
        ...

    def prune(self, state: TableState, ranges: Sequence[Range] | None
              ) -> Iterator[tuple[Partition, tuple[Range, ...] | None]]:
        """The leaves some range may hold keys of, in key order, each with those ranges
        (``ranges`` None: every leaf, with None)."""
        return overlapping_leaves(state, ranges)

    # ---- how a range is tiled for a dump ---------------------------------------------------
    def tiles(self, state: TableState, rng: Range) -> list[Tile]:
        """The dump tasks of ``rng``, in key order."""
        ...

    def dump_fields(self) -> dict[str, Any]:
        """What a dump's job manifest records so that a load makes a table of this kind."""
        ...

    # ---- how a split is chosen -------------------------------------------------------------
    def choose_split(self, state: TableState, leaf: Partition, samples: Sequence[pa.Table],
                     names: Sequence[str], settings: TableSettings) -> SplitChoice:
        """Where to split ``leaf``, from the samples of its files (with their counts)."""
        ...

    def import_splits(self, merged: pa.Table, names: Sequence[str], state: TableState,
                      target_rows: int) -> list[SplitPartition]:
        """The splits that give each leaf about ``target_rows`` of a bulk import's rows, by
        the import's ``merged`` key sample (with counts)."""
        ...


def overlapping_leaves(state: TableState, ranges: Sequence[Range] | None
                       ) -> Iterator[tuple[Partition, tuple[Range, ...] | None]]:
    """:meth:`Partitioning.prune` by each range's own overlap test (a range's or a box's,
    against a region or a cell)."""
    for leaf in state.leaf_partitions():
        if ranges is None:
            yield leaf, None
            continue
        hit = tuple(r for r in ranges if r.overlaps(leaf.region))
        if hit:
            yield leaf, hit
