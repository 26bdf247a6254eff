"""Jobs over time for the table page, from the tables' status events.

A job's events (created, started, finished, committed or failed) are folded into one row per
job as ``table.jobs()`` does. The events are read incrementally: each refresh asks only for
events since the latest one already held (``table.events(since=...)``: a listing from that
key on), so a page refreshing every few seconds does not re-read a table's whole status log.
"""

from __future__ import annotations

import threading
from typing import Any

from sediment.dashboard.aggregate import iso
from sediment.status import Event
from sediment.table import Table

JOB_LIMIT = 2000
"""Jobs kept per table (the most recent): the chart shows them, the list the latest 50."""


class JobEvents:
    """The status events of each table seen so far, and its jobs folded from them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._events: dict[str, list[Event]] = {}
        self._seen: dict[str, set[tuple[str, str, str, float]]] = {}

    def _refresh(self, table: Table) -> list[Event]:
        with self._lock:
            held = list(self._events.get(table.table_id, []))
            seen = set(self._seen.get(table.table_id, set()))
        since = held[-1].time if held else None
        new = [e for e in table.events(since=since)
               if (e.kind, e.job_id, e.status, e.time) not in seen]
        if new:
            held.extend(new)
            held.sort(key=lambda e: e.time)
            seen.update((e.kind, e.job_id, e.status, e.time) for e in new)
            with self._lock:
                self._events[table.table_id] = held
                self._seen[table.table_id] = seen
        return held

    def view(self, table: Table) -> dict[str, Any]:
        """``jobs``: one row per job (kind, id, partition, status, created, updated,
        seconds, records in and out, records per second, reason when failed), oldest first;
        ``counts``: jobs per kind and status."""
        rows: dict[tuple[str, str], dict[str, Any]] = {}
        for ev in self._refresh(table):
            row = rows.setdefault((ev.kind, ev.job_id), {
                "kind": ev.kind, "job_id": ev.job_id, "partition_id": ev.partition_id,
                "created": ev.time, "details": {}})
            row["status"] = ev.status
            row["updated"] = ev.time
            row["details"].update(ev.details)
        jobs = sorted(rows.values(), key=lambda r: r["created"])[-JOB_LIMIT:]
        counts: dict[str, dict[str, int]] = {}
        out = []
        for r in jobs:
            d = r.pop("details")
            seconds = d.get("seconds")
            records = d.get("rows_in", d.get("rows", d.get("records")))
            rate = d.get("rows_per_second")
            if rate is None and seconds and records:
                rate = float(records) / float(seconds)
            out.append({
                "kind": r["kind"], "job_id": r["job_id"], "partition_id": r["partition_id"],
                "status": r["status"], "created": iso(r["created"]),
                "updated": iso(r["updated"]),
                "seconds": float(seconds) if seconds is not None else
                max(0.0, r["updated"] - r["created"]),
                "records": int(records) if isinstance(records, int | float) else None,
                "records_per_second": float(rate) if isinstance(rate, int | float) else None,
                "reason": None if d.get("reason") is None else str(d["reason"]),
            })
            by_status = counts.setdefault(r["kind"], {})
            by_status[r["status"]] = by_status.get(r["status"], 0) + 1
        return {"jobs": out, "counts": counts,
                "failed": sum(1 for j in out if j["status"] == "failed")}
