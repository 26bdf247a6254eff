"""DeleteRecords: records removed by key, range or predicate, committed as metadata.

The transaction names what to delete (key ranges, a filter's wire tree, or both); applying
it adds a :class:`~sediment.core.deletions.Deletion` covering every record committed before
it there, pending in the leaves that may hold one. No data file is read or written, so a
delete commits in one log write whatever it covers; readers drop the records from then on
and compaction removes them for good (sediment.core.deletions).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from sediment.core.deletions import (
    Deletion,
    is_key,
    selection_format,
    selection_from_json,
    selection_to_json,
)
from sediment.core.regions import Range
from sediment.core.settling import pending_leaves
from sediment.core.state import TableState
from sediment.core.transactions.base import Transaction, counted, fail, require_initialised
from sediment.core.transactions.idempotency import KeyedWrite, keys_from_json, keys_to_json


@dataclass(frozen=True, slots=True)
class DeleteRecords(Transaction):
    """Delete the records in ``ranges`` (None: every row key) that match ``filter`` (a
    filter's wire tree; None: every record), committed before this."""

    kind: ClassVar[str] = "delete_records"
    ranges: tuple[Range, ...] | None
    filter: Mapping[str, Any] | None = None
    keys: tuple[KeyedWrite, ...] = field(default=(), kw_only=True)
    """The keyed deletes this is (sediment.core.transactions.idempotency): logged, never
    kept in the state."""

    def validate(self, state: TableState) -> None:
        require_initialised(state)
        if self.ranges is None and self.filter is None:
            raise fail(state, "a delete names key ranges, a filter or both "
                              "(every record: clear the table)")
        if self.ranges is not None and not self.ranges:
            raise fail(state, "a delete of no ranges deletes nothing")
        if state.schema is not None:
            n = len(state.schema.row_key_names)
            for r in self.ranges or ():
                box = r.per_field
                if box is not None:
                    if box.names != tuple(state.schema.row_key_names):
                        raise fail(state, f"region {box!r} is not bound to the row keys")
                    continue
                for end in (r.start, r.end):
                    if end is not None and len(end) > n:
                        raise fail(state, f"range end {end!r} has more values than the "
                                          f"row key's {n} fields")

    def apply(self, state: TableState, time: float) -> None:
        pending = pending_leaves(state, self.ranges)
        if pending:  # nothing holds a record it could cover: nothing to keep
            state.deletions = (*state.deletions,
                               Deletion(state.version + 1, self.ranges,
                                        None if self.filter is None else dict(self.filter),
                                        pending))

    def format(self) -> int:
        return selection_format(self.ranges)

    def to_json(self) -> dict[str, Any]:
        return keys_to_json(selection_to_json(self.ranges, self.filter), self.keys)

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> DeleteRecords:
        return cls(*selection_from_json(doc), keys=keys_from_json(doc))

    def summary(self) -> str:
        what = [] if self.ranges is None else [counted(len(self.ranges), "key")] \
            if all(is_key(r) for r in self.ranges) else [counted(len(self.ranges), "range")]
        if self.filter is not None:
            what.append("a filter")
        return "deleted records by " + " and ".join(what)
