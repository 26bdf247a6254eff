"""File lifecycle kinds: data files entering the table, and garbage-collected ones leaving it.

A file enters with its references (AddFiles; a bulk import's also with the leaf splits made for
it, AddFilesWithSplits) and leaves the table's bookkeeping only once no
reference is left and storage has deleted it (DeleteFiles); in between, the other families move
and replace its references. Before a file is written at all, its writer's lease protects it
(``sediment.state.pending``); GC records the leases it finds expired (ExpireLeases) before it
deletes what they protected, so a writer that was paused past its lease cannot commit them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from sediment.core.model import FileReference, FileSums, file_sequence
from sediment.core.state import TableState
from sediment.core.transactions.base import (
    NO_SUMS,
    Transaction,
    check_sums,
    clear,
    counted,
    fail,
    require_initialised,
    require_partition,
    sums_from_json,
    with_sums,
)
from sediment.core.transactions.idempotency import KeyedWrite, keys_from_json, keys_to_json
from sediment.core.transactions.partitions import SplitPartition
from sediment.core.transactions.streams import StreamMark


@dataclass(frozen=True, slots=True)
class AddFiles(Transaction):
    """New data files, each with one or more references (ingest, bulk import, load)."""

    kind: ClassVar[str] = "add_files"
    references: Sequence[FileReference]
    checksums: Mapping[str, FileSums] = field(default_factory=lambda: NO_SUMS, kw_only=True)
    """The new files' checksums (FileSums), by filename, as their writers took them; a file
    without (a writer from before checksums) reads unchecked."""
    upsert: bool = field(default=False, kw_only=True)
    """The files' records replace every older record of their record keys (``Table.upsert``):
    their sequences carry ``UPSERT_BIT``."""
    overwrite: bool = field(default=False, kw_only=True)
    """The files replace every record of the table, in this one commit (Spark's
    ``mode("overwrite")``): every reference is removed first, as ``ClearTable`` does."""
    stream: StreamMark | None = field(default=None, kw_only=True)
    """The streaming writer's batch these files are (sediment.core.transactions.streams):
    recorded in the state with them, so that a replay of the batch is recognised."""
    keys: Sequence[KeyedWrite] = field(default=(), kw_only=True)
    """The keyed writes these files are (sediment.core.transactions.idempotency): logged
    with them, never kept in the state."""

    def validate(self, state: TableState) -> None:
        require_initialised(state)
        if self.stream is not None:
            self.stream.validate(state)
        seen: set[tuple[str, str]] = set()
        for r in self.references:
            require_partition(state, r.partition_id)
            if r.filename in state.refcount or r.filename in state.unreferenced:
                raise fail(state, f"file {r.filename} is already in the table")
            if (r.filename, r.partition_id) in seen:
                raise fail(state, f"file {r.filename} referenced twice in {r.partition_id}")
            if r.records < 0:
                raise fail(state, f"file {r.filename}: negative record count")
            if r.job_id is not None:
                raise fail(state, f"file {r.filename}: new references carry no job id")
            seen.add((r.filename, r.partition_id))
        check_sums(state, self.checksums, {r.filename for r in self.references})

    def apply(self, state: TableState, time: float) -> None:
        # Each new file's sequence: this commit's version, then the file's rank in the order
        # the transaction lists the files (the log's order, so every replay gives the same).
        version = state.version + 1
        if self.overwrite:
            clear(state, time)
        ranks: dict[str, int] = {}
        for r in self.references:
            rank = ranks.setdefault(r.filename, len(ranks))
            state.put_reference(r._replace(
                sequence=file_sequence(version, rank, upsert=self.upsert), sequenced=False))
        state.put_sums(self.checksums)
        if self.stream is not None:
            self.stream.apply(state, time)

    def to_json(self) -> dict[str, Any]:
        return _with_options(self, with_sums(
            {"references": [r.to_json() for r in self.references]}, self.checksums))

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> AddFiles:
        return cls([FileReference.from_json(r) for r in doc["references"]],
                   checksums=sums_from_json(doc), **_options(doc))

    def is_empty(self) -> bool:
        return not self.references and not self.overwrite

    def new_files(self) -> list[str]:
        return sorted({r.filename for r in self.references})

    def summary(self) -> str:
        files = len({r.filename for r in self.references})
        how = "overwrite: " if self.overwrite else "upsert: " if self.upsert else ""
        batch = ("" if self.stream is None else
                 f" (stream {self.stream.stream_id} batch {self.stream.batch_id})")
        return (f"{how}{counted(files, 'file')}, "
                f"{counted(sum(r.records for r in self.references), 'record')}{batch}")


def _with_options(txn: AddFiles, doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` with the options an AddFiles sets, each omitted when unset: plain entries stay
    as they always were."""
    for flag in ("upsert", "overwrite"):
        if getattr(txn, flag):
            doc[flag] = True
    if txn.stream is not None:
        doc["stream"] = txn.stream.to_json()
    return keys_to_json(doc, txn.keys)


