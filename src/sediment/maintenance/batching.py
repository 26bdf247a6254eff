"""The ingest batcher inside the continuous maintainer (``maintain --loop --batcher-threads N``).

Files submitted with ``sediment batcher submit`` (or ``sediment.ingest.batcher.submit``) are
ingested with no other command: the maintainer hands this lane the online tables it maintains
(:meth:`BatcherLane.hold`, every tick), and the lane asks each what its batcher has due
(``batcher.due``: abandoned jobs settled, full or old groups planned) and runs those jobs on its
``N`` batcher threads, several at once across tables and within one. A table is looked at
again only once its previous jobs have ended, so one maintainer never plans the same requests
twice; two maintainers over one table (no lease, or a lease taken over) are still safe, because
a job claims each request with put-if-absent and commits through the batcher's decision object
(``sediment.ingest.batcher``).

Why its own threads: an ingest job reads, sorts and writes whole input files (seconds each);
on the compaction threads it would hold back the merges that keep the files per leaf down, and
compaction's queue would hold back ingest past ``batcher.max_age_seconds``.

Why its own clock: a look every ``CHECK_SECONDS`` from the maintainer's tick started a group's
job up to a period after the group came of age, later still when a tick was slow (it reads and
plans every table) or waited behind the merges' wake-ups: measured in
benchmarks/steady_state.py ``--maintainers 2`` under merges on both cores, submit to visible
median 2.1 s, max 3.5 s with ``batcher.max_age_seconds`` 1. Here a thread of the lane keeps
each table's next look: ``CHECK_SECONDS`` after the last one (for new requests), or the moment
its waiting group comes of age (``DueBatches.next_due``), whichever is first, or as soon as its
jobs end when they outlast that. Measured since (the same run, traced): a group's job starts
within 0.05 s of its coming of age; the job itself (its records, claims and pins, some 30
fsyncs on local disk, and the ingest) takes 0.03-0.1 s on a quiet machine, 0.2-0.6 s when
other processes load both cores.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sediment.ingest import batcher
from sediment.ingest.batcher_recovery import JobOutcome

if TYPE_CHECKING:
    from sediment.handle import TableHandle

CHECK_SECONDS = 0.5
"""How often a busy table's batcher queue is looked at for new requests (listings of its
requests, claims and jobs): a request is known to the lane at most this long after its submit,
so a group whose ``batcher.max_age_seconds`` is longer starts the moment it comes of age."""

IDLE_CHECK_MAX_SECONDS = 30.0
"""The longest wait between two looks at an idle queue. A look that finds nothing (no request
waiting, no job due) doubles the table's wait, up to this and to half its
``batcher.max_age_seconds`` (a request seen then is still planned before it comes of age);
a look that finds work goes back to ``CHECK_SECONDS``. Looks cost listings (requests on S3):
an idle table's queue is listed a few times a minute, not six times a second."""


@dataclass(slots=True)
class BatcherActivity:
    """What the batcher lane did to one table since the last report."""

    committed: int = 0
    failed: int = 0
    recovered: int = 0
    errors: list[str] = field(default_factory=list)


def _warm_up() -> None:
    """Import what a process's first ingest job would otherwise import on a request's time:
    pandas, which pyarrow loads on its first ``pa.array`` of a NumPy array (the ingest's sort
    makes one), some 0.3 s of CPU; measured in a maintainer under merges on both cores, the
    lane's first job took 2.5-3.2 s (0.33 s of CPU in its thread), the next ones 0.2-0.6 s
    (0.02-0.03 s of CPU)."""
    with contextlib.suppress(ImportError):
        import pandas  # noqa: F401


def next_wait(wait: float, d: batcher.DueBatches) -> float:
    """The wait before a table's next look, after a look at it that found ``d`` (see
    :data:`IDLE_CHECK_MAX_SECONDS`)."""
    if d.batches or d.waiting or d.recovered:
        return CHECK_SECONDS
    return max(CHECK_SECONDS, min(wait * 2, IDLE_CHECK_MAX_SECONDS, d.max_age / 2))


