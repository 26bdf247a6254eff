"""What every part of the :class:`~sediment.table.Table` façade stands on: the table's
handle, its state at any version, and the version, schema and properties at its head.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sediment.core.state import TableState
from sediment.handle import TableHandle
from sediment.schema import Schema
from sediment.state.schemes import with_scheme_threshold
from sediment.state.store import StateStore

if TYPE_CHECKING:
    from sediment.store import Store


class TableBase:
    """The table's name, id, Store and handle (see :class:`sediment.table.Table`)."""

    def __init__(self, store: Store, name: str, table_id: str, states: StateStore) -> None:
        self.store = store
        self.name = name
        self.table_id = table_id
        self._handle = TableHandle(name, table_id, states, store.spec)

    # ---- state ---------------------------------------------------------------------------
    def state(self, version: int | str | None = None) -> TableState:
        """The table state at ``version`` (a number or a tag; latest when None).

        Raises QueryError for an unknown version, VersionExpiredError (a QueryError) for one
        whose log entries were pruned (older than ``retention.seconds``)."""
        v = self.resolve_version(version)
        if v is None:
            return self._handle.state(None)
        from sediment.query.expiry import load_version

        return load_version(self._handle.states, self.name, v)

    def _readable_state(self, version: int | str) -> TableState:
        """The state at ``version`` when its data can still be read: VersionExpiredError when
        its log was pruned or GC deleted any of its files (older than ``retention.seconds``)."""
        from sediment.query.expiry import check_files

        state = self.state(version)
        check_files(self._handle.states, self.name, state)
        return state

    def resolve_version(self, version: int | str | None) -> int | None:
        """A version number from a number, a tag name, or None (latest)."""
        return self._handle.resolve_version(version)


    @property
    def version(self) -> int:
        """The latest committed version."""
        return self._handle.version

    @property
    def schema(self) -> Schema:
        return self._handle.schema

    @property
    def properties(self) -> dict[str, Any]:
        """Every property with its effective value (defaults included; for a member of a
        partition scheme, the scheme's ``partition.split.threshold``)."""
        return with_scheme_threshold(self.store.objects, self._handle.properties)

    @property
    def online(self) -> bool:
        return self._handle.states.head().online

