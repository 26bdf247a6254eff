"""Splitting, compaction and iterator semantics: what a Sleeper user relies on.

Each section pins one point against what Sleeper's own code and tests do (gchq/sleeper:
``FindPartitionSplitPoint``/``SplitPartitionTest``, ``PartitionSplitCheck``,
``BasicCompactionStrategy``, ``AgeOffIterator``, the transaction-log state store).
"""

from __future__ import annotations

import functools
import json
import random
import time
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import helpers
import sediment as sd
from sediment.compaction.runner import push_down_references
from sediment.compaction.strategy import plan_compaction_jobs
from sediment.core.model import FileReference, Partition, Region
from sediment.core.state import ROOT_PARTITION_ID, TableState
from sediment.maintenance.splitting import plan_splits
from sediment.partitioning.lexicographic import choose_split_key
from sediment.properties import defaults
from support.internals import build_sample

INT_SCHEMA = sd.Schema(row_keys=[("key", pa.int64())], values=[("value", pa.string())])


make_table = functools.partial(helpers.make_table, schema=INT_SCHEMA)


def int_rows(keys: list[int]) -> pa.Table:
    return pa.table({"key": pa.array(keys, pa.int64()),
                     "value": [f"v{k}" for k in keys]}, schema=INT_SCHEMA.to_arrow())


def leaves(table: sd.Table) -> list[Partition]:
    return [p for p in table.partitions() if p.is_leaf]


# ---- 1. the split point ------------------------------------------------------------------------
@pytest.mark.parametrize("keys,split_key", [(range(1000), 500), (range(1, 101), 51)])
def test_split_key_is_the_first_key_of_the_upper_half(tmp_path: Path, keys: range,
                                                      split_key: int) -> None:
    """As in Sleeper's SplitPartitionTest: keys 0..999 split at 500, each child holding 500."""
    table = make_table(tmp_path, **{"partition.split.threshold": len(keys) - 1})
    shuffled = list(keys)
    random.Random(1).shuffle(shuffled)
    table.ingest(int_rows(shuffled))
    assert table.split().splits == 1
    root = next(p for p in table.partitions() if p.id == ROOT_PARTITION_ID)
    assert root.split_key == (split_key,)
    by_side = {p.region.min is None: p for p in leaves(table)}
    left, right = by_side[True], by_side[False]
    n = len(keys)
    assert sum(1 for k in keys if k < split_key) == n // 2
    assert table.query(ranges=[sd.Range(None, split_key)]).num_rows == n // 2
    assert left.region.max == (split_key,)
    assert right.region.min == (split_key,)


KEY_TYPES: dict[str, tuple[pa.DataType, st.SearchStrategy[Any]]] = {
    "int32": (pa.int32(), st.integers(-(2**31), 2**31 - 1)),
    "int64": (pa.int64(), st.integers(-(2**63), 2**63 - 1)),
    "string": (pa.string(), st.text(max_size=6)),
    "binary": (pa.binary(), st.binary(max_size=6)),
}


