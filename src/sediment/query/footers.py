"""Parquet footers of a table's data files, cached with the min/max of the first row-key field
of every row group and the files' key-filter blocks (data files and sidecars are immutable,
so an entry is never stale).

Only verified bytes are cached: a file opened here verifies its pages' CRCs on every read
(sediment.files.verified), a footer is checked against the file's sums when they are known,
and a key-filter block against its own CRC (format 2), read again once, then bypassed.

On an object store with the disk cache on (``disk``: sediment.storage.diskcache), every range
read here goes through it: the footer's tail, the page index, the key filters' header and
blocks, and the column chunks of a file opened for its row groups (a CachedParquetFile of
sediment.query.cached_files, whose reads enter the cache when the reader calls ``keep_reads``
after the decode verified them)."""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from sediment import metrics
from sediment.errors import (
    CorruptionError,
    CorruptMetadataError,
    ObjectNotFoundError,
    StorageError,
)
from sediment.files import thrift_compact as tc
from sediment.files.bloom import ColumnBlooms, bloom_places, parse_filter
from sediment.files.keyfilter import HEADER_BYTES, FilterLayout
from sediment.files.keys import first_field_bounds
from sediment.files.pages import PageIndex, load_page_index
from sediment.files.parquet_meta import FMD_SCHEMA, MAGIC, SE_NAME, get_field, struct_list
from sediment.files.sequence import SEQ
from sediment.files.sidecars import KEYS, read_sidecar_range
from sediment.files.thrift_compact import BINARY, ThriftError
from sediment.files.verified import READS, VERIFY, Sums, damaged, footer_problem
from sediment.files.writer import keys_name
from sediment.query.cached_files import CachedParquetFile, RangeFile, footer_bytes
from sediment.query.lru import lru_get
from sediment.storage import checksums, diskcache
from sediment.storage.base import ObjectStore
from sediment.storage.diskcache import DiskCache
from sediment.storage.rangereads import RangeReads

log = logging.getLogger(__name__)


def _disk_counts() -> tuple[int, int]:
    s = diskcache.stats()
    return s["hits"], s["misses"]


# the disk cache counts for itself (storage knows nothing of metrics): read when scraped
metrics.watch_cache("disk", _disk_counts)

_MISSING: Any = object()
"""Not cached (a cached None says the file has no page index, or no key filters)."""

FOOTER_GUESS = 64 * 1024
"""Bytes read from a file's end to check its footer: a Sediment file's footer fits (else a
second read fetches the rest)."""


@dataclass(frozen=True, slots=True)
class FileFooter:
    """A file's Parquet metadata and per-row-group bounds of the first row-key field."""

    metadata: pq.FileMetaData
    mins: list[Any]
    maxs: list[Any]
    sequenced: bool = False
    """Whether the file has the hidden sequence column (compaction output)."""
    bounded: bool = True
    """Whether every row group has bounds (statistics) on the first key field."""


