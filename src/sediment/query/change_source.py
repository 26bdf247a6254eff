"""One table's change feed wired to its log and its reads: the ranges ``Table.changes`` reads,
and the loop ``Table.follow`` runs.

The façade resolves versions and tags; this module opens the state at the start (an expired
one refused as :func:`~sediment.query.expiry.load_version` refuses it), reads each state the
feed asks for through the table's own read path (``prepare_at``: the plan, the old-version
check of files GC collected, the executor), and walks the log.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pyarrow as pa

from sediment.core.state import TableState, schema_in_force
from sediment.errors import QueryError
from sediment.iterators.base import AgeOff, RowFilter
from sediment.query.changes import ChangeFeed
from sediment.query.expiry import load_version
from sediment.query.prepare import table_iterators
from sediment.query.request import ReadRequest
from sediment.query.scan import Scan
from sediment.schema import Schema
from sediment.state.log import LogEntry
from sediment.state.store import StateStore


class ChangeSource:
    """The change feed of table ``name``: its log in ``states``; ``prepare_at(state,
    request)`` plans a read of a state as the table plans every read."""

    def __init__(self, name: str, states: StateStore,
                 prepare_at: Callable[[TableState, ReadRequest], Scan]) -> None:
        self.name, self.states, self._prepare_at = name, states, prepare_at

    def between(self, a: int, b: int | None, columns: Sequence[str] | None, filter: Any,  # noqa: A002
                ) -> tuple[ChangeFeed, Iterator[tuple[int, pa.Table]]]:
        """The feed of versions ``(a, b]`` (``b`` None: the head now), shaped by ``b``'s
        schema, and its (version, rows) pairs, read lazily in commit order."""
        head = self.states.head()
        b = head.version if b is None else b
        for what, v in (("start", a), ("end", b)):
            if not 0 <= v <= head.version:
                raise QueryError(f"table {self.name} has no version {v} for the {what} of "
                                 f"its changes (versions 0..{head.version})")
        if a > b:
            raise QueryError(f"table {self.name}: changes from version {a} to {b}: the start "
                             f"is after the end (the changes of versions {b + 1}..{a} are "
                             f"changes({b}, {a}))")
        target = schema_in_force(head.schemas, b) or head.schema
        assert target is not None
        feed, start = self.feed(a, target, columns, filter)
        entries = self.states.log.read_after(a, upto=b) if b > a else iter(())
        return feed, feed.batches(entries, start, self.states.heads.replay)

    def feed(self, a: int, target: Schema | None, columns: Sequence[str] | None,
             filter: Any) -> tuple[ChangeFeed, TableState]:  # noqa: A002
        """A feed reading versions after ``a`` (rows shaped by ``target``, None: each
        version's own schema) and the state at ``a`` (VersionExpiredError when it, or the log
        after it, was pruned)."""
        states = self.states
        if a > 0:
            start = load_version(states, self.name, a)
        else:
            if states.earliest_version() > 1:
                load_version(states, self.name, 1)  # VersionExpiredError: its log was pruned
            start = TableState(states.head(refresh=False).table_id, self.name)
        return ChangeFeed(self.name, target, self._read, self._record_by_record,
                          columns=columns, filter=filter), start

    def _read(self, state: TableState, *, keys: Any = None, ranges: Any = None,
              filter: Any = None, columns: Any = None, raw: bool = False  # noqa: A002
              ) -> pa.Table:
        if state.schema is None:
            return pa.table({})
        # the block cache as for any read of keys or ranges: a commit's lookups often
        # share pages, and the cache admits them on probation (scan-resistant)
        request = ReadRequest(keys=keys, ranges=ranges, filter=filter, columns=columns,
                              version=state.version, raw=raw)
        return self._prepare_at(state, request).to_arrow()

    def _record_by_record(self, state: TableState) -> bool:
        return state.schema is None or all(
            isinstance(it, AgeOff | RowFilter) for it in table_iterators(state, self.name))

    def follow(self, a: int, poll_seconds: float, handled: Callable[[int], None],
               stop: threading.Event | None, columns: Sequence[str] | None, filter: Any,  # noqa: A002
               ) -> Iterator[tuple[int, pa.RecordBatchReader]]:
        """:func:`follow` of this table's feed from version ``a``."""
        feed, start = self.feed(a, None, columns, filter)
        states = self.states
        return follow(feed, start, lambda: states.head().version,
                      lambda lo, hi: states.log.read_after(lo, upto=hi),
                      states.heads.replay, poll_seconds, handled, stop)


def follow(feed: ChangeFeed, start: TableState, head_version: Callable[[], int],
           entries_after: Callable[[int, int], Iterator[LogEntry]],
           replay: Callable[[TableState, LogEntry], None], poll_seconds: float,
           handled: Callable[[int], None], stop: threading.Event | None
           ) -> Iterator[tuple[int, pa.RecordBatchReader]]:
    """(version, reader of its change rows) for each version after ``start``, as they are
    committed, in order, each once: the log is polled every ``poll_seconds`` (stopping
    when ``stop`` is set). ``handled(v)`` is called once the caller asked for the next
    version after ``v``, i.e. finished with ``v`` (a follower's pin moves there)."""
    state = start
    waiting = stop or threading.Event()
    while not waiting.is_set():
        head = head_version()
        if head <= state.version:
            waiting.wait(poll_seconds)
            continue
        for entry in entries_after(state.version, head):
            after = state.copy()
            replay(after, entry)
            rows = feed.commit_changes(entry, state, after)
            state = after
            yield entry.version, pa.RecordBatchReader.from_batches(rows.schema,
                                                                   rows.to_batches())
            handled(entry.version)
            if waiting.is_set():
                return
