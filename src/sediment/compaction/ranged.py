"""Reading a compaction input in place on S3: large coalesced ranged GETs, one block ahead.

Each GET to an object store costs a round trip (tens of milliseconds on S3, a few on a loopback
server) whatever its size, and Sediment's row groups are small (``parquet.row_group_rows``, 4096
rows by default, for exact-key reads): a reader fetching one row group at a time makes hundreds of
requests per file and waits on each. Here an input is read as a sequence of *blocks*: runs of
consecutive row groups whose bytes are contiguous in the file, up to ``block_bytes`` each, each
fetched with one ranged GET (the coalescing AutoMQ's compaction does for the segments of one
iteration) on a background thread while the previous block is decoded. Row groups whose key
statistics rule out the job's region are never fetched (a reference pushed down after a split
reads only its part of the file). Memory per input: two blocks plus one decoded row group.

Pages are verified (their CRCs) as they are decoded; a run of row groups that fails is decoded
again from its block fetched afresh (a ranged GET may have been handed bad bytes once), then
raises CorruptDataError naming the table and the file: the job fails and commits nothing.
"""

from __future__ import annotations

import functools
import io
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from sediment.core.prefetch import prefetched
from sediment.core.regions import Region
from sediment.errors import CorruptMetadataError, ObjectNotFoundError, StorageError
from sediment.files.columns import IDENTITY, ColumnMap, conform
from sediment.files.sequence import SEQ, SEQ_FIELD
from sediment.files.verified import READS, VERIFY, Sums, damaged, footer_problem, reading
from sediment.schema import Schema
from sediment.storage.base import ObjectStore

MIN_BLOCK_BYTES = 1 << 20
MAX_BLOCK_BYTES = 16 << 20
FETCH_ATTEMPTS = 4
"""Tries of one ranged read: the SDK retries a failed request, not a connection reset while
the body streams in; a read is idempotent, so it is simply read again."""
FOOTER_GUESS = 64 * 1024
"""Bytes read from a file's end at first: the footer of a Sediment file fits (else a second
read fetches the rest)."""


def fetch_range(objects: ObjectStore, key: str, start: int, end: int) -> bytes:
    """``objects.get_range`` read again (after 0.1, 0.2, 0.4 s) when the store fails."""
    for attempt in range(FETCH_ATTEMPTS):
        try:
            return objects.get_range(key, start, end)
        except ObjectNotFoundError:
            raise
        except StorageError:
            if attempt == FETCH_ATTEMPTS - 1:
                raise
            time.sleep(0.1 * 2**attempt)
    raise AssertionError("unreachable")


def read_footer(objects: ObjectStore, key: str, size: int, sums: Sums | None = None,
                table: str = "") -> pq.FileMetaData:
    """The Parquet footer of object ``key`` (``size`` bytes) from one or two ranged reads of
    its end; CorruptMetadataError when it is no Parquet file. With the file's ``sums`` the
    size and the footer's CRC-32 are checked, read again once, then CorruptDataError."""
    for attempt in range(READS if sums is not None else 1):
        tail = _tail(objects, key, size)
        problem = footer_problem(tail, size, sums)
        if problem is None:
            break
        if attempt == READS - 1:
            raise damaged(table, key, objects.uri, OSError(problem))
    try:
        return pq.read_metadata(pa.BufferReader(tail))
    except (pa.ArrowInvalid, OSError) as e:
        raise CorruptMetadataError(f"{key} in {objects.uri} is not valid Parquet: {e}") from e


def _tail(objects: ObjectStore, key: str, size: int) -> bytes:
    """The last bytes of object ``key`` holding its whole footer (when it is Parquet)."""
    tail = fetch_range(objects, key, max(0, size - FOOTER_GUESS), size)
    if len(tail) < 12 or tail[-4:] != b"PAR1":
        raise CorruptMetadataError(f"{key} in {objects.uri} is not valid Parquet: no footer")
    length = int.from_bytes(tail[-8:-4], "little")
    if length + 8 > size:
        raise CorruptMetadataError(f"{key} in {objects.uri} is not valid Parquet: footer of "
                                   f"{length} bytes in a file of {size}")
    if length + 8 > len(tail):
        tail = fetch_range(objects, key, size - length - 8, size)
    return tail


def block_bytes(memory_limit: int, inputs: int) -> int:
    """The block size for a merge of ``inputs`` streams within ``memory_limit``: each input
    holds two blocks and their decoded row groups (a few times the bytes), so an eighth of
    its share, between 1 and 16 MiB."""
    share = memory_limit // max(1, 8 * inputs)
    return max(MIN_BLOCK_BYTES, min(MAX_BLOCK_BYTES, share))


def _group_span(md: pq.FileMetaData, g: int) -> tuple[int, int]:
    """The byte range ``[start, end)`` of row group ``g``'s column chunks."""
    rg = md.row_group(g)
    start, end = None, 0
    for c in range(rg.num_columns):
        col = rg.column(c)
        first = col.dictionary_page_offset if col.has_dictionary_page else col.data_page_offset
        if first is None or (col.has_dictionary_page and col.dictionary_page_offset == 0):
            first = col.data_page_offset
        start = first if start is None else min(start, first)
        end = max(end, first + col.total_compressed_size)
    return start or 0, end


