"""Bulk import's input files cut into pieces, so that one large file is read by many tasks.

A piece is ``(filesystem, path, start, stop, first_row)``:

- Parquet: row groups ``start`` to ``stop`` (exclusive); ``first_row`` is the file's row number
  of the first one (for errors naming a row). Row groups are the unit Parquet reads by, so a
  file of one row group stays one piece.
- JSON lines, uncompressed: the lines that *start* in bytes ``start`` to ``stop``. A JSON string
  holds no raw newline, so every newline ends a record and any byte offset finds the next
  record start. ``first_row`` is unknown (-1): a piece that fails is read again whole, so that
  the error names the file's row as a whole-file read does.
- CSV (and compressed files): the whole file (``start`` = ``stop`` = -1). A quoted CSV field
  may hold a newline, so a byte offset cannot tell where a record starts without reading
  everything before it; a compressed stream cannot be entered in the middle.

The driver reads each Parquet footer and each file's size (in threads: on S3 each is a
request) and cuts pieces of about ``1 / (3 x Spark's parallelism)`` of the input's bytes, at
least :data:`MIN_PIECE_BYTES` and at most :data:`MAX_PIECE_BYTES`: a single file then keeps
every core busy, and many small files are not cut at all.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs

from sediment.errors import DataError
from sediment.schema import Schema

MIN_PIECE_BYTES = 1024 * 1024
MAX_PIECE_BYTES = 256 * 1024 * 1024
_SCAN = 64 * 1024

Piece = tuple[str, str, int, int, int]
"""``(filesystem name, path, start, stop, first_row)``: see the module."""

PIECE_DDL = "fs string, path string, start long, stop long, first_row long"


def _splittable_json(path: str) -> bool:
    low = path.lower()
    return low.endswith((".jsonl", ".json", ".ndjson"))


def _layout(fs: pafs.FileSystem, path: str) -> tuple[str, list[int], list[int]]:
    """How a file can be cut: ("parquet", bytes of each row group, rows of each), ("json",
    [size], []) or ("whole", [size], [])."""
    import pyarrow.parquet as pq

    from sediment.ingest.sources import file_format

    fmt = file_format(path)
    try:
        if fmt == "parquet":
            with fs.open_input_file(path) as f:
                meta = pq.ParquetFile(f).metadata
            groups = [meta.row_group(i) for i in range(meta.num_row_groups)]
            return "parquet", [g.total_byte_size for g in groups], [g.num_rows for g in groups]
        size = fs.get_file_info(path).size or 0
        return ("json" if fmt == "json" and _splittable_json(path) else "whole"), [size], []
    except (pa.ArrowInvalid, OSError) as e:
        raise DataError(f"cannot read {fmt} file {path!r}: {e}") from e


def plan_pieces(files: Sequence[tuple[pafs.FileSystem, str]], parallelism: int
                ) -> tuple[list[Piece], int | None]:
    """The pieces of ``files`` (expanded paths), in file order, and the rows of all files when
    every one is Parquet (its footer says), else None."""
    if not files:
        return [], 0
    with ThreadPoolExecutor(min(16, len(files))) as pool:
        layouts = list(pool.map(lambda f: _layout(*f), files))
    total = sum(sum(sizes) for _, sizes, _ in layouts)
    target = max(MIN_PIECE_BYTES, min(MAX_PIECE_BYTES,
                                      math.ceil(total / max(1, 3 * parallelism))))
    out: list[Piece] = []
    for (fs, path), (kind, sizes, rows) in zip(files, layouts, strict=True):
        fs_name = fs.type_name
        if kind == "parquet":
            start, held, first = 0, 0, 0
            for i, size in enumerate(sizes):
                held += size
                if held >= target or i == len(sizes) - 1:
                    out.append((fs_name, path, start, i + 1, first))
                    first += sum(rows[start:i + 1])
                    start, held = i + 1, 0
            if not sizes:
                out.append((fs_name, path, 0, 0, 0))
        elif kind == "json" and sizes[0] > target:
            size = sizes[0]
            n = math.ceil(size / target)
            cuts = [size * k // n for k in range(n + 1)]
            out.extend((fs_name, path, cuts[k], cuts[k + 1], -1) for k in range(n))
        else:
            out.append((fs_name, path, -1, -1, 0))
    known = None if any(kind != "parquet" for kind, _, _ in layouts) else \
        sum(sum(rows) for _, _, rows in layouts)
    return out, known


def _json_bytes(fs: pafs.FileSystem, path: str, start: int, stop: int) -> bytes:
    """The lines of the file that start in bytes ``[start, stop)``, whole."""
    with fs.open_input_file(path) as f:
        size = f.size()
        begin = start - 1 if start > 0 else 0
        data = f.read_at(min(stop, size) - begin, begin)
        if start > 0:
            i = data.find(b"\n")
            if i < 0:
                return b""  # no line starts in the range
            data = data[i + 1:]
        end = min(stop, size)
        tail: list[bytes] = []
        while end < size and not (data if not tail else tail[-1]).endswith(b"\n"):
            chunk = f.read_at(min(_SCAN, size - end), end)
            i = chunk.find(b"\n")
            if i >= 0:
                tail.append(chunk[:i + 1])
                break
            tail.append(chunk)
            end += len(chunk)
    return data + b"".join(tail)


def read_piece(fs: pafs.FileSystem, piece: Piece, schema: Schema, table_name: str
               ) -> Iterator[pa.RecordBatch]:
    """The piece's rows as batches conformed to the table's schema (DataError naming the file
    and row, as a whole-file read does)."""
    import pyarrow.json as pajson
    import pyarrow.parquet as pq

    from sediment.ingest.sources import conform, file_format, read_file

    _, path, start, stop, first_row = piece
    if start < 0:
        offset = 0
        for rb in read_file(fs, path, schema):
            yield conform(rb, schema, table_name, offset, path)
            offset += rb.num_rows
        return
    if file_format(path) == "parquet":
        offset = first_row
        try:
            pf = pq.ParquetFile(fs.open_input_file(path))
            for i in range(start, stop):  # row group by row group: bounded memory
                for rb in pf.read_row_group(i).to_batches():
                    yield conform(rb, schema, table_name, offset, path)
                    offset += rb.num_rows
        except (pa.ArrowInvalid, pa.ArrowTypeError, OSError) as e:
            raise DataError(f"cannot read parquet file {path!r}: {e}") from e
        return
    try:
        data = _json_bytes(fs, path, start, stop)
        if not data.strip():
            return
        table = pajson.read_json(pa.BufferReader(data), parse_options=pajson.ParseOptions(
            explicit_schema=schema.to_arrow(), unexpected_field_behavior="error"))
        batches = [conform(rb, schema, table_name, 0, path) for rb in table.to_batches()]
    except (pa.ArrowInvalid, pa.ArrowTypeError, OSError, DataError) as e:
        # Read the whole file for the error a whole-file read gives (naming field and row).
        offset = 0
        for rb in read_file(fs, path, schema):
            conform(rb, schema, table_name, offset, path)
            offset += rb.num_rows
        raise DataError(f"cannot read json file {path!r}: {e}") from e
    yield from batches


def read_piece_keys(fs: pafs.FileSystem, piece: Piece, schema: Schema, table_name: str
                    ) -> Iterator[pa.RecordBatch]:
    """The row keys of the piece's rows (for sampling). Of a Parquet piece only the key
    columns are read; when they are not plainly the table's (a null, another type), the
    piece is read as :func:`read_piece` does, which names the bad field and row."""
    import pyarrow.parquet as pq

    from sediment.ingest.sources import file_format

    names = schema.row_key_names
    arrow = schema.to_arrow()
    key_schema = pa.schema([arrow.field(n) for n in names])
    _, path, start, stop, _ = piece
    if start >= 0 and file_format(path) == "parquet":
        try:
            pf = pq.ParquetFile(fs.open_input_file(path))
            plain = pf.schema_arrow
            if all(n in plain.names and plain.field(n).type.equals(key_schema.field(n).type)
                   for n in names):
                groups = [pf.read_row_group(i, columns=list(names)) for i in range(start, stop)]
                if all(t.column(n).null_count == 0 for t in groups for n in names):
                    for t in groups:
                        yield from t.select(list(names)).cast(key_schema).to_batches()
                    return
        except (pa.ArrowInvalid, pa.ArrowTypeError, OSError):
            pass  # the whole read below reports it
    for b in read_piece(fs, piece, schema, table_name):
        yield b.select(list(names))


def piece_rows(batches: Iterator[Any]) -> Iterator[Piece]:
    """The pieces in a task's Arrow batches of :data:`PIECE_DDL` rows."""
    for b in batches:
        cols = [b.column(n).to_pylist() for n in ("fs", "path", "start", "stop", "first_row")]
        yield from zip(*cols, strict=True)
