"""Sediment's own reading of Parquet bloom filters (sediment.files.bloom): xxhash64 against
its reference vectors, and the split-block check against filters pyarrow wrote."""

from __future__ import annotations

import datetime as dt
import io

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import sediment as sd
from sediment.errors import PropertyError
from sediment.files import thrift_compact as tc
from sediment.files.bloom import (
    ColumnBlooms,
    bloom_places,
    parse_filter,
    value_hashes,
    xxhash64,
)

# XXH64, seed 0 (the reference implementation's sanity vectors and well-known digests)
VECTORS = [
    (b"", 0xEF46DB3751D8E999),
    (b"a", 0xD24EC4F1A98C6E5B),
    (b"abc", 0x44BC2CF5AD770999),
    (b"Nobody inspects the spammish repetition", 0xFBCEA83C8A378BF1),
    (b"message digest", 0x066ED728FCEEB3BE),
    (b"abcdefghijklmnopqrstuvwxyz", 0xCFE1F278FA89835C),
]


@pytest.mark.parametrize(("data", "digest"), VECTORS)
def test_xxhash64_matches_the_reference(data: bytes, digest: int) -> None:
    assert xxhash64(data) == digest


def test_xxhash64_covers_every_tail_length() -> None:
    """Lengths 0-70 cross the 32-byte stripes and the 8-, 4- and 1-byte tails; each digest
    differs (a dropped byte would collide)."""
    data = bytes(range(71))
    assert len({xxhash64(data[:n]) for n in range(72)}) == 72


def _blooms(raw: bytes, column: int) -> ColumnBlooms:
    n = int.from_bytes(raw[-8:-4], "little")
    md = tc.decode(raw[-8 - n:-8])
    places = bloom_places(md, column)
    assert places is not None
    return ColumnBlooms.of([parse_filter(raw[o:o + size]) for o, size in places])


COLUMNS = [
    ("s", pa.string(), lambda i: f"value-{i}"),
    ("b", pa.binary(), lambda i: f"bin{i}".encode()),
    ("i64", pa.int64(), lambda i: i * 7919 - 10**6),
    ("i32", pa.int32(), lambda i: -i),
    ("u8", pa.uint8(), lambda i: i % 251),
    ("f64", pa.float64(), lambda i: i / 3),
    ("f32", pa.float32(), lambda i: float(np.float32(i / 4))),
    ("ts", pa.timestamp("us"), lambda i: i * 1_000_003),
    ("d", pa.date32(), lambda i: i),
]


def test_every_value_pyarrow_wrote_is_found_in_its_row_group() -> None:
    """A file pyarrow wrote with bloom filters on every supported type: each value's row
    group may hold it (no false negative), and values never written are mostly ruled out."""
    n, rows = 1500, 300
    data = {name: pa.array([f(i) for i in range(n)], typ) if not pa.types.is_temporal(typ)
            else pa.array(np.array([f(i) for i in range(n)], dtype=np.int64)).cast(
                pa.int32() if typ == pa.date32() else pa.int64()).view(typ)
            for name, typ, f in COLUMNS}
    buf = io.BytesIO()
    pq.write_table(pa.table(data), buf, row_group_size=rows,
                   bloom_filter_options={name: {"ndv": rows, "fpp": 0.01}
                                         for name, _, _ in COLUMNS})
    raw = buf.getvalue()
    for c, (_, typ, f) in enumerate(COLUMNS):
        blooms = _blooms(raw, c)
        values = [f(i) for i in range(n)]
        hits = np.array([blooms.may_contain(value_hashes([v], typ)) for v in values])
        assert all(hits[i, i // rows] for i in range(n)), typ
        if pa.types.is_integer(typ) and typ.bit_width == 8:
            continue  # 251 values repeat in every row group
        others = [f(i) for i in range(n + 100_000, n + 100_200)]
        found = np.array([blooms.may_contain(value_hashes([v], typ)) for v in others])
        assert found.mean() < 0.02, typ


def test_several_values_are_checked_at_once() -> None:
    buf = io.BytesIO()
    pq.write_table(pa.table({"s": [f"x{i}" for i in range(4000)]}), buf, row_group_size=1000,
                   bloom_filter_options={"s": {"ndv": 1000, "fpp": 0.01}})
    blooms = _blooms(buf.getvalue(), 0)
    hit = blooms.may_contain(value_hashes(["x5", "x3500"], pa.string()))
    assert hit[0] and hit[3]


def test_a_file_without_filters_has_no_places() -> None:
    buf = io.BytesIO()
    pq.write_table(pa.table({"s": ["a"]}), buf)
    raw = buf.getvalue()
    n = int.from_bytes(raw[-8:-4], "little")
    assert bloom_places(tc.decode(raw[-8 - n:-8]), 0) is None


def test_values_that_do_not_hash_give_none() -> None:
    assert value_hashes([1], pa.string()) is None
    assert value_hashes([dt.time(1)], pa.time64("us")) is None
    assert value_hashes([float("nan")], pa.float64()) is None


def test_the_writer_writes_filters_for_the_named_columns(tmp_path) -> None:
    store = sd.Store.open(str(tmp_path), create=True)
    schema = sd.Schema(row_keys=[("k", pa.string()), ("k2", pa.int64())],
                       values=[("v", pa.string()), ("w", pa.int64())])
    t = store.create_table("t", schema, properties={"parquet.bloom_columns": "v, k2"})
    t.ingest(pa.table({"k": ["a", "b"], "k2": [1, 2], "v": ["x", "y"], "w": [1, 2]}))
    (ref,) = t.files()
    raw = (tmp_path / "tables" / t.table_id / ref.filename).read_bytes() if \
        (tmp_path / "tables" / t.table_id / ref.filename).exists() else None
    if raw is None:  # the store's layout: find the file by its name
        raw = next(tmp_path.rglob(ref.filename.rsplit("/", 1)[-1])).read_bytes()
    n = int.from_bytes(raw[-8:-4], "little")
    md = tc.decode(raw[-8 - n:-8])
    names = [e[4][1].decode() for e in md[2][1].items[1:]]
    assert bloom_places(md, names.index("v")) is not None
    assert bloom_places(md, names.index("k2")) is not None
    assert bloom_places(md, names.index("w")) is None
    assert bloom_places(md, names.index("k")) is None


@pytest.mark.parametrize(("value", "says"), [
    ("nope", "no column 'nope'"),
    ("k", "first row-key field"),
    ("flag", "bool"),
])
def test_bloom_columns_are_checked_against_the_schema(tmp_path, value: str, says: str
                                                      ) -> None:
    store = sd.Store.open(str(tmp_path), create=True)
    schema = sd.Schema(row_keys=[("k", pa.string())],
                       values=[("v", pa.string()), ("flag", pa.bool_())])
    with pytest.raises(PropertyError, match=f"table events.*{says}"):
        store.create_table("events", schema, properties={"parquet.bloom_columns": value})
    t = store.create_table("other", schema)
    with pytest.raises(PropertyError, match=f"table other.*{says}"):
        t.set_properties({"parquet.bloom_columns": value})
