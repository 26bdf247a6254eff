"""Partition splitting: median split keys, multi-field keys, unsplittable leaves, and the
split being conditional on the partition still being a leaf."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import sediment as sd
from helpers import make_table, rows, run_together
from reference import Reference, assert_matches, order_key
from sediment.core.keys import Key
from sediment.core.model import Partition, Region
from sediment.core.state import ROOT_PARTITION_ID
from sediment.core.transactions import SplitPartition
from sediment.errors import TransactionInvalidError
from sediment.maintenance.splitting import SplitResult, plan_splits
from sediment.partitioning.lexicographic import choose_split_key
from sediment.workload import benchmark_schema
from support.internals import build_sample

SCHEMA = benchmark_schema()
MULTI = sd.Schema(row_keys=[("a", pa.string()), ("b", pa.int64())],
                  sort_keys=[("ts", pa.int64())], values=[("v", pa.string())])


def one_key_rows(key: str, n: int, start: int = 0) -> pa.Table:
    return pa.table({"key": [key] * n, "timestamp": list(range(start, start + n)),
                     "value": [f"v{i}" for i in range(n)], "nullable_value": [None] * n},
                    schema=SCHEMA.to_arrow())


def multi_rows(rng: random.Random, n: int) -> pa.Table:
    return pa.table({"a": [rng.choice(["p", "q", "r"]) for _ in range(n)],
                     "b": [rng.randint(-1000, 1000) for _ in range(n)],
                     "ts": [rng.randint(0, 10) for _ in range(n)],
                     "v": [str(rng.random()) for _ in range(n)]}, schema=MULTI.to_arrow())


def in_region(key: Key, region: Region) -> bool:
    k = order_key(key)
    return (region.min is None or k >= order_key(region.min)) and \
        (region.max is None or k < order_key(region.max))


def count_in(ref: Reference, region: Region) -> int:
    return sum(in_region(ref.row_key(r), region) for r in ref.rows)


def settle(table: sd.Table) -> None:
    while table.compact().did_work:
        pass


def leaves(table: sd.Table) -> list[Partition]:
    return [p for p in table.partitions() if p.is_leaf]


# ---- choosing the split key (pure) -------------------------------------------------------------
def sample_of(keys: list[str]) -> pa.Table:
    t = pa.table({"key": sorted(keys)})
    return build_sample(t, 1000)


def test_choose_split_key_is_the_median() -> None:
    keys = [f"k{i:04d}" for i in range(1000)]
    leaf = Partition(ROOT_PARTITION_ID, None, Region())
    key = choose_split_key(leaf, [sample_of(keys[::2]), sample_of(keys[1::2])], ["key"])
    assert key is not None and ("k0490",) <= key <= ("k0510",)


def test_choose_split_key_needs_records_on_both_sides() -> None:
    root = Partition(ROOT_PARTITION_ID, None, Region())
    assert choose_split_key(root, [sample_of(["same"] * 50)], ["key"]) is None
    assert choose_split_key(root, [], ["key"]) is None
    below = Partition("p", ROOT_PARTITION_ID, Region(None, ("m",)))
    assert choose_split_key(below, [sample_of(["a"] * 50)], ["key"]) is None
    above = Partition("p", ROOT_PARTITION_ID, Region(("m",), None))
    assert choose_split_key(above, [sample_of(["m"] * 50)], ["key"]) is None
    # mostly one key: the next key up splits it
    assert choose_split_key(root, [sample_of(["a"] * 90 + ["b"] * 10)], ["key"]) == ("b",)
    assert choose_split_key(above, [sample_of(["m"] * 90 + ["n"] * 5)], ["key"]) == ("n",)
    # keys of a shared sample outside the leaf are ignored
    mid = Partition("p", ROOT_PARTITION_ID, Region(("c",), ("e",)))
    assert choose_split_key(mid, [sample_of(["a"] * 40 + ["c"] * 5 + ["z"] * 40)],
                            ["key"]) is None
    key = choose_split_key(mid, [sample_of(["a"] * 40 + ["c", "d", "d"] + ["z"] * 40)],
                           ["key"])
    assert key == ("d",)


# ---- splitting tables ------------------------------------------------------------------------
def test_split_at_median_balances_children(store_uri: tuple[str, dict[str, Any]]) -> None:
    uri, options = store_uri
    table = make_table(uri, options=options, **{"partition.split.threshold": 5000})
    ref = Reference(SCHEMA)
    for i in range(3):
        data = rows(3000, seed=i)
        table.ingest(data)
        ref.add(data)
    result = table.split()
    assert isinstance(result, SplitResult) and result.splits == 1 and not result.unsplittable
    root = next(p for p in table.partitions() if p.id == ROOT_PARTITION_ID)
    assert not root.is_leaf and len(root.children) == 2
    kids = [p for p in table.partitions() if p.parent_id == ROOT_PARTITION_ID]
    counts = [count_in(ref, p.region) for p in kids]
    assert sum(counts) == 9000
    assert min(counts) / max(counts) >= 0.8, counts
    assert_matches(table.query(), ref)  # references still in the parent: nothing lost
    table.set_properties({"compaction.ratio": 0})  # merge every leaf's files: exact counts
    settle(table)
    for p in kids:
        recs = [r for r in table.files() if r.partition_id == p.id]
        assert sum(r.records for r in recs) == count_in(ref, p.region)
    assert_matches(table.query(), ref)
    assert_matches(table.query(ranges=[sd.Range("h", "t")]), ref, ranges=[sd.Range("h", "t")])


def test_split_below_threshold_does_nothing(tmp_path: Path) -> None:
    table = make_table(tmp_path, **{"partition.split.threshold": 1000})
    table.ingest(rows(1000, seed=1))
    r = table.split()
    assert r.splits == 0 and r.unsplittable == () and not r.did_work
    assert len(table.partitions()) == 1


def test_repeated_splits_until_under_threshold(tmp_path: Path) -> None:
    table = make_table(tmp_path, **{"partition.split.threshold": 1500,
                                    "compaction.strategy": "basic",
                                    "compaction.batch_size": 2})
    ref = Reference(SCHEMA)
    # Many files: a leaf splits on known (exact) counts only, so each leaf needs files of its
    # own from compaction, which merges at least two references.
    for i in range(8):
        data = rows(1000, seed=10 + i)
        table.ingest(data)
        ref.add(data)
    table.maintain()
    ls = leaves(table)
    assert len(ls) >= 6
    for p in ls:
        n = count_in(ref, p.region)
        assert 0 < n <= 1500
        assert sum(r.records for r in table.files() if r.partition_id == p.id) == n
    # siblings are balanced
    for parent in (p for p in table.partitions() if not p.is_leaf):
        kids = [count_in(ref, table.state().partitions[c].region) for c in parent.children]
        assert min(kids) / max(kids) >= 0.8, kids
    assert_matches(table.query(), ref)


def test_multi_field_row_keys_split_lexicographically(tmp_path: Path) -> None:
    table = make_table(tmp_path, schema=MULTI, **{"partition.split.threshold": 1000})
    rng = random.Random(5)
    ref = Reference(MULTI)
    for _ in range(3):
        data = multi_rows(rng, 600)
        table.ingest(data)
        ref.add(data)
    assert table.split().splits == 1
    root = table.state().partitions[ROOT_PARTITION_ID]
    key = root.split_key
    assert key is not None and len(key) == 2
    assert isinstance(key[0], str) and isinstance(key[1], int)
    left, right = (table.state().partitions[c] for c in root.children)
    assert left.region == Region(None, key) and right.region == Region(key, None)
    n_left = sum(1 for r in ref.rows if (r["a"], r["b"]) < key)
    n_right = len(ref.rows) - n_left
    assert min(n_left, n_right) / max(n_left, n_right) >= 0.8
    settle(table)
    for p, n in ((left, n_left), (right, n_right)):
        recs = [r for r in table.files() if r.partition_id == p.id]
        assert sum(r.records for r in recs) == n
    assert_matches(table.query(), ref)
    assert_matches(table.query(keys=[("q",)]), ref, keys=[("q",)])
    assert_matches(table.query(keys=[key]), ref, keys=[key])


def test_leaf_of_one_row_key_is_unsplittable(store_uri: tuple[str, dict[str, Any]]) -> None:
    uri, options = store_uri
    table = make_table(uri, options=options, **{"partition.split.threshold": 10})
    ref = Reference(SCHEMA)
    for i in range(2):
        data = one_key_rows("same", 100, start=i * 100)
        table.ingest(data)
        ref.add(data)
    version = table.version
    r = table.split()
    assert r.splits == 0 and r.unsplittable == (ROOT_PARTITION_ID,) and not r.did_work
    assert len(table.partitions()) == 1 and table.version == version
    events = list(table._handle.status.events("split"))
    assert [e.status for e in events] == ["unsplittable"]
    assert events[0].details["records"] == 200 and events[0].details["reason"]
    # maintain settles rather than looping
    m = table.maintain()
    assert m.splits == 0 and m.passes <= 3
    assert_matches(table.query(), ref)


def test_unsplittable_leaf_below_a_split_point(tmp_path: Path) -> None:
    table = make_table(tmp_path, split_points=["m"], **{"partition.split.threshold": 10})
    ref = Reference(SCHEMA)
    for key in ("m", "a"):  # each leaf gets one row key only (right: its own min)
        data = one_key_rows(key, 50)
        table.ingest(data)
        ref.add(data)
    r = table.split()
    assert r.splits == 0 and set(r.unsplittable) == {p.id for p in leaves(table)}
    assert len(table.partitions()) == 3
    # one more key in the left leaf makes it splittable, between the two keys
    data = one_key_rows("c", 50)
    table.ingest(data)
    ref.add(data)
    r = table.split()
    assert r.splits == 1 and len(r.unsplittable) == 1
    new = [p for p in leaves(table) if p.region.max == ("m",)]
    assert [p.region.min for p in new] == [("c",)]
    settle(table)
    assert_matches(table.query(), ref)


def test_split_is_conditional_on_still_being_a_leaf(tmp_path: Path) -> None:
    table = make_table(tmp_path, **{"partition.split.threshold": 100})
    table.ingest(rows(500, seed=3))
    other = sd.Store.open(str(tmp_path)).table(table.name)
    other._handle.states.head()  # its cached head still shows the root as a leaf
    table._handle.states.commit(SplitPartition(ROOT_PARTITION_ID, ("m",), "l1", "r1"))
    with pytest.raises(TransactionInvalidError, match="no longer a leaf"):
        other._handle.states.commit(SplitPartition(ROOT_PARTITION_ID, ("g",), "l2", "r2"))
    assert {p.id for p in table.partitions()} == {ROOT_PARTITION_ID, "l1", "r1"}
    # a planned decision that lost the race is not applied either
    state = other._handle.states.head()
    assert plan_splits(state, other.properties, other._handle.samples.sample) == []


def test_concurrent_splits_of_one_leaf(tmp_path: Path) -> None:
    table = make_table(tmp_path, **{"partition.split.threshold": 100})
    ref = Reference(SCHEMA)
    data = rows(1000, seed=4)
    table.ingest(data)
    ref.add(data)
    tables = [sd.Store.open(str(tmp_path)).table(table.name) for _ in range(3)]
    results: list[SplitResult] = run_together(tables, lambda t: t.split())
    assert sum(r.splits for r in results) == 1
    assert len(table.partitions()) == 3
    assert_matches(table.query(), ref)


def test_split_events(tmp_path: Path) -> None:
    table = make_table(tmp_path, **{"partition.split.threshold": 100})
    table.ingest(rows(400, seed=6))
    table.split()
    (ev,) = list(table._handle.status.events("split"))
    assert ev.status == "committed" and ev.partition_id == ROOT_PARTITION_ID
    kids = set(table.state().partitions[ROOT_PARTITION_ID].children)
    assert {ev.details["left"], ev.details["right"]} == kids
    assert tuple(ev.details["split_key"]) == table.state().partitions[ROOT_PARTITION_ID] \
        .split_key
    rows_ = table._handle.status.jobs("split")
    assert len(rows_) == 1 and rows_[0]["status"] == "committed"


def test_offline_table_is_not_split(tmp_path: Path) -> None:
    table = make_table(tmp_path, **{"partition.split.threshold": 100})
    table.ingest(rows(400, seed=7))
    table.set_online(False)
    assert table.split().splits == 0
    assert len(table.partitions()) == 1


@pytest.mark.parametrize("kind", ["int32", "int64", "binary"])
def test_split_other_key_types(tmp_path: Path, kind: str) -> None:
    types = {"int32": pa.int32(), "int64": pa.int64(), "binary": pa.binary()}
    schema = sd.Schema(row_keys=[("k", types[kind])], values=[("v", pa.int64())])
    table = make_table(tmp_path, schema=schema, **{"partition.split.threshold": 500,
                                            "compaction.strategy": "basic",
                                            "compaction.batch_size": 2})
    rng = random.Random(11)
    values = list(range(-600, 600))
    rng.shuffle(values)
    keys: list[Any] = values if kind != "binary" else \
        [(v + 1000).to_bytes(2, "big") for v in values]
    ref = Reference(schema)
    for part in (keys[:600], keys[600:]):
        data = pa.table({"k": pa.array(part, types[kind]),
                         "v": pa.array(range(len(part)), pa.int64())})
        table.ingest(data)
        ref.add(data)
    assert table.split().splits == 1
    key = table.state().partitions[ROOT_PARTITION_ID].split_key
    assert key is not None and type(key[0]) is type(keys[0])
    below = sum(1 for k in keys if (k,) < key)
    assert 0.4 <= below / len(keys) <= 0.6
    settle(table)
    assert_matches(table.query(), ref)
