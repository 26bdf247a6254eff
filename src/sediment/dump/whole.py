"""Whole-file dumps: a task whose leaf holds one file, all of it inside the task's tile, copies
the file's bytes and its sample's (no decoding, no re-encoding): the cheapest dump there is."""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

from sediment.core.model import FileReference
from sediment.core.regions import Range
from sediment.dump.lock import guard
from sediment.dump.manifest import FORMAT, dumps, file_entry, range_to_json
from sediment.errors import CorruptionError
from sediment.files.samples_io import decode_sample
from sediment.files.sidecars import SAMPLE, read_sidecar
from sediment.files.verified import Sums, reading
from sediment.storage import checksums
from sediment.storage.base import ObjectStore
from sediment.storage.transfer import Expected, Transferred, transfer

if TYPE_CHECKING:
    from sediment.handle import TableHandle


def whole_file(executor: Any, refs: Sequence[FileReference], tile: Range,
               iterators: Sequence[object], sums: Mapping[str, Sums] | None = None
               ) -> FileReference | None:
    """The task's only file when it can be copied byte for byte: one exact reference, no
    compaction ``iterators``, and every row strictly inside the task's ``tile`` (judged on
    the first row-key field from the cached footer statistics)."""
    if len(refs) != 1 or refs[0].approximate or iterators:
        return None
    ref = refs[0]
    _, footer = executor.footers.open(ref.filename, (sums or {}).get(ref.filename))
    if footer.metadata.num_rows != ref.records or not footer.mins or \
            any(m is None for m in footer.mins + footer.maxs):
        return None
    lo, hi = min(footer.mins), max(footer.maxs)
    # The tile, not the dump range (the task's ``query``): the file may be an ancestor's (not yet
    # pushed down) or shared with other leaves, holding rows of other tiles; the tile lies
    # inside the dump range and the leaf's region, so rows inside it are exactly the task's.
    rng = tile
    if rng.start is not None and not lo > rng.start[0]:
        return None
    if rng.end is not None and not hi < rng.end[0]:
        return None
    return ref


def _copy_data(table: TableHandle, dest: ObjectStore, path: str, ref: FileReference,
               sums: Sums) -> Transferred:
    """Copy the data file to ``path``, checked against its ``sums`` (size and whole CRC-32)
    so that a damaged read never becomes a valid-looking dump: inside the storage service
    where both ends are on it (S3's CRC-32 of the copy checked; no byte passes through this
    process), else streamed part by part with its CRC-32 taken on the way. A mismatch is
    read again once, then CorruptDataError naming the file."""
    expect = Expected(sums.size, sums.crc) if checksums.VERIFY_READS else Expected()

    def read(_: int) -> Transferred:
        return transfer(table.objects, ref.filename, dest, path, size=sums.size,
                        expect=expect)

    return reading(table.name, ref.filename, table.objects.uri, read)


def _sample_bytes(table: TableHandle, ref: FileReference, sums: Sums | None) -> bytes:
    """The sample's bytes as stored (current or legacy name) when they are whole, else the
    sample rebuilt from the data file (sediment.files.samples_io), encoded again."""
    try:
        raw = read_sidecar(table.objects, ref.filename, SAMPLE)[1]
        decode_sample(raw, sums)
        return raw
    except (pa.ArrowException, OSError, CorruptionError):  # the store's check failing too
        buf = io.BytesIO()  # the reader re-reads, warns and rebuilds
        pq.write_table(table.samples.sample(ref.filename, sums), buf, compression="zstd")
        return buf.getvalue()


def copy_file(table: TableHandle, dest: ObjectStore, prefix: str, version: int, tile: Range,
              ref: FileReference, sums: Sums) -> str:
    """Dump a whole data file and its sample by copying their bytes (no re-encoding), both
    checked (the data file against its ``sums``). Each file's entry carries its CRC-32 (the
    project's checksum of a file), and its SHA-256 when its bytes passed through here (a
    streamed copy); a load checks what is there."""
    files: list[dict[str, Any]] = []
    guard()
    path = f"{prefix}/{version}-data.parquet"
    done = _copy_data(table, dest, path, ref, sums)
    entry: dict[str, Any] = {"path": path, "kind": "data", "rows": ref.records,
                             "bytes": done.size,
                             "crc32": f"{sums.crc if done.crc32 is None else done.crc32:08x}"}
    if done.sha256 is not None:
        entry["sha256"] = done.sha256
    files.append(entry)
    raw = _sample_bytes(table, ref, sums)  # small: a few thousand keys
    path = f"{prefix}/{version}-sample.parquet"
    dest.put(path, raw)
    files.append(file_entry(path, "sample", pq.ParquetFile(pa.BufferReader(raw)
                                                            ).metadata.num_rows, raw))
    manifest = {"format": FORMAT, "version": version, "range": range_to_json(tile),
                "rows": ref.records, "bytes": sum(f["bytes"] for f in files), "files": files,
                "final": True, "copied": True}
    path = f"{prefix}/{version}-manifest.json"
    dest.put(path, dumps(manifest))
    return path
