"""Data files: samples, the k-way merge, and the Parquet files the writer produces."""

from __future__ import annotations

import bisect
import math
import random
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import sediment as sd
from reference import order_key, string_key_pool
from sediment.core.model import Region
from sediment.files.merge import merge_sorted
from sediment.files.sample import (
    COUNT,
    KeySampler,
    estimate_count,
    merge_samples,
    quantile,
)
from sediment.files.writer import sample_name
from sediment.storage import LocalObjectStore
from support.internals import build_sample, write_sorted_file

KEY_SCHEMA = pa.schema([pa.field("key", pa.string(), nullable=False)])


def sorted_keys(n: int, seed: int = 0, distinct: int = 500) -> pa.Table:
    """``n`` string keys (with duplicates and awkward strings), sorted by their UTF-8 bytes."""
    rng = random.Random(seed)
    pool = string_key_pool(rng, distinct)
    keys = sorted((rng.choice(pool) for _ in range(n)), key=lambda s: s.encode())
    return pa.table({"key": pa.array(keys, pa.string())}, schema=KEY_SCHEMA)


# ---- samples -----------------------------------------------------------------------------------
@pytest.mark.parametrize("n,size", [(1, 4), (10, 4), (1000, 1000), (1000, 7), (12345, 100)])
def test_build_sample_is_every_kth_key(n: int, size: int) -> None:
    data = sorted_keys(n, seed=n)
    sample = build_sample(data, size)
    k = max(1, math.ceil(n / size))
    keys = data.column("key").to_pylist()
    assert sample.column("key").to_pylist() == keys[::k]
    counts = sample.column(COUNT).to_pylist()
    assert counts == [min(k, n - i) for i in range(0, n, k)]
    assert sum(counts) == n
    assert sample.num_rows <= size


def test_build_sample_of_nothing() -> None:
    sample = build_sample(KEY_SCHEMA.empty_table(), 10)
    assert sample.num_rows == 0 and sample.column_names == ["key", COUNT]


@pytest.mark.parametrize("size", [2, 16, 100])
def test_key_sampler_over_many_batches(size: int) -> None:
    rng = random.Random(size)
    data = sorted_keys(20_000, seed=size)
    sampler = KeySampler(["key"], size)
    start = 0
    while start < data.num_rows:  # batches of random size, empty ones too
        # (batches larger than the sample: the stride is picked before any key is taken)
        n = rng.choice([0, 1, 2, 3, 17, 64, 100, 999, 2500, 8000])
        sampler.add(data.slice(start, n))
        start += n
    sample = sampler.sample(KEY_SCHEMA)
    k = sampler.k
    assert k & (k - 1) == 0, "k is a power of two"
    keys = data.column("key").to_pylist()
    assert sample.column("key").to_pylist() == keys[::k]
    counts = sample.column(COUNT).to_pylist()
    assert counts == [min(k, len(keys) - i) for i in range(0, len(keys), k)]
    assert sum(counts) == data.num_rows
    assert size <= sample.num_rows <= 2 * size


def test_key_sampler_small_and_empty() -> None:
    sampler = KeySampler(["key"], 100)
    empty = sampler.sample(KEY_SCHEMA)
    assert empty.num_rows == 0 and empty.column_names == ["key", COUNT]
    data = sorted_keys(50)
    sampler.add(data)
    sample = sampler.sample(KEY_SCHEMA)
    assert sample.column("key").to_pylist() == data.column("key").to_pylist()
    assert set(sample.column(COUNT).to_pylist()) == {1}


def _true_count(keys: list[str], region: Region) -> int:
    enc = [k.encode() for k in keys]
    lo = 0 if region.min is None else bisect.bisect_left(enc, region.min[0].encode())
    hi = len(enc) if region.max is None else bisect.bisect_left(enc, region.max[0].encode())
    return max(0, hi - lo)