def wanted_groups(md: pq.FileMetaData, first_key: str, region: Region | None) -> list[int]:
    """The row groups whose first-key statistics may hold a row of ``region`` (a superset:
    the exact region filter runs on the merged stream)."""
    groups = list(range(md.num_row_groups))
    if region is None or (region.min is None and region.max is None):
        return groups
    idx = md.schema.to_arrow_schema().get_field_index(first_key)
    if idx < 0:
        return groups
    lo = None if region.min is None else region.min[0]
    hi = None if region.max is None else region.max[0]
    out = []
    for g in groups:
        st = md.row_group(g).column(idx).statistics
        if st is None or not st.has_min_max:
            out.append(g)
            continue
        if lo is not None and st.max < lo:
            continue
        if hi is not None and st.min > hi:
            continue
        out.append(g)
    return out


@dataclass(frozen=True, slots=True)
class _Block:
    start: int
    groups: list[int]
    data: bytes


def _plan_blocks(md: pq.FileMetaData, groups: list[int], limit: int) -> list[tuple[int, int,
                                                                                  list[int]]]:
    """``(start, end, groups)`` of each block: consecutive wanted row groups with contiguous
    bytes, at most ``limit`` bytes (or one row group, if larger)."""
    blocks: list[tuple[int, int, list[int]]] = []
    for g in groups:
        s, e = _group_span(md, g)
        if blocks:
            bs, be, bg = blocks[-1]
            if bg[-1] == g - 1 and s == be and e - bs <= limit:
                blocks[-1] = (bs, e, [*bg, g])
                continue
        blocks.append((s, e, [g]))
    return blocks


class _Window(io.RawIOBase):
    """A read-only file that holds only one block of the object's bytes (at its offset) and
    reports the object's size: enough for a ParquetFile given the footer to read that block's
    row groups."""

    def __init__(self, size: int, block: _Block) -> None:
        self._size, self._block, self._pos = size, block, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, pos: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        self._pos = base + pos
        return self._pos

    def read(self, n: int = -1) -> bytes:
        b = self._block
        lo = self._pos - b.start
        if lo < 0 or lo > len(b.data):
            raise OSError(f"read at {self._pos} outside the fetched block "
                          f"[{b.start}, {b.start + len(b.data)})")
        hi = len(b.data) if n is None or n < 0 else min(len(b.data), lo + n)
        self._pos += hi - lo
        return b.data[lo:hi]


def read_in_place(objects: ObjectStore, filename: str, md: pq.FileMetaData, size: int,
                  schema: Schema, region: Region | None, sequence: int, has_sequence: bool,
                  limit: int, batch_rows: int, table: str = "",
                  cmap: ColumnMap = IDENTITY) -> Iterator[pa.RecordBatch]:
    """The records of one input (the job's columns and the resolved sequence column), in file
    order, fetched block by block one block ahead; a run of row groups failing its page CRCs
    is decoded again from its block fetched afresh, then CorruptDataError (``table``: the
    table's name, for it). ``cmap``: how the job's schema is read from this file (written
    under another schema: sediment.files.columns)."""
    groups = wanted_groups(md, schema.row_key_names[0], region)
    plan = _plan_blocks(md, groups, limit)

    def fetch() -> Iterator[_Block]:
        for start, end, gs in plan:
            yield _Block(start, gs, fetch_range(objects, filename, start, end))

    arrow = schema.to_arrow().append(SEQ_FIELD)
    user = schema.to_arrow()
    names = arrow.names if has_sequence else user.names
    columns = cmap.file_columns(names)
    for block in prefetched(fetch(), depth=1, name="compaction-fetch"):
        opened = [pq.ParquetFile(_Window(size, block), metadata=md, **VERIFY)]

        def decode(run: list[int], attempt: int, block: _Block = block,
                   opened: list[pq.ParquetFile] = opened) -> pa.Table:
            if attempt:  # the block fetched afresh: nothing of the first read is reused
                start, end = block.start, block.start + len(block.data)
                again = _Block(start, block.groups, fetch_range(objects, filename, start, end))
                opened[0] = pq.ParquetFile(_Window(size, again), metadata=md, **VERIFY)
            return conform(opened[0].read_row_groups(run, columns=columns, use_threads=False),
                           cmap, names, user)

        # decoded a run of row groups at a time, about ``batch_rows`` rows: one call and one
        # merge batch for many small row groups, memory bounded by the run
        run: list[int] = []
        rows = 0
        for g in [*block.groups, None]:
            if g is not None:
                run.append(g)
                rows += md.row_group(g).num_rows
            if run and (g is None or rows >= batch_rows):
                t = reading(table, filename, objects.uri,
                            functools.partial(decode, run)).combine_chunks()
                for b in t.to_batches(max_chunksize=max(batch_rows, rows)):
                    yield _with_sequence(b, arrow, sequence, has_sequence)
                run, rows = [], 0


def _with_sequence(b: pa.RecordBatch, arrow: pa.Schema, sequence: int,
                   has_sequence: bool) -> pa.RecordBatch:
    """``b`` in the merge's schema: the sequence column read, or the reference's constant."""
    cols: list[Any] = [b.column(i).cast(arrow.field(i).type)
                       if not b.column(i).type.equals(arrow.field(i).type) else b.column(i)
                       for i in range(len(arrow) - 1)]
    if has_sequence:
        cols.append(b.column(SEQ))
    else:
        cols.append(pa.repeat(pa.scalar(sequence, pa.int64()), b.num_rows))
    return pa.RecordBatch.from_arrays(cols, schema=arrow)
