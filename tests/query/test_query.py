"""Queries against an independent reference: exact keys, ranges, prefixes, versions, columns."""

from __future__ import annotations

import datetime
import random
import re
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sediment as sd
from helpers import make_table
from reference import (
    INT32_EXTREMES,
    INT64_EXTREMES,
    Reference,
    RefRange,
    assert_key_order,
    assert_matches,
    random_batch,
    random_range,
    result_rows,
    string_key_pool,
)
from sediment.errors import QueryError

STRATEGIES = ["per_partition", "shared_file"]


def new_table(root: Path | str, schema: sd.Schema, *, strategy: str = "per_partition",
              **kwargs: Any) -> sd.Table:
    return make_table(root, schema=schema, **{"ingest.write_strategy": strategy,
                                              "parquet.row_group_rows": 128, **kwargs})


def check_queries(table: sd.Table, ref: Reference, rng: random.Random, pool: list[Any],
                  *, n_ranges: int = 25) -> None:
    """Whole table, exact keys, single ranges and unions of overlapping ranges."""
    assert_matches(table.query(), ref)
    keys = rng.sample(pool, min(8, len(pool)))
    assert_matches(table.query(keys=keys), ref, keys=keys)
    for _ in range(n_ranges):
        r = random_range(rng, pool)
        assert_matches(table.query(ranges=[r.to_sediment()]), ref, ranges=[r])
    for _ in range(5):
        rs = [random_range(rng, pool) for _ in range(rng.randint(2, 6))]
        rs.append(rs[0])  # the same range twice: no duplicated rows
        ks = rng.sample(pool, 3)
        got = table.query(keys=ks, ranges=[r.to_sediment() for r in rs])
        assert_matches(got, ref, keys=ks, ranges=rs)


# ---- string keys, both write strategies, with and without split points ----------------------
@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("splits", [None, ["b", "é", "😀"]], ids=["one-leaf", "four-leaves"])
def test_string_keys_match_reference(tmp_path: Path, strategy: str, splits: Any) -> None:
    rng = random.Random(f"{strategy}{splits}")
    schema = sd.Schema(row_keys=[("key", pa.string())], sort_keys=[("ts", pa.int64())],
                       values=[("value", pa.string()), ("n", pa.int64())])
    table = new_table(tmp_path, schema, split_points=splits, strategy=strategy)
    ref = Reference(schema)
    pool = string_key_pool(rng, 60)
    ts_pool = [*INT64_EXTREMES, *range(20)]
    for _ in range(3):
        batch = random_batch(rng, schema, rng.randint(300, 700), {"key": pool, "ts": ts_pool})
        table.ingest(batch)
        ref.add(batch)
    if splits:
        assert sum(p.is_leaf for p in table.partitions()) == len(splits) + 1
        touched = {f.partition_id for f in table.files()}
        assert len(touched) == len(splits) + 1
    check_queries(table, ref, rng, pool + ["missing", "b", "😀😀😀"])
    # a key only present in one leaf, asked for alone and with duplicates in the key list
    assert_matches(table.query(keys=["", "", "😀"]), ref, keys=["", "😀"])


def test_open_and_exclusive_ends(tmp_path: Path) -> None:
    schema = sd.Schema(row_keys=[("key", pa.string())], values=[("v", pa.int64())])
    table = new_table(tmp_path, schema, split_points=["c"])
    keys = ["", "a", "b", "b", "c", "c", "d", "é", "😀"]
    data = pa.table({"key": keys, "v": list(range(len(keys)))})
    table.ingest(data)
    ref = Reference(schema)
    ref.add(data)

    def count(r: sd.Range) -> int:
        got = table.query(ranges=[r])
        assert_matches(got, ref, ranges=[RefRange.of(r)])
        return got.num_rows

    assert count(sd.Range("b", "c")) == 2
    assert count(sd.Range("b", "c", end_inclusive=True)) == 4
    assert count(sd.Range("b", "c", start_inclusive=False, end_inclusive=True)) == 2
    assert count(sd.Range("b", "c", start_inclusive=False)) == 0
    assert count(sd.Range(None, "b")) == 2
    assert count(sd.Range(None, "b", end_inclusive=True)) == 4
    assert count(sd.Range("d", None)) == 3
    assert count(sd.Range("d", None, start_inclusive=False)) == 2
    assert count(sd.Range(None, None)) == len(keys)
    assert count(sd.Range("", "", end_inclusive=True)) == 1
    with pytest.raises(QueryError, match="range start 'c' is after its end 'b'"):
        table.query(ranges=[sd.Range("c", "b")])
    assert count(sd.Range("c", "c")) == 0
    assert table.query(keys=[]).num_rows == 0
    assert table.query(ranges=[]).num_rows == 0