def test_estimate_count_within_k() -> None:
    rng = random.Random(1)
    data = sorted_keys(30_000, seed=1, distinct=3000)
    sampler = KeySampler(["key"], 64)
    for b in data.to_batches(max_chunksize=1000):
        sampler.add(pa.Table.from_batches([b]))
    sample = sampler.sample(KEY_SCHEMA)
    k = sampler.k
    keys = data.column("key").to_pylist()
    assert estimate_count(sample, ["key"], Region()) == len(keys)
    for _ in range(300):
        a, b = sorted((rng.choice(keys), rng.choice(keys)), key=lambda s: s.encode())
        region = Region(None if rng.random() < 0.1 else (a,),
                        None if rng.random() < 0.1 else (b,))
        est = estimate_count(sample, ["key"], region)
        assert abs(est - _true_count(keys, region)) < k, region


def test_quantile_is_near_the_true_median() -> None:
    data = sorted_keys(50_000, seed=2, distinct=20_000)
    sampler = KeySampler(["key"], 128)
    for b in data.to_batches(max_chunksize=777):
        sampler.add(pa.Table.from_batches([b]))
    sample = sampler.sample(KEY_SCHEMA)
    k = sampler.k
    enc = [s.encode() for s in data.column("key").to_pylist()]
    n = len(enc)
    for q in (0.1, 0.5, 0.9):
        (key,) = quantile(sample, ["key"], q)  # type: ignore[misc]
        first = bisect.bisect_left(enc, key.encode())
        last = bisect.bisect_right(enc, key.encode())
        assert first <= q * n + k and last >= q * n - k, (q, first, last, k)
    assert quantile(build_sample(KEY_SCHEMA.empty_table(), 4), ["key"], 0.5) is None


def test_merged_samples_give_the_median_of_several_files() -> None:
    parts = [sorted_keys(n, seed=n, distinct=5000) for n in (3000, 10_000, 7000)]
    samples = [build_sample(p, 100) for p in parts]
    merged = merge_samples(samples, ["key"])
    assert sum(merged.column(COUNT).to_pylist()) == 20_000
    mkeys = [s.encode() for s in merged.column("key").to_pylist()]
    assert mkeys == sorted(mkeys)
    everything = sorted(s.encode() for p in parts for s in p.column("key").to_pylist())
    (median,) = quantile(merged, ["key"], 0.5)  # type: ignore[misc]
    pos = bisect.bisect_left(everything, median.encode())
    k = max(math.ceil(p.num_rows / 100) for p in parts)
    assert abs(pos - 10_000) <= 3 * k + everything.count(median.encode())


# ---- k-way merge ------------------------------------------------------------------------------
MERGE_SCHEMA = pa.schema([pa.field("k1", pa.string(), nullable=False),
                          pa.field("k2", pa.int64(), nullable=False),
                          pa.field("v", pa.int64())])


def _stream(rows: list[tuple[Any, ...]], cuts: list[int]) -> list[pa.RecordBatch]:
    """The rows sorted by key, cut into batches at ``cuts`` (empty batches included)."""
    rows = sorted(rows, key=lambda r: order_key(r[:2]))
    batch = pa.RecordBatch.from_pylist(
        [{"k1": r[0], "k2": r[1], "v": r[2]} for r in rows], schema=MERGE_SCHEMA)
    bounds = [0, *(min(c, len(rows)) for c in cuts), len(rows)]
    return [batch.slice(a, b - a) for a, b in zip(bounds, bounds[1:], strict=False)]


ROWS = st.lists(st.tuples(st.sampled_from(["", "a", "b", "é", "😀", "a\x00"]),
                          st.integers(-(2**63), 2**63 - 1) | st.sampled_from([0, 1]),
                          st.integers(0, 1000)), max_size=40)


@settings(max_examples=50, deadline=None)
@given(streams=st.lists(st.tuples(ROWS, st.lists(st.integers(0, 40), max_size=5).map(sorted)),
                        max_size=6))
