"""Counting what an operation asks of a table's log: the seam behind tests/state/test_head_reads.py
(and a quick measurement anywhere: ``with count_state_reads() as n: ...; print(n)``).

Each log entry read is a GET (on S3 a round trip), and each ``StateStore.head()`` that refreshes
probes the log with at least a GET and an existence check; an operation that reads the head once
and passes its state down makes a fixed, small number of both, whatever its size.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from sediment.errors import ObjectNotFoundError
from sediment.state.store import StateStore
from sediment.storage.base import ObjectInfo
from sediment.storage.memory import MemoryObjectStore

_LOG_ENTRY = re.compile(r"(^|/)log/\d+")


@dataclass
class StateReads:
    """What the state of the tables was asked for while counting."""

    head_calls: int = 0
    """Calls of ``StateStore.head`` (each re-reads the log's tail unless ``refresh=False``)."""
    log_entries_read: int = 0
    """Log entries fetched (a GET that found one)."""
    log_misses: int = 0
    """GETs of a log slot that held nothing (the probe past the head)."""
    log_checks: int = 0
    """Existence checks and listings of log entries."""

    @property
    def log_reads(self) -> int:
        """GETs of log slots: entries read and empty slots probed (each a round trip)."""
        return self.log_entries_read + self.log_misses

    def reset(self) -> None:
        self.head_calls = self.log_entries_read = self.log_misses = self.log_checks = 0


class CountingMemoryStore(MemoryObjectStore):
    """A memory object store that counts the reads of log entries in ``reads`` (every table's
    folder is a prefixed view of it, so their keys pass through here whole)."""

    def __init__(self, name: str = "", reads: StateReads | None = None) -> None:
        super().__init__(name)
        self.reads = reads if reads is not None else StateReads()
        self._count_lock = threading.Lock()

    def _bump(self, field: str) -> None:
        with self._count_lock:
            setattr(self.reads, field, getattr(self.reads, field) + 1)

    def get(self, key: str) -> bytes:
        if not _LOG_ENTRY.search(key):
            return super().get(key)
        try:
            data = super().get(key)
        except ObjectNotFoundError:
            self._bump("log_misses")
            raise
        self._bump("log_entries_read")
        return data

    def head(self, key: str) -> ObjectInfo | None:
        if _LOG_ENTRY.search(key):
            self._bump("log_checks")
        return super().head(key)

    def list(self, prefix: str, *, start_after: str | None = None) -> Iterator[ObjectInfo]:
        if prefix.endswith("log/"):
            self._bump("log_checks")
        return super().list(prefix, start_after=start_after)


@contextmanager
def count_head_calls(reads: StateReads) -> Iterator[StateReads]:
    """Count every ``StateStore.head`` call (of any table) into ``reads`` meanwhile."""
    original = StateStore.head
    lock = threading.Lock()

    def head(self: StateStore, *args: Any, **kwargs: Any) -> Any:
        with lock:
            reads.head_calls += 1
        return original(self, *args, **kwargs)

    StateStore.head = head  # type: ignore[method-assign]
    try:
        yield reads
    finally:
        StateStore.head = original  # type: ignore[method-assign]
