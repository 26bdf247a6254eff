"""The ingest batcher's planning: which waiting requests make a job, why now, and by which
route (pure: functions of the requests and the table's properties, no storage; the batcher in
``sediment.ingest.batcher`` reads the requests and runs the jobs)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sediment.ingest.batcher_store import Request
from sediment.settings import as_settings


@dataclass(frozen=True, slots=True)
class Batch:
    """Requests that make one job, and why it is released now: ``files`` (count reached),
    ``bytes`` (size reached), ``age`` (the oldest request waited long enough) or ``flush``
    (released at once on request: ``run(flush=True)``)."""

    requests: tuple[Request, ...]
    reason: str

    @property
    def files(self) -> int:
        return len(self.requests)

    @property
    def bytes(self) -> int:
        return sum(r.size for r in self.requests)

    @property
    def oldest(self) -> float:
        return min(r.submitted for r in self.requests)


def batcher_limits(properties: Mapping[str, Any]) -> tuple[int, int, float]:
    """``(batcher.max_files, batcher.max_bytes, batcher.max_age_seconds)`` of a table."""
    settings = as_settings(properties)
    return settings.batcher_max_files, settings.batcher_max_bytes, \
        settings.batcher_max_age_seconds


def plan_batches(requests: Sequence[Request], properties: Mapping[str, Any],
                 now: float, *, flush: bool = False) -> list[Batch]:
    """Group requests, oldest first, into jobs of at most ``batcher.max_files`` files and
    ``batcher.max_bytes`` bytes (a larger file is a job alone). Full groups are released; the
    last, partial group only once its oldest request is ``batcher.max_age_seconds`` old, or at
    once with ``flush`` (reason ``flush``)."""
    max_files, max_bytes, max_age = batcher_limits(properties)
    ordered = sorted(requests, key=lambda r: (r.submitted, r.id))
    out: list[Batch] = []
    group: list[Request] = []
    size = 0
    for r in ordered:
        if group and (len(group) >= max_files or size + r.size > max_bytes):
            out.append(Batch(tuple(group), "files" if len(group) >= max_files else "bytes"))
            group, size = [], 0
        group.append(r)
        size += r.size
    if group:
        if len(group) >= max_files:
            out.append(Batch(tuple(group), "files"))
        elif size >= max_bytes:
            out.append(Batch(tuple(group), "bytes"))
        elif now - group[0].submitted >= max_age:
            out.append(Batch(tuple(group), "age"))
        elif flush:
            out.append(Batch(tuple(group), "flush"))
    return out


def route_for(batch: Batch, properties: Mapping[str, Any], spark_available: bool) -> str:
    """``bulk_import`` for a big enough job when Spark is available, else ``ingest``."""
    threshold = as_settings(properties).batcher_bulk_import_min_bytes
    return "bulk_import" if spark_available and batch.bytes >= threshold else "ingest"


RUNNER_OF_ROUTE = {"ingest": "local", "bulk_import": "spark"}
"""The batcher runner of :mod:`sediment.runners` that runs a job of each route (the route is
what a job's record keeps)."""
