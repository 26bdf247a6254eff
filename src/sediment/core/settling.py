"""Where deletions are pending and when a compaction settles them: rules on a TableState.

A deletion (sediment.core.deletions) is pending in the leaves that may hold a record it
covers. A compaction settles it in a leaf when nothing older than it is left there beside
the compaction's output; the same test tells a compaction which deletions it may apply to
upserted records (those hide older records only where older records are left). Pure.
"""

from __future__ import annotations

from dataclasses import replace

from sediment.core.deletions import Deletion
from sediment.core.regions import Range
from sediment.core.state import TableState


def pending_leaves(state: TableState, ranges: tuple[Range, ...] | None) -> frozenset[str]:
    """The leaves that may hold records of ``ranges``: those meeting them that hold, or
    whose ancestors hold, any reference (an empty leaf has nothing to delete)."""
    return frozenset(
        leaf.id for leaf in state.leaf_partitions()
        if (ranges is None or any(r.overlaps(leaf.region) for r in ranges))
        and holds_records(state, leaf.id))


def holds_records(state: TableState, leaf_id: str) -> bool:
    """Whether a reference of the leaf or of an ancestor may hold records of it."""
    return bool(state.references(leaf_id)) or any(state.references(a.id)
                                                  for a in state.ancestors(leaf_id))


def settle_leaf(state: TableState, leaf_id: str, through: int, output: str | None
                ) -> tuple[Deletion, ...]:
    """``state``'s deletions once a compaction of ``leaf_id`` that applied every deletion up
    to version ``through`` committed its ``output`` file (``state``: after its references
    were replaced).

    They are settled in the leaf when nothing there can hold an older record they cover:
    no ancestor holds references, and every reference left in the leaf is the job's output
    or a file ingested after the deletion (all its records newer). A file holding records of
    several commits (``sequenced``: another compaction's output) may hold older ones, and a
    deletion after ``through`` was not applied: those stay pending."""
    if not state.deletions or through <= 0:
        return state.deletions
    exempt = frozenset() if output is None else frozenset({output})
    out = []
    for d in state.deletions:
        if leaf_id in d.pending and d.version <= through and \
                nothing_older(state, leaf_id, exempt, d.bound):
            d = replace(d, pending=d.pending - {leaf_id})
        if d.pending:
            out.append(d)
    return tuple(out)


def nothing_older(state: TableState, leaf_id: str, exempt: frozenset[str], bound: int) -> bool:
    """Whether no reference of ``state`` that can hold records of ``leaf_id`` may hold a
    record with a sequence below ``bound``, besides those to files in ``exempt``: no
    ancestor holds references, and every other reference in the leaf is to a file ingested
    at or after ``bound`` (a ``sequenced`` file, a compaction's output, holds records of
    older commits)."""
    if any(state.references(a.id) for a in state.ancestors(leaf_id)):
        return False
    return all(r.filename in exempt or (not r.sequenced and r.sequence >= bound)
               for r in state.references(leaf_id).values())


