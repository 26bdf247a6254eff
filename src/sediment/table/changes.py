"""A table's record-level change feed and following it live (part of the
:class:`~sediment.table.Table` façade).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from sediment.errors import QueryError
from sediment.table.reads import TableReads
from sediment.table.versions import TableVersions

if TYPE_CHECKING:
    from sediment.query.request import ReadRequest


class TableChanges(TableReads, TableVersions):
    """changes, changes_of, follow (the feed reads through prepare; a follower pins)."""

    def changes(self, start_version: int | str, end_version: int | str | None = None, *,
                columns: Sequence[str] | None = None,
                filter: Any = None) -> pa.RecordBatchReader:  # noqa: A002 (the public name)
        """The record changes committed in versions ``(start_version, end_version]`` (numbers
        or tags; ``end_version`` None: the head now), streamed one version at a time, in
        commit order: so ``changes(a, b)`` then ``changes(b, c)`` is ``changes(a, c)``.

        Each row is a record of the table, shaped by the end version's schema, followed by
        ``_change_type`` (``insert``, ``update_preimage``, ``update_postimage``, ``delete``),
        ``_commit_version`` and ``_commit_timestamp`` (``timestamp[ms, tz=UTC]``). What each
        kind of commit yields: sediment.query.changes and docs/howto/streams.md. ``columns``
        picks output columns (the change columns among them); ``filter`` (an expression or
        ``--where`` text, which may name the change columns) keeps rows.

        Raises QueryError: an unknown version, tag or column, a start after the end;
        VersionExpiredError: a start version whose log was pruned (past ``retention.seconds``,
        unpinned), at the call, or, while reading, a version whose files GC collected (an
        onward pin, ``pin(..., onward=True)``, keeps them); SchemaError: a table column
        named like a change column.
        """
        from sediment.query.changes import reader_of

        feed, pairs = self._change_feed(start_version, end_version, columns, filter)
        return reader_of(feed.out_schema, pairs)

    def changes_of(self, request: ReadRequest) -> pa.RecordBatchReader:
        """:meth:`changes` of a changes request (``ReadRequest(changes={"from": V, "to": W},
        columns=..., filter=...)``: what the Flight service and ``sediment query --request``
        take). Raises BadRequestError for a request that is not one, then as :meth:`changes`."""
        start, end = request.changes_range()
        return self.changes(start, end, columns=request.columns, filter=request.filter)

    def _change_feed(self, start_version: int | str, end_version: int | str | None,
                     columns: Sequence[str] | None, filter: Any,  # noqa: A002
                     ) -> tuple[Any, Iterator[tuple[int, pa.Table]]]:
        """The feed of ``changes`` and its (version, rows) pairs, versions read as asked."""
        a = self.resolve_version(start_version)
        b = self.resolve_version(end_version) if end_version is not None else None
        assert a is not None
        return self._changes.between(a, b, columns, filter)

    @property
    def _changes(self) -> Any:
        from sediment.query.change_source import ChangeSource

        return ChangeSource(self.name, self._handle.states, self._prepare_at)

    def follow(self, start_version: int | str | None = None, *, poll_seconds: float = 1.0,
               columns: Sequence[str] | None = None, filter: Any = None,  # noqa: A002
               pin: str | None = None, pin_ttl_seconds: float = 3600.0,
               stop: threading.Event | None = None
               ) -> Iterator[tuple[int, pa.RecordBatchReader]]:
        """Follow the table live: ``(version, reader)`` for each version committed after
        ``start_version`` (None: after the head at the call), one whole version at a time,
        in commit order, each exactly once; the reader streams its change rows as
        :meth:`changes` gives them, shaped by that version's schema (a version that changed
        no record gives an empty reader). The log is polled every ``poll_seconds``.

        A follower that records the last version it handled resumes after a restart with
        ``follow(that_version)``. ``pin``: a pin name the follower holds, onward, on the last
        version it finished (renewed for ``pin_ttl_seconds`` at each), so GC and prune keep
        what it still needs to read while it is down for less than that. ``stop``: an event that
        ends the loop (after the version being handled).

        Raises as :meth:`changes`."""
        a = self.resolve_version(start_version) if start_version is not None else self.version
        if a is None or not 0 <= a <= self.version:
            raise QueryError(f"table {self.name} has no version {start_version} to follow from")
        if pin is not None and a:
            self.pin(pin, a, pin_ttl_seconds, onward=True)

        def handled(v: int) -> None:
            if pin is not None:
                self.pin(pin, v, pin_ttl_seconds, onward=True)

        yield from self._changes.follow(a, poll_seconds, handled, stop, columns, filter)
