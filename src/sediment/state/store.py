"""StateStore: load a table's state at any version and commit transactions optimistically.

Commit (see ``StateStore.commit``): validate against the head, try ``put_if_absent(log/<head+1>)``
with an entry that carries this commit's random id. When the slot is taken, or the put's outcome
is unknown (a lost response, a timeout), the committer reads the slot back: its own id means the
commit landed; another id means another writer won, so it re-reads the log, re-validates (the
transaction may no longer apply, e.g. a compaction whose inputs changed) and retries after a
jittered exponential backoff. An outcome it cannot resolve by reading raises
``CommitOutcomeUnknownError``: callers then keep their staged files (GC's orphan pass judges them
later), since the commit may have landed. Every ``state.snapshot.interval`` versions the
committer writes a content-addressed snapshot.

The in-memory head is immutable once published (every change builds a new ``TableState``), so
its lock is held only to read or swap it, never across object-store I/O or backoff sleeps:
readers never wait for a writer. Writers of one process take turns for the append itself (a
second lock readers never take), so they queue instead of racing each other for a version.
"""

from __future__ import annotations

import logging
import random
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from sediment.core.state import TableState
from sediment.core.transactions import Transaction
from sediment.errors import (
    CommitConflictError,
    CommitOutcomeUnknownError,
    CorruptMetadataError,
    PropertyError,
    QueryError,
    SedimentError,
    TableNotFoundError,
    TransactionInvalidError,
    WriteOutcomeUnknownError,
)
from sediment.properties import PROPERTIES
from sediment.state import pending
from sediment.state.log import HistoryEntry, LogEntry, TransactionLog, log_key
from sediment.state.snapshot import (
    DigestMemo,
    read_snapshot,
    snapshot_versions,
    write_snapshot,
)
from sediment.storage.base import ObjectStore

log = logging.getLogger(__name__)

TransactionSource = Transaction | Callable[[TableState], Transaction]
"""A transaction, or a function building one from the current head (re-run on each retry)."""


REFRESH_AHEAD = 0.5
"""Past this fraction of ``state.cache.refresh_seconds``, a read of the cached head starts a
background re-read of the log (see ``StateStore.cached_head``)."""
SYNC_MAX_AGE_SECONDS = 60.0
"""A writer whose cached head is older than this re-reads the log before committing."""
PRUNE_GRACE_SECONDS = 300.0
"""Pruning keeps every log entry younger than this (see ``StateStore.commit``)."""
DROPPED_MARKER = "dropped"
"""Table-rooted key that ``Store.drop_table`` writes first: later commits are refused."""


def _prop(state: TableState, name: str) -> Any:
    return state.properties.get(name, PROPERTIES[name].default)


def definitely_not_committed(error: BaseException) -> bool:
    """True when a failed commit is known not to have landed, so the caller deletes the
    files it staged for it at once: refused as invalid, lost every race, or refused because
    the table was dropped (``StateStore.commit`` checks that before it writes anything). Any
    other failure (storage errors, an interrupt, an unknown outcome) may have committed
    them."""
    return isinstance(error, (TransactionInvalidError, CommitConflictError,
                              TableNotFoundError))