class FooterCache:
    """LRU caches of FileFooter by filename and of key-filter blocks by (file, row group),
    the latter bounded in bytes (data files and sidecars are immutable, so never stale).
    A hit does not wait for the lock (sediment.query.lru); a miss, which reads, takes it to
    insert."""

    def __init__(self, objects: ObjectStore, first_key: str, capacity: int,
                 filter_bytes: int = 0, table: str = "") -> None:
        self.objects = objects
        self.table = table
        """The table's name, for errors."""
        self.first_key = first_key
        self.capacity = capacity
        self.filter_bytes = filter_bytes
        self._items: OrderedDict[str, FileFooter] = OrderedDict()
        self._blocks: OrderedDict[tuple[str, int], bytes] = OrderedDict()
        self._blocks_size = 0
        self._legacy_filters: dict[str, str] = {}
        """Key filters found under their legacy names (files of a store not migrated)."""
        self._layouts: OrderedDict[str, FilterLayout | None] = OrderedDict()
        """Key-filter layouts by file: None for a file without filters, or with damaged
        ones (then its row groups are read as if it had none)."""
        self._page_indexes: OrderedDict[str, PageIndex | None] = OrderedDict()
        self._blooms: OrderedDict[tuple[str, str], ColumnBlooms | None] = OrderedDict()
        """Parquet bloom filters by (file, column): None for a file without them."""
        self._blooms_size = 0
        """Page indexes by file: None for a file without one."""
        self._lock = threading.Lock()
        self.fs, _ = objects.arrow_filesystem()
        self.disk: DiskCache | None = None
        """The disk cache of an object store's reads (set by the reader from
        ``query.disk_cache_bytes``; None: off, or a store it does not apply to)."""

    def reads(self, *, fresh: bool = False) -> RangeReads:
        """Ranged reads of this table's files for one checked read, through the disk cache
        when it is on (``fresh``: a second read after a failed check, nothing from the
        cache)."""
        return RangeReads(self.objects, self.disk, fresh=fresh)

    def cached(self, filename: str) -> FileFooter | None:
        """The file's footer if cached (no I/O)."""
        footer = lru_get(self._items, self._lock, filename, None)
        metrics.cache("footer", footer is not None)
        return footer

    def open(self, filename: str, sums: Sums | None = None, *, fresh: bool = False,
             cache_rows: bool = True) -> tuple[pq.ParquetFile, FileFooter]:
        """The file opened for reading (its pages' CRCs verified on every read) and its
        footer, checked against ``sums`` (size and footer CRC-32, read again once, then
        CorruptDataError) when they are known. With the disk cache on, the footer is read
        through it, and so is the file unless ``cache_rows`` is False (a whole scan, which
        would flush the cache: it reads the store directly); ``fresh``: a second read after
        a failed check, nothing from the cache. The caller calls ``keep_reads``
        (sediment.query.cached_files) after each verified read."""
        try:
            if self.disk is not None:
                return self._open_cached(filename, sums, fresh, cache_rows)
            return self._open_direct(filename, sums)
        except FileNotFoundError:
            raise ObjectNotFoundError(f"data file {filename} is missing from "
                                      f"{self.objects.uri}") from None
        except pa.ArrowInvalid as e:
            raise CorruptMetadataError(f"data file {filename} of table {self.table or '?'} "
                                       f"in {self.objects.uri} is not valid Parquet: {e}"
                                       ) from e
        except OSError as e:
            raise StorageError(f"reading data file {filename} in {self.objects.uri}: {e}") from e

    def _open_direct(self, filename: str, sums: Sums | None
                     ) -> tuple[pq.ParquetFile, FileFooter]:
        """:meth:`open` reading the store through its Arrow file system."""
        path = self.objects.path(filename)
        footer = self.cached(filename)
        source = self.fs.open_input_file(path)
        if footer is None:
            if sums is None or not checksums.VERIFY_READS:
                pf = pq.ParquetFile(source, **VERIFY)
                md = pf.metadata
            else:
                md = self._checked_footer(filename, path, source, sums)
                pf = pq.ParquetFile(source, metadata=md, **VERIFY)
            footer = self._keep(filename, md)
        else:
            pf = pq.ParquetFile(source, metadata=footer.metadata, **VERIFY)
        return pf, footer

    def _checked_footer(self, filename: str, path: str, source: pa.NativeFile,
                        sums: Sums) -> pq.FileMetaData:
        """The footer of a file whose sums are known, from its last bytes, checked against
        them: read again (from a freshly opened file) once before it counts as damaged."""
        problem = ""
        for attempt in range(READS):
            if attempt:
                source = self.fs.open_input_file(path)
            size = source.size()
            source.seek(max(0, size - FOOTER_GUESS))
            tail = source.read()
            if len(tail) >= 8 and int.from_bytes(tail[-8:-4], "little") + 8 > len(tail) and \
                    int.from_bytes(tail[-8:-4], "little") + 8 <= size:
                source.seek(size - int.from_bytes(tail[-8:-4], "little") - 8)
                tail = source.read()
            found = footer_problem(tail, size, sums)
            if found is None:
                return pq.read_metadata(pa.BufferReader(tail))
            problem = found
        raise damaged(self.table, filename, self.objects.uri, OSError(problem))

    def _size(self, filename: str, sums: Sums | None) -> int:
        """The file's size: from its sums, else asked of the store."""
        if sums is not None:
            return sums.size
        info = self.objects.head(filename)
        if info is None:
            raise ObjectNotFoundError(f"data file {filename} is missing from "
                                      f"{self.objects.uri}")
        return info.size

    def _open_cached(self, filename: str, sums: Sums | None, fresh: bool, cache_rows: bool
                     ) -> tuple[pq.ParquetFile, FileFooter]:
        """:meth:`open` through the disk cache: the footer from the file's tail (checked
        against ``sums`` when known, read again once), the file a CachedParquetFile."""
        footer = self.cached(filename)
        size = self._size(filename, sums)
        if footer is None:
            problem = ""
            for attempt in range(READS):
                reads = self.reads(fresh=fresh or attempt > 0)
                tail = footer_bytes(reads, filename, size, FOOTER_GUESS)
                found = footer_problem(tail, size, sums)
                if found is None:
                    md = pq.read_metadata(pa.BufferReader(tail))
                    reads.keep(checked=sums is not None)  # else: read twice, compared
                    break
                problem = found
            else:
                raise damaged(self.table, filename, self.objects.uri, OSError(problem))
            footer = self._keep(filename, md)
        if not cache_rows:
            source = self.fs.open_input_file(self.objects.path(filename))
            return pq.ParquetFile(source, metadata=footer.metadata, **VERIFY), footer
        reads = self.reads(fresh=fresh)
        pf = CachedParquetFile(RangeFile(reads, filename, size),
                               metadata=footer.metadata, **VERIFY)
        pf.reads = reads
        pf.key = filename
        pf.checked = sums is not None
        return pf, footer

    def page_index(self, filename: str, sums: Sums | None) -> PageIndex | None:
        """The file's Parquet page index (sediment.files.pages), read when a lookup first
        needs it, cached; None for a file written without one (before page indexes) or
        with nested columns: its lookups read whole row groups. The footer it parses is
        checked against ``sums`` first (read again once, then CorruptDataError)."""
        known = lru_get(self._page_indexes, self._lock, filename, _MISSING)
        if known is not _MISSING:
            return known

        size = self._size(filename, sums)
        problem = ""
        index: PageIndex | None = None
        for attempt in range(READS):
            reads = self.reads(fresh=attempt > 0)
            tail = footer_bytes(reads, filename, size, FOOTER_GUESS)
            found = footer_problem(tail, size, sums)
            if found is not None:
                problem = found
                continue
            try:
                index = load_page_index(reads.reader(filename), size, filename, tail=tail)
            except CorruptMetadataError as e:  # an index is optional: the file reads without
                log.warning("the page index of data file %s in %s cannot be read (%s): "
                            "reading whole row groups", filename, self.objects.uri, e)
                index = None
                break
            # the index has no checksum: bytes about to be cached are read twice and must
            # agree (a byte changed on the way is gone on the next read)
            if index is None or reads.confirm(filename, *index.byte_range):
                reads.keep(checked=sums is not None)
                break
            problem = "its page index reads differently twice"
            index = None
        else:
            if problem.startswith("its page index"):
                log.warning("the page index of data file %s in %s reads differently on every "
                            "second read: reading whole row groups", filename,
                            self.objects.uri)
            else:
                raise damaged(self.table, filename, self.objects.uri, OSError(problem))
        with self._lock:
            self._page_indexes[filename] = index
            while len(self._page_indexes) > max(self.capacity, 1):
                self._page_indexes.popitem(last=False)
        return index

    def _tail(self, filename: str, sums: Sums | None) -> tuple[int, bytes]:
        """The file's size and its last bytes, its whole footer among them, checked against
        ``sums`` (read again once, then CorruptDataError)."""
        if sums is not None:
            size = sums.size
        else:
            info = self.objects.head(filename)
            if info is None:
                raise ObjectNotFoundError(f"data file {filename} is missing from "
                                          f"{self.objects.uri}")
            size = info.size
        problem = ""
        for _ in range(READS):
            tail = self.objects.get_range(filename, max(0, size - FOOTER_GUESS), size)
            length = int.from_bytes(tail[-8:-4], "little") if len(tail) >= 8 else 0
            if len(tail) < length + 8 <= size:
                tail = self.objects.get_range(filename, size - length - 8, size)
            found = footer_problem(tail, size, sums)
            if found is None:
                return size, tail
            problem = found
        raise damaged(self.table, filename, self.objects.uri, OSError(problem))

    def blooms(self, filename: str, column: str, sums: Sums | None) -> ColumnBlooms | None:
        """The Parquet bloom filters of ``column`` in every row group of the file
        (sediment.files.bloom), read when a filter first needs them, cached (bounded by
        ``query.key_filter_cache_bytes`` with the key filters' own bound); None when the
        file has none for it (written before ``parquet.bloom_columns`` named it) or they
        cannot be read: then every row group may hold any value."""
        key = (filename, column)
        with self._lock:
            if key in self._blooms:
                self._blooms.move_to_end(key)
                return self._blooms[key]
        found: ColumnBlooms | None = None
        try:
            found = self._read_blooms(filename, column, sums)
        except (CorruptMetadataError, ThriftError, TypeError, ValueError) as e:
            log.warning("the bloom filters of column %s of data file %s in %s cannot be "
                        "read (%s): reading the file without them", column, filename,
                        self.objects.uri, e)
        except StorageError as e:  # perhaps passing: this read goes without, the next asks
            log.warning("the bloom filters of data file %s in %s cannot be read now (%s)",
                        filename, self.objects.uri, e)
            return None
        size = 64 if found is None else found.nbytes
        with self._lock:
            if key not in self._blooms:
                self._blooms[key] = found
                self._blooms_size += size
            while self._blooms and self._blooms_size > max(self.filter_bytes, size):
                _, old = self._blooms.popitem(last=False)
                self._blooms_size -= 64 if old is None else old.nbytes
        return found

    def _read_blooms(self, filename: str, column: str, sums: Sums | None
                     ) -> ColumnBlooms | None:
        size, tail = self._tail(filename, sums)
        length = int.from_bytes(tail[-8:-4], "little")
        if len(tail) < 12 or tail[-4:] != MAGIC or length + 8 > len(tail):
            raise CorruptMetadataError(f"data file {filename} has no Parquet footer")
        md = tc.decode(tail[len(tail) - length - 8:len(tail) - 8])
        names = [get_field(e, SE_NAME, BINARY).decode("utf-8", "replace")
                 for e in struct_list(md, FMD_SCHEMA)[1:]]
        if column not in names:
            return None
        places = bloom_places(md, names.index(column))
        if not places:
            return None
        start = min(o for o, _ in places)
        # a length of -1 (not recorded): the header and a bitset of at most 128 MiB follow
        end = max(o + (n if n > 0 else 0) for o, n in places)
        if any(n <= 0 for _, n in places) or start < len(MAGIC) or \
                end > size - length - 8:
            return None  # not recorded, or outside the data: read without
        # the filters have no checksum, and a byte changed on the way could hide a value:
        # they are read twice and must agree, else the file is read without them
        raw = self.objects.get_range(filename, start, end)
        if self.objects.get_range(filename, start, end) != raw:
            raise CorruptMetadataError(f"the bloom filters of {column} read differently twice")
        return ColumnBlooms.of([parse_filter(memoryview(raw)[o - start:o - start + n])
                                for o, n in places])

    def layout(self, filename: str) -> FilterLayout | None:
        """The layout of the file's key filters, read when a lookup first needs it (scans
        never read key filters), cached; None when the file has none (written with
        ``parquet.key_filter_bits`` 0, or before filters existed) or they are damaged."""
        known = lru_get(self._layouts, self._lock, filename, _MISSING)
        if known is not _MISSING:
            return known
        layout: FilterLayout | None = None
        try:
            reads = self.reads()
            name, raw = read_sidecar_range(self.objects, filename, KEYS, 0, HEADER_BYTES,
                                           read=reads.read)
            layout = FilterLayout.parse(raw, f"{name} in {self.objects.uri}")
            reads.keep(checked=layout.format >= 2)
            if name != keys_name(filename):  # a store not migrated yet (migrate-sidecars)
                with self._lock:
                    self._legacy_filters[filename] = name
        except ObjectNotFoundError:
            layout = None
        except CorruptionError as e:  # a header it does not know, or one failing its CRC
            self._damaged(filename, e)
            return None
        except StorageError as e:  # perhaps passing: this read goes without, the next asks
            log.warning("the key filter of data file %s in %s cannot be read now (%s): "
                        "reading the file without it", filename, self.objects.uri, e)
            return None
        self._remember(filename, layout)
        return layout

    def _remember(self, filename: str, layout: FilterLayout | None) -> None:
        with self._lock:
            self._layouts[filename] = layout
            while len(self._layouts) > max(self.capacity, 1):
                self._layouts.popitem(last=False)

    def _damaged(self, filename: str, error: Exception) -> None:
        """A key filter is an optional index: a damaged one is reported once and the file's
        row groups are read as if it had none (the answer stays right, only slower)."""
        log.warning("the key filter of data file %s in %s cannot be read (%s): reading the "
                    "file without it; rewrite it by compacting the file's leaf",
                    filename, self.objects.uri, error)
        self._remember(filename, None)

    def may_contain(self, filename: str, layout: FilterLayout, group: int,
                    hashes: np.ndarray) -> bool:
        """Whether row group ``group`` of the file may hold any of the hashed keys."""
        key = (filename, group)
        block = lru_get(self._blocks, self._lock, key, None)
        if block is None:
            start, end = layout.block_range(group)
            with self._lock:
                name = self._legacy_filters.get(filename) or keys_name(filename)
            try:
                block = self._checked_block(name, layout, start, end)
            except ObjectNotFoundError as e:
                self._damaged(filename, e)
                return True
            except StorageError:  # perhaps passing: keep the row group, ask again next time
                return True
            except CorruptionError as e:  # the block fails its CRC twice: bypass the filter
                self._damaged(filename, e)
                return True
            if self.filter_bytes:
                with self._lock:
                    if key not in self._blocks:
                        self._blocks[key] = block
                        self._blocks_size += len(block)
                    while self._blocks_size > self.filter_bytes:
                        _, old = self._blocks.popitem(last=False)
                        self._blocks_size -= len(old)
        return layout.may_contain_any(block, hashes)

    def _checked_block(self, name: str, layout: FilterLayout, start: int, end: int) -> bytes:
        """A key-filter block, its CRC checked (format 2), read again once when it fails."""
        for attempt in range(READS):
            reads = self.reads(fresh=attempt > 0)
            raw = reads.read(name, start, end)
            try:
                block = layout.block(raw, f"{name} in {self.objects.uri}")
            except CorruptionError:
                reads.forget()
                if attempt == READS - 1:
                    raise
                continue
            reads.keep(checked=layout.format >= 2)
            return block
        raise AssertionError("unreachable")

    def _keep(self, filename: str, md: pq.FileMetaData) -> FileFooter:
        """The footer of ``md``, kept (bounded by ``capacity``)."""
        footer = self._bounds(md)
        if self.capacity:
            with self._lock:
                self._items[filename] = footer
                while len(self._items) > self.capacity:
                    self._items.popitem(last=False)
        return footer

    def _bounds(self, md: pq.FileMetaData) -> FileFooter:
        mins, maxs = first_field_bounds(md, self.first_key)
        sequenced = any(md.schema.column(i).path == SEQ for i in range(md.num_columns))
        return FileFooter(md, mins, maxs, sequenced, all(m is not None for m in mins))
