"""The Transaction base class, the registry of kinds, and decoding a logged transaction.

A transaction is the only way a table's state changes. Each kind is a small frozen value that
validates itself against the state it would follow (``validate``) and applies itself
(``apply``). The state store writes a transaction to the log at the next version only after
``validate`` passed on the state at the current head, so replaying the log from version 1 always
reproduces the state.

The log names each transaction by its ``kind``; decoding needs the class of every kind. Each
class registers itself when it is defined (``Transaction.__init_subclass__``), so this module
knows no kind, the families live in their own modules without import cycles, and the package
``__init__`` completes the registry just by importing them.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, ClassVar

from sediment.core.model import Partition
from sediment.core.state import TableState
from sediment.errors import CorruptMetadataError, TransactionInvalidError

_KINDS: dict[str, type[Transaction]] = {}

TRANSACTION_KINDS: Mapping[str, type[Transaction]] = MappingProxyType(_KINDS)
"""Every registered kind and its class (read-only: classes register themselves)."""


class Transaction(ABC):
    """Base class: subclasses set ``kind`` and implement the four abstract methods.

    A subclass that sets ``kind`` in its own body is registered under it; one that does not
    (a shared intermediate base) is not. ``kind`` is the log's name for the class, so it is
    part of the on-storage format: never rename one, and two classes may not share one.
    """

    kind: ClassVar[str] = ""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        kind = cls.__dict__.get("kind")
        if kind is None:
            return
        if not isinstance(kind, str) or not kind:
            raise TypeError(f"{cls.__qualname__}.kind must be a non-empty string")
        known = _KINDS.get(kind)
        if known is not None and not _is_slots_copy(cls, known):
            raise TypeError(f"transaction kind {kind!r} of {cls.__module__}.{cls.__qualname__}"
                            f" is already {known.__module__}.{known.__qualname__}'s")
        _KINDS[kind] = cls

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

    def new_files(self) -> list[str]:
        """Data files this transaction brings into the table, in order: each must still exist
        when it commits (see ``sediment.state.pending``). None by default."""
        return []

    def is_empty(self) -> bool:
        """True when applying this would change nothing (no files added, deleted, assigned or
        moved): the state store then commits nothing and returns the current state, as
        Sleeper's ``StateStoreTransaction.isEmpty`` lets its store ignore one."""
        return False


def _is_slots_copy(cls: type, known: type) -> bool:
    """Whether ``cls`` is the class @dataclass(slots=True) built to replace ``known``.

    That decorator cannot add slots to a class in place, so it defines a second class from the
    first one's namespace, and this hook sees both; the second, which the name ends up bound
    to, must take the kind over. It shares the first one's very ``__dataclass_fields__``.
    """
    fields = vars(known).get("__dataclass_fields__")
    return (fields is not None and vars(cls).get("__dataclass_fields__") is fields
            and cls.__name__ == known.__name__ and cls.__module__ == known.__module__)


def transaction_from_json(kind: str, doc: dict[str, Any], *, where: str) -> Transaction:
    """Decode one logged transaction; ``where`` names the log entry in errors."""
    cls = _KINDS.get(kind)
    if cls is None:
        raise CorruptMetadataError(f"{where}: unknown transaction kind {kind!r}")
    try:
        return cls.from_json(doc)
    except (KeyError, TypeError, ValueError) as e:
        raise CorruptMetadataError(f"{where}: malformed {kind} transaction: {e!r}") from e


# Checks shared by the kinds' ``validate`` (for the family modules, not re-exported).

def counted(n: int, noun: str) -> str:
    """``n`` and ``noun`` in the number ``n`` asks for ("1 file", "2 files"): summaries are
    read by people (history, the dashboard)."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def fail(state: TableState, msg: str) -> TransactionInvalidError:
    """The error a ``validate`` raises, naming the table and the version it checked."""
    return TransactionInvalidError(f"table {state.table_id} at version {state.version}: {msg}")


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
