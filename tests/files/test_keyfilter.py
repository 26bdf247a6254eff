"""Key filters: hashing, Bloom blocks per row group, the writer's sidecar, and lookups that
skip files (checked against the same queries with filters off and against a reference)."""

from __future__ import annotations

import datetime
import random
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import sediment as sd
from reference import Reference, assert_matches
from sediment.errors import CorruptMetadataError
from sediment.files.keyfilter import HEADER_BYTES, FilterLayout, hash_key_values, hash_keys
from sediment.files.writer import keys_name
from sediment.properties import defaults
from sediment.storage.local import LocalObjectStore
from support.internals import write_sorted_file

SCHEMA = sd.Schema(row_keys=[("key", pa.string())], values=[("value", pa.int64())])


# ---- hashing and blocks ----------------------------------------------------------------------
def test_hashes_are_pinned() -> None:
    """The hashes are persisted in sidecars: a change would make old filters lie."""
    assert hash_keys(pa.array(["abc", "", "key-0001"])).tolist() == [
        int(h) for h in hash_keys(pa.array([b"abc", b"", b"key-0001"]))]
    assert hash_keys(pa.array(["abc"])).tolist() == [9997890369590825124]
    assert hash_keys(pa.array([42], pa.int64())).tolist() == [13679457532755275413]


def test_same_value_same_hash_whatever_the_arrow_type() -> None:
    words = ["a", "bb", "", "ccc", "bb", "dddddddddddddddddddd"]
    h = hash_keys(pa.array(words))
    assert h.tolist() == hash_keys(pa.array(words, pa.large_string())).tolist()
    assert h.tolist() == hash_keys(pa.chunked_array([words[:2], words[2:]])).tolist()
    assert h[1] == h[4] and len(set(h.tolist())) == 5
    # fixed-width and mixed-width inputs take different paths: same answers
    fixed = ["abcd", "efgh", "ijkl"]
    assert hash_keys(pa.array(fixed)).tolist() == [
        int(hash_keys(pa.array([w, "x"]))[0]) for w in fixed]
    assert hash_keys(pa.array(words).slice(2, 3)).tolist() == h[2:5].tolist()
    ints = [-(2**63), -1, 0, 7, 2**31 - 1]
    assert hash_keys(pa.array(ints[1:], pa.int32())).tolist() == \
        hash_keys(pa.array(ints[1:], pa.int64())).tolist()
    ts = pa.array([0, 1_700_000_000_000_000], pa.timestamp("us"))
    assert hash_keys(ts).tolist() == hash_keys(pa.array([0, 1_700_000_000_000_000])).tolist()
    days = pa.array([datetime.date(2024, 2, 29)], pa.date32())
    assert hash_keys(days).tolist() == hash_keys(pa.array([19782])).tolist()


KEY_LISTS = st.one_of(
    st.lists(st.text(max_size=12), min_size=1, max_size=300),
    st.lists(st.binary(max_size=40), min_size=1, max_size=300),
    st.lists(st.integers(-(2**63), 2**63 - 1), min_size=1, max_size=300),
)


@given(KEY_LISTS)
def test_values_in_hand_hash_as_their_arrow_array(keys: list[Any]) -> None:
    # the executor's one-point path hashes the value itself, never an array of it
    assert hash_key_values(keys).tolist() == hash_keys(pa.array(keys)).tolist()


