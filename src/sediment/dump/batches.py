"""One batch of a dump task on the destination store: its data file, streamed into the store
as Parquet encodes it (S3: a multipart upload past a part), its sample and its manifest; and
the clearing of a task's folder before a (re)try, incomplete uploads included."""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from sediment.core.regions import Range
from sediment.dump.manifest import FORMAT, dumps, file_entry, range_to_json
from sediment.files.sample import KeySampler
from sediment.storage.base import ObjectStore
from sediment.storage.transfer import DigestingWriter


def write_batch(dest: ObjectStore, prefix: str, version: int, data: pa.Table,
                names: Sequence[str], rng: Range, final: bool, sample_size: int,
                row_group_rows: int) -> dict[str, Any]:
    """Write one batch of a task: its rows as a data file (omitted when empty) streamed
    into the store as it is encoded, its key sample, and its manifest (last, naming both
    with their sizes and checksums); the manifest."""
    files: list[dict[str, Any]] = []
    if data.num_rows:
        path = f"{prefix}/{version}-data.parquet"
        # streamed into the store as it is encoded (S3: a multipart upload past a part)
        with dest.open_writer(path) as out:
            sink = DigestingWriter(out)
            pq.write_table(data, sink, compression="zstd", row_group_size=row_group_rows,
                           write_page_checksum=True,
                           sorting_columns=[pq.SortingColumn(i) for i in range(len(names))])
        d = sink.digest
        files.append({"path": path, "kind": "data", "rows": data.num_rows, "bytes": d.size,
                      "crc32": f"{d.crc:08x}", "sha256": d.sha256})
    sampler = KeySampler(names, sample_size)
    if data.num_rows:
        sampler.add(data)
    sample = sampler.sample(pa.schema([data.schema.field(n) for n in names]))
    buf = io.BytesIO()
    pq.write_table(sample, buf, compression="zstd", write_page_checksum=True)
    raw = buf.getvalue()
    path = f"{prefix}/{version}-sample.parquet"
    dest.put(path, raw)
    files.append(file_entry(path, "sample", sample.num_rows, raw))
    manifest = {"format": FORMAT, "version": version, "range": range_to_json(rng),
                "rows": data.num_rows, "bytes": sum(f["bytes"] for f in files), "files": files,
                "final": final}
    dest.put(f"{prefix}/{version}-manifest.json", dumps(manifest))
    return manifest


def clear_task_folder(dest: ObjectStore, folder: str) -> None:
    """Delete what an earlier try of a task left in its folder: its objects, and the
    multipart uploads a try killed mid-file left incomplete (a rerun writes every file
    again, from its first part)."""
    dest.abort_uploads(list(dest.multipart_uploads(folder + "/")))
    dest.delete_many([o.key for o in dest.list(folder + "/")])
