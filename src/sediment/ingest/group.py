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
joins (bad records fail that put alone), is queued. A group is cut when its oldest put is
``window`` seconds old (``write.group_commit_ms``: the least a group gathers) and at least
``spacing`` seconds have passed since the last cut (``1 / write.group_commit_max_rate``), or
at once when the queue holds ``max_bytes``. The spacing is the adaptive part of the window:
under light load a group is cut ``window`` after its first put; under a load that would
commit more often than the rate, the window grows to the spacing, so each commit carries more
puts and each leaf gets fewer, bigger files (what compaction then merges).

A pipeline of two threads: the stager cuts a group and writes its files (against the head
this process shares: no read of the log on a put's path; the commit validates at the log's
real head) while the committer commits the group cut before it, so a group's file writing
overlaps its predecessor's commit. One staged group waits for the committer at most (a third
gathers meanwhile). Each put's future is answered only once its own group's commit has
landed (or with the error that stopped it).

Order: a group holds puts of one kind, in arrival order: a group is cut where the kind
changes (ingest vs upsert). An AddFiles transaction is an ingest or an upsert as a whole (its
records carry one commit sequence, with or without the upsert bit), so cutting the group
keeps the log format and every order: within a group the later of equal keys is the later in
the staged input (the merge is stable: an upsert's last occurrence wins), and groups commit
one after the other in the order they were cut, which is arrival order: the committer takes
the staged groups first in, first out, and settles each (committed, told its error, or
retried put by put) before it commits the next. A group's records take their sequence from
its commit's version, never from when they were staged, so a group staged while the one
before it commits still orders after it. It costs one more commit at each change of kind.

Failure of a group that is not a put's own: a group whose commit surely wrote nothing
(``definitely_not_committed``: a lost race, an invalid transaction), or whose writes are all
keyed (a retry cannot duplicate them: the log check finds a landed key), is retried put by put,
each put getting its own outcome. Otherwise (a storage error or unknown outcome that may have
committed unkeyed records) each put is told that error: nothing is retried that could be
written twice. A failed group does not hold back the next: groups are independent appends
(each its own transaction over its own files), so the next commits whether or not the one
before it landed; a group that fails while staging commits nothing and is settled the same
way, in its turn.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pyarrow as pa

from sediment import metrics
from sediment.core.head import schema_of
from sediment.core.state import TableState
from sediment.core.transactions import KeyedWrite
from sediment.errors import ServerBusyError, definitely_not_committed
from sediment.ingest.keyed import PartlyCommitted, commit_staged_keyed, index_of
from sediment.ingest.standard import (
    IngestResult,
    StagedFiles,
    commit_staged,
    stage_batches,
    verb_of,
)
from sediment.schema import Schema
from sediment.schema_changes import conformed

if TYPE_CHECKING:
    from sediment.handle import TableHandle

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Write:
    """One write of a group: its validated batches, rows, and key (None: unkeyed);
    ``schema``: the table's schema they were validated against (None: the head's when
    staged)."""

    batches: list[pa.RecordBatch]
    rows: int
    key: KeyedWrite | None
    nbytes: int = 0
    schema: Schema | None = None


def _combined(writes: list[Write], target: Schema) -> Iterator[tuple[str, pa.RecordBatch]]:
    """The writes' batches, in order, joined into few large ones (runs of one schema): the
    commit validates them again against its head, once per batch, and thousands of
    100-row batches made that half a flush's time. A write validated against an earlier
    schema than ``target`` (the table's columns changed while it waited) is reshaped as a
    write prepared before a concurrent change commits: a renamed column keeps its values,
    a widened one is cast, a dropped one is left out, an added one is null."""
    run: list[pa.RecordBatch] = []
    for b in (b for w in writes for b in _as_of(w, target)):
        if run and b.schema != run[0].schema:
            yield from _joined(run)
            run = []
        run.append(b)
    yield from _joined(run)


def _as_of(write: Write, target: Schema) -> list[pa.RecordBatch]:
    """``write``'s batches in the shape of ``target`` (module: :func:`_combined`)."""
    if write.schema is None or write.schema == target:
        return write.batches
    return conformed(pa.Table.from_batches(write.batches), write.schema, target).to_batches()


def _joined(run: list[pa.RecordBatch]) -> Iterator[tuple[str, pa.RecordBatch]]:
    if run:
        for b in pa.Table.from_batches(run).combine_chunks().to_batches():
            yield "the grouped writes", b


@dataclass(slots=True)
class StagedGroup:
    """A group's writes staged as one sorted set of files, not yet committed (the files are
    protected by the staging's lease until :func:`commit_writes` commits or deletes them)."""

    writes: list[Write]
    upsert: bool
    state: TableState
    """The head the files were cut at (its version: what the key check reads the log from)."""
    staged: StagedFiles
    started: float


def stage_writes(table: TableHandle, writes: list[Write], *, upsert: bool = False,
                 state: TableState | None = None) -> StagedGroup:
    """Stage ``writes`` as one sorted set of files cut at the leaves of ``state`` (default:
    the head, read now). A head older than the log's is as good: AddFiles takes a reference
    to any partition (a leaf split since holds it as its children's ancestor), and the
    commit validates at the real head."""
    started = time.perf_counter()
    state = table.states.head() if state is None else state
    if any(w.schema is not None and w.schema != state.schema for w in writes):
        # the writes saw another schema than ``state`` (a cached head): the log's head is
        # at least as new as any head they were validated against
        state = table.states.head()
    staged = stage_batches(table, state, _combined(writes, schema_of(state, table.name)),
                           verb=verb_of(upsert))
    return StagedGroup(writes, upsert, state, staged, started)


def commit_writes(table: TableHandle, writes: list[Write], *, upsert: bool = False,
                  staged: StagedGroup | None = None) -> list[IngestResult]:
    """Commit ``writes`` (each with rows) as one transaction: one IngestResult per write, in
    order (its rows; the commit's files, bytes and version). ``staged``: the writes already
    staged (:func:`stage_writes`; else they are staged here). A keyed write whose key an
    earlier commit holds is not written again: its result carries that commit's version (and
    no files). Raises what stopped the commit (nothing of it committed, or, for an unknown
    outcome, as the error says)."""
    group = stage_writes(table, writes, upsert=upsert) if staged is None else staged
    results: dict[int, IngestResult] = {}
    pending = list(range(len(writes)))
    while True:
        try:
            answers = _commit_group(table, group)
        except PartlyCommitted as e:  # some keys landed already: answer them, commit the rest
            seconds = time.perf_counter() - group.started
            rest = []
            for i in pending:
                w = writes[i]
                if w.key is not None and w.key.key in e.found:
                    results[i] = IngestResult(w.rows, 0, 0, e.found[w.key.key], seconds,
                                              replayed=True)
                else:
                    rest.append(i)
            pending = rest
            if not pending:
                break
            group = stage_writes(table, [writes[i] for i in pending], upsert=upsert)
            continue
        results.update(zip(pending, answers, strict=True))
        break
    return [results[i] for i in range(len(writes))]


def _commit_group(table: TableHandle, group: StagedGroup) -> list[IngestResult]:
    """Commit a staged group once: one result per write (PartlyCommitted: some keys had
    landed before, nothing committed)."""
    batch, staged, state = group.writes, group.staged, group.state
    keys = [w.key for w in batch if w.key is not None]
    if not keys:
        one = commit_staged(table, staged, group.started, state=state, upsert=group.upsert,
                            kind="upsert" if group.upsert else "ingest")
        return [IngestResult(w.rows, one.files, one.bytes, one.version, one.seconds,
                             one.stalled_seconds) for w in batch]
    keyed = commit_staged_keyed(table, staged, keys, state.version, upsert=group.upsert,
                                started=group.started, index=index_of(table, state),
                                unkeyed=len(keys) < len(batch))
    answers = iter(keyed)  # one per keyed write; the unkeyed ones share the commit
    return [next(answers) if w.key is not None else
            IngestResult(w.rows, keyed[0].files, keyed[0].bytes, keyed[0].version,
                         keyed[0].seconds) for w in batch]


@dataclass(slots=True)
class GroupTimings:
    """Where a table's puts spent their time in group commit (seconds, totals; the
    committer's threads add to them, the server's stats read them): what to look at when
    puts are slow. Per put, ``waited`` (queued until its group was cut) plus the time from
    the cut to its answer (``answered_after_cut``) is its time in the committer; per group,
    ``staging`` (cut to files written) and ``committing`` (the committer's time on it,
    from taking it to its answers, after the commit's retries)."""

    puts: int = 0
    waited: float = 0.0
    answered_after_cut: float = 0.0
    staging: float = 0.0
    committing: float = 0.0

    def cut(self, at: float, group: list[_Put]) -> None:
        for p in group:
            p.cut = at
            self.waited += at - p.arrived

    def answered(self, at: float, group: list[_Put]) -> None:
        """``group``'s puts were answered (with their results) at ``at``."""
        for p in group:
            if p.cut is not None:
                self.puts += 1
                self.answered_after_cut += at - p.cut

    def as_dict(self) -> dict[str, float]:
        return {"puts": self.puts, "waited": round(self.waited, 3),
                "answered_after_cut": round(self.answered_after_cut, 3),
                "staging": round(self.staging, 3), "committing": round(self.committing, 3)}


@dataclass(slots=True)
class _Put:
    write: Write
    upsert: bool
    arrived: float
    future: Future[IngestResult] = field(default_factory=Future)
    cut: float | None = None
    """When its group was cut (monotonic seconds)."""


class GroupCommitter:
    """One table's group commit in this process (see the module): ``submit`` a validated
    write, get a future answered once its group's commit has landed.

    ``window``: seconds a group gathers at least, from its first put; ``spacing``: seconds
    at least between two groups' cuts (``1 / write.group_commit_max_rate``): under a load
    that would commit more often, the window grows to it, so each commit carries more (both
    called per group: the table's properties may change); ``max_bytes``: a group is cut
    there whatever the window. ``after_commit``: called with the results of each landed
    group before any put is answered (tests kill the process there).

    Two threads, a pipeline: the stager cuts a group and writes its files while the
    committer commits the group before it; groups commit one at a time in the order they
    were cut, and a group's failure is handled (told, or retried put by put) before the next
    group commits."""

    def __init__(self, table: TableHandle, window: Callable[[], float], max_bytes: int,
                 after_commit: Callable[[list[IngestResult]], None] | None = None, *,
                 spacing: Callable[[], float] = lambda: 0.0) -> None:
        self.table = table
        self.window = window
        self.spacing = spacing
        self.max_bytes = max_bytes
        self.after_commit = after_commit
        self.groups = 0  # groups committed (or failed): for stats and tests
        self.timings = GroupTimings()
        """Where the groups' time went (totals): for stats and benchmarks."""
        self.commit_seconds = 0.05
        """What a group takes here from its cut to its answers (a smoothed mean): a busy
        server's retry hint."""
        self._queue: deque[_Put] = deque()
        self._queued_bytes = 0
        self._last_cut = -float("inf")
        self._cond = threading.Condition()
        self._closed = False
        # one staged group waits for the committer at most: a third is gathered meanwhile
        self._staged: queue.Queue[tuple[list[_Put], StagedGroup | BaseException] | None] = \
            queue.Queue(maxsize=1)
        self._stager = threading.Thread(target=self._run_stager, daemon=True,
                                        name=f"sediment-group-{table.name}")
        self._committer = threading.Thread(target=self._run_committer, daemon=True,
                                           name=f"sediment-group-commit-{table.name}")
        self._stager.start()
        self._committer.start()

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
        """Commit what is queued, then stop the threads."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._stager.join()
        self._committer.join()

    def _next_group(self) -> list[_Put] | None:
        with self._cond:
            while not self._queue:
                if self._closed:
                    return None
                self._cond.wait()
            window, spacing = self.window(), self.spacing()
            while not self._closed and self._queued_bytes < self.max_bytes:
                due = max(self._queue[0].arrived + window, self._last_cut + spacing) - \
                    time.monotonic()
                if due <= 0:
                    break
                self._cond.wait(due)
            self._last_cut = time.monotonic()
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

    def _run_stager(self) -> None:
        """Cut groups and stage them (against the head this process shares: no read of the
        log on the way; the commit validates at the real head), one ahead of the committer."""
        try:
            while (group := self._next_group()) is not None:
                cut = time.monotonic()
                metrics.group_commit(len(group), cut - group[0].arrived)
                self.timings.cut(cut, group)
                staged: StagedGroup | BaseException
                try:
                    staged = stage_writes(self.table, [p.write for p in group],
                                          upsert=group[0].upsert,
                                          state=self.table.states.cached_head())
                except BaseException as e:  # noqa: BLE001 - the committer answers it in turn
                    staged = e
                self.timings.staging += time.monotonic() - cut
                self._staged.put((group, staged))
        finally:
            self._staged.put(None)

    def _run_committer(self) -> None:
        while (item := self._staged.get()) is not None:
            group, staged = item
            began = time.perf_counter()
            taken = time.monotonic()
            if isinstance(staged, BaseException):
                self._failed(group, staged)  # nothing was committed: as a failed commit
            else:
                began = staged.started
                self._commit(group, staged)
            self.timings.committing += time.monotonic() - taken
            self.groups += 1
            self.commit_seconds = 0.8 * self.commit_seconds + \
                0.2 * (time.perf_counter() - began)

    def _commit(self, group: list[_Put], staged: StagedGroup) -> None:
        # the commit's status event is written once the puts are answered: off their path
        with self.table.status.deferred():
            try:
                results = commit_writes(self.table, [p.write for p in group],
                                        upsert=staged.upsert, staged=staged)
            except BaseException as e:  # noqa: BLE001 - each put is answered with it, or retried
                self._failed(group, e)
                return
            self._answer(group, results)

    def _answer(self, group: list[_Put], results: list[IngestResult]) -> None:
        if self.after_commit is not None:
            self.after_commit(results)
        answered = time.monotonic()
        for put, result in zip(group, results, strict=True):
            put.future.set_result(result)
        self.timings.answered(answered, group)

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
