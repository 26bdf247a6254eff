"""StateStore: one table's state at any version, and commits to it: the face of two parts.

- the cached head (``sediment.state.head_cache.HeadCache``): the latest state this process
  shares, re-read by probing the log's next slots, refreshed ahead of its age limit;
- the commit loop (``sediment.state.commit.CommitLoop``): validate, append at the next version
  with a conditional put, resolve a lost race or an unknown outcome by reading, retry.

Here: loading an older version (newest snapshot at or below it, then replay), the history, and
snapshots on demand. Every state carries the table's name, so errors raised from it (the pure
core's validation included) name the table as its users know it. The files a commit brings in
are staged, and settled after it, by ``sediment.files.staging``.
"""

from __future__ import annotations

from sediment.core.state import TableState
from sediment.errors import CorruptMetadataError, QueryError, definitely_not_committed
from sediment.state.commit import (
    DROPPED_MARKER,
    PRUNE_GRACE_SECONDS,
    CommitLoop,
    TransactionSource,
)
from sediment.state.head_cache import HeadCache
from sediment.state.log import HistoryEntry, TransactionLog
from sediment.state.snapshot import snapshot_versions
from sediment.storage.base import ObjectStore

__all__ = ["DROPPED_MARKER", "PRUNE_GRACE_SECONDS", "StateStore", "TransactionSource",
           "definitely_not_committed"]


class StateStore:
    """The state of one table, backed by its log and snapshots in ``objects`` (table-rooted)."""

    def __init__(self, objects: ObjectStore, table_id: str, name: str | None = None, *,
                 shared: bool = False) -> None:
        self.objects = objects
        self.table_id = table_id
        self.name = name or table_id
        """The table's name in errors (its id when the store was opened without one)."""
        self.log = TransactionLog(objects, table_id, self.name)
        self.heads = HeadCache(objects, table_id, self.name, self.log, shared=shared)
        """The cached head (read by queries, advanced by this process's commits; ``shared``:
        by the commits and reads of every shared state store of the table in this process,
        as the tables a Store opens are)."""
        self.commits = CommitLoop(self.heads)
        """The commit loop."""

    # ---- reading -----------------------------------------------------------------------
    def head(self, *, refresh: bool = True) -> TableState:
        """The latest state (a private copy the caller may keep)."""
        return self.heads.head(refresh=refresh)

    def cached_head(self) -> TableState:
        """The head this process shares, without a copy (read it, never change it), re-read
        once older than ``state.cache.refresh_seconds`` (see ``HeadCache.cached_head``)."""
        return self.heads.cached_head()

    def load(self, version: int | None = None) -> TableState:
        """The state at ``version`` (None: latest): newest snapshot at or below it + replay."""
        if version is None:
            return self.head()
        head = self.head()
        if version < 1 or version > head.version:
            raise QueryError(f"table {self.name} has no version {version} "
                             f"(versions 1..{head.version})")
        if version == head.version:
            return head
        if version < self.earliest_version():
            raise QueryError(f"table {self.name}: version {version} was pruned (retention); "
                             f"the oldest readable version is {self.earliest_version()}")
        return self.heads.load_from_storage(version)

    def earliest_version(self) -> int:
        """The oldest version still loadable: 1, or after pruning the snapshot the log
        continues from."""
        first_log = next(iter(self.log.versions_after(0)), None)
        return 1 if first_log is None or first_log <= 1 else first_log - 1

    def history(self, limit: int | None = None) -> list[HistoryEntry]:
        """Every logged transaction still kept (pruning removes the oldest), in commit order;
        ``limit``: only the ``limit`` newest. With a limit the log is listed from the head's
        version less ``limit`` on (the head found by probing the slots after the cached
        one), so the cost is that of the rows asked for, not of the whole log."""
        if limit is not None:
            if limit < 0:
                raise QueryError(f"history of table {self.name}: limit {limit} is negative")
            head = self.head().version
            after = max(0, head - limit)
            versions = [v for v in self.log.versions_after(after) if v <= head]
            if not versions or versions[0] == after + 1:
                return self.log.history_after(after, listed=versions) if versions else []
            # the oldest of them were pruned: the kept ones, checked as below
        else:
            versions = self.log.versions_after(0)
        start = versions[0] - 1 if versions else 0
        if start and start not in snapshot_versions(self.objects):
            raise CorruptMetadataError(f"log of table {self.name} has a gap: version "
                                       f"{start} is missing and no snapshot covers it")
        return self.log.history_after(start, listed=versions)

    # ---- committing --------------------------------------------------------------------
    def commit(self, source: TransactionSource) -> TableState:
        """Append one transaction at the next version; returns the new state (see
        ``CommitLoop.commit`` for what it raises)."""
        return self.commits.commit(source)

    def write_snapshot(self, state: TableState | None = None) -> None:
        """Write a snapshot of ``state`` (default: the head). Failures are logged, not raised:
        a missing snapshot only makes loading replay more."""
        self.commits.write_snapshot(state if state is not None else self.head())
