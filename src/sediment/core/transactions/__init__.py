"""Transactions: the only way a table's state changes (see ``base`` for the contract).

One module per family of kinds: ``table`` (create, properties, online, clear, reinitialise),
``files`` (files in and out), ``partitions`` (the tree and pushing references down), ``jobs``
(compaction), ``restore``, ``records`` (deletes) and ``schema`` (schema changes); ``streams``
holds no kind: its StreamMark is a field of AddFiles (a streaming writer's batch), nor does
``idempotency`` (its KeyedWrite values ride on AddFiles and DeleteRecords). Every kind
is listed here, in ``TRANSACTION_KINDS``: the log decodes those and refuses any other
(``transaction_from_json``), and a kind a family defines but this list lacks fails the
project's tests.
"""

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

from sediment.core.transactions.base import Transaction
from sediment.core.transactions.files import (
    AddFiles,
    AddFilesWithSplits,
    DeleteFiles,
    ExpireLeases,
)
from sediment.core.transactions.idempotency import KeyedWrite
from sediment.core.transactions.jobs import (
    AssignJobIds,
    JobAssignment,
    ReplaceFileReferences,
    ReplaceFileReferencesBatch,
)
from sediment.core.transactions.partitions import (
    FollowScheme,
    SplitFileReferences,
    SplitPartition,
    SplitReference,
    follow_scheme,
)
from sediment.core.transactions.records import DeleteRecords
from sediment.core.transactions.restore import RestoreVersion
from sediment.core.transactions.schema import AlterSchema
from sediment.core.transactions.streams import StreamMark
from sediment.core.transactions.table import (
    ClearTable,
    InitialiseTable,
    ReinitialiseTable,
    SetOnline,
    SetProperties,
)
from sediment.errors import CorruptMetadataError


def _by_kind(classes: Sequence[type[Transaction]]) -> Mapping[str, type[Transaction]]:
    kinds: dict[str, type[Transaction]] = {}
    for cls in classes:
        if not cls.kind or kinds.setdefault(cls.kind, cls) is not cls:
            raise TypeError(f"transaction kind {cls.kind!r} of {cls.__qualname__} is empty "
                            f"or taken")
    return MappingProxyType(kinds)


TRANSACTION_KINDS: Mapping[str, type[Transaction]] = _by_kind((
    InitialiseTable, SetProperties, SetOnline, ClearTable, ReinitialiseTable,
    AddFiles, AddFilesWithSplits, DeleteFiles, ExpireLeases,
    SplitPartition, SplitFileReferences, FollowScheme,
    AssignJobIds, ReplaceFileReferences,
    RestoreVersion, DeleteRecords, ReplaceFileReferencesBatch, AlterSchema,
))
"""Every kind of transaction and its class (read-only). A kind is the log's name for its
class, part of the on-storage format: a kind is added here, never renamed or removed."""


def transaction_from_json(kind: str, doc: dict[str, Any], *, where: str) -> Transaction:
    """Decode one logged transaction; ``where`` names the log entry (its table and version)
    in errors: CorruptMetadataError for a kind not listed in ``TRANSACTION_KINDS`` or a body
    its class cannot read."""
    cls = TRANSACTION_KINDS.get(kind)
    if cls is None:
        raise CorruptMetadataError(f"{where}: unknown transaction kind {kind!r} (written by "
                                   f"a newer Sediment, or damaged)")
    try:
        return cls.from_json(doc)
    except (KeyError, TypeError, ValueError) as e:
        raise CorruptMetadataError(f"{where}: malformed {kind} transaction: {e!r}") from e


__all__ = ["AddFiles", "AddFilesWithSplits", "AlterSchema", "AssignJobIds", "ClearTable",
           "DeleteFiles", "DeleteRecords",
           "ExpireLeases", "FollowScheme", "InitialiseTable",
           "JobAssignment", "KeyedWrite", "ReinitialiseTable", "ReplaceFileReferences",
           "ReplaceFileReferencesBatch", "RestoreVersion",
           "SetOnline", "SetProperties",
           "SplitFileReferences", "SplitPartition", "SplitReference", "StreamMark",
           "TRANSACTION_KINDS",
           "Transaction", "follow_scheme", "transaction_from_json"]