# ---- binary and integer keys -----------------------------------------------------------------
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_binary_keys(tmp_path: Path, strategy: str) -> None:
    from reference import AWKWARD_BINARIES

    rng = random.Random(7)
    schema = sd.Schema(row_keys=[("key", pa.binary())], sort_keys=[("s", pa.int32())],
                       values=[("value", pa.binary())])
    table = new_table(tmp_path, schema, split_points=[b"\x01", b"\x80"], strategy=strategy)
    pool = AWKWARD_BINARIES + [bytes(rng.randrange(256) for _ in range(rng.randint(0, 3)))
                               for _ in range(40)]
    ref = Reference(schema)
    for _ in range(2):
        batch = random_batch(rng, schema, 800, {"key": pool, "s": INT32_EXTREMES})
        table.ingest(batch)
        ref.add(batch)
    check_queries(table, ref, rng, pool)


@pytest.mark.parametrize("key_type,extremes", [(pa.int64(), INT64_EXTREMES),
                                               (pa.int32(), INT32_EXTREMES)],
                         ids=["int64", "int32"])
def test_integer_keys_with_extremes(tmp_path: Path, key_type: pa.DataType,
                                    extremes: list[int]) -> None:
    rng = random.Random(str(key_type))
    schema = sd.Schema(row_keys=[("key", key_type)], sort_keys=[("ts", pa.int64())],
                       values=[("value", pa.string())])
    table = new_table(tmp_path, schema, split_points=[-1000, 0, 1000])
    pool = extremes + [rng.randint(-2000, 2000) for _ in range(60)]
    ref = Reference(schema)
    for _ in range(3):
        batch = random_batch(rng, schema, 600, {"key": pool, "ts": INT64_EXTREMES})
        table.ingest(batch)
        ref.add(batch)
    check_queries(table, ref, rng, pool)
    lo, hi = extremes[0], extremes[-1]
    for r in (RefRange(lo, hi, True, True), RefRange(lo, hi, False, False),
              RefRange(None, lo, True, True), RefRange(hi, None, True, True),
              RefRange(hi, None, False, True)):
        assert_matches(table.query(ranges=[r.to_sediment()]), ref, ranges=[r])
    assert_matches(table.query(keys=[lo, hi]), ref, keys=[lo, hi])
    assert table.query(keys=[lo, hi]).num_rows == sum(
        1 for r in ref.rows if r["key"] in (lo, hi)) > 0


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_timestamp_and_date_keys(tmp_path: Path, strategy: str) -> None:
    rng = random.Random(19)
    schema = sd.Schema(row_keys=[("at", pa.timestamp("us"))], sort_keys=[("day", pa.date32())],
                       values=[("value", pa.string())])
    t0 = datetime.datetime(2024, 1, 1)
    pool = [t0 + datetime.timedelta(seconds=rng.randint(-10**6, 10**6)) for _ in range(80)]
    pool += [datetime.datetime(1970, 1, 1), datetime.datetime(1, 1, 1),
             datetime.datetime(9999, 12, 31, 23, 59, 59, 999999)]
    days = [datetime.date(2024, 1, d) for d in range(1, 6)] + [datetime.date(1, 1, 1)]
    table = new_table(tmp_path, schema, split_points=[t0, t0 + datetime.timedelta(days=3)],
                      strategy=strategy)
    ref = Reference(schema)
    for _ in range(2):
        batch = random_batch(rng, schema, 500, {"at": pool, "day": days})
        table.ingest(batch)
        ref.add(batch)
    check_queries(table, ref, rng, pool, n_ranges=15)