@settings(max_examples=150, deadline=None)
@given(keys=KEY_LISTS, group_rows=st.integers(1, 64), bits=st.integers(1, 16))
def test_no_false_negatives(keys: list[Any], group_rows: int, bits: int) -> None:
    arr = pa.array(keys)
    layout = FilterLayout.for_rows(group_rows, bits)
    blocks = layout.build(hash_keys(arr))
    groups = -(-len(keys) // group_rows)
    assert len(blocks) == groups * layout.stride
    for g in range(groups):
        start, end = layout.block_range(g)
        block = blocks[start - HEADER_BYTES : end - HEADER_BYTES]
        members = arr.slice(g * group_rows, group_rows)
        assert layout.may_contain(block, hash_keys(members)).all()


def test_false_positive_rate_near_theory() -> None:
    rng = np.random.default_rng(3)
    members = pa.array([f"k{i:09d}" for i in rng.integers(0, 10**9, 4096)])
    others = pa.array([f"o{i:09d}" for i in range(50_000)])
    layout = FilterLayout.for_rows(4096, 10)
    block = layout.build(hash_keys(members))
    rate = layout.may_contain(block, hash_keys(others)).mean()
    assert rate < 0.02, rate  # theory for 10 bits and 5 probes: 0.94%


def test_bad_headers_are_named() -> None:
    with pytest.raises(CorruptMetadataError, match="f.keys"):
        FilterLayout.parse(b"xx", "f.keys")
    with pytest.raises(CorruptMetadataError, match="unknown header"):
        FilterLayout.parse(b"NOPE" + bytes(12), "f.keys")
    layout = FilterLayout.for_rows(100, 10)
    assert FilterLayout.parse(layout.header(), "f.keys") == layout


# ---- the writer's sidecar --------------------------------------------------------------------
def test_writer_streams_one_block_per_row_group(tmp_path: Path) -> None:
    objects = LocalObjectStore(tmp_path)
    props = {**defaults(), "parquet.row_group_rows": 128}
    keys = sorted(f"k{i:05d}" for i in range(1000))
    data = pa.table({"key": keys, "value": list(range(1000))}, schema=SCHEMA.to_arrow())
    pieces = [data.slice(i, 37) for i in range(0, 1000, 37)]
    write_sorted_file(objects, "data/p/f.parquet", SCHEMA, props, pieces)
    md = pq.ParquetFile(objects.path("data/p/f.parquet")).metadata
    raw = objects.get(keys_name("data/p/f.parquet"))
    layout = FilterLayout.parse(raw, "sidecar")
    assert layout.group_rows == 128
    assert len(raw) == HEADER_BYTES + md.num_row_groups * layout.stride
    for g in range(md.num_row_groups):
        start, end = layout.block_range(g)
        got = pq.ParquetFile(objects.path("data/p/f.parquet")).read_row_group(g)
        assert layout.may_contain(raw[start:end], hash_keys(got.column("key"))).all()


def test_writer_without_filters(tmp_path: Path) -> None:
    objects = LocalObjectStore(tmp_path)
    props = {**defaults(), "parquet.key_filter_bits": 0}
    data = pa.table({"key": ["a", "b"], "value": [1, 2]}, schema=SCHEMA.to_arrow())
    write_sorted_file(objects, "data/p/f.parquet", SCHEMA, props, [data])
    assert objects.head(keys_name("data/p/f.parquet")) is None


# ---- lookups ---------------------------------------------------------------------------------
def many_files_table(root: str, options: dict[str, Any] | None = None, files: int = 12,
                     **props: Any) -> tuple[sd.Table, Reference, list[str]]:
    """One leaf holding ``files`` files of random keys (no compaction)."""
    store = sd.Store.open(root, **(options or {}), create=True)
    table = store.create_table(f"t{uuid.uuid4().hex[:8]}", SCHEMA, properties={
        "parquet.row_group_rows": 128, "state.cache.refresh_seconds": 0, **props})
    ref = Reference(SCHEMA)
    rng = random.Random(5)
    keys: list[str] = []
    for f in range(files):
        batch = [f"{rng.getrandbits(40):010x}" for _ in range(600)]
        data = pa.table({"key": batch, "value": [f * 1000 + i for i in range(600)]})
        table.ingest(data)
        ref.add(data)
        keys += batch
    return table, ref, keys


def count_row_group_reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    real = pq.ParquetFile.read_row_group

    def counting(self: pq.ParquetFile, i: int, *args: Any, **kwargs: Any) -> pa.Table:
        calls.append(i)
        return real(self, i, *args, **kwargs)

    monkeypatch.setattr(pq.ParquetFile, "read_row_group", counting)
    return calls


def test_exact_lookups_skip_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    table, ref, keys = many_files_table(str(tmp_path / "s"))
    assert len(table.files()) == 12
    rng = random.Random(1)
    wanted = rng.sample(keys, 60)
    table.query(keys=[wanted[0]])  # footers cached
    calls = count_row_group_reads(monkeypatch)
    for k in wanted:
        assert_matches(table.query(keys=[k]), ref, keys=[k])
    # without filters each lookup reads one row group in each of the 12 files
    assert len(calls) < 60 * 1.5, len(calls)
    calls.clear()
    missing = [f"zz{i}" for i in range(50)] + [f"{rng.getrandbits(40):010x}" for _ in range(50)]
    for k in missing:
        assert table.query(keys=[k]).num_rows == 0
    assert len(calls) < 100 * 12 * 0.05, len(calls)
    calls.clear()
    got = table.query(keys=wanted)  # many keys at once: still right
    assert_matches(got, ref, keys=wanted)


def test_lookups_equal_with_and_without_filters(store_uri: tuple[str, dict[str, Any]]) -> None:
    uri, options = store_uri
    table, ref, keys = many_files_table(uri, options, files=5)
    table.set_properties({"parquet.key_filter_bits": 0})  # later files without filters
    rng = random.Random(9)
    extra = pa.table({"key": [f"{rng.getrandbits(40):010x}" for _ in range(300)],
                      "value": list(range(300))})
    table.ingest(extra)
    ref.add(extra)
    listed = {o.key for o in table._handle.objects.list("data/")}
    with_filters = [f.filename for f in table.files() if keys_name(f.filename) in listed]
    assert len(with_filters) == 5 and len(table.files()) == 6
    for k in rng.sample(keys, 20) + extra.column("key").to_pylist()[:10] + ["nope"]:
        assert_matches(table.query(keys=[k]), ref, keys=[k])
    sample = rng.sample(keys, 30)
    assert_matches(table.query(keys=sample), ref, keys=sample)
    table.compact()  # the merged output has no filters either (property is 0): still right
    assert_matches(table.query(keys=sample), ref, keys=sample)


@pytest.mark.parametrize("damage", ["truncated_header", "truncated_blocks", "garbage"])
def test_damaged_key_filters_are_skipped(tmp_path: Path, damage: str,
                                         caplog: pytest.LogCaptureFixture) -> None:
    """A key filter is an optional index: a damaged one never fails a read of an intact data
    file. Scans do not read key filters at all; lookups warn once and read the file as if it
    had none."""
    table, ref, keys = many_files_table(str(tmp_path / "s"), files=3)
    root = Path(table._handle.objects.local_path(table.files()[0].filename) or "").parent
    sidecars = sorted(root.parent.glob("*/_*.keys"))
    assert sidecars
    for f in sidecars:
        raw = f.read_bytes()
        f.write_bytes({"truncated_header": raw[:5], "truncated_blocks": raw[:HEADER_BYTES + 3],
                       "garbage": b"not a key filter at all, really"}[damage])
    fresh = sd.Store.open(str(tmp_path / "s")).table(table.name)  # no cached filters
    assert_matches(fresh.query(), ref)  # a full scan never reads them
    assert not [r for r in caplog.records if "key filter" in r.getMessage()]
    rng = random.Random(4)
    for k in [*rng.sample(keys, 20), "nope"]:
        assert_matches(fresh.query(keys=[k]), ref, keys=[k])
    warned = [r for r in caplog.records if "key filter" in r.getMessage()]
    assert warned and len(warned) <= len(sidecars)  # once per file, not per lookup


def test_multi_field_prefix_lookups(tmp_path: Path) -> None:
    schema = sd.Schema(row_keys=[("a", pa.int64()), ("b", pa.string())],
                       values=[("v", pa.int64())])
    store = sd.Store.open(str(tmp_path / "s"), create=True)
    table = store.create_table("t", schema, properties={"parquet.row_group_rows": 128,
                                                        "state.cache.refresh_seconds": 0})
    ref = Reference(schema)
    rng = random.Random(4)
    for _ in range(4):
        data = pa.table({"a": [rng.randrange(300) for _ in range(500)],
                         "b": [rng.choice("xyz") for _ in range(500)],
                         "v": list(range(500))})
        table.ingest(data)
        ref.add(data)
    for a in rng.sample(range(320), 25):
        assert_matches(table.query(keys=[(a,)]), ref, keys=[(a,)])
        assert_matches(table.query(keys=[(a, "y")]), ref, keys=[(a, "y")])
    r = sd.Range((7, "x"), (7, "z"))
    assert_matches(table.query(ranges=[r]), ref, ranges=[r])


def test_temporal_keys_use_filters(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    schema = sd.Schema(row_keys=[("t", pa.timestamp("us"))], values=[("v", pa.int64())])
    table = sd.Store.open(str(tmp_path / "s"), create=True).create_table(
        "t", schema, properties={"parquet.row_group_rows": 128,
                                 "state.cache.refresh_seconds": 0})
    ref = Reference(schema)
    rng = random.Random(2)
    base = datetime.datetime(2024, 1, 1)
    for _ in range(6):
        ts = [base + datetime.timedelta(microseconds=rng.randrange(10**12)) for _ in range(300)]
        data = pa.table({"t": pa.array(ts, pa.timestamp("us")), "v": list(range(300))})
        table.ingest(data)
        ref.add(data)
    keys = [ts[i] for i in range(0, 300, 30)]
    table.query(keys=[keys[0]])
    calls = count_row_group_reads(monkeypatch)
    for k in keys:
        assert_matches(table.query(keys=[k]), ref, keys=[k])
    assert len(calls) < len(keys) * 2


def test_damaged_sidecar_is_named(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    table, ref, keys = many_files_table(str(tmp_path / "s"), files=2)
    f = table.files()[0].filename
    table._handle.objects.put(keys_name(f), b"garbage that is long enough to be read")
    fresh = sd.Store.open(str(tmp_path / "s")).table(table.name)
    assert_matches(fresh.query(keys=[keys[0]]), ref, keys=[keys[0]])
    assert any(keys_name(f).rsplit("/", 1)[-1] in r.getMessage() for r in caplog.records)


def test_loaded_files_get_key_filters(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    table, ref, keys = many_files_table(str(tmp_path / "s"), files=6)
    table.compact()  # some files merged by a job, some as ingested: both kinds are dumped
    job = table.dump(str(tmp_path / "dumps"))
    loaded = table.store.load(job.manifest_uri, "copy")
    listed = {o.key for o in loaded._handle.objects.list("data/")}
    assert all(keys_name(f.filename) in listed for f in loaded.files())
    wanted = random.Random(3).sample(keys, 40)
    loaded.query(keys=[wanted[0]])
    calls = count_row_group_reads(monkeypatch)
    for k in wanted:
        assert_matches(loaded.query(keys=[k]), ref, keys=[k])
    assert len(calls) < 40 * 1.5
