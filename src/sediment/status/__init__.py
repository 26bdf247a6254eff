"""Status store: events of jobs and tasks (compaction, splits, GC, ingest) for reports."""

from sediment.status.events import Event, StatusStore

__all__ = ["Event", "StatusStore"]