def _options(doc: dict[str, Any]) -> dict[str, Any]:
    """The AddFiles options a logged body sets (inverse of :func:`_with_options`)."""
    return {"upsert": bool(doc.get("upsert", False)),
            "overwrite": bool(doc.get("overwrite", False)),
            "stream": StreamMark.from_json(doc["stream"]) if "stream" in doc else None,
            "keys": keys_from_json(doc)}


@dataclass(frozen=True, slots=True)
class DeleteFiles(Transaction):
    """Garbage collection: files with no reference were deleted from storage."""

    kind: ClassVar[str] = "delete_files"
    filenames: Sequence[str]

    def validate(self, state: TableState) -> None:
        require_initialised(state)
        if len(set(self.filenames)) != len(self.filenames):
            raise fail(state, "a file is listed twice")
        for f in self.filenames:
            if f in state.refcount:
                raise fail(state, f"file {f} is still referenced")
            if f not in state.unreferenced:
                raise fail(state, f"file {f} is not an unreferenced file of this table")

    def apply(self, state: TableState, time: float) -> None:
        for f in self.filenames:
            del state.unreferenced[f]
            state.drop_sums(f)

    def to_json(self) -> dict[str, Any]:
        return {"files": list(self.filenames)}

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> DeleteFiles:
        return cls(doc["files"])

    def is_empty(self) -> bool:
        return not self.filenames

    def summary(self) -> str:
        return f"{counted(len(self.filenames), 'file')} deleted"


EXPIRED_LEASES_KEPT_SECONDS = 7 * 86400.0
"""How long the state remembers an expired lease. Its writer checks the record when it next
commits; one frozen longer than this with its monotonic clock frozen too (a suspended VM)
would miss it. A week keeps the state small (one entry per dead writer) and covers any pause
a machine survives."""


@dataclass(frozen=True, slots=True)
class ExpireLeases(Transaction):
    """Garbage collection found these pending-file leases expired (their writers stopped
    renewing them past the lease timeout) and is about to treat their files as orphans.

    Recorded before any of those files is deleted: a writer that was paused between checking
    its lease and appending its commit finds this entry in the version it wanted (its
    conditional append loses), re-validates, and refuses to commit files GC may have taken
    (``StateStore.commit``). Records older than ``EXPIRED_LEASES_KEPT_SECONDS`` are dropped."""

    kind: ClassVar[str] = "expire_leases"
    leases: Sequence[str]

    def validate(self, state: TableState) -> None:
        require_initialised(state)
        if len(set(self.leases)) != len(self.leases):
            raise fail(state, "a lease is listed twice")

    def apply(self, state: TableState, time: float) -> None:
        kept = {k: t for k, t in state.expired_leases.items()
                if time - t < EXPIRED_LEASES_KEPT_SECONDS}
        kept.update((k, time) for k in self.leases)
        state.expired_leases = kept  # replaced, never changed in place (copies share it)

    def to_json(self) -> dict[str, Any]:
        return {"leases": list(self.leases)}

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> ExpireLeases:
        return cls([str(k) for k in doc["leases"]])

    def is_empty(self) -> bool:
        return not self.leases

    def summary(self) -> str:
        return f"{counted(len(self.leases), 'pending-file lease')} expired"


@dataclass(frozen=True, slots=True)
class AddFilesWithSplits(AddFiles):
    """A bulk import in one commit: leaves split at sampled keys, then files added into the
    new leaves.

    The splits and the files must land together: splits alone would leave empty leaves behind
    a failed import (and a commit each), files alone would reference leaves that do not exist.
    The splits validate in order, each against the state the previous ones leave, so a
    concurrent split of the same leaf makes the whole transaction invalid at the head, and
    nothing is committed. A subclass of AddFiles: whatever looks for the files a job added
    (the ingest batcher's recovery) finds them here too.

    ``splits`` are SplitPartition transactions, logged by their bodies.
    """

    kind: ClassVar[str] = "add_files_with_splits"
    splits: Sequence[Transaction] = ()

    def validate(self, state: TableState) -> None:
        require_initialised(state)
        after = state.copy()  # copy-on-write: cheap, and ``state`` stays untouched
        for s in self.splits:
            if s.kind != "split_partition":
                raise fail(state, f"{s.kind} is not a split")
            s.validate(after)
            s.apply(after, 0.0)
        AddFiles.validate(self, after)

    def apply(self, state: TableState, time: float) -> None:
        for s in self.splits:
            s.apply(state, time)
        AddFiles.apply(self, state, time)

    def to_json(self) -> dict[str, Any]:
        return _with_options(self, with_sums(
            {"splits": [s.to_json() for s in self.splits],
             "references": [r.to_json() for r in self.references]}, self.checksums))

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> AddFilesWithSplits:
        return cls([FileReference.from_json(r) for r in doc["references"]],
                   [SplitPartition.from_json(s) for s in doc["splits"]],
                   checksums=sums_from_json(doc), **_options(doc))

    def is_empty(self) -> bool:
        return not self.references and not self.splits

    def summary(self) -> str:
        return f"{counted(len(self.splits), 'split')}, {AddFiles.summary(self)}"