# ---- multi-field row keys and prefixes -------------------------------------------------------
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_multi_field_row_keys_and_prefixes(tmp_path: Path, strategy: str) -> None:
    rng = random.Random(11)
    schema = sd.Schema(row_keys=[("k1", pa.string()), ("k2", pa.int64())],
                       sort_keys=[("ts", pa.int32())], values=[("value", pa.string())])
    splits = [("b", 0), ("c",), ("é", -(2**63))]
    table = new_table(tmp_path, schema, split_points=splits, strategy=strategy)
    k1_pool = ["", "a", "b", "bb", "c", "é", "😀"]
    k2_pool = [*INT64_EXTREMES, 5, 6]
    ref = Reference(schema)
    for _ in range(3):
        batch = random_batch(rng, schema, 700, {"k1": k1_pool, "k2": k2_pool,
                                               "ts": [0, 1, 2]})
        table.ingest(batch)
        ref.add(batch)
    full = [(a, b) for a in k1_pool for b in k2_pool]
    prefixes = [(a,) for a in k1_pool]
    # exact full keys and prefixes of the first field
    for keys in (rng.sample(full, 6), prefixes[:3], [("b",), ("b", 0), ("zz",)]):
        assert_matches(table.query(keys=keys), ref, keys=keys)
    assert_matches(table.query(keys=[("b",)]), ref, keys=[("b",)])
    assert table.query(keys=["b"]).num_rows == sum(r["k1"] == "b" for r in ref.rows) > 0
    # ranges with full keys, prefixes, and a mix
    ends = full + prefixes
    for _ in range(40):
        r = random_range(rng, ends)
        assert_matches(table.query(ranges=[r.to_sediment()]), ref, ranges=[r])
    prefix_range = RefRange(("b",), ("b",), True, True)
    assert_matches(table.query(ranges=[prefix_range.to_sediment()]), ref,
                   ranges=[prefix_range])
    for _ in range(5):
        rs = [random_range(rng, ends) for _ in range(4)]
        assert_matches(table.query(ranges=[r.to_sediment() for r in rs]), ref, ranges=rs)


# ---- versions, columns, scan -----------------------------------------------------------------
def test_versioned_queries(tmp_path: Path) -> None:
    rng = random.Random(3)
    schema = sd.Schema(row_keys=[("key", pa.string())], sort_keys=[("ts", pa.int64())],
                       values=[("value", pa.string())])
    table = new_table(tmp_path, schema, split_points=["c"])
    pool = string_key_pool(rng, 30)
    ref = Reference(schema)
    versions = [table.version]
    for _ in range(4):
        batch = random_batch(rng, schema, 200, {"key": pool, "ts": list(range(5))})
        result = table.ingest(batch)
        ref.add(batch)
        assert result.version == table.version
        versions.append(result.version)
    assert versions == sorted(set(versions))
    r = RefRange("a", "d", True, False)
    for i, v in enumerate(versions):
        old = ref.upto(i)
        assert_matches(table.query(version=v), old)
        assert_matches(table.query(ranges=[r.to_sediment()], version=v), old, ranges=[r])
        keys = pool[:5]
        assert_matches(table.query(keys=keys, version=v), old, keys=keys)
        scanned = table.scan(version=v).read_all()
        assert result_rows(scanned, old.key_names) == old.query()
    assert table.query(version=versions[0]).num_rows == 0


