"""Table: one Sediment table, its state at any version, and the operations on it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from sediment.core.model import FileReference, Partition
from sediment.core.state import TableState
from sediment.core.transactions import SetOnline, SetProperties
from sediment.errors import PropertyError
from sediment.properties import PROPERTIES, defaults
from sediment.schema import Schema
from sediment.state.log import HistoryEntry
from sediment.state.store import StateStore

if TYPE_CHECKING:
    from sediment.catalog import Store


class Table:
    """A table of a :class:`Store`. Obtain one with ``store.table(name)``."""

    def __init__(self, store: Store, name: str, table_id: str, states: StateStore) -> None:
        self.store = store
        self.name = name
        self.table_id = table_id
        self.states = states
        self.objects = states.objects

    # ---- state ---------------------------------------------------------------------------
    def state(self, version: int | None = None) -> TableState:
        """The table state at ``version`` (latest when None)."""
        return self.states.load(version)

    @property
    def version(self) -> int:
        """The latest committed version."""
        return self.states.head().version

    @property
    def schema(self) -> Schema:
        s = self.states.head(refresh=False).schema
        assert s is not None
        return s

    @property
    def properties(self) -> dict[str, Any]:
        """Every property with its effective value (defaults included)."""
        return {**defaults(), **self.states.head().properties}

    def set_properties(self, updates: Mapping[str, Any] | None = None, *,
                       remove: Sequence[str] = ()) -> int:
        """Set and/or reset properties in one transaction; returns the new version."""
        updates = dict(updates or {})
        for name in remove:
            if name not in PROPERTIES:
                raise PropertyError(f"table {self.name}: unknown property {name!r}")
        state = self.states.commit(SetProperties(updates, tuple(remove)))
        return state.version

    @property
    def online(self) -> bool:
        return self.states.head().online

    def set_online(self, online: bool) -> int:
        """Bring the table online or take it offline (maintenance skips offline tables)."""
        return self.states.commit(SetOnline(online)).version

    def history(self) -> list[HistoryEntry]:
        """Every committed transaction: version, time, kind and a one-line summary."""
        return self.states.history()

    def partitions(self, version: int | None = None) -> list[Partition]:
        """The partition tree, parents before children."""
        st = self.state(version)
        return sorted(st.partitions.values(),
                      key=lambda p: (len(st.ancestors(p.id)), p.region.min or ()))

    def files(self, version: int | None = None) -> list[FileReference]:
        """Every file reference, by partition then filename."""
        return list(self.state(version).all_references())

    def describe(self, version: int | None = None) -> dict[str, Any]:
        """Schema, properties, version and counts, as plain data (the CLI's ``describe``)."""
        st = self.state(version)
        refs = list(st.all_references())
        return {
            "name": self.name,
            "table_id": self.table_id,
            "uri": self.objects.uri,
            "version": st.version,
            "online": st.online,
            "schema": {k: v for k, v in (st.schema.to_json() if st.schema else {}).items()
                       if k != "arrow"},
            "properties": {**defaults(), **st.properties},
            "partitions": len(st.partitions),
            "leaf_partitions": sum(p.is_leaf for p in st.partitions.values()),
            "files": len(st.refcount),
            "references": len(refs),
            "records": sum(r.records for r in refs),
            "unreferenced_files": len(st.unreferenced),
        }

    def __repr__(self) -> str:
        return f"Table({self.name!r}, store={self.store.uri!r})"
