"""Joining Parquet files encoded apart into one file: the row groups of several *parts* (each
a whole Parquet file of the same schema and writer options), in order, as pyarrow would have
written them with one writer.

pyarrow encodes a file on one thread, and at 4,096-row groups with a page index and page
checksums the encoding is most of a small ingest (50k rows: ~25 of ~45 ms). Cut at row-group
boundaries, the rows are encoded as parts on two threads, then joined here. The bytes of the
row groups (pages, their headers and checksums) are the parts' own; what a part's position
changes is rewritten: the footer's offsets (a row group's ``file_offset``, a chunk's data,
index and dictionary page offsets), the page locations of the offset index, and where the
bloom filters and page index land. They follow pyarrow's layout (row groups, then bloom
filters, column indexes and offset indexes, each row group by row group, then the footer),
so the joined file is byte for byte the file one writer makes of the same rows with the same
row groups (``tests/files/test_stitch.py`` holds it to that).

Field ids: apache/parquet-format ``parquet.thrift``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sediment.files import thrift_compact as tc
from sediment.files.parquet_meta import (
    CC_CI_LEN,
    CC_CI_OFF,
    CC_META,
    CC_OI_LEN,
    CC_OI_OFF,
    CM_DATA,
    CM_DICT,
    FMD_GROUPS,
    FMD_ROWS,
    MAGIC,
    OI_PAGES,
    PL_OFFSET,
    RG_COLUMNS,
    struct_list,
)
from sediment.files.thrift_compact import I32, I64, LIST, STRUCT, Struct, TList

RG_FILE_OFFSET = 5
CM_INDEX_PAGE = 10
CM_BLOOM_OFF, CM_BLOOM_LEN = 14, 15


class StitchError(ValueError):
    """A part is not a Parquet file this module can join (the writer then encodes on one
    thread instead)."""


@dataclass(frozen=True, slots=True)
class _Part:
    data: memoryview
    meta: Struct
    body_end: int
    """Where the part's row groups end (its bloom filters, page index and footer follow)."""


def _footer(data: memoryview) -> tuple[Struct, int]:
    if len(data) < 12 or data[:4] != MAGIC or data[-4:] != MAGIC:
        raise StitchError("not a Parquet file")
    n = int.from_bytes(data[-8:-4], "little")
    start = len(data) - 8 - n
    if start < 4:
        raise StitchError("footer length past the start of the file")
    return tc.decode(data[start:-8]), start


def _chunks(meta: Struct) -> list[tuple[Struct, Struct]]:
    """(column chunk, its ColumnMetaData) of every chunk, row group by row group."""
    return [(c, c[CC_META][1]) for g in struct_list(meta, FMD_GROUPS)
            for c in struct_list(g, RG_COLUMNS)]


def _part(data: memoryview) -> _Part:
    meta, footer = _footer(data)
    ends = [footer]
    for chunk, cm in _chunks(meta):
        if CM_BLOOM_OFF in cm and CM_BLOOM_LEN not in cm:
            raise StitchError("a bloom filter without its length")
        ends += [v[1] for v in (cm.get(CM_BLOOM_OFF), chunk.get(CC_CI_OFF),
                                chunk.get(CC_OI_OFF)) if v is not None]
    return _Part(data, meta, min(ends))


def _shifted(s: Struct, fid: int, by: int) -> None:
    if fid in s:
        t, v = s[fid]
        s[fid] = (t, v + by)


def _located(s: Struct, off: int, length: int, off_id: int, len_id: int) -> None:
    s[off_id] = (I64, off)
    s[len_id] = (I32, length)


