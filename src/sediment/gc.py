"""Garbage collection: delete unreferenced files after a delay, and orphans after a timeout.

Unreferenced files (their last reference went away at least ``gc.delay_seconds`` ago, so no
running query still reads them) are recorded as deleted by a DeleteFiles transaction, one per
batch, then deleted from storage (in that order: see ``gc``). Orphans are files under ``data/``
that no transaction ever added (a failed ingest or compaction, a killed job) older than
``gc.orphan_timeout_seconds``; so are the temp files of writes a crash interrupted
(``ObjectStore.temporaries``), anywhere in the table's folder. The listing happens before the
state is loaded, so every file committed by then is known; a referenced file is never deleted.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sediment.core.transactions import DeleteFiles
from sediment.errors import TransactionInvalidError
from sediment.files.writer import data_file_of, with_sidecars

if TYPE_CHECKING:
    from sediment.table import Table

BATCH = 1000


@dataclass(frozen=True, slots=True)
class GcResult:
    deleted: int = 0
    orphans_deleted: int = 0
    seconds: float = 0.0

    @property
    def did_work(self) -> bool:
        return bool(self.deleted or self.orphans_deleted)


_FILES_AT: dict[tuple[str, str, int], frozenset[str]] = {}
"""Files referenced at (store URI, table id, version): a committed version never changes, and
loading one (snapshot + log replay) cost ~7 ms per tag on every pass (14 tags: 7 -> 112 ms)."""


def _files_at(table: Table, version: int) -> frozenset[str]:
    key = (table.objects.uri, table.table_id, version)
    files = _FILES_AT.get(key)
    if files is None:
        files = frozenset(table.state(version).refcount)
        if len(_FILES_AT) >= 1024:
            _FILES_AT.clear()
        _FILES_AT[key] = files
    return files


def gc(table: Table, *, now: float | None = None) -> GcResult:
    """One garbage-collection pass over ``table``."""
    started = time.perf_counter()
    now = time.time() if now is None else now
    listed = list(table.objects.list("data/"))
    state = table.states.head()
    props = {**table.properties}
    delay = max(float(props["gc.delay_seconds"]), float(props["retention.seconds"]))
    protected: set[str] = set()
    for tag in table.tags():  # tagged versions keep their files
        protected.update(_files_at(table, tag.version))
    ready = sorted(f for f, t in state.unreferenced.items()
                   if now - t >= delay and f not in protected)
    deleted = 0
    for i in range(0, len(ready), BATCH):
        batch = ready[i : i + BATCH]
        # Record first, then delete: once recorded, no transaction can reference the files
        # again (a restore validates against the recorded state). Deleting first left a window
        # (or, after a crash, forever) in which a restore could bring back references to files
        # already gone. A crash after recording leaves orphans, which the orphan pass removes.
        try:
            table.states.commit(DeleteFiles(batch))
        except TransactionInvalidError:
            break  # another collector recorded them first, or a restore referenced them again
        table.objects.delete_many(with_sidecars(batch))
        deleted += len(batch)

    known = set(state.refcount) | set(state.unreferenced) | protected
    timeout = float(props["gc.orphan_timeout_seconds"])
    orphans = []
    for o in listed:
        if o.key.endswith("/"):
            continue  # a folder marker (pyarrow's S3 create_dir writes them), not a file
        data = data_file_of(o.key)
        if data not in known and now - o.mtime >= timeout:
            orphans.append(o.key)
    if orphans:
        table.objects.delete_many(orphans)
    # partial writes of killed writers (local temp files), anywhere in the table's folder
    stale = [o.key for o in table.objects.temporaries("") if now - o.mtime >= timeout]
    if stale:
        table.objects.delete_many(stale)
    n_orphans = sum(1 for k in orphans if data_file_of(k) == k)
    result = GcResult(deleted, n_orphans, time.perf_counter() - started)
    if result.did_work:
        table.status.record("gc", f"gc-{int(now)}", "finished", deleted=deleted,
                            orphans_deleted=n_orphans, seconds=result.seconds)
    return result
