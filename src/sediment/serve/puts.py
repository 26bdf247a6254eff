"""Puts through group commit: what ``do_put`` does with a put's stream when group commit is on.

A put's batches are read and validated against the table's schema as they arrive (bad
records fail that put alone, before it joins a group), hashed when it carries an
idempotency key, and held in memory under the server's bound (:class:`MemoryBudget`,
``--group-commit-max-bytes``: past it the put is refused with ServerBusyError and a
retry-after hint, never queued). The whole put then joins its table's
:class:`~sediment.ingest.group.GroupCommitter` (one per table in this process) and waits
for the group's commit: it is answered only once that commit has landed.

A keyed put whose key the table already recorded for the same records is answered at once
with the original result (nothing written); the keys of a group's puts go into the group's
one commit (exactly once: :func:`~sediment.ingest.group.commit_writes`).

A put larger than a group (a quarter of the bound) is not held: it streams into an ingest of
its own (``stream``), in the memory that ingest bounds, as every put did before group commit.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa

from sediment.compaction.strategy import files_after_jobs
from sediment.core.crowding import files_per_leaf
from sediment.core.head import schema_of
from sediment.core.state import TableState
from sediment.core.transactions import KeyedWrite
from sediment.errors import ServerBusyError
from sediment.handle import handle_of
from sediment.ingest.group import GroupCommitter, Write
from sediment.ingest.idempotency import PayloadHash, check_key
from sediment.ingest.keyed import _answer, index_of
from sediment.ingest.sources import conform
from sediment.ingest.standard import IngestResult, verb_of
from sediment.settings import settings_of
from sediment.table import Table

GROUP_COMMIT_MS = 20.0
"""The server's default window (``serve --group-commit-ms``): a few tens of milliseconds, a
fraction of one commit's time on S3 (50-100 ms), so a put waits little more than it did."""
GROUP_COMMIT_MAX_BYTES = 256 << 20
"""The server's default bound on put bytes held for group commits (all tables)."""
PROPERTY = "write.group_commit_ms"
CROWDED_STRETCH = 4.0
"""The most the spacing between groups stretches while compaction falls behind (see
:func:`crowding_stretch`): 4 x 1/8 s, half a second at the default rate, keeps a
put's wait within the acknowledgement goal (1 s) when no maintainer runs at all."""


