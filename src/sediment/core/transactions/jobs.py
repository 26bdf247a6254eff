"""Compaction kinds: claiming input files for jobs, and committing a job's output.

A job runs outside any commit, for as long as it takes. Claiming its inputs first
(AssignJobIds) is what lets its commit (ReplaceFileReferences) validate without retrying: no
other job can take the same references, and a push-down or restore that moved them makes the
commit invalid instead of silently losing or duplicating records.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from sediment.core.model import FileReference, FileSums, file_sequence
from sediment.core.settling import settle_leaf
from sediment.core.state import TableState
from sediment.core.transactions.base import (
    NO_SUMS,
    Transaction,
    check_sums,
    counted,
    fail,
    require_initialised,
    require_partition,
    sums_from_json,
    with_sums,
)


@dataclass(frozen=True, slots=True)
class JobAssignment:
    """Files of one partition given to one compaction job."""

    job_id: str
    partition_id: str
    filenames: Sequence[str]


@dataclass(frozen=True, slots=True)
class AssignJobIds(Transaction):
    """Claim input files for compaction jobs, so no two jobs take the same reference."""

    kind: ClassVar[str] = "assign_job_ids"
    assignments: Sequence[JobAssignment]

    def validate(self, state: TableState) -> None:
        require_initialised(state)
        new_ids = [a.job_id for a in self.assignments]
        if len(set(new_ids)) != len(new_ids):
            raise fail(state, "duplicate job ids in one assignment")
        existing = state.job_ids()
        claimed: set[tuple[str, str]] = set()
        for a in self.assignments:
            if a.job_id in existing:
                raise fail(state, f"job id {a.job_id} is already in use")
            refs = state.references(a.partition_id)
            for f in a.filenames:
                if (a.partition_id, f) in claimed:
                    raise fail(state, f"job {a.job_id}: {f} in {a.partition_id} is claimed "
                                      "twice in one assignment")
                claimed.add((a.partition_id, f))
                ref = refs.get(f)
                if ref is None:
                    raise fail(state, f"job {a.job_id}: no reference to {f} in "
                                      f"{a.partition_id}")
                if ref.job_id is not None:
                    raise fail(state, f"job {a.job_id}: {f} in {a.partition_id} is already "
                                      f"assigned to job {ref.job_id}")

    def apply(self, state: TableState, time: float) -> None:
        for a in self.assignments:
            refs = state.references(a.partition_id)
            for f in a.filenames:
                state.put_reference(refs[f]._replace(job_id=a.job_id))
            state.jobs[a.job_id] = (a.partition_id, time)

    def to_json(self) -> dict[str, Any]:
        return {"assignments": [{"job_id": a.job_id, "partition": a.partition_id,
                                 "files": list(a.filenames)} for a in self.assignments]}

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> AssignJobIds:
        return cls([JobAssignment(a["job_id"], a["partition"], a["files"])
                    for a in doc["assignments"]])

    def is_empty(self) -> bool:
        return not self.assignments

    def summary(self) -> str:
        return f"{counted(len(self.assignments), 'job')} assigned"


@dataclass(frozen=True, slots=True)
class ReplaceFileReferences(Transaction):
    """A compaction commit: inputs of a job replaced by its output, if still assigned to it."""

    kind: ClassVar[str] = "replace_file_references"
    job_id: str
    partition_id: str
    inputs: Sequence[str]
    output: FileReference | None
    checksums: Mapping[str, FileSums] = field(default_factory=lambda: NO_SUMS, kw_only=True)
    """The output's checksums (FileSums), by filename, as the job's writer took them."""
    upserts: bool = field(default=False, kw_only=True)
    """The output holds records of upserts that may replace records outside it (in files
    the job did not merge): its sequence carries ``UPSERT_BIT`` so readers settle them."""
    settles: int = field(default=0, kw_only=True)
    """The version of the head whose deletions the job applied to its records (0: none): the
    deletions up to it are settled in the partition when nothing older is left there
    (sediment.core.deletions.settle_leaf)."""

    def validate(self, state: TableState) -> None:
        require_initialised(state)
        require_partition(state, self.partition_id)
        if len(set(self.inputs)) != len(self.inputs):
            raise fail(state, f"job {self.job_id}: an input is listed twice")
        refs = state.references(self.partition_id)
        for f in self.inputs:
            ref = refs.get(f)
            if ref is None or ref.job_id != self.job_id:
                raise fail(state, f"job {self.job_id}: input {f} is no longer assigned to it "
                                  f"in {self.partition_id}")
        if self.output is not None:
            if self.output.partition_id != self.partition_id:
                raise fail(state, f"job {self.job_id}: output is in another partition")
            name = self.output.filename
            if name in state.refcount or name in state.unreferenced:
                raise fail(state, f"job {self.job_id}: output {name} is already in the table")
            if self.output.records < 0:
                raise fail(state, f"job {self.job_id}: negative record count")
        check_sums(state, self.checksums,
                   set() if self.output is None else {self.output.filename})

    def apply(self, state: TableState, time: float) -> None:
        for f in self.inputs:
            state.remove_reference(self.partition_id, f, time)
        state.jobs.pop(self.job_id, None)
        if self.output is not None:
            # The output holds each record's resolved sequence (sediment.files.sequence);
            # the reference's own is this commit's, for any record written without one.
            state.put_reference(self.output._replace(
                job_id=None, sequence=file_sequence(state.version + 1, 0, upsert=self.upserts),
                sequenced=True))
            state.put_sums(self.checksums)
        if self.settles:
            state.deletions = settle_leaf(state, self.partition_id, self.settles,
                                          None if self.output is None else self.output.filename)

    def to_json(self) -> dict[str, Any]:
        doc = with_sums({"job_id": self.job_id, "partition": self.partition_id,
                         "inputs": list(self.inputs),
                         "output": None if self.output is None else self.output.to_json()},
                        self.checksums)
        if self.upserts:  # these two omitted when unset: other entries stay as they were
            doc["upserts"] = True
        if self.settles:
            doc["settles"] = self.settles
        return doc

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> ReplaceFileReferences:
        out = doc.get("output")
        return cls(doc["job_id"], doc["partition"], doc["inputs"],
                   None if out is None else FileReference.from_json(out),
                   checksums=sums_from_json(doc), upserts=bool(doc.get("upserts", False)),
                   settles=int(doc.get("settles", 0)))

    def new_files(self) -> list[str]:
        return [] if self.output is None else [self.output.filename]

    def summary(self) -> str:
        return f"job {self.job_id}: {counted(len(self.inputs), 'file')} -> 1 in {self.partition_id}"


@dataclass(frozen=True, slots=True)
class ReplaceFileReferencesBatch(Transaction):
    """Several jobs' commits as one (``Table.purge``: every file that held a purged record
    is rewritten in one transaction, so no version holds some of them rewritten and others
    not). Each validates against the state the ones before it leave; any invalid one makes
    the whole batch invalid, and nothing is committed."""

    kind: ClassVar[str] = "replace_file_references_batch"
    jobs: Sequence[ReplaceFileReferences]

    def validate(self, state: TableState) -> None:
        require_initialised(state)
        if not self.jobs:
            raise fail(state, "a batch of no jobs")
        after = state.copy()  # copy-on-write: cheap, and ``state`` stays untouched
        for j in self.jobs:
            j.validate(after)
            j.apply(after, 0.0)

    def apply(self, state: TableState, time: float) -> None:
        for j in self.jobs:
            j.apply(state, time)

    def to_json(self) -> dict[str, Any]:
        return {"jobs": [j.to_json() for j in self.jobs]}

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> ReplaceFileReferencesBatch:
        return cls([ReplaceFileReferences.from_json(j) for j in doc["jobs"]])

    def new_files(self) -> list[str]:
        return [f for j in self.jobs for f in j.new_files()]

    def summary(self) -> str:
        inputs = sum(len(j.inputs) for j in self.jobs)
        outputs = sum(j.output is not None for j in self.jobs)
        return (f"{counted(len(self.jobs), 'job')} at once: {counted(inputs, 'file')} -> "
                f"{outputs}")
