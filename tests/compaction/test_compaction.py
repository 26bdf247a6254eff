"""Compaction: pure planning (strategies, reference push-down), job execution, racing runners,
killed jobs and the orphans they leave behind."""

from __future__ import annotations

import io
import json
import random
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import sediment as sd
from helpers import make_table, rows, run_together
from reference import (
    AWKWARD_BINARIES,
    INT64_EXTREMES,
    Reference,
    assert_matches,
    order_key,
    random_batch,
    result_rows,
    string_key_pool,
)
from sediment.compaction import job as job_module
from sediment.compaction.job import run_compaction_job
from sediment.compaction.runner import create_jobs, push_down_references, run_job
from sediment.compaction.sources import InputFile
from sediment.compaction.strategy import (
    CompactionJob,
    assignments,
    is_long,
    plan_compaction_jobs,
    plan_reference_splits,
    short_part,
)
from sediment.core.model import FileReference, Region
from sediment.core.state import ROOT_PARTITION_ID, TableState, build_partition_tree
from sediment.core.transactions import (
    AddFiles,
    AssignJobIds,
    InitialiseTable,
    JobAssignment,
    ReplaceFileReferences,
    SetOnline,
    SplitFileReferences,
    Transaction,
)
from sediment.errors import TransactionInvalidError
from sediment.files.sample import COUNT
from sediment.files.sequence import without_sequence
from sediment.files.writer import sample_name, with_sidecars
from sediment.maintenance.gc import gc
from sediment.properties import defaults
from sediment.state import pending
from sediment.workload import benchmark_schema

SCHEMA = benchmark_schema()
KEYS = SCHEMA.key_names


# ---- helpers ---------------------------------------------------------------------------------
def reopen(table: sd.Table, options: dict[str, Any] | None = None) -> sd.Table:
    """A second, independent Table object (own state cache) for the same table."""
    return sd.Store.open(table.store.uri, **(options or {})).table(table.name)


def ingest_files(table: sd.Table, ref: Reference, count: int, n: int, seed: int = 0) -> None:
    for i in range(count):
        data = rows(n, seed * 1000 + i)
        table.ingest(data)
        ref.add(data)


def read_object(table: sd.Table, key: str) -> pa.Table:
    """A data file's user columns (compacted files also hold the hidden record sequences)."""
    return without_sequence(pq.read_table(io.BytesIO(table._handle.objects.get(key))))


def data_keys(table: sd.Table) -> set[str]:
    return {o.key for o in table._handle.objects.list("data/") if not o.key.endswith("/")}


def key_tuples(t: pa.Table, names: list[str]) -> list[tuple[Any, ...]]:
    return list(zip(*(t.column(n).to_pylist() for n in names), strict=True))


def assert_sorted_file(t: pa.Table) -> None:
    keys = [(k.encode(), ts) for k, ts in key_tuples(t, KEYS)]
    assert keys == sorted(keys)


def region_rows(ref: Reference, region: Region) -> list[tuple[Any, ...]]:
    """Reference rows whose row key is inside a partition region."""
    lo = None if region.min is None else region.min[0].encode()
    hi = None if region.max is None else region.max[0].encode()
    keep = [r for r in ref.rows
            if (lo is None or r["key"].encode() >= lo) and (hi is None or r["key"].encode() < hi)]
    sub = Reference(SCHEMA)
    sub.rows = keep
    return sub.query()


def committed(table: sd.Table, kind: type[Transaction]) -> list[Any]:
    return [e.transaction for e in table._handle.states.log.read_after(0)
            if isinstance(e.transaction, kind)]


# ---- pure planning ---------------------------------------------------------------------------
def _apply(state: TableState, txn: Transaction) -> None:
    txn.validate(state)
    txn.apply(state, 1000.0 + state.version)
    state.version += 1


def plan_state(split_points: Any = None) -> TableState:
    state = TableState("plan")
    _apply(state, InitialiseTable(SCHEMA, {}, build_partition_tree(SCHEMA, split_points)))
    return state


def add(state: TableState, pid: str, *records: int) -> list[str]:
    names = [f"data/{pid}/{uuid.uuid4().hex}.parquet" for _ in records]
    _apply(state, AddFiles([FileReference(n, pid, r) for n, r in zip(names, records,
                                                                      strict=True)]))
    return names


def props(**kw: Any) -> dict[str, Any]:
    return {**defaults(), **{k.replace("__", "."): v for k, v in kw.items()}}


def sizes(jobs: list[CompactionJob]) -> list[list[int]]:
    return [sorted(r.records for r in j.inputs) for j in jobs]


def counter() -> Any:
    n = iter(range(10**6))
    return lambda: f"job-{next(n)}"


