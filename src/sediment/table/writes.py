"""Writing a table: ingest, upsert, the buffered writer, delete, purge, clear and
reinitialise (part of the :class:`~sediment.table.Table` façade).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from sediment.core.transactions import ClearTable, ReinitialiseTable
from sediment.table.base import TableBase

if TYPE_CHECKING:
    from sediment.core.regions import Range
    from sediment.ingest import IngestResult
    from sediment.ingest.buffered import BufferedWriter
    from sediment.maintenance.purge import PurgeResult


class TableWrites(TableBase):
    """Every write of records: each one transaction (the writer: one per flush)."""

    def ingest(self, data: Any, *, progress: Callable[[int], None] | None = None,
               spill_dir: str | None = None,
               idempotency_key: str | None = None) -> IngestResult:
        """Ingest records (pyarrow Table/RecordBatch/RecordBatchReader, pandas DataFrame or an
        iterable of them) in one transaction.

        ``spill_dir``: the local folder sorted runs spill to past ``ingest.memory_limit_bytes``
        (else ``$SEDIMENT_SPILL_DIR``, else the system temp folder). It is this client's
        choice, not the table's: the old ``ingest.spill_dir`` property is ignored.

        ``idempotency_key``: a string naming this write, so that a retry (after a lost
        answer, a crash, from another process or server) commits it at most once: within
        ``write.idempotency_window_seconds`` the same key with the same records returns the
        first write's result (its version) and writes nothing; with other records it raises
        IdempotencyKeyReusedError (see ``sediment.ingest.idempotency``).

        Raises DataError: records that do not fit the schema (the field and row are named);
        StorageError: the spill folder does not exist or is not a folder, or a write failed
        (a full disk: the folder or file is named); TransactionError: the commit was refused
        (CommitOutcomeUnknownError: no answer; IdempotencyKeyReusedError: a key used for
        other records). Nothing partial is ever committed.
        """
        if idempotency_key is not None:
            from sediment.ingest.keyed import keyed_ingest

            return keyed_ingest(self._handle, data, idempotency_key, progress=progress,
                                spill_dir=spill_dir)
        from sediment.ingest import ingest

        return ingest(self._handle, data, progress=progress, spill_dir=spill_dir)

    def upsert(self, data: Any, *, progress: Callable[[int], None] | None = None,
               spill_dir: str | None = None,
               idempotency_key: str | None = None) -> IngestResult:
        """Upsert records, in one transaction: each replaces every record of its record key
        (row keys + sort keys) committed before it, whatever the table's merge rule, until
        a later write of that key; of equal keys in ``data``, the last in input order wins.
        Takes what :meth:`ingest` takes; costs what an ingest costs (the records replaced
        are dropped by readers and, for good, by compaction). ``idempotency_key``: as
        :meth:`ingest`'s (an upsert's payload differs from an ingest of the same records).

        Raises: as :meth:`ingest`. Nothing partial is ever committed.
        """
        if idempotency_key is not None:
            from sediment.ingest.keyed import keyed_ingest

            return keyed_ingest(self._handle, data, idempotency_key, progress=progress,
                                spill_dir=spill_dir, upsert=True)
        from sediment.ingest import ingest

        return ingest(self._handle, data, progress=progress, spill_dir=spill_dir, upsert=True)

    def writer(self, *, max_rows: int = 100_000, max_bytes: int = 64 << 20,
               max_seconds: float = 1.0) -> BufferedWriter:
        """A buffered writer (a context manager): ``write(data, *, idempotency_key=None)``
        validates and buffers small writes; a background thread flushes them as one sorted
        set of files and ONE commit once ``max_rows`` rows or ``max_bytes`` bytes are
        buffered or the oldest write is ``max_seconds`` old. ``flush()`` and ``close()``
        return the versions committed since the last of them (once everything written
        before is committed) and raise what a background flush hit. ``write`` blocks while
        the buffer is full (see ``sediment.ingest.buffered``)."""
        from sediment.ingest.buffered import BufferedWriter

        return BufferedWriter(self._handle, max_rows=max_rows, max_bytes=max_bytes,
                              max_seconds=max_seconds)

    def upsert_files(self, paths: Sequence[str] | str, *,
                     progress: Callable[[int], None] | None = None,
                     spill_dir: str | None = None,
                     idempotency_key: str | None = None) -> IngestResult:
        """:meth:`upsert` the records of Parquet, CSV or JSON-lines files (as
        :meth:`ingest_files` reads them; the last of equal keys in file order wins)."""
        if idempotency_key is not None:
            from sediment.ingest.keyed import keyed_ingest_files

            return keyed_ingest_files(self._handle, paths, idempotency_key, progress=progress,
                                      spill_dir=spill_dir, upsert=True)
        from sediment.ingest import ingest_files

        return ingest_files(self._handle, paths, progress=progress, spill_dir=spill_dir,
                            upsert=True)

    def ingest_files(self, paths: Sequence[str] | str, *,
                     progress: Callable[[int], None] | None = None,
                     spill_dir: str | None = None,
                     idempotency_key: str | None = None) -> IngestResult:
        """Ingest Parquet, CSV or JSON-lines files (local or S3; globs) in one transaction
        (``spill_dir``, ``idempotency_key``: as :meth:`ingest`; the payload is the files'
        records).

        Raises DataError: a missing or unreadable file, an unknown format, a bad record;
        StorageError, TransactionError: as :meth:`ingest`.
        """
        if idempotency_key is not None:
            from sediment.ingest.keyed import keyed_ingest_files

            return keyed_ingest_files(self._handle, paths, idempotency_key, progress=progress,
                                      spill_dir=spill_dir)
        from sediment.ingest import ingest_files

        return ingest_files(self._handle, paths, progress=progress, spill_dir=spill_dir)

    def delete(self, keys: Sequence[Any] | None = None,
               ranges: Sequence[Range] | Range | None = None, *,
               filter: Any = None,  # noqa: A002 (the public name)
               idempotency_key: str | None = None) -> int:
        """Delete, in one transaction, every record committed before it of ``keys`` (row
        keys: all their records), in ``ranges``, and/or matching ``filter`` (a
        ``pc.Expression`` or ``--where`` text; with keys or ranges, the records of those
        that match it); returns the new version. A metadata commit: no data is read or
        written, whatever it covers; reads drop the records from this version on, earlier
        versions still hold them, and compaction removes them for good. Records written
        after it (an insert of a deleted key) are kept. ``idempotency_key``: as
        :meth:`ingest`'s (the payload is what the delete names).

        Raises QueryError naming the table: nothing named (``clear()`` deletes every
        record), a key, range or filter that does not fit the table; TransactionError: the
        commit was refused or its outcome is unknown (IdempotencyKeyReusedError: the key was
        used for another delete or write).
        """
        from sediment.ingest.records import delete

        return delete(self._handle, keys, ranges, filter=filter,
                      idempotency_key=idempotency_key)

    def purge(self, keys: Sequence[Any] | None = None,
              ranges: Sequence[Range] | Range | None = None, *,
              filter: Any = None) -> PurgeResult:  # noqa: A002 (the public name)
        """:meth:`delete`, then rewrite every live file that may hold a deleted record, in one
        transaction, so that once retention, pins and tags allow, GC leaves no data file or
        sidecar holding one. ``PurgeResult`` says what still holds them: the retained
        versions before the rewrite, the tags and pins, and when GC may delete the files.

        Raises: as :meth:`delete`; JobError naming the table when a rewrite fails (the
        records stay deleted from every read).
        """
        from sediment.maintenance.purge import purge

        return purge(self._handle, keys, ranges, filter=filter)

    def clear(self) -> int:
        """Remove every record in one transaction; returns the new version. Schema, properties
        and partitions are kept. The files become unreferenced: older versions (time travel,
        tags, ``restore``) still read them until the collector deletes them after
        ``gc.delay_seconds``. Clearing an empty table commits nothing.

        Raises TransactionError: the commit was refused or its outcome is unknown.
        """
        head = self._handle.states.head()
        if head.reference_count() == 0 and not head.jobs:
            return head.version
        return self._handle.states.commit(ClearTable()).version

    def reinitialise(self, split_points: Sequence[Any] | None = None) -> int:
        """Give a table that holds no records a new partition tree cut at ``split_points``
        (none: a single root partition); returns the new version. A table with records is
        refused (TransactionInvalidError): clear it first. Schema and properties are kept.

        Raises TransactionInvalidError: the table still holds references; SchemaError: split
        points that are not row keys or not increasing.
        """
        from sediment.core.state import build_partition_tree

        partitions = build_partition_tree(self.schema, split_points,
                                          str(self.properties["partitioning"]))
        return self._handle.states.commit(ReinitialiseTable(partitions)).version