class Stitcher:
    """Joins parts as they come, in order, in bounded memory: :meth:`add` returns a part's
    row groups to write at once (the file starts with :data:`MAGIC`), and keeps only what
    goes after them (its footer, bloom filters and page index); :meth:`finish` returns that
    tail, the file's end."""

    def __init__(self) -> None:
        self.size = len(MAGIC)
        """Bytes of the joined file so far (the magic, and the row groups returned)."""
        self._meta: Struct | None = None
        self._rows = 0
        self._groups: list[Struct] = []
        self._chunks: list[tuple[Struct, Struct, bytes, bytes, Struct | None]] = []
        """Per chunk, row group by row group: the joined chunk, its ColumnMetaData, its
        bloom filter and column index bytes, and its offset index (shifted)."""

    def add(self, part: bytes | memoryview) -> memoryview:
        """Take ``part`` (a whole Parquet file): its row groups, to write next."""
        p = _part(memoryview(part))
        by = self.size - len(MAGIC)
        if self._meta is None:
            self._meta = p.meta
        self._rows += p.meta[FMD_ROWS][1]
        data = p.data
        for g in struct_list(p.meta, FMD_GROUPS):
            g = dict(g)
            _shifted(g, RG_FILE_OFFSET, by)
            chunks = []
            for c in struct_list(g, RG_COLUMNS):
                c = dict(c)
                cm = dict(c[CC_META][1])
                for fid in (CM_DATA, CM_INDEX_PAGE, CM_DICT):
                    _shifted(cm, fid, by)
                c[CC_META] = (STRUCT, cm)
                chunks.append(c)
                bloom = _bytes(data, cm, CM_BLOOM_OFF, CM_BLOOM_LEN)
                column_index = _bytes(data, c, CC_CI_OFF, CC_CI_LEN)
                offsets = _bytes(data, c, CC_OI_OFF, CC_OI_LEN)
                index = None if CC_OI_OFF not in c else tc.decode(offsets)
                if index is not None:
                    pages = []
                    for loc in struct_list(index, OI_PAGES):
                        loc = dict(loc)
                        _shifted(loc, PL_OFFSET, by)
                        pages.append(loc)
                    index[OI_PAGES] = (LIST, TList(STRUCT, pages))
                self._chunks.append((c, cm, bloom, column_index, index))
            g[RG_COLUMNS] = (LIST, TList(STRUCT, chunks))
            self._groups.append(g)
        body = data[len(MAGIC):p.body_end]
        self.size += len(body)
        return body

    def finish(self) -> bytes:
        """The end of the joined file: bloom filters, column indexes and offset indexes (each
        row group by row group, as pyarrow lays them out), the footer, its length, the magic.
        At least one part must have been added."""
        if self._meta is None:
            raise StitchError("no part to join")
        out = bytearray()
        at = self.size
        for _, cm, bloom, _, _ in self._chunks:
            if CM_BLOOM_OFF in cm:
                _located(cm, at + len(out), len(bloom), CM_BLOOM_OFF, CM_BLOOM_LEN)
                out += bloom
        for c, _, _, column_index, _ in self._chunks:
            if CC_CI_OFF in c:
                _located(c, at + len(out), len(column_index), CC_CI_OFF, CC_CI_LEN)
                out += column_index
        for c, _, _, _, index in self._chunks:
            if index is not None:
                encoded = tc.encode(index)
                _located(c, at + len(out), len(encoded), CC_OI_OFF, CC_OI_LEN)
                out += encoded
        meta = dict(self._meta)
        meta[FMD_ROWS] = (I64, self._rows)
        meta[FMD_GROUPS] = (LIST, TList(STRUCT, self._groups))
        footer = tc.encode(meta)
        out += footer
        out += len(footer).to_bytes(4, "little")
        out += MAGIC
        return bytes(out)


def _bytes(data: memoryview, s: Struct, off_id: int, len_id: int) -> bytes:
    """The bytes field ``off_id`` points at (``len_id`` long), or none when it is absent."""
    if off_id not in s:
        return b""
    start, n = s[off_id][1], s[len_id][1]
    if start < 0 or n < 0 or start + n > len(data):
        raise StitchError(f"field {off_id} points past the end of the part")
    return bytes(data[start:start + n])


def stitch(parts: Sequence[bytes]) -> bytes:
    """One Parquet file of ``parts``' row groups in order (see the module): the parts share
    one schema and one set of writer options."""
    joined = Stitcher()
    out = bytearray(MAGIC)
    for p in parts:
        out += joined.add(p)
    out += joined.finish()
    return bytes(out)
