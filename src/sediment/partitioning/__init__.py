"""Partitioning strategies: how a table's row-key space is cut into leaves.

A table's partitioning is chosen once, from its state (:func:`partitioning_of`: the kind of
its partition tree, read off the root's region), and answers every question that depends on
it through one protocol (:class:`Partitioning`): where a row goes (:meth:`leaf_finder`), how
a sorted stream is cut (:meth:`cut`), how a read is pruned (:meth:`read_ranges`,
:meth:`prune`), how a dump range is tiled (:meth:`tiles`) and how a split is chosen
(:meth:`choose_split`, :meth:`import_splits`). Two strategies exist:

- :class:`Lexicographic` (``partitioning="lexicographic"``, the default): leaves are runs of
  the key order, ``[min, max)`` of whole keys (:class:`sediment.core.regions.Region`);
- :class:`Dimensions` (``partitioning="dimensions"``): leaves are boxes, a range on each
  row-key field (:class:`sediment.core.regions.Cell`), split one field at a time.

Callers never ask which one they hold; only this package handles the box internals.
"""

from __future__ import annotations

from sediment.core.state import TableState
from sediment.errors import PropertyError
from sediment.partitioning.base import LeafFinder, Partitioning, Piece, SplitChoice, Tile
from sediment.partitioning.dimensions import Dimensions
from sediment.partitioning.lexicographic import Lexicographic

__all__ = ["PARTITIONINGS", "Dimensions", "LeafFinder", "Lexicographic", "Partitioning",
           "Piece", "SplitChoice", "Tile", "partitioning_named", "partitioning_of"]

_STRATEGIES: dict[str, Partitioning] = {s.name: s for s in (Lexicographic(), Dimensions())}

PARTITIONINGS = tuple(_STRATEGIES)
"""The values of the ``partitioning`` property (and of a dump's job manifest)."""


def partitioning_named(name: str) -> Partitioning:
    """The strategy a ``partitioning`` property value names (PropertyError: no such)."""
    try:
        return _STRATEGIES[name]
    except KeyError:
        raise PropertyError(f"partitioning: {name!r} is not one of "
                            f"{', '.join(PARTITIONINGS)}") from None


def partitioning_of(state: TableState) -> Partitioning:
    """The strategy of ``state``'s partition tree."""
    return _STRATEGIES[state.partitioning]
