"""Checksums taken as data files are written (issue 38, write side): every Parquet file Sediment
writes carries page CRCs, and each data file's FileSums (size, footer CRC, whole-file CRC,
sample CRC) reach the log of the commit that adds it, by every route that adds files (ingest,
compaction, load, bulk import's task rows, the Spark compaction runner's job output).

The reference is independent: ``zlib.crc32`` of the bytes read back from storage, the footer
found from the file's own last 8 bytes."""

from __future__ import annotations

import json
import zlib
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import sediment as sd
import sediment.compaction.job as job_module
import sediment.files.sums as sums_module
from helpers import make_table, rows
from sediment.compaction.job import JobOutput
from sediment.core.model import FileSums
from sediment.files.sidecars import SAMPLE, sidecar_name
from sediment.files.writer import WrittenFile
from sediment.state.log import log_key
from sediment.storage import LocalObjectStore
from sediment.storage.base import ObjectStore


def expected_sums(objects: ObjectStore, filename: str) -> FileSums:
    """The sums of a stored data file, computed here from its bytes."""
    data = objects.get(filename)
    footer_len = int.from_bytes(data[-8:-4], "little")
    assert data[-4:] == b"PAR1"
    sample = objects.get(sidecar_name(filename, SAMPLE))
    return FileSums(len(data), zlib.crc32(data[-(footer_len + 8):]), zlib.crc32(data),
                    zlib.crc32(sample))


def assert_every_file_summed(table: sd.Table) -> set[str]:
    state = table.state()
    names = set(state.refcount)
    assert names
    for name in names:
        assert state.file_sums(name) == expected_sums(table._handle.objects, name), name
    return names


def logged_checksums(table: sd.Table, version: int) -> dict[str, Any]:
    doc = json.loads(table._handle.states.objects.get(log_key(version)))
    return doc["transaction"].get("checksums", {})


def flip_page_byte(data: bytes) -> bytes:
    """``data`` with the last byte of its first column chunk (inside a data page's payload,
    past its header) flipped."""
    col = pq.ParquetFile(pa.BufferReader(data)).metadata.row_group(0).column(0)
    start = col.dictionary_page_offset or col.data_page_offset
    pos = start + col.total_compressed_size - 1
    return data[:pos] + bytes([data[pos] ^ 0x01]) + data[pos + 1:]


def assert_page_checksums(data: bytes) -> None:
    """The file's pages carry CRCs: a flipped page byte fails verification."""
    assert pq.read_table(pa.BufferReader(data), page_checksum_verification=True).num_rows
    with pytest.raises(OSError, match="CRC"):
        pq.read_table(pa.BufferReader(flip_page_byte(data)), page_checksum_verification=True)


def test_ingested_files_have_the_sums_of_their_bytes_in_the_log(tmp_path: Path) -> None:
    table = make_table(tmp_path, split_points=["m"])
    v = table.ingest(rows(3000, 1)).version
    names = assert_every_file_summed(table)
    assert len(names) == 2  # one per leaf
    logged = logged_checksums(table, v)
    assert set(logged) == names
    state = table.state()
    for name in names:
        assert FileSums.from_json(logged[name]) == state.file_sums(name)
        sums = state.file_sums(name)
        assert sums is not None and sums.size == table._handle.objects.head(name).size


def test_written_files_and_samples_carry_page_checksums(tmp_path: Path) -> None:
    table = make_table(tmp_path)
    table.ingest(rows(2000, 2))
    (name,) = table.state().refcount
    objects = table._handle.objects
    assert_page_checksums(objects.get(name))
    assert_page_checksums(objects.get(sidecar_name(name, SAMPLE)))


@pytest.mark.parametrize("marked", [True, False], ids=["kept-since-close", "read-back"])
def test_a_footer_larger_than_the_kept_tail(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            marked: bool) -> None:
    """Every footer is larger than the tail kept (64 bytes here): it is whole in what the
    writer's close wrote (kept since the mark), else read back from storage."""
    monkeypatch.setattr(sums_module, "TAIL_BYTES", 64)
    if not marked:
        monkeypatch.setattr(sums_module.SummingSink, "mark", lambda self: None)
    reads: list[tuple[int, int]] = []
    real = LocalObjectStore.get_range

    def get_range(self: LocalObjectStore, key: str, start: int, end: int) -> bytes:
        reads.append((start, end))
        return real(self, key, start, end)

    monkeypatch.setattr(LocalObjectStore, "get_range", get_range)
    table = make_table(tmp_path)
    table.ingest(rows(1000, 3))
    assert bool(reads) is not marked
    assert_every_file_summed(table)