def test_merge_sorted_equals_full_sort(streams: list[tuple[list[tuple[Any, ...]], list[int]]]
                                       ) -> None:
    inputs = [_stream(rows, cuts) for rows, cuts in streams]
    merged = list(merge_sorted(inputs, ["k1", "k2"], MERGE_SCHEMA))
    out = pa.Table.from_batches(merged, schema=MERGE_SCHEMA) if merged else \
        MERGE_SCHEMA.empty_table()
    got = list(zip(out.column("k1").to_pylist(), out.column("k2").to_pylist(),
                   out.column("v").to_pylist(), strict=True))
    everything = [r for rows, _ in streams for r in rows]
    assert [order_key(r[:2]) for r in got] == sorted(order_key(r[:2]) for r in everything)
    assert sorted(got) == sorted(everything)
    assert all(b.num_rows > 0 for b in merged)


def test_merge_sorted_large_random_streams() -> None:
    rng = random.Random(9)
    pool = string_key_pool(rng, 200)
    streams, everything = [], []
    for _ in range(8):
        rows = [(rng.choice(pool), rng.randint(-5, 5), i) for i in range(rng.randint(0, 3000))]
        everything += rows
        cuts = sorted(rng.randint(0, len(rows)) for _ in range(rng.randint(0, 20)))
        streams.append(_stream(rows, cuts))
    out = pa.Table.from_batches(list(merge_sorted(streams, ["k1", "k2"], MERGE_SCHEMA)),
                                schema=MERGE_SCHEMA)
    got = list(zip(*(out.column(c).to_pylist() for c in ("k1", "k2", "v")), strict=True))
    assert [order_key(r[:2]) for r in got] == sorted(order_key(r[:2]) for r in everything)
    assert sorted(got) == sorted(everything)


# ---- the Parquet files written -----------------------------------------------------------------
def _ingested_table(tmp_path: Path, **props: Any) -> tuple[sd.Table, int]:
    schema = sd.Schema(row_keys=[("key", pa.string()), ("k2", pa.int32())],
                       sort_keys=[("ts", pa.int64())], values=[("value", pa.string())])
    store = sd.Store.open(str(tmp_path / "store"), create=True)
    table = store.create_table(f"t{uuid.uuid4().hex[:6]}", schema, split_points=[("m",)],
                               properties=props)
    rng = random.Random(4)
    pool = string_key_pool(rng, 300)
    n = 5000
    table.ingest([pa.table({
        "key": [rng.choice(pool) for _ in range(n)],
        "k2": [rng.randint(-(2**31), 2**31 - 1) for _ in range(n)],
        "ts": [rng.randint(-10, 10) for _ in range(n)],
        "value": [rng.choice(["x", None, "😀"]) for _ in range(n)],
    }) for _ in range(2)])
    return table, 2 * n


def test_parquet_files_are_sorted_zstd_with_statistics(tmp_path: Path) -> None:
    table, total = _ingested_table(tmp_path, **{"parquet.row_group_rows": 500,
                                                "sample.size": 16})
    refs = table.files()
    assert len(refs) == 2 and sum(r.records for r in refs) == total
    for ref in refs:
        pf = pq.ParquetFile(table._handle.objects.path(ref.filename))
        md = pf.metadata
        assert md.num_rows == ref.records
        sizes = [md.row_group(i).num_rows for i in range(md.num_row_groups)]
        assert all(s == 500 for s in sizes[:-1]) and 0 < sizes[-1] <= 500
        data = pf.read()
        keys = [order_key(k) for k in zip(*(data.column(c).to_pylist()
                                            for c in ("key", "k2", "ts")), strict=True)]
        assert keys == sorted(keys)
        for i in range(md.num_row_groups):
            rg = md.row_group(i)
            assert rg.sorting_columns == (pq.SortingColumn(0), pq.SortingColumn(1),
                                          pq.SortingColumn(2))
            for c in range(rg.num_columns):
                assert rg.column(c).compression == "ZSTD"
            start = sum(sizes[:i])
            for c, name in enumerate(("key", "k2", "ts")):
                stats = rg.column(c).statistics
                assert stats is not None and stats.has_min_max, (name, i)
                values = data.column(name).slice(start, sizes[i]).to_pylist()
                assert stats.min == min(values, key=order_key_one)
                assert stats.max == max(values, key=order_key_one)
        # the sidecar sample: every k-th row key of the file, counts summing to its rows
        sample = pq.read_table(table._handle.objects.path(sample_name(ref.filename)))
        assert sample.column_names == ["key", "k2", COUNT]
        counts = sample.column(COUNT).to_pylist()
        assert sum(counts) == ref.records
        k = counts[0]
        assert k & (k - 1) == 0 and 16 <= sample.num_rows <= 32
        want = list(zip(data.column("key").to_pylist()[::k],
                        data.column("k2").to_pylist()[::k], strict=True))
        assert list(zip(sample.column("key").to_pylist(), sample.column("k2").to_pylist(),
                        strict=True)) == want


