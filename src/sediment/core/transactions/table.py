"""Table-level kinds: creating a table, changing its properties, taking it offline.

They touch no file reference, so they never conflict with ingest or compaction on the same
partitions; they are kept together because each changes what the whole table is.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from sediment.core.model import Partition
from sediment.core.state import ROOT_PARTITION_ID, TableState, build_partition_tree
from sediment.core.transactions.base import (
    Transaction,
    clear,
    counted,
    fail,
    require_initialised,
)
from sediment.errors import PropertyError
from sediment.iterators.merge_rules import same_functions
from sediment.properties import PROPERTIES, check_combined, validate_properties
from sediment.schema import Schema


@dataclass(frozen=True, slots=True)
class InitialiseTable(Transaction):
    """Version 1 of every table: schema, properties and the initial partition tree, and
    whether background maintenance may act on it (``online``: a table created offline is
    never touched by a maintainer between its creation and a later ``set_online``)."""

    kind: ClassVar[str] = "initialise"
    schema: Schema
    properties: Mapping[str, Any]
    partitions: Sequence[Partition]
    online: bool = True

    def validate(self, state: TableState) -> None:
        if state.schema is not None or state.version != 0:
            raise fail(state, "table is already initialised")
        ids = {p.id for p in self.partitions}
        if ROOT_PARTITION_ID not in ids or len(ids) != len(self.partitions):
            raise fail(state, "partition tree needs one root and unique ids")
        check_combined(validate_properties(self.properties, context=f"table {state.name}",
                                           schema=self.schema),
                       context=f"table {state.name}")

    def apply(self, state: TableState, time: float) -> None:
        state.schema = self.schema
        state.schemas = ((state.version + 1, self.schema),)
        state.properties = validate_properties(self.properties, stored=True)
        state.partitions = {p.id: p for p in self.partitions}
        state.online = self.online

    def to_json(self) -> dict[str, Any]:
        # "online" is written only when false: entries of tables created online read the
        # same as before the field existed
        return {"schema": self.schema.to_json(), "properties": dict(self.properties),
                "partitions": [p.to_json() for p in self.partitions],
                **({} if self.online else {"online": False})}

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> InitialiseTable:
        return cls(Schema.from_json(doc["schema"]), doc.get("properties", {}),
                   [Partition.from_json(p) for p in doc["partitions"]],
                   bool(doc.get("online", True)))

    def summary(self) -> str:
        return (f"created with {counted(len(self.schema.field_names), 'field')}, "
                f"{counted(sum(p.is_leaf for p in self.partitions), 'leaf partition')}"
                f"{'' if self.online else ', offline'}")


@dataclass(frozen=True, slots=True)
class SetProperties(Transaction):
    """Change table properties (validated); ``removed`` falls back to defaults."""

    kind: ClassVar[str] = "set_properties"
    updates: Mapping[str, Any]
    removed: Sequence[str] = field(default=())

    def validate(self, state: TableState) -> None:
        require_initialised(state)
        fixed = sorted(SCHEME_PROPERTIES & {*self.updates, *self.removed})
        if fixed:
            raise fail(state, f"{', '.join(fixed)} cannot be set: a table joins its partition "
                              "scheme when it is created and never leaves or changes it (its "
                              "files are cut at the scheme's leaves); create a new table in "
                              "the other scheme and copy the records")
        validate_properties(self.updates, context=f"table {state.name}",
                            schema=state.schema)
        # Removing a property sets it back to its default, which must itself be valid
        # (an unknown name has none, and is refused like setting it would be).
        validate_properties({k: _default_of(k) for k in self.removed},
                            context=f"table {state.name}")
        after = {**state.properties, **validate_properties(self.updates)}
        check_combined({k: v for k, v in after.items() if k not in self.removed},
                       context=f"table {state.name}")
        changed = self._new_merge_rule(state)
        if changed is not None and state.reference_count():
            name, old, new = changed
            raise PropertyError(
                f"table {state.name}: property {name} cannot change from {old!r} to {new!r} "
                "once the table holds data: compaction may have merged its records by the "
                "old rule already, and reads would follow neither; set it at create_table "
                "or while the table is empty (after clear()), or create a new table and copy "
                "the records")
        switch = self._new_partitioning(state)
        if switch is not None and state.properties.get("partition.scheme"):
            raise fail(state, "a member of a partition scheme follows the scheme's "
                              "lexicographic tree: its partitioning cannot change")
        if switch is not None and state.reference_count():
            raise fail(state, "a table cannot switch its partitioning once it holds data "
                              "(partitioning is fixed by the partition tree it has)")

    def _new_merge_rule(self, state: TableState) -> tuple[str, str, str] | None:
        """The merge property (``merge`` or ``merge.functions``) whose effective value this
        change changes, with its value before and after, if one does (setting the value a
        table has is no change)."""
        for name in MERGE_PROPERTIES:
            before = str(state.properties.get(name, _default_of(name)))
            after = str(_default_of(name)) if name in self.removed else \
                str(self.updates.get(name, before))
            same = same_functions(before, after) if name == "merge.functions" else \
                after == before
            if not same:
                return name, before, after
        return None

    def _new_partitioning(self, state: TableState) -> str | None:
        """The partitioning this change switches the table to, if it switches."""
        if "partitioning" in self.updates:
            new = str(self.updates["partitioning"])
        elif "partitioning" in self.removed:
            new = str(_default_of("partitioning"))
        else:
            return None
        return None if new == state.partitioning else new

    def apply(self, state: TableState, time: float) -> None:
        switch = self._new_partitioning(state)
        state.properties.update(validate_properties(self.updates, stored=True))
        for k in self.removed:
            state.properties.pop(k, None)
        if switch is not None:  # an empty table: a one-partition tree of the new kind
            assert state.schema is not None
            state.partitions = {p.id: p for p in build_partition_tree(state.schema, None,
                                                                      switch)}
            state.jobs = {}

    def to_json(self) -> dict[str, Any]:
        return {"updates": dict(self.updates), "removed": list(self.removed)}

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> SetProperties:
        return cls(doc.get("updates", {}), doc.get("removed", []))

    def summary(self) -> str:
        parts = [f"{k}={v}" for k, v in self.updates.items()] + [f"-{k}" for k in self.removed]
        return "set " + ", ".join(parts)


SCHEME_PROPERTIES = frozenset({"partition.scheme", "partition.scheme.version"})
"""Properties only ``create_table`` and follow_scheme transactions set (co-sharding)."""

MERGE_PROPERTIES = ("merge", "merge.functions")
"""The merge rule's properties: fixed once the table holds data (see SetProperties)."""


