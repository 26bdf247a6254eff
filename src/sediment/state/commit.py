"""CommitLoop: append one transaction at the next version of a table's log, optimistically.

Commit (see ``CommitLoop.commit``): validate against the head, try ``put_if_absent(log/<head+1>)``
with an entry that carries this commit's random id. When the slot is taken, or the put's outcome
is unknown (a lost response, a timeout), the committer reads the slot back: its own id means the
commit landed; another id means another writer won, so it re-reads the log, re-validates (the
transaction may no longer apply, e.g. a compaction whose inputs changed) and retries after a
jittered exponential backoff. An outcome it cannot resolve by reading raises
``CommitOutcomeUnknownError``: callers then keep their staged files (GC's orphan pass judges them
later; see ``sediment.files.staging``), since the commit may have landed. Every
``state.snapshot.interval`` versions the committer writes a content-addressed snapshot.

The loop reads the head from the table's ``HeadCache`` (re-reading the log only when that head
is older than ``SYNC_MAX_AGE_SECONDS`` or another writer took the version tried) and publishes
each state it commits there. Writers of one process take turns for the append itself (a lock
readers never take), so they queue instead of racing each other for a version. The files a
transaction brings in are checked here, not protected: their staging holds the leases.
"""

from __future__ import annotations

import logging
import random
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

from sediment import metrics
from sediment.core.state import TableState
from sediment.core.transactions import AddFiles, Transaction
from sediment.errors import (
    CommitConflictError,
    CommitOutcomeUnknownError,
    SedimentError,
    TableNotFoundError,
    TransactionInvalidError,
    WriteOutcomeUnknownError,
)
from sediment.metrics import traces
from sediment.pools import shared_pool
from sediment.state import pending
from sediment.state.head_cache import HeadCache, prop
from sediment.state.snapshot import write_snapshot

log = logging.getLogger(__name__)

TransactionSource = Transaction | Callable[[TableState], Transaction]
"""A transaction, or a function building one from the current head (re-run on each retry)."""

SYNC_MAX_AGE_SECONDS = 60.0
"""A writer whose cached head is older than this re-reads the log before committing."""
PRUNE_GRACE_SECONDS = 300.0
"""Pruning keeps every log entry younger than this (see ``CommitLoop.commit``)."""
DROPPED_MARKER = "dropped"
"""Table-rooted key that ``Store.drop_table`` writes first: later commits are refused."""


