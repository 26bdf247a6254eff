"""The batcher's Spark runner: a job of the ``bulk_import`` route imported with Spark.

The ``"spark"`` batcher runner of :mod:`sediment.runners` (the local one is
:func:`sediment.ingest.batcher.ingest_batch`, with the same arguments).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from sediment.errors import JobError
from sediment.spark.bulk_import import bulk_import

if TYPE_CHECKING:
    from sediment.handle import TableHandle
    from sediment.ingest.standard import IngestResult, StagedFiles


def bulk_import_batch(table: TableHandle, paths: Sequence[str], *,
                      before_commit: Callable[[StagedFiles], None] | None = None,
                      spill_dir: str | None = None, spark: Any = None) -> IngestResult:
    """Bulk-import one job's files on ``spark`` (the session the batcher runs with) in one
    transaction; ``spill_dir`` is the local runner's, unused here."""
    if spark is None:
        raise JobError(f"table {table.name}: the Spark batcher runner needs the Spark session "
                       "it runs on")
    return bulk_import(spark, table, paths, before_commit=before_commit)
