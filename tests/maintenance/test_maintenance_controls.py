"""Maintenance controls: GC batch size and files per
run, table clear/reinitialise, forced full compaction and jobs per pass, aggregation by extra
value fields and concat."""

from __future__ import annotations

import json
import random
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import sediment as sd
from helpers import make_table, rows
from reference import Reference, assert_matches
from sediment.compaction.runner import create_jobs, run_job
from sediment.core.transactions import DeleteFiles
from sediment.errors import PropertyError, SchemaError, TransactionInvalidError
from sediment.iterators import Aggregate, iterator_from_config
from sediment.maintenance.gc import gc
from sediment.properties import defaults, validate_properties


# ---- 10. GC controls -------------------------------------------------------------------------
def unreferenced_table(tmp_path: Path, n_files: int, **props: Any) -> tuple[sd.Table, list[str]]:
    """``n_files`` files compacted into one: they are unreferenced, in the order they became so."""
    table = make_table(tmp_path, **{"compaction.strategy": "basic", "retention.seconds": 0,
                                    "compaction.batch_size": n_files, **props})
    for i in range(n_files):
        table.ingest(rows(10, i))
    inputs = [r.filename for r in table.files()]
    assert table.compact().jobs_committed == 1
    assert set(table.state().unreferenced) == set(inputs)
    return table, inputs


def test_gc_property_defaults() -> None:
    d = defaults()
    assert d["gc.batch_size"] == 1000 and d["gc.max_files_per_run"] == 100_000
    with pytest.raises(PropertyError):
        validate_properties({"gc.batch_size": 0})
    with pytest.raises(PropertyError):
        validate_properties({"gc.max_files_per_run": 0})


def test_gc_batch_size_sets_deletions_per_transaction_and_request(tmp_path: Path) -> None:
    table, inputs = unreferenced_table(tmp_path, 7, **{"gc.batch_size": 3})
    requests: list[list[str]] = []
    real = table._handle.objects.delete_many

    def spy(keys: Any) -> None:
        keys = list(keys)
        requests.append(keys)
        real(keys)

    table._handle.objects.delete_many = spy  # type: ignore[method-assign]
    version = table.version
    assert gc(table._handle, now=time.time() + 1201).deleted == 7
    txns = [e.transaction for e in table._handle.states.log.read_after(version)]
    assert all(isinstance(t, DeleteFiles) for t in txns)
    assert [len(t.filenames) for t in txns] == [3, 3, 1]
    assert sorted(f for t in txns for f in t.filenames) == sorted(inputs)
    data_requests = [[k for k in r if k in inputs] for r in requests]
    assert [len(r) for r in data_requests if r] == [3, 3, 1]


def test_gc_max_files_per_run_leaves_the_rest_for_the_next_pass(tmp_path: Path) -> None:
    table, inputs = unreferenced_table(tmp_path, 5, **{"gc.max_files_per_run": 2,
                                                       "gc.batch_size": 1})
    later = time.time() + 1201
    assert gc(table._handle, now=later).deleted == 2
    assert len(table.state().unreferenced) == 3
    assert gc(table._handle, now=later).deleted == 2
    assert gc(table._handle, now=later).deleted == 1
    assert table.state().unreferenced == {}
    assert not gc(table._handle, now=later).did_work


def test_gc_takes_the_oldest_unreferenced_first(tmp_path: Path) -> None:
    table, first = unreferenced_table(tmp_path, 2, **{"gc.max_files_per_run": 2})
    time.sleep(0.01)
    for i in range(2):
        table.ingest(rows(10, 100 + i))
    assert table.compact().jobs_committed == 1
    assert gc(table._handle, now=time.time() + 1201).deleted == 2
    assert set(table.state().unreferenced).isdisjoint(first)
    assert len(table.state().unreferenced) == 2


