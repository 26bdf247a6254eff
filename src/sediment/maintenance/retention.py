"""Bounded metadata: the log and snapshots pruned past ``retention.seconds``, job and task
events rolled up past ``status.retention.seconds``.

A table that commits a few times a second for months keeps millions of log entries, snapshots
and events unless something deletes them; the continuous maintainer runs :func:`tidy_metadata`
on a slow cadence (see ``Maintainer``), so what a table keeps is bounded by its retention
windows and its commit rate, not by its age. Pruning never goes below a tag or a live pin
(``sediment.state.versions.prune``); the expired events leave their totals behind
(``sediment.status.events``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from sediment.settings import settings_of
from sediment.state.versions import PruneResult, prune
from sediment.status.events import ExpiryResult

if TYPE_CHECKING:
    from sediment.handle import TableHandle


@dataclass(frozen=True, slots=True)
class MetadataResult:
    """What one :func:`tidy_metadata` deleted: log entries, snapshots and snapshot objects
    (``pruned``), and events rolled up (``expired``)."""

    pruned: PruneResult
    expired: ExpiryResult

    @property
    def deleted(self) -> int:
        """Objects deleted (rollups replaced by newer ones not counted)."""
        p = self.pruned
        return p.log_entries + p.snapshots + p.objects + self.expired.events


def tidy_metadata(table: TableHandle, *, now: float | None = None) -> MetadataResult:
    """Prune ``table``'s log and snapshots past ``retention.seconds`` and roll up its events
    past ``status.retention.seconds`` (``now``: this machine's clock; pruning also asks the
    store's, and takes the earlier)."""
    settings = settings_of(table.states.head(), table.name)
    pruned = prune(table.states, settings.retention_seconds, now=now)
    expired = table.status.expire(settings.status_retention_seconds, now=now)
    return MetadataResult(pruned, expired)
