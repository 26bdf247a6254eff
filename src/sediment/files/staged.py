"""Files a writer staged for a commit that did not land: deleted at once when that is certain.

Every writer of data files (ingest, bulk import, load, compaction) stages files, protected by
its lease (``sediment.state.pending``), then commits them. When the commit is refused for
certain (``definitely_not_committed``: invalid, beaten by every other writer, the table
dropped) nothing can ever reference the files, so they, their sidecars and their lease entry
go at once, instead of waiting for GC's orphan pass (an hour later, or never for a dropped
table's folder until a whole-store ``maintain``). After any other failure the commit may have
landed: the files are kept and the orphan pass judges them once it can read the outcome.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

from sediment.files.sidecars import with_sidecars
from sediment.state import pending
from sediment.state.store import definitely_not_committed
from sediment.storage.base import ObjectStore


def delete_staged(objects: ObjectStore, filenames: Sequence[str]) -> None:
    """Delete staged (never committed) files and their sidecars, best effort, and drop them
    from this process's lease at once (what a failed delete leaves is an orphan for GC)."""
    with contextlib.suppress(Exception):
        objects.delete_many(with_sidecars(filenames))
    pending.release(objects, filenames, now=True)


def discard_staged(objects: ObjectStore, filenames: Sequence[str],
                   error: BaseException) -> None:
    """After a failed commit of ``filenames``: delete them when the commit surely did not
    land; otherwise (an unknown outcome, an interrupt) keep them, since they may be
    committed, and leave them to GC's orphan pass, which deletes them only if they are not."""
    if definitely_not_committed(error):
        delete_staged(objects, filenames)
    else:
        pending.release(objects, filenames)
