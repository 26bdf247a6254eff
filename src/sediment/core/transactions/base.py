"""The Transaction base class and the checks its kinds share.

A transaction is the only way a table's state changes. Each kind is a small frozen value that
validates itself against the state it would follow (``validate``) and applies itself
(``apply``). The state store writes a transaction to the log at the next version only after
``validate`` passed on the state at the current head, so replaying the log from version 1 always
reproduces the state.

The log names each transaction by its ``kind``; the package lists every kind
(``TRANSACTION_KINDS``) and decodes only those (``transaction_from_json``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, ClassVar

from sediment.core.model import FileSums, Partition
from sediment.core.state import TableState
from sediment.errors import TransactionInvalidError


class Transaction(ABC):
    """Base class: subclasses set ``kind`` and implement the four abstract methods, and are
    listed in ``sediment.core.transactions.TRANSACTION_KINDS``.

    ``kind`` is the log's name for the class, so it is part of the on-storage format: never
    rename one, and two classes may not share one.
    """

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

    def format(self) -> int:
        """The metadata format (sediment.state.log.FORMAT_VERSION) its log entry needs: the
        oldest that holds it, so older versions of Sediment read what they can."""
        return 1

    def new_files(self) -> list[str]:
        """Data files this transaction brings into the table, in order: each must still exist
        when it commits (see ``sediment.state.pending``). None by default."""
        return []

    def is_empty(self) -> bool:
        """True when applying this would change nothing (no files added, deleted, assigned or
        moved): the state store then commits nothing and returns the current state, as
        Sleeper's ``StateStoreTransaction.isEmpty`` lets its store ignore one."""
        return False


# Checks shared by the kinds' ``validate`` (for the family modules, not re-exported).

def counted(n: int, noun: str) -> str:
    """``n`` and ``noun`` in the number ``n`` asks for ("1 file", "2 files"): summaries are
    read by people (history, the dashboard)."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def fail(state: TableState, msg: str) -> TransactionInvalidError:
    """The error a ``validate`` raises, naming the table and the version it checked."""
    return TransactionInvalidError(f"table {state.name} at version {state.version}: {msg}")


def require_initialised(state: TableState) -> None:
    """Every kind but InitialiseTable follows an initialised table."""
    if state.schema is None:
        raise fail(state, "table is not initialised")


def require_partition(state: TableState, pid: str) -> Partition:
    """The partition ``pid`` of ``state``, which must exist."""
    p = state.partitions.get(pid)
    if p is None:
        raise fail(state, f"no partition {pid!r}")
    return p


def clear(state: TableState, time: float) -> None:
    """Remove every reference, job and deletion of ``state`` (the files become unreferenced,
    for the collector): ``ClearTable``, and an overwrite before it adds its files."""
    for pid in state.partitions_with_references():
        for f in list(state.references(pid)):
            state.remove_reference(pid, f, time)
    state.jobs = {}
    state.deletions = ()  # nothing is left for them to delete


NO_SUMS: Mapping[str, FileSums] = MappingProxyType({})
"""The checksums of a transaction that records none (immutable: a shared default)."""


def check_sums(state: TableState, checksums: Mapping[str, FileSums], files: set[str]) -> None:
    """Checksums are of the transaction's own new files, one FileSums each."""
    for name, sums in checksums.items():
        if name not in files:
            raise fail(state, f"checksums of {name}, which is not a new file of this commit")
        if not isinstance(sums, FileSums) or sums.size < 0:
            raise fail(state, f"file {name}: checksums {sums!r} are not a FileSums")


def with_sums(doc: dict[str, Any], checksums: Mapping[str, FileSums]) -> dict[str, Any]:
    """``doc`` with a ``checksums`` key (filename -> [size, footer, crc, sample], by name)
    when there are any: omitted when empty, so entries without stay as they always were."""
    if checksums:
        doc["checksums"] = {k: checksums[k].to_json() for k in sorted(checksums)}
    return doc


def sums_from_json(doc: dict[str, Any]) -> Mapping[str, FileSums]:
    sums = doc.get("checksums")
    if not sums:
        return NO_SUMS
    return MappingProxyType({k: FileSums.from_json(v) for k, v in sums.items()})
