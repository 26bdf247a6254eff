"""The heads of the versions running dumps write, shared by their tasks."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from sediment.core.head import Head

if TYPE_CHECKING:
    from sediment.handle import TableHandle


class PinnedHeads:
    """The head of the version each running dump writes, by table and version, so that its
    tasks (``run_dump_task``, on this process's threads) read it from here instead of loading
    the version again each (a past version: a snapshot and a replay of the log). A task that
    finds none (a Spark executor's) loads the version itself."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._heads: dict[tuple[str, str, int], tuple[Head, int]] = {}

    @staticmethod
    def _key(table: TableHandle, version: int) -> tuple[str, str, int]:
        return table.objects.uri, table.table_id, version

    @contextmanager
    def pinned(self, table: TableHandle, head: Head) -> Iterator[None]:
        key = self._key(table, head.state.version)
        with self._lock:
            held = self._heads.get(key)
            self._heads[key] = (head, 1 if held is None else held[1] + 1)
        try:
            yield
        finally:
            with self._lock:
                head, n = self._heads[key]
                if n == 1:
                    del self._heads[key]
                else:
                    self._heads[key] = (head, n - 1)

    def get(self, table: TableHandle, version: int) -> Head:
        with self._lock:
            held = self._heads.get(self._key(table, version))
        return held[0] if held is not None else Head.of(table.state(version), table.name)


PINNED = PinnedHeads()
"""This process's pinned heads (``dump_table`` pins, ``run_dump_task`` reads)."""
