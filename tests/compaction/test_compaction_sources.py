"""Compaction inputs read in place (ranged S3 reads) or copied: the same output either way.

A job on S3 copies its inputs to local disk only when they fit ``compaction.local_disk_bytes``;
otherwise DataFusion reads them in place, and merge rounds write their intermediate files to the
store. These tests run one job every way on the same inputs and compare the files written
byte for byte in content (keys, values and the hidden record sequences), against an independent
pyarrow sort of the inputs.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import sediment as sd
from helpers import make_table, rows
from sediment.compaction import ranged, sources
from sediment.compaction.job import run_compaction_job
from sediment.compaction.strategy import CompactionJob
from sediment.errors import CorruptMetadataError
from sediment.files.sequence import SEQ
from sediment.files.writer import with_sidecars
from sediment.state import pending
from sediment.workload import benchmark_schema

SCHEMA = benchmark_schema()
KEYS = SCHEMA.key_names


def _table(uri: str, options: dict[str, Any], **props: Any) -> sd.Table:
    table = make_table(uri, options, **{"compaction.strategy": "basic",
                                        "compaction.batch_size": 6, **props})
    for i in range(6):  # overlapping keys: ties resolved by the record sequences
        table.ingest(rows(400, 7 + i % 3))
    return table


def _run(table: sd.Table, **overrides: Any) -> pa.Table:
    """Run the table's one compaction job with property ``overrides``; its output file."""
    state = table._handle.states.head()
    refs = tuple(sorted(table.files(), key=lambda r: r.sequence))
    job = CompactionJob("job-under-test", refs[0].partition_id, refs)
    props = {**table.properties, **overrides}
    out = run_compaction_job(table._handle.objects, table.schema, props, job,
                             state.partitions[job.partition_id].region)
    assert out.written is not None
    pending.release(table._handle.objects, [out.written.filename])
    return pq.read_table(io.BytesIO(table._handle.objects.get(out.written.filename)))


def _expected(table: sd.Table) -> pa.Table:
    """The inputs' records sorted by (keys, sequence) with pyarrow: what any merge must give."""
    parts = []
    for ref in table.files():
        t = pq.read_table(io.BytesIO(table._handle.objects.get(ref.filename)))
        parts.append(t.append_column(SEQ, pa.array([ref.sequence] * t.num_rows, pa.int64())))
    both = pa.concat_tables(parts)
    return both.sort_by([*((k, "ascending") for k in KEYS), (SEQ, "ascending")])


def _same(a: pa.Table, b: pa.Table) -> None:
    assert a.num_rows == b.num_rows
    for name in b.column_names:
        assert a.column(name).combine_chunks().equals(
            b.column(name).combine_chunks().cast(a.schema.field(name).type)), name


def test_in_place_and_copied_inputs_write_the_same_file(
        store_uri: tuple[str, dict[str, Any]]) -> None:
    uri, options = store_uri
    table = _table(uri, options)
    expected = _expected(table)
    copied = _run(table)  # 256 MiB by default: these inputs fit (on local disk: in place)
    streamed = _run(table, **{"compaction.local_disk_bytes": 0})
    rounds = _run(table, **{"compaction.local_disk_bytes": 0, "compaction.max_merge_inputs": 2})
    for got in (copied, streamed, rounds):
        _same(got, expected)
    assert pc.all(pc.not_equal(expected.column(SEQ), 0)).as_py()


def test_in_place_reads_on_local_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The ranged reader and Sediment's merge on a local store (as if its files were remote):
    the same file as DataFusion's merge of the files in place, small blocks included."""
    table = _table(str(tmp_path / "s"), {})
    expected = _expected(table)
    direct = _run(table)
    _same(direct, expected)
    monkeypatch.setattr(type(table._handle.objects.root()), "local_path",
                        lambda self, key: None)
    monkeypatch.setattr(ranged, "MIN_BLOCK_BYTES", 4096)  # many blocks per input
    monkeypatch.setattr(ranged, "MAX_BLOCK_BYTES", 8192)
    _same(_run(table, **{"compaction.local_disk_bytes": 0, "compaction.batch_rows": 1024}),
          expected)