def test_basic_makes_full_batches_only() -> None:
    state = plan_state()
    add(state, ROOT_PARTITION_ID, *[100] * 7)
    p = props(compaction__strategy="basic", compaction__batch_size=3)
    jobs = plan_compaction_jobs(state, p, new_id=counter())
    assert [len(j.inputs) for j in jobs] == [3, 3]
    assert [j.job_id for j in jobs] == ["job-0", "job-1"]
    assert all(j.partition_id == ROOT_PARTITION_ID for j in jobs)
    used = [r.filename for j in jobs for r in j.inputs]
    assert len(set(used)) == 6  # no file in two jobs, one left for a later full batch
    # fewer files than a batch: nothing, whatever their sizes
    small = plan_state()
    add(small, ROOT_PARTITION_ID, 1, 1)
    assert plan_compaction_jobs(small, p) == []
    # planning is pure: the state is untouched
    assert all(r.job_id is None for r in state.all_references())


@pytest.mark.parametrize("records, expected", [
    ([10, 10, 10, 10], [[10, 10, 10, 10]]),         # 3 x 10 <= 30: four of a size merge
    ([10, 10, 10], []),                             # 3 x 10 > 20: three wait for a fourth
    ([1000, 10, 10, 10, 10], [[10, 10, 10, 10]]),   # the big file waits
    ([1000, 250, 250, 250, 250], [[250, 250, 250, 250]]),  # 3000 > 1000 still waits
    ([1000, *[300] * 10], [[*[300] * 10, 1000]]),  # small files add up to 3x: all merge
    ([100, 100, 100, 100, 130], [[100, 100, 100, 100, 130]]),  # 390 <= 400
    ([1000, 400], []),
    ([5], []),
    ([7, 7], []),
])
def test_size_ratio(records: list[int], expected: list[list[int]]) -> None:
    state = plan_state()
    add(state, ROOT_PARTITION_ID, *records)
    jobs = plan_compaction_jobs(state, props(), new_id=counter())
    assert sizes(jobs) == expected


def test_size_ratio_respects_ratio_property() -> None:
    state = plan_state()
    add(state, ROOT_PARTITION_ID, 1000, 300)
    assert sizes(plan_compaction_jobs(state, props(compaction__ratio=0.25))) == [[300, 1000]]
    assert plan_compaction_jobs(state, props(compaction__ratio=3.0)) == []
    # ratio 0: any files merge, a batch at a time (a full compaction)
    add(state, ROOT_PARTITION_ID, 1, 10**9)
    assert sizes(plan_compaction_jobs(state, props(compaction__ratio=0))) == [
        [1, 300, 1000, 10**9]]


def test_size_ratio_bounds_files_per_leaf() -> None:
    geometric = [1, 4, 16, 64, 256]  # each more than the sum of the smaller ones
    state = plan_state()
    add(state, ROOT_PARTITION_ID, *geometric)
    assert plan_compaction_jobs(state, props(compaction__batch_size=12)) == []  # 5 <= 6
    # past half a batch the smallest merge regardless of the ratio, just enough to come back
    # to that level (5 files, high water 2: merge 4 into 1)
    assert sizes(plan_compaction_jobs(state, props(compaction__batch_size=5))) == [
        [1, 4, 16, 64]]
    assert sizes(plan_compaction_jobs(state, props(compaction__batch_size=3))) == [
        [1, 4, 16], [64, 256]]
    assert sizes(plan_compaction_jobs(state, props(compaction__batch_size=2))) == [[1, 4],
                                                                                 [16, 64]]
    # a running job counts as the one file it leaves: the leaf is over its level even if
    # few files are free ...
    busy = plan_state()
    held = add(busy, ROOT_PARTITION_ID, *[10**6] * 2)
    _apply(busy, AssignJobIds([JobAssignment("running", ROOT_PARTITION_ID, tuple(held))]))
    add(busy, ROOT_PARTITION_ID, *[4**i for i in range(8)])  # 1 + 8 files > 6
    assert sizes(plan_compaction_jobs(busy, props())) == [[1, 4, 16, 64]]
    # ... but files a running job is merging are not files to come: 7 held + 2 free leave 3
    # (merging the 100 would rewrite the larger file to save one the job saves anyway)
    calm = plan_state()
    held = add(calm, ROOT_PARTITION_ID, *[10**6] * 7)
    _apply(calm, AssignJobIds([JobAssignment("running", ROOT_PARTITION_ID, tuple(held))]))
    add(calm, ROOT_PARTITION_ID, 1, 100)
    assert plan_compaction_jobs(calm, props()) == []