def test_columns_subset(tmp_path: Path) -> None:
    rng = random.Random(5)
    schema = sd.Schema(row_keys=[("key", pa.string())], sort_keys=[("ts", pa.int64())],
                       values=[("value", pa.string()), ("n", pa.int64())])
    table = new_table(tmp_path, schema, split_points=["c"])
    pool = string_key_pool(rng, 20)
    ref = Reference(schema)
    batch = random_batch(rng, schema, 500, {"key": pool, "ts": [1, 2, 3]})
    table.ingest(batch)
    ref.add(batch)
    r = [RefRange("b", None, False, False)]
    for cols in (["value"], ["n", "key"], ["ts", "value"], ["key"], ["key", "ts", "n", "value"]):
        got = table.query(columns=cols)
        assert got.schema.names == cols
        assert_matches(got, ref, columns=cols)
        got = table.query(ranges=[x.to_sediment() for x in r], columns=cols)
        assert_matches(got, ref, ranges=r, columns=cols)
        scanned = table.scan(ranges=[x.to_sediment() for x in r], columns=cols)
        assert scanned.schema.names == cols
        assert_matches(scanned.read_all(), ref, ranges=r, columns=cols)
    with pytest.raises(QueryError, match="nope"):
        table.query(columns=["key", "nope"])
    # a column asked twice would answer two columns of one name (ingest refuses such tables)
    for read in (table.query, table.scan, table.prepare):
        with pytest.raises(QueryError, match=re.escape(
                f"table {table.name}: column 'value' is asked for twice "
                "(columns=['value', 'key', 'value'])")):
            read(columns=["value", "key", "value"])


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_scan_streams_what_query_returns(tmp_path: Path, strategy: str) -> None:
    rng = random.Random(13)
    schema = sd.Schema(row_keys=[("key", pa.string())], sort_keys=[("ts", pa.int64())],
                       values=[("value", pa.string())])
    table = new_table(tmp_path, schema, split_points=["b", "d"], strategy=strategy)
    pool = string_key_pool(rng, 40)
    ref = Reference(schema)
    for _ in range(4):  # several files per leaf: scan merges them
        batch = random_batch(rng, schema, 400, {"key": pool, "ts": list(range(10))})
        table.ingest(batch)
        ref.add(batch)
    for rs in (None, [RefRange("a", "c", True, True)],
               [RefRange("b", "c", False, False), RefRange(None, "a", True, True)]):
        sranges = None if rs is None else [r.to_sediment() for r in rs]
        reader = table.scan(ranges=sranges)
        assert isinstance(reader, pa.RecordBatchReader)
        batches = list(reader)
        streamed = pa.Table.from_batches(batches, schema=reader.schema)
        queried = table.query(ranges=sranges)
        assert_key_order(streamed, ref.key_names)
        assert result_rows(streamed, ref.key_names) == result_rows(queried, ref.key_names)
        assert_matches(streamed, ref, ranges=rs)
        assert all(b.num_rows <= 4 * 128 * 4 for b in batches)


def test_empty_table_and_bad_queries(tmp_path: Path) -> None:
    schema = sd.Schema(row_keys=[("key", pa.string()), ("n", pa.int64())],
                       values=[("value", pa.string())])
    table = new_table(tmp_path, schema, split_points=[("m", 0)])
    empty = table.query()
    assert empty.num_rows == 0
    assert empty.schema.names == ["key", "n", "value"]
    assert table.query(keys=[("a", 1)]).num_rows == 0
    assert table.scan().read_all().num_rows == 0
    with pytest.raises(QueryError):
        table.query(keys=[1])  # wrong type for a string field
    with pytest.raises(QueryError):
        table.query(keys=[("a", 1, 2)])  # too many fields
    with pytest.raises(QueryError):
        table.query(keys=[("a", "b")])
    with pytest.raises(QueryError):
        table.query(ranges=[sd.Range(5, None)])
    with pytest.raises(QueryError):
        table.query(ranges=["a"])
    with pytest.raises(QueryError):
        table.query(keys=[("a", 2**63)])  # out of int64 range
    with pytest.raises(QueryError, match="list of row keys"):
        table.query(keys="abc")  # not three one-letter keys
    with pytest.raises(QueryError, match="version"):
        table.query(version=table.version + 5)


