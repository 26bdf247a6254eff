"""The ingest batcher: pure planning, runs through standard ingest (local and S3 stores),
exactly-once across crashes and a recovering run, the CLI, and a job routed to Spark bulk
import on the local session."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from spark_helpers import (
    SCHEMA,
    assert_same_rows,
    input_location,
    leaves,
    make_frame,
    open_store,
    write_input,
)
from typer.testing import CliRunner

import sediment as sd
from sediment.ingest import batcher, standard
from sediment.ingest.batcher import Batch, Request, plan_batches, route_for
from sediment.state.store import StateStore

PROPS = {"batcher.max_files": 3, "batcher.max_bytes": 100, "batcher.max_age_seconds": 60.0}


def _req(i: int, size: int = 10, at: float = 1000.0) -> Request:
    return Request(f"{i:04d}", f"/in/{i}.parquet", size, at + i)


# ---- planning (pure) -------------------------------------------------------------------------
def test_full_groups_by_count_are_released_and_a_young_partial_group_waits() -> None:
    reqs = [_req(i) for i in range(7)]
    batches = plan_batches(list(reversed(reqs)), PROPS, now=1010.0)  # any input order
    assert [[r.id for r in b.requests] for b in batches] == [["0000", "0001", "0002"],
                                                              ["0003", "0004", "0005"]]
    assert [b.reason for b in batches] == ["files", "files"]
    # once the oldest waiting request is old enough, the partial group goes too
    later = plan_batches(reqs, PROPS, now=1006.0 + 60.0)
    assert [b.files for b in later] == [3, 3, 1] and later[-1].reason == "age"
    assert plan_batches(reqs, PROPS, now=1006.0 + 59.9)[-1].files == 3


def test_groups_by_size_and_a_big_file_goes_alone() -> None:
    reqs = [_req(0, 40), _req(1, 40), _req(2, 40), _req(3, 500), _req(4, 10)]
    batches = plan_batches(reqs, PROPS, now=1001.0)
    assert [(b.files, b.bytes, b.reason) for b in batches] == [(2, 80, "bytes"),
                                                                (1, 40, "bytes"),
                                                                (1, 500, "bytes")]
    aged = plan_batches(reqs, PROPS, now=2000.0)
    assert [(b.files, b.bytes, b.reason) for b in aged][-1] == (1, 10, "age")
    exact = plan_batches([_req(0, 50), _req(1, 50)], PROPS, now=1000.0)
    assert [(b.files, b.reason) for b in exact] == [(2, "bytes")]  # full at exactly max


def test_nothing_pending_plans_nothing() -> None:
    assert plan_batches([], PROPS, now=1e12) == []


def test_route_by_size_and_spark() -> None:
    props = {"batcher.bulk_import_min_bytes": 100}
    big = Batch((_req(0, 60), _req(1, 40)), "files")
    small = Batch((_req(0, 99),), "age")
    assert route_for(big, props, True) == "bulk_import"
    assert route_for(small, props, True) == "ingest"
    assert route_for(big, props, False) == "ingest"


@settings(max_examples=200, deadline=None)
@given(sizes=st.lists(st.integers(0, 150), max_size=25), max_files=st.integers(1, 5),
       max_bytes=st.integers(1, 200), age=st.floats(0, 100), now=st.floats(0, 150))
def test_planning_properties(sizes: list[int], max_files: int, max_bytes: int, age: float,
                             now: float) -> None:
    reqs = [Request(f"{i:04d}", f"f{i}", s, float(i)) for i, s in enumerate(sizes)]
    props = {"batcher.max_files": max_files, "batcher.max_bytes": max_bytes,
             "batcher.max_age_seconds": age}
    batches = plan_batches(reqs, props, now)
    flat = [r for b in batches for r in b.requests]
    assert flat == reqs[:len(flat)]  # oldest first, nothing skipped or repeated
    for b in batches:
        assert 1 <= b.files <= max_files
        assert b.bytes <= max_bytes or b.files == 1
        if b.reason == "age":
            assert b is batches[-1] and now - b.oldest >= age
    rest = reqs[len(flat):]
    if rest:  # what waits is one group that is neither full nor old enough
        assert len(rest) < max_files and sum(r.size for r in rest) < max_bytes
        assert now - rest[0].submitted < age


# ---- running with standard ingest ------------------------------------------------------------
def _table(store: sd.Store, **props: Any) -> sd.Table:
    return store.create_table("events", SCHEMA, split_points=[("k020",)],
                              properties={**PROPS, "batcher.max_bytes": 10 ** 9, **props})


def _no_leftovers(table: sd.Table) -> None:
    assert list(table._handle.objects.list(batcher.CLAIMED)) == []
    assert batcher.pending(table) == []


def test_run_ingests_due_jobs_with_standard_ingest(store_uri: Any, tmp_path: Path) -> None:
    store = open_store(store_uri)
    table = _table(store)
    fs, base, uri = input_location(store, tmp_path)
    frames = [make_frame(200, seed=40 + i, start=1000 * i) for i in range(5)]
    names = ["a.parquet", "b.parquet", "c.csv", "d.jsonl", "e.parquet"]
    for name, frame in zip(names, frames, strict=True):
        write_input(fs, base, name, frame)

    submitted = batcher.submit(table, [f"{uri}/*.parquet", f"{uri}/c.csv", f"{uri}/d.jsonl"])
    assert len(submitted) == 5
    sizes = {r.path.rsplit("/", 1)[1]: r.size for r in batcher.pending(table)}
    assert sizes == {n: fs.get_file_info(f"{base}/{n}").size for n in names}
    assert batcher.status(table)["pending"]["requests"] == 5

    first = batcher.run(table)  # one full job of 3; 2 requests wait (young, not full)
    assert [(o.state, o.route, o.files) for o in first.jobs] == [("committed", "ingest", 3)]
    assert first.waiting == 2
    assert len(batcher.pending(table)) == 2
    second = batcher.run(table, now=submitted[0].submitted + 61)  # old enough now
    assert [(o.state, o.files) for o in second.jobs] == [("committed", 2)]
    assert second.jobs[0].version == table.version

    _no_leftovers(table)
    assert_same_rows(table.query(), *frames)
    status = batcher.status(table)
    assert status["pending"]["requests"] == 0 and status["running"] == []
    assert [j["state"] for j in status["recent"]] == ["committed", "committed"]
    assert batcher.run(table, now=1e12).jobs == ()  # nothing left


def test_bad_input_fails_its_job_and_is_reported(tmp_path: Path) -> None:
    store = sd.Store.open(str(tmp_path / "store"), create=True)
    table = _table(store, **{"batcher.max_files": 1})
    good, bad = make_frame(100, seed=50), make_frame(100, seed=51, start=500)
    write_input(pafs.LocalFileSystem(), str(tmp_path), "good.parquet", good)
    bad_table = pa.Table.from_pandas(bad.assign(key=None), preserve_index=False)
    pq.write_table(bad_table, str(tmp_path / "bad.parquet"))
    batcher.submit(table, [str(tmp_path / "bad.parquet")])
    batcher.submit(table, [str(tmp_path / "good.parquet")])

    result = batcher.run(table)

    assert [o.state for o in result.jobs] == ["failed", "committed"]
    assert "'key'" in (result.jobs[0].error or "")
    failed = batcher.status(table)["failed_requests"]
    assert [f["path"] for f in failed] == [str(tmp_path / "bad.parquet")]
    _no_leftovers(table)
    assert_same_rows(table.query(), good)
    with pytest.raises(sd.errors.DataError, match="does not exist"):
        batcher.submit(table, [str(tmp_path / "missing.parquet")])
    with pytest.raises(sd.errors.DataError, match="cannot tell the format"):
        (tmp_path / "notes.txt").write_text("x")
        batcher.submit(table, [str(tmp_path / "notes.txt")])
    assert batcher.pending(table) == []


def _one_request(tmp_path: Path, table: sd.Table, seed: int = 60) -> pd.DataFrame:
    frame = make_frame(150, seed=seed, start=seed * 1000)
    write_input(pafs.LocalFileSystem(), str(tmp_path), f"in-{seed}.parquet", frame)
    batcher.submit(table, [str(tmp_path / f"in-{seed}.parquet")])
    return frame


def test_crash_after_commit_is_never_ingested_twice(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    store = sd.Store.open(str(tmp_path / "store"), create=True)
    table = _table(store, **{"batcher.max_age_seconds": 0.0})
    frame = _one_request(tmp_path, table)
    real_save = batcher._save_job

    def crash_on_committed(table: Any, job: dict[str, Any], **changes: Any) -> None:
        if changes.get("state") == "committed":
            raise KeyboardInterrupt("crash after the commit")
        real_save(table, job, **changes)

    monkeypatch.setattr(batcher, "_save_job", crash_on_committed)
    with pytest.raises(KeyboardInterrupt):
        batcher.run(table)
    monkeypatch.setattr(batcher, "_save_job", real_save)
    version = table.version
    assert_same_rows(table.query(), frame)

    soon = batcher.run(table)  # the job may still be running: left alone
    assert soon.jobs == () and soon.recovered == ()
    late = batcher.run(table, now=table.state().last_update + 3601)
    assert [(o.state, o.version) for o in late.recovered] == [("committed", version)]
    assert late.jobs == ()
    assert table.version == version
    _no_leftovers(table)
    assert_same_rows(table.query(), frame)


def test_crash_before_commit_requeues(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = sd.Store.open(str(tmp_path / "store"), create=True)
    table = _table(store, **{"batcher.max_age_seconds": 0.0})
    frame = _one_request(tmp_path, table)

    def crash(*args: Any, **kwargs: Any) -> Any:
        raise KeyboardInterrupt("crash before the commit")

    # the files are staged and recorded; the process dies as it commits them
    monkeypatch.setattr(StateStore, "commit", crash)
    with pytest.raises(KeyboardInterrupt):
        batcher.run(table)
    monkeypatch.undo()
    assert table.query().num_rows == 0
    [job] = batcher.jobs(table)
    assert job["state"] == "staged" and job["files"]

    result = batcher.run(table, now=job["updated"] + 3601)
    assert [o.state for o in result.recovered] == ["requeued"]
    assert [o.state for o in result.jobs] == ["committed"]  # ingested again, once
    for f in job["files"]:  # the dead job's files were deleted
        assert not table._handle.objects.exists(f)
    _no_leftovers(table)
    assert_same_rows(table.query(), frame)


def test_a_job_given_up_by_recovery_cannot_commit(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A run that is slower than the job timeout loses to the run that recovers its job."""
    store = sd.Store.open(str(tmp_path / "store"), create=True)
    table = _table(store, **{"batcher.max_age_seconds": 0.0})
    frame = _one_request(tmp_path, table)
    real_stage = standard.stage_batches
    recovered: list[Any] = []

    def slow_stage(*args: Any, **kwargs: Any) -> Any:
        staged = real_stage(*args, **kwargs)
        other = store.table("events")  # meanwhile another run decides this job is dead
        recovered.extend(batcher.recover(other, now=batcher.jobs(other)[0]["updated"] + 3601))
        return staged

    monkeypatch.setattr(standard, "stage_batches", slow_stage)
    result = batcher.run(table)
    monkeypatch.undo()

    assert [o.state for o in recovered] == ["requeued"]
    assert [o.state for o in result.jobs] == ["aborted"]
    assert table.query().num_rows == 0
    assert len(batcher.pending(table)) == 1
    assert [o.state for o in batcher.run(table).jobs] == ["committed"]
    _no_leftovers(table)
    assert_same_rows(table.query(), frame)


