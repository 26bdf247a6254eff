"""File references as a snapshot loads them: Arrow tables decoded into FileReference tuples
only when a partition is first touched, and the copy-on-write map that keeps state copies
cheap (reference counts of a million files copy a few thousand entries per commit)."""

from __future__ import annotations

import gc
from collections.abc import Iterable, Iterator, Mapping, MutableMapping
from typing import Any, TypeVar

import pyarrow as pa

from sediment.core.model import FileReference, FileSums

REFERENCE_COLUMNS = ("filename", "partition_id", "records", "approximate", "job_id", "sequence",
                     "sequenced")
"""The columns of a snapshot's reference table, in FileReference field order."""
_DEFAULTS: dict[str, Any] = {"sequence": 0, "sequenced": False}
SUM_COLUMNS = ("size", "footer_crc", "file_crc", "sample_crc")
"""A snapshot reference table's nullable checksum columns (FileSums field order): the sums of
the row's file, null where the table has none (it is then null in all four but sample_crc)."""
WHOLE_DECODE_MIN_PARTITIONS = 64
"""Below this many undecoded partitions, slices decode one by one as fast as a whole table."""

_V = TypeVar("_V")
_DELETED: Any = object()
_MISSING: Any = object()


class CowDict(MutableMapping[str, _V]):
    """A str-keyed map whose copies are cheap: a shared, never-mutated ``base`` dict plus a
    small private overlay of changes (``_DELETED`` marks removals). ``copy()`` copies only the
    overlay; the overlay is folded into a fresh base once it outgrows ~8*sqrt(n) entries, so a
    commit on a state of a million files copies a few thousand entries, not a million.
    """

    __slots__ = ("_base", "_len", "_top")

    def __init__(self, items: Iterable[tuple[str, _V]] | Mapping[str, _V] = ()) -> None:
        self._base: dict[str, _V] = dict(items)
        self._top: dict[str, Any] = {}
        self._len = len(self._base)

    def __getitem__(self, key: str) -> _V:
        v = self._top.get(key, _MISSING)
        if v is _MISSING:
            return self._base[key]
        if v is _DELETED:
            raise KeyError(key)
        return v

    def __contains__(self, key: object) -> bool:
        v = self._top.get(key, _MISSING)  # type: ignore[call-overload]
        return key in self._base if v is _MISSING else v is not _DELETED

    def get(self, key: str, default: Any = None) -> Any:
        v = self._top.get(key, _MISSING)
        if v is _MISSING:
            return self._base.get(key, default)
        return default if v is _DELETED else v

    def __setitem__(self, key: str, value: _V) -> None:
        if key not in self:
            self._len += 1
        self._top[key] = value
        self._maybe_fold()

    def __delitem__(self, key: str) -> None:
        if key not in self:
            raise KeyError(key)
        if key in self._base:
            self._top[key] = _DELETED
        else:
            del self._top[key]
        self._len -= 1
        self._maybe_fold()

    def pop(self, key: str, *default: Any) -> Any:
        if key not in self:
            if default:
                return default[0]
            raise KeyError(key)
        v = self[key]
        del self[key]
        return v

    def _maybe_fold(self) -> None:
        if len(self._top) > max(1024, 8 * int(len(self._base) ** 0.5)):
            base = dict(self._base)
            for k, v in self._top.items():
                if v is _DELETED:
                    del base[k]
                else:
                    base[k] = v
            self._base, self._top = base, {}

    def __iter__(self) -> Iterator[str]:
        top = self._top
        for k in self._base:
            if k not in top:
                yield k
        for k, v in top.items():
            if v is not _DELETED:
                yield k

    def __len__(self) -> int:
        return self._len

    def copy(self) -> CowDict[_V]:
        c = CowDict.__new__(CowDict)
        c._base, c._top, c._len = self._base, dict(self._top), self._len
        return c

    def __repr__(self) -> str:
        return f"CowDict({len(self)} items)"


def cow(m: Mapping[str, _V]) -> CowDict[_V]:
    """A cheap copy of ``m`` as a CowDict (a plain mapping becomes the base of a new one)."""
    return m.copy() if isinstance(m, CowDict) else CowDict(m)


