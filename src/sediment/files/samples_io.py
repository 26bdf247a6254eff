"""Reading data-file samples from a store, with a small cache (samples are immutable).

A sample is an optional sidecar: one that is damaged (it does not decode, or fails the
CRC-32 its file's sums record for it, after one re-read) is rebuilt in memory from its data
file's row-key columns, read with page verification, and a warning is logged. The rebuilt
sample is the one the writer would have written (the same :class:`KeySampler` over the same
rows), is cached like a read one, and is never written back (a read never writes).
"""

from __future__ import annotations

import functools
import io
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable

import pyarrow as pa
import pyarrow.parquet as pq

from sediment.errors import CorruptionError, CorruptMetadataError, ObjectNotFoundError
from sediment.files.sample import COUNT, KeySampler
from sediment.files.sidecars import SAMPLE, read_sidecar, sidecar_name
from sediment.files.verified import READS, VERIFY, Sums, reading
from sediment.storage import checksums
from sediment.storage.base import ObjectStore
from sediment.storage.checksums import crc32

log = logging.getLogger(__name__)


class SampleReader:
    """Loads data files' samples (``_<stem>.sample``, or the legacy ``<stem>.sample.parquet``:
see sediment.files.sidecars), keeping the most recent ``capacity``.

    ``key_schema`` and ``sample_size`` (the table's row keys and ``sample.size``, asked when
    needed) let a damaged sample be rebuilt from its data file; without them a damaged
    sample raises CorruptMetadataError as a missing one does."""

    def __init__(self, objects: ObjectStore, capacity: int = 4096, *, table: str = "",
                 key_schema: Callable[[], pa.Schema] | None = None,
                 sample_size: Callable[[], int] | None = None) -> None:
        self.objects = objects
        self.capacity = capacity
        self.table = table
        self.key_schema = key_schema
        self.sample_size = sample_size
        self._cache: OrderedDict[str, pa.Table] = OrderedDict()
        self._lock = threading.Lock()

    def sample(self, filename: str, sums: Sums | None = None) -> pa.Table:
        """The sample of data file ``filename``, checked against the CRC-32 of its ``sums``
        when known; rebuilt from the data file when it is damaged."""
        with self._lock:
            t = self._cache.get(filename)
            if t is not None:
                self._cache.move_to_end(filename)
                return t
        key = sidecar_name(filename, SAMPLE)
        problem: Exception | None = None
        for _ in range(READS):
            try:
                key, raw = read_sidecar(self.objects, filename, SAMPLE)
                t = decode_sample(raw, sums)
                self._check_columns(t)
                problem = None
                break
            except ObjectNotFoundError:
                raise CorruptMetadataError(f"sample {key} of data file {filename} is missing "
                                           f"from {self.objects.uri}") from None
            except (pa.ArrowException, OSError, CorruptionError) as e:
                problem = e
        if problem is not None:
            t = self._rebuilt(filename, key, problem)
        with self._lock:
            self._cache[filename] = t
            while len(self._cache) > self.capacity:
                self._cache.popitem(last=False)
        return t

    def _check_columns(self, t: pa.Table) -> None:
        """A sample that decodes but lacks a row-key or count column is damaged too (a
        flipped byte of a column's name in its footer): without this its readers (splits,
        estimates) failed with a KeyError."""
        if self.key_schema is None:
            return
        missing = [n for n in (*self.key_schema().names, COUNT) if n not in t.column_names]
        if missing:
            raise CorruptionError(f"it has no column {missing[0]!r} (columns: "
                                  f"{', '.join(t.column_names)})")

    def _rebuilt(self, filename: str, key: str, problem: Exception) -> pa.Table:
        if self.key_schema is None or self.sample_size is None:
            raise CorruptMetadataError(f"sample {key} in {self.objects.uri} is corrupt: "
                                       f"{problem}") from problem
        log.warning("the sample %s of data file %s of table %s in %s is damaged (%s): "
                    "rebuilt from the data file (in memory; compacting the file's leaf "
                    "rewrites it)", key, filename, self.table or "?", self.objects.uri, problem)
        return rebuild_sample(self.objects, filename, self.key_schema(), self.sample_size(),
                              self.table)


def decode_sample(raw: bytes, sums: Sums | None = None) -> pa.Table:
    """A sample's table from its bytes, checked against the CRC-32 its data file's ``sums``
    record (when they do) and its pages' CRCs; pyarrow's error or CorruptionError when
    damaged."""
    if checksums.VERIFY_READS and sums is not None and sums.sample is not None and \
            crc32(raw) != sums.sample:
        raise CorruptionError(f"CRC-32 {crc32(raw):08x} where {sums.sample:08x} was written")
    return pq.read_table(io.BytesIO(raw), **VERIFY)


def rebuild_sample(objects: ObjectStore, filename: str, key_schema: pa.Schema, size: int,
                   table: str = "") -> pa.Table:
    """The sample of data file ``filename`` built again from its row-key columns (read one
    row group at a time, pages verified: CorruptDataError when the data file is damaged
    too), as the writer builds it."""
    fs, _ = objects.arrow_filesystem()
    path = objects.path(filename)
    names = key_schema.names
    sampler = KeySampler(names, size)

    def open_file(_: int) -> pq.ParquetFile:
        return pq.ParquetFile(fs.open_input_file(path), **VERIFY)

    opened = [reading(table, filename, objects.uri, open_file)]

    def group(g: int, attempt: int) -> pa.Table:
        if attempt:  # a fresh file: nothing of the first read is reused
            opened[0] = open_file(attempt)
        return opened[0].read_row_group(g, columns=names, use_threads=False)

    for g in range(opened[0].metadata.num_row_groups):
        part = reading(table, filename, objects.uri, functools.partial(group, g))
        sampler.add(part.cast(key_schema))
    return sampler.sample(key_schema)
