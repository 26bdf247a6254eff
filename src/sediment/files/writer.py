"""The sorted Parquet writer: sorted data in, one data file plus its sidecars (sample, key
filters; named by sediment.files.sidecars) out."""

from __future__ import annotations

import contextlib
import io
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from sediment.core.model import FileSums
from sediment.errors import SedimentError, StorageError
from sediment.files.keyfilter import FilterLayout, hash_keys
from sediment.files.parts import encoder_for
from sediment.files.sample import KeySampler
from sediment.files.sequence import SEQ, SEQ_FIELD
from sediment.files.sidecars import KEYS, SAMPLE, sidecar_name, with_sidecars
from sediment.files.sums import SummingSink, footer_crc, footer_length
from sediment.pools import shared_pool
from sediment.properties import bloom_columns
from sediment.schema import Schema
from sediment.storage import checksums
from sediment.storage.base import ObjectStore
from sediment.storage.checksums import crc32


@dataclass(frozen=True, slots=True)
class WrittenFile:
    """A data file written (not yet committed): its object key, rows and bytes (its sidecars
    are named from the key: :func:`sample_name`, :func:`keys_name`)."""

    filename: str
    rows: int
    bytes: int
    sums: FileSums | None = None
    """The checksums of the bytes written (None from writers that take none)."""
    synced: bool = False
    """Whether the file and its sidecars are durable already (``ObjectStore.sync``: the
    sorted writer syncs them as it closes), so that their commit need not sync them again."""


_SINK_BUFFER = 1 << 20
"""Bytes the Parquet writer's output is buffered in before the (Python) sink sees them."""

CLOSER_THREADS = 16
"""Threads that close key-filter sidecars (upload them) beside their data files: enough for
the writers of a server taking puts one ingest each (dozens at once) not to queue behind
each other for them."""


def _closer() -> ThreadPoolExecutor:
    """Threads that close writers' key-filter sidecars (sediment.pools; apart from
    :func:`_filter_builder`'s, so that an upload never waits behind filter building, nor the
    reverse)."""
    return shared_pool("sidecar-close", CLOSER_THREADS)


def _filter_builder() -> ThreadPoolExecutor:
    """Threads that build key-filter blocks while writers encode Parquet (sediment.pools)."""
    return shared_pool("keys", 2)


def sample_name(filename: str) -> str:
    """The sidecar sample of a data file (its current name: see sediment.files.sidecars)."""
    return sidecar_name(filename, SAMPLE)


def keys_name(filename: str) -> str:
    """The key-filter sidecar of a data file (its current name: see sediment.files.sidecars;
    readers of existing stores use :func:`sediment.files.sidecars.read_sidecar_range`, which
    falls back to the legacy name)."""
    return sidecar_name(filename, KEYS)


def new_data_filename(partition_id: str) -> str:
    return f"data/{partition_id}/{uuid.uuid4().hex}.parquet"


BLOOM_FPP = 0.01
"""False-positive rate the bloom filters of ``parquet.bloom_columns`` are sized for."""


