"""Transactions: the only way a table's state changes.

Each kind is a small frozen value that validates itself against the state it would follow
(``validate``) and applies itself (``apply``). The state store writes a transaction to the log at
the next version only after ``validate`` passed on the state at the current head, so replaying the
log from version 1 always reproduces the state.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from sediment.core.keys import Key, decode_key, encode_key
from sediment.core.model import FileReference, Partition, file_sequence
from sediment.core.state import ROOT_PARTITION_ID, TableState
from sediment.errors import CorruptMetadataError, SchemaError, TransactionInvalidError
from sediment.properties import validate_properties
from sediment.schema import Schema


class Transaction(ABC):
    """Base class: subclasses set ``kind`` and implement the four abstract methods."""

    kind: ClassVar[str] = ""

    @abstractmethod
    def validate(self, state: TableState) -> None:
        """Raise TransactionInvalidError when this cannot follow ``state``."""

    @abstractmethod
    def apply(self, state: TableState, time: float) -> None:
        """Change ``state`` in place (the caller owns it: see TableState.copy).

        ``state.version`` is still the version this transaction follows: the caller sets it
        to ``state.version + 1`` (this transaction's version) after ``apply``."""

    @abstractmethod
    def to_json(self) -> dict[str, Any]:
        """The JSON body written to the log."""

    @classmethod
    @abstractmethod
    def from_json(cls, doc: dict[str, Any]) -> Transaction:
        """Inverse of ``to_json``."""

    def summary(self) -> str:
        """One line for ``history``."""
        return self.kind


def _fail(state: TableState, msg: str) -> TransactionInvalidError:
    return TransactionInvalidError(f"table {state.table_id} at version {state.version}: {msg}")


def _require_initialised(state: TableState) -> None:
    if state.schema is None:
        raise _fail(state, "table is not initialised")


def _require_partition(state: TableState, pid: str) -> Partition:
    p = state.partitions.get(pid)
    if p is None:
        raise _fail(state, f"no partition {pid!r}")
    return p


@dataclass(frozen=True, slots=True)
class InitialiseTable(Transaction):
    """Version 1 of every table: schema, properties and the initial partition tree."""

    kind: ClassVar[str] = "initialise"
    schema: Schema
    properties: Mapping[str, Any]
    partitions: Sequence[Partition]

    def validate(self, state: TableState) -> None:
        if state.schema is not None or state.version != 0:
            raise _fail(state, "table is already initialised")
        ids = {p.id for p in self.partitions}
        if ROOT_PARTITION_ID not in ids or len(ids) != len(self.partitions):
            raise _fail(state, "partition tree needs one root and unique ids")
        validate_properties(self.properties, context=f"table {state.table_id}")

    def apply(self, state: TableState, time: float) -> None:
        state.schema = self.schema
        state.properties = validate_properties(self.properties)
        state.partitions = {p.id: p for p in self.partitions}
        state.online = True

    def to_json(self) -> dict[str, Any]:
        return {"schema": self.schema.to_json(), "properties": dict(self.properties),
                "partitions": [p.to_json() for p in self.partitions]}

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> InitialiseTable:
        return cls(Schema.from_json(doc["schema"]), doc.get("properties", {}),
                   [Partition.from_json(p) for p in doc["partitions"]])

    def summary(self) -> str:
        return f"created with {len(self.schema.field_names)} fields, " \
               f"{sum(p.is_leaf for p in self.partitions)} leaf partitions"


@dataclass(frozen=True, slots=True)
class AddFiles(Transaction):
    """New data files, each with one or more references (ingest, bulk import, load)."""

    kind: ClassVar[str] = "add_files"
    references: Sequence[FileReference]

    def validate(self, state: TableState) -> None:
        _require_initialised(state)
        seen: set[tuple[str, str]] = set()
        for r in self.references:
            _require_partition(state, r.partition_id)
            if r.filename in state.refcount or r.filename in state.unreferenced:
                raise _fail(state, f"file {r.filename} is already in the table")
            if (r.filename, r.partition_id) in seen:
                raise _fail(state, f"file {r.filename} referenced twice in {r.partition_id}")
            if r.records < 0:
                raise _fail(state, f"file {r.filename}: negative record count")
            if r.job_id is not None:
                raise _fail(state, f"file {r.filename}: new references carry no job id")
            seen.add((r.filename, r.partition_id))

    def apply(self, state: TableState, time: float) -> None:
        # Each new file's sequence: this commit's version, then the file's rank in the order
        # the transaction lists the files (the log's order, so every replay gives the same).
        version = state.version + 1
        ranks: dict[str, int] = {}
        for r in self.references:
            rank = ranks.setdefault(r.filename, len(ranks))
            state.put_reference(r._replace(sequence=file_sequence(version, rank),
                                           sequenced=False))

    def to_json(self) -> dict[str, Any]:
        return {"references": [r.to_json() for r in self.references]}

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> AddFiles:
        return cls([FileReference.from_json(r) for r in doc["references"]])

    def summary(self) -> str:
        files = len({r.filename for r in self.references})
        return f"{files} files, {sum(r.records for r in self.references)} records"


@dataclass(frozen=True, slots=True)
class SplitReference:
    """Replace one file's reference in a partition by references in descendant partitions."""

    filename: str
    from_partition: str
    to: Sequence[FileReference]


@dataclass(frozen=True, slots=True)
class SplitFileReferences(Transaction):
    """Push references down the tree (before compaction, or to spread a loaded file)."""

    kind: ClassVar[str] = "split_file_references"
    splits: Sequence[SplitReference]

    def validate(self, state: TableState) -> None:
        _require_initialised(state)
        seen: set[tuple[str, str]] = set()
        for s in self.splits:
            if (s.filename, s.from_partition) in seen:
                raise _fail(state, f"{s.filename} in {s.from_partition} is split twice")
            seen.add((s.filename, s.from_partition))
            ref = state.references(s.from_partition).get(s.filename)
            if ref is None:
                raise _fail(state, f"no reference to {s.filename} in {s.from_partition}")
            if ref.job_id is not None:
                raise _fail(state, f"{s.filename} in {s.from_partition} is assigned to "
                                   f"job {ref.job_id}")
            for t in s.to:
                _require_partition(state, t.partition_id)
                if t.filename != s.filename or not state.is_descendant(t.partition_id,
                                                                       s.from_partition):
                    raise _fail(state, f"{s.filename}: {t.partition_id} is not below "
                                       f"{s.from_partition}")
                if s.filename in state.references(t.partition_id):
                    raise _fail(state, f"{s.filename} already referenced in {t.partition_id}")
                if t.records < 0:
                    raise _fail(state, f"{s.filename}: negative record count")
                if t.job_id is not None:
                    raise _fail(state, f"{s.filename}: new references carry no job id")

    def apply(self, state: TableState, time: float) -> None:
        for s in self.splits:
            src = state.references(s.from_partition)[s.filename]
            for t in s.to:
                state.put_reference(t._replace(sequence=src.sequence, sequenced=src.sequenced))
            state.remove_reference(s.from_partition, s.filename, time)

    def to_json(self) -> dict[str, Any]:
        return {"splits": [{"file": s.filename, "from": s.from_partition,
                            "to": [t.to_json() for t in s.to]} for s in self.splits]}

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> SplitFileReferences:
        return cls([SplitReference(s["file"], s["from"],
                                   [FileReference.from_json(t) for t in s["to"]])
                    for s in doc["splits"]])

    def summary(self) -> str:
        return f"{len(self.splits)} references pushed down"


@dataclass(frozen=True, slots=True)
class SplitPartition(Transaction):
    """Turn a leaf into a parent of two leaves at ``split_key``, if it is still a leaf."""

    kind: ClassVar[str] = "split_partition"
    partition_id: str
    split_key: Key
    left_id: str
    right_id: str

    def validate(self, state: TableState) -> None:
        _require_initialised(state)
        p = _require_partition(state, self.partition_id)
        if not p.is_leaf:
            raise _fail(state, f"partition {self.partition_id} is no longer a leaf")
        assert state.schema is not None
        try:
            key = state.schema.check_row_key(self.split_key, what="split key")
        except SchemaError as e:
            raise _fail(state, str(e)) from None
        if not isinstance(self.split_key, tuple) or key != self.split_key:
            raise _fail(state, f"split key {self.split_key!r} must be a tuple of key values "
                               f"(temporal values as int: {key!r})")
        if not p.region.is_strictly_inside(self.split_key):
            raise _fail(state, f"split key {self.split_key!r} is not inside {p.region}")
        for cid in (self.left_id, self.right_id):
            if cid in state.partitions:
                raise _fail(state, f"partition id {cid} is already used")
        if self.left_id == self.right_id:
            raise _fail(state, "children need distinct ids")

    def apply(self, state: TableState, time: float) -> None:
        from sediment.core.model import Region

        p = state.partitions[self.partition_id]
        state.partitions[self.partition_id] = Partition(
            p.id, p.parent_id, p.region, (self.left_id, self.right_id), self.split_key)
        state.partitions[self.left_id] = Partition(
            self.left_id, p.id, Region(p.region.min, self.split_key))
        state.partitions[self.right_id] = Partition(
            self.right_id, p.id, Region(self.split_key, p.region.max))

    def to_json(self) -> dict[str, Any]:
        return {"partition": self.partition_id, "split_key": encode_key(self.split_key),
                "left": self.left_id, "right": self.right_id}

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> SplitPartition:
        key = decode_key(doc["split_key"])
        assert key is not None
        return cls(doc["partition"], key, doc["left"], doc["right"])

    def summary(self) -> str:
        return f"{self.partition_id} split at {self.split_key!r}"


@dataclass(frozen=True, slots=True)
class DeleteFiles(Transaction):
    """Garbage collection: files with no reference were deleted from storage."""

    kind: ClassVar[str] = "delete_files"
    filenames: Sequence[str]

    def validate(self, state: TableState) -> None:
        _require_initialised(state)
        if len(set(self.filenames)) != len(self.filenames):
            raise _fail(state, "a file is listed twice")
        for f in self.filenames:
            if f in state.refcount:
                raise _fail(state, f"file {f} is still referenced")
            if f not in state.unreferenced:
                raise _fail(state, f"file {f} is not an unreferenced file of this table")

    def apply(self, state: TableState, time: float) -> None:
        for f in self.filenames:
            del state.unreferenced[f]

    def to_json(self) -> dict[str, Any]:
        return {"files": list(self.filenames)}

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> DeleteFiles:
        return cls(doc["files"])

    def summary(self) -> str:
        return f"{len(self.filenames)} files deleted"


@dataclass(frozen=True, slots=True)
class SetProperties(Transaction):
    """Change table properties (validated); ``removed`` falls back to defaults."""

    kind: ClassVar[str] = "set_properties"
    updates: Mapping[str, Any]
    removed: Sequence[str] = field(default=())

    def validate(self, state: TableState) -> None:
        _require_initialised(state)
        validate_properties(self.updates, context=f"table {state.table_id}")
        validate_properties({k: _default_of(k) for k in self.removed},
                            context=f"table {state.table_id}")

    def apply(self, state: TableState, time: float) -> None:
        state.properties.update(validate_properties(self.updates))
        for k in self.removed:
            state.properties.pop(k, None)

    def to_json(self) -> dict[str, Any]:
        return {"updates": dict(self.updates), "removed": list(self.removed)}

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> SetProperties:
        return cls(doc.get("updates", {}), doc.get("removed", []))

    def summary(self) -> str:
        parts = [f"{k}={v}" for k, v in self.updates.items()] + [f"-{k}" for k in self.removed]
        return "set " + ", ".join(parts)


def _default_of(name: str) -> Any:
    from sediment.properties import PROPERTIES

    spec = PROPERTIES.get(name)
    return None if spec is None else spec.default


@dataclass(frozen=True, slots=True)
class SetOnline(Transaction):
    """Take a table offline (maintenance skips it) or bring it back online."""

    kind: ClassVar[str] = "set_online"
    online: bool

    def validate(self, state: TableState) -> None:
        _require_initialised(state)

    def apply(self, state: TableState, time: float) -> None:
        state.online = self.online

    def to_json(self) -> dict[str, Any]:
        return {"online": self.online}

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> SetOnline:
        return cls(bool(doc["online"]))

    def summary(self) -> str:
        return "online" if self.online else "offline"


TRANSACTION_KINDS: dict[str, type[Transaction]] = {
    t.kind: t for t in (InitialiseTable, AddFiles, SplitFileReferences, SplitPartition,
                        DeleteFiles, SetProperties, SetOnline)
}


def _register_late_kinds() -> None:
    """Kinds defined in their own modules (kept out of this one to keep it small)."""
    from sediment.core.jobs import AssignJobIds, ReplaceFileReferences
    from sediment.core.restore import RestoreVersion

    for kind in (AssignJobIds, ReplaceFileReferences, RestoreVersion):
        TRANSACTION_KINDS[kind.kind] = kind


_register_late_kinds()


def transaction_from_json(kind: str, doc: dict[str, Any], *, where: str) -> Transaction:
    """Decode one logged transaction; ``where`` names the log entry in errors."""
    cls = TRANSACTION_KINDS.get(kind)
    if cls is None:
        raise CorruptMetadataError(f"{where}: unknown transaction kind {kind!r}")
    try:
        return cls.from_json(doc)
    except (KeyError, TypeError, ValueError) as e:
        raise CorruptMetadataError(f"{where}: malformed {kind} transaction: {e!r}") from e

from sediment.core.jobs import (  # noqa: E402 - re-exported; defined after the base class
    AssignJobIds,
    JobAssignment,
    ReplaceFileReferences,
)

__all__ = ["AddFiles", "AssignJobIds", "DeleteFiles", "InitialiseTable", "JobAssignment",
           "ReplaceFileReferences", "SetOnline", "SetProperties", "SplitFileReferences",
           "SplitPartition", "SplitReference", "TRANSACTION_KINDS", "Transaction",
           "transaction_from_json"]
