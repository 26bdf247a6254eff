"""Job and task events, one small JSON object each under the table's ``status/`` folder.

Events are written with plain puts under unique names (no coordination needed) and read back
for reports. A job's life is its events: created, started, finished, committed or failed (with
the reason), each carrying what is known then (rows and bytes in/out, seconds, rate).
"""

from __future__ import annotations

import logging
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
KINDS = ("compaction", "split", "gc", "ingest", "bulk_import", "dump")


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

    def record(self, kind: str, job_id: str, status: str, *, partition_id: str | None = None,
               **details: Any) -> Event:
        """Record an event; a failure to record is never fatal to the job itself."""
        ev = Event(kind, job_id, status, time.time(), partition_id, details)
        key = f"{STATUS_PREFIX}{kind}/{ev.time:017.6f}-{uuid.uuid4().hex[:8]}.json"
        try:
            self.objects.put(key, sealed(ev.to_json(), default=str))
        except SedimentError:
            pass
        return ev

    def events(self, kind: str | None = None, *, since: float | None = None) -> Iterator[Event]:
        """Events in time order (of one kind, or all). An event that cannot be read is left
        out (a report is never refused for one); one that fails its checksum even when read
        again is left out with a warning naming it."""
        kinds = [kind] if kind else list(KINDS)
        out: list[Event] = []
        for k in kinds:
            start = None if since is None else f"{STATUS_PREFIX}{k}/{since:017.6f}"
            for o in self.objects.list(f"{STATUS_PREFIX}{k}/", start_after=start):
                try:
                    doc = read_sealed(self.objects, o.key,
                                      f"status event {o.key} in {self.objects.uri}")
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
