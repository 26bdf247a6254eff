"""maintain(): any mix of ingest, compaction, splitting and GC ends in a settled table whose
queries equal the reference; status events and job rows for every kind of job."""

from __future__ import annotations

import random
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sediment as sd
from helpers import make_table, rows
from reference import Reference, assert_matches, order_key, random_range
from sediment.core.model import Region
from sediment.files.writer import with_sidecars
from sediment.maintenance.passes import MaintenanceResult, maintain, maintain_pass
from sediment.workload import benchmark_schema

SCHEMA = benchmark_schema()


def in_region(key: tuple[Any, ...], region: Region) -> bool:
    k = order_key(key)
    return (region.min is None or k >= order_key(region.min)) and \
        (region.max is None or k < order_key(region.max))


def check_settled(table: sd.Table, ref: Reference, rng: random.Random) -> None:
    """The invariants a fully maintained table must hold."""
    state = table.state()
    batch = int(table.properties["compaction.batch_size"])
    threshold = int(table.properties["partition.split.threshold"])
    assert state.jobs == {}, "a compaction job was left assigned"
    true_counts: dict[str, int] = {}
    for p in state.partitions.values():
        refs = list(state.references(p.id).values())
        true_counts[p.id] = sum(in_region(ref.row_key(r), p.region) for r in ref.rows)
        if not p.is_leaf:
            assert refs == [], f"references left in non-leaf partition {p.id}"
            continue
        assert len(refs) <= batch, f"leaf {p.id} has {len(refs)} files > batch size {batch}"
        assert all(r.job_id is None for r in refs)
        counted = sum(r.records for r in refs)
        known = sum(r.records for r in refs if not r.approximate)
        # only a leaf of one row key may stay over the threshold; estimated counts do not
        # split a leaf (as in Sleeper)
        if known > threshold:
            keys = {ref.row_key(r) for r in ref.rows if in_region(ref.row_key(r), p.region)}
            assert len(keys) == 1, f"leaf {p.id} holds {counted} records, {len(keys)} keys"
        if all(not r.approximate for r in refs):
            assert counted == true_counts[p.id], (p.id, counted, true_counts[p.id])
        else:  # one pushed-down reference left alone: its count is a sample estimate
            assert abs(counted - true_counts[p.id]) <= 0.1 * max(true_counts[p.id], 20)
    # parents hold exactly their children's records; leaves tile the key space
    for p in state.partitions.values():
        if not p.is_leaf:
            assert true_counts[p.id] == sum(true_counts[c] for c in p.children)
    assert sum(true_counts[p.id] for p in state.leaf_partitions()) == len(ref.rows)
    assert_matches(table.query(), ref)
    pool = [r["key"] for r in ref.rows] or ["a"]
    for _ in range(3):
        rr = random_range(rng, pool)
        assert_matches(table.query(ranges=[rr.to_sediment()]), ref, ranges=[rr])
    keys = rng.sample(pool, min(3, len(pool)))
    assert_matches(table.query(keys=keys), ref, keys=keys)


def check_storage(table: sd.Table) -> None:
    """After GC with no delay: storage holds exactly the referenced files and samples."""
    referenced = set(table.state().refcount)
    keys = {o.key for o in table._handle.objects.list("data/") if not o.key.endswith("/")}
    assert keys == set(with_sidecars(referenced))


# ---- seeded random sequences ------------------------------------------------------------------
@pytest.mark.parametrize("seed", range(6))
def test_random_operation_sequences_settle(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    batch = rng.choice([2, 3, 5])
    table = make_table(tmp_path, **{
        "gc.delay_seconds": 0, "retention.seconds": 0, "gc.clock_skew_seconds": 0,
        "partition.split.threshold": rng.choice([400, 900]),
        "compaction.batch_size": batch,
        "compaction.strategy": rng.choice(["basic", "size_ratio"]),
        "ingest.write_strategy": rng.choice(["per_partition", "shared_file"]),
        "compaction.max_merge_inputs": rng.choice([2, 16]),
        "sample.size": rng.choice([16, 1024]),
    })
    ref = Reference(SCHEMA)
    narrow = [f"k{i}" for i in range(rng.randint(3, 40))]
    for step in range(rng.randint(10, 18)):
        op = rng.choice(["ingest", "ingest", "ingest", "compact", "split", "gc", "pass"])
        if op == "ingest":
            data = rows(rng.randint(1, 400), seed * 1000 + step,
                        keys=narrow if rng.random() < 0.4 else None)
            table.ingest(data)
            ref.add(data)
        elif op == "compact":
            table.compact()
        elif op == "split":
            table.split()
        elif op == "gc":
            table.gc(orphan_timeout=0)
        else:
            maintain_pass(table._handle, orphan_timeout=0)
        assert_matches(table.query(), ref)
    result = table.maintain(orphan_timeout=0)
    assert isinstance(result, MaintenanceResult)
    assert result.passes < 100 and result.jobs_failed == 0
    check_settled(table, ref, rng)
    table.gc(orphan_timeout=0)
    check_storage(table)
    # settled means settled: another maintain does nothing
    again = table.maintain(orphan_timeout=0)
    assert again.passes == 1 and again.splits == 0 and again.jobs_committed == 0
    check_settled(table, ref, rng)


# ---- hypothesis ----------------------------------------------------------------------------------
OPS = st.lists(st.one_of(
    st.tuples(st.just("ingest"), st.integers(1, 250), st.booleans()),
    st.tuples(st.sampled_from(["compact", "split", "gc"]), st.just(0), st.just(False)),
), min_size=1, max_size=8)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=OPS, batch=st.sampled_from([2, 4]), threshold=st.sampled_from([150, 600]),
       strategy=st.sampled_from(["basic", "size_ratio"]))