class StateStore:
    """The state of one table, backed by its log and snapshots in ``objects`` (table-rooted)."""

    def __init__(self, objects: ObjectStore, table_id: str, name: str | None = None) -> None:
        self.objects = objects
        self.table_id = table_id
        self.name = name or table_id
        """The table's name in errors (its id when the store was opened without one)."""
        self.log = TransactionLog(objects, table_id, self.name)
        self._head: TableState | None = None
        self._known_digests = DigestMemo()
        """Snapshot objects known to exist, forgotten well within the prune grace period (a
        digest remembered past a prune would make a snapshot name a deleted object)."""
        self._lock = threading.Lock()
        """Guards reading and swapping ``_head`` only: never held across I/O."""
        self._commit_lock = threading.Lock()
        """Taken by this process's committers in turn (see ``_commit``); readers never take it."""
        self._synced = 0.0
        """When the cached head was last known to be current (monotonic seconds)."""
        self._refreshing = False
        """A background re-read of the log is under way (see ``cached_head``)."""

    # ---- the cached head: read and swapped under the lock, never mutated ---------------
    def _cached(self) -> tuple[TableState | None, float]:
        with self._lock:
            return self._head, self._synced

    def _publish(self, state: TableState, synced: float) -> TableState:
        """Make ``state`` the cached head unless a newer one was published meanwhile; returns
        the cached head."""
        with self._lock:
            if self._head is None or state.version >= self._head.version:
                self._head = state
                self._synced = max(self._synced, synced)
            elif state.version == self._head.version:
                self._synced = max(self._synced, synced)
            return self._head

    def _current(self, *, max_age: float | None) -> tuple[TableState, bool]:
        """The head, re-read from storage when never loaded or synced more than ``max_age``
        seconds ago (None: always). The flag says whether it was read just now."""
        head, synced = self._cached()
        if head is not None and max_age is not None and time.monotonic() - synced <= max_age:
            return head, False
        started = time.monotonic()
        state = self._load_from_storage(None) if head is None else self._refreshed(head)
        return self._publish(state, started), True

    # ---- reading -----------------------------------------------------------------------
    def _apply(self, state: TableState, entry: LogEntry) -> None:
        """Replay a committed entry. Every entry was validated before it was written, so one
        that cannot be applied is damaged metadata, named as such (with the table and key),
        not a raw KeyError that stops whoever reads the table."""
        try:
            entry.transaction.apply(state, entry.time)
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as e:
            raise CorruptMetadataError(
                f"log entry {entry.version} of table {self.name} ({log_key(entry.version)}) "
                f"cannot be replayed: {e!r}") from e
        state.version = entry.version
        state.last_update = entry.time

    def _load_from_storage(self, version: int | None) -> TableState:
        snaps = [v for v in snapshot_versions(self.objects) if version is None or v <= version]
        state: TableState | None = None
        for v in reversed(snaps):
            try:
                # an old version's objects are the ones prune deletes next: not remembered
                state = read_snapshot(self.objects, v, self.table_id,
                                      self._known_digests if version is None else None,
                                      name=self.name)
                break
            except SedimentError as e:  # a damaged snapshot: fall back to an older one
                log.warning("ignoring snapshot %s of table %s: %s", v, self.name, e)
        if state is None:
            state = TableState(self.table_id)
        for entry in self.log.read_after(state.version, upto=version):
            self._apply(state, entry)
        return state

    def head(self, *, refresh: bool = True) -> TableState:
        """The latest state (a private copy the caller may keep)."""
        state, _ = self._current(max_age=None if refresh else float("inf"))
        return state.copy()

    def cached_head(self) -> TableState:
        """The head this process shares, without a copy (read it, never change it): this
        process's own commits are in it at once, other writers' once it was re-read, which
        happens when it was last synced more than ``state.cache.refresh_seconds`` ago.

        Reading the log's new entries takes a query from a few milliseconds to a few tens
        while others commit, so a head past ``REFRESH_AHEAD`` of its age limit is returned
        as it is and re-read on a background thread (refresh-ahead): a table read steadily
        is re-read off its readers' path, and only a read that finds the head past its limit
        (the table was not read for a while) waits for the log. The limit itself holds as
        before: no read is answered from a head synced longer ago."""
        head, synced = self._cached()
        if head is not None:
            max_age = float(_prop(head, "state.cache.refresh_seconds"))
            age = time.monotonic() - synced
            if age < max_age:
                if age >= max_age * REFRESH_AHEAD:
                    self._refresh_in_background()
                return head
        return self._current(max_age=None)[0]

    def _refresh_in_background(self) -> None:
        """Re-read the log on a daemon thread (one at a time per table); a failure is left
        for the next read that finds the head too old to meet, on its own thread."""
        with self._lock:
            if self._refreshing:
                return
            self._refreshing = True

        def refresh() -> None:
            try:
                self._current(max_age=None)
            except Exception as e:  # noqa: BLE001 (reported by the read that needs it)
                log.debug("background refresh of table %s failed: %r", self.name, e)
            finally:
                with self._lock:
                    self._refreshing = False

        threading.Thread(target=refresh, name=f"sediment-refresh-{self.name}",
                         daemon=True).start()

    def _refreshed(self, base: TableState) -> TableState:
        """``base`` brought up to the log's head (a new state; ``base`` is left alone)."""
        state, complete = self._probe(base)
        return state if complete else self._listed(state)

    def _probe(self, base: TableState) -> tuple[TableState, bool]:
        """Read the log slots after ``base`` one by one until one is empty: a few small reads,
        where listing the log can cost O(log length). Not complete when the log must be
        listed: more than ``objects.probe_limit`` new entries (the state moves past those
        read), or the head's own entry is gone (pruned: the entries after it may be too)."""
        v = base.version
        if v == 0:
            return base, False
        state: TableState | None = None
        entry: LogEntry | None = None
        for _ in range(max(1, self.objects.probe_limit)):
            entry = self.log.read_if_present(v + 1)
            if entry is None:
                break
            if state is None:
                state = base.copy()
            self._apply(state, entry)
            v += 1
        out = base if state is None else state
        if entry is not None:  # probe_limit entries read, maybe more: list for the rest
            return out, False
        # Pruning deletes a prefix of the log: while entry v exists, v + 1 cannot have been
        # pruned, so its empty slot means v is the head (checked after the miss: no race).
        return out, self.objects.exists(log_key(v))

    def _listed(self, base: TableState) -> TableState:
        newer = self.log.versions_after(base.version)
        if newer and newer[0] != base.version + 1:
            # The entries after this state were pruned: start again from storage.
            return self._load_from_storage(None)
        if not newer:
            return base
        state = base.copy()
        for e in self.log.read_after(base.version, listed=newer):
            self._apply(state, e)
        return state

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
            raise CorruptMetadataError(f"log of table {self.name} has a gap: version "
                                       f"{start} is missing and no snapshot covers it")
        return self.log.history_after(start, listed=versions)

    # ---- committing --------------------------------------------------------------------
    def commit(self, source: TransactionSource) -> TableState:
        """Append one transaction at the next version; returns the new state.

        An empty transaction (``Transaction.is_empty``: adding, deleting, assigning or
        splitting nothing) commits nothing and returns the current state, as Sleeper ignores
        one. Raises ``TransactionInvalidError`` only for a transaction invalid at the log's real
        head (a cached head is re-read first), ``CommitConflictError`` when every attempt lost
        the race to other writers (nothing committed), and ``CommitOutcomeUnknownError`` when
        the store could not tell whether the entry landed.
        """
        if self.objects.exists(DROPPED_MARKER):
            raise TableNotFoundError(f"table {self.name} was dropped; nothing was committed")
        built: list[Transaction] = []
        try:
            state = self._commit(source, built)
        finally:
            # Settled: committed (referenced now), refused (the caller deletes them) or
            # unknown (GC's orphan pass judges them): no longer this process's to protect.
            pending.release(self.objects, [f for t in built for f in t.new_files()])
        if not built[-1].is_empty():
            self._maybe_snapshot(state)
        return state.copy()

    def _commit(self, source: TransactionSource, built: list[Transaction]) -> TableState:
        """The commit loop. Writers of this process take turns (``_commit_lock``) to build,
        validate and append, so they never race each other for a version; readers never wait
        for them (they take only ``_lock``), and nobody waits behind a backoff sleep."""
        commit_id = uuid.uuid4().hex
        checked: set[str] = set()
        lost = 0
        # Pruning never touches entries younger than PRUNE_GRACE_SECONDS, so a head synced
        # within SYNC_MAX_AGE_SECONDS cannot have its next slot pruned under it.
        max_age: float | None = SYNC_MAX_AGE_SECONDS
        while True:
            with self._commit_lock:
                head, fresh = self._current(max_age=max_age)
                while True:
                    txn = source(head) if callable(source) else source
                    built.append(txn)
                    if txn.is_empty():  # adds, moves or removes nothing: no log entry
                        return head
                    try:
                        txn.validate(head)
                        break
                    except TransactionInvalidError as e:
                        if fresh:
                            raise self._named(e) from None
                        head, fresh = self._current(max_age=None)  # judge it at the real head
                    except PropertyError as e:
                        raise self._named(e) from None
                self._check_new_files(txn, checked, head)
                version = head.version + 1
                now = time.time()
                if self._append(version, now, txn, commit_id, _scheme_version(head)):
                    state = head.copy()
                    txn.apply(state, now)
                    state.version = version
                    state.last_update = now
                    self._publish(state, time.monotonic())
                    return state
            lost += 1
            attempts = int(_prop(head, "state.commit.max_attempts"))
            if lost >= attempts:
                raise CommitConflictError(
                    f"table {self.name}: gave up after {attempts} attempts to commit "
                    f"{txn.kind}; other writers took every version up to {version}")
            base = float(_prop(head, "state.commit.backoff_seconds"))
            time.sleep(min(1.0, base * (2 ** min(lost - 1, 8))) * random.uniform(0.5, 1.5))
            max_age = None  # another writer moved the head: read it

    def _named(self, error: SedimentError) -> SedimentError:
        """``error`` (raised by the pure core, which knows tables by id) naming the table by
        its name instead: same class, same message otherwise."""
        message = str(error).replace(f"table {self.table_id}", f"table {self.name}")
        if message == str(error):
            return error
        renamed = type(error)(message)
        renamed.__traceback__ = error.__traceback__
        return renamed

    def _append(self, version: int, now: float, txn: Transaction, commit_id: str,
                scheme_version: int | None = None) -> bool:
        """Put ``txn`` at ``version``: True when the entry there is ours, False when another
        writer's; never guessed (``TransactionLog.try_append``)."""
        try:
            return self.log.try_append(version, now, txn, commit_id, scheme_version)
        except WriteOutcomeUnknownError as e:
            raise CommitOutcomeUnknownError(
                f"table {self.name}: could not learn whether version {version} ({txn.kind}) "
                f"was committed: {e}; its files are kept, and a later read of the table "
                f"tells") from e

    def _check_new_files(self, txn: Transaction, checked: set[str], head: TableState) -> None:
        """Refuse a transaction naming data files that may be gone: their writer stalled
        past its lease (by its own clock, or as GC recorded in ``head``, which a writer
        paused between this check and its append reads after its append loses to GC's
        record) and GC collected them, or they no longer exist. Committing would lose their
        records. Checked for the files this process protects as pending (every writer
        registers its files): the leases on every attempt, existence once per file."""
        files = pending.held(self.objects, txn.new_files())
        if not files:
            return
        expired = pending.expired_holders(self.objects, files, head.expired_leases)
        if expired:
            raise TransactionInvalidError(
                f"table {self.name}: refusing to commit {txn.kind}: garbage collection "
                f"recorded the pending-file lease {expired[0]} protecting its files as "
                f"expired at or before version {head.version} (this writer was stopped longer "
                f"than the lease timeout) and may have collected them; nothing was committed")
        stale = pending.check_fresh(self.objects, files)
        if stale:
            raise TransactionInvalidError(f"table {self.name}: refusing to commit {txn.kind}: "
                                          f"{stale}; GC may have collected its files")
        files = [f for f in files if f not in checked]
        if not files:
            return
        with ThreadPoolExecutor(min(16, len(files))) as pool:
            present = list(pool.map(self.objects.exists, files))
        missing = [f for f, ok in zip(files, present, strict=True) if not ok]
        if missing:
            raise TransactionInvalidError(
                f"table {self.name}: {len(missing)} data files of this {txn.kind} no longer "
                f"exist (first: {missing[0]}); nothing was committed")
        checked.update(files)

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
            log.warning("snapshot of table %s at %s failed: %s", self.name, st.version, e)


def _scheme_version(state: TableState) -> int | None:
    """The partition-scheme version a member's state follows (None for a table with a tree
    of its own): its log entries record the scheme tree they were validated against."""
    if not state.properties.get("partition.scheme"):
        return None
    return int(state.properties.get("partition.scheme.version", 0))