def test_crash_while_claiming_requeues(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = sd.Store.open(str(tmp_path / "store"), create=True)
    table = _table(store, **{"batcher.max_age_seconds": 0.0})
    frames = [_one_request(tmp_path, table, seed) for seed in (90, 91)]
    real_claim = batcher._claim

    def claim_one_then_crash(table: Any, job_id: str, requests: Any) -> Any:
        real_claim(table, job_id, requests[:1])
        raise KeyboardInterrupt("crash while claiming")

    monkeypatch.setattr(batcher, "_claim", claim_one_then_crash)
    with pytest.raises(KeyboardInterrupt):
        batcher.run(table)
    monkeypatch.undo()
    assert len(batcher.pending(table)) == 1  # the other one is claimed by the dead job
    [job] = batcher.jobs(table)

    result = batcher.run(table, now=job["updated"] + 3601)
    assert [o.state for o in result.recovered] == ["requeued"]
    assert [(o.state, o.files) for o in result.jobs] == [("committed", 2)]
    _no_leftovers(table)
    assert_same_rows(table.query(), *frames)


def test_a_request_is_claimed_by_one_job_only(tmp_path: Path) -> None:
    store = sd.Store.open(str(tmp_path / "store"), create=True)
    table = _table(store)
    _one_request(tmp_path, table)
    reqs = batcher.pending(table)
    assert batcher._claim(table._handle, "job-a", reqs) == reqs
    assert batcher._claim(table._handle, "job-b", reqs) == []
    batcher._release(table._handle, "job-a")  # job-a finished: the request is gone for good
    assert batcher._claim(table._handle, "job-b", reqs) == []
    assert batcher.pending(table) == []


# ---- the CLI ---------------------------------------------------------------------------------
def test_cli_submit_status_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from sediment.cli import app

    monkeypatch.delenv("SEDIMENT_STORE", raising=False)
    root = str(tmp_path / "store")
    store = sd.Store.open(root, create=True)
    # the CLI commits through its own handle: this one checks the log at every query
    table = _table(store, **{"state.cache.refresh_seconds": 0})
    frames = [make_frame(80, seed=70 + i, start=i * 1000) for i in range(2)]
    for i, f in enumerate(frames):
        write_input(pafs.LocalFileSystem(), str(tmp_path), f"f{i}.jsonl", f)
    runner = CliRunner()

    def ok(*args: str) -> Any:
        res = runner.invoke(app, [*args, "--store", root, "--json"])
        assert res.exit_code == 0, res.output
        return json.loads(res.stdout)

    sub = ok("batcher", "submit", "events", str(tmp_path / "*.jsonl"))
    assert sub["files"] == 2
    status = ok("batcher", "status", "events")
    assert status["pending"]["requests"] == 2 and status["ready"] == []
    assert ok("batcher", "run", "events")["jobs"] == []  # not full, not old: waits
    table.set_properties({"batcher.max_age_seconds": 0})
    run = ok("batcher", "run", "events")
    assert [(j["state"], j["files"]) for j in run["jobs"]] == [("committed", 2)]
    assert_same_rows(table.query(), *frames)
    human = runner.invoke(app, ["batcher", "status", "events", "--store", root])
    assert human.exit_code == 0 and "committed" in human.stdout
    bad = runner.invoke(app, ["batcher", "submit", "events", str(tmp_path / "none-*.csv"),
                              "--store", root])
    assert bad.exit_code == 1 and "no files match" in bad.output


# ---- a job routed to Spark bulk import -------------------------------------------------------
@pytest.mark.spark
def test_big_job_goes_to_bulk_import_on_spark(spark_local: Any, tmp_path: Path) -> None:
    store = sd.Store.open(str(tmp_path / "store"), create=True)
    table = store.create_table("events", SCHEMA, properties={
        "batcher.max_files": 10, "batcher.max_age_seconds": 0.0,
        "batcher.bulk_import_min_bytes": 1, "bulk_import.target_leaf_rows": 400})
    frames = [make_frame(400, seed=80 + i, start=i * 1000) for i in range(3)]
    for i, f in enumerate(frames):
        write_input(pafs.LocalFileSystem(), str(tmp_path), f"big-{i}.parquet", f)
    batcher.submit(table, [str(tmp_path / "big-*.parquet")])
    before = table.version

    result = batcher.run(table, spark_local)

    assert [(o.state, o.route, o.files, o.rows) for o in result.jobs] == \
        [("committed", "bulk_import", 3, 1200)]
    assert len(leaves(table)) >= 3  # bulk import pre-split the table
    kinds = [h.kind for h in table.history() if h.version > before]
    assert kinds.count("add_files_with_splits") == 1  # the splits commit with the files
    [job] = batcher.jobs(table)
    assert job["version"] == result.jobs[0].version and job["files"]
    _no_leftovers(table)
    assert_same_rows(table.query(), *frames)