def _default_of(name: str) -> Any:
    spec = PROPERTIES.get(name)
    return None if spec is None else spec.default


@dataclass(frozen=True, slots=True)
class SetOnline(Transaction):
    """Take a table offline (maintenance skips it) or bring it back online."""

    kind: ClassVar[str] = "set_online"
    online: bool

    def validate(self, state: TableState) -> None:
        require_initialised(state)

    def apply(self, state: TableState, time: float) -> None:
        state.online = self.online

    def to_json(self) -> dict[str, Any]:
        return {"online": self.online}

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> SetOnline:
        return cls(bool(doc["online"]))

    def summary(self) -> str:
        return "online" if self.online else "offline"


@dataclass(frozen=True, slots=True)
class ClearTable(Transaction):
    """Every record gone in one commit: every file reference is removed (the files become
    unreferenced, so the collector deletes them after its delay) and every compaction job is
    dropped (a job still running then fails to commit). Schema, properties and the partition
    tree are kept. Older versions still read the records (time travel, restore) until the
    files are collected. Sleeper's ``ClearFilesTransaction``, but the files are left to the
    collector instead of being deleted at once."""

    kind: ClassVar[str] = "clear"

    def validate(self, state: TableState) -> None:
        require_initialised(state)

    def apply(self, state: TableState, time: float) -> None:
        clear(state, time)

    def to_json(self) -> dict[str, Any]:
        return {}

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> ClearTable:
        return cls()

    def summary(self) -> str:
        return "cleared"


@dataclass(frozen=True, slots=True)
class ReinitialiseTable(Transaction):
    """A new partition tree for a table that holds no records (Sleeper's
    ``InitialisePartitionsTransaction``, as ``sleeper reinit`` commits it after clearing).
    Refused while any file reference remains, so records can never fall outside the tree."""

    kind: ClassVar[str] = "reinitialise"
    partitions: Sequence[Partition]

    def validate(self, state: TableState) -> None:
        require_initialised(state)
        if state.properties.get("partition.scheme"):
            raise fail(state, "a member of a partition scheme has the scheme's tree: "
                              "it cannot be reinitialised with a tree of its own")
        n = state.reference_count()
        if n:
            raise fail(state, f"cannot reinitialise a table that holds records ({n} file "
                              "references): clear it first")
        ids = {p.id for p in self.partitions}
        if ROOT_PARTITION_ID not in ids or len(ids) != len(self.partitions):
            raise fail(state, "partition tree needs one root and unique ids")

    def apply(self, state: TableState, time: float) -> None:
        state.partitions = {p.id: p for p in self.partitions}
        state.jobs = {}

    def to_json(self) -> dict[str, Any]:
        return {"partitions": [p.to_json() for p in self.partitions]}

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> ReinitialiseTable:
        return cls([Partition.from_json(p) for p in doc["partitions"]])

    def summary(self) -> str:
        return (f"reinitialised with "
                f"{counted(sum(p.is_leaf for p in self.partitions), 'leaf partition')}")