def _check_median(table: pa.Table, names: list[str], sample_size: int, files: int = 1) -> None:
    """``choose_split_key`` against a pyarrow reference, the records dealt over ``files`` files.

    For distinct keys and exact samples the split key is the key at sorted position
    floor(n/2) = p and the left child holds exactly p records. Otherwise the left child holds at
    most p records and the split key's run reaches to within the sample steps of p (one step
    for one file; for several, a row's estimated position is off by at most the sum of their
    steps). When the median is the smallest key, the split key is the next sampled key up.
    """
    order = [(n, "ascending") for n in names]
    n = table.num_rows
    deal = [i % files for i in range(n)]
    random.Random(n).shuffle(deal)
    parts = [table.filter(pa.array([d == f for d in deal])).sort_by(order) for f in range(files)]
    parts = [t for t in parts if t.num_rows] or [table.slice(0, 0)]
    samples = [build_sample(t, sample_size) for t in parts]
    steps = [max(1, -(-t.num_rows // sample_size)) for t in parts]
    slack = steps[0] if len(parts) == 1 else 2 * sum(steps)
    root = Partition(ROOT_PARTITION_ID, None, Region())
    key = choose_split_key(root, samples, names)
    data = table.sort_by(order)
    keys = list(zip(*(data.column(c).to_pylist() for c in names), strict=True))
    p = n // 2
    if key is None:
        sampled = {k for s in samples
                   for k in zip(*(s.column(c).to_pylist() for c in names), strict=True)}
        assert len(sampled) <= 1, "samples with two keys must give a split key"
        return
    below = sum(1 for k in keys if k < key)  # the left child's records
    upto = sum(1 for k in keys if k <= key)
    smallest = sum(1 for k in keys if k == keys[0])
    assert keys[0] < key <= keys[-1]  # both children get records
    if max(steps) == 1 and len(set(keys)) == n:
        assert key == keys[p] and below == p
    elif not (below <= p and upto > p - slack):  # the median is the smallest key
        assert smallest > p - slack and smallest <= below < smallest + sum(steps)


@pytest.mark.parametrize("kind", sorted(KEY_TYPES))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_median_property_one_field(kind: str, data: st.DataObject) -> None:
    arrow_type, values = KEY_TYPES[kind]
    distinct = data.draw(st.booleans(), label="distinct")
    keys = data.draw(st.lists(values, min_size=1, max_size=300, unique=distinct), label="keys")
    size = data.draw(st.sampled_from([1000, 64, 7]), label="sample size")
    files = data.draw(st.integers(1, 3), label="files")
    _check_median(pa.table({"key": pa.array(keys, arrow_type)}), ["key"], size, files)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(keys=st.lists(st.tuples(st.integers(-3, 3), st.text(max_size=3)), min_size=1,
                     max_size=300),
       distinct=st.booleans(), size=st.sampled_from([1000, 64, 7]), files=st.integers(1, 3))
def test_median_property_two_fields(keys: list[tuple[int, str]], distinct: bool,
                                    size: int, files: int) -> None:
    if distinct:
        keys = list(dict.fromkeys(keys))
    t = pa.table({"a": pa.array([k[0] for k in keys], pa.int32()),
                  "b": pa.array([k[1] for k in keys], pa.string())})
    _check_median(t, ["a", "b"], size, files)


def test_median_of_distinct_keys_is_exact_for_every_type() -> None:
    """The brief's examples, for each key type, without hypothesis's luck."""
    for n in (2, 3, 100, 999, 1000):
        for arrow_type, make in ((pa.int32(), int), (pa.int64(), int),
                                 (pa.string(), lambda i: f"k{i:05d}"),
                                 (pa.binary(), lambda i: i.to_bytes(2, "big"))):
            values = [make(i) for i in range(n)]
            t = pa.table({"key": pa.array(values, arrow_type)})
            key = choose_split_key(Partition(ROOT_PARTITION_ID, None, Region()),
                                   [build_sample(t, 2000)], ["key"])
            assert key == (values[n // 2],), (arrow_type, n)
            assert pc.sum(pc.less(t.column("key"), pa.scalar(key[0], arrow_type))).as_py() \
                == n // 2


# ---- 2. what counts toward the split threshold -------------------------------------------------
@settings(max_examples=100, deadline=None)
@given(refs=st.lists(st.tuples(st.integers(0, 50), st.booleans()), max_size=8),
       threshold=st.integers(1, 200))
def test_only_known_records_count_toward_the_threshold(refs: list[tuple[int, bool]],
                                                       threshold: int) -> None:
    """A leaf splits when it is known to hold MORE THAN ``partition.split.threshold`` records
    (strictly more, as Sleeper's property text says; its code compares with >=): only exact
    references count. Estimated counts (``approximate`` references, to files spanning several
    leaves) never push a leaf over the threshold, however large they are."""
    state = TableState("t")
    state.schema = INT_SCHEMA
    state.partitions = {ROOT_PARTITION_ID: Partition(ROOT_PARTITION_ID, None, Region())}
    for i, (records, approximate) in enumerate(refs):
        state.put_reference(FileReference(f"f{i}", ROOT_PARTITION_ID, records, approximate))
    sample = build_sample(pa.table({"key": pa.array(range(100), pa.int64())}), 1000)
    planned = plan_splits(state, {"partition.split.threshold": threshold}, lambda f: sample)
    known = sum(n for n, approximate in refs if not approximate)
    assert bool(planned) == (known > threshold)
    if planned:
        assert planned[0].records == known


def test_estimated_references_do_not_split_a_leaf(tmp_path: Path) -> None:
    table = make_table(tmp_path, **{"partition.split.threshold": 999})
    table.ingest(int_rows(list(range(1000))))
    assert table.split().splits == 1
    push_down_references(table._handle)  # the root file: referenced, estimated, by both leaves
    refs = table.files()
    assert len(refs) == 2 and all(r.approximate and r.records == 500 for r in refs)
    table.set_properties({"partition.split.threshold": 400})
    assert table.split().splits == 0  # 500 estimated records each: not known to be over
    assert len(leaves(table)) == 2
    table.ingest(int_rows(list(range(1000, 1400))))  # 400 known records in the right leaf
    assert table.split().splits == 0  # exactly the threshold: not more than it
    table.ingest(int_rows([1400]))
    assert table.split().splits == 1
    assert len(leaves(table)) == 3


# ---- 3. the basic strategy's order -------------------------------------------------------------
def _leaf_state(refs: list[FileReference]) -> TableState:
    state = TableState("t")
    state.schema = INT_SCHEMA
    state.partitions = {ROOT_PARTITION_ID: Partition(ROOT_PARTITION_ID, None, Region())}
    for r in refs:
        state.put_reference(r)
    return state


@settings(max_examples=100, deadline=None)
@given(records=st.lists(st.integers(0, 5), max_size=20), batch=st.integers(2, 5),
       seed=st.integers(0, 2**32 - 1))
def test_basic_takes_batches_in_ascending_record_count(records: list[int], batch: int,
                                                       seed: int) -> None:
    """As Sleeper's BasicLeafStrategy: full batches of the files in ascending order of record
    count (ties by filename here, so the plan does not depend on the order references were
    added in nor on the random file names); a remainder short of a batch waits."""
    names = [uuid.UUID(int=random.Random(seed + i).getrandbits(128)).hex
             for i in range(len(records))]
    refs = [FileReference(f"data/{n}.parquet", ROOT_PARTITION_ID, r)
            for n, r in zip(names, records, strict=True)]
    props = {**defaults(), "compaction.strategy": "basic", "compaction.batch_size": batch}
    ids = iter(range(1000))
    jobs = plan_compaction_jobs(_leaf_state(refs), props, new_id=lambda: f"j{next(ids)}")
    expected = sorted(refs, key=lambda r: (r.records, r.filename))
    expected = expected[: len(expected) // batch * batch]
    assert [r for j in jobs for r in j.inputs] == expected
    assert all(len(j.inputs) == batch for j in jobs)
    shuffled = refs[:]
    random.Random(seed).shuffle(shuffled)
    ids = iter(range(1000))
    again = plan_compaction_jobs(_leaf_state(shuffled), props, new_id=lambda: f"j{next(ids)}")
    assert again == jobs


def test_basic_merges_the_smallest_files_first() -> None:
    refs = [FileReference(f"data/{n}.parquet", ROOT_PARTITION_ID, r)
            for n, r in (("a", 900), ("b", 10), ("c", 500), ("d", 20), ("e", 30))]
    props = {**defaults(), "compaction.strategy": "basic", "compaction.batch_size": 2}
    jobs = plan_compaction_jobs(_leaf_state(refs), props)
    assert [[r.records for r in j.inputs] for j in jobs] == [[10, 20], [30, 500]]


# ---- 4. age-off and nulls ----------------------------------------------------------------------
def test_age_off_drops_records_whose_field_is_null(tmp_path: Path) -> None:
    """Sleeper's AgeOffFilter keeps a row only when its value is present and young enough."""
    from sediment.iterators import AgeOff

    now_s = 1_700_000_000.0
    batch = pa.record_batch({"ts": pa.array([int(now_s * 1000), None, int(now_s * 1000) - 10**9],
                                            pa.int64()),
                             "at": pa.array([int(now_s), None, int(now_s) - 10**6],
                                            pa.timestamp("s"))})
    for field, unit in (("ts", "ms"), ("at", "s")):
        it = AgeOff(field, 3600, unit, now=lambda: now_s)
        out = pa.Table.from_batches(list(it.apply(iter([batch]))), schema=batch.schema)
        assert out.column(field).null_count == 0
        assert out.num_rows == 1
    schema = sd.Schema(row_keys=[("key", pa.int64())], values=[("ts", pa.int64())])
    table = helpers.make_table(tmp_path, schema=schema)
    now_ms = int(time.time() * 1000)
    table.ingest(pa.table({"key": pa.array([1, 2, 3], pa.int64()),
                           "ts": pa.array([now_ms, None, now_ms - 10**9], pa.int64())},
                          schema=schema.to_arrow()))
    got = table.query(iterators=[{"type": "age_off", "field": "ts", "ttl_seconds": 3600}])
    assert got.column("key").to_pylist() == [1]


# ---- 5. an aggregation configuration naming a field twice -------------------------------------
AGG_SCHEMA = sd.Schema(row_keys=[("key", pa.string())],
                       values=[("n", pa.int64()), ("m", pa.int64())])


@pytest.mark.parametrize("text", [
    '[{"type": "aggregate", "functions": {"n": "sum", "m": "max", "n": "max"}}]',
    '[{"type": "aggregate", "functions": {"n": "sum", "n": "sum"}}]',
])
def test_aggregation_naming_a_field_twice_is_refused(tmp_path: Path, text: str) -> None:
    """JSON keeps the last of two equal keys; the configuration is refused instead, naming the
    field, wherever it is given (table properties, at creation or later, or the Python API)."""
    from sediment.errors import PropertyError
    from sediment.iterators import Aggregate, iterators_from_property

    with pytest.raises(PropertyError, match="field 'n' is given more than one function"):
        iterators_from_property(text, AGG_SCHEMA)
    with pytest.raises(PropertyError, match="'n'"):
        iterators_from_property(text)  # checked without the schema too
    table = helpers.make_table(tmp_path, schema=AGG_SCHEMA)
    for prop in ("compaction.iterators", "query.iterators"):
        with pytest.raises(PropertyError, match="'n'"):
            table.set_properties({prop: text})
        assert table.properties[prop] == ""
    with pytest.raises(PropertyError, match="'n'"):
        helpers.make_table(tmp_path / "other", schema=AGG_SCHEMA,
                           **{"compaction.iterators": text})
    with pytest.raises(PropertyError, match="field 'n' is given more than one function"):
        Aggregate([("n", "sum"), ("n", "max")], AGG_SCHEMA)
    # once each is fine
    ok = '[{"type": "aggregate", "functions": {"n": "sum", "m": "max"}}]'
    assert len(iterators_from_property(ok, AGG_SCHEMA)) == 1


def test_iterator_config_giving_an_option_twice_is_refused() -> None:
    from sediment.errors import PropertyError
    from sediment.iterators import iterators_from_property

    text = '[{"type": "age_off", "field": "n", "ttl_seconds": 5, "field": "m"}]'
    with pytest.raises(PropertyError, match="'field' more than once"):
        iterators_from_property(text, AGG_SCHEMA)


# ---- 6. empty transactions ---------------------------------------------------------------------
def test_empty_transactions_commit_nothing(tmp_path: Path) -> None:
    """Adding, deleting, assigning or splitting nothing writes no log entry and returns the
    current state, as Sleeper's transaction-log store ignores an empty transaction."""
    from sediment.core.transactions import (
        AddFiles,
        AssignJobIds,
        DeleteFiles,
        SplitFileReferences,
    )

    table = make_table(tmp_path)
    table.ingest(int_rows([1, 2, 3]))
    v = table.version
    history = len(table.history())
    for txn in (AddFiles([]), DeleteFiles([]), AssignJobIds([]), SplitFileReferences([])):
        assert txn.is_empty()
        state = table._handle.states.commit(txn)
        assert state.version == v, txn
        # built from the head
        assert table._handle.states.commit(lambda head, t=txn: t).version == v
    assert table.version == v and len(table.history()) == history
    assert list(table._handle.states.log.read_after(v)) == []
    # a reopened table reads the same head
    again = sd.Store.open(str(tmp_path)).table(table.name)
    assert again.version == v
    assert table.query().num_rows == 3


# ---- 7. a compaction job's counts --------------------------------------------------------------
def test_job_rows_in_counts_records_inside_its_partition(tmp_path: Path) -> None:
    """Two leaves share a file from before the split: each job reads only its half of it, and
    rows_in - rows_out is exactly what the compaction iterators dropped."""
    table = make_table(tmp_path, **{"partition.split.threshold": 999, "compaction.ratio": 0})
    table.ingest(int_rows(list(range(1000))))
    assert table.split().splits == 1  # at 500
    table.ingest(int_rows(list(range(1000))))  # one more file per leaf (or one spanning both)
    table.set_properties({"compaction.iterators": json.dumps(
        [{"type": "filter", "field": "key", "op": ">=", "value": 100}])})  # drops 200 records
    result = table.compact()
    assert result.jobs_committed == 2
    assert result.rows_in == 2000  # 1000 per leaf, not the 1000-record files read whole
    assert result.rows_out == 1800
    assert result.rows_in - result.rows_out == 200
    per_job = [e.details for e in table.events("compaction") if e.status == "finished"]
    assert sorted((d["rows_in"], d["rows_out"]) for d in per_job) == [(1000, 800), (1000, 1000)]
    assert table.query().num_rows == 1800


# ---- 8. edge cases a user hits first -----------------------------------------------------------
def test_restore_of_the_head_is_a_no_op(tmp_path: Path) -> None:
    table = make_table(tmp_path)
    table.ingest(int_rows([1, 2]))
    table.tag("v1")
    v = table.version
    history = len(table.history())
    assert table.restore("v1") == v  # the README's example, right after tagging
    assert table.restore(v) == v
    assert table.version == v and len(table.history()) == history
    table.ingest(int_rows([3]))
    assert table.restore("v1") == v + 2  # an older version still restores
    assert table.query().column("key").to_pylist() == [1, 2]


def test_a_range_whose_start_is_after_its_end_is_refused(tmp_path: Path) -> None:
    from sediment.errors import QueryError

    table = make_table(tmp_path)
    table.ingest(int_rows(list(range(10))))
    with pytest.raises(QueryError, match=r"range start 7 is after its end 3"):
        table.query(ranges=[sd.Range(7, 3)])
    with pytest.raises(QueryError, match=r"range start 7 is after its end 3"):
        table.scan(ranges=sd.Range(7, 3))
    with pytest.raises(QueryError, match=r"range start 7 is after its end 3"):
        table.plan(ranges=[sd.Range(0, 5), sd.Range(7, 3)])
    # equal ends are not a mistake: inclusive selects the key, exclusive nothing
    assert table.query(ranges=[sd.Range(3, 3, end_inclusive=True)]).num_rows == 1
    assert table.query(ranges=[sd.Range(3, 3)]).num_rows == 0
    two = sd.Schema(row_keys=[("a", pa.string()), ("b", pa.int64())])
    t2 = helpers.make_table(tmp_path / "two", schema=two)
    with pytest.raises(QueryError, match=r"range start \('b', 1\) is after its end \('a',\)"):
        t2.query(ranges=[sd.Range(("b", 1), ("a",))])
    assert t2.query(ranges=[sd.Range(("a", 5), ("a",), end_inclusive=True)]).num_rows == 0
