"""Group commit: many writes to one table, one sorted set of files and one transaction.

Two writers gather small writes and commit them together: the buffered writer
(:mod:`sediment.ingest.buffered`, one application's writes) and the Flight server's group
commit (:class:`GroupCommitter`, many clients' puts). Both commit through
:func:`commit_writes`: the writes' records staged as ONE ingest (one sort, one file per touched
leaf) and committed as ONE AddFiles transaction, with the idempotency keys of the keyed ones
(:func:`~sediment.ingest.keyed.commit_staged_keyed`: every key recorded with that commit,
exactly once; keys some earlier commit already holds are answered with its version and their
records are not written again).

**The server's group commit.** One :class:`GroupCommitter` per table per process (one writer:
its commits never race each other). A put, validated against the table's schema before it
joins (bad records fail that put alone), is queued; the committer's thread waits until the
oldest queued put is ``window`` seconds old (``write.group_commit_ms``), or the queue holds
``max_bytes``, then commits the queued puts as one group and answers each put's future only
once that commit has landed (or with the error that stopped it). While a group commits, the
next one gathers.

Order: a group holds puts of one kind, in arrival order: a group is cut where the kind
changes (ingest vs upsert). An AddFiles transaction is an ingest or an upsert as a whole (its
records carry one commit sequence, with or without the upsert bit), so cutting the group
keeps the log format and every order: within a group the later of equal keys is the later in
the staged input (the merge is stable: an upsert's last occurrence wins), and groups commit
one after the other in arrival order. It costs one more commit at each change of kind.

Failure of a group that is not a put's own: a group whose commit surely wrote nothing
(``definitely_not_committed``: a lost race, an invalid transaction), or whose writes are all
keyed (a retry cannot duplicate them: the log check finds a landed key), is retried put by put,
each put getting its own outcome. Otherwise (a storage error or unknown outcome that may have
committed unkeyed records) each put is told that error: nothing is retried that could be
written twice.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pyarrow as pa

from sediment import metrics
from sediment.core.transactions import KeyedWrite
from sediment.errors import ServerBusyError, definitely_not_committed
from sediment.ingest.keyed import PartlyCommitted, commit_staged_keyed, index_of
from sediment.ingest.standard import IngestResult, commit_staged, stage_batches

if TYPE_CHECKING:
    from sediment.handle import TableHandle

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Write:
    """One write of a group: its validated batches, rows, and key (None: unkeyed)."""

    batches: list[pa.RecordBatch]
    rows: int
    key: KeyedWrite | None
    nbytes: int = 0


def _combined(writes: list[Write]) -> Iterator[tuple[str, pa.RecordBatch]]:
    """The writes' batches, in order, joined into few large ones (runs of one schema): the
    commit validates them again against its head, once per batch, and thousands of
    100-row batches made that half a flush's time."""
    run: list[pa.RecordBatch] = []
    for b in (b for w in writes for b in w.batches):
        if run and b.schema != run[0].schema:
            yield from _joined(run)
            run = []
        run.append(b)
    yield from _joined(run)


def _joined(run: list[pa.RecordBatch]) -> Iterator[tuple[str, pa.RecordBatch]]:
    if run:
        for b in pa.Table.from_batches(run).combine_chunks().to_batches():
            yield "writes", b


def commit_writes(table: TableHandle, writes: list[Write], *, upsert: bool = False
                  ) -> list[IngestResult]:
    """Commit ``writes`` (each with rows) as one transaction: one IngestResult per write, in
    order (its rows; the commit's files, bytes and version). A keyed write whose key an
    earlier commit holds is not written again: its result carries that commit's version (and
    no files). Raises what stopped the commit (nothing of it committed, or, for an unknown
    outcome, as the error says)."""
    results: dict[int, IngestResult] = {}
    pending = list(range(len(writes)))
    kind = "upsert" if upsert else "ingest"
    while pending:
        started = time.perf_counter()
        state = table.states.head()
        batch = [writes[i] for i in pending]
        staged = stage_batches(table, state, _combined(batch))
        keys = [w.key for w in batch if w.key is not None]
        if not keys:
            one = commit_staged(table, staged, started, state=state, upsert=upsert, kind=kind)
            for i, w in zip(pending, batch, strict=True):
                results[i] = IngestResult(w.rows, one.files, one.bytes, one.version,
                                          one.seconds, one.stalled_seconds)
            break
        try:
            keyed = commit_staged_keyed(table, staged, keys, state.version, upsert=upsert,
                                        started=started, index=index_of(table, state),
                                        unkeyed=len(keys) < len(batch))
        except PartlyCommitted as e:  # some keys landed already: answer them, commit the rest
            seconds = time.perf_counter() - started
            rest = []
            for i, w in zip(pending, batch, strict=True):
                if w.key is not None and w.key.key in e.found:
                    results[i] = IngestResult(w.rows, 0, 0, e.found[w.key.key], seconds)
                else:
                    rest.append(i)
            pending = rest
            continue
        answers = iter(keyed)  # one per keyed write; the unkeyed ones share the commit
        for i, w in zip(pending, batch, strict=True):
            if w.key is not None:
                results[i] = next(answers)
            else:
                results[i] = IngestResult(w.rows, keyed[0].files, keyed[0].bytes,
                                          keyed[0].version, keyed[0].seconds)
        break
    return [results[i] for i in range(len(writes))]


