"""Encoding one Parquet file on several threads: its row groups as parts, joined in order.

pyarrow's Parquet writer encodes on the calling thread, and encoding is most of a small
ingest's time (50k rows of the benchmark schema: ~25 ms of ~45). A :class:`PartEncoder` takes
runs of whole row groups in file order, encodes each as a part (a Parquet file of its own, the
same schema and options) on a thread of a pool shared by the process, and writes each part's
row groups in order as it is done (:class:`sediment.files.stitch.Stitcher`): the file is what
one writer would have written, byte for byte, while two cores encode it. Memory stays bounded:
at most :data:`IN_FLIGHT` parts wait to be written.
"""

from __future__ import annotations

import contextlib
import os
from collections import deque
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.parquet as pq

from sediment.errors import PropertyError
from sediment.files.parquet_meta import MAGIC
from sediment.files.stitch import Stitcher
from sediment.pools import shared_pool

ENCODE_THREADS_ENV = "SEDIMENT_ENCODE_THREADS"
"""Environment variable: threads that encode one small file (default 1: one writer)."""


def encode_threads() -> int:
    """``$SEDIMENT_ENCODE_THREADS``: how many threads encode one small file (see
    :data:`PARALLEL_MAX_ROWS`); 1 (the default) streams every file through one writer.
    PropertyError naming the variable when it is not a whole number >= 1.

    Off by default because it paid only where a core is free: on a shared 2-core machine
    (load 3-7) a 50k-row ingest took p50 64 ms in two parts against 43 ms through one writer,
    each part's encoding slowed from ~12 to ~30 ms by the other threads and processes (see
    ``docs/performance.md``)."""
    raw = os.environ.get(ENCODE_THREADS_ENV, "").strip()
    if not raw:
        return 1
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise PropertyError(f"${ENCODE_THREADS_ENV} must be a whole number of threads >= 1, "
                            f"not {raw!r}")
    return value

IN_FLIGHT = 4
"""Parts submitted and not yet written, at most (a file has as many parts as the pool has
threads, unless it holds more rows than its writer was told)."""


def _encoders(threads: int) -> ThreadPoolExecutor:
    """The process's ``threads`` encoding threads (sediment.pools: kept, fork-safe)."""
    return shared_pool(f"encode-{threads}", threads)


def encode(table: pa.Table, schema: pa.Schema, options: Mapping[str, Any],
           row_group_rows: int) -> pa.Buffer:
    """``table`` as one Parquet file in memory, in row groups of ``row_group_rows``."""
    out = pa.BufferOutputStream()
    with pq.ParquetWriter(out, schema, **options) as writer:
        if table.num_rows:
            writer.write_table(table, row_group_size=row_group_rows)
    return out.getvalue()


class Encoder(Protocol):
    """How a writer's row groups become a file's bytes: ``add`` whole row groups in file
    order (the last call's last group may be short), then ``finish``."""

    def add(self, table: pa.Table) -> None: ...

    def finish(self, mark: Callable[[], None]) -> None:
        """Write the rest of the file, calling ``mark`` just before what follows the row
        groups (the page index and footer)."""

    def abort(self) -> None: ...


class StreamEncoder:
    """One ParquetWriter encoding into ``out`` on the writer's thread, as the rows come: for
    files of any size (compaction output, large ingests, whose other steps keep the second
    core busy already)."""

    def __init__(self, schema: pa.Schema, options: Mapping[str, Any], row_group_rows: int,
                 out: pa.NativeFile) -> None:
        self.row_group_rows = row_group_rows
        self._writer = pq.ParquetWriter(out, schema, **options)

    def add(self, table: pa.Table) -> None:
        self._writer.write_table(table, row_group_size=self.row_group_rows)

    def finish(self, mark: Callable[[], None]) -> None:
        mark()
        self._writer.close()

    def abort(self) -> None:
        with contextlib.suppress(OSError, pa.ArrowException):
            self._writer.close()