# ---- 12. Table administration ------------------------------------------------------------------
def test_clear_removes_every_record_in_one_transaction(tmp_path: Path) -> None:
    table = make_table(tmp_path, split_points=["m"], **{"gc.batch_size": 2,
                                                       "compaction.strategy": "basic",
                                                       "retention.seconds": 0})
    ref = Reference(table.schema)
    for i in range(3):
        data = rows(50, i)
        table.ingest(data)
        ref.add(data)
    partitions = {p.id: p for p in table.partitions()}
    files = {r.filename for r in table.files()}
    before = table.version
    props = table.properties
    assert table.clear() == before + 1
    assert table.history()[-1].kind == "clear"
    assert table.query().num_rows == 0
    assert table.files() == []
    assert {p.id: p for p in table.partitions()} == partitions
    assert table.schema == sd.Schema.from_json(table.state(before).schema.to_json())
    assert table.properties == props
    assert set(table.state().unreferenced) == files
    # time travel: the version before the clear still reads every record
    assert_matches(table.query(version=before), ref)
    # new records go into the cleared table
    new = Reference(table.schema)
    data = rows(20, 99)
    table.ingest(data)
    new.add(data)
    assert_matches(table.query(), new)
    # the old files are collected after the delay, in batches
    assert gc(table._handle).deleted == 0
    assert gc(table._handle, now=time.time() + 1201).deleted == len(files)
    assert_matches(table.query(), new)


def test_clear_of_an_empty_table_commits_nothing(tmp_path: Path) -> None:
    table = make_table(tmp_path)
    v = table.version
    assert table.clear() == v == table.version


def test_clear_can_be_restored_before_gc(tmp_path: Path) -> None:
    table = make_table(tmp_path)
    ref = Reference(table.schema)
    data = rows(30, 1)
    table.ingest(data)
    ref.add(data)
    before = table.version
    table.clear()
    table.restore(before)
    assert_matches(table.query(), ref)


def test_clear_drops_created_jobs_and_their_commit_fails(tmp_path: Path) -> None:
    table = make_table(tmp_path, **{"compaction.strategy": "basic",
                                    "compaction.batch_size": 2})
    for i in range(2):
        table.ingest(rows(10, i))
    (job,) = create_jobs(table._handle)
    assert table.state().jobs
    table.clear()
    assert table.state().jobs == {}
    result = run_job(table._handle, table.state(), job)
    assert not result.committed
    assert table.query().num_rows == 0


def test_reinitialise_sets_new_split_points(tmp_path: Path) -> None:
    table = make_table(tmp_path, split_points=["m"])
    v = table.reinitialise(split_points=["d", "h", "t"])
    assert table.history()[-1].kind == "reinitialise" and v == table.version
    leaves = [p for p in table.partitions() if p.is_leaf]
    assert sorted(p.region.min for p in leaves if p.region.min is not None) == \
        [("d",), ("h",), ("t",)]
    ref = Reference(table.schema)
    data = rows(200, 3)
    table.ingest(data)
    ref.add(data)
    assert_matches(table.query(), ref)
    # no split points: a single root partition
    table.clear()
    table.reinitialise()
    assert [p.id for p in table.partitions()] == ["root"]


def test_reinitialise_refuses_a_table_with_records(tmp_path: Path) -> None:
    table = make_table(tmp_path)
    table.ingest(rows(10, 1))
    v = table.version
    with pytest.raises(TransactionInvalidError, match="holds records.*clear it first"):
        table.reinitialise(split_points=["m"])
    assert table.version == v
    table.clear()
    table.reinitialise(split_points=["m"])
    assert len([p for p in table.partitions() if p.is_leaf]) == 2


def test_reinitialise_refuses_bad_split_points(tmp_path: Path) -> None:
    table = make_table(tmp_path)
    with pytest.raises(SchemaError):
        table.reinitialise(split_points=["m", "d"])


