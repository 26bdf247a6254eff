"""``verify`` of one data file and its sidecars: what each object is checked against, and
what counts as damage (``sediment.maintenance.verify`` runs it once per file of the versions
it checks, and says which versions the damage breaks).

A data file whose commit recorded its sums (``FileSums``) is checked against them: its size
(HEAD), the CRC-32 of its footer (a ranged read of its last bytes) and of the whole file
(streamed a megabyte at a time: bounded memory whatever its size). Its sample is checked
against the sample CRC-32 of the same sums, and decoded. A key filter of format 2 is checked
block by block against the CRC-32 after each block (and its header against its own), and its
block count against the file's row groups. ``deep`` then decodes every row group of the data
file, one at a time, with page CRCs verified: what finds a damaged page of a file without
recorded sums (a legacy file), whose whole-file CRC is not known.

Damage is read again once before it is reported (``files.verified.READS``): on a remote
store a byte may have changed on the way. A file without recorded sums, a sample its sums do
not cover, a key filter of format 1 are *unchecked*: their existence is checked (and a
footer or a sample that does not decode is damage all the same), their bytes are not.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

import pyarrow as pa
import pyarrow.parquet as pq

from sediment.core.model import FileSums
from sediment.errors import CorruptDataError, CorruptionError, ObjectNotFoundError, StorageError
from sediment.files.keyfilter import HEADER_BYTES, FilterLayout
from sediment.files.samples_io import decode_sample
from sediment.files.sidecars import (
    KEYS,
    SAMPLE,
    read_sidecar,
    read_sidecar_range,
    sidecar_name,
)
from sediment.files.sums import footer_length
from sediment.files.verified import (
    CHUNK,
    READS,
    decode_all,
    file_crc,
    footer_problem,
    reading,
    whole_problem,
)
from sediment.query.footers import FOOTER_GUESS
from sediment.storage.base import ObjectStore
from sediment.storage.checksums import crc32

DATA = "data file"
SAMPLE_KIND = "sample"
KEY_FILTER = "key filter"
FILE_KINDS = (DATA, SAMPLE_KIND, KEY_FILTER)
"""The kinds of object a data file brings: each breaks the versions that reference it."""

_T = TypeVar("_T")


@dataclass(slots=True)
class FileFindings:
    """What checking one data file found: the kinds of object that match their checksum,
    those that have none and show no damage (unchecked), the damage (kind, key, problem)
    and the bytes read."""

    checked: list[str] = field(default_factory=list)
    unchecked: list[str] = field(default_factory=list)
    damage: list[tuple[str, str, str]] = field(default_factory=list)
    bytes: int = 0

    def damaged(self, kind: str, key: str, problem: str) -> None:
        self.damage.append((kind, key, problem))


def check_file(objects: ObjectStore, table: str, filename: str, sums: FileSums | None, *,
               deep: bool) -> FileFindings:
    """Check data file ``filename`` of ``table`` (and its sample and key filter) against
    ``sums`` (None: recorded by no commit); with ``deep``, decode every row group too."""
    out = FileFindings()
    info = objects.head(filename)
    if info is None:
        out.damaged(DATA, filename, "missing")
        return out
    groups = _check_data(objects, table, filename, info.size, sums, out)
    if deep and not out.damage:
        _decode(objects, table, filename, out)
        if out.damage:  # counted damaged, not checked (nor unchecked)
            out.checked = [k for k in out.checked if k != DATA]
            out.unchecked = [k for k in out.unchecked if k != DATA]
    _check_sample(objects, filename, sums, out)
    _check_keys(objects, filename, groups, out)
    return out


def _check_data(objects: ObjectStore, table: str, filename: str, size: int,
                sums: FileSums | None, out: FileFindings) -> int | None:
    """Size, footer and whole-file CRC of the data file against ``sums``; its row groups
    (from its footer), or None when the footer does not decode."""
    tail = b""
    problem: str | None = None
    for _ in range(READS):
        tail = _tail(objects, filename, size)
        out.bytes += len(tail)
        problem = footer_problem(tail, size, sums)
        if problem is None:
            break
    groups: int | None = None
    if problem is None:
        try:
            groups = pq.read_metadata(pa.BufferReader(tail)).num_row_groups
        except (pa.ArrowException, OSError) as e:
            problem = f"its footer does not decode: {e}"
    if problem is not None:
        out.damaged(DATA, filename, f"{problem} (read {READS} times)")
        return None
    if sums is None:
        out.unchecked.append(DATA)
        return groups
    for _ in range(READS):
        got_size, got_crc = _whole_crc(objects, filename)
        out.bytes += got_size
        problem = whole_problem(got_size, got_crc, sums)
        if problem is None:
            out.checked.append(DATA)
            return groups
    out.damaged(DATA, filename, f"{problem}: a page or a page header (read {READS} times)")
    return groups


def _tail(objects: ObjectStore, filename: str, size: int) -> bytes:
    """The last bytes of a data file, its whole footer in them (two reads when the footer is
    larger than the first guess)."""
    tail = objects.get_range(filename, max(0, size - FOOTER_GUESS), size)
    if len(tail) >= 8:
        need = footer_length(tail) + 8
        if len(tail) < need <= size:
            tail = objects.get_range(filename, size - need, size)
    return tail


def _whole_crc(objects: ObjectStore, filename: str) -> tuple[int, int]:
    """(size, CRC-32) of a whole object, streamed (a local file read directly)."""
    local = objects.local_path(filename)
    try:
        if local is not None:
            return file_crc(local)
        fs, _ = objects.arrow_filesystem()
        crc = size = 0
        with fs.open_input_stream(objects.path(filename)) as f:
            while chunk := f.read(CHUNK):
                crc = crc32(chunk, crc)
                size += len(chunk)
        return size, crc
    except FileNotFoundError:
        return 0, 0  # deleted since its HEAD: its size says so
    except OSError as e:
        raise StorageError(f"reading {filename} in {objects.uri}: {e}") from e


def _decode(objects: ObjectStore, table: str, filename: str, out: FileFindings) -> None:
    """Every row group of the data file decoded, one at a time, its page CRCs verified."""
    fs, _ = objects.arrow_filesystem()
    path = objects.path(filename)
    try:
        reading(table, filename, objects.uri, lambda _: decode_all(fs.open_input_file(path)))
    except CorruptDataError as e:
        out.damaged(DATA, filename, str(e))
    except FileNotFoundError:
        out.damaged(DATA, filename, "missing")


def _again(read: Callable[[], _T]) -> _T:
    """``read()``, once more when it raises CorruptionError (a byte changed on the way)."""
    for attempt in range(READS):
        try:
            return read()
        except CorruptionError:
            if attempt == READS - 1:
                raise
    raise AssertionError("unreachable")


def _check_sample(objects: ObjectStore, filename: str, sums: FileSums | None,
                  out: FileFindings) -> None:
    recorded = sums is not None and sums.sample is not None
    name = sidecar_name(filename, SAMPLE)
    try:
        def read() -> int:
            nonlocal name
            name, raw = read_sidecar(objects, filename, SAMPLE)
            try:
                decode_sample(raw, sums)
            except (pa.ArrowException, OSError) as e:
                raise CorruptionError(f"it does not decode: {e}") from e
            return len(raw)

        out.bytes += _again(read)
    except ObjectNotFoundError:
        if recorded:  # its writer wrote one: gone since
            out.damaged(SAMPLE_KIND, name, "missing")
        return
    except CorruptionError as e:
        out.damaged(SAMPLE_KIND, name, f"{e} (read {READS} times)")
        return
    (out.checked if recorded else out.unchecked).append(SAMPLE_KIND)


def _check_keys(objects: ObjectStore, filename: str, groups: int | None,
                out: FileFindings) -> None:
    """The key filter: header, then its blocks a megabyte at a time. None at all is no
    damage (``parquet.key_filter_bits`` 0, or a file written before filters)."""
    try:
        name, _ = read_sidecar_range(objects, filename, KEYS, 0, HEADER_BYTES)
    except ObjectNotFoundError:
        return
    where = f"{name} in {objects.uri}"
    try:
        layout = _again(lambda: FilterLayout.parse(
            objects.get_range(name, 0, HEADER_BYTES), where))
    except CorruptionError as e:  # an unknown header, or one failing its CRC
        out.damaged(KEY_FILTER, name, str(e))
        return
    if layout.format < 2:
        out.unchecked.append(KEY_FILTER)
        return
    info = objects.head(name)
    size = 0 if info is None else info.size
    blocks, extra = divmod(size - layout.header_bytes, layout.stride)
    if extra or (groups is not None and blocks != groups):
        out.damaged(KEY_FILTER, name, f"{size} bytes: {blocks} blocks of {layout.stride} "
                                      f"and {extra} bytes over, for {groups} row groups")
        return
    per = max(1, CHUNK // layout.stride)
    for first in range(0, blocks, per):
        last = min(blocks, first + per)
        start, end = layout.block_range(first)[0], layout.block_range(last - 1)[1]

        def read(start: int = start, end: int = end, first: int = first,
                 last: int = last) -> None:
            raw = objects.get_range(name, start, end)
            for g in range(last - first):
                at = g * layout.stride
                try:
                    layout.block(raw[at:at + layout.stride], where)
                except CorruptDataError as e:
                    raise CorruptDataError(f"the block of row group {first + g} fails its "
                                           "CRC-32", key=name) from e

        try:
            _again(read)
        except CorruptionError as e:
            out.damaged(KEY_FILTER, name, f"{e} (read {READS} times)")
            return
        out.bytes += end - start
    out.checked.append(KEY_FILTER)