def test_short_part_takes_the_inputs_under_the_bound() -> None:
    state = plan_state()
    add(state, ROOT_PARTITION_ID, 5, 1, 3, 100, 50, 9)
    (job,) = plan_compaction_jobs(state, props(compaction__batch_size=6, compaction__ratio=0))
    assert is_long(job, 10) and is_long(job, 100) and not is_long(job, 101)
    short = short_part(job, 10, props())
    assert short is not None and sizes([short]) == [[1, 3, 5, 9]]  # each under 10 records
    assert short.job_id == job.job_id and short.partition_id == job.partition_id
    assert not is_long(short, 10)
    assert short_part(job, 2, props()) is None  # one input alone is no merge
    # iterators that need consecutive inputs merge a leaf's files together, never a part
    concat = props(compaction__iterators=json.dumps(
        [{"type": "aggregate", "functions": {"value": "concat"}}]))
    assert short_part(job, 10, concat) is None


def test_a_merge_inside_the_partition_needs_no_region_filter() -> None:
    region = Region(("f",), ("p",))
    inside = InputFile("file:///a", 0, bounds=("g", "o"))
    assert job_module._inside([inside], region)
    # the statistics tell only the first field, so a bound equal to an end is not inside
    # (a longer key equal on it may fall either side); unknown bounds are never inside
    for bounds in [("f", "o"), ("g", "p"), ("a", "z"), None]:
        assert not job_module._inside([inside, InputFile("file:///b", 0, bounds=bounds)],
                                      region)
    assert job_module._inside([InputFile("file:///c", 0, bounds=("a", "z"))], Region(None, None))


def test_batch_size_caps_jobs() -> None:
    state = plan_state()
    add(state, ROOT_PARTITION_ID, *[50] * 30)
    ratio = plan_compaction_jobs(state, props(compaction__batch_size=12))
    assert [len(j.inputs) for j in ratio] == [12, 12, 6]
    basic = plan_compaction_jobs(state, props(compaction__strategy="basic",
                                              compaction__batch_size=12))
    assert [len(j.inputs) for j in basic] == [12, 12]
    # size_ratio takes the smallest files first
    state2 = plan_state()
    add(state2, ROOT_PARTITION_ID, *range(1, 21))
    jobs = plan_compaction_jobs(state2, props(compaction__batch_size=4))
    assert sizes(jobs)[0] == [1, 2, 3, 4]


def test_max_concurrent_jobs_per_partition() -> None:
    state = plan_state(["m"])
    left, right = (p.id for p in state.leaf_partitions())
    add(state, left, *[50] * 30)
    add(state, right, *[50] * 4)
    p = props(compaction__batch_size=3, compaction__max_concurrent_jobs_per_partition=2)
    jobs = plan_compaction_jobs(state, p, new_id=counter())
    per_leaf = {pid: sum(j.partition_id == pid for j in jobs) for pid in (left, right)}
    assert per_leaf == {left: 2, right: 1}
    # jobs already running count against the cap
    _apply(state, AssignJobIds(assignments(jobs[:1])))
    running_leaf = jobs[0].partition_id
    again = plan_compaction_jobs(state, p, new_id=lambda: uuid.uuid4().hex)
    assert sum(j.partition_id == running_leaf for j in again) == 1
    assert not {r.filename for r in jobs[0].inputs} & {r.filename for j in again
                                                        for r in j.inputs}


def test_only_unassigned_references_of_leaves_are_planned() -> None:
    state = plan_state(["m"])
    left = state.leaf_partitions()[0].id
    at_root = add(state, ROOT_PARTITION_ID, 10, 10, 10)
    add(state, left, 10, 10, 10, 10)
    p = props(compaction__strategy="basic", compaction__batch_size=2)
    jobs = plan_compaction_jobs(state, p, new_id=counter())
    assert len(jobs) == 2 and {j.partition_id for j in jobs} == {left}
    assert not {r.filename for j in jobs for r in j.inputs} & set(at_root)
    _apply(state, AssignJobIds(assignments(jobs[:1])))
    again = plan_compaction_jobs(state, p, new_id=lambda: "x")
    assert len(again) == 1
    assert {r.filename for r in again[0].inputs} == {r.filename for r in jobs[1].inputs}
    assert assignments(jobs[:1]) == [JobAssignment(jobs[0].job_id, left,
                                                   tuple(r.filename for r in jobs[0].inputs))]


def test_offline_tables_get_no_jobs() -> None:
    state = plan_state()
    add(state, ROOT_PARTITION_ID, *[10] * 12)
    assert plan_compaction_jobs(state, props())
    _apply(state, SetOnline(False))
    assert plan_compaction_jobs(state, props()) == []
    assert plan_compaction_jobs(state, props(compaction__strategy="basic")) == []