class BatcherLane:
    """Runs batcher jobs on ``threads`` threads for the tables a maintainer hands it.

    ``note(table, error)`` reports an error in the maintainer's next row for the table;
    ``on_end`` is called when a job ends (the maintainer's loop wakes to look again);
    ``spark``: a session, to which big groups go as bulk imports (else all is ingested here)."""

    def __init__(self, threads: int, *, note: Callable[[str, str], None],
                 on_end: Callable[[], None] = lambda: None, spark: Any = None) -> None:
        self.threads = threads
        self.spark = spark
        """A Spark session: groups of ``batcher.bulk_import_min_bytes`` go to bulk import."""
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="sediment-batcher")
        self._note = note
        self._on_end = on_end
        # reentrant: a future done before its callback is added calls it on the spot
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        """Notified when a table is handed over or its planning or job ends, and on close."""
        self._busy: dict[str, list[Future[object]]] = {}
        """Table -> its planning or jobs under way (none: it may be looked at again)."""
        self._held: dict[str, TableHandle] = {}
        self._next: dict[str, float] = {}
        """Table -> when (``time.monotonic()``) it is next looked at."""
        self._every: dict[str, float] = {}
        """Table -> the wait between its looks (``CHECK_SECONDS`` while it has work)."""
        self._closing = False
        self._activity: dict[str, BatcherActivity] = {}
        self._clock = threading.Thread(target=self._run, name="sediment-batcher-clock",
                                       daemon=True)
        self._clock.start()
        threading.Thread(target=_warm_up, name="sediment-batcher-warm-up", daemon=True).start()

    def busy(self, name: str) -> bool:
        """True while a planning or job of ``name`` is under way."""
        with self._lock:
            return self._busy_locked(name)

    def _busy_locked(self, name: str) -> bool:
        return any(not f.done() for f in self._busy.get(name, []))

    def hold(self, tables: Sequence[TableHandle]) -> None:
        """Look at ``tables`` from now on, and at no other (a table handed over for the
        first time is looked at at once)."""
        with self._lock:
            self._held = {t.name: t for t in tables}
            for name in self._held.keys() - self._next.keys():
                self._next[name] = float("-inf")
            for name in self._next.keys() - self._held.keys():
                del self._next[name]
                self._every.pop(name, None)
            self._changed.notify_all()

    def _run(self) -> None:
        """The lane's clock: start each held table's look when it is due and nothing of the
        table is under way; sleep until the next one is due or something changes."""
        with self._lock:
            while not self._closing:
                now = time.monotonic()
                wake = now + CHECK_SECONDS
                for name, t in self._held.items():
                    if self._busy_locked(name):
                        continue  # looked at when its jobs end (they notify)
                    at = self._next.get(name, float("-inf"))
                    if at > now:
                        wake = min(wake, at)
                        continue
                    self._next[name] = now + self._every.get(name, CHECK_SECONDS)
                    self._busy[name] = []
                    try:
                        self._submit(name, self._plan, t)
                    except RuntimeError:  # closing
                        return
                self._changed.wait(max(0.0, wake - time.monotonic()))

    def _plan(self, table: TableHandle) -> None:
        """On a batcher thread: settle abandoned jobs, plan what is due and queue its jobs
        (they run on the other threads while this one is free for the next table)."""
        try:
            d = batcher.due(table, spark_available=self.spark is not None)
        except Exception as e:  # noqa: BLE001 - reported; looked at again next time
            self._note(table.name, f"batcher: {type(e).__name__}: {e}")
            return
        act = self._act(table.name)
        with self._lock:
            self._every[table.name] = next_wait(self._every.get(table.name, CHECK_SECONDS), d)
            if d.next_due is not None and table.name in self._next:
                # the moment the waiting group comes of age, if before the next look
                self._next[table.name] = min(self._next[table.name], time.monotonic() +
                                             max(0.0, d.next_due - time.time()))
            act.recovered += sum(o.state != "unsettled" for o in d.recovered)
            act.errors.extend(f"batcher: {o.error}" for o in d.recovered
                              if o.state == "unsettled" and o.error)
            for b, route in d.batches:
                try:
                    self._submit(table.name, self._job, table, b, route)
                except RuntimeError:  # closing: the requests stay queued for the next run
                    return

    def _submit(self, name: str, fn: Callable[..., object], *args: Any) -> None:
        """Run ``fn`` on a batcher thread as work of table ``name``; its end wakes the clock
        (once the future is done, so the clock sees the table free)."""
        fut = self._pool.submit(fn, *args)
        self._busy.setdefault(name, []).append(fut)
        fut.add_done_callback(self._poke)

    def _poke(self, _: object = None) -> None:
        with self._lock:
            self._changed.notify_all()

    def _job(self, table: TableHandle, b: batcher.Batch, route: str) -> object:
        try:
            o: JobOutcome = batcher.run_batch(table, b, route, self.spark)
        except Exception as e:  # noqa: BLE001 - a daemon: the requests stay claimed and
            # the job recorded; recovery settles it once it times out
            self._note(table.name, f"batcher: {type(e).__name__}: {e}")
            self._on_end()
            return None
        act = self._act(table.name)
        with self._lock:
            if o.state == "committed":
                act.committed += 1
            elif o.state != "empty":
                act.failed += 1
                if o.error:
                    act.errors.append(f"batcher: {o.error}")
        self._on_end()
        return o

    def _act(self, name: str) -> BatcherActivity:
        with self._lock:
            return self._activity.setdefault(name, BatcherActivity())

    def report(self) -> dict[str, BatcherActivity]:
        """What happened per table since the last report (then reset)."""
        with self._lock:
            out, self._activity = self._activity, {}
            return out

    def running(self) -> dict[str, int]:
        """Table -> its batcher futures not done (planning and jobs)."""
        with self._lock:
            return {n: k for n, fs in self._busy.items()
                    if (k := sum(not f.done() for f in fs))}

    def pending(self) -> list[Future[object]]:
        with self._lock:
            return [f for fs in self._busy.values() for f in fs if not f.done()]

    def close(self) -> None:
        """Wait for the jobs under way: each commits or is given up on its own (a queued job
        that never started leaves nothing claimed)."""
        with self._lock:
            self._closing = True
            self._changed.notify_all()
        self._clock.join()
        self._pool.shutdown(wait=True, cancel_futures=True)
