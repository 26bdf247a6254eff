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

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

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
)
from sediment.files.thrift_compact import STRUCT, ThriftError, put_int
from sediment.files.thrift_edit import (
    START,
    Plan,
    edit,
    edit_struct,
    field_spans,
    list_head,
    struct_spans,
)

RG_FILE_OFFSET = 5
CM_INDEX_PAGE = 10
CM_BLOOM_OFF, CM_BLOOM_LEN = 14, 15
_INDEXES = {"bloom": (CM_BLOOM_OFF, CM_BLOOM_LEN), "column": (CC_CI_OFF, CC_CI_LEN),
            "offset": (CC_OI_OFF, CC_OI_LEN)}


class StitchError(ValueError):
    """Bytes that are not a Parquet part this module can join."""


@dataclass(slots=True)
class _Chunk:
    """One column chunk of a part: where its bloom filter and page index were, their bytes
    (the offset index's shifted), and where they go in the joined file."""

    old: dict[int, int] = field(default_factory=dict)
    """Field id -> value, for the index fields it has (offsets and lengths)."""
    pieces: dict[str, bytes] = field(default_factory=dict)
    at: dict[str, int] = field(default_factory=dict)


@dataclass(slots=True)
class _Part:
    footer: bytes
    groups: list[tuple[int, int]]
    """(start, end) of each RowGroup in ``footer``."""
    chunks: list[_Chunk]
    shift: int
    rows: int


def _int(buf: bytes, span: tuple[int, int, int]) -> int:
    t, pos, end = span
    n = shift = 0
    for b in buf[pos:end]:
        n |= (b & 0x7F) << shift
        shift += 7
    return (n >> 1) ^ -(n & 1)


def _recorder(chunks: list[_Chunk]) -> Plan:
    """A plan that edits nothing and records each chunk's index fields into ``chunks``."""
    def keep(fid: int) -> Callable[[int], int]:
        def record(v: int) -> int:
            chunks[-1].old[fid] = v
            return v
        return record

    return {RG_COLUMNS: {START: lambda: chunks.append(_Chunk()),
                         CC_META: {CM_BLOOM_OFF: keep(CM_BLOOM_OFF),
                                   CM_BLOOM_LEN: keep(CM_BLOOM_LEN)},
                         **{f: keep(f) for f in (CC_OI_OFF, CC_OI_LEN, CC_CI_OFF, CC_CI_LEN)}}}


def _placer(part: _Part) -> Plan:
    """A plan that moves ``part``'s row groups to their place in the joined file."""
    chunks = iter(part.chunks)
    now: list[_Chunk] = []

    def shifted(v: int) -> int:
        return v + part.shift

    def placed(kind: str, length: bool) -> Callable[[int], int]:
        def value(_: int) -> int:
            c = now[0]
            return len(c.pieces[kind]) if length else c.at[kind]
        return value

    def begin() -> None:
        now[:] = [next(chunks)]

    return {RG_FILE_OFFSET: shifted,
            RG_COLUMNS: {START: begin,
                         CC_META: {CM_DATA: shifted, CM_INDEX_PAGE: shifted, CM_DICT: shifted,
                                   CM_BLOOM_OFF: placed("bloom", False),
                                   CM_BLOOM_LEN: placed("bloom", True)},
                         CC_OI_OFF: placed("offset", False), CC_OI_LEN: placed("offset", True),
                         CC_CI_OFF: placed("column", False), CC_CI_LEN: placed("column", True)}}


class Stitcher:
    """Joins parts as they come, in order, in bounded memory: :meth:`add` returns a part's
    row groups to write at once (the file starts with :data:`MAGIC`), and keeps only what
    goes after them (its footer, bloom filters and page index); :meth:`finish` returns that
    tail, the file's end."""

    def __init__(self) -> None:
        self.size = len(MAGIC)
        """Bytes of the joined file so far (the magic, and the row groups returned)."""
        self._parts: list[_Part] = []

    def add(self, part: bytes | memoryview) -> memoryview:
        """Take ``part`` (a whole Parquet file): its row groups, to write next."""
        data = memoryview(part)
        try:
            return self._add(data)
        except (ThriftError, IndexError, KeyError) as e:
            raise StitchError(f"a part cannot be joined: {e}") from e

    def _add(self, data: memoryview) -> memoryview:
        if len(data) < 12 or data[:4] != MAGIC or data[-4:] != MAGIC:
            raise StitchError("a part is not a Parquet file")
        n = int.from_bytes(data[-8:-4], "little")
        start = len(data) - 8 - n
        if start < 4:
            raise StitchError("a part's footer length runs past its start")
        footer = bytes(data[start:-8])
        top = field_spans(footer)
        groups = struct_spans(footer, top[FMD_GROUPS][1])
        chunks: list[_Chunk] = []
        recorder = _recorder(chunks)
        scratch = bytearray()
        for a, _ in groups:
            edit_struct(footer, a, scratch, recorder)
        body_end = min([start, *(c.old[f] for c in chunks for f in
                                 (CM_BLOOM_OFF, CC_CI_OFF, CC_OI_OFF) if f in c.old)])
        shift = self.size - len(MAGIC)
        for c in chunks:
            for kind, (off, length) in _INDEXES.items():
                if off not in c.old:
                    continue
                if length not in c.old:
                    raise StitchError(f"a part's {kind} index has no length")
                a, b = c.old[off], c.old[off] + c.old[length]
                if a < body_end or b > start:
                    raise StitchError(f"a part's {kind} index is out of place")
                piece = bytes(data[a:b])
                if kind == "offset":  # its pages' offsets move with the row groups
                    piece = edit(piece, {OI_PAGES: {PL_OFFSET: lambda v: v + shift}})
                c.pieces[kind] = piece
        self._parts.append(_Part(footer, groups, chunks, shift, _int(footer, top[FMD_ROWS])))
        body = data[len(MAGIC):body_end]
        self.size += len(body)
        return body

    def finish(self) -> bytes:
        """The end of the joined file: bloom filters, column indexes and offset indexes (each
        row group by row group, as pyarrow lays them out), the footer, its length, the magic.
        At least one part must have been added."""
        if not self._parts:
            raise StitchError("no part to join")
        out = bytearray()
        chunks = [c for p in self._parts for c in p.chunks]
        for kind in _INDEXES:
            for c in chunks:
                if kind in c.pieces:
                    c.at[kind] = self.size + len(out)
                    out += c.pieces[kind]
        groups = bytearray()
        for p in self._parts:
            placer = _placer(p)
            for a, _ in p.groups:
                edit_struct(p.footer, a, groups, placer)
        first = self._parts[0].footer
        top = field_spans(first)
        _, rows_at, rows_end = top[FMD_ROWS]
        _, groups_at, groups_end = top[FMD_GROUPS]
        if rows_end > groups_at:
            raise StitchError("a part's footer is not in field order")
        footer = bytearray(first[:rows_at])
        put_int(footer, sum(p.rows for p in self._parts))
        footer += first[rows_end:groups_at]
        footer += list_head(sum(len(p.groups) for p in self._parts), STRUCT)
        footer += groups
        footer += first[groups_end:]
        out += footer
        out += len(footer).to_bytes(4, "little")
        out += MAGIC
        return bytes(out)



def stitch(parts: Sequence[bytes]) -> bytes:
    """One Parquet file of ``parts``' row groups in order (see the module): the parts share
    one schema and one set of writer options."""
    joined = Stitcher()
    out = bytearray(MAGIC)
    for p in parts:
        out += joined.add(p)
    out += joined.finish()
    return bytes(out)