# ---- 9. Compaction controls --------------------------------------------------------------------
def leaf_files(table: sd.Table) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    for r in table.files():
        out.setdefault(r.partition_id, []).append(r)
    return out


def test_full_compaction_merges_every_leaf_whatever_the_strategy(tmp_path: Path) -> None:
    table = make_table(tmp_path, split_points=["h", "p"],
                       **{"compaction.ratio": 1000.0, "compaction.batch_size": 12})
    ref = Reference(table.schema)
    for i, n in enumerate([30, 300, 3000]):  # sizes the ratio never merges
        data = rows(n, i)
        table.ingest(data)
        ref.add(data)
    assert table.compact().jobs_created == 0
    assert [len(fs) for fs in leaf_files(table).values()] == [3, 3, 3]
    r = table.compact(full=True)
    assert r.jobs_created == r.jobs_committed == 3
    assert all(len(fs) == 1 and not fs[0].approximate for fs in leaf_files(table).values())
    assert_matches(table.query(), ref)
    assert table.compact(full=True).jobs_created == 0  # one file per leaf: nothing to do


def test_full_compaction_of_a_shared_file_gives_each_leaf_its_own(tmp_path: Path) -> None:
    table = make_table(tmp_path, split_points=["h", "p"],
                       **{"ingest.write_strategy": "shared_file", "retention.seconds": 0})
    ref = Reference(table.schema)
    data = rows(300, 1)
    table.ingest(data)
    ref.add(data)
    (shared,) = {r.filename for r in table.files()}
    assert len(table.files()) == 3  # one file, referenced from every leaf
    r = table.compact(full=True)
    assert r.jobs_committed == 3
    files = table.files()
    assert len({f.filename for f in files}) == 3 and shared not in {f.filename for f in files}
    assert not any(f.approximate for f in files)
    assert sum(f.records for f in files) == 300
    assert shared in table.state().unreferenced
    assert gc(table._handle, now=time.time() + 1201).deleted == 1
    assert_matches(table.query(), ref)


def test_full_compaction_pushes_references_down_every_level(tmp_path: Path) -> None:
    table = make_table(tmp_path, **{"partition.split.threshold": 100})
    ref = Reference(table.schema)
    data = rows(400, 5)
    table.ingest(data)
    ref.add(data)
    assert table.split().splits == 1  # the file stays referenced from the old root
    r = table.compact(full=True)
    assert r.references_pushed_down >= 1 and r.jobs_committed == 2
    leaves = {p.id for p in table.partitions() if p.is_leaf}
    assert set(leaf_files(table)) == leaves
    assert_matches(table.query(), ref)


def test_estimated_references_get_single_file_jobs(tmp_path: Path) -> None:
    table = make_table(tmp_path, split_points=["m"],
                       **{"ingest.write_strategy": "shared_file"})
    ref = Reference(table.schema)
    data = rows(200, 2)
    table.ingest(data)
    ref.add(data)
    (shared,) = {r.filename for r in table.files()}
    r = table.compact()  # default strategy: one file per leaf would never merge
    assert r.jobs_created == r.jobs_committed == 2
    assert all(len(fs) == 1 and not fs[0].approximate and fs[0].filename != shared
               for fs in leaf_files(table).values())
    assert shared in table.state().unreferenced
    assert_matches(table.query(), ref)
    assert table.compact().jobs_created == 0  # exact now: nothing more


def test_a_leaf_with_one_estimated_reference_is_compacted_and_then_splits(tmp_path: Path
                                                                          ) -> None:
    table = make_table(tmp_path, **{"partition.split.threshold": 100})
    ref = Reference(table.schema)
    data = rows(1000, 3)
    table.ingest(data)
    ref.add(data)
    assert table.split().splits == 1
    # each child holds ~500 records, known only as estimates: they do not split
    table.compact()
    assert not any(f.approximate for f in table.files())
    assert len([p for p in table.partitions() if p.is_leaf]) == 2
    assert table.split().splits == 2  # exact now, so the children split
    assert_matches(table.query(), ref)


