"""StateStore: load a table's state at any version and commit transactions optimistically.

Commit: validate against the cached head, try ``put_if_absent(log/<head+1>)``; if another writer
took that version, read the new entries, re-validate (the transaction may no longer apply, e.g. a
compaction whose inputs changed) and retry after a jittered exponential backoff. Every
``state.snapshot.interval`` versions the committer writes a content-addressed snapshot.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from typing import Any

from sediment.core.state import TableState
from sediment.core.transactions import Transaction
from sediment.errors import (
    CommitConflictError,
    CorruptMetadataError,
    QueryError,
    SedimentError,
)
from sediment.properties import PROPERTIES
from sediment.state.log import HistoryEntry, LogEntry, TransactionLog, log_key
from sediment.state.snapshot import read_snapshot, snapshot_versions, write_snapshot
from sediment.storage.base import ObjectStore

log = logging.getLogger(__name__)

TransactionSource = Transaction | Callable[[TableState], Transaction]
"""A transaction, or a function building one from the current head (re-run on each retry)."""


SYNC_MAX_AGE_SECONDS = 60.0
"""A writer whose cached head is older than this re-reads the log before committing."""
PRUNE_GRACE_SECONDS = 300.0
"""Pruning keeps every log entry younger than this (see ``StateStore.commit``)."""


def _prop(state: TableState, name: str) -> Any:
    return state.properties.get(name, PROPERTIES[name].default)


class StateStore:
    """The state of one table, backed by its log and snapshots in ``objects`` (table-rooted)."""

    def __init__(self, objects: ObjectStore, table_id: str) -> None:
        self.objects = objects
        self.table_id = table_id
        self.log = TransactionLog(objects, table_id)
        self._head: TableState | None = None
        self._known_digests: set[str] = set()
        self._lock = threading.Lock()
        self._synced = 0.0
        """When the cached head was last known to be current (monotonic seconds)."""

    # ---- reading -----------------------------------------------------------------------
    def _apply(self, state: TableState, entry: LogEntry) -> None:
        entry.transaction.apply(state, entry.time)
        state.version = entry.version
        state.last_update = entry.time

    def _load_from_storage(self, version: int | None) -> TableState:
        snaps = [v for v in snapshot_versions(self.objects) if version is None or v <= version]
        state: TableState | None = None
        for v in reversed(snaps):
            try:
                state = read_snapshot(self.objects, v, self.table_id, self._known_digests)
                break
            except SedimentError as e:  # a damaged snapshot: fall back to an older one
                log.warning("ignoring snapshot %s of table %s: %s", v, self.table_id, e)
        if state is None:
            state = TableState(self.table_id)
        for entry in self.log.read_after(state.version, upto=version):
            self._apply(state, entry)
        return state

    def head(self, *, refresh: bool = True) -> TableState:
        """The latest state (a private copy the caller may keep)."""
        with self._lock:
            if self._head is None:
                self._head = self._load_from_storage(None)
            elif refresh:
                self._refresh_locked()
            return self._head.copy()

    def _refresh_locked(self) -> None:
        assert self._head is not None
        started = time.monotonic()
        if not self._refresh_by_probing():
            self._refresh_by_listing()
        self._synced = started

    def _refresh_by_probing(self) -> bool:
        """Read the log slots after the head one by one until one is empty: a few small reads,
        where listing the log can cost O(log length). False when the log must be listed: more
        than ``objects.probe_limit`` new entries (the head moves past those read), or the
        head's own entry is gone (pruned: the entries after it may be too)."""
        assert self._head is not None
        v = self._head.version
        if v == 0:
            return False
        state: TableState | None = None
        entry: LogEntry | None = None
        for _ in range(max(1, self.objects.probe_limit)):
            entry = self.log.read_if_present(v + 1)
            if entry is None:
                break
            if state is None:
                state = self._head.copy()
            self._apply(state, entry)
            v += 1
        if state is not None:
            self._head = state
        if entry is not None:  # probe_limit entries read, maybe more: list for the rest
            return False
        # Pruning deletes a prefix of the log: while entry v exists, v + 1 cannot have been
        # pruned, so its empty slot means v is the head (checked after the miss: no race).
        return self.objects.exists(log_key(v))

    def _refresh_by_listing(self) -> None:
        assert self._head is not None
        newer = self.log.versions_after(self._head.version)
        if newer and newer[0] != self._head.version + 1:
            # The entries after our cached head were pruned: start again from storage.
            self._head = self._load_from_storage(None)
        elif newer:
            state = self._head.copy()
            for e in self.log.read_after(self._head.version, listed=newer):
                self._apply(state, e)
            self._head = state

    def load(self, version: int | None = None) -> TableState:
        """The state at ``version`` (None: latest): newest snapshot at or below it + replay."""
        if version is None:
            return self.head()
        head = self.head()
        if version < 1 or version > head.version:
            raise QueryError(f"table {self.table_id} has no version {version} "
                             f"(versions 1..{head.version})")
        if version == head.version:
            return head
        if version < self.earliest_version():
            raise QueryError(f"table {self.table_id}: version {version} was pruned (retention); "
                             f"the oldest readable version is {self.earliest_version()}")
        return self._load_from_storage(version)

    def earliest_version(self) -> int:
        """The oldest version still loadable: 1, or after pruning the snapshot the log
        continues from."""
        first_log = next(iter(self.log.versions_after(0)), None)
        return 1 if first_log is None or first_log <= 1 else first_log - 1

    def history(self) -> list[HistoryEntry]:
        """Every logged transaction still kept (pruning removes the oldest)."""
        versions = self.log.versions_after(0)
        start = versions[0] - 1 if versions else 0
        if start and start not in snapshot_versions(self.objects):
            raise CorruptMetadataError(f"log of table {self.table_id} has a gap: version "
                                       f"{start} is missing and no snapshot covers it")
        return [HistoryEntry(e.version, e.time, e.transaction.kind, e.transaction.summary())
                for e in self.log.read_after(start)]

    # ---- committing --------------------------------------------------------------------
    def commit(self, source: TransactionSource) -> TableState:
        """Append one transaction at the next version; returns the new state."""
        with self._lock:
            if self._head is None:
                self._head = self._load_from_storage(None)
                self._synced = time.monotonic()
            elif time.monotonic() - self._synced > SYNC_MAX_AGE_SECONDS:
                # Pruning never touches entries younger than PRUNE_GRACE_SECONDS, so a head
                # synced this recently cannot have its next slot pruned under it.
                self._refresh_locked()
            attempts = int(_prop(self._head, "state.commit.max_attempts"))
            base = float(_prop(self._head, "state.commit.backoff_seconds"))
            for attempt in range(attempts):
                head = self._head
                txn = source(head) if callable(source) else source
                txn.validate(head)  # raises TransactionInvalidError: not retried
                version = head.version + 1
                now = time.time()
                if self.log.try_append(version, now, txn):
                    state = head.copy()
                    txn.apply(state, now)
                    state.version = version
                    state.last_update = now
                    self._head = state
                    self._synced = time.monotonic()
                    self._maybe_snapshot(state)
                    return state.copy()
                delay = min(1.0, base * (2 ** min(attempt, 8))) * random.uniform(0.5, 1.5)
                time.sleep(delay)
                self._refresh_locked()
            raise CommitConflictError(
                f"table {self.table_id}: gave up after {attempts} attempts to commit "
                f"{source.kind if isinstance(source, Transaction) else 'a transaction'}")

    def _maybe_snapshot(self, state: TableState) -> None:
        interval = int(_prop(state, "state.snapshot.interval"))
        if state.version % interval == 0:
            self.write_snapshot(state)

    def write_snapshot(self, state: TableState | None = None) -> None:
        """Write a snapshot of ``state`` (default: the head). Failures are logged, not raised:
        a missing snapshot only makes loading replay more."""
        st = state if state is not None else self.head()
        try:
            write_snapshot(self.objects, st, self._known_digests)
        except SedimentError as e:
            log.warning("snapshot of table %s at %s failed: %s", self.table_id, st.version, e)
