"""Test-only helpers over Sediment's internals: what the tests and benchmarks need to build or
inspect a state or a file directly, which the library itself never calls (so it is not in
``src/``)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import pyarrow as pa

from sediment.core.keys import Key
from sediment.core.model import Partition
from sediment.core.state import ROOT_PARTITION_ID, TableState
from sediment.errors import CorruptMetadataError
from sediment.files.sample import COUNT
from sediment.files.writer import SortedFileWriter, WrittenFile
from sediment.schema import Schema
from sediment.state.snapshot import RangeInfo, read_metarange, read_pointer, snapshot_key
from sediment.storage.base import ObjectStore


def build_sample(sorted_keys: pa.Table, size: int) -> pa.Table:
    """Every k-th row key of sorted data (k = ceil(rows / size)) with the rows each stands
    for: the exact equi-depth sample a data file's sidecar holds, built from all of its keys at
    once (the writer's ``KeySampler`` builds it from a stream)."""
    n = sorted_keys.num_rows
    if n == 0:
        return sorted_keys.append_column(COUNT, pa.array([], pa.int64()))
    k = max(1, math.ceil(n / size))
    idx = np.arange(0, n, k, dtype=np.int64)
    counts = np.minimum(k, n - idx)
    picked = sorted_keys.take(pa.array(idx))
    return picked.append_column(COUNT, pa.array(counts, pa.int64()))


def write_sorted_file(objects: ObjectStore, filename: str, schema: Schema,
                      properties: Mapping[str, Any],
                      batches: Iterable[pa.Table | pa.RecordBatch]) -> WrittenFile:
    """Write already-sorted data as one data file plus its sidecars (not committed)."""
    w = SortedFileWriter(objects, filename, schema, properties)
    try:
        for b in batches:
            w.write(b)
        return w.close()
    except BaseException:
        w.abort()
        raise


def range_digests(objects: ObjectStore, version: int, table_id: str) -> list[RangeInfo]:
    """The metarange of a snapshot (for diff and reuse checks)."""
    where = f"snapshot {version} of table {table_id}"
    doc = read_pointer(objects, version, table_id)
    if "metarange" not in doc:
        raise CorruptMetadataError(f"{where} ({snapshot_key(version)}) lacks its metarange")
    return read_metarange(objects, doc["metarange"], where)


def leaf_for_key(state: TableState, key: Key) -> Partition:
    """The leaf partition of a state's (lexicographic) partition tree holding row key
    ``key``, found by walking down from the root."""
    p = state.partitions[ROOT_PARTITION_ID]
    while not p.is_leaf:
        assert p.split_key is not None
        p = state.partitions[p.children[0] if key < p.split_key else p.children[1]]
    return p