def test_many_ranges_in_one_query(tmp_path: Path) -> None:
    rng = random.Random(23)
    schema = sd.Schema(row_keys=[("key", pa.string())], sort_keys=[("ts", pa.int64())],
                       values=[("value", pa.string())])
    table = new_table(tmp_path, schema, split_points=["b", "d", "é"])
    pool = string_key_pool(rng, 100)
    ref = Reference(schema)
    batch = random_batch(rng, schema, 3000, {"key": pool, "ts": list(range(4))})
    table.ingest(batch)
    ref.add(batch)
    ranges = [random_range(rng, pool) for _ in range(80)]
    keys = rng.sample(pool, 60)
    got = table.query(keys=keys, ranges=[r.to_sediment() for r in ranges])
    assert_matches(got, ref, keys=keys, ranges=ranges)
    narrow = [RefRange(k, k, True, True) for k in keys] * 2  # each range twice
    got = table.query(ranges=[r.to_sediment() for r in narrow])
    assert_matches(got, ref, ranges=narrow)
    assert got.num_rows == len(ref.query(keys=keys))


def test_query_plan_prunes_leaves(tmp_path: Path) -> None:
    schema = sd.Schema(row_keys=[("key", pa.string())], values=[("v", pa.int64())])
    table = new_table(tmp_path, schema, split_points=["b", "c", "d"])
    table.ingest(pa.table({"key": ["a", "b", "c", "d", "e"], "v": [1, 2, 3, 4, 5]}))
    assert len(table.plan().subqueries) == 4
    assert len(table.plan(keys=["c"]).subqueries) == 1
    assert len(table.plan(ranges=[sd.Range("b", "c")]).subqueries) == 1
    assert len(table.plan(ranges=[sd.Range("b", "c", end_inclusive=True)]).subqueries) == 2
    assert len(table.plan(ranges=[sd.Range(None, "b")]).subqueries) == 1
    assert table.query(ranges=[sd.Range("b", "c", end_inclusive=True)])["v"].to_pylist() == [2, 3]


# ---- on every store kind (local folder and S3) ------------------------------------------------
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_ingest_and_query_on_store(store_uri: tuple[str, dict[str, Any]], strategy: str) -> None:
    uri, options = store_uri
    rng = random.Random(17)
    schema = sd.Schema(row_keys=[("key", pa.string())], sort_keys=[("ts", pa.int64())],
                       values=[("value", pa.string())])
    table = new_table(uri, schema, split_points=["c", "😀"], strategy=strategy,
                      options=options)
    pool = string_key_pool(rng, 30)
    ref = Reference(schema)
    for _ in range(2):
        batch = random_batch(rng, schema, 500, {"key": pool, "ts": INT64_EXTREMES})
        table.ingest(batch)
        ref.add(batch)
    check_queries(table, ref, rng, pool, n_ranges=8)
    assert_matches(table.scan().read_all(), ref)
    # a fresh handle on the same store sees the same data
    again = sd.Store.open(uri, **options).table(table.name)
    assert_matches(again.query(keys=pool[:4]), ref, keys=pool[:4])


# ---- property-based ---------------------------------------------------------------------------
KEY_TEXT = st.lists(st.sampled_from(["a", "b", "é", "e\u0301", "😀", "\x00", "z", "\uffff"]),
                    max_size=3).map("".join)


@st.composite
def ranges_strategy(draw: st.DrawFn) -> RefRange:
    return RefRange(draw(st.none() | KEY_TEXT), draw(st.none() | KEY_TEXT),
                    draw(st.booleans()), draw(st.booleans()))


