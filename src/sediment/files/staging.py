"""Staging: the files one write puts into a table before its commit, and what becomes of them.

Every writer of data files (ingest, bulk import, load, a compaction job) stages them in one
``Staging``: :meth:`~Staging.new_file` or :meth:`~Staging.stage` before a file is created here,
:meth:`~Staging.adopt` for files written elsewhere (a Spark executor, a compaction worker
process, a load's copies) that this process commits. A staged file is protected from GC's
orphan pass by this process's lease (``sediment.state.pending``, kept alive by its heartbeat
thread) until the write settles one of four ways:

- committed (:meth:`~Staging.commit`): the files are referenced now; the lease lets them go;
- failed before a commit was tried, or refused for certain (the error's ``committed`` is False:
  invalid, every race lost, the table dropped; see ``sediment.errors``): nothing can ever
  reference them, so they, their sidecars and their lease entries go at once, instead of
  waiting for GC's orphan pass (an hour later, or for a dropped table's folder never until a
  whole-store ``maintain``);
- failed otherwise (an unknown outcome, a storage error, an interrupt, an exception Sediment
  did not raise): the commit may have landed, so the files are kept and the lease lets them
  go; the orphan pass deletes them once a read tells that no version references them;
- handed over (:meth:`~Staging.hand_over`): another process adopts them (a worker's output,
  which the maintainer commits).

Used as a context manager, an exception leaving the block settles the write by that rule. The
writer of a Parquet file (``sediment.files.writer``) knows nothing of leases: whoever stages
the file holds them. One staging serves one write on one thread.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from types import TracebackType

from sediment.core.state import TableState
from sediment.errors import definitely_not_committed
from sediment.files.sidecars import with_sidecars
from sediment.files.writer import new_data_filename
from sediment.state import pending
from sediment.state.store import StateStore, TransactionSource
from sediment.storage.base import ObjectStore

log = logging.getLogger(__name__)


class Staging:
    """The uncommitted files of one write into the table stored in ``objects`` (table-rooted;
    ``table``: its name, for messages)."""

    def __init__(self, objects: ObjectStore, table: str = "") -> None:
        self.objects = objects
        self.table = table or objects.uri
        self._files: dict[str, None] = {}
        """The files staged and not yet settled, in staging order (a dict as an ordered set)."""
        self._synced: set[str] = set()
        """Staged files (and sidecars) their writer made durable already."""
        self._tried = False
        """Whether a commit of the files was tried: until then, no failure can have
        committed them."""

    @property
    def files(self) -> list[str]:
        """The files staged and not yet settled (committed, deleted, kept or handed over)."""
        return list(self._files)

    def new_file(self, partition_id: str) -> str:
        """The name of a new data file of ``partition_id``, staged (protected) before it is
        created."""
        name = new_data_filename(partition_id)
        self.stage([name])
        return name

    def new_file_later(self, partition_id: str) -> tuple[str, Callable[[], None]]:
        """:meth:`new_file`, its lease written on a thread: the name, and ``wait``, which the
        writer calls before it creates the file (``pending.register_later``)."""
        name = new_data_filename(partition_id)
        wait = pending.register_later(self.objects, [name])
        self._files[name] = None
        return name, wait

    def stage(self, filenames: Iterable[str]) -> None:
        """Protect ``filenames`` from GC's orphan pass before they are written here: the
        lease naming them is written before this returns."""
        names = [n for n in filenames if n not in self._files]
        if not names:
            return
        pending.register(self.objects, names)
        self._files.update(dict.fromkeys(names))

    def synced(self, filenames: Iterable[str]) -> None:
        """Record that ``filenames`` (staged files and their sidecars) were made durable by
        their writer (``WrittenFile.synced``): :meth:`commit` syncs only the others."""
        self._synced.update(filenames)

    def adopt(self, filenames: Iterable[str]) -> None:
        """Protect ``filenames``, written by another process (a Spark executor, a compaction
        worker) or copied in, from now until this write settles. They are safe until then
        too: a new file is no orphan for ``gc.orphan_timeout_seconds``."""
        self.stage(filenames)

    def delete(self, filenames: Iterable[str] | None = None) -> None:
        """Delete ``filenames`` (default: every file staged) and their sidecars now, best
        effort, and drop them from the lease at once (what a failed delete leaves is an
        orphan for GC). For files nothing can reference: never committed, or refused."""
        names = list(self._files) if filenames is None else list(filenames)
        if not names:
            return
        try:
            self.objects.delete_many(with_sidecars(names))
        except Exception as e:  # noqa: BLE001 (left to GC's orphan pass, which is safe)
            log.warning("could not delete %d staged files of table %s (GC's orphan pass "
                        "will): %s", len(names), self.table, e)
        pending.release(self.objects, names, now=True)
        for n in names:
            self._files.pop(n, None)

    def hand_over(self) -> list[str]:
        """Stop protecting every staged file without deleting it, for another process to
        adopt and commit (it does before GC's orphan timeout); returns their names."""
        names = self.files
        self._let_go()
        return names

    def commit(self, states: StateStore, source: TransactionSource) -> TableState:
        """Commit ``source`` (the transaction naming the staged files) and settle: the files
        are let go once committed; on failure they are deleted or kept as :meth:`settle`
        decides, and the error is raised."""
        # the files are made durable before the log entry naming them is (a no-op on S3)
        try:
            self.objects.sync([k for k in with_sidecars(self._files) if k not in self._synced])
        except BaseException as e:
            self.settle(e)  # no commit tried: the files are deleted
            raise
        self._tried = True
        try:
            state = states.commit(source)
        except BaseException as e:
            self.settle(e)
            raise
        self._let_go()  # referenced now
        return state

    def settle(self, error: BaseException) -> None:
        """After ``error`` stopped the write: delete the files when it surely committed
        nothing (no commit was tried, or ``error`` says so: ``definitely_not_committed``),
        else keep them for GC's orphan pass (the commit may have landed)."""
        if not self._tried or definitely_not_committed(error):
            self.delete()
        else:
            self._let_go()

    def _let_go(self) -> None:
        """Stop protecting the staged files (the lease object catches up at the next
        heartbeat)."""
        names = self.files
        self._files.clear()
        self._synced.clear()
        pending.release(self.objects, names)

    def __enter__(self) -> Staging:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        if error is not None:
            self.settle(error)
