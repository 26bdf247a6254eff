"""Committing a restore without undoing, unasked, what other writers committed meanwhile.

A restore is planned against the head its caller saw (the references to drop, those to bring
back). When another writer commits between that read and the restore's own commit, the commit
loop plans again against the new head. That is right when the new entries left the table's
content as it was (compaction, splits, pushing references down, GC, properties): restoring the
old content over them is what the caller asked for. It is wrong when they changed the content
(an ingest, a clear, another restore): planning again would silently drop records the caller
never saw. Then nothing is committed and ``CommitConflictError`` names the table, the entry
and what to do.
"""

from __future__ import annotations

from sediment.core.state import TableState
from sediment.core.transactions.restore import RestoreVersion, plan_restore
from sediment.errors import CommitConflictError
from sediment.state.store import StateStore

KEEPS_CONTENT = frozenset({
    "assign_job_ids", "replace_file_references", "split_file_references", "split_partition",
    "delete_files", "expire_leases", "set_properties", "set_online",
})
"""Kinds of transaction that leave a table's records as they were (maintenance, settings)."""


def restore_version(states: StateStore, old: TableState, seen: int) -> int:
    """Commit the restore of ``old`` (a state read from the table) over the head at version
    ``seen``, which the caller read before planning; returns the new version.

    Raises CommitConflictError when an entry committed after ``seen`` changed the content (see
    the module), and whatever ``StateStore.commit`` raises.
    """
    checked = [seen]

    def source(head: TableState) -> RestoreVersion:
        if head.version > checked[0]:
            for entry in states.log.read_after(checked[0], upto=head.version):
                txn = entry.transaction
                if txn.kind not in KEEPS_CONTENT:
                    what = txn.kind if txn.summary() == txn.kind else \
                        f"{txn.kind}: {txn.summary()}"
                    raise CommitConflictError(
                        f"table {states.name}: version {entry.version} ({what}) was "
                        f"committed while version {old.version} was being restored; nothing "
                        f"was restored, so its changes are kept. Restore again to discard "
                        f"them too")
            checked[0] = head.version
        return plan_restore(head, old)

    return states.commit(source).version
