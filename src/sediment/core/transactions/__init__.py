"""Transactions: the only way a table's state changes (see ``base`` for the contract).

One module per family of kinds: ``table`` (create, properties, online, clear, reinitialise),
``files`` (files in and out), ``partitions`` (the tree and pushing references down), ``jobs``
(compaction) and ``restore``. Each class registers its ``kind`` itself when defined, so
importing the families here is what completes ``TRANSACTION_KINDS``; every import path into
this package runs this module first, so no caller can see a partial registry.
"""

from sediment.core.transactions.base import (
    TRANSACTION_KINDS,
    Transaction,
    transaction_from_json,
)
from sediment.core.transactions.files import (
    AddFiles,
    AddFilesWithSplits,
    DeleteFiles,
    ExpireLeases,
)
from sediment.core.transactions.jobs import AssignJobIds, JobAssignment, ReplaceFileReferences
from sediment.core.transactions.partitions import (
    FollowScheme,
    SplitFileReferences,
    SplitPartition,
    SplitReference,
    follow_scheme,
)
from sediment.core.transactions.restore import RestoreVersion
from sediment.core.transactions.table import (
    ClearTable,
    InitialiseTable,
    ReinitialiseTable,
    SetOnline,
    SetProperties,
)

__all__ = ["AddFiles", "AddFilesWithSplits", "AssignJobIds", "ClearTable", "DeleteFiles",
           "ExpireLeases", "FollowScheme", "InitialiseTable",
           "JobAssignment", "ReinitialiseTable", "ReplaceFileReferences", "RestoreVersion",
           "SetOnline", "SetProperties",
           "SplitFileReferences", "SplitPartition", "SplitReference", "TRANSACTION_KINDS",
           "Transaction", "follow_scheme", "transaction_from_json"]