@pytest.mark.s3
def test_in_place_jobs_after_a_split_read_only_their_region(
        s3_store_uri: tuple[str, dict[str, Any]], monkeypatch: pytest.MonkeyPatch) -> None:
    uri, options = s3_store_uri
    table = make_table(uri, options, **{"compaction.strategy": "basic",
                                        "compaction.batch_size": 3,
                                        "compaction.local_disk_bytes": 0,
                                        "parquet.row_group_rows": 128,
                                        "partition.split.threshold": 500})
    ref = pa.concat_tables([rows(300, 20 + i) for i in range(3)])
    for i in range(3):
        table.ingest(ref.slice(300 * i, 300))
    assert table.split().splits == 1
    fetched: list[int] = []
    real = table._handle.objects.get_range

    def counting(key: str, start: int, end: int) -> bytes:
        data = real(key, start, end)
        info = table._handle.objects.head(key)
        if info is not None and end < info.size:  # a block of row groups, not a footer read
            fetched.append(end - start)
        return data

    monkeypatch.setattr(type(table._handle.objects), "get_range",
                        lambda self, key, start, end: counting(key, start, end))
    result = table.compact()
    assert (result.jobs_committed, result.jobs_failed) == (2, 0)
    inputs = sum(o.size for o in table._handle.objects.list("data/")
                 if o.key.endswith(".parquet")) - sum(
        table._handle.objects.head(r.filename).size for r in table.files())
    # each leaf's job reads about half of every input's row groups (plus the boundary ones)
    assert sum(fetched) < 0.8 * 2 * inputs
    order = [(n, "ascending") for n in ref.column_names]
    _same(table.query().select(ref.column_names).sort_by(order), ref.sort_by(order))


@pytest.mark.s3
def test_job_larger_than_local_disk_bound_reads_in_place(
        s3_store_uri: tuple[str, dict[str, Any]], monkeypatch: pytest.MonkeyPatch) -> None:
    """Inputs over the bound are never copied; merge rounds go to the store and are deleted
    after the job, so the job needs no local disk for its data whatever the leaf's size."""
    uri, options = s3_store_uri
    table = _table(uri, options, **{"compaction.local_disk_bytes": 1,
                                    "compaction.max_merge_inputs": 2})
    expected = _expected(table)

    def no_copies(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("inputs over compaction.local_disk_bytes were copied")

    monkeypatch.setattr(sources, "_copied", no_copies)
    written_to_store: list[str] = []
    real_register = pending.register

    def spy(objects: Any, names: Any) -> None:
        names = list(names)
        written_to_store.extend(names)
        real_register(objects, names)

    monkeypatch.setattr(pending, "register", spy)
    before = {o.key for o in table._handle.objects.list("data/")}
    result = table.compact()
    assert (result.jobs_committed, result.jobs_failed) == (1, 0)
    (out,) = table.files()
    _same(pq.read_table(io.BytesIO(table._handle.objects.get(out.filename))), expected)
    rounds = [n for n in written_to_store if n != out.filename]
    assert len(rounds) >= 3  # 6 inputs, 2 at a time: 3 + 2 files of rounds
    after = {o.key for o in table._handle.objects.list("data/")}
    assert not set(rounds) & after  # deleted after the job
    assert after - before <= set(with_sidecars([out.filename]))  # the output and its sidecars
    assert not pending.held(table._handle.objects, rounds)


@pytest.mark.s3
def test_in_place_read_of_an_input_that_is_not_parquet(
        s3_store_uri: tuple[str, dict[str, Any]]) -> None:
    uri, options = s3_store_uri
    table = _table(uri, options, **{"compaction.local_disk_bytes": 0})
    victim = table.files()[0].filename
    table._handle.objects.put(victim, b"not parquet at all")
    with pytest.raises(CorruptMetadataError, match=victim):
        _run(table)


@pytest.mark.s3
@pytest.mark.slow
def test_in_place_reads_ride_out_s3_faults(proxied_s3: Any, fault_proxy: Any) -> None:
    """503s and reset connections on the ranged GETs are retried by the S3 client."""
    table = _table(proxied_s3.uri, proxied_s3.options, **{"compaction.local_disk_bytes": 0})
    expected = _expected(table)
    fault_proxy.add_rule("status", method="GET", path="/data/", count=3, status=503)
    fault_proxy.add_rule("reset", method="GET", path="/data/", count=2, skip=4)
    _same(_run(table), expected)
    assert fault_proxy.faults() >= 3
