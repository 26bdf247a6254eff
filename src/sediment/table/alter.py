"""Changing a table's properties and schema, and taking it online or offline (part of the
:class:`~sediment.table.Table` façade; one transaction each).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sediment.core.state import TableState
from sediment.core.transactions import AddFiles, AlterSchema, SetOnline, SetProperties, Transaction
from sediment.core.transactions.schema import filtered_fields
from sediment.errors import PropertyError, SchemaError, did_you_mean
from sediment.properties import PROPERTIES, check_combined, validate_properties
from sediment.schema import Schema
from sediment.schema_changes import add_args, drop_args, judged_change
from sediment.state.schemes import THRESHOLD, set_scheme_threshold
from sediment.table.base import TableBase
from sediment.types import parse_type


class TableAlter(TableBase):
    """set_properties, the schema changes (sediment.schema_changes), set_online."""

    def set_properties(self, updates: Mapping[str, Any] | None = None, *,
                       remove: Sequence[str] = ()) -> int:
        """Set and/or reset properties in one transaction; returns the new version.

        A member of a partition scheme has the scheme's ``partition.split.threshold`` (one
        value per scheme): setting it sets the scheme's, in the scheme's log, and resetting it
        sets the store's default there; the member's version moves only for its other
        properties (with none, its version is returned as it is).

        Raises PropertyError: an unknown property or a bad value (named); TransactionError: the
        commit was refused or its outcome is unknown.
        """
        updates = dict(updates or {})
        remove = list(remove)
        for name in remove:
            if name not in PROPERTIES:
                raise PropertyError(f"table {self.name}: unknown property {name!r}"
                                    f"{did_you_mean(name, PROPERTIES)}")
        # checked here so that errors name the table, not its id (the transaction validates
        # again against the head it follows)
        parsed = validate_properties(updates, context=f"table {self.name}", schema=self.schema)
        after = {**self._handle.states.head().properties, **parsed}
        check_combined({k: v for k, v in after.items() if k not in remove},
                       context=f"table {self.name}")
        scheme = self._handle.states.head().properties.get("partition.scheme")
        if scheme and THRESHOLD in {*updates, *remove}:
            value = parsed[THRESHOLD] if THRESHOLD in parsed else \
                self.store.properties[THRESHOLD]
            set_scheme_threshold(self.store.objects, str(scheme), int(value))
            updates.pop(THRESHOLD, None)
            remove = [r for r in remove if r != THRESHOLD]
            if not updates and not remove:
                return self.version
        return self._handle.states.commit(SetProperties(updates, tuple(remove))).version


    def add_columns(self, columns: Sequence[tuple[str, Any]]) -> int:
        """Add nullable value columns ``[(name, type), ...]`` (a pyarrow type or its text,
        as ``create-table`` takes it); returns the new version. Files are not rewritten:
        records written before read the new columns as nulls.

        Raises SchemaError naming the table and the column; TransactionError: the commit was
        refused or its outcome is unknown."""
        try:
            args = add_args(columns)
        except SchemaError as e:
            raise SchemaError(f"table {self.name}: {e}") from None
        return self._alter("add_columns", args)

    def drop_columns(self, names: Sequence[str]) -> int:
        """Drop value columns; returns the new version. Their values stay in old files (time
        travel and tags still read them) but a column added later under the same name never
        shows them."""
        try:
            args = drop_args(names)
        except SchemaError as e:
            raise SchemaError(f"table {self.name}: {e}") from None
        return self._alter("drop_columns", args)

    def rename_column(self, old: str, new: str) -> int:
        """Rename a value column; returns the new version. Its values stay with it."""
        return self._alter("rename_column", {"old": str(old), "new": str(new)})

    def widen_column(self, name: str, type: Any) -> int:
        """Widen a value column's type (int32 -> int64, float32 -> float64, ...: see
        ``sediment.schema_changes.is_widening``); returns the new version. Old files' values
        are cast exactly when read."""
        try:
            typ = parse_type(type) if isinstance(type, str) else type
        except SchemaError as e:
            raise SchemaError(f"table {self.name}: column {name!r}: {e}") from None
        return self._alter("widen_column", {"name": str(name), "type": str(typ)})

    def schema_at(self, version: int | str) -> Schema:
        """The table's schema at ``version`` (a number or a tag)."""
        state = self.state(version)
        assert state.schema is not None
        return state.schema

    def _alter(self, op: str, args: dict[str, Any]) -> int:
        head = self._handle.states.head()
        assert head.schema is not None
        try:
            judged_change(head.schema, head.properties, filtered_fields(head), op, args)
        except SchemaError as e:
            raise SchemaError(f"table {self.name}: {e}") from None
        return self._handle.states.commit(AlterSchema(op, args)).version

    def set_online(self, online: bool) -> int:
        """Bring the table online or take it offline (maintenance skips offline tables); the
        version committed, or the head's when the table already was so (judged at the head
        the commit would land on: nothing is committed).

        Raises TransactionError: the commit was refused or its outcome is unknown.
        """
        def change(head: TableState) -> Transaction:
            return SetOnline(online) if head.online != online else AddFiles(())

        return self._handle.states.commit(change).version
