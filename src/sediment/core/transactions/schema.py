"""AlterSchema: one schema change (add, drop, rename or widen columns) as one commit.

It stores the change, not the resulting schema, and re-applies it to the schema of the head it
commits on (sediment.schema_changes.apply_change): an alter planned on an older head composes
with alters committed meanwhile, or is refused with the reason (say, the column it renames was
dropped). It touches no file reference, so it never conflicts with ingest or compaction; files
written under the old schema are read through their field ids (sediment.files.columns).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from sediment.core.state import TableState
from sediment.core.transactions.base import Transaction, fail, require_initialised
from sediment.errors import SchemaError
from sediment.schema import Schema
from sediment.schema_changes import OPS, describe_change, judged_change


def filtered_fields(state: TableState) -> dict[int, set[str]]:
    """Each pending delete's version -> the fields its filter reads."""
    return {d.version: d.filter_fields() for d in state.deletions}


@dataclass(frozen=True, slots=True)
class AlterSchema(Transaction):
    """Change the table's schema: ``op`` (one of ``schema_changes.OPS``) with ``args``."""

    kind: ClassVar[str] = "alter_schema"
    op: str
    args: Mapping[str, Any]

    def changed(self, state: TableState) -> Schema:
        """The schema this change makes of ``state``'s (TransactionInvalidError naming the
        table when it cannot apply there)."""
        require_initialised(state)
        assert state.schema is not None
        if self.op not in OPS:
            raise fail(state, f"unknown schema change {self.op!r}")
        try:
            return judged_change(state.schema, state.properties, filtered_fields(state),
                                 self.op, self.args)
        except SchemaError as e:
            raise fail(state, str(e)) from None

    def validate(self, state: TableState) -> None:
        self.changed(state)

    def apply(self, state: TableState, time: float) -> None:
        state.set_schema(self.changed(state))

    def to_json(self) -> dict[str, Any]:
        return {"op": self.op, "args": dict(self.args)}

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> AlterSchema:
        return cls(str(doc["op"]), dict(doc["args"]))

    def summary(self) -> str:
        return describe_change(self.op, self.args)