def test_max_jobs_per_pass_caps_jobs_created(tmp_path: Path) -> None:
    table = make_table(tmp_path, split_points=["d", "h", "p"],
                       **{"compaction.strategy": "basic", "compaction.batch_size": 2,
                          "compaction.max_jobs_per_pass": 3})
    ref = Reference(table.schema)
    for i in range(2):
        data = rows(200, i)
        table.ingest(data)
        ref.add(data)
    assert all(len(fs) == 2 for fs in leaf_files(table).values())
    assert len(leaf_files(table)) == 4
    assert table.compact().jobs_created == 3
    assert sorted(len(fs) for fs in leaf_files(table).values()) == [1, 1, 1, 2]
    assert table.compact().jobs_created == 1
    assert all(len(fs) == 1 for fs in leaf_files(table).values())
    assert_matches(table.query(), ref)
    assert defaults()["compaction.max_jobs_per_pass"] == 0


def test_max_jobs_per_pass_goes_round_robin_most_fragmented_first() -> None:
    from sediment.compaction.strategy import plan_compaction_jobs
    from sediment.core.model import FileReference, Partition, Region
    from sediment.core.state import TableState

    state = TableState("t")
    state.partitions = {
        "root": Partition("root", None, Region(), ("a", "b"), (10,)),
        "a": Partition("a", "root", Region(None, (10,))),
        "b": Partition("b", "root", Region((10,), None)),
    }
    for i in range(4):
        state.put_reference(FileReference(f"a{i}", "a", 10, False))
    for i in range(6):
        state.put_reference(FileReference(f"b{i}", "b", 10, False))
    props = {**defaults(), "compaction.strategy": "basic", "compaction.batch_size": 2,
             "compaction.max_jobs_per_pass": 3}
    jobs = plan_compaction_jobs(state, props)
    assert [j.partition_id for j in jobs] == ["b", "a", "b"]
    props["compaction.max_jobs_per_pass"] = 0
    assert len(plan_compaction_jobs(state, props)) == 5


