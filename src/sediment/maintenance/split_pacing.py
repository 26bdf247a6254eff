"""When the continuous maintainer splits a leaf (sediment.maintenance.continuous): what it
remembers between ticks about leaves over the split threshold, partition schemes and leaves
found unsplittable."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from sediment.compaction.strategy import files_after_jobs
from sediment.maintenance.splitting import leaf_records
from sediment.settings import settings_of

if TYPE_CHECKING:
    from sediment.core.head import Head
    from sediment.core.model import Partition
    from sediment.core.state import TableState

SCHEME_CHECK_SECONDS = 5.0
"""How often a partition scheme's split is looked at (it reads every member's state)."""

SPLIT_WAIT_SECONDS = 5.0
"""How long a leaf over the split threshold may wait to hold few files before it splits
anyway (see SplitPacing.ready)."""


class SplitPacing:
    """The maintainer's memory of splits: see :meth:`ready` and :meth:`due`."""

    def __init__(self) -> None:
        self._stuck: dict[tuple[str, str], int] = {}  # (table, leaf) -> records when stuck
        self._over_since: dict[tuple[str, str], tuple[float, int]] = {}
        """(table, leaf) -> when it was first seen over the threshold, and its files at the
        last look (see ready)."""
        self._scheme_at: dict[str, float] = {}
        """Partition scheme id -> when its members last asked it to split."""

    def stuck(self, table: str, leaf: str, records: int) -> None:
        """``leaf`` could not split at ``records``: not due again until its size changes."""
        self._stuck[(table, leaf)] = records

    def ready(self, table: str, state: TableState, leaf: Partition) -> bool:
        """A leaf over the threshold splits at once when no merge of its files is under way
        (nothing to wait for); else once it holds few files (a third of a batch, at least 2,
        counting a running job as the one file it leaves), right after a merge takes some of
        its files (that count fell since the last look), or ``SPLIT_WAIT_SECONDS`` after it
        was first seen over the threshold. Both children start with a reference to
        every file of the leaf, and each rewrites its share of them: split at the leaf's
        busiest moment, they start near the batch size while the rewrites queue for the long
        lane (measured in steady_state: the peaks in files per leaf came right after
        splits)."""
        now = time.monotonic()
        key = (table, leaf.id)
        refs = state.references(leaf.id).values()
        files = files_after_jobs(refs)
        since, before = self._over_since.get(key, (now, files))
        calm = max(2, settings_of(state, table).compaction_batch_size // 3)
        idle = all(r.job_id is None for r in refs)  # no merge under way: nothing to wait for
        if idle or files <= calm or files < before or now - since >= SPLIT_WAIT_SECONDS:
            self._over_since.pop(key, None)
            return True
        self._over_since[key] = (since, files)
        return False

    def due(self, table: str, head: Head) -> bool:
        """A leaf is over the threshold and not known to be unsplittable at its size (an
        unsplittable leaf is reported once, not every tick)."""
        scheme = head.settings.partition_scheme
        if scheme:  # its scheme splits, on every member's records: looked at now and then
            now = time.monotonic()
            if now - self._scheme_at.get(scheme, float("-inf")) < SCHEME_CHECK_SECONDS:
                return False
            self._scheme_at[scheme] = now
            return True
        state = head.state
        threshold = head.settings.partition_split_threshold
        for leaf in state.leaf_partitions():
            n = leaf_records(state, leaf)
            if n > threshold and self._stuck.get((table, leaf.id)) != n:
                return True
        return False
