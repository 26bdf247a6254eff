"""The block cache (sediment.query.blocks): its bound, scan-resistant admission, counters and
fork safety; the binary search lookups use on a cached row group; and reads answering the same
with the cache on, off and tiny, at every version, and while compaction and GC delete the files
readers are reading."""

from __future__ import annotations

import multiprocessing
import threading

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import sediment as sd
from sediment.errors import ObjectNotFoundError
from sediment.files.keys import sorted_span
from sediment.query import blocks
from sediment.query.blocks import BLOCKS, BlockCache
from sediment.query.request import ReadRequest

SCHEMA = sd.Schema(row_keys=[("key", pa.string())], sort_keys=[("ts", pa.int64())],
                   values=[("value", pa.string())])


def arr(n: int) -> pa.Array:
    """An array of ``n`` int64 values: 8n bytes (+ the entry's fixed cost)."""
    return pa.array(np.arange(n, dtype=np.int64))


# ---- the cache itself ------------------------------------------------------------------------
def test_the_bound_holds_and_hits_misses_and_evictions_are_counted() -> None:
    cache = BlockCache(100_000)
    for i in range(100):
        cache.put(("f", i), arr(1000))  # 8 KB each: far more than the bound
    s = cache.stats()
    assert s.bytes <= 100_000 and s.inserts == 100 and s.evictions == 100 - s.entries
    assert cache.get(("f", 0)) is None and cache.get(("f", 99)) is not None
    s = cache.stats()
    assert (s.hits, s.misses) == (1, 1)
    cache.resize(0)
    assert cache.stats().bytes == 0
    cache.put(("f", 1), arr(10))  # a cache of size 0 keeps nothing
    assert cache.get(("f", 1)) is None


def test_a_scan_never_evicts_the_hot_set() -> None:
    """Entries asked for twice are protected: a stream of new ones (a scan caching its
    blocks) cycles through probation only."""
    cache = BlockCache(1_000_000)
    hot = [("hot", i) for i in range(40)]
    for k in hot:
        cache.put(k, arr(1000))
        assert cache.get(k) is not None  # the second ask promotes
    for i in range(10_000):
        cache.put(("scan", i), arr(1000))
    assert all(cache.get(k) is not None for k in hot)
    assert cache.stats().bytes <= 1_000_000


def test_a_value_too_big_for_probation_is_not_cached() -> None:
    cache = BlockCache(10_000)
    cache.put("big", arr(1000))
    assert cache.get("big") is None and cache.stats().inserts == 0


def _child(conn: object) -> None:
    s = BLOCKS.stats()
    BLOCKS.put(("child", 1), arr(10))  # the lock works: a held parent lock would hang here
    conn.send((s.entries, BLOCKS.get(("child", 1)) is not None))  # type: ignore[attr-defined]


def test_a_forked_child_starts_with_an_empty_cache_and_a_free_lock() -> None:
    BLOCKS.put(("parent", 1), arr(10))
    held = threading.Event()
    release = threading.Event()

    def hold() -> None:  # a thread holds the cache's lock while the process forks
        with BLOCKS._lock:
            held.set()
            release.wait(10)

    t = threading.Thread(target=hold)
    t.start()
    held.wait(10)
    try:
        ctx = multiprocessing.get_context("fork")
        parent, child = ctx.Pipe()
        p = ctx.Process(target=_child, args=(child,))
        p.start()
        assert parent.poll(20), "the forked child hung on the block cache's lock"
        assert parent.recv() == (0, True)
        p.join(10)
    finally:
        release.set()
        t.join()


def test_the_environment_bounds_the_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(blocks.ENV, "12345")
    assert blocks._env_bound() == 12345
    monkeypatch.setenv(blocks.ENV, "lots")
    assert blocks._env_bound() is None  # reported and ignored
    monkeypatch.delenv(blocks.ENV)
    assert blocks._env_bound() is None
    assert blocks.configure(0) is None  # a table with the cache off bypasses it