def _decode_rows(table: pa.Table) -> list[FileReference]:
    """A snapshot reference table's rows as FileReference tuples, in order."""
    # Building many tracked tuples triggers repeated cyclic-GC passes over the whole heap
    # (3-9x slower for a million references); none of these objects form cycles.
    enabled = gc.isenabled()
    gc.disable()
    try:
        n = table.num_rows
        names = table.schema.names
        cols = [table.column(c).to_pylist() if c in names else [_DEFAULTS[c]] * n
                for c in REFERENCE_COLUMNS]
        return list(map(FileReference, *cols))
    finally:
        if enabled:
            gc.enable()


class SnapshotReferences:
    """A snapshot's whole reference table, decoded at most once, for reads of every
    partition: one pass over 100,000 rows instead of 10,000 small slices (~3x faster)."""

    __slots__ = ("rows", "table")

    def __init__(self, table: pa.Table) -> None:
        self.table = table
        self.rows: list[FileReference] | None = None

    def decode(self) -> list[FileReference]:
        if self.rows is None:
            self.rows = _decode_rows(self.table)
        return self.rows


class LazyReferences:
    """One partition's references as loaded from a snapshot (Arrow): rows ``start`` to
    ``start + table.num_rows`` of ``source``, decoded into FileReference tuples at most once
    and shared by every copy of the state."""

    __slots__ = ("refs", "source", "start", "table")

    def __init__(self, table: pa.Table, source: SnapshotReferences | None = None,
                 start: int = 0) -> None:
        self.table = table
        self.source = source
        self.start = start
        self.refs: dict[str, FileReference] | None = None

    def decode(self) -> dict[str, FileReference]:
        if self.refs is None:
            if self.source is not None and self.source.rows is not None:
                rows = self.source.rows[self.start:self.start + self.table.num_rows]
            else:
                rows = _decode_rows(self.table)
            self.refs = {r.filename: r for r in rows}
        return self.refs


class SnapshotSums:
    """The file checksums of a snapshot's reference table, decoded on demand: a dict of a
    million FileSums takes over a second to build, and a read needs a few. A partition's
    rows are decoded when a file is looked up in it; a lookup without a partition builds a
    filename index of the whole table once (names only, no FileSums). Immutable once built
    and shared by every copy of the state (two threads may both decode a part, equally)."""

    __slots__ = ("_cols", "_index", "_parts", "_runs", "_table")

    def __init__(self, table: pa.Table, runs: Iterable[tuple[str, int, int]]) -> None:
        self._table = table
        self._runs = {pid: (start, end) for pid, start, end in runs}
        self._parts: dict[str, dict[str, FileSums | None]] = {}
        self._index: dict[str, int] | None = None
        self._cols: list[list[Any]] | None = None

    @staticmethod
    def of(table: pa.Table, runs: Iterable[tuple[str, int, int]]) -> SnapshotSums | None:
        """The sums of a reference table, or None when it has no sum columns (an older
        snapshot) or no row has a sum."""
        if "size" not in table.schema.names or table.column("size").null_count == len(table):
            return None
        return SnapshotSums(table, runs)

    def lookup(self, filename: str, partition_id: str | None = None) -> FileSums | None:
        if partition_id is not None and partition_id in self._runs:
            part = self._parts.get(partition_id)
            if part is None:
                start, end = self._runs[partition_id]
                part = self._decode(self._table.slice(start, end - start))
                self._parts[partition_id] = part
            if filename in part:  # (a moved file is found below, in its old partition's rows)
                return part[filename]
        if self._index is None:
            names = self._table.column("filename").to_pylist()
            self._cols = [self._table.column(c).to_pylist() for c in SUM_COLUMNS]
            self._index = dict(zip(names, range(len(names)), strict=True))
        row = self._index.get(filename)
        if row is None or self._cols is None:
            return None
        size, footer, crc, sample = (c[row] for c in self._cols)
        return None if size is None else FileSums(size, footer, crc, sample)

    @staticmethod
    def _decode(table: pa.Table) -> dict[str, FileSums | None]:
        names = table.column("filename").to_pylist()
        cols = [table.column(c).to_pylist() for c in SUM_COLUMNS]
        return {n: None if size is None else FileSums(size, footer, crc, sample)
                for n, size, footer, crc, sample in zip(names, *cols, strict=True)}