def test_summing_sink_matches_crc32_of_what_it_forwards() -> None:
    chunks: list[bytes] = []

    class Sink:
        def write(self, b: Any) -> None:
            chunks.append(bytes(b))

        def close(self) -> None:
            pass

    sink = sums_module.SummingSink(Sink())
    t = pa.table({"a": list(range(50_000)), "b": [str(i) for i in range(50_000)]})
    with pq.ParquetWriter(sink, t.schema, write_page_checksum=True) as w:
        w.write_table(t, row_group_size=5000)
    data = b"".join(chunks)
    assert (sink.size, sink.crc) == (len(data), zlib.crc32(data))
    assert sums_module.footer_crc(sink.tail) == sums_module.sums_of(data).footer
    assert sums_module.sums_of(data, b"xyz").sample == zlib.crc32(b"xyz")


def test_compaction_outputs_have_their_sums_in_the_log(tmp_path: Path) -> None:
    table = make_table(tmp_path)
    for seed in range(3):
        table.ingest(rows(800, seed))
    before = set(table.state().refcount)
    table.compact(full=True)
    after = assert_every_file_summed(table)
    (output,) = after - before
    v = table.version
    logged = logged_checksums(table, v)
    assert json.loads(table._handle.states.objects.get(log_key(v)))["transaction"]["output"]
    assert FileSums.from_json(logged[output]) == expected_sums(table._handle.objects, output)
    # the compacted-away inputs are unreferenced, and keep their sums until deleted
    state = table.state()
    for name in before:
        assert name in state.unreferenced and state.file_sums(name) is not None


def test_merge_rounds_write_page_checksums(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Many inputs merge in rounds (compaction.max_merge_inputs): the intermediate files'
    writers ask for page CRCs too; the final output's sums are in the log."""
    made: list[dict[str, Any]] = []
    real = job_module.pq.ParquetWriter

    def recording(*args: Any, **kw: Any) -> Any:
        made.append(kw)
        return real(*args, **kw)

    monkeypatch.setattr(job_module.pq, "ParquetWriter", recording)
    table = make_table(tmp_path, **{"compaction.max_merge_inputs": 2})
    for seed in range(5):
        table.ingest(rows(300, seed))
    table.compact(full=True)
    assert_every_file_summed(table)
    rounds = [kw for kw in made if kw.get("compression") == "lz4"]
    assert rounds and all(kw.get("write_page_checksum") for kw in rounds)
    assert all(kw.get("write_page_checksum") for kw in made)


def test_loaded_files_have_the_sums_of_the_bytes_copied(tmp_path: Path) -> None:
    table = make_table(tmp_path / "src", split_points=["h", "p"])
    table.ingest(rows(1500, 4))
    job = table.dump(str(tmp_path / "dumps"))
    dumped = list((tmp_path / "dumps").rglob("*.parquet"))
    assert dumped
    for p in dumped:
        assert_page_checksums(p.read_bytes())
    store = sd.Store.open(str(tmp_path / "dst"), create=True)
    loaded = store.load(job.manifest_uri, "copy")
    names = assert_every_file_summed(loaded)
    assert set(logged_checksums(loaded, loaded.version)) == names
    # into an existing table too (load_into)
    other = store.create_table("other", table.schema)
    store.load(job.manifest_uri, "other")
    assert set(logged_checksums(other, other.version)) == assert_every_file_summed(other)


def test_bulk_import_task_rows_carry_the_sums() -> None:
    pytest.importorskip("pyspark")
    from sediment.spark import tasks

    sums = FileSums(1234, 5, 6, 7)
    row: dict[str, Any] = {"filename": "data/a/1.parquet", "partition_id": "a", "records": 3,
                           **tasks._staged_file(WrittenFile("data/a/1.parquet", 3, 1234, sums))}
    assert set(row) == set(tasks.STAGED_SCHEMA.names)
    batch = pa.RecordBatch.from_pylist([row, {**row, "partition_id": "b"}],
                                       schema=tasks.STAGED_SCHEMA)
    (written,) = tasks.staged_written(batch.to_pylist())
    assert written == WrittenFile("data/a/1.parquet", 0, 1234, sums)
    # a file with no sample, and rows of an older task (no sum fields) read as no sums
    no_sample = FileSums(10, 1, 2, None)
    row2 = {**row, **tasks._staged_file(WrittenFile("x", 1, 10, no_sample)), "filename": "x"}
    assert tasks.staged_written([row2])[0].sums == no_sample
    legacy = {"filename": "y", "partition_id": "a", "records": 1, "bytes": 9}
    assert tasks.staged_written([legacy]) == [WrittenFile("y", 0, 9, None)]


def test_spark_compaction_job_output_carries_the_sums() -> None:
    pytest.importorskip("pyspark")
    from sediment.spark import runner

    sums = FileSums(99, 1, 2, 3)
    doc = {"job_id": "j", "filename": "data/p/o.parquet", "rows": 5, "bytes": 99,
           "sums": list(sums), "rows_in": 7, "seconds": 0.5}
    out = runner._output(json.loads(json.dumps(doc)))  # as it crosses from the executor
    assert isinstance(out, JobOutput) and out.written is not None
    assert out.written.sums == sums
    assert runner._output({**doc, "sums": None}).written.sums is None  # type: ignore[union-attr]