# ---- the binary search on a decoded row group -------------------------------------------------
@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(max_size=4), min_size=1, max_size=60), st.integers(0, 10),
       st.text(max_size=4))
def test_sorted_span_finds_what_a_mask_finds_in_strings(values: list[str], cut: int,
                                                        probe: str) -> None:
    col = pa.array(sorted(values, key=lambda v: v.encode()), pa.string())
    col = col.slice(min(cut, len(col) - 1))  # an offset into shared buffers
    for target in {probe, *values}:
        span = sorted_span(col, target)
        assert span is not None
        mask = pc.equal(col, target).to_numpy(zero_copy_only=False)
        idx = np.flatnonzero(mask)
        assert span == ((int(idx[0]), int(idx[-1]) + 1) if len(idx) else (span[0], span[0]))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(-2**63, 2**63 - 1), min_size=1, max_size=60),
       st.sampled_from([pa.int64(), pa.timestamp("us"), pa.int32()]), st.integers(0, 5))
def test_sorted_span_finds_what_a_mask_finds_in_integers(values: list[int], typ: pa.DataType,
                                                         cut: int) -> None:
    if typ == pa.int32():
        values = [v % 2**31 for v in values]
    col = pa.array(sorted(values), pa.int64()).cast(typ).slice(min(cut, len(values) - 1))
    ints = col.cast(pa.int64()) if not pa.types.is_timestamp(typ) else col.view(pa.int64())
    for target in {*values, 2**70, -1}:
        span = sorted_span(col, target)
        got = [i for i, v in enumerate(ints.to_pylist()) if v == target]
        assert span is not None
        assert span[1] - span[0] == len(got) and (not got or span[0] == got[0])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 200), min_size=1, max_size=60),
       st.sampled_from([pa.string(), pa.large_binary(), pa.int64(), pa.int8(), pa.uint32(),
                        pa.timestamp("us")]), st.integers(0, 5), st.integers(-5, 300))
def test_a_cached_page_run_finds_what_sorted_span_finds(values: list[int], typ: pa.DataType,
                                                        cut: int, probe: int) -> None:
    """KeyedPages (a warm lookup's search over views made once) against sorted_span, on
    sliced columns (an offset into shared buffers), duplicates and absent keys."""
    values = [v % 100 for v in values] if typ == pa.int8() else values
    text = pa.types.is_string(typ) or pa.types.is_large_binary(typ)
    as_key = (lambda v: f"{v:03d}" if pa.types.is_string(typ) else f"{v:03d}".encode()) \
        if text else (lambda v: v)
    col = pa.array([as_key(v) for v in sorted(values)], typ if text else pa.int64())
    col = (col if text else col.cast(typ)).slice(min(cut, len(values) - 1))
    page = blocks.KeyedPages.of(pa.table({"v": [1] * len(col), "k": col}), 1)
    for target in {*values, probe, 2**40}:
        got, want = page.span(as_key(target)), sorted_span(col, as_key(target))
        assert got is not None and want is not None
        assert got[1] - got[0] == want[1] - want[0] and (got == want or got[0] == got[1])
    assert page.span(True) == sorted_span(col, True)  # a value of another type


# ---- reads answer the same with the cache on, off and tiny -------------------------------------
def _reference(table: sd.Table, version: int, keys: list[str], ranges: list[sd.Range]
               ) -> list[pa.Table]:
    """What :func:`_answers` must give, from one whole-table read without the block cache
    (no lookup path: whole row groups), filtered by pyarrow."""
    whole = table.prepare(ReadRequest(version=version, block_cache=False)).to_arrow()
    key = whole.column("key")
    out = [whole.filter(pc.equal(key, k)) for k in keys]
    for r in ranges:
        assert r.start is not None
        mask = pc.greater_equal(key, r.start[0])
        if r.end is not None:
            mask = pc.and_(mask, pc.less(key, r.end[0]))
        out.append(whole.filter(mask))
    out.append(whole.filter(pc.is_in(key, pa.array(keys[:5]))))
    out.append(whole)
    return out


