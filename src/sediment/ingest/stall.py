"""Write stalls: an ingest waits for compaction before adding to a crowded leaf.

A continuous maintainer keeps the files per leaf within ``compaction.batch_size`` as long as
it has the CPU to; an ingest faster than compaction on a saturated machine outruns it, and
every file more is a file more for each lookup of that leaf to open. LSM stores answer this
with back-pressure (RocksDB's ``level0_stop_writes_trigger``, Paimon's
``num-sorted-run.stop-trigger``): a write that would add to a partition already holding that
many sorted runs waits for compaction to bring it down.

``ingest.stall_files`` (0: never) is that trigger. Before its commit, an ingest looks at the
newest version: while some leaf it writes to is read from ``stall_files`` files or more (its
own references and those its ancestors still hold, as a query of the leaf reads them), it
waits and looks again, up to ``ingest.stall_max_seconds``; then it commits anyway, so a
stopped maintainer slows ingest down rather than stopping it. The files it wrote are protected
by its pending lease meanwhile (:mod:`sediment.state.pending`).

Splits and compactions never add files to a leaf (a split's children inherit at most their
parent's references), so with one writer a leaf that the stall lets through holds at most
``stall_files``: the waiting ingest adds one file to a leaf that held fewer.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from sediment.core.state import TableState

POLL_SECONDS = (0.02, 0.5)
"""First and longest pause between two looks at the newest version (doubling in between):
short at first, as a compaction job in a crowded leaf is often about to commit."""


def crowded_leaves(state: TableState, partition_ids: Iterable[str], limit: int
                   ) -> dict[str, int]:
    """The leaves at or under ``partition_ids`` that a query reads from ``limit`` files or
    more, with that number (a pure function of ``state``; ids ``state`` does not know are
    skipped: the commit itself reports them)."""
    out: dict[str, int] = {}
    for pid in set(partition_ids):
        if pid not in state.partitions:
            continue
        above = sum(len(state.references(a.id)) for a in state.ancestors(pid))
        for leaf_id, files in _leaf_files(state, pid, above):
            if files >= limit:
                out[leaf_id] = files
    return out


def _leaf_files(state: TableState, pid: str, above: int) -> Iterable[tuple[str, int]]:
    """(leaf id, files a query of it reads) for each leaf at or under ``pid``, given the
    references held above ``pid``."""
    stack = [(pid, above)]
    while stack:
        p_id, held = stack.pop()
        p = state.partitions[p_id]
        files = held + len(state.references(p_id))
        if p.is_leaf:
            yield p_id, files
        else:
            stack.extend((c, files) for c in p.children)


def wait_for_room(head: Callable[[], TableState], partition_ids: Iterable[str], limit: int,
                  max_seconds: float, *, sleep: Callable[[float], None] = time.sleep
                  ) -> tuple[float, dict[str, int]]:
    """Wait until no leaf under ``partition_ids`` is crowded (see :func:`crowded_leaves`) in
    ``head()``, or ``max_seconds`` have passed. Returns the seconds waited and the leaves
    still crowded (empty unless the wait timed out)."""
    ids = list(partition_ids)
    started = time.monotonic()
    pause = POLL_SECONDS[0]
    crowded = crowded_leaves(head(), ids, limit)
    if not crowded:
        return 0.0, crowded
    while True:
        waited = time.monotonic() - started
        if not crowded or waited >= max_seconds:
            return waited, crowded
        sleep(min(pause, max(0.0, max_seconds - waited)))
        pause = min(pause * 2, POLL_SECONDS[1])
        crowded = crowded_leaves(head(), ids, limit)