def test_cli_compact_full(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from sediment.cli import app

    table = make_table(tmp_path, name="events", **{"compaction.ratio": 1000.0})
    for i, n in enumerate([30, 3000]):
        table.ingest(rows(n, i))
    runner = CliRunner()
    args = ["compact", "--store", str(tmp_path), "--table", "events", "--json"]
    (doc,) = json.loads(runner.invoke(app, args).stdout)
    assert doc["jobs_created"] == 0
    result = runner.invoke(app, [*args, "--full"])
    assert result.exit_code == 0, result.output
    (doc,) = json.loads(result.stdout)
    assert doc["jobs_created"] == doc["jobs_committed"] == 1
    assert len(sd.Store.open(str(tmp_path)).table("events").files()) == 1


# ---- 11. Aggregation: group_by and concat ------------------------------------------------------
AGG_SCHEMA = sd.Schema(row_keys=[("k", pa.int64())], sort_keys=[("t", pa.int32())],
                       values=[("region", pa.string()), ("count", pa.int64()),
                               ("s", pa.string()), ("b", pa.binary()), ("v", pa.int64())])
AGG_FUNCTIONS = {"count": "sum", "s": "concat", "b": "concat"}


def agg_rows(rng: random.Random, n: int) -> list[dict[str, Any]]:
    return [{"k": rng.randrange(4), "t": rng.randrange(2),
             "region": rng.choice(["eu", "us", None]), "count": rng.randrange(10),
             "s": rng.choice(["a", "bc", "", None]), "b": rng.choice([b"\x00", b"xy", None]),
             "v": rng.randrange(100)} for _ in range(n)]


def expected_aggregate(records: list[dict[str, Any]], group_by: list[str]
                       ) -> list[dict[str, Any]]:
    """The reference: records in stream order (sorted by keys, stable), grouped by keys and
    ``group_by``; within a key, groups in the order of their last records."""
    out: dict[tuple[Any, ...], dict[str, Any]] = {}
    last: dict[tuple[Any, ...], int] = {}
    for i, r in enumerate(sorted(records, key=lambda r: (r["k"], r["t"]))):  # stream order
        g = (r["k"], r["t"], *(r[f] for f in group_by))
        last[g] = i
        o = out.get(g)
        if o is None:
            out[g] = dict(r)
            continue
        o["count"] += r["count"]
        for f in ("s", "b"):
            if r[f] is not None:
                o[f] = r[f] if o[f] is None else o[f] + r[f]
        for f in ("region", "v"):
            if f not in group_by:
                o[f] = r[f]  # last
    return [out[g] for g in sorted(out, key=last.__getitem__)]


def run_aggregate(records: list[dict[str, Any]], agg: Aggregate, rng: random.Random
                  ) -> list[dict[str, Any]]:
    t = pa.Table.from_pylist(sorted(records, key=lambda r: (r["k"], r["t"])),
                             schema=AGG_SCHEMA.to_arrow())
    cuts = sorted(rng.sample(range(1, len(records)), min(3, len(records) - 1))) \
        if len(records) > 1 else []
    bounds = [0, *cuts, len(records)]
    batches = [b for i in range(len(bounds) - 1)
               for b in t.slice(bounds[i], bounds[i + 1] - bounds[i]).to_batches()]
    return pa.Table.from_batches(list(agg.apply(iter(batches))),
                                 schema=AGG_SCHEMA.to_arrow()).to_pylist()


@pytest.mark.parametrize("group_by", [[], ["region"], ["region", "v"]])
@pytest.mark.parametrize("seed", range(8))
def test_aggregate_group_by_and_concat_match_a_reference(group_by: list[str], seed: int
                                                         ) -> None:
    rng = random.Random(seed)
    records = agg_rows(rng, rng.randrange(1, 80))
    functions = {k: v for k, v in AGG_FUNCTIONS.items() if k not in group_by}
    if "v" not in group_by:
        functions["v"] = "last"
    agg = Aggregate(functions, AGG_SCHEMA, group_by=group_by)
    assert run_aggregate(records, agg, rng) == expected_aggregate(records, group_by)


def test_group_by_keeps_groups_apart_in_the_order_of_their_last_records() -> None:
    records = [{"k": 1, "t": 0, "region": r, "count": c, "s": s, "b": None, "v": 0}
               for r, c, s in [("us", 1, "a"), ("eu", 2, "b"), ("us", 3, "c"), (None, 4, "d"),
                               ("eu", 5, None), (None, 6, "e")]]
    agg = Aggregate(AGG_FUNCTIONS, AGG_SCHEMA, group_by=["region"])
    out = run_aggregate(records, agg, random.Random(0))
    assert [(r["region"], r["count"], r["s"], r["b"]) for r in out] == [
        ("us", 4, "ac", None), ("eu", 7, "b", None), (None, 10, "de", None)]
    # the order of the last records: us (3rd), eu (5th), null (6th)


def test_group_by_and_concat_configuration_errors() -> None:
    def build(cfg: dict[str, Any]) -> Any:
        return iterator_from_config({"type": "aggregate", **cfg}, AGG_SCHEMA)

    agg = build({"functions": {"s": "concat"}, "group_by": ["region"]})
    assert isinstance(agg, Aggregate) and agg.group_by == ["region"]
    for cfg, message in [
        ({"functions": {"count": "concat"}}, "concat on field 'count'"),
        ({"group_by": ["nope"]}, "unknown field 'nope'"),
        ({"group_by": ["k"]}, "key field"),
        ({"group_by": ["region", "region"]}, "named twice"),
        ({"group_by": "region"}, "list of field names"),
        ({"functions": {"region": "last"}, "group_by": ["region"]}, "both grouped by"),
    ]:
        with pytest.raises(PropertyError, match=message):
            build(cfg)


def test_table_aggregates_by_group_at_query_and_compaction(tmp_path: Path) -> None:
    cfg = json.dumps([{"type": "aggregate", "functions": AGG_FUNCTIONS,
                       "group_by": ["region"]}])
    table = make_table(tmp_path, schema=AGG_SCHEMA, **{"compaction.iterators": cfg,
                                                       "compaction.ratio": 0.0})
    rng = random.Random(7)
    records: list[dict[str, Any]] = []
    for _ in range(4):  # each ingest commits after the last: stream order = commit order
        batch = agg_rows(rng, 40)
        table.ingest(pa.Table.from_pylist(batch, schema=AGG_SCHEMA.to_arrow()))
        records += batch
    want = expected_aggregate(records, ["region"])
    assert table.query().to_pylist() == want
    assert table.compact().jobs_committed == 1
    assert table.query().to_pylist() == want
    more = agg_rows(rng, 40)
    table.ingest(pa.Table.from_pylist(more, schema=AGG_SCHEMA.to_arrow()))
    want = expected_aggregate(records + more, ["region"])
    assert table.query().to_pylist() == want
    table.compact()
    assert table.query().to_pylist() == want


def test_concat_order_survives_a_compaction_of_non_consecutive_files(tmp_path: Path) -> None:
    schema = sd.Schema(row_keys=[("k", pa.int64())], values=[("s", pa.string())])
    cfg = json.dumps([{"type": "aggregate", "functions": {"s": "concat"}}])
    table = make_table(tmp_path, schema=schema, **{"compaction.iterators": cfg,
                                                   "compaction.strategy": "basic",
                                                   "compaction.batch_size": 2})
    table.ingest(pa.table({"k": [1], "s": ["a"]}))
    table.ingest(pa.table({"k": [1, *range(2, 50)], "s": ["b"] * 49}))  # large: left out
    table.ingest(pa.table({"k": [1], "s": ["c"]}))
    assert table.query(keys=[1]).column("s").to_pylist() == ["abc"]
    assert table.compact().jobs_committed == 1
    assert table.query(keys=[1]).column("s").to_pylist() == ["abc"]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_concat_order_holds_through_splits_and_compactions(tmp_path: Path, seed: int) -> None:
    """Random small ingests into a concat table that splits and compacts as it goes (size
    ratio 0, so jobs would otherwise take any two files): every key reads as its values
    joined in commit order, checked against a plain Python reference after every step."""
    schema = sd.Schema(row_keys=[("k", pa.int64())], values=[("s", pa.string())])
    cfg = json.dumps([{"type": "aggregate", "functions": {"s": "concat"}}])
    table = make_table(tmp_path, schema=schema, **{"compaction.iterators": cfg,
                                                   "compaction.ratio": 0.0,
                                                   "compaction.batch_size": 3,
                                                   "partition.split.threshold": 40})
    rng = random.Random(seed)
    want: dict[int, str] = {}
    for step in range(20):
        n = rng.choice([1, 2, 30])  # a big file now and then: planned last by size
        keys = [rng.randrange(30) for _ in range(n)]
        values = [f"{step}." for _ in keys]
        table.ingest(pa.table({"k": pa.array(keys, pa.int64()), "s": values}))
        for k in keys:
            want[k] = want.get(k, "") + f"{step}."
        action = rng.choice(["compact", "split", "maintain", "none"])
        if action == "compact":
            table.compact()
        elif action == "split":
            table.split()
        elif action == "maintain":
            table.maintain()
        got = table.query().to_pydict()
        assert dict(zip(got["k"], got["s"], strict=True)) == want, (step, action)
    table.compact(full=True)
    assert len(table.partitions()) > 1
    got = table.query().to_pydict()
    assert dict(zip(got["k"], got["s"], strict=True)) == want
