"""A table's partitions, files, usage and description, its jobs and events, and the
maintenance passes (part of the :class:`~sediment.table.Table` façade).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

from sediment.core.model import FileReference, Partition
from sediment.properties import defaults
from sediment.runners import load_runner
from sediment.state.schemes import with_scheme_threshold
from sediment.state.tags import Tag, scan_tags
from sediment.table.base import TableBase

if TYPE_CHECKING:
    from sediment.compaction.runner import CompactionResult
    from sediment.maintenance.gc import GcResult
    from sediment.maintenance.passes import MaintenanceResult
    from sediment.maintenance.splitting import SplitResult
    from sediment.maintenance.usage import Usage
    from sediment.status import Event


class TableMaintenance(TableBase):
    """What the table holds and how it is kept: partitions, files, usage, describe,
    jobs, events; compact, split, gc, maintain."""

    def partitions(self, version: int | None = None) -> list[Partition]:
        """The partition tree, parents before children."""
        st = self.state(version)
        return sorted(st.partitions.values(),
                      key=lambda p: (len(st.ancestors(p.id)), p.region.min or ()))

    def leaves(self, version: int | None = None) -> list[Partition]:
        """The leaf partitions (those holding the data, tiling the key space), in key order:
        what a count of a table's pieces means (``partitions()`` has their ancestors too)."""
        return self.state(version).leaf_partitions()

    def files(self, version: int | None = None) -> list[FileReference]:
        """Every file reference, by partition then filename."""
        return list(self.state(version).all_references())

    def usage(self) -> Usage:
        """Where this table's bytes go now: live data files and their sidecars (samples and
        key filters), unreferenced and orphaned files by the reason GC keeps them (or due:
        its next pass deletes them), metadata (log, snapshots, tags, leases) and job events
        (``sediment du``; see ``sediment.maintenance.usage``). One listing of the table's
        folder.

        Raises StorageError: the object store failed."""
        from sediment.maintenance.usage import table_usage

        return table_usage(self._handle)

    def describe(self, version: int | None = None) -> dict[str, Any]:
        """Schema, properties, version and counts, as plain data (the CLI's ``describe``).
        ``unreferenced_bytes`` and ``orphan_bytes`` are the bytes GC has yet to free (the
        files no version at the head references, and those no transaction added, sidecars
        included), as of now whatever ``version``: ``table.gc().kept`` says what holds them."""
        from sediment.maintenance.gc import survey

        st = self.state(version)
        refs = list(st.all_references())
        plan = survey(self._handle)
        return {
            "name": self.name,
            "table_id": self.table_id,
            "uri": self._handle.objects.uri,
            "version": st.version,
            "online": st.online,
            "schema": {k: v for k, v in (st.schema.to_json() if st.schema else {}).items()
                       if k != "arrow"},
            "properties": with_scheme_threshold(self.store.objects,
                                                {**defaults(), **st.properties}),
            "partitions": len(st.partitions),
            "leaf_partitions": sum(p.is_leaf for p in st.partitions.values()),
            "files": len(st.refcount),
            "references": len(refs),
            "records": sum(r.records for r in refs),
            "unreferenced_files": len(st.unreferenced),
            "unreferenced_bytes": plan.unreferenced_bytes,
            "orphan_bytes": plan.orphan_bytes,
            "tags": [_tag_json(t) for t in scan_tags(self._handle.states).tags],
        }

    # ---- reports -----------------------------------------------------------------------------
    def jobs(self, kind: str | None = "compaction") -> list[dict[str, Any]]:
        """Jobs of ``kind`` (compaction, split, gc, ingest, dump; None: all) from their
        events: id, partition, status, inputs, rows in and out, seconds, as plain data (the
        CLI's ``report jobs``)."""
        return self._handle.status.jobs(kind)

    def events(self, kind: str | None = None, *, since: float | None = None) -> list[Event]:
        """Job and task events, oldest first (the CLI's ``report tasks``)."""
        return list(self._handle.status.events(kind, since=since))

    # ---- maintenance -----------------------------------------------------------------------
    def compact(self, *, full: bool = False, runner: Literal["local", "spark"] = "local",
                progress: Callable[[int, int], None] | None = None) -> CompactionResult:
        """One compaction pass: push references down, create jobs, run them in parallel
        (threads here, or Spark tasks with ``runner="spark"``). ``full``: a forced full
        compaction, every leaf with more than one file (or a file spanning other leaves too)
        compacted into one file whatever the strategy. ``progress(done, total)``: called with
        ``(0, jobs)`` once the pass has planned its jobs, then as each ends (with Spark, as
        the driver commits each once all tasks have run).

        Raises JobError: a job failed (the others still commit), or an unknown ``runner``
        (named, with the known ones); TransactionError: a commit was refused or its outcome
        is unknown; MissingDependencyError: ``runner="spark"`` without pyspark.
        """
        from sediment.compaction.runner import compact

        return compact(self._handle, runner=load_runner("compaction", runner, table=self.name),
                       full=full, progress=progress)

    def split(self) -> SplitResult:
        """Split every leaf partition over ``partition.split.threshold`` at its median (a
        member of a partition scheme: the scheme's leaves, on all members' records).

        Raises TransactionError: a split's commit was refused or its outcome is unknown.
        """
        from sediment.maintenance.schemes import split_table

        return split_table(self._handle)

    def gc(self, *, orphan_timeout: float | None = None) -> GcResult:
        """Delete unreferenced files past the GC delay and orphans past the orphan timeout
        (``orphan_timeout`` overrides the property, which may not go below an hour: lower
        only where no writer could be slower, as in tests). ``GcResult.kept`` says what the
        pass kept, why (a tag, a pin, retention, the GC delay, the clock-skew margin; a
        writer's lease, the orphan timeout), how many bytes and when each becomes due.

        Raises TransactionError: the DeleteFiles commit was refused or its outcome is unknown.
        """
        from sediment.maintenance.gc import gc

        return gc(self._handle, orphan_timeout=orphan_timeout)

    def maintain(self, *, runner: Literal["local", "spark"] = "local",
                 orphan_timeout: float | None = None,
                 progress: Callable[[int, int], None] | None = None) -> MaintenanceResult:
        """Split, compact and collect garbage until there is nothing left to do (compaction
        jobs in local threads, or as Spark tasks with ``runner="spark"``), then bound the
        metadata as the continuous maintainer does: log entries and snapshots past
        ``retention.seconds`` pruned (never below a tag or a pin), job events past
        ``status.retention.seconds`` rolled up (``MaintenanceResult.metadata_deleted``).
        ``progress(done, total)``: each pass's compaction jobs, as for :meth:`compact`
        (``(0, jobs)`` at the start of every pass).

        Raises JobError, TransactionError: as :meth:`compact`, :meth:`split` and :meth:`gc`;
        MissingDependencyError: ``runner="spark"`` without pyspark.
        """
        from sediment.maintenance.passes import maintain

        return maintain(self._handle, runner=load_runner("compaction", runner, table=self.name),
                        orphan_timeout=orphan_timeout, progress=progress)


def _tag_json(tag: Tag) -> dict[str, Any]:
    """A tag (or pin) in ``describe``: a pin has an expiry and an owner (and may keep files)."""
    out: dict[str, Any] = {"name": tag.name, "version": tag.version, "created": tag.created}
    if tag.is_pin:
        out.update(expires=tag.expires, owner=tag.owner, files=len(tag.files))
    return out