def writer_options(schema: Schema, properties: Mapping[str, Any]) -> dict[str, Any]:
    """pyarrow ParquetWriter options from table properties."""
    codec = properties["parquet.compression"]
    opts: dict[str, Any] = {
        "compression": None if codec == "none" else codec,
        "data_page_size": int(properties["parquet.page_size_bytes"]),
        "write_statistics": True,
        # a CRC-32 per page, which readers opening files with page_checksum_verification check
        # (off only in the checksum benchmark's unchecked runs: storage.checksums.WRITE_SUMS)
        "write_page_checksum": checksums.WRITE_SUMS,
        "sorting_columns": [pq.SortingColumn(i) for i in range(len(schema.key_names))],
        # Dictionary pages only for the value columns named by the property: for keys and
        # other high-cardinality columns they make files bigger and exact-key reads slower
        # (measured: 16k-row group read 4.4 ms with dictionaries, 2.4 ms plain; 27 vs 21 MB).
        "use_dictionary": _dictionary_columns(schema, properties),
        # the page index (each page's offset, first row, min and max, before the footer), so
        # a lookup reads and decodes one page per column (sediment.files.pages); it replaces
        # the statistics in page headers (measured on 1M rows of the benchmark schema, 21.2 MB:
        # +34.7 kB, 0.16%, at 4,096-row groups; +7 kB, 0.03%, at 65,536)
        "write_page_index": True,
    }
    blooms = bloom_columns(schema, properties.get("parquet.bloom_columns", ""))
    if blooms:
        # Parquet's own split-block bloom filter per row group (sediment.files.bloom), sized
        # for a row group of distinct values: at fpp 0.01 pyarrow gives a 4,096-row group
        # 8 KiB (measured false positives ~0.2%; at 0.05, 4 KiB and ~3%, so a point filter
        # on 10M rows still read ~70 row groups out of 2,441)
        rows = int(properties["parquet.row_group_rows"])
        opts["bloom_filter_options"] = {c: {"ndv": rows, "fpp": BLOOM_FPP} for c in blooms}
    if int(properties.get("parquet.page_rows", 0)):
        # every column's pages cut at the same rows: a point read decodes them as one
        opts["max_rows_per_page"] = int(properties["parquet.page_rows"])
    if codec in ("zstd", "gzip"):
        opts["compression_level"] = int(properties["parquet.compression_level"])
    return opts


def _dictionary_columns(schema: Schema, properties: Mapping[str, Any]) -> list[str] | bool:
    names = str(properties.get("parquet.dictionary_columns", "")).split(",")
    return [c.strip() for c in names if c.strip() in schema.value_names] or False