def _answers(table: sd.Table, version: int, keys: list[str], ranges: list[sd.Range],
             cache: bool | None) -> list[pa.Table]:
    out = [table.prepare(ReadRequest(keys=[k], version=version, block_cache=cache)).to_arrow()
           for k in keys]
    out += [table.prepare(ReadRequest(ranges=[r], version=version, block_cache=cache)
                          ).to_arrow() for r in ranges]
    out.append(table.prepare(ReadRequest(keys=keys[:5], version=version,
                                         block_cache=cache)).to_arrow())
    out.append(table.prepare(ReadRequest(version=version, block_cache=cache)).to_arrow())
    return out


def test_answers_are_the_same_with_the_cache_on_off_and_tiny(
        tmp_path: object, monkeypatch: pytest.MonkeyPatch) -> None:
    """Versions of inserts, upserts (repeated keys), deletes by key and by range and a
    compaction: every read of keys (page-sized point reads) and ranges, at every version,
    equals the whole table read without the block cache and filtered by pyarrow, with the
    cache bypassed, with the table's bound at its default, at 1 KiB, and with it off."""
    # (a test before may have read as a Spark worker does in this process: bound fixed)
    monkeypatch.setattr(BLOCKS, "fixed", False)
    monkeypatch.setattr(BLOCKS, "capacity", BLOCKS.capacity)
    rng = np.random.default_rng(7)
    table = sd.Store.open(str(tmp_path), create=True).create_table(
        "t", SCHEMA, properties={"parquet.row_group_rows": 128, "retention.seconds": 3600})
    keys = [f"k{i:04d}" for i in range(600)]

    def batch(n: int, tag: str) -> pa.Table:
        k = rng.choice(keys, n)
        return pa.table({"key": k, "ts": rng.integers(0, 3, n),
                         "value": [f"{tag}{i}" for i in range(n)]}, schema=SCHEMA.to_arrow())

    versions = [table.ingest(batch(800, "a")).version, table.ingest(batch(800, "b")).version,
                table.upsert(batch(300, "u")).version,
                table.delete(keys=keys[:40]),
                table.delete(ranges=[sd.Range("k0100", "k0150")]),
                (table.compact(full=True), table.version)[1],
                table.upsert(batch(200, "w")).version]
    probe = list(rng.choice(keys, 5)) + ["nope", keys[0], keys[120]]
    ranges = [sd.Range("k0090", "k0160"), sd.Range("k0300", "k0302"), sd.Range("k05", None)]
    for version in versions[1::2]:
        expected = _reference(table, version, probe, ranges)
        assert _answers(table, version, probe, ranges, False) == expected
        for bound in (256 << 20, 1024):
            table.set_properties({"query.block_cache_bytes": bound})
            # cold, then from the cache (protected after the second ask)
            assert _answers(table, version, probe, ranges, True) == expected
            assert _answers(table, version, probe, ranges, None) == expected
    # (a read is sized by its version's properties: the head's bound is 1 KiB now)
    table.query(keys=probe)
    assert BLOCKS.stats().bytes <= 1024
    table.set_properties({"query.block_cache_bytes": 0})
    assert _answers(table, versions[-1], probe, ranges, True) == \
        _reference(table, versions[-1], probe, ranges)


def test_a_full_scan_leaves_the_cache_alone_unless_its_request_asks(tmp_path: object) -> None:
    table = sd.Store.open(str(tmp_path), create=True).create_table(
        "t", SCHEMA, properties={"parquet.row_group_rows": 128})
    n = 5000
    table.ingest(pa.table({"key": [f"k{i:05d}" for i in range(n)], "ts": [0] * n,
                           "value": ["v"] * n}, schema=SCHEMA.to_arrow()))
    BLOCKS.clear()
    table.query()
    assert BLOCKS.stats().entries == 0
    table.prepare(ReadRequest(block_cache=True)).to_arrow()
    assert BLOCKS.stats().entries > 0
    BLOCKS.clear()
    table.query(keys=["k00007"])
    # one entry: the page of the key, the sort key and the value, cut at the same rows
    assert BLOCKS.stats().entries == 1
    before = BLOCKS.stats()
    assert table.query(keys=["k00008"]).num_rows == 1  # the same pages: no read
    after = BLOCKS.stats()
    assert (after.hits - before.hits, after.misses - before.misses) == (1, 0)