def crowding_stretch(state: TableState, batch: int) -> float:
    """The factor (1 to ``CROWDED_STRETCH``) the spacing between groups stretches by while
    compaction falls behind in a leaf of ``state``, the larger of two measures:

    - **behind**: the files a read of the leaf will merge once its running compaction jobs
      land (each job's inputs counted as the one file it leaves, as the planner counts
      them: ``files_after_jobs``) past half of ``batch`` (what the maintainer brings a
      crowded leaf back to), rising linearly to the most at ``batch``: the maintainer has
      not (yet) planned the work that excess needs;
    - **near the bound**: the files a read merges now, counting a running job's inputs
      one by one, past two thirds of ``batch``, rising to the most at ``batch``: a job
      that is slow to land, with new files arriving, is braked before the leaf passes it.
      (A job landing within ~1.2 s of its leaf going past half a batch keeps the leaf
      within ``batch`` at the default rate: 1.56 s when every file counted from half a
      batch on, 1.0 s with this measure from three quarters.)

    Files a running job is about to merge away slow the puts down less until the leaf
    nears the bound (a leaf the maintainer keeps at half a batch holds 7-9 files while a
    job runs: stretched 1-1.75 times, where every file counted stretched it 1.5-2.5
    times)."""
    calm = batch // 2
    near = batch - max(1, batch // 3)
    now = files_per_leaf(state)  # one walk, from the totals: no reference decoded
    raw = max(now.values(), default=0)
    behind = 0
    for leaf_id, files in now.items():
        if files > max(calm, behind):  # (a leaf's count after its jobs is at most its count)
            refs = state.references(leaf_id)  # decoded for crowded leaves only
            behind = max(behind, files - len(refs) + files_after_jobs(refs.values()))
    over = max((behind - calm) / max(1, batch - calm), (raw - near) / max(1, batch - near))
    return 1 + (CROWDED_STRETCH - 1) * min(1.0, max(0.0, over))


class MemoryBudget:
    """Bytes of puts held in memory while they wait for their group commits, bounded: a
    reservation past ``limit`` is refused with ServerBusyError, never queued. Shared by every
    table of a server."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0
        self._lock = threading.Lock()

    def reserve(self, nbytes: int, what: str, hint: float) -> None:
        """Hold ``nbytes`` more, or raise ServerBusyError naming ``what`` with ``hint`` (seconds
        to wait) as its retry-after."""
        with self._lock:
            if self.held + nbytes <= self.limit:
                self.held += nbytes
                return
            held = self.held
        hint = round(min(5.0, max(0.05, hint)), 3)
        raise ServerBusyError(
            f"server busy: {what} would take the put bytes waiting for group commits past "
            f"{self.limit} ({held} held; --group-commit-max-bytes): retry after {hint} s",
            retry_after=hint)

    def release(self, nbytes: int) -> None:
        with self._lock:
            self.held -= nbytes


class GroupedPuts:
    """A server's group commit: one committer per table, one memory bound for all."""

    after_commit: Callable[[list[IngestResult]], None] | None = None
    """Called in each committer once a group's commit has landed, before its puts are
    answered (a crash test kills the server there)."""

    def __init__(self, window_ms: float = GROUP_COMMIT_MS,
                 max_bytes: int = GROUP_COMMIT_MAX_BYTES) -> None:
        self.window_ms = window_ms
        self.budget = MemoryBudget(max_bytes)
        self.group_bytes = max(1, max_bytes // 4)
        self._committers: dict[str, GroupCommitter] = {}
        self._lock = threading.Lock()

    def window_of(self, state: TableState) -> float:
        """Seconds a group of this table gathers: its ``write.group_commit_ms`` when set,
        else the server's; 0: off."""
        if PROPERTY in state.properties:
            return float(settings_of(state).write_group_commit_ms) / 1000
        return self.window_ms / 1000

    @staticmethod
    def spacing_of(state: TableState) -> float:
        """Seconds at least between two groups' cuts in this table: 1 /
        ``write.group_commit_max_rate`` (0: no limit), stretched while compaction falls
        behind (see :func:`crowding_stretch`; fewer, bigger files while the maintainer
        catches up; no put is refused or held longer than the stretched spacing for it)."""
        settings = settings_of(state)
        rate = float(settings.write_group_commit_max_rate)
        if rate <= 0:
            return 0.0
        return crowding_stretch(state, settings.compaction_batch_size) / rate

    def committer(self, table: Table) -> GroupCommitter:
        handle = handle_of(table)
        with self._lock:
            found = self._committers.get(table.table_id)
            if found is None:
                found = GroupCommitter(handle,
                                       lambda: self.window_of(handle.states.cached_head()),
                                       self.group_bytes, after_commit=type(self).after_commit,
                                       spacing=lambda: self.spacing_of(
                                           handle.states.cached_head()))
                self._committers[table.table_id] = found
            return found

    def groups(self) -> int:
        """Groups committed so far (all tables)."""
        with self._lock:
            return sum(c.groups for c in self._committers.values())

    def waiting(self) -> int:
        """Puts queued for their group, not yet committing (all tables):
        ``sediment_queue_depth{queue="group_commit"}``."""
        with self._lock:
            committers = list(self._committers.values())
        return sum(c.waiting() for c in committers)

    def put(self, table: Table, state: TableState, batches: Iterator[pa.RecordBatch], *,
            upsert: bool, key: str | None,
            stream: Callable[[Iterator[pa.RecordBatch]], IngestResult]) -> IngestResult:
        """Read, validate and hold ``batches``, then commit them in the table's next group
        (see the module); ``state``: the head the put is validated against; ``stream``:
        the ingest of a put too large to hold."""
        started = time.perf_counter()
        name = table.name
        schema = schema_of(state, name)
        hasher = PayloadHash("upsert" if upsert else "ingest") if key is not None else None
        if key is not None:
            check_key(name, key)
        held: list[pa.RecordBatch] = []
        rows = nbytes = offset = 0
        hint = 2 * max(self.window_ms / 1000, self.committer(table).commit_seconds)
        try:
            for b in batches:
                checked = conform(b, schema, name, offset, verb=verb_of(upsert))
                offset += b.num_rows
                if not checked.num_rows:
                    continue
                size = checked.nbytes
                if nbytes + size > self.group_bytes:  # larger than a group: streamed alone
                    self.budget.release(nbytes)
                    nbytes = 0
                    return stream(itertools.chain(held, [checked], batches))
                self.budget.reserve(size, f"a put into table {name}", hint)
                nbytes += size
                rows += checked.num_rows
                held.append(checked)
                if hasher is not None:
                    hasher.update(b)
            if rows == 0:  # nothing to commit (as an ingest of nothing)
                return IngestResult(0, 0, 0, state.version, time.perf_counter() - started)
            keyed = None
            if key is not None and hasher is not None:
                keyed = KeyedWrite(key, hasher.hexdigest(), rows)
                record = index_of(handle_of(table), state).get(key)
                if record is not None:
                    record.check(name, keyed.payload)  # IdempotencyKeyReusedError
                    if record.version is not None:  # a retry of a committed put
                        return _answer(record, started)
            future = self.committer(table).submit(Write(held, rows, keyed, nbytes, schema),
                                                  upsert=upsert)
            return future.result()
        finally:
            self.budget.release(nbytes)

    def close(self) -> None:
        """Commit what is queued and stop every committer (the server is shutting down)."""
        with self._lock:
            committers = list(self._committers.values())
            self._committers.clear()
        for c in committers:
            c.close()

    def stats(self) -> dict[str, Any]:
        """Groups so far, bytes held, the server's window and bound, and ``seconds``: where
        the puts' time went, per table (:class:`~sediment.ingest.group.GroupTimings`)."""
        with self._lock:
            committers = list(self._committers.values())
        return {"groups": self.groups(), "held_bytes": self.budget.held,
                "window_ms": self.window_ms, "max_bytes": self.budget.limit,
                "seconds": {c.table.name: c.timings.as_dict() for c in committers}}