class CommitLoop:
    """Commits to the table whose head ``heads`` caches."""

    def __init__(self, heads: HeadCache) -> None:
        self.heads = heads
        self.objects = heads.objects
        self.name = heads.name
        self.log = heads.log
        self._lock = threading.Lock()
        """Taken by this process's committers in turn (see ``_commit``); readers never take it."""

    def commit(self, source: TransactionSource) -> TableState:
        """Append one transaction at the next version; returns the new state (a copy).

        An empty transaction (``Transaction.is_empty``: adding, deleting, assigning or
        splitting nothing) commits nothing and returns the current state, as Sleeper ignores
        one. Raises ``TransactionInvalidError`` only for a transaction invalid at the log's real
        head (a cached head is re-read first), ``CommitConflictError`` when every attempt lost
        the race to other writers (nothing committed), ``TableNotFoundError`` when the table
        was dropped (checked before anything is written), and ``CommitOutcomeUnknownError``
        when the store could not tell whether the entry landed.
        """
        # whether the table was dropped is read on a thread while the transaction is built
        # and its new files are checked (a round trip less per commit); it is known before
        # anything is written, and it is what a commit into a dropped table raises
        dropped = _checkers().submit(self.objects.exists, DROPPED_MARKER)
        try:
            with traces.span("sediment.commit", self.name):
                state, txn = self._commit(source, lambda: self._not_dropped(dropped))
        except BaseException:
            self._not_dropped(dropped)
            raise
        self._not_dropped(dropped)  # (an empty transaction, which appends nothing, too)
        if not txn.is_empty():
            self._maybe_snapshot(state)
        return state.copy()

    def _not_dropped(self, dropped: Future[bool]) -> None:
        """Raise TableNotFoundError when ``dropped`` (the read of the drop marker) found it."""
        if dropped.result():
            raise TableNotFoundError(f"table {self.name} was dropped; nothing was committed")

    def _commit(self, source: TransactionSource, not_dropped: Callable[[], None]
                ) -> tuple[TableState, Transaction]:
        """The loop. Writers of this process take turns (``_lock``) to build, validate and
        append, so they never race each other for a version; readers never wait for them
        (they read the head cache only), and nobody waits behind a backoff sleep. Errors of
        validation name the table: every state carries its name. ``not_dropped`` raises
        when the table was dropped: called before the first append."""
        commit_id = uuid.uuid4().hex
        checked: set[str] = set()
        lost = 0
        # Pruning never touches entries younger than PRUNE_GRACE_SECONDS, so a head synced
        # within SYNC_MAX_AGE_SECONDS cannot have its next slot pruned under it.
        max_age: float | None = SYNC_MAX_AGE_SECONDS
        while True:
            with self._lock:
                head, fresh = self.heads.current(max_age=max_age)
                while True:
                    txn = source(head) if callable(source) else source
                    if txn.is_empty():  # adds, moves or removes nothing: no log entry
                        return head, txn
                    try:
                        txn.validate(head)
                        break
                    except TransactionInvalidError:
                        if fresh:
                            raise
                        head, fresh = self.heads.current(max_age=None)  # judge it at the head
                self._check_new_files(txn, checked, head)
                not_dropped()
                version = head.version + 1
                now = time.time()
                if self._append(version, now, txn, commit_id, _scheme_version(head)):
                    state = head.copy()
                    txn.apply(state, now)
                    state.version = version
                    state.last_update = now
                    self.heads.publish(state, time.monotonic())
                    metrics.commit(self.name, txn.kind, _rows_added(txn))
                    return state, txn
            lost += 1
            metrics.commit_conflict(self.name)
            attempts = int(prop(head, "state.commit.max_attempts"))
            if lost >= attempts:
                raise CommitConflictError(
                    f"table {self.name}: gave up after {attempts} attempts to commit "
                    f"{txn.kind}; other writers took every version up to {version}")
            base = float(prop(head, "state.commit.backoff_seconds"))
            time.sleep(min(1.0, base * (2 ** min(lost - 1, 8))) * random.uniform(0.5, 1.5))
            max_age = None  # another writer moved the head: read it

    def _append(self, version: int, now: float, txn: Transaction, commit_id: str,
                scheme_version: int | None = None) -> bool:
        """Put ``txn`` at ``version``: True when the entry there is ours, False when another
        writer's; never guessed (``TransactionLog.try_append``)."""
        try:
            return self.log.try_append(version, now, txn, commit_id, scheme_version)
        except WriteOutcomeUnknownError as e:
            metrics.commit_unknown(self.name)
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
        stages its files): the leases on every attempt, existence once per file."""
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
        if len(files) == 1:  # (one file: no thread)
            present = [self.objects.exists(files[0])]
        else:
            present = list(_checkers().map(self.objects.exists, files))
        missing = [f for f, ok in zip(files, present, strict=True) if not ok]
        if missing:
            raise TransactionInvalidError(
                f"table {self.name}: {len(missing)} data files of this {txn.kind} no longer "
                f"exist (first: {missing[0]}); nothing was committed")
        checked.update(files)

    # ---- snapshots -----------------------------------------------------------------------
    def _maybe_snapshot(self, state: TableState) -> None:
        interval = int(prop(state, "state.snapshot.interval"))
        if state.version % interval == 0:
            self.write_snapshot(state)

    def write_snapshot(self, state: TableState) -> None:
        """Write a snapshot of ``state``. Failures are logged, not raised: a missing snapshot
        only makes loading replay more."""
        try:
            write_snapshot(self.objects, state, self.heads.known_digests)
        except SedimentError as e:
            log.warning("snapshot of table %s at %s failed: %s", self.name, state.version, e)


CHECK_THREADS = 16
"""Threads that read what a commit checks (the drop marker, the new files' existence), one
pool per process: a pool made per commit cost a commit of one small file ~0.5 ms."""


def _checkers() -> ThreadPoolExecutor:
    """The process's checking threads (sediment.pools). Their tasks only read: none waits
    for another, so commits sharing them never deadlock."""
    return shared_pool("commit-check", CHECK_THREADS)


def _rows_added(txn: Transaction) -> int:
    """The records an add-files transaction brings in (ingest, upsert, bulk import, load:
    ``sediment_ingest_rows_total``); 0 for every other kind."""
    if not isinstance(txn, AddFiles):
        return 0
    return sum(r.records for r in txn.references)


def _scheme_version(state: TableState) -> int | None:
    """The partition-scheme version a member's state follows (None for a table with a tree
    of its own): its log entries record the scheme tree they were validated against."""
    if not state.properties.get("partition.scheme"):
        return None
    return int(state.properties.get("partition.scheme.version", 0))