def test_plan_reference_splits_pushes_one_level_with_estimates() -> None:
    state = plan_state(["g", "p"])  # root at "p": left (split at "g") and right leaf
    root = state.partitions[ROOT_PARTITION_ID]
    left_id, right_id = root.children
    assert not state.partitions[left_id].is_leaf and state.partitions[right_id].is_leaf
    names = add(state, ROOT_PARTITION_ID, 1000, 500)
    assigned = add(state, ROOT_PARTITION_ID, 70)
    _apply(state, AssignJobIds([JobAssignment("j1", ROOT_PARTITION_ID, tuple(assigned))]))
    leaf_names = add(state, right_id, 5)
    calls: list[tuple[str, Region]] = []

    def estimate(ref: FileReference, region: Region) -> int:
        calls.append((ref.filename, region))
        return 300 if region.max == ("p",) else 10**9  # the right estimate is clamped

    splits = plan_reference_splits(state, estimate)
    assert {s.filename for s in splits} == set(names)  # assigned and leaf refs stay put
    for s in splits:
        assert s.from_partition == ROOT_PARTITION_ID
        records = state.references(ROOT_PARTITION_ID)[s.filename].records
        by_pid = {t.partition_id: t for t in s.to}
        assert set(by_pid) == {left_id, right_id}  # one level down only
        assert by_pid[left_id].records == 300
        assert by_pid[right_id].records == records
        assert all(t.approximate and t.job_id is None and t.filename == s.filename
                   for t in s.to)
    assert {f for f, _ in calls} == set(names)
    assert leaf_names[0] not in {s.filename for s in splits}
    # applying it then pushing again moves the left references one more level
    _apply(state, SplitFileReferences(splits))
    assert set(state.references(ROOT_PARTITION_ID)) == set(assigned)
    second = plan_reference_splits(state, lambda r, g: 1)
    assert {s.from_partition for s in second} == {left_id}
    assert {t.partition_id for s in second for t in s.to} == \
        set(state.partitions[left_id].children)
    _apply(state, SplitFileReferences(second))
    assert plan_reference_splits(state, lambda r, g: 1) == []


# ---- execution -------------------------------------------------------------------------------
def test_compact_merges_inputs_into_one_sorted_file(store_uri: tuple[str, dict[str, Any]]
                                                    ) -> None:
    uri, options = store_uri
    table = make_table(uri, options, **{"compaction.strategy": "basic",
                                        "compaction.batch_size": 4})
    ref = Reference(SCHEMA)
    ingest_files(table, ref, 4, 250)
    inputs = table.files()
    assert len(inputs) == 4
    result = table.compact()
    assert (result.jobs_created, result.jobs_committed, result.jobs_failed) == (1, 1, 0)
    assert result.rows_in == result.rows_out == 1000
    (out,) = table.files()
    assert out.records == sum(r.records for r in inputs) == 1000
    assert not out.approximate and out.job_id is None
    assert out.filename not in {r.filename for r in inputs}
    data = read_object(table, out.filename)
    assert data.num_rows == 1000
    assert_sorted_file(data)
    assert result_rows(data, KEYS) == ref.query()  # exactly the inputs' records
    sorting = pq.ParquetFile(io.BytesIO(table._handle.objects.get(out.filename))).metadata \
        .row_group(0).sorting_columns
    # sorted by the keys, then the hidden record sequence (the last column)
    assert [c.column_index for c in sorting] == [0, 1, len(SCHEMA.field_names)]
    sample = read_object(table, sample_name(out.filename))
    assert sample.num_rows > 0 and sum(sample.column(COUNT).to_pylist()) == 1000
    assert set(key_tuples(sample, ["key"])) <= set(key_tuples(data, ["key"]))
    assert_matches(table.query(), ref)
    assert_matches(table.query(ranges=[sd.Range("f", "p")]), ref,
                   ranges=[sd.Range("f", "p")])
    # inputs are unreferenced now, not yet deleted
    assert set(table.state().unreferenced) == {r.filename for r in inputs}
    assert {r.filename for r in inputs} <= data_keys(table)
    # nothing more to do
    again = table.compact()
    assert not again.did_work