def order_key_one(v: Any) -> Any:
    return order_key([v])


@pytest.mark.parametrize("codec,expected", [("snappy", "SNAPPY"), ("none", "UNCOMPRESSED"),
                                            ("gzip", "GZIP")])
def test_compression_property(tmp_path: Path, codec: str, expected: str) -> None:
    table, _ = _ingested_table(tmp_path, **{"parquet.compression": codec})
    for ref in table.files():
        md = pq.ParquetFile(table._handle.objects.path(ref.filename)).metadata
        assert {md.row_group(0).column(c).compression for c in range(4)} == {expected}


def test_write_sorted_file_many_small_pieces(tmp_path: Path) -> None:
    """Pieces smaller than a row group are gathered into full row groups."""
    schema = sd.Schema(row_keys=[("key", pa.string())])
    objects = LocalObjectStore(tmp_path / "objects")
    props = {"parquet.row_group_rows": 128, "parquet.compression": "zstd",
             "parquet.compression_level": 1, "parquet.page_size_bytes": 65536,
             "sample.size": 8, "parquet.key_filter_bits": 10}
    data = sorted_keys(1000, seed=5)
    pieces = [data.slice(i, 7) for i in range(0, 1000, 7)]
    written = write_sorted_file(objects, "data/x/f.parquet", schema, props, pieces)
    assert written.rows == 1000 and written.bytes > 0
    md = pq.ParquetFile(objects.path("data/x/f.parquet")).metadata
    assert [md.row_group(i).num_rows for i in range(md.num_row_groups)] == [128] * 7 + [104]
    back = pq.read_table(objects.path("data/x/f.parquet"))
    assert back.column("key").to_pylist() == data.column("key").to_pylist()
    sample = pq.read_table(objects.path(sample_name("data/x/f.parquet")))
    assert sum(sample.column(COUNT).to_pylist()) == 1000


def test_a_failed_writer_stops_protecting_its_file(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A writer that cannot create its file, or whose clean-up cannot delete it, still drops
    its pending-file registration: a long-lived process (a maintainer) must not keep a lease
    on files that are gone or left to GC's orphan pass."""
    from sediment.errors import SedimentError, StorageError
    from sediment.files.writer import SortedFileWriter
    from sediment.properties import defaults
    from sediment.state import pending

    objects = LocalObjectStore(str(tmp_path))
    schema = sd.Schema(row_keys=[("k", pa.string())])
    writer = SortedFileWriter(objects, "data/p/a.parquet", schema, defaults())
    writer.write(pa.table({"k": ["a", "b"]}))

    def refuse(self: Any, keys: Any) -> None:
        raise SedimentError("the store refuses deletes")

    monkeypatch.setattr(LocalObjectStore, "delete_many", refuse)
    writer.abort()
    assert pending.held(objects, ["data/p/a.parquet"]) == []
    monkeypatch.undo()

    real = LocalObjectStore.arrow_filesystem

    class NoStreams:  # a local file system (pyarrow's type name) that cannot open a file
        type_name = "local"

        def create_dir(self, path: str, recursive: bool = True) -> None:
            pass

        def open_output_stream(self, path: str) -> Any:
            raise OSError("cannot open")

    monkeypatch.setattr(LocalObjectStore, "arrow_filesystem",
                        lambda self: (NoStreams(), real(self)[1]))
    with pytest.raises(StorageError, match="cannot create data file"):
        SortedFileWriter(objects, "data/p/b.parquet", schema, defaults())
    assert pending.held(objects, ["data/p/b.parquet"]) == []