@pytest.fixture(scope="module")
def hyp_store(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("hyp"))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    batches=st.lists(st.lists(st.tuples(KEY_TEXT, st.integers(-(2**63), 2**63 - 1),
                                        st.none() | st.text(max_size=3)),
                              min_size=1, max_size=60), min_size=1, max_size=3),
    splits=st.lists(KEY_TEXT.filter(bool), max_size=3, unique=True).map(sorted),
    strategy=st.sampled_from(STRATEGIES),
    ranges=st.lists(ranges_strategy(), min_size=1, max_size=4),
    keys=st.lists(KEY_TEXT, max_size=4),
)
def test_random_queries_match_reference(hyp_store: str, batches: list[list[tuple[Any, ...]]],
                                        splits: list[str], strategy: str,
                                        ranges: list[RefRange], keys: list[str]) -> None:
    schema = sd.Schema(row_keys=[("key", pa.string())], sort_keys=[("ts", pa.int64())],
                       values=[("value", pa.string())])
    table = new_table(hyp_store, schema, split_points=splits or None, strategy=strategy)
    ref = Reference(schema)
    for rows in batches:
        data = pa.table({"key": [r[0] for r in rows], "ts": [r[1] for r in rows],
                         "value": [r[2] for r in rows]}, schema=ref.arrow)
        table.ingest(data)
        ref.add(data)
    assert_matches(table.query(), ref)
    sranges = [r.to_sediment() for r in ranges]
    assert_matches(table.query(ranges=sranges), ref, ranges=ranges)
    assert_matches(table.scan(ranges=sranges).read_all(), ref, ranges=ranges)
    if keys:
        assert_matches(table.query(keys=keys), ref, keys=keys)
        assert_matches(table.query(keys=keys, ranges=sranges), ref, keys=keys, ranges=ranges)
    table.store.drop_table(table.name)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rows=st.lists(st.tuples(st.sampled_from(["a", "b", "😀", ""]),
                            st.integers(-(2**63), 2**63 - 1), st.integers(0, 3)),
                  min_size=1, max_size=80),
    bounds=st.lists(st.tuples(
        st.none() | st.tuples(st.sampled_from(["a", "b", "c", "😀", ""])) |
        st.tuples(st.sampled_from(["a", "b", "😀", ""]), st.integers(-(2**63), 2**63 - 1)),
        st.none() | st.tuples(st.sampled_from(["a", "b", "c", "😀", ""])) |
        st.tuples(st.sampled_from(["a", "b", "😀", ""]), st.integers(-(2**63), 2**63 - 1)),
        st.booleans(), st.booleans()), min_size=1, max_size=3),
)
def test_random_multi_field_ranges(hyp_store: str, rows: list[tuple[Any, ...]],
                                   bounds: list[tuple[Any, ...]]) -> None:
    schema = sd.Schema(row_keys=[("k1", pa.string()), ("k2", pa.int64())],
                       sort_keys=[("s", pa.int32())])
    table = new_table(hyp_store, schema, split_points=[("b",), ("b", 0)])
    ref = Reference(schema)
    data = pa.table({"k1": [r[0] for r in rows], "k2": [r[1] for r in rows],
                     "s": [r[2] for r in rows]}, schema=ref.arrow)
    table.ingest(data)
    ref.add(data)
    ranges = [RefRange(*b) for b in bounds]
    assert_matches(table.query(ranges=[r.to_sediment() for r in ranges]), ref, ranges=ranges)
    table.store.drop_table(table.name)


def test_row_group_runs_and_region_containment() -> None:
    from sediment.core.model import Region
    from sediment.query.footers import FileFooter
    from sediment.query.readplan import inside as _inside
    from sediment.query.readplan import runs as _runs

    assert list(_runs([0, 1, 2, 5, 6, 9], 2)) == [[0, 1], [2], [5, 6], [9]]
    assert list(_runs([], 16)) == []
    footer = FileFooter(None, ["b", "d", "f"], ["c", "e", "g"])  # type: ignore[arg-type]
    assert _inside(footer, 0, 2, Region(("a",), ("h",)))
    assert _inside(footer, 0, 2, Region(None, None))
    # equal on the first field is not enough: a longer key could still be outside
    assert not _inside(footer, 0, 2, Region(("b",), ("h",)))
    assert not _inside(footer, 0, 2, Region(("a",), ("g",)))
    assert _inside(footer, 1, 1, Region(("c",), ("f",)))
    assert not _inside(FileFooter(None, [None], [None]), 0, 0,  # type: ignore[arg-type]
                       Region(None, None))