def test_compaction_after_split_keeps_rows_of_each_partition(
        store_uri: tuple[str, dict[str, Any]]) -> None:
    uri, options = store_uri
    table = make_table(uri, options, **{"compaction.strategy": "basic",
                                        "compaction.batch_size": 3,
                                        "partition.split.threshold": 500})
    ref = Reference(SCHEMA)
    ingest_files(table, ref, 3, 300, seed=1)
    shared = {r.filename for r in table.files()}
    assert table.split().splits == 1
    # references move down; the children now share the three files (estimated counts)
    assert push_down_references(table._handle) == 3
    refs = table.files()
    assert {r.filename for r in refs} == shared and all(r.approximate for r in refs)
    assert_matches(table.query(), ref)
    second = table.compact()
    assert (second.jobs_created, second.jobs_committed) == (2, 2)
    leaves = [p for p in table.partitions() if p.is_leaf]
    outs = table.files()
    assert len(outs) == 2 and {r.partition_id for r in outs} == {p.id for p in leaves}
    for p in leaves:
        (out,) = [r for r in outs if r.partition_id == p.id]
        data = read_object(table, out.filename)
        expected = region_rows(ref, p.region)
        assert result_rows(data, KEYS) == expected  # only rows of its own region
        assert out.records == data.num_rows == len(expected) and not out.approximate
        assert_sorted_file(data)
    assert sum(r.records for r in outs) == 900
    assert_matches(table.query(), ref)


def test_shared_file_jobs_keep_only_their_partition(tmp_path: Path) -> None:
    table = make_table(tmp_path, split_points=["h", "q"],
                       **{"ingest.write_strategy": "shared_file",
                          "compaction.strategy": "basic", "compaction.batch_size": 2})
    ref = Reference(SCHEMA)
    ingest_files(table, ref, 2, 400, seed=2)
    refs = table.files()
    assert len({r.filename for r in refs}) == 2 and len(refs) == 6  # each file in 3 leaves
    result = table.compact()
    assert result.jobs_committed == 3
    for p in (p for p in table.partitions() if p.is_leaf):
        (out,) = [r for r in table.files() if r.partition_id == p.id]
        data = read_object(table, out.filename)
        assert result_rows(data, KEYS) == region_rows(ref, p.region)
        assert out.records == data.num_rows
    assert_matches(table.query(), ref)


def test_max_merge_inputs_merges_in_rounds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                           ) -> None:
    table = make_table(tmp_path, **{"compaction.strategy": "basic", "compaction.batch_size": 5,
                                    "compaction.max_merge_inputs": 2})
    ref = Reference(SCHEMA)
    ingest_files(table, ref, 5, 200, seed=3)
    widths: list[int] = []
    real = job_module._merged_batches

    def spy(paths: Any, *args: Any, **kw: Any) -> Any:
        widths.append(len(paths))
        return real(paths, *args, **kw)

    monkeypatch.setattr(job_module, "_merged_batches", spy)
    result = table.compact()
    assert (result.jobs_committed, result.rows_out) == (1, 1000)
    assert len(widths) >= 3 and max(widths) <= 2  # several rounds, never more than 2 at once
    (out,) = table.files()
    data = read_object(table, out.filename)
    assert_sorted_file(data)
    assert result_rows(data, KEYS) == ref.query()
    assert_matches(table.query(), ref)


def test_offline_table_is_not_compacted(tmp_path: Path) -> None:
    table = make_table(tmp_path, **{"compaction.strategy": "basic", "compaction.batch_size": 2})
    ref = Reference(SCHEMA)
    ingest_files(table, ref, 2, 50)
    v = table.set_online(False)
    assert table.set_online(False) == v == table.version  # already offline: no commit
    before = table.files()
    assert not table.compact().did_work
    assert table.files() == before
    table.set_online(True)
    assert table.compact().jobs_committed == 1


def test_compaction_events(tmp_path: Path) -> None:
    table = make_table(tmp_path, **{"compaction.strategy": "basic", "compaction.batch_size": 3})
    ref = Reference(SCHEMA)
    ingest_files(table, ref, 3, 100)
    table.compact()
    events = list(table._handle.status.events("compaction"))
    assert [e.status for e in events] == ["created", "started", "finished", "committed"]
    assert len({e.job_id for e in events}) == 1
    assert events[0].details["inputs"] == 3 and events[0].details["records_in"] == 300
    assert events[2].details["rows_in"] == 300 and events[2].details["rows_out"] == 300
    (row,) = table._handle.status.jobs("compaction")
    assert row["status"] == "committed" and row["rows_out"] == 300
    assert row["partition_id"] == ROOT_PARTITION_ID
    assert [r["kind"] for r in table._handle.status.jobs("ingest")] == ["ingest"] * 3


# ---- racing runners --------------------------------------------------------------------------
def _assert_consumed_once(table: sd.Table, originals: set[str]) -> None:
    replaced = committed(table, ReplaceFileReferences)
    inputs = [(t.partition_id, f) for t in replaced for f in t.inputs]
    assert len(inputs) == len(set(inputs)), "an input reference was committed twice"
    assert originals <= {f for _, f in inputs}
    assert len({t.job_id for t in replaced}) == len(replaced)


