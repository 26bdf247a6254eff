"""The disk cache of object-store reads (sediment.storage.diskcache): entries that never read
back wrong (torn, damaged, killed mid-write), LRU eviction by modification time, only checked
bytes admitted, answers on S3 with the cache on, off and tiny equal to the input's, the
requests a lookup makes through the fault proxy, and two processes sharing one folder."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import sediment as sd
from sediment.errors import CorruptDataError
from sediment.storage import MemoryObjectStore
from sediment.storage import diskcache as dc
from sediment.storage.diskcache import DiskCache
from sediment.storage.rangereads import RangeReads
from support.races import as_another_process
from support.s3 import S3_CREDENTIALS, S3_REGION, s3_client

SCHEMA = sd.Schema(row_keys=[("key", pa.string())], sort_keys=[("ts", pa.int64())],
                   values=[("v", pa.int64()), ("s", pa.string())])
SMALL = {"parquet.row_group_rows": 1024, "parquet.page_rows": 256,
         "query.block_cache_bytes": 0}
"""Several row groups and pages in a small file, and every lookup past the block cache (so the
disk cache is what serves it)."""


def _data(n: int, seed: int, step: int = 1) -> pa.Table:
    rng = np.random.default_rng(seed)
    idx = np.arange(0, n * step, step)
    return pa.table({"key": [f"k{i:07d}" for i in idx], "ts": rng.integers(0, 10**6, n),
                     "v": rng.integers(0, 10**9, n),
                     "s": [f"s{x}" for x in rng.integers(0, 10**6, n)]},
                    schema=SCHEMA.to_arrow())


def _sorted(t: pa.Table) -> pa.Table:
    return t.select(SCHEMA.to_arrow().names).sort_by(
        [("key", "ascending"), ("ts", "ascending"), ("v", "ascending")])


def _entries(directory: Path) -> list[tuple[str, int, int, bytes]]:
    """(cache name's object, start, end, data) of every intact entry under ``directory``."""
    out = []
    for path in (directory / dc.FORMAT).glob("*/*"):
        if path.name.endswith(".tmp"):
            continue
        raw = path.read_bytes()
        _, nlen, _, _ = dc._HEADER.unpack_from(raw)
        name = raw[dc._HEADER.size:dc._HEADER.size + nlen].decode()
        data = dc._unpack(raw, name)
        assert data is not None, f"{path} does not read back whole"
        obj, _, span = name.rpartition("\n")
        if span.startswith("suffix-"):  # the object's last bytes (a footer)
            end = int(span.removeprefix("suffix-"))
            start = end - len(data)
        else:
            start, end = map(int, span.split("-"))
        out.append((obj, start, end, data))
    return out


def _assert_entries_are_the_stores(directory: Path, endpoint: str) -> int:
    """Every cached range equals the bytes the S3 server holds at that range; how many."""
    client = s3_client(endpoint)
    entries = _entries(directory)
    for obj, start, end, data in entries:
        bucket, _, key = obj.split(" s3://", 1)[1].partition("/")
        want = client.get_object(Bucket=bucket, Key=key,
                                 Range=f"bytes={start}-{end - 1}")["Body"].read()
        assert data == want, f"cached {obj} [{start}, {end}) differs from the store's bytes"
    return len(entries)


# ---- the entries --------------------------------------------------------------------------
def test_an_entry_reads_back_and_a_torn_or_damaged_one_is_a_miss_and_removed(
        tmp_path: Path) -> None:
    cache = DiskCache(tmp_path, 1 << 20)
    cache.put("a", b"x" * 1000)
    assert cache.get("a") == b"x" * 1000 and cache.get("b") is None
    path = cache._path("a")
    whole = path.read_bytes()
    for broken in (whole[:-1], whole[:10], b"", whole[:-1] + b"y", whole + b"z",
                   whole.replace(b"a", b"b", 1)):
        path.write_bytes(broken)
        assert cache.get("a") is None
        assert not path.exists()  # a bad entry is removed
    assert cache.stats().bad == 6
    # an entry holds its own name: a file under another name's path never reads as it
    cache.put("b", b"y")
    os.replace(cache._path("b"), path)
    assert cache.get("a") is None


def test_eviction_removes_the_least_recently_used_by_modification_time(tmp_path: Path) -> None:
    """Entries age by modification time (a hit refreshes it), so processes sharing the folder
    agree on the order without sharing memory; a trim keeps the total under the bound."""
    entry = dc._HEADER.size + 1 + 1000
    cache = DiskCache(tmp_path, entry * 4)
    for i, name in enumerate("abcd"):
        cache.put(name, name.encode() * 1000)
        os.utime(cache._path(name), (1000 + i, 1000 + i))  # a older than b, c, d
    assert cache.get("a") is not None  # a hit: now the most recent
    cache.put("e", b"e" * 1000)  # past the bound: trimmed to 90% of it (3 entries)
    left = {n for n in "abcde" if cache._path(n).exists()}
    assert left == {"a", "d", "e"}
    assert cache.stats().evictions == 2
    assert sum(p.stat().st_size for p in (tmp_path / dc.FORMAT).glob("*/*")) <= entry * 4


def test_an_entry_larger_than_the_bound_is_not_kept_and_a_trim_removes_old_temporaries(
        tmp_path: Path) -> None:
    cache = DiskCache(tmp_path, 100)
    cache.put("big", b"x" * 200)
    assert cache.get("big") is None
    leftover = cache._path("big").with_name("leftover.1.abc.tmp")
    leftover.parent.mkdir(parents=True, exist_ok=True)
    leftover.write_bytes(b"torn")
    cache.trim()
    assert leftover.exists()  # a writer may still be writing it
    os.utime(leftover, (0, 0))
    cache.trim()
    assert not leftover.exists()


def test_a_cache_folder_that_cannot_be_written_is_skipped_with_a_warning(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """``SEDIMENT_CACHE_DIR`` naming a file (or a folder without write permission): the
    cache says so once and reads go on without it; a cache never fails a read."""
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    cache = DiskCache(blocker, 1 << 20)
    store = _remote_memory_store()
    store.put("f", b"0123456789")
    with caplog.at_level("WARNING", logger="sediment.storage.diskcache"):
        for _ in range(2):
            reads = RangeReads(store, cache)
            assert reads.read("f", 2, 5) == b"234"
            reads.keep()
    assert cache.get("anything") is None
    assert [r.message for r in caplog.records].count(
        next(r.message for r in caplog.records if "cannot be written" in r.message)) == 1


def _remote_memory_store() -> MemoryObjectStore:
    """A memory store that asks to be cached (as an object store does)."""
    store = MemoryObjectStore(f"dc-{uuid.uuid4().hex}")
    store.cache_name = lambda key: f"memory {key}"  # type: ignore[method-assign]
    return store


def test_only_ranges_kept_after_their_checks_enter_the_cache(tmp_path: Path) -> None:
    """Bytes read from the store are held until the reader's checks pass (``keep``); a read
    whose checks failed (``forget``, or the reads dropped) leaves nothing; ranges fetched
    together by one GET are kept only where the reader read them; a second read after a
    failed check (``fresh``) takes nothing from the cache."""
    store = _remote_memory_store()
    store.put("f", bytes(range(256)) * 16)
    cache = DiskCache(tmp_path, 1 << 20)
    reads = RangeReads(store, cache)
    assert reads.read("f", 0, 10) == bytes(range(10))
    assert _entries(tmp_path) == []  # held, not kept
    reads.forget()
    reads.keep()
    assert _entries(tmp_path) == []
    reads = RangeReads(store, cache)
    gets = []
    get_range = store.get_range
    store.get_range = lambda k, s, e: gets.append((s, e)) or get_range(k, s, e)  # type: ignore
    reads.prefetch("f", [(100, 110), (2000, 2010), (5, 6), (3000, 3001)])
    assert gets == [(5, 3001)]  # one GET spans them
    for s_, e_ in [(100, 110), (2000, 2010), (5, 6)]:
        assert reads.read("f", s_, e_) == (bytes(range(256)) * 16)[s_:e_]
    assert len(gets) == 1
    reads.keep()  # (3000, 3001) was never read, so never checked: not kept
    assert sorted((s, e) for _, s, e, _ in _entries(tmp_path)) == [(5, 6), (100, 110),
                                                                  (2000, 2010)]
    store.get_range = get_range  # type: ignore[method-assign]
    store.put("f", b"\0" * 4096)  # (files never change: here it shows where bytes come from)
    assert RangeReads(store, cache).read("f", 100, 110) == bytes(range(100, 110))
    fresh = RangeReads(store, cache, fresh=True)
    assert fresh.read("f", 100, 110) == b"\0" * 10  # not from the cache, and its entry gone
    assert (100, 110) not in {(s, e) for _, s, e, _ in _entries(tmp_path)}


def test_a_local_store_does_not_use_the_disk_cache(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(dc.ENV, str(tmp_path / "cache"))
    table = sd.Store.open(str(tmp_path / "store"), create=True).create_table(
        "t", SCHEMA, properties=SMALL)
    data = _data(3000, 1)
    table.ingest(data)
    key = data.column("key")[5].as_py()
    assert table.query(keys=[key]).num_rows == 1
    assert not (tmp_path / "cache").exists()


# ---- on S3 --------------------------------------------------------------------------------
def _reference_reads(data: pa.Table) -> list[tuple[dict[str, Any], pa.Table]]:
    keys = data.column("key").to_pylist()
    picks = [keys[0], keys[2999], keys[3001], keys[-1], "k9999999x"]
    out: list[tuple[dict[str, Any], pa.Table]] = []
    for k in picks:
        out.append(({"keys": [k]}, data.filter(pc.equal(data.column("key"), k))))
    out.append(({"keys": picks[:4]}, data.filter(pc.is_in(data.column("key"),
                                                           pa.array(picks[:4])))))
    lo, hi = keys[1000], keys[2500]
    out.append(({"ranges": [sd.Range(lo, hi)]},
                data.filter(pc.and_(pc.greater_equal(data.column("key"), lo),
                                    pc.less(data.column("key"), hi)))))
    out.append(({}, data))
    return out


def test_answers_with_the_disk_cache_on_off_and_tiny_equal_the_input(
        s3_store_uri: tuple[str, dict[str, Any]], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Lookups, a multi-key read, a range and a whole read of a two-file table on S3, each
    twice (cold, then from the cache), with the cache on, off and 4 KiB (every other put
    evicts; a footer does not fit), from a new table handle each time (its memory caches
    empty): equal to the input's rows."""
    uri, options = s3_store_uri
    store = sd.Store.open(uri, create=True, **options)
    table = store.create_table("t", SCHEMA, properties=SMALL)
    a, b = _data(4000, 1, step=2), _data(2000, 2, step=3)
    table.ingest(a)
    table.ingest(b)
    data = pa.concat_tables([a, b])
    reads = _reference_reads(data)
    for bound in (dc.DEFAULT_BYTES, 0, 4096):
        folder = tmp_path / f"cache-{bound}"
        monkeypatch.setenv(dc.ENV, str(folder))
        table.set_properties({"query.disk_cache_bytes": bound})
        for _ in range(2 if bound else 1):
            reader = store.table("t")  # a new handle: its memory caches empty
            for kwargs, want in reads:
                got = reader.query(**kwargs)
                assert _sorted(got) == _sorted(want), (bound, kwargs)
        size = sum(p.stat().st_size for p in folder.glob("*/*/*"))
        assert size <= max(bound, 0), (bound, size)
        if bound == dc.DEFAULT_BYTES:
            assert _assert_entries_are_the_stores(folder, options["endpoint_url"]) > 10


def test_a_warm_lookup_makes_no_get_of_data_files_and_a_cold_one_at_most_two(
        proxied_s3: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Counted at the fault proxy, requests for objects under ``data/`` (data files and their
    sidecars) apart from the rest (the head's log and snapshot reads): a first lookup reads
    the footer, the page index (twice: it has no checksum), the key-filter header and block
    and the pages; a lookup of another
    row group, with the footer and filter header cached, at most two (its filter block, and
    its pages in one coalesced GET); from a fresh process's view (a new store: empty memory
    caches) with the disk cache warm, none."""
    monkeypatch.setenv(dc.ENV, str(tmp_path / "cache"))
    writer = proxied_s3.open_direct()
    table = writer.create_table("t", SCHEMA, properties=SMALL)
    data = _data(6000, 3)
    table.ingest(data)
    keys = data.column("key").to_pylist()
    first, other, near = keys[10], keys[4500], keys[4500 + 300]  # near: same group, next page
    rule = proxied_s3.proxy.add_rule("delay", method=None, path=r"/data/", delay=0.0)

    def lookup(reader: sd.Table, key: str) -> int:
        before = rule.matched
        got = reader.query(keys=[key])
        assert _sorted(got) == _sorted(data.filter(pc.equal(data.column("key"), key)))
        return rule.matched - before

    reader = proxied_s3.open().table("t")
    assert lookup(reader, first) <= 6
    assert lookup(reader, first) == 0
    assert dc.stats()["inserts"] >= 5
    assert lookup(reader, other) <= 2
    assert lookup(reader, near) <= 1
    warm = as_another_process(proxied_s3.open().table("t"))
    before = proxied_s3.proxy.counts["requests"]
    hits = dc.stats()["hits"]
    assert [lookup(warm, k) for k in (first, other, near)] == [0, 0, 0]
    assert dc.stats()["hits"] > hits
    assert proxied_s3.proxy.counts["requests"] > before  # (the head's own reads go on)
    # with the cache off the same warm lookups read their ranges again
    table.set_properties({"query.disk_cache_bytes": 0})
    off = as_another_process(proxied_s3.open().table("t"))
    assert lookup(off, first) >= 3


def test_a_read_that_fails_its_checks_is_never_cached(
        proxied_s3: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A byte flipped on the way, once each, in the footer, the page index (which has no
    checksum: read twice before it is cached), a data page, a key-filter block and a column
    chunk of a range's row group: the reads are made again and answer right, and every
    cached range is the store's bytes. Every
    GET of the data file's footer flipped (damage at rest): CorruptDataError, and nothing
    of the file is cached."""
    from sediment.files.keyfilter import HEADER_BYTES
    from sediment.files.pages import load_page_index, page_ranges

    folder = tmp_path / "cache"
    monkeypatch.setenv(dc.ENV, str(folder))
    table = proxied_s3.open_direct().create_table("t", SCHEMA, properties=SMALL)
    data = _data(6000, 4)
    table.ingest(data)
    keys = data.column("key").to_pylist()
    objects = table._handle.objects
    (ref,) = table.files()
    size = objects.head(ref.filename).size
    index = load_page_index(lambda s, e: objects.get_range(ref.filename, s, e), size,
                            ref.filename)
    assert index is not None
    page = page_ranges(index, 0, 0, 0)[-1]
    proxy = proxied_s3.proxy
    rules = [proxy.add_rule("corrupt", path=r"\.parquet$", offset=offset, count=1)
             for offset in (-12, index.byte_range[0] + 7, page[0] + (page[1] - page[0]) // 2)]
    rules.append(proxy.add_rule("corrupt", path=r"\.keys$", offset=HEADER_BYTES + 5, count=1))
    reader = proxied_s3.open().table("t")
    for k in (keys[5], keys[1500], keys[5999], keys[6]):
        got = reader.query(keys=[k])
        assert _sorted(got) == _sorted(data.filter(pc.equal(data.column("key"), k)))
    assert [r.fired for r in rules] == [1, 1, 1, 1]
    # a range reads whole row groups (their column chunks through the cache): a byte of
    # row group 3's key chunk flipped once
    import pyarrow.parquet as pq

    md = pq.read_metadata(pa.BufferReader(objects.get(ref.filename)))
    chunk = md.row_group(3).column(0)
    rule = proxy.add_rule("corrupt", path=r"\.parquet$", count=1,
                          offset=chunk.data_page_offset + chunk.total_compressed_size // 2)
    lo, hi = keys[3 * 1024 - 10], keys[4 * 1024 + 10]
    got = reader.query(ranges=[sd.Range(lo, hi)])
    assert _sorted(got) == _sorted(data.filter(pc.and_(
        pc.greater_equal(data.column("key"), lo), pc.less(data.column("key"), hi))))
    assert rule.fired == 1
    assert _assert_entries_are_the_stores(folder, proxied_s3.direct_endpoint) >= 7
    proxy.clear()
    for p in (folder / dc.FORMAT).glob("*/*"):
        p.unlink()
    proxy.add_rule("corrupt", path=r"\.parquet$", offset=-12)  # the footer, every time
    with pytest.raises(CorruptDataError):
        proxied_s3.open().table("t").query(keys=[keys[7]])
    assert not [e for e in _entries(folder) if e[0].endswith(".parquet")]


# ---- processes ------------------------------------------------------------------------------
_WRITER = textwrap.dedent("""
    import hashlib, sys
    from sediment.storage.diskcache import DiskCache
    cache = DiskCache(sys.argv[1], 1 << 40)
    i = 0
    while True:
        name = f"entry-{i % 64}"
        cache.put(name, hashlib.sha256(name.encode()).digest() * (1 << 17))  # 4 MiB
        i += 1
        if i == 4:
            print("ready", flush=True)
""")


@pytest.mark.slow
def test_a_writer_killed_mid_write_leaves_no_wrong_range(tmp_path: Path) -> None:
    """kill -9 of a process writing 4 MiB entries, at random moments, until one was killed
    inside a write (a temporary left behind; at most 12 kills): every entry left reads back
    exactly as written or is a miss; the temporaries are never read, and a trim removes them
    once old. (slow: processes are started and killed.)"""
    import hashlib
    import random

    rng = random.Random(7)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    temps: list[Path] = []
    kills = 0
    while not temps and kills < 12:
        proc = subprocess.Popen([sys.executable, "-c", _WRITER, str(tmp_path)],
                                stdout=subprocess.PIPE, text=True, env=env)
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        time.sleep(rng.uniform(0.0, 0.1))
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        kills += 1
        temps = list((tmp_path / dc.FORMAT).glob("*/*.tmp"))
    assert temps, f"no kill of {kills} landed inside a write"
    cache = DiskCache(tmp_path, 1 << 40)
    found = 0
    for i in range(64):
        name = f"entry-{i}"
        got = cache.get(name)
        if got is not None:
            found += 1
            assert got == hashlib.sha256(name.encode()).digest() * (1 << 17)
    assert found >= 4 and cache.stats().bad == 0
    for t in temps:
        os.utime(t, (0, 0))
    cache.trim()
    assert not list((tmp_path / dc.FORMAT).glob("*/*.tmp"))


_LOOKUPS = textwrap.dedent("""
    import random, sys
    import sediment as sd
    uri, endpoint, rounds, seed = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    rng = random.Random(seed)
    keys = [f"k{i:07d}" for i in range(0, 6000, 3)]
    for _ in range(rounds):
        t = sd.Store.open(uri, endpoint_url=endpoint).table("t")  # empty memory caches
        for k in rng.sample(keys, 40):
            got = t.query(keys=[k], columns=["key", "v"]).to_pydict()
            want = {"key": [k], "v": [int(k[1:]) * 7]}
            assert got == want, (k, got)
    print("ok", flush=True)
""")


@pytest.mark.slow
def test_two_processes_share_one_folder_and_read_right_answers(
        s3_store_uri: tuple[str, dict[str, Any]], tmp_path: Path) -> None:
    """Two processes look keys up at once on one S3 table through one cache folder bounded at
    256 KiB (every few puts trim it while the other reads and writes): every answer right,
    every entry left the store's bytes. (slow: two processes of Sediment.)"""
    uri, options = s3_store_uri
    table = sd.Store.open(uri, create=True, **options).create_table(
        "t", sd.Schema(row_keys=[("key", pa.string())], values=[("v", pa.int64())]),
        properties={**SMALL, "query.disk_cache_bytes": 256 * 1024})
    idx = np.arange(0, 6000, 3)
    table.ingest(pa.table({"key": [f"k{i:07d}" for i in idx], "v": idx * 7}))
    folder = tmp_path / "cache"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), dc.ENV: str(folder),
           "AWS_ACCESS_KEY_ID": S3_CREDENTIALS["access_key_id"],
           "AWS_SECRET_ACCESS_KEY": S3_CREDENTIALS["secret_access_key"],
           "AWS_REGION": S3_REGION}
    procs = [subprocess.Popen([sys.executable, "-c", _LOOKUPS, uri, options["endpoint_url"],
                               "2", str(seed)], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for seed in (1, 2)]
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0 and out.strip() == "ok", err[-3000:]
    assert _assert_entries_are_the_stores(folder, options["endpoint_url"]) > 0
    assert sum(p.stat().st_size for p in folder.glob("*/*/*")) <= 2 * 256 * 1024
