"""Page-sized point reads (sediment.query.pointread): what a cold lookup reads, and the
answers of lookups that cannot be served a page per column (a key whose records span pages,
files written before page indexes), against pyarrow."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import sediment as sd
from sediment.files import writer
from sediment.files.pages import load_page_index

SCHEMA = sd.Schema(row_keys=[("key", pa.string())], sort_keys=[("ts", pa.int64())],
                   values=[("value", pa.string()), ("n", pa.int64())])


def _data(rows: int, seed: int = 1) -> pa.Table:
    rng = np.random.default_rng(seed)
    keys = np.char.add("k", rng.integers(0, 10**7, rows).astype(str))
    n = rng.integers(0, 100, rows).astype(object)
    n[rng.random(rows) < 0.3] = None
    return pa.table({"key": keys, "ts": rng.integers(0, 10**9, rows),
                     "value": np.char.add("v", rng.integers(0, 10**6, rows).astype(str)),
                     "n": pa.array(list(n), pa.int64())}, schema=SCHEMA.to_arrow())


def _expected(data: pa.Table, key: Any) -> pa.Table:
    return data.filter(pc.equal(data.column("key"), key)).sort_by([("key", "ascending"),
                                                                   ("ts", "ascending")])


def test_a_cold_lookup_reads_one_page_per_column(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """With footers, page indexes and key filters cached and the block cache off, a lookup
    reads the pages holding its key, one per column (every column cut at the same rows),
    and nothing else of the data file."""
    data = _data(20_000)
    table = sd.Store.open(str(tmp_path), create=True).create_table(
        "t", SCHEMA, properties={"query.block_cache_bytes": 0, "parquet.row_group_rows": 4096,
                                 "parquet.page_rows": 512})
    table.ingest(data)
    (ref,) = table.files()
    objects = table._handle.objects
    keys = data.column("key").to_pylist()
    assert table.query(keys=[keys[0]]) == _expected(data, keys[0])  # footers etc. cached
    read: list[tuple[str, int, int]] = []
    get_range = objects.get_range

    def counting(name: str, start: int, end: int) -> bytes:
        read.append((name, start, end))
        return get_range(name, start, end)

    get_ranges = objects.get_ranges

    def counting_ranges(name: str, spans: Sequence[tuple[int, int]]) -> list[bytes]:
        read.extend((name, s, e) for s, e in spans)  # (local disk: one open for them all)
        return get_ranges(name, spans)

    monkeypatch.setattr(objects, "get_range", counting)
    monkeypatch.setattr(objects, "get_ranges", counting_ranges)
    path = objects.path(ref.filename)
    size = Path(path).stat().st_size
    index = load_page_index(lambda s, e: get_range(ref.filename, s, e), size, ref.filename)
    assert index is not None
    md = table.prepare(keys=[keys[1]]).executor.footers.cached(ref.filename).metadata
    for key in keys[1:40]:
        read.clear()
        got = table.query(keys=[key])
        assert got == _expected(data, key)
        pages = [(s, e) for name, s, e in read if name == ref.filename]
        # the key's page holds its row; each column's page holding that row, and no more
        g, row = _locate(table, ref.filename, key)
        allowed = set()
        for c in range(len(index.columns)):
            cp = index.pages(g, c)
            p = cp.page_of_row(row)
            allowed.add((int(cp.offsets[p]), int(cp.offsets[p] + cp.sizes[p])))
        assert sorted(pages) == sorted(allowed), (key, pages, allowed)
        group_bytes = md.row_group(g).total_byte_size
        assert sum(e - s for s, e in pages) < group_bytes / 4


def _locate(table: sd.Table, filename: str, key: str) -> tuple[int, int]:
    """(row group, row in it) of the first record of ``key`` in the file, by pyarrow."""
    import pyarrow.parquet as pq

    pf = pq.ParquetFile(table._handle.objects.path(filename))
    start = 0
    for g in range(pf.metadata.num_row_groups):
        col = pf.read_row_group(g, columns=["key"]).column(0)
        hits = np.flatnonzero(pc.equal(col, key).to_numpy(zero_copy_only=False))
        if len(hits):
            return g, int(hits[0])
        start += pf.metadata.row_group(g).num_rows
    raise AssertionError(f"{key} not in {filename}")


def test_a_key_whose_records_span_pages_reads_its_row_group(tmp_path: Path) -> None:
    data = _data(5_000)
    many = pa.table({"key": ["k-many"] * 3000, "ts": np.arange(3000),
                     "value": [f"v{i}" for i in range(3000)], "n": np.arange(3000)},
                    schema=SCHEMA.to_arrow())
    data = pa.concat_tables([data, many])
    table = sd.Store.open(str(tmp_path), create=True).create_table(
        "t", SCHEMA, properties={"parquet.page_rows": 256})
    table.ingest(data)
    for cache in (True, False):
        got = table.prepare(sd.ReadRequest(keys=["k-many"], block_cache=cache)).to_arrow()
        assert got == _expected(data, "k-many")
    assert table.query(keys=["k-many", data.column("key")[3].as_py()]) == \
        pa.concat_tables([_expected(data, "k-many"),
                          _expected(data, data.column("key")[3].as_py())]).sort_by(
            [("key", "ascending"), ("ts", "ascending")])


def test_files_without_a_page_index_read_whole_row_groups(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Files written before page indexes (no ``write_page_index``) answer lookups as
    before, and a table holding both kinds answers from both."""
    options = writer.writer_options

    def without(*args: Any, **kwargs: Any) -> dict[str, Any]:
        opts = options(*args, **kwargs)
        opts["write_page_index"] = False
        return opts

    old, new = _data(3000, seed=2), _data(3000, seed=3)
    table = sd.Store.open(str(tmp_path), create=True).create_table("t", SCHEMA)
    with monkeypatch.context() as m:
        m.setattr(writer, "writer_options", without)
        table.ingest(old)
    table.ingest(new)
    both = pa.concat_tables([old, new])
    for key in [*old.column("key").to_pylist()[:20], *new.column("key").to_pylist()[:20]]:
        assert table.query(keys=[key]) == _expected(both, key)


