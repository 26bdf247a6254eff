"""Checking a dumped file before a load takes it, in bounded memory whatever its size.

A task manifest lists each file's size and checksums: its CRC-32 (every dump since objects
of any size) and its SHA-256 (every file whose bytes passed through the dump; a dump before
CRC-32s has only these). :func:`check_dump_file` reads the file part by part
(``ObjectStore.read_parts``) taking both, reads it again while they differ (a byte changed on
the way is gone on the next read), then refuses it with CorruptMetadataError naming the file
and its manifest. The file is then opened as Parquet: held in memory when it is one part,
else through ranged reads (the store's Arrow filesystem) of its footer and of its key columns,
a batch of rows at a time: its row count, its schema, its order and its range are checked
(checksums only prove the files are the ones the manifests name).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from sediment.core.regions import Range
from sediment.errors import CorruptMetadataError, ObjectNotFoundError
from sediment.files.keys import range_mask, row_key, sort_indices
from sediment.files.sequence import SEQ, SEQ_FIELD
from sediment.files.sums import footer_crc
from sediment.schema import Schema
from sediment.storage.base import ObjectStore
from sediment.storage.checksums import ChecksumMismatch
from sediment.storage.transfer import Digest, Expected

READS = 3
"""Reads of a dump file whose bytes fail their checksum before the load is refused."""


@dataclass(frozen=True, slots=True)
class CheckedFile:
    """A dump file that passed its checks: its size, CRC-32 (whole file) and footer CRC-32
    (the sums a loaded data file is committed with), and its bytes when it is one part."""

    size: int
    crc: int
    footer: int
    data: bytes | None = None

    def source(self, objects: ObjectStore, key: str) -> Any:
        """The file for ``pq.ParquetFile``: its bytes, or ``key`` opened through the store's
        Arrow filesystem (ranged reads by Arrow's own client, as every other reader of
        Sediment's data files opens them)."""
        if self.data is not None:
            return pa.BufferReader(self.data)
        fs, _ = objects.arrow_filesystem()
        return fs.open_input_file(objects.path(key))


def expected(entry: dict[str, Any], where: str) -> Expected:
    """What a manifest's file entry says the bytes are; CorruptMetadataError when it lists
    no checksum at all (a file no check could vouch for)."""
    crc = entry.get("crc32")
    sha = entry.get("sha256")
    if crc is None and sha is None:
        raise CorruptMetadataError(f"{where}: file {entry.get('path')} lists no checksum")
    return Expected(int(entry["bytes"]), None if crc is None else int(str(crc), 16),
                    None if sha is None else str(sha))


def _digest(src: ObjectStore, path: str, size: int) -> tuple[Digest, bytes, bytes | None]:
    """One read of the file whose manifest says it has ``size`` bytes (one byte more is
    asked for, so that a longer file shows: no HEAD needed): its digest, its last two parts
    (the footer is in them), and its bytes when it fits one part."""
    digest = Digest()
    tail: list[bytes] = []
    for part in src.read_parts(path, size=size + 1):
        digest.update(part)
        tail = [*tail[-1:], part]
    joined = b"".join(tail)
    return digest, joined, joined if digest.size <= src.part_size else None


def check_dump_file(src: ObjectStore, path: str, mpath: str, entry: dict[str, Any]
                    ) -> CheckedFile:
    """Read ``path`` and check it against its manifest ``entry`` (see the module)."""
    want = expected(entry, f"task manifest {mpath}")
    size = int(entry["bytes"])
    problem = "?"
    for _ in range(READS):
        try:
            digest, tail, data = _digest(src, path, size)
        except ObjectNotFoundError:
            raise CorruptMetadataError(f"task manifest {mpath}: file {path} is missing from "
                                       f"{src.uri}") from None
        except ChecksumMismatch as e:  # the store's own check of a body
            problem = e.detail
            continue
        problem = want.problem(digest.size, digest.crc, digest.sha256) or ""
        if not problem:
            footer = footer_crc(tail)
            if footer is None and data is None:  # a footer longer than two parts
                footer = _long_footer(src, path, digest.size)
            return CheckedFile(digest.size, digest.crc, footer or 0, data)
    raise CorruptMetadataError(f"dump file {path}: checksum mismatch after {READS} reads: "
                               f"{problem} (it fails its checksum named in {mpath})")


def _long_footer(src: ObjectStore, path: str, size: int) -> int | None:
    """The footer CRC of a file whose footer is longer than two parts (thousands of row
    groups): read by its length, at the end."""
    if size < 8:
        return None
    length = int.from_bytes(src.get_range(path, size - 8, size - 4), "little")
    return footer_crc(src.get_range(path, max(0, size - length - 8), size))


def check_parquet(source: Any, path: str, mpath: str, rows: int,
                  fields: list[tuple[str, pa.DataType]] | None) -> pq.ParquetFile:
    """A dumped file is Parquet with the row count (and data files the schema) its manifest
    states; the opened file."""
    try:
        pf = pq.ParquetFile(source)
        got = [(f.name, f.type) for f in pf.schema_arrow]
    except (pa.ArrowException, OSError) as e:
        raise CorruptMetadataError(f"dump file {path} (named in {mpath}) is not valid "
                                   f"Parquet: {e}") from e
    if pf.metadata.num_rows != rows:
        raise CorruptMetadataError(f"dump file {path} holds {pf.metadata.num_rows} rows, its "
                                   f"manifest {mpath} says {rows}")
    if got and got[-1] == (SEQ, SEQ_FIELD.type):
        # a compacted file dumped whole keeps its hidden sequence column; as the loading
        # table's own file it is ignored (FileReference.sequenced: see files/sequence.py)
        got = got[:-1]
    if fields is not None and got != fields:
        raise CorruptMetadataError(f"dump file {path} (named in {mpath}) has columns {got}, "
                                   f"not the dump's schema {fields}")
    return pf


KEY_BATCH_ROWS = 1 << 18
"""Rows of key columns checked at once, whatever the file's size: some MiB of keys (262,144
keys of 100 bytes are 26 MB); a 1M-row load checked its keys in 0.37 s in batches of this
size, 0.93 s in batches of 65,536 (each batch's sort check has a fixed cost)."""


def check_keys(pf: pq.ParquetFile, path: str, mpath: str, schema: Schema, rng: Range) -> None:
    """A dumped data file is sorted and inside its task's range, read one batch of keys at
    a time (the last key of one carried into the next). Checksums cannot tell: a file
    outside its range would be referenced from leaves whose regions hide its rows from
    queries (and compaction would drop them), an unsorted one breaks every merge."""
    names = schema.key_names
    carried: pa.Table | None = None
    seen = 0
    for batch in pf.iter_batches(batch_size=KEY_BATCH_ROWS, columns=names):
        group = pa.Table.from_batches([batch])
        keys = group if carried is None else pa.concat_tables([carried, group])
        if group.num_rows == 0:
            continue
        order = sort_indices(keys, names)  # stable: sorted data gives 0, 1, 2, ...
        if not pc.all(pc.equal(order, pa.array(np.arange(keys.num_rows,
                                                          dtype=np.uint64)))).as_py():
            raise CorruptMetadataError(f"dump file {path} (named in {mpath}) is not sorted by "
                                       f"{', '.join(names)}")
        mask = range_mask(group, schema.row_key_names, rng)
        if mask is not None and not pc.all(mask).as_py():
            row = pc.indices_nonzero(pc.invert(mask))[0].as_py()
            raise CorruptMetadataError(
                f"dump file {path} (named in {mpath}): row {seen + row} has key "
                f"{row_key(group, row, schema.row_key_names)!r}, outside the task's range "
                f"{rng}")
        carried = group.slice(group.num_rows - 1)
        seen += group.num_rows
