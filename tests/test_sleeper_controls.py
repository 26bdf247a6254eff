"""Sleeper controls (issue 13, "Controls Sleeper has that we lack"): GC batch size and files per
run, table clear/reinitialise, forced full compaction and jobs per pass, aggregation by extra
value fields and concat."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

import sediment as sd
from helpers import make_table, rows
from reference import Reference, assert_matches
from sediment.compaction.runner import create_jobs, run_job
from sediment.core.transactions import DeleteFiles
from sediment.errors import PropertyError, SchemaError, TransactionInvalidError
from sediment.maintenance.gc import gc
from sediment.properties import defaults, validate_properties


# ---- 10. GC controls -------------------------------------------------------------------------
def unreferenced_table(tmp_path: Path, n_files: int, **props: Any) -> tuple[sd.Table, list[str]]:
    """``n_files`` files compacted into one: they are unreferenced, in the order they became so."""
    table = make_table(tmp_path, **{"compaction.strategy": "basic",
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
    real = table.objects.delete_many

    def spy(keys: Any) -> None:
        keys = list(keys)
        requests.append(keys)
        real(keys)

    table.objects.delete_many = spy  # type: ignore[method-assign]
    version = table.version
    assert gc(table, now=time.time() + 1201).deleted == 7
    txns = [e.transaction for e in table.states.log.read_after(version)]
    assert all(isinstance(t, DeleteFiles) for t in txns)
    assert [len(t.filenames) for t in txns] == [3, 3, 1]
    assert sorted(f for t in txns for f in t.filenames) == sorted(inputs)
    data_requests = [[k for k in r if k in inputs] for r in requests]
    assert [len(r) for r in data_requests if r] == [3, 3, 1]


def test_gc_max_files_per_run_leaves_the_rest_for_the_next_pass(tmp_path: Path) -> None:
    table, inputs = unreferenced_table(tmp_path, 5, **{"gc.max_files_per_run": 2,
                                                       "gc.batch_size": 1})
    later = time.time() + 1201
    assert gc(table, now=later).deleted == 2
    assert len(table.state().unreferenced) == 3
    assert gc(table, now=later).deleted == 2
    assert gc(table, now=later).deleted == 1
    assert table.state().unreferenced == {}
    assert not gc(table, now=later).did_work


def test_gc_takes_the_oldest_unreferenced_first(tmp_path: Path) -> None:
    table, first = unreferenced_table(tmp_path, 2, **{"gc.max_files_per_run": 2})
    time.sleep(0.01)
    for i in range(2):
        table.ingest(rows(10, 100 + i))
    assert table.compact().jobs_committed == 1
    assert gc(table, now=time.time() + 1201).deleted == 2
    assert set(table.state().unreferenced).isdisjoint(first)
    assert len(table.state().unreferenced) == 2


# ---- 12. Table administration ------------------------------------------------------------------
def test_clear_removes_every_record_in_one_transaction(tmp_path: Path) -> None:
    table = make_table(tmp_path, split_points=["m"], **{"gc.batch_size": 2,
                                                       "compaction.strategy": "basic"})
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
    assert gc(table).deleted == 0
    assert gc(table, now=time.time() + 1201).deleted == len(files)
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
    (job,) = create_jobs(table)
    assert table.state().jobs
    table.clear()
    assert table.state().jobs == {}
    result = run_job(table, table.state(), job)
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