@pytest.mark.parametrize("merge", ["none", "last"])
def test_a_lookup_reads_only_the_files_that_may_hold_it(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch,
                                                        merge: str) -> None:
    """In a leaf of files apart in key (a large ingest's runs, ingests of other key ranges),
    a lookup or range within one file reads that file alone, as from a one-file leaf: no
    record sequences, no merge; one whose keys are in both files merges them."""
    from sediment.query.executor import Executor

    table = sd.Store.open(str(tmp_path), create=True).create_table(
        "t", SCHEMA, properties={"merge": merge})
    data = _data(3_000)
    low = data.filter(pc.less(data.column("key"), "k5"))
    high = data.filter(pc.greater_equal(data.column("key"), "k5"))
    table.ingest(low)
    table.ingest(high)
    assert len(table.files()) == 2
    reads: list[tuple[str, bool]] = []
    real = Executor.read_groups

    def spy(self: Executor, ref: Any, *args: Any, **kwargs: Any) -> Any:
        reads.append((ref.filename, kwargs.get("sequence", False)))
        return real(self, ref, *args, **kwargs)

    monkeypatch.setattr(Executor, "read_groups", spy)
    key = low.column("key")[7].as_py()
    assert table.query(keys=[key]).equals(_expected(data, key))
    assert len(reads) == 1 and reads[0][1] is False
    reads.clear()
    got = table.query(ranges=[sd.Range("k1", "k3")])
    assert got.num_rows and len(reads) == 1 and reads[0][1] is False
    reads.clear()
    other = high.column("key")[3].as_py()
    both = table.query(keys=[key, other])
    assert both.equals(pa.concat_tables([_expected(data, key), _expected(data, other)]))
    assert len(reads) == 2 and all(seq for _, seq in reads)
