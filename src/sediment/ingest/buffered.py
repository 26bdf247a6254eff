"""The buffered writer: many small writes, one sorted set of files and one commit per flush.

``Table.writer(max_rows=..., max_bytes=..., max_seconds=...)`` returns a
:class:`BufferedWriter`. ``write(data)`` validates the records against the table's schema
(bad records raise there, naming the table, field and row) and buffers them; a background
thread flushes the buffer once it holds ``max_rows`` rows or ``max_bytes`` bytes, or its
oldest write is ``max_seconds`` old. A flush stages every buffered write as one ingest (one
sort, one file per touched leaf) and commits it as ONE transaction, with the idempotency
keys of its keyed writes (:func:`sediment.ingest.keyed.commit_staged_keyed`: all of them
recorded with that commit, exactly once).

What is acknowledged: ``write`` returns once the records are buffered, not committed;
``flush()`` and ``close()`` return once everything written before them is committed, with
the versions committed since the last of them returned (background flushes included), and
raise what a background flush hit (its writes are not committed: retry them, with their
keys to be safe). Nothing is reported committed that is not.

Bounded memory: at most ``max_bytes`` wait in the buffer while another ``max_bytes`` (the
buffer being flushed) is staged. A ``write`` that would take the buffer past ``max_bytes``
**blocks** until the buffer is taken by a flush (at once, or once the running flush ends):
back-pressure on the producer, never an unbounded queue; a single write larger than
``max_bytes`` is taken alone.

Flushes run one at a time, in write order, so records of equal keys keep the order they
were written in (ordered by commit, then position within one commit). A keyed write whose
key the table already recorded for the same records is dropped at ``write`` (a retry after
a flush: not written twice); for other records it raises IdempotencyKeyReusedError there.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any

from sediment.core.head import schema_of
from sediment.core.transactions import KeyedWrite
from sediment.errors import DataError, IdempotencyKeyReusedError
from sediment.ingest.group import Write, commit_writes
from sediment.ingest.idempotency import PayloadHash, check_key
from sediment.ingest.keyed import index_of
from sediment.ingest.sources import IngestInput, conform, iter_input

if TYPE_CHECKING:
    from sediment.handle import TableHandle


class BufferedWriter:
    """Buffers small writes to one table and commits them in flushes (see the module). Use
    it as a context manager: leaving the block closes it (flushing what is left)."""

    def __init__(self, table: TableHandle, *, max_rows: int = 100_000,
                 max_bytes: int = 64 << 20, max_seconds: float = 1.0) -> None:
        if max_rows < 1 or max_bytes < 1 or not max_seconds > 0:
            raise DataError(f"writer of table {table.name}: max_rows, max_bytes and "
                            f"max_seconds must be positive")
        self.table = table
        self.max_rows, self.max_bytes, self.max_seconds = max_rows, max_bytes, max_seconds
        head = table.states.cached_head()
        schema_of(head, table.name)  # a table without a schema yet fails here, not at write
        self._index = index_of(table, head)  # the key window, read once
        self._cond = threading.Condition()
        self._buffer: list[Write] = []
        self._rows = self._bytes = 0
        self._oldest: float | None = None
        self._keys: dict[str, str] = {}  # buffered keys -> payloads
        self._flushing = False
        self._blocked = 0  # writers waiting for room
        self._closed = False
        self._versions: list[int] = []
        self._errors: list[BaseException] = []
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name=f"sediment-writer-{table.name}")
        self._thread.start()

    # ---- writing --------------------------------------------------------------------------
    def write(self, data: IngestInput, *, idempotency_key: str | None = None) -> None:
        """Validate and buffer ``data`` (what ``Table.ingest`` takes); returns once it is
        buffered (committed by a later flush). Blocks while the buffer is full and a flush
        runs. Raises DataError for records that do not fit the schema,
        IdempotencyKeyReusedError for a key used for other records."""
        name = self.table.name
        # the table's schema now (a column added, renamed or dropped since the writer was
        # opened is written as the table has it; a flush reshapes what waited across one)
        schema = schema_of(self.table.states.cached_head(), name)
        batches, rows, offset = [], 0, 0
        hasher = PayloadHash("ingest") if idempotency_key is not None else None
        for b in iter_input(data, name):
            checked = conform(b, schema, name, offset)
            offset += b.num_rows
            if checked.num_rows:
                batches.append(checked)
                rows += checked.num_rows
                if hasher is not None:
                    hasher.update(b)
        key = None
        if idempotency_key is not None and hasher is not None:
            check_key(name, idempotency_key)
            key = KeyedWrite(idempotency_key, hasher.hexdigest(), rows)
            if self._already_committed(key):
                return
        size = sum(b.nbytes for b in batches)
        with self._cond:
            self._raise_if_closed()
            if key is not None:
                held = self._keys.get(key.key)
                if held is not None:
                    if held != key.payload:
                        raise IdempotencyKeyReusedError(
                            f"table {name}: idempotency key {key.key!r} is already buffered "
                            f"in this writer for a different payload")
                    return  # the same write, buffered already
            while self._bytes and self._bytes + size > self.max_bytes:
                self._blocked += 1  # back-pressure: the buffer is full; wait until it is
                try:                # taken (once the running flush ends)
                    self._cond.notify_all()
                    self._cond.wait()
                finally:
                    self._blocked -= 1
                self._raise_if_closed()
            if not rows:
                return
            self._buffer.append(Write(batches, rows, key, schema=schema))
            if key is not None:
                self._keys[key.key] = key.payload
            self._rows += rows
            self._bytes += size
            if self._oldest is None:
                self._oldest = time.monotonic()
            self._cond.notify_all()

    def _already_committed(self, key: KeyedWrite) -> bool:
        """Whether the table recorded ``key`` for these records (IdempotencyKeyReusedError
        for other records)."""
        record = self._index.get(key.key)
        if record is None:
            return False
        record.check(self.table.name, key.payload)
        return record.version is not None

    def _raise_if_closed(self) -> None:
        if self._closed:
            raise DataError(f"writer of table {self.table.name} is closed")

    # ---- flushing -------------------------------------------------------------------------
    def _full(self) -> bool:
        return self._rows >= self.max_rows or self._bytes >= self.max_bytes \
            or self._blocked > 0

    def _take(self) -> list[Write]:
        """The buffer, emptied (called holding the condition, no flush running)."""
        taken, self._buffer = self._buffer, []
        self._rows = self._bytes = 0
        self._oldest = None
        self._keys = {}
        self._flushing = True
        self._cond.notify_all()  # writers blocked on a full buffer go on
        return taken

    def _run(self) -> None:
        while True:
            with self._cond:
                while True:
                    if self._closed:
                        return
                    if self._buffer and not self._flushing:
                        assert self._oldest is not None
                        due = self._oldest + self.max_seconds - time.monotonic()
                        if self._full() or due <= 0:
                            break
                        self._cond.wait(due)
                    else:
                        self._cond.wait()
                writes = self._take()
            self._commit(writes)

    def _commit(self, writes: list[Write]) -> None:
        """Commit ``writes`` (taken from the buffer) as one transaction; its version, or
        its error, is kept for the next flush()/close()."""
        try:
            version = self._commit_once(writes)
            with self._cond:
                if version is not None:
                    self._versions.append(version)
        except BaseException as e:  # noqa: BLE001 - raised by the next flush() or close()
            with self._cond:
                self._errors.append(e)
        finally:
            with self._cond:
                self._flushing = False
                self._cond.notify_all()

    def _commit_once(self, writes: list[Write]) -> int | None:
        """One transaction (:func:`~sediment.ingest.group.commit_writes`); its version (keyed
        writes an earlier commit already holds are not written again)."""
        results = commit_writes(self.table, writes)
        return max(r.version for r in results) if results else None

    def flush(self) -> list[int]:
        """Commit everything written so far; returns the versions committed since the last
        flush() or close() returned (background flushes' too: none when nothing was
        written). Raises what a flush hit since then (those writes are not committed)."""
        with self._cond:
            while self._flushing:
                self._cond.wait()
            writes = self._take() if self._buffer else None
            if writes is None:
                return self._report()
        self._commit(writes)
        with self._cond:
            return self._report()

    def _report(self) -> list[int]:
        """The versions and first error kept since the last report (holding the
        condition), then forgotten."""
        versions, self._versions = self._versions, []
        if self._errors:
            error, self._errors = self._errors[0], []
            raise error
        return versions

    def close(self) -> list[int]:
        """Flush, then stop the background thread; returns and raises as :meth:`flush`.
        Writes after it are refused."""
        if self._closed:
            return []
        try:
            return self.flush()
        finally:
            with self._cond:
                self._closed = True
                self._cond.notify_all()
            self._thread.join()

    def __enter__(self) -> BufferedWriter:
        return self

    def __exit__(self, kind: Any, error: Any, traceback: Any) -> None:
        self.close()