def test_maintain_after_any_mix(ops: list[tuple[str, int, bool]], batch: int, threshold: int,
                                strategy: str) -> None:
    with tempfile.TemporaryDirectory() as root:
        table = make_table(root, **{"gc.delay_seconds": 0,
                                    "retention.seconds": 0, "gc.clock_skew_seconds": 0,
                                    "partition.split.threshold": threshold,
                                    "compaction.batch_size": batch,
                                    "compaction.strategy": strategy})
        ref = Reference(SCHEMA)
        for i, (op, n, narrow) in enumerate(ops):
            if op == "ingest":
                data = rows(n, i, keys=["x", "y", "z"] if narrow else None)
                table.ingest(data)
                ref.add(data)
            else:
                getattr(table, op)()
        table.maintain(orphan_timeout=0)
        check_settled(table, ref, random.Random(0))
        table.gc(orphan_timeout=0)
        check_storage(table)


# ---- results, callbacks, stores ----------------------------------------------------------------
def test_maintain_reports_each_pass(tmp_path: Path) -> None:
    table = make_table(tmp_path, **{"partition.split.threshold": 500,
                                    "compaction.strategy": "basic",
                                    "compaction.batch_size": 2, "gc.delay_seconds": 0,
                                    "retention.seconds": 0, "gc.clock_skew_seconds": 0})
    ref = Reference(SCHEMA)
    for i in range(3):
        data = rows(400, i)
        table.ingest(data)
        ref.add(data)
    passes: list[tuple[int, int, int, int]] = []
    result = maintain(table._handle, on_pass=lambda n, s, c, g: passes.append(
        (n, s.splits, c.jobs_committed, g.deleted)))
    assert [p[0] for p in passes] == list(range(1, result.passes + 1))
    assert result.splits == sum(p[1] for p in passes) >= 2
    assert result.jobs_committed == sum(p[2] for p in passes) > 0
    assert result.files_deleted >= sum(p[3] for p in passes) > 0
    assert passes[-1][1:3] == (0, 0)  # the last pass found nothing to do
    check_settled(table, ref, random.Random(1))
    limited = make_table(tmp_path, **{"partition.split.threshold": 100})
    limited.ingest(rows(1000, 9))
    assert maintain(limited._handle, max_passes=1).passes == 1


def test_maintain_store_covers_every_table(tmp_path: Path) -> None:
    props = {"compaction.strategy": "basic", "compaction.batch_size": 2}
    a, b, off = (make_table(tmp_path, name=n, **props) for n in ("a", "b", "off"))
    refs = {}
    for t in (a, b, off):
        refs[t.name] = Reference(SCHEMA)
        for i in range(2):
            data = rows(100, i)
            t.ingest(data)
            refs[t.name].add(data)
    off.set_online(False)
    store = sd.Store.open(str(tmp_path), create=True)
    results = store.maintain()
    assert set(results) == {"a", "b", "off"}
    assert results["a"].jobs_committed == results["b"].jobs_committed == 1
    assert results["off"].jobs_committed == 0 and len(off.files()) == 2
    only = store.maintain(table="a")
    assert set(only) == {"a"} and only["a"].jobs_committed == 0
    for t in (a, b, off):
        assert_matches(t.query(), refs[t.name])


# ---- status ---------------------------------------------------------------------------------
def test_events_and_job_rows_for_every_kind(tmp_path: Path) -> None:
    table = make_table(tmp_path, **{"partition.split.threshold": 300,
                                    "compaction.strategy": "basic", "compaction.batch_size": 2,
                                    "gc.delay_seconds": 0,
                                    "retention.seconds": 0, "gc.clock_skew_seconds": 0})
    for i in range(2):
        table.ingest(rows(200, i))
    table.maintain()
    kinds = {e.kind for e in table._handle.status.events()}
    assert {"ingest", "compaction", "split", "gc"} <= kinds
    ingest_events = list(table._handle.status.events("ingest"))
    assert [e.status for e in ingest_events] == ["committed", "committed"]
    assert [e.details["rows"] for e in ingest_events] == [200, 200]
    assert all(e.details["files"] == 1 for e in ingest_events)
    times = [e.time for e in table._handle.status.events()]
    assert times == sorted(times)
    jobs = table._handle.status.jobs("compaction")
    assert jobs and all(j["status"] == "committed" for j in jobs)
    for j in jobs:
        evs = [e.status for e in table.events("compaction") if e.job_id == j["job_id"]]
        assert evs == ["created", "started", "finished", "committed"]
        assert j["rows_in"] >= j["rows_out"] > 0 and j["inputs"] >= 2
    every = table._handle.status.jobs()
    assert {r["kind"] for r in every} == kinds
    assert all({"kind", "job_id", "status", "created", "updated"} <= set(r) for r in every)
    later = list(table._handle.status.events(since=times[-1] + 1))
    assert later == []