@dataclass(slots=True)
class _Put:
    write: Write
    upsert: bool
    arrived: float
    future: Future[IngestResult] = field(default_factory=Future)


class GroupCommitter:
    """One table's group commit in this process (see the module): ``submit`` a validated
    write, get a future answered once its group's commit has landed. ``window``: seconds a
    group gathers (called per group: the table's property may change); ``max_bytes``: a
    group is cut there. ``after_commit``: called with the results of each landed group
    before any put is answered (tests kill the process there)."""

    def __init__(self, table: TableHandle, window: Callable[[], float], max_bytes: int,
                 after_commit: Callable[[list[IngestResult]], None] | None = None) -> None:
        self.table = table
        self.window = window
        self.max_bytes = max_bytes
        self.after_commit = after_commit
        self.groups = 0  # groups committed (or failed): for stats and tests
        self.commit_seconds = 0.05
        """What a group commit takes here (a smoothed mean): a busy server's retry hint."""
        self._queue: deque[_Put] = deque()
        self._queued_bytes = 0
        self._cond = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name=f"sediment-group-{table.name}")
        self._thread.start()

    def submit(self, write: Write, *, upsert: bool) -> Future[IngestResult]:
        """Queue ``write`` (validated, with rows) for the next group of its kind."""
        put = _Put(write, upsert, time.monotonic())
        with self._cond:
            if self._closed:
                raise ServerBusyError(f"table {self.table.name}: the server is shutting down")
            self._queue.append(put)
            self._queued_bytes += write.nbytes
            self._cond.notify_all()
        return put.future

    def waiting(self) -> int:
        """Puts queued, not yet in a group that commits."""
        with self._cond:
            return len(self._queue)

    def close(self) -> None:
        """Commit what is queued, then stop the thread."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join()

    def _next_group(self) -> list[_Put] | None:
        with self._cond:
            while not self._queue:
                if self._closed:
                    return None
                self._cond.wait()
            window = self.window()
            while not self._closed and self._queued_bytes < self.max_bytes:
                due = self._queue[0].arrived + window - time.monotonic()
                if due <= 0:
                    break
                self._cond.wait(due)
            first = self._queue[0]
            group: list[_Put] = []
            size = 0
            while self._queue and self._queue[0].upsert == first.upsert and \
                    (not group or size + self._queue[0].write.nbytes <= self.max_bytes):
                put = self._queue.popleft()
                group.append(put)
                size += put.write.nbytes
            self._queued_bytes -= size
            return group

    def _run(self) -> None:
        while (group := self._next_group()) is not None:
            started = time.perf_counter()
            metrics.group_commit(len(group), time.monotonic() - group[0].arrived)
            self._commit(group)
            self.groups += 1
            self.commit_seconds = 0.8 * self.commit_seconds + \
                0.2 * (time.perf_counter() - started)

    def _commit(self, group: list[_Put]) -> None:
        upsert = group[0].upsert
        try:
            results = commit_writes(self.table, [p.write for p in group], upsert=upsert)
        except BaseException as e:  # noqa: BLE001 - each put is answered with it, or retried
            self._failed(group, e)
            return
        self._answer(group, results)

    def _answer(self, group: list[_Put], results: list[IngestResult]) -> None:
        if self.after_commit is not None:
            self.after_commit(results)
        for put, result in zip(group, results, strict=True):
            put.future.set_result(result)

    def _failed(self, group: list[_Put], error: BaseException) -> None:
        """A group's commit failed: retry put by put where that cannot write anything twice,
        else tell each put the error."""
        safe = definitely_not_committed(error) or all(p.write.key is not None for p in group)
        if len(group) == 1 or not safe or not isinstance(error, Exception):
            if len(group) > 1:
                log.warning("group commit of %d puts into table %s failed (%s: %s); each put "
                            "is told", len(group), self.table.name, type(error).__name__,
                            error)
            for put in group:
                put.future.set_exception(error)
            return
        log.warning("group commit of %d puts into table %s failed (%s: %s); committing each "
                    "put on its own", len(group), self.table.name, type(error).__name__, error)
        for put in group:
            try:
                results = commit_writes(self.table, [put.write], upsert=put.upsert)
            except BaseException as e:  # noqa: BLE001 - the put's own answer
                put.future.set_exception(e)
                continue
            self._answer([put], results)
