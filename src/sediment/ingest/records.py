"""Deletes by key, range or predicate: checked against the table, committed as metadata.

``delete`` commits one :class:`~sediment.core.transactions.DeleteRecords`: no data is read
or written whatever it covers (sediment.core.deletions says how readers and compaction apply
it). A delete by filter is a predicate tombstone, not a rewrite: the filter is stored in its
wire form with the version it was made at, applied at read to the records committed before
it, and settled by compaction. It commits in one log write like a range delete; a read of a
leaf it covers evaluates the filter on that leaf's older records until compaction settles it
there. The filter's constraints on the first row-key field narrow the leaves it covers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sediment.core.regions import Range
from sediment.core.transactions import DeleteRecords
from sediment.errors import QueryError
from sediment.handle import TableHandle
from sediment.query.filters import compile_filter
from sediment.query.planner import normalise_ranges
from sediment.query.wire import to_wire


def delete(handle: TableHandle, keys: Sequence[Any] | None = None,
           ranges: Sequence[Range] | Range | None = None, *, filter: Any = None,  # noqa: A002
           idempotency_key: str | None = None) -> int:
    """Delete every record of ``keys`` (row keys), of ``ranges`` and/or matching ``filter``
    (an expression or ``--where`` text), committed before this; returns the version.
    ``idempotency_key``: committed exactly once (sediment.ingest.keyed).

    Raises QueryError naming the table: nothing named (``clear()`` deletes everything), a
    key or range that does not fit the row key, a filter naming an unknown field or that
    cannot be evaluated; TransactionError: the commit was refused or its outcome is
    unknown."""
    name = handle.name
    if keys is None and ranges is None and filter is None:
        raise QueryError(f"delete on table {name} names no keys, ranges or filter: to delete "
                         f"every record use clear()")
    state = handle.states.head()
    schema = state.schema
    assert schema is not None
    asked = None
    try:
        parts = [normalise_ranges(state, keys, None, name) if keys is not None else None,
                 normalise_ranges(state, None, ranges, name) if ranges is not None else None]
    except QueryError as e:
        if f"table {name}" in str(e):  # (not the name alone: a table "t" is in most texts)
            raise
        raise type(e)(f"delete on table {name}: {e}") from None
    if any(p is not None for p in parts):
        asked = tuple(r for p in parts if p is not None for r in p)
        if not asked:  # no keys, or only empty ranges: nothing to delete, nothing committed
            return state.version
    tree = None
    if filter is not None:
        compiled = compile_filter(filter, schema, name, record_by_record=True)
        tree = to_wire(compiled.expression)
        if asked is None and compiled.key_ranges is not None:
            # the records it can match lie in these ranges: only their leaves hold any
            asked = compiled.key_ranges
            if compiled.keys_only:  # and it says no more than they do
                tree = None
    if idempotency_key is not None:
        from sediment.ingest.keyed import keyed_delete

        return keyed_delete(handle, state, idempotency_key, asked, tree)
    return handle.states.commit(DeleteRecords(asked, tree)).version
