"""The memory store holds real Parquet: the whole table stack runs on it, off the disk.

``MemoryObjectStore.arrow_filesystem`` is a pyarrow filesystem over the store's own bytes, so
data files written through pyarrow (ingest, compaction's output and merge rounds) are objects
of the store, and compaction's ranged reads and the query path's footers read them back. The
answers are checked against an independent reference (tests/reference.py).
"""

from __future__ import annotations

import io
import re
import uuid

import pyarrow as pa
import pyarrow.parquet as pq

import sediment as sd
from helpers import make_table, rows
from reference import Reference, assert_matches
from sediment.storage import MemoryObjectStore


def _memory_table(**props: object) -> sd.Table:
    return make_table(f"memory://parquet-{uuid.uuid4().hex}", **props)


def test_ingest_split_compact_query_on_a_memory_store() -> None:
    table = _memory_table(**{"compaction.strategy": "basic", "compaction.batch_size": 2,
                             "partition.split.threshold": 600,
                             "parquet.row_group_rows": 128})
    objects = table._handle.objects
    assert isinstance(objects.root(), MemoryObjectStore)
    ref = Reference(table.schema)
    for i in range(4):
        batch = rows(300, 40 + i)
        table.ingest(batch)
        ref.add(batch)
    data = [o.key for o in objects.list("data/") if o.key.endswith(".parquet")
            and ".sample" not in o.key]
    assert data and all(objects.local_path(k) is None for k in data)
    first = pq.read_table(io.BytesIO(objects.get(data[0])))  # real Parquet, in the dict
    assert first.num_rows > 0 and {"key", "timestamp"} <= set(first.column_names)

    assert table.split().splits >= 1
    result = table.compact()
    assert result.jobs_committed >= 1 and not result.jobs_failed, result.errors
    assert_matches(table.query(), ref)
    keys = ref.frame()["key"].iloc[::97].tolist() + ["no-such-key"]
    assert_matches(table.query(keys=keys), ref, keys=keys)
    ranges = [sd.Range("d", "k"), sd.Range("t", None)]
    assert_matches(table.query(ranges=ranges), ref, ranges=ranges)
    scanned = pa.Table.from_batches(list(table.scan(ranges=ranges)))
    assert_matches(scanned, ref, ranges=ranges)


def test_compaction_reads_in_place_and_merges_in_rounds_on_a_memory_store() -> None:
    """Inputs read in place by ranged reads of the store (no local copy), with merge rounds
    whose intermediate files are written to the store through its pyarrow filesystem."""
    table = _memory_table(**{"compaction.strategy": "basic", "compaction.batch_size": 5,
                             "compaction.local_disk_bytes": 0,
                             "compaction.max_merge_inputs": 2})
    objects = table._handle.objects
    root = objects.root()
    ranged: list[str] = []
    written: list[str] = []
    real_get_range, real_put = root.get_range, root.put

    def counting_get_range(key: str, start: int, end: int) -> bytes:
        ranged.append(key)
        return real_get_range(key, start, end)

    def counting_put(key: str, data: bytes) -> None:
        if re.search(r"/data/[^/]+/[0-9a-f]{32}\.parquet$", key):
            written.append(key)
        real_put(key, data)

    root.get_range = counting_get_range  # type: ignore[method-assign]
    root.put = counting_put  # type: ignore[method-assign]
    ref = Reference(table.schema)
    for i in range(5):
        batch = rows(200, 60 + i % 2)  # overlapping keys: ties kept in ingest order
        table.ingest(batch)
        ref.add(batch)
    before = {r.filename for r in table.files()}
    written.clear()
    result = table.compact()
    assert result.jobs_committed == 1, result.errors
    after = {r.filename for r in table.files()}
    assert len(after) == 1 and not after & before
    assert all(any(k.endswith("/" + f) for k in ranged) for f in before)  # read in place
    # 5 inputs, 2 per merge: rounds of 3 and 2 files, then the output (4 written in all)
    assert len(written) == 4 and written[-1].endswith("/" + after.pop())
    assert not any(objects.root().exists(k) for k in written[:-1])  # intermediates deleted
    assert_matches(table.query(), ref)


def test_the_memory_filesystem_is_the_stores_objects() -> None:
    """Files are objects, folders are key prefixes (as on S3), and a file being written is an
    object only once its stream closes, whole."""
    import pyarrow.fs as pafs

    store = MemoryObjectStore(f"fs-{uuid.uuid4().hex}")
    fs, base = store.arrow_filesystem()
    assert base == "" and store.path("a/b") == "a/b"
    fs.create_dir("t/data", recursive=True)  # writes nothing: a folder is a prefix
    assert list(store.list("")) == []
    with fs.open_output_stream("t/data/x.bin") as out:
        out.write(b"half")
        assert not store.exists("t/data/x.bin")  # not yet: never a partial object
        out.write(b" and half")
    assert store.get("t/data/x.bin") == b"half and half"
    store.put("t/data/sub/y.bin", b"y")
    store.put("t/other", b"o")
    kinds = {i.path: i.type for i in fs.get_file_info(["t", "t/data", "t/other", "nope"])}
    assert kinds == {"t": pafs.FileType.Directory, "t/data": pafs.FileType.Directory,
                     "t/other": pafs.FileType.File, "nope": pafs.FileType.NotFound}
    shallow = fs.get_file_info(pafs.FileSelector("t/data"))
    assert [(i.path, i.type, i.size) for i in shallow] == [
        ("t/data/sub", pafs.FileType.Directory, None),
        ("t/data/x.bin", pafs.FileType.File, 13)]
    deep = fs.get_file_info(pafs.FileSelector("t", recursive=True))
    assert [i.path for i in deep] == ["t/data", "t/data/sub", "t/data/sub/y.bin",
                                      "t/data/x.bin", "t/other"]
    with fs.open_input_file("t/data/x.bin") as f:
        store.put("t/data/x.bin", b"replaced")  # an open file reads the bytes it opened
        assert f.read_at(4, 4) == b" and"  # (nbytes, offset)
    fs.move("t/data", "u")
    assert [o.key for o in store.list("")] == ["t/other", "u/sub/y.bin", "u/x.bin"]
    fs.delete_dir("u")
    assert [o.key for o in store.list("")] == ["t/other"]
    table = pa.table({"k": ["a", "b"], "v": [1, 2]})
    pq.write_table(table, "ds/part-0.parquet", filesystem=fs)
    pq.write_table(table, "ds/part-1.parquet", filesystem=fs)
    assert pq.read_table("ds", filesystem=fs).num_rows == 4  # a dataset discovered by listing
