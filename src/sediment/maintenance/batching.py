"""The ingest batcher inside the continuous maintainer (``maintain --loop --batcher-threads N``).

Files submitted with ``sediment batcher submit`` (or ``sediment.ingest.batcher.submit``) are
ingested with no other command: every ``CHECK_SECONDS`` the maintainer asks each table it
maintains what its batcher has due (``batcher.due``: abandoned jobs settled, full or old
groups planned) and runs those jobs on its ``N`` batcher threads, several at once across
tables and within one. A table is looked at again only once its previous jobs have ended, so
one maintainer never plans the same requests twice; two maintainers over one table (no lease,
or a lease taken over) are still safe, because a job claims each request with put-if-absent
and commits through the batcher's decision object (``sediment.ingest.batcher``).

Why its own threads: an ingest job reads, sorts and writes whole input files (seconds each);
on the compaction threads it would hold back the merges that keep the files per leaf down, and
compaction's queue would hold back ingest past ``batcher.max_age_seconds``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sediment.ingest import batcher
from sediment.ingest.batcher_recovery import JobOutcome

if TYPE_CHECKING:
    from sediment.handle import TableHandle

CHECK_SECONDS = 0.5
"""How often a table's batcher queue is looked at (a listing of its requests and jobs): a
submitted file waits at most ``batcher.max_age_seconds`` plus this before its job starts."""


@dataclass(slots=True)
class BatcherActivity:
    """What the batcher lane did to one table since the last report."""

    committed: int = 0
    failed: int = 0
    recovered: int = 0
    errors: list[str] = field(default_factory=list)


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
        self._lock = threading.Lock()
        self._busy: dict[str, list[Future[object]]] = {}
        """Table -> its planning or jobs under way (none: it may be looked at again)."""
        self._checked: dict[str, float] = {}
        self._activity: dict[str, BatcherActivity] = {}

    def busy(self, name: str) -> bool:
        """True while a planning or job of ``name`` is under way."""
        with self._lock:
            futures = self._busy.get(name, [])
            return any(not f.done() for f in futures)

    def tick(self, table: TableHandle, now: float) -> bool:
        """Look at ``table``'s queue if it is due a look and nothing of it is under way;
        True when a look was started."""
        if now - self._checked.get(table.name, float("-inf")) < CHECK_SECONDS or \
                self.busy(table.name):
            return False
        self._checked[table.name] = now
        fut: Future[object] = self._pool.submit(self._plan, table)
        with self._lock:
            self._busy[table.name] = [fut]
        return True

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
            act.recovered += sum(o.state != "unsettled" for o in d.recovered)
            act.errors.extend(f"batcher: {o.error}" for o in d.recovered
                              if o.state == "unsettled" and o.error)
            try:
                jobs: list[Future[object]] = [self._pool.submit(self._job, table, b, route)
                                              for b, route in d.batches]
            except RuntimeError:  # closing: the requests stay queued for the next run
                return
            self._busy.setdefault(table.name, []).extend(jobs)

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
        self._pool.shutdown(wait=True, cancel_futures=True)
