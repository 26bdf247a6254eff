"""Whole-file dumps: a task whose leaf holds one file, all of it inside the task's tile, copies
the file's bytes and its sample's (no decoding, no re-encoding): the cheapest dump there is."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

from sediment.core.model import FileReference
from sediment.core.regions import Range
from sediment.dump.lock import guard
from sediment.dump.manifest import FORMAT, dumps, range_to_json, sha256
from sediment.files.sidecars import SAMPLE, read_sidecar
from sediment.storage.base import ObjectStore

if TYPE_CHECKING:
    from sediment.handle import TableHandle


def whole_file(executor: Any, refs: Sequence[FileReference], tile: Range,
               iterators: Sequence[object]) -> FileReference | None:
    """The task's only file when it can be copied byte for byte: one exact reference, no
    compaction ``iterators``, and every row strictly inside the task's ``tile`` (judged on
    the first row-key field from the cached footer statistics)."""
    if len(refs) != 1 or refs[0].approximate or iterators:
        return None
    ref = refs[0]
    _, footer = executor.footers.open(ref.filename)
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


def copy_file(table: TableHandle, dest: ObjectStore, prefix: str, version: int, tile: Range,
              ref: FileReference) -> str:
    """Dump a whole data file and its sample by copying their bytes (no re-encoding)."""
    files: list[dict[str, Any]] = []
    guard()
    for kind in ("data", "sample"):
        # the sample under its current name, or its legacy one (sediment.files.sidecars)
        raw = table.objects.get(ref.filename) if kind == "data" else \
            read_sidecar(table.objects, ref.filename, SAMPLE)[1]
        path = f"{prefix}/{version}-{kind}.parquet"
        dest.put(path, raw)
        rows = ref.records if kind == "data" else pq.ParquetFile(pa.BufferReader(raw)
                                                                 ).metadata.num_rows
        files.append({"path": path, "kind": kind, "rows": rows, "bytes": len(raw),
                      "sha256": sha256(raw)})
    manifest = {"format": FORMAT, "version": version, "range": range_to_json(tile),
                "rows": ref.records, "bytes": sum(f["bytes"] for f in files), "files": files,
                "final": True, "copied": True}
    path = f"{prefix}/{version}-manifest.json"
    dest.put(path, dumps(manifest))
    return path