def test_a_range_enters_the_cache_when_asked_a_second_time(tmp_path: object) -> None:
    """The doorkeeper: a range read once copies nothing into the cache (its row groups are
    only remembered); read again, they are cached; the third read is answered from it."""
    table = sd.Store.open(str(tmp_path), create=True).create_table(
        "t", SCHEMA, properties={"parquet.row_group_rows": 128})
    n = 5000
    table.ingest(pa.table({"key": [f"k{i:05d}" for i in range(n)], "ts": [0] * n,
                           "value": [f"v{i}" for i in range(n)]}, schema=SCHEMA.to_arrow()))
    BLOCKS.clear()
    r = sd.Range("k01000", "k01500")
    expected = table.query(ranges=[r])
    first = BLOCKS.stats()
    assert first.entries == 0
    assert table.query(ranges=[r]).equals(expected)
    second = BLOCKS.stats()
    assert second.entries > 0 and second.inserts - first.inserts == second.entries
    assert table.query(ranges=[r]).equals(expected)
    third = BLOCKS.stats()
    assert third.inserts == second.inserts and third.hits - second.hits == second.entries
    assert third.misses == second.misses


def test_the_doorkeeper_remembers_a_bounded_number_of_keys(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(blocks, "GHOSTS", 3)
    cache = BlockCache(1_000_000)
    assert cache.admit(["a", "b", "c", "d"]) == [False] * 4  # "a" is forgotten
    assert cache.admit(["a", "d"]) == [False, True]


def test_readers_stay_right_while_compaction_and_gc_delete_their_files(
        tmp_path: object) -> None:
    """Reader threads look keys up, through the cache, while the table is upserted,
    compacted and garbage-collected with no delay: a lookup answers a value some version
    held for its key, or (its plan's files deleted under it) ObjectNotFoundError: never a
    wrong, partial or empty answer."""
    table = sd.Store.open(str(tmp_path), create=True).create_table(
        "t", SCHEMA, properties={"parquet.row_group_rows": 128, "gc.delay_seconds": 0,
                                 "gc.clock_skew_seconds": 0,
                                 "retention.seconds": 0, "merge": "last"})
    keys = [f"k{i:03d}" for i in range(300)]

    def round_of(r: int) -> pa.Table:
        return pa.table({"key": keys, "ts": [0] * len(keys), "value": [f"r{r}"] * len(keys)},
                        schema=SCHEMA.to_arrow())

    table.ingest(round_of(0))
    seen: list[str] = []
    problems: list[str] = []
    stop = threading.Event()
    rounds = 6

    def read(seed: int) -> None:
        rng = np.random.default_rng(seed)
        while not stop.is_set():
            k = str(rng.choice(keys))
            try:
                got = table.query(keys=[k])
            except ObjectNotFoundError:
                continue
            values = got.column("value").to_pylist()
            if len(values) != 1 or got.column("key")[0].as_py() != k or \
                    int(values[0][1:]) > rounds:
                problems.append(f"{k}: {got.to_pylist()}")
            seen.append(values[0] if values else "")

    threads = [threading.Thread(target=read, args=(s,)) for s in range(3)]
    for t in threads:
        t.start()
    deleted = 0
    try:
        for r in range(1, rounds + 1):
            table.upsert(round_of(r))
            table.compact(full=True)
            deleted += table.gc().deleted
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    assert not problems, problems[:5]
    assert seen and deleted >= rounds  # the files read were deleted under the readers
    assert table.query(keys=keys[:3]).column("value").to_pylist() == [f"r{rounds}"] * 3