class SortedFileWriter:
    """Streams sorted batches into one Parquet file, then writes its sample.

    Batches must arrive in key order. The sample is built on the fly in bounded memory: the
    row key of every k-th row is kept, k a power of two doubled whenever more than twice the
    sample size are held, so the sample stays exact and equi-depth whatever the file size.
    The key filters (one per row group, ``parquet.key_filter_bits`` per key; 0: none) are
    streamed to their sidecar as row groups are written.

    The writer writes Parquet only: whoever writes a file into a table stages it first
    (``sediment.files.staging``), which protects it from GC until its commit settles.
    """

    def __init__(self, objects: ObjectStore, filename: str, schema: Schema,
                 properties: Mapping[str, Any], *, sequence: bool = False,
                 ready: Callable[[], None] | None = None,
                 rows_hint: int | None = None) -> None:
        """``ready``: called before the file (and its key-filter sidecar) is created, which
        then waits for the first bytes the writer emits (``Staging.new_file_later``: the
        lease naming the file is written meanwhile); None: the file is created here.
        ``rows_hint``: the most rows the file will hold, when known (a small file is encoded
        on several threads: ``sediment.files.parts.encoder_for``)."""
        self.objects = objects
        self.filename = filename
        self.schema = schema
        self.sequence = sequence
        """Whether the file holds the hidden record sequences (sediment.files.sequence):
        compaction output does; other writers' data may not carry the column."""
        self.arrow_schema = schema.to_arrow(field_ids=True)  # ids: see files/columns.py
        if sequence:
            self.arrow_schema = self.arrow_schema.append(SEQ_FIELD)
        self.row_group_rows = int(properties["parquet.row_group_rows"])
        self.sample_size = int(properties["sample.size"])
        self._fs, _ = objects.arrow_filesystem()
        self._path = objects.path(filename)
        bits = int(properties["parquet.key_filter_bits"])
        self._filter = FilterLayout.for_rows(self.row_group_rows, bits) if bits else None
        self._keys_sink: pa.NativeFile | None = None
        self._key_blocks: list[Future[bytes]] = []
        """Key-filter blocks built (or being built) and not yet written to their sidecar."""
        self._ready = ready
        self._deferred = _CreatedOnWrite(self._create) if ready is not None else None
        stream = self._create() if self._deferred is None else self._deferred
        # the whole-file CRC is taken from the bytes as they stream out (FileSums.crc); the
        # checksum benchmark's unchecked runs (storage.checksums.WRITE_SUMS off) write to
        # the stream itself, as before checksums
        self._sink: SummingSink | pa.NativeFile | _CreatedOnWrite = \
            SummingSink(stream) if checksums.WRITE_SUMS else stream
        opts = writer_options(schema, properties)
        if sequence:  # sorted by (keys, sequence): the column is the last one
            opts["sorting_columns"] = [*opts["sorting_columns"],
                                       pq.SortingColumn(len(self.arrow_schema) - 1)]
            # few distinct values (one per input file): a dictionary makes it ~2/3 the size
            # of plain zstd and cheaper to encode (2M rows of 10 values: 0.86 vs 1.3 MB)
            opts["use_dictionary"] = [*(opts["use_dictionary"] or []), SEQ]
        # Buffered in Arrow (C++): the Parquet writer writes each page header and page on its
        # own, and each write into a Python sink takes the GIL and a Python call (2M rows:
        # ~20k writes, 0.26 s); through the buffer the sink sees 1 MiB writes
        self._out = pa.output_stream(self._sink, buffer_size=_SINK_BUFFER)
        # a small file is encoded on the process's encoding threads, a few row groups a part,
        # and joined in order: the bytes one ParquetWriter would write (sediment.files.parts)
        self._parts = encoder_for(self.arrow_schema, opts, self.row_group_rows, self._out,
                                  rows_hint)
        self._sampler = KeySampler(schema.row_key_names, self.sample_size)
        self._pending: list[pa.Table] = []
        self._pending_rows = 0
        self.rows = 0

    @property
    def bytes_written(self) -> int:
        """Bytes of the data file produced so far (buffered ones included): what a
        throttle of the writer's caller charges."""
        return int(self._out.tell())

    def _create(self) -> pa.NativeFile:
        """Create the data file and its key-filter sidecar (after ``ready``)."""
        if self._ready is not None:
            self._ready()
        try:
            if self._fs.type_name != "s3":  # S3 has no folders: markers, a request each
                self._fs.create_dir(self._path.rsplit("/", 1)[0], recursive=True)
            stream = self._fs.open_output_stream(self._path)
        except (OSError, pa.ArrowException) as e:
            raise StorageError(f"cannot create data file {self._path}: {e}") from e
        if self._filter is not None:
            try:
                self._keys_sink = self._fs.open_output_stream(
                    self.objects.path(keys_name(self.filename)))
                self._keys_sink.write(self._filter.header())
            except (OSError, pa.ArrowException) as e:
                for closable in (stream, self._keys_sink):
                    with contextlib.suppress(OSError, pa.ArrowException):
                        if closable is not None:
                            closable.close()
                with contextlib.suppress(SedimentError):
                    self.objects.delete_many(with_sidecars([self.filename]))
                raise StorageError(f"cannot create key filter of {self._path}: {e}") from e
        return stream

    def write(self, data: pa.Table | pa.RecordBatch) -> None:
        if data.num_rows == 0:
            return
        t = data if isinstance(data, pa.Table) else pa.Table.from_batches([data])
        if (SEQ in t.schema.names) != self.sequence:
            t = with_sequence_nulls(t) if self.sequence else t.drop_columns([SEQ])
        self._sampler.add(t)
        self.rows += t.num_rows
        # every write_table call ends a row group: buffer small pieces (a merge yields many)
        # so that row groups hold exactly parquet.row_group_rows rows, the last one fewer
        self._pending.append(t)
        self._pending_rows += t.num_rows
        if self._pending_rows >= self.row_group_rows:
            self._flush(final=False)

    def _flush(self, *, final: bool) -> None:
        if not self._pending_rows:
            return
        t = pa.concat_tables(self._pending)
        full = t.num_rows if final else t.num_rows - t.num_rows % self.row_group_rows
        if full:
            groups = t.slice(0, full)
            blocks: Future[bytes] | None = None
            if self._filter is not None:
                # write_table cuts ``groups`` into row groups of row_group_rows rows (the last,
                # when final, fewer): build() cuts the same way, one block per row group. Built
                # on a second thread while Parquet encodes (both release the GIL).
                key = groups.column(self.schema.row_key_names[0])
                layout = self._filter
                blocks = _filter_builder().submit(lambda: layout.build(hash_keys(key)))
            self._parts.add(groups)
            if blocks is not None:
                self._key_blocks.append(blocks)
                self._write_key_blocks(create=False)
        rest = t.slice(full)
        self._pending = [rest] if rest.num_rows else []
        self._pending_rows = rest.num_rows

    def _write_key_blocks(self, *, create: bool) -> None:
        """Write the key-filter blocks built so far into the sidecar once it exists (it is
        made with the data file, at its first bytes, once the lease is stored: until then the
        blocks wait here, and the writer goes on gathering rows); ``create``: make it now."""
        if self._deferred is not None and not self._deferred.created:
            if not create:
                return
            self._deferred.create()
        while self._key_blocks:
            blocks = self._key_blocks.pop(0)
            if self._keys_sink is not None:
                self._keys_sink.write(blocks.result())

    def close(self) -> WrittenFile:
        self._flush(final=True)
        self._write_key_blocks(create=True)
        # the sample is built and stored (a put: an fsync of it and of its folder on local
        # disk) on a thread while the file's last pages, page index and footer are written
        stored = _filter_builder().submit(self._store_sample)
        # the key-filter sidecar is closed (its upload: a PUT on S3) on a thread of its own
        # while the data file is closed and its size read back: one round trip where these
        # took three in turn (data PUT, sidecar PUT, HEAD)
        keys = None if self._keys_sink is None else _closer().submit(self._keys_sink.close)
        try:
            try:
                # what follows the row groups (page indexes, footer) is kept whole
                self._parts.finish(self._sink.mark if isinstance(self._sink, SummingSink)
                                   else lambda: None)
                self._out.close()  # flushes the buffer into the sink, and closes it
            finally:
                if keys is not None:
                    keys.result()  # (raises what closing the sidecar raised)
            # the file and its key filter are made durable (fsyncs of them and of their
            # folder on local disk) on a thread while the sample is stored and the size read
            # back: their commit need not sync them again (WrittenFile.synced)
            synced = _closer().submit(self.objects.sync, [
                self.filename, *([] if self._keys_sink is None else [keys_name(self.filename)])])
            try:
                info = self.objects.head(self.filename)
            finally:
                synced_error = synced.exception()
        except BaseException:
            with contextlib.suppress(Exception):  # settled before an abort deletes it
                stored.result()
            raise
        sample_bytes = stored.result()
        if synced_error is not None:
            raise synced_error
        if not isinstance(self._sink, SummingSink):  # no sums: WRITE_SUMS is off
            return WrittenFile(self.filename, self.rows, 0 if info is None else info.size,
                               synced=True)
        size = self._sink.size
        if info is None or info.size != size:
            raise StorageError(f"data file {self._path}: {size} bytes written, "
                               f"{'none' if info is None else info.size} stored")
        tail = self._sink.tail
        footer = footer_crc(tail)
        if footer is None:  # (not seen: the footer is all in the tail since the mark)
            n = footer_length(tail) + 8
            footer = crc32(self.objects.get_range(self.filename, size - n, size))
        sums = FileSums(size, footer, self._sink.crc, crc32(sample_bytes))
        return WrittenFile(self.filename, self.rows, size, sums, synced=True)

    def _store_sample(self) -> bytes:
        """Build the file's sample and store it (after ``ready``, as the file); its bytes."""
        sample = self._sampler.sample(pa.schema(list(self.schema.row_keys)))
        buf = io.BytesIO()
        pq.write_table(sample, buf, compression="zstd", write_page_checksum=checksums.WRITE_SUMS)
        if self._ready is not None:
            self._ready()
        self.objects.put(sample_name(self.filename), buf.getvalue())
        return buf.getvalue()

    def abort(self) -> None:
        """Close and delete what was written (best effort)."""
        deferred = getattr(self, "_deferred", None)
        if deferred is not None:
            deferred.drop()  # (a file not created yet is not created to be deleted)
        parts = getattr(self, "_parts", None)
        if parts is not None:
            parts.abort()
        for closable in (getattr(self, "_out", None),
                         getattr(self, "_sink", None), getattr(self, "_keys_sink", None)):
            try:
                if closable is not None:
                    closable.close()
            except (OSError, pa.ArrowException):
                pass
        try:
            self.objects.delete_many(with_sidecars([self.filename]))
        except SedimentError:  # what is left is an orphan for GC's orphan pass
            pass


