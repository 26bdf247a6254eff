"""Partition-tree kinds: splitting a leaf, pushing file references down to descendants, and a
member table taking over its partition scheme's splits (co-sharding, at the end).

Splitting a partition changes only the tree; the references of the old leaf stay where they
are until SplitFileReferences moves them below it, so the two can commit independently (and a
split never rewrites data).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from sediment.core.deletions import split_leaf
from sediment.core.keys import Key, decode_key, encode_key
from sediment.core.model import FileReference, Partition
from sediment.core.settling import holds_records
from sediment.core.state import ROOT_PARTITION_ID, TableState
from sediment.core.transactions.base import (
    Transaction,
    counted,
    fail,
    require_initialised,
    require_partition,
)
from sediment.errors import SchemaError


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
        require_initialised(state)
        seen: set[tuple[str, str]] = set()
        for s in self.splits:
            if (s.filename, s.from_partition) in seen:
                raise fail(state, f"{s.filename} in {s.from_partition} is split twice")
            seen.add((s.filename, s.from_partition))
            ref = state.references(s.from_partition).get(s.filename)
            if ref is None:
                raise fail(state, f"no reference to {s.filename} in {s.from_partition}")
            if ref.job_id is not None:
                raise fail(state, f"{s.filename} in {s.from_partition} is assigned to "
                                  f"job {ref.job_id}")
            for t in s.to:
                require_partition(state, t.partition_id)
                if t.filename != s.filename or not state.is_descendant(t.partition_id,
                                                                       s.from_partition):
                    raise fail(state, f"{s.filename}: {t.partition_id} is not below "
                                      f"{s.from_partition}")
                if s.filename in state.references(t.partition_id):
                    raise fail(state, f"{s.filename} already referenced in {t.partition_id}")
                if t.records < 0:
                    raise fail(state, f"{s.filename}: negative record count")
                if t.job_id is not None:
                    raise fail(state, f"{s.filename}: new references carry no job id")

    def apply(self, state: TableState, time: float) -> None:
        for s in self.splits:
            # The pushed-down references keep the file's sequence: the data did not change.
            src = state.references(s.from_partition)[s.filename]
            # the file's sums (by filename) follow it; copied from a snapshot's rows of the
            # old partition so a lookup from a new one needs no index of the whole snapshot
            sums = state.file_sums(s.filename, s.from_partition)
            if sums is not None:
                state.put_sums({s.filename: sums})
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

    def is_empty(self) -> bool:
        return not self.splits

    def summary(self) -> str:
        return f"{counted(len(self.splits), 'reference')} pushed down"


@dataclass(frozen=True, slots=True)
class SplitPartition(Transaction):
    """Turn a leaf into a parent of two leaves at ``split_key``, if it is still a leaf.

    ``dimension`` (box partitions, core/regions.py Cell): the row-key field cut, ``split_key`` a
    one-value tuple on it; None: ``split_key`` is a whole key cutting the key order."""

    kind: ClassVar[str] = "split_partition"
    partition_id: str
    split_key: Key
    left_id: str
    right_id: str
    dimension: int | None = None

    def validate(self, state: TableState) -> None:
        require_initialised(state)
        if state.properties.get("partition.scheme"):
            raise fail(state, "a member of a partition scheme is split only by its scheme "
                              "(store.split_scheme), so every member's leaves stay aligned")
        self.check_applicable(state)

    def check_applicable(self, state: TableState) -> None:
        """The checks of ``validate`` on the tree alone (also run for the splits a member
        table takes over from its partition scheme, which never split the table itself)."""
        p = require_partition(state, self.partition_id)
        if not p.is_leaf:
            raise fail(state, f"partition {self.partition_id} is no longer a leaf")
        assert state.schema is not None
        if self.dimension is not None or p.region.cell is not None:
            self._validate_cut(state, p)
            for cid in (self.left_id, self.right_id):
                if cid in state.partitions:
                    raise fail(state, f"partition id {cid} is already used")
            if self.left_id == self.right_id:
                raise fail(state, "children need distinct ids")
            return
        try:
            key = state.schema.check_row_key(self.split_key, what="split key")
        except SchemaError as e:
            raise fail(state, str(e)) from None
        # The key is logged as given, so it must already be in the schema's canonical form.
        if not isinstance(self.split_key, tuple) or key != self.split_key:
            raise fail(state, f"split key {self.split_key!r} must be a tuple of key values "
                              f"(temporal values as int: {key!r})")
        if not p.region.is_strictly_inside(self.split_key):
            raise fail(state, f"split key {self.split_key!r} is not inside {p.region}")
        for cid in (self.left_id, self.right_id):
            if cid in state.partitions:
                raise fail(state, f"partition id {cid} is already used")
        if self.left_id == self.right_id:
            raise fail(state, "children need distinct ids")

    def _validate_cut(self, state: TableState, p: Partition) -> None:
        """A cut of a box partition: a cell, a field of the key, a checked value inside."""
        assert state.schema is not None
        names = state.schema.row_key_names
        cell = p.region.cell
        if cell is None:
            raise fail(state, f"partition {p.id} is not a box partition: split it at a key, "
                              f"not on a field")
        if self.dimension is None:
            raise fail(state, f"partition {p.id} is a box partition: split it on a field "
                              f"(dimension), not at a key")
        if not 0 <= self.dimension < len(names) or not isinstance(self.split_key, tuple) \
                or len(self.split_key) != 1:
            raise fail(state, f"a box split needs a row-key field index (0..{len(names) - 1}) "
                              f"and one value, not {self.dimension!r}, {self.split_key!r}")
        name = names[self.dimension]
        try:
            v = state.schema.check_key_field(name, self.split_key[0], what="split value")
        except SchemaError as e:
            raise fail(state, str(e)) from None
        if v != self.split_key[0] or not cell.can_cut(self.dimension, v):
            raise fail(state, f"split value {self.split_key[0]!r} on {name!r} is not inside "
                              f"{p.region}")

    def apply(self, state: TableState, time: float) -> None:
        p = state.partitions[self.partition_id]
        state.partitions[self.partition_id] = Partition(
            p.id, p.parent_id, p.region, (self.left_id, self.right_id), self.split_key)
        left, right = p.region.split(self.split_key, self.dimension)
        state.partitions[self.left_id] = Partition(self.left_id, p.id, left)
        state.partitions[self.right_id] = Partition(self.right_id, p.id, right)
        if state.deletions:  # what was pending in the leaf is in its children that hold data
            holding = [c for c in (self.left_id, self.right_id) if holds_records(state, c)]
            state.deletions = split_leaf(state.deletions, p.id, holding)

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"partition": self.partition_id,
                               "split_key": encode_key(self.split_key),
                               "left": self.left_id, "right": self.right_id}
        if self.dimension is not None:
            doc["dimension"] = self.dimension
        return doc

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> SplitPartition:
        key = decode_key(doc["split_key"])
        if key is None:
            raise ValueError("split_key is null")  # (reported as corrupt metadata)
        dim = doc.get("dimension")
        return cls(doc["partition"], key, doc["left"], doc["right"],
                   None if dim is None else int(dim))

    def summary(self) -> str:
        on = "" if self.dimension is None else f" on field {self.dimension}"
        return f"{self.partition_id} split{on} at {self.split_key!r}"


# ---- co-sharding ------------------------------------------------------------------------------
# A partition scheme keeps the one partition tree of all its member tables in its own log
# (``schemes/<id>/log/``). A member never splits itself (SplitPartition refuses it): each split
# commits once, in the scheme's log, and a FollowScheme in the member's log then applies it to
# the member's copy of the tree and records the scheme version the member now matches. Every
# later transaction of the member is validated against that tree, so reading the member at
# version v reads the tree of the scheme version its state records. The member's references
# stay where they were; the push-down that compaction always does moves them into the new leaves.


@dataclass(frozen=True, slots=True)
class FollowScheme(Transaction):
    """Apply the scheme's splits the member lacks, in order (parents first), and record the
    scheme version they bring the member's tree to."""

    kind: ClassVar[str] = "follow_scheme"
    scheme_version: int
    splits: Sequence[SplitPartition]

    def validate(self, state: TableState) -> None:
        require_initialised(state)
        if not state.properties.get("partition.scheme"):
            raise fail(state, "the table is not a member of a partition scheme")
        if self.scheme_version < int(state.properties.get("partition.scheme.version", 0)):
            raise fail(state, f"scheme version {self.scheme_version} is older than the "
                              f"{state.properties.get('partition.scheme.version')} the "
                              "table follows")
        probe = TableState(state.table_id, state.name)
        probe.schema, probe.version = state.schema, state.version
        probe.partitions = dict(state.partitions)
        for s in self.splits:
            s.check_applicable(probe)
            s.apply(probe, 0.0)

    def apply(self, state: TableState, time: float) -> None:
        for s in self.splits:
            s.apply(state, time)
        state.properties["partition.scheme.version"] = self.scheme_version

    def to_json(self) -> dict[str, Any]:
        return {"scheme_version": self.scheme_version,
                "splits": [s.to_json() for s in self.splits]}

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> FollowScheme:
        return cls(int(doc["scheme_version"]),
                   [SplitPartition.from_json(s) for s in doc["splits"]])

    def is_empty(self) -> bool:
        """A negative version is the "already matches" answer a retried builder gives."""
        return self.scheme_version < 0

    def summary(self) -> str:
        splits = counted(len(self.splits), "split")
        return f"follows scheme version {self.scheme_version} ({splits})"


def follow_scheme(member: TableState, scheme: TableState) -> FollowScheme | None:
    """The FollowScheme that brings ``member``'s tree to ``scheme``'s (a refinement of it:
    a scheme only ever splits leaves), or None when the member already matches. Pure.

    The splits are the scheme's non-leaf partitions that are leaves (or absent) in the
    member, parents before children, so the transaction also repairs a tree that an older
    version's restore took back."""
    splits: list[SplitPartition] = []
    pending = [ROOT_PARTITION_ID]
    while pending:
        pid = pending.pop()
        sp = scheme.partitions[pid]
        if sp.is_leaf:
            continue
        mp = member.partitions.get(pid)
        if mp is None or mp.is_leaf:  # None: below a split this transaction adds
            assert sp.split_key is not None
            splits.append(SplitPartition(pid, sp.split_key, sp.children[0], sp.children[1]))
        pending.extend(sp.children)
    recorded = int(member.properties.get("partition.scheme.version", 0))
    if not splits and recorded >= scheme.version:
        return None
    return FollowScheme(max(recorded, scheme.version), splits)