PARALLEL_MAX_ROWS = 262_144
"""With :func:`encode_threads` above 1, files expected to hold at most this many rows are
encoded in parts on the pool (:class:`PartEncoder`): a small ingest's encoding is most of
its time (50k rows: ~25 ms on one thread). Larger files stream through one writer
(:class:`StreamEncoder`): joining parts costs ~40 us of Python per column chunk, and a large
ingest's gathering and key filters run beside its encoding already."""


def encoder_for(schema: pa.Schema, options: Mapping[str, Any], row_group_rows: int,
                out: pa.NativeFile, rows_hint: int | None) -> Encoder:
    """The encoder for a file of at most ``rows_hint`` rows (None: unknown). A file of one
    row group is one part anyway: it streams (no thread, nothing to join)."""
    threads = encode_threads()
    if threads > 1 and rows_hint is not None and \
            row_group_rows < rows_hint <= PARALLEL_MAX_ROWS:
        return PartEncoder(schema, options, row_group_rows, out.write, rows_hint,
                           threads=threads)
    return StreamEncoder(schema, options, row_group_rows, out)


class PartEncoder:
    """Encodes a file's row groups on the pool and hands its bytes to ``write`` in order
    (see the module). ``add`` whole row groups (the last call's last group may be short),
    then ``finish``. A file of ``rows`` rows is cut into as many parts as the pool has
    threads (whole row groups each): one part per thread costs the fewest writers' set-ups
    and footers to join, and the threads end together."""

    def __init__(self, schema: pa.Schema, options: Mapping[str, Any], row_group_rows: int,
                 write: Callable[[Any], Any], rows: int, *, threads: int = 2) -> None:
        self.schema = schema
        self.options = dict(options)
        self.row_group_rows = row_group_rows
        groups = -(-max(1, rows) // row_group_rows)
        self.threads = threads
        self.part_rows = row_group_rows * -(-groups // threads)
        """Rows of each part but the last (whole row groups)."""
        self._write = write
        self._joined = Stitcher()
        self._pending: list[pa.Table] = []
        self._pending_rows = 0
        self._waiting: deque[Future[pa.Buffer]] = deque()
        self._started = False
        """Whether the file's first bytes (the magic) were written."""

    def add(self, table: pa.Table) -> None:
        """Take ``table`` (whole row groups, in file order): each part's worth is encoded on
        the pool as soon as it is here."""
        self._pending.append(table)
        self._pending_rows += table.num_rows
        if self._pending_rows >= self.part_rows:
            self._submit(final=False)

    def _submit(self, *, final: bool) -> None:
        if not self._pending_rows:
            return
        rows = pa.concat_tables(self._pending)
        start = 0
        while rows.num_rows - start >= self.part_rows or (final and start < rows.num_rows):
            self._waiting.append(_encoders(self.threads).submit(
                encode, rows.slice(start, self.part_rows), self.schema, self.options,
                self.row_group_rows))
            start += self.part_rows
            self._drain(len(self._waiting) > IN_FLIGHT)
        rest = rows.slice(start)
        self._pending = [rest] if rest.num_rows else []
        self._pending_rows = rest.num_rows

    def _drain(self, wait: bool, *, every: bool = False) -> None:
        """Write the parts done at the head of the queue (waiting for the oldest with
        ``wait``, for all with ``every``)."""
        while self._waiting and (wait or every or self._waiting[0].done()):
            part = self._waiting.popleft().result()
            if not self._started:
                self._write(MAGIC)
                self._started = True
            self._write(self._joined.add(memoryview(part)))
            wait = False

    def finish(self, mark: Callable[[], None]) -> None:
        """Write every part's row groups, then (after ``mark``) what ends the file: its bloom
        filters, page index and footer (the whole file when it has no rows)."""
        self._submit(final=True)
        self._drain(False, every=True)
        if not self._started:
            mark()
            self._write(encode(self.schema.empty_table(), self.schema, self.options,
                               self.row_group_rows))
            return
        tail = self._joined.finish()
        mark()
        self._write(tail)

    def abort(self) -> None:
        """Drop the parts not written (those encoding finish unseen)."""
        for f in self._waiting:
            f.cancel()
        self._waiting.clear()
