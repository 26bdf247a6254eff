"""RestoreVersion: make the table's content what it was at an older version, as a new commit.

The transaction carries only the change against the head it was planned on (references to drop
and to add, and the partition tree of the old version), so its size is proportional to what
differs. It validates only while the head still holds exactly the references it drops and every
file it brings back still exists (not yet garbage-collected).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from sediment.core.deletions import Deletion
from sediment.core.model import FileReference, Partition
from sediment.core.state import TableState
from sediment.core.transactions.base import (
    Transaction,
    fail,
    require_initialised,
)
from sediment.schema import Schema


@dataclass(frozen=True, slots=True)
class RestoreVersion(Transaction):
    """Restore the partitions and file references of ``version``."""

    kind: ClassVar[str] = "restore"
    version: int
    partitions: Sequence[Partition]
    drop: Sequence[tuple[str, str]]
    """(partition id, filename) references of the head that the old version did not have."""
    add: Sequence[FileReference]
    """References of the old version that the head does not have."""
    deletions: Sequence[Deletion] | None = field(default=None, kw_only=True)
    """The old version's deletions (None in entries written before deletions existed, whose
    tables had none)."""
    schema: Schema | None = field(default=None, kw_only=True)
    """The old version's schema when it differs from the head's (None: unchanged). It comes
    back as a new schema of the table, its last field id never below the head's (an id, once
    given, is never given again)."""

    def validate(self, state: TableState) -> None:
        require_initialised(state)
        if not 1 <= self.version < state.version:
            raise fail(state, f"cannot restore version {self.version}")
        for pid, f in self.drop:
            if f not in state.references(pid):
                raise fail(state, f"restore of {self.version}: {f} is no longer in {pid}")
        pids = {p.id for p in self.partitions}
        for r in self.add:
            if r.filename not in state.refcount and r.filename not in state.unreferenced:
                raise fail(state, f"restore of {self.version}: file {r.filename} was "
                                  "garbage-collected; tag versions to keep their files")
            if r.partition_id not in pids:
                raise fail(state, f"restore of {self.version}: no partition {r.partition_id}")

    def apply(self, state: TableState, time: float) -> None:
        for pid, f in self.drop:
            state.remove_reference(pid, f, time)
        state.partitions = {p.id: p for p in self.partitions}
        for r in self.add:
            state.put_reference(r._replace(job_id=None))
        live = {r.job_id for pid in state.partitions_with_references()
                for r in state.references(pid).values() if r.job_id is not None}
        state.jobs = {j: v for j, v in state.jobs.items() if j in live}
        state.deletions = tuple(self.deletions or ())
        if self.schema is not None and state.schema is not None:
            last = max(self.schema.last_id, state.schema.last_id)
            back = Schema(self.schema.row_keys, self.schema.sort_keys, self.schema.values,
                          ids=self.schema.ids, last_id=last,
                          created_id=self.schema.created_id)
            if back != state.schema:
                state.set_schema(back)

    def format(self) -> int:
        return max([1, *(d.format for d in self.deletions or ())])

    def to_json(self) -> dict[str, Any]:
        doc = {"version": self.version, "partitions": [p.to_json() for p in self.partitions],
               "drop": [list(d) for d in self.drop], "add": [r.to_json() for r in self.add]}
        if self.deletions is not None:
            doc["deletions"] = [d.to_json() for d in self.deletions]
        if self.schema is not None:
            doc["schema"] = self.schema.to_json()
        return doc

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> RestoreVersion:
        return cls(int(doc["version"]), [Partition.from_json(p) for p in doc["partitions"]],
                   [(str(p), str(f)) for p, f in doc["drop"]],
                   [FileReference.from_json(r) for r in doc["add"]],
                   deletions=None if "deletions" not in doc else
                   tuple(Deletion.from_json(d) for d in doc["deletions"]),
                   schema=Schema.from_json(doc["schema"]) if "schema" in doc else None)

    def summary(self) -> str:
        return f"restored version {self.version} (-{len(self.drop)} +{len(self.add)} references)"


def plan_restore(head: TableState, old: TableState) -> RestoreVersion:
    """The RestoreVersion that turns ``head``'s content into ``old``'s."""
    drop: list[tuple[str, str]] = []
    add: list[FileReference] = []
    pids = set(head.partitions_with_references()) | set(old.partitions_with_references())
    for pid in sorted(pids):
        now, then = head.references(pid), old.references(pid)
        if now is then:
            continue
        for f, r in now.items():
            o = then.get(f)
            if o is None or o.records != r.records:
                drop.append((pid, f))
        for f, r in then.items():
            n = now.get(f)
            if n is None or n.records != r.records:
                add.append(r._replace(job_id=None))
    return RestoreVersion(old.version, sorted(old.partitions.values(), key=lambda p: p.id),
                          drop, add, deletions=old.deletions,
                          schema=None if old.schema == head.schema else old.schema)
