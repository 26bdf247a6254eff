"""Job and task events, one small JSON object each under the table's ``status/`` folder.

Events are written with plain puts under unique names (no coordination needed) and read back
for reports. A job's life is its events: created, started, finished, committed or failed (with
the reason), each carrying what is known then (rows and bytes in/out, seconds, rate).

Events are kept one by one for ``status.retention.seconds``; :meth:`StatusStore.expire` (run by
the maintainer) rolls older ones up into one totals object per kind of job and deletes them, so
a report reads a bounded number of objects however long the table runs. A rollup is written
under a fresh name (``status/rollup/<kind>/<until>.json``) holding the previous rollup's
totals plus the events after its ``until`` and up to its own, so two maintainers rolling up
at once never count an event twice: the newest rollup is the one read, the older ones are
deleted after it.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

from sediment.errors import CorruptMetadataError, SedimentError
from sediment.state.documents import read_sealed, sealed
from sediment.storage.base import ObjectStore
from sediment.storage.checksums import ChecksumMismatch

log = logging.getLogger(__name__)

STATUS_PREFIX = "status/"
ROLLUP_PREFIX = f"{STATUS_PREFIX}rollup/"
KINDS = ("compaction", "split", "gc", "ingest", "bulk_import", "dump")


def _event_key(kind: str, at: float) -> str:
    """The key prefix of events of ``kind`` at time ``at`` (names sort by time)."""
    return f"{STATUS_PREFIX}{kind}/{at:017.6f}"


@dataclass(frozen=True, slots=True)
class Rollup:
    """The totals of the events of one ``kind`` up to ``until`` (seconds since the epoch) that
    expiry deleted: per status, how many (``counts``) and the sums of their numeric details
    (``sums``: rows, bytes, seconds)."""

    kind: str
    until: float
    counts: dict[str, int] = field(default_factory=dict)
    sums: dict[str, dict[str, float]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def plus(self, events: list[Event], until: float) -> Rollup:
        """These totals with ``events`` (those after ``self.until``) added, up to ``until``."""
        counts = dict(self.counts)
        sums = {k: dict(v) for k, v in self.sums.items()}
        for ev in events:
            if ev.time <= self.until:
                continue  # counted by the rollup this one follows
            counts[ev.status] = counts.get(ev.status, 0) + 1
            into = sums.setdefault(ev.status, {})
            for k, v in ev.details.items():
                if isinstance(v, int | float) and not isinstance(v, bool):
                    into[k] = into.get(k, 0) + v
        return Rollup(self.kind, max(until, self.until), counts, sums)


@dataclass(frozen=True, slots=True)
class ExpiryResult:
    """What one :meth:`StatusStore.expire` did: events rolled up and deleted, and older
    rollups deleted."""

    events: int = 0
    rollups: int = 0


@dataclass(frozen=True, slots=True)
class Event:
    """One event of a job: ``kind`` of job, its ``job_id``, what happened (``status``)."""

    kind: str
    job_id: str
    status: str
    time: float = field(default_factory=time.time)
    partition_id: str | None = None
    details: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class StatusStore:
    """Writes and reads the events of one table."""

    def __init__(self, objects: ObjectStore) -> None:
        self.objects = objects
        self._held = threading.local()
        """Per thread: the events recorded inside :meth:`deferred`, not yet written."""

    def record(self, kind: str, job_id: str, status: str, *, partition_id: str | None = None,
               **details: Any) -> Event:
        """Record an event; a failure to record is never fatal to the job itself. Inside
        :meth:`deferred` on this thread, the event is written when that block ends."""
        ev = Event(kind, job_id, status, time.time(), partition_id, details)
        held: list[Event] | None = getattr(self._held, "events", None)
        if held is not None:
            held.append(ev)
        else:
            self._write(ev)
        return ev

    def _write(self, ev: Event) -> None:
        key = f"{STATUS_PREFIX}{ev.kind}/{ev.time:017.6f}-{uuid.uuid4().hex[:8]}.json"
        try:
            self.objects.put_report(key, sealed(ev.to_json(), default=str))
        except SedimentError:
            pass

    @contextlib.contextmanager
    def deferred(self) -> Iterator[None]:
        """Hold the events this thread records in the block and write them as it ends
        (however it ends), each under its own time: for a writer that answers its callers
        inside the block (the server's group commit acknowledges its puts once the commit
        lands), so that the event's write (a PUT on S3, 15-25 ms under load) is not on
        their path. An event is a report, never part of what the write guarantees."""
        if getattr(self._held, "events", None) is not None:  # nested: the outer block writes
            yield
            return
        held: list[Event] = []
        self._held.events = held
        try:
            yield
        finally:
            self._held.events = None
            for ev in held:
                self._write(ev)

    def events(self, kind: str | None = None, *, since: float | None = None,
               keys: list[str] | None = None) -> Iterator[Event]:
        """Events in time order (of one kind, or all; ``keys``: those objects of ``kind``
        only, as listed by the caller). An event
        that cannot be read is left out (a report is never refused for one); one that fails
        its checksum even when read again is left out with a warning naming it."""
        kinds = [kind] if kind else list(KINDS)
        out: list[Event] = []
        for k in kinds:
            start = None if since is None else _event_key(k, since)
            listed = keys if keys is not None else \
                [o.key for o in self.objects.list(f"{STATUS_PREFIX}{k}/", start_after=start)]
            for key in listed:
                try:
                    doc = read_sealed(self.objects, key,
                                      f"status event {key} in {self.objects.uri}")
                    out.append(Event(doc["kind"], doc["job_id"], doc["status"],
                                     float(doc["time"]), doc.get("partition_id"),
                                     doc.get("details") or {}))
                except CorruptMetadataError as e:
                    if isinstance(e.__cause__, ChecksumMismatch):
                        log.warning("%s: the event is left out", e)
                    continue  # an unreadable event is skipped, not fatal to a report
                except (SedimentError, ValueError, KeyError, TypeError):
                    continue
        out.sort(key=lambda e: e.time)
        return iter(out)

    # ---- expiry ------------------------------------------------------------------------------
    def rollup(self, kind: str) -> Rollup:
        """The newest totals of ``kind``'s expired events (empty when none expired)."""
        return self._newest_rollup(kind)[0]

    def _newest_rollup(self, kind: str) -> tuple[Rollup, list[str]]:
        """The newest readable rollup of ``kind`` and the keys of every rollup listed."""
        keys = sorted(o.key for o in self.objects.list(f"{ROLLUP_PREFIX}{kind}/"))
        for key in reversed(keys):
            try:
                doc = read_sealed(self.objects, key, f"status rollup {key} in "
                                                     f"{self.objects.uri}")
                return Rollup(kind, float(doc["until"]), dict(doc["counts"]),
                              {k: dict(v) for k, v in doc["sums"].items()}), keys
            except (SedimentError, ValueError, KeyError, TypeError, AttributeError) as e:
                log.warning("status rollup %s cannot be read (%s): an older one is used",
                            key, e)
        return Rollup(kind, 0.0), keys

    def expire(self, retention_seconds: float, *, now: float | None = None) -> ExpiryResult:
        """Roll the events older than ``retention_seconds`` up into each kind's totals and
        delete them (see the module docstring). Listing stops at the first event inside the
        window (names sort by time), so the cost is the expired events plus one page."""
        now = time.time() if now is None else now
        until = now - retention_seconds
        events = rollups = 0
        for kind in KINDS:
            old = []
            end = _event_key(kind, until)
            for o in self.objects.list(f"{STATUS_PREFIX}{kind}/"):
                if o.key >= end:
                    break
                old.append(o.key)
            if not old:
                continue
            previous, keys = self._newest_rollup(kind)
            expired = list(self.events(kind, keys=old))
            rolled = previous.plus(expired, until)
            key = f"{ROLLUP_PREFIX}{kind}/{rolled.until:017.6f}-{uuid.uuid4().hex[:8]}.json"
            self.objects.put(key, sealed(rolled.to_json()))
            # the new rollup is down: the events and the rollups it replaces may go
            self.objects.delete_many(old)
            self.objects.delete_many(keys)
            events += len(old)
            rollups += len(keys)
        return ExpiryResult(events, rollups)

    def jobs(self, kind: str | None = None) -> list[dict[str, Any]]:
        """One row per job: its latest status and the details gathered from all its events."""
        rows: dict[tuple[str, str], dict[str, Any]] = {}
        for ev in self.events(kind):
            row = rows.setdefault((ev.kind, ev.job_id), {
                "kind": ev.kind, "job_id": ev.job_id, "partition_id": ev.partition_id,
                "created": ev.time})
            row["status"] = ev.status
            row["updated"] = ev.time
            row.update(ev.details)
        return sorted(rows.values(), key=lambda r: r["created"])