def test_two_thread_runners_never_double_commit(tmp_path: Path) -> None:
    table = make_table(tmp_path, **{"compaction.strategy": "basic", "compaction.batch_size": 2,
                                    "compaction.threads": 2})
    ref = Reference(SCHEMA)
    ingest_files(table, ref, 8, 100, seed=4)
    originals = {r.filename for r in table.files()}
    runners = [reopen(table), reopen(table)]
    results = [r for rs in run_together(runners, lambda t: [t.compact() for _ in range(4)])
               for r in rs]
    assert sum(r.jobs_failed for r in results) == 0
    while table.compact().did_work:
        pass
    _assert_consumed_once(table, originals)
    files = table.files()
    assert len(files) == 1 and files[0].records == 800
    assert_matches(table.query(), ref)


@pytest.mark.slow  # two runner processes racing: the full lane
def test_two_process_runners_never_double_commit(tmp_path: Path) -> None:
    table = make_table(tmp_path, **{"compaction.strategy": "basic", "compaction.batch_size": 2})
    ref = Reference(SCHEMA)
    ingest_files(table, ref, 6, 100, seed=5)
    originals = {r.filename for r in table.files()}
    go = tmp_path / "go"
    script = textwrap.dedent(f"""
        import json, os, time, sediment as sd
        t = sd.Store.open({str(tmp_path)!r}).table({table.name!r})
        while not os.path.exists({str(go)!r}):
            time.sleep(0.01)
        out = []
        for _ in range(3):
            r = t.compact()
            out.append([r.jobs_created, r.jobs_committed, r.jobs_failed])
        print(json.dumps(out))
    """)
    procs = [subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    time.sleep(0.2)
    go.write_text("go")
    outs = [p.communicate(timeout=90) for p in procs]
    for p, (out, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err
        assert all(failed == 0 for _, _, failed in json.loads(out))
    while table.compact().did_work:
        pass
    _assert_consumed_once(table, originals)
    assert [r.records for r in table.files()] == [600]
    assert_matches(table.query(), ref)


def test_job_with_replaced_inputs_fails_and_leaves_an_orphan(tmp_path: Path) -> None:
    table = make_table(tmp_path, **{"compaction.strategy": "basic", "compaction.batch_size": 3})
    ref = Reference(SCHEMA)
    ingest_files(table, ref, 3, 100, seed=6)
    (job,) = create_jobs(table._handle)
    state = table._handle.states.head()
    region = state.partitions[job.partition_id].region
    # a runner that lost track of the job: writes its output, commits too late
    late = run_compaction_job(table._handle.objects, table.schema, table.properties, job, region)
    assert late.written is not None
    late.handed_over()  # the runner lost it: nothing protects it but its age now
    first = run_job(reopen(table)._handle, state, job)
    assert first.committed and first.rows_out == 300
    with pytest.raises(TransactionInvalidError, match="no longer assigned"):
        table._handle.states.commit(ReplaceFileReferences(
            job.job_id, job.partition_id, tuple(r.filename for r in job.inputs),
            FileReference(late.written.filename, job.partition_id, late.written.rows)))
    # the runner path reports it as failed, with the reason
    second = run_job(table._handle, state, job)
    assert not second.committed and second.error is not None
    assert second.error.startswith("TransactionInvalidError")
    failed = [e for e in table._handle.status.events("compaction") if e.status == "failed"]
    assert len(failed) == 1 and "no longer assigned" in failed[0].details["reason"]
    assert table._handle.status.jobs("compaction")[-1]["status"] in ("failed", "committed")
    # exactly one output is referenced; the runner deleted its refused one at once (certainly
    # not committed); the late one, committed by hand, is an orphan
    (out,) = table.files()
    assert out.records == 300
    assert_matches(table.query(), ref)
    known = set(table.state().refcount) | set(table.state().unreferenced)
    orphans = {k for k in data_keys(table)
               if k.endswith(".parquet") and not k.endswith(".sample.parquet")} - known
    assert orphans == {late.written.filename}
    assert table.gc().orphans_deleted == 0  # younger than the default orphan timeout
    g = table.gc(orphan_timeout=0)
    assert g.orphans_deleted == 1
    left = data_keys(table)
    assert not set(with_sidecars(orphans)) & left
    assert set(with_sidecars([out.filename])) <= left
    assert_matches(table.query(), ref)


# ---- killed jobs -----------------------------------------------------------------------------
def _orphans(table: sd.Table) -> set[str]:
    st = table.state()
    known = set(st.refcount) | set(st.unreferenced)
    return {k for k in data_keys(table)
            if k.endswith(".parquet") and not k.endswith(".sample.parquet") and k not in known}


def test_killed_compaction_loses_nothing_and_is_rerun(tmp_path: Path) -> None:
    table = make_table(tmp_path, **{"compaction.strategy": "basic", "compaction.batch_size": 2})
    ref = Reference(SCHEMA)
    ingest_files(table, ref, 4, 150, seed=7)
    jobs = create_jobs(table._handle)
    assert len(jobs) == 2
    state = table._handle.states.head()
    for j in jobs:  # run but "die" before committing
        out = run_compaction_job(table._handle.objects, table.schema, table.properties, j,
                                 state.partitions[j.partition_id].region)
        assert out.written is not None
        pending.release(table._handle.objects, [out.written.filename])  # its writer is gone
    assert len(_orphans(table)) == 2
    assert_matches(table.query(), ref)
    # not stale yet: nothing runs, the inputs stay assigned
    r = table.compact()
    assert r.jobs_created == 0 and r.jobs_committed == 0
    assert all(f.job_id is not None for f in table.files())
    table.set_properties({"compaction.job_timeout_seconds": 0})
    r = table.compact()
    assert r.jobs_committed == 2 and r.jobs_failed == 0
    assert table.state().jobs == {}
    assert sorted(f.records for f in table.files()) == [300, 300]
    assert_matches(table.query(), ref)
    table.set_properties({"gc.delay_seconds": 0,
                          "retention.seconds": 0, "gc.clock_skew_seconds": 0})
    g = table.gc(orphan_timeout=0)
    assert g.orphans_deleted == 2 and g.deleted == 4
    assert _orphans(table) == set()
    referenced = {f.filename for f in table.files()}
    assert data_keys(table) == set(with_sidecars(referenced))
    assert_matches(table.query(), ref)


@pytest.mark.slow  # a compaction process killed mid-job: the full lane
def test_killed_compaction_process(tmp_path: Path) -> None:
    table = make_table(tmp_path, **{"compaction.strategy": "basic", "compaction.batch_size": 3})
    ref = Reference(SCHEMA)
    ingest_files(table, ref, 3, 200, seed=8)
    script = textwrap.dedent(f"""
        import sys, time, sediment as sd
        from sediment.compaction.job import run_compaction_job
        from sediment.compaction.runner import compact
        t = sd.Store.open({str(tmp_path)!r}).table({table.name!r})
        def runner(table, state, jobs, *, on_done=None, head=None):  # a JobRunner
            for j in jobs:
                run_compaction_job(table.objects, table.schema, table.properties, j,
                                   state.partitions[j.partition_id].region)
            print("written", flush=True)
            time.sleep(120)  # killed here, before any commit
            return []
        compact(t._handle, runner=runner)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.strip() == "written", proc.stderr.read() if proc.stderr else ""
    finally:
        proc.kill()
        proc.communicate(timeout=30)
    assert len(_orphans(table)) == 1
    assert all(f.job_id is not None for f in table.files())
    assert_matches(table.query(), ref)
    table.set_properties({"compaction.job_timeout_seconds": 0})
    r = table.compact()
    assert r.jobs_committed == 1
    assert [f.records for f in table.files()] == [600]
    assert_matches(table.query(), ref)
    # the killed process's lease still protects its output until the lease times out
    assert table.gc(orphan_timeout=0).orphans_deleted == 0
    assert gc(table._handle, now=time.time() + 2 * 3600).orphans_deleted == 1
    assert _orphans(table) == set()
    assert_matches(table.query(), ref)


# ---- more execution cases ----------------------------------------------------------------------
def test_racing_runners_rerunning_each_others_jobs(tmp_path: Path) -> None:
    """With no job timeout every runner re-runs every uncommitted job: first commit wins."""
    table = make_table(tmp_path, **{"compaction.strategy": "basic", "compaction.batch_size": 2,
                                    "compaction.job_timeout_seconds": 0,
                                    "compaction.threads": 1})
    ref = Reference(SCHEMA)
    ingest_files(table, ref, 6, 80, seed=9)
    originals = {r.filename for r in table.files()}
    runners = [reopen(table) for _ in range(3)]
    reasons = [e for rs in run_together(runners, lambda t: [t.compact() for _ in range(3)],
                                        timeout=90) for r in rs for e in r.errors]
    assert all("no longer assigned" in r for r in reasons), reasons  # duplicates lose cleanly
    while table.compact().did_work:
        pass
    _assert_consumed_once(table, originals)
    assert sum(r.records for r in table.files()) == 480
    assert table.state().jobs == {}
    assert_matches(table.query(), ref)
    table.set_properties({"gc.delay_seconds": 0,
                          "retention.seconds": 0, "gc.clock_skew_seconds": 0})
    table.gc(orphan_timeout=0)
    referenced = set(table.state().refcount)
    assert data_keys(table) == set(with_sidecars(referenced))


def test_job_committing_after_its_partition_split(tmp_path: Path) -> None:
    table = make_table(tmp_path, **{"compaction.strategy": "basic", "compaction.batch_size": 3,
                                    "partition.split.threshold": 100})
    ref = Reference(SCHEMA)
    ingest_files(table, ref, 3, 100, seed=10)
    (job,) = create_jobs(table._handle)
    state = table._handle.states.head()
    assert table.split().splits == 1  # the leaf splits under the running job
    result = run_job(table._handle, state, job)
    assert result.committed
    (out,) = table.files()
    assert out.partition_id == ROOT_PARTITION_ID and out.records == 300
    assert_matches(table.query(), ref)
    while table.compact().did_work:
        pass
    leaves = [p for p in table.partitions() if p.is_leaf]
    assert {r.partition_id for r in table.files()} <= {p.id for p in leaves}
    for p in leaves:
        n = sum(r.records for r in table.files() if r.partition_id == p.id)
        assert abs(n - len(region_rows(ref, p.region))) <= 10  # a pushed-down estimate
    assert_matches(table.query(), ref)


def test_job_keeping_no_rows_commits_no_file(tmp_path: Path) -> None:
    from sediment.core.transactions import SplitPartition

    table = make_table(tmp_path, **{"compaction.strategy": "basic", "compaction.batch_size": 2})
    ref = Reference(SCHEMA)
    for i in range(2):
        data = rows(60, 20 + i)
        data = data.set_column(0, "key", pa.array([f"a{j:03d}" for j in range(60)]))
        table.ingest(data)
        ref.add(data)
    inputs = {r.filename for r in table.files()}
    table._handle.states.commit(SplitPartition(ROOT_PARTITION_ID, ("m",), "left", "right"))
    result = table.compact()
    assert result.references_pushed_down == 2 and result.jobs_committed == 2
    files = table.files()
    assert {r.partition_id for r in files} == {"left"} and len(files) == 1
    assert files[0].records == 120
    right_jobs = [t for t in committed(table, ReplaceFileReferences)
                  if t.partition_id == "right"]
    assert len(right_jobs) == 1 and right_jobs[0].output is None
    assert set(right_jobs[0].inputs) == inputs
    assert set(table.state().unreferenced) == inputs
    assert_matches(table.query(), ref)


def test_compaction_iterators_do_not_change_query_results(tmp_path: Path) -> None:
    latest = json.dumps([{"type": "keep_latest", "by": "timestamp"}])
    table = make_table(tmp_path, **{"compaction.strategy": "basic", "compaction.batch_size": 3,
                                    "compaction.iterators": latest})
    frames = []
    for i in range(3):
        data = rows(200, 30 + i)
        keys = pa.array([f"k{j % 40:02d}" for j in range(200)])
        ts = pa.array([i * 1000 + j for j in range(200)], pa.int64())  # unique per key
        frames.append(data.set_column(0, "key", keys).set_column(1, "timestamp", ts))
        table.ingest(frames[-1])
    df = pa.concat_tables(frames).to_pandas()
    want_df = df.loc[df.groupby("key")["timestamp"].idxmax()].sort_values("key")
    want = Reference(SCHEMA)
    want.add(pa.Table.from_pandas(want_df, schema=SCHEMA.to_arrow(), preserve_index=False))
    assert_matches(table.query(), want)
    result = table.compact()
    assert result.rows_in == 600 and result.rows_out == 40
    (out,) = table.files()
    assert out.records == 40
    assert_matches(table.query(), want)


@pytest.mark.parametrize("kind", ["string", "binary"])
def test_compaction_orders_awkward_keys_by_bytes(tmp_path: Path, kind: str) -> None:
    key_type = pa.string() if kind == "string" else pa.binary()
    schema = sd.Schema(row_keys=[("key", key_type)], sort_keys=[("ts", pa.int64())],
                       values=[("value", pa.string()), ("n", pa.int64())])
    table = sd.Store.open(str(tmp_path), create=True).create_table(
        "awkward", schema, properties={"state.cache.refresh_seconds": 0,
                                       "compaction.strategy": "basic",
                                       "compaction.batch_size": 4})
    rng = random.Random(3)
    pool = string_key_pool(rng, 30) if kind == "string" else \
        AWKWARD_BINARIES + [bytes(rng.randrange(256) for _ in range(3)) for _ in range(20)]
    ref = Reference(schema)
    for _ in range(4):
        data = random_batch(rng, schema, 150, {"key": pool, "ts": INT64_EXTREMES})
        table.ingest(data)
        ref.add(data)
    assert table.compact().jobs_committed == 1
    (out,) = table.files()
    data = read_object(table, out.filename)
    keys = [order_key(k) for k in key_tuples(data, ["key", "ts"])]
    assert keys == sorted(keys)
    assert result_rows(data, ref.key_names) == ref.query()
    assert_matches(table.query(), ref)