class _CreatedOnWrite:
    """A writable file that ``create`` makes at its first write (or :meth:`create`): the
    Parquet writer's first bytes wait in its buffer meanwhile. After :meth:`drop` (an abort)
    writes go nowhere, and nothing is created."""

    def __init__(self, create: Callable[[], pa.NativeFile]) -> None:
        self._make = create
        self._stream: pa.NativeFile | None = None
        self._dropped = False
        self.size = 0
        self.closed = False

    def create(self) -> None:
        if self._stream is None and not self._dropped:
            self._stream = self._make()

    @property
    def created(self) -> bool:
        return self._stream is not None

    def drop(self) -> None:
        self._dropped = True

    def write(self, data: Any) -> int:
        n = memoryview(data).nbytes
        self.create()
        if self._stream is not None:
            self._stream.write(data)
        self.size += n
        return n

    def tell(self) -> int:
        return self.size

    def flush(self) -> None:
        if self._stream is not None:
            self._stream.flush()

    def writable(self) -> bool:
        return True

    def readable(self) -> bool:
        return False

    def seekable(self) -> bool:
        return False

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            if self._stream is not None:
                self._stream.close()


def with_sequence_nulls(t: pa.Table) -> pa.Table:
    """``t`` with a null sequence column: its rows take their file reference's sequence."""
    return t.append_column(SEQ_FIELD, pa.nulls(t.num_rows, pa.int64()))


def write_key_filters(objects: ObjectStore, filename: str, data: Any, schema: Schema,
                      properties: Mapping[str, Any]) -> bool:
    """Build the key-filter sidecar of a Parquet file written elsewhere (a loaded dump file),
    from its first row-key column; ``data`` is its bytes or a file ``pq.ParquetFile`` reads
    (ranged reads of a large one). Returns False (no sidecar: lookups read the file as
    before) when filters are off or the row groups are not all one size but the last."""
    bits = int(properties["parquet.key_filter_bits"])
    pf = pq.ParquetFile(pa.BufferReader(data) if isinstance(data, bytes | bytearray) else data)
    md = pf.metadata
    sizes = [md.row_group(i).num_rows for i in range(md.num_row_groups)]
    if not bits or not sizes or len(set(sizes[:-1])) > 1 or sizes[-1] > sizes[0]:
        return False
    layout = FilterLayout.for_rows(sizes[0], bits)
    first = schema.row_key_names[0]
    blocks = [layout.build(hash_keys(pf.read_row_group(g, columns=[first]).column(0)))
              for g in range(len(sizes))]  # one row group's keys in memory at a time
    objects.put(keys_name(filename), b"".join([layout.header(), *blocks]))
    return True
