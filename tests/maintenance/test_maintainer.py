"""The continuous maintainer (``maintain --loop``): jobs start while others run, a table keeps
its layout while ingest goes on, two maintainers never double-commit, failures are reported
without stopping the daemon, an unsplittable leaf is reported once."""

from __future__ import annotations

import functools
import random
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from test_maintenance import check_settled

import helpers
import sediment as sd
from helpers import rows
from reference import Reference, assert_matches
from sediment.core.state import ROOT_PARTITION_ID
from sediment.files.writer import with_sidecars
from sediment.maintenance.continuous import Maintainer

SCHEMA = sd.workload.benchmark_schema()


make_table = functools.partial(helpers.make_table, **{"parquet.row_group_rows": 128})


def run_in_thread(m: Maintainer, stop: threading.Event, reports: list[Any],
                  every: float = 0.2) -> threading.Thread:
    th = threading.Thread(target=m.run, kwargs={"report_every": every, "stop": stop,
                                                "on_report": reports.append})
    th.start()
    return th


@pytest.mark.slow  # a maintainer keeping up with a live ingest until it settles: the full lane
def test_keeps_up_with_ingest_and_settles(tmp_path: Path, monkeypatch: Any) -> None:
    import sediment.maintenance.split_pacing as split_pacing

    # leaves split as soon as they cross the threshold (not once they hold few files: this
    # run is too short for the wait, see test_a_leaf_over_the_threshold_splits_once_...)
    monkeypatch.setattr(split_pacing, "SPLIT_WAIT_SECONDS", 0.0)
    table = make_table(tmp_path, **{"partition.split.threshold": 3000,
                                    "compaction.batch_size": 6})
    ref = Reference(SCHEMA)
    stop = threading.Event()
    reports: list[Any] = []
    m = Maintainer(lambda: [sd.Store.open(str(tmp_path)).table(table.name)],
                   tick_seconds=0.02, gc_every=0.5)
    th = run_in_thread(m, stop, reports)
    most = 0
    try:
        for i in range(60):
            data = rows(300, seed=i)
            table.ingest(data)
            ref.add(data)
            st = table.state()
            most = max(most, max(len(st.references(p.id)) for p in st.leaf_partitions()))
            time.sleep(0.01)
    finally:
        stop.set()
        th.join(60)
    assert not th.is_alive()
    done = [r for rep in reports for r in rep]
    assert sum(int(r["jobs"]) for r in done) > 5 and sum(int(r["splits"]) for r in done) >= 2
    assert not any("error" in r for r in done), done
    assert len(table.state().leaf_partitions()) >= 3
    table.set_properties({"compaction.job_timeout_seconds": 0})
    table.maintain()
    check_settled(table, ref, random.Random(1))
    assert_matches(table.query(), ref)


@pytest.mark.slow  # two maintainers racing: the full lane
def test_two_maintainers_never_double_commit(tmp_path: Path) -> None:
    table = make_table(tmp_path, **{"compaction.strategy": "basic",
                                    "compaction.batch_size": 2,
                                    "compaction.job_timeout_seconds": 0.2,
                                    "partition.split.threshold": 2500})
    ref = Reference(SCHEMA)
    stop = threading.Event()
    reports: list[Any] = []
    handles = [Maintainer(lambda: [sd.Store.open(str(tmp_path)).table(table.name)],
                          tick_seconds=0.01) for _ in range(2)]
    threads = [run_in_thread(m, stop, reports) for m in handles]
    try:
        for i in range(40):
            data = rows(200, seed=100 + i)
            table.ingest(data)
            ref.add(data)
    finally:
        stop.set()
        for th in threads:
            th.join(60)
    table.set_properties({"compaction.job_timeout_seconds": 0})
    table.maintain()
    assert_matches(table.query(), ref)
    # every compaction commit replaced inputs still assigned to it: no row was merged twice
    kinds = [h.kind for h in table.history()]
    assert kinds.count("replace_file_references") > 5
    assert sum(r.records for r in table.files()) == len(ref.rows)


def test_failing_job_is_reported_and_not_rerun_every_tick(tmp_path: Path) -> None:
    table = make_table(tmp_path, **{"compaction.strategy": "basic",
                                    "compaction.batch_size": 2,
                                    "compaction.job_timeout_seconds": 30})
    for i in range(2):
        table.ingest(rows(50, seed=i))
    victim = table.files()[0].filename
    table._handle.objects.put(victim, b"not parquet")  # the job over it fails every time
    m = Maintainer(lambda: [table], tick_seconds=0.01, gc_every=3600)
    deadline = time.monotonic() + 0.5
    while time.monotonic() < deadline:
        m.tick()
        time.sleep(0.01)
    rep = m.report()
    m.close()
    (row,) = rep
    assert row["failed"] == 1 and row["jobs"] == 0 and int(row["ticks"]) > 10
    started = [e for e in table._handle.status.events("compaction") if e.status == "started"]
    assert len(started) == 1  # not started again within the job timeout
    (failed,) = [e for e in table._handle.status.events("compaction") if e.status == "failed"]
    assert victim.rsplit("/", 1)[-1] in failed.details["reason"]


def hold_jobs(monkeypatch: Any) -> threading.Event:
    """Make the maintainer's jobs wait until the returned event is set (10 s at most)."""
    import sediment.maintenance.continuous as continuous

    gate = threading.Event()
    real = continuous.run_job

    def held(*args: Any) -> Any:
        gate.wait(10)
        return real(*args)

    monkeypatch.setattr(continuous, "run_job", held)
    return gate


def test_a_tick_assigns_only_the_jobs_idle_threads_start(tmp_path: Path,
                                                         monkeypatch: Any) -> None:

    table = make_table(tmp_path, split_points=[["g"], ["p"]],
                       **{"compaction.strategy": "basic", "compaction.batch_size": 2})
    for i in range(4):  # every leaf holds four files: two jobs each are due
        table.ingest(rows(300, seed=i))
    gate = hold_jobs(monkeypatch)
    m = Maintainer(lambda: [table], threads=2, tick_seconds=0.01, gc_every=3600)
    try:
        m.tick()
        time.sleep(0.05)
        assert len(table.state().jobs) == 2  # one per thread; the other files stay free
        m.tick()  # no thread idle: nothing more is claimed
        assert len(table.state().jobs) == 2
    finally:
        gate.set()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and (table.state().jobs or any(
            len(table.state().references(p.id)) > 1 for p in table.state().leaf_partitions())):
        m.tick()
        time.sleep(0.02)
    m.close()
    st = table.state()
    assert not st.jobs
    assert all(len(st.references(p.id)) == 1 for p in st.leaf_partitions())


def test_tables_take_turns_at_the_idle_threads(tmp_path: Path, monkeypatch: Any) -> None:
    import sediment.maintenance.continuous as continuous

    store = sd.Store.open(str(tmp_path), create=True)
    tables = [make_table(store, name=n, **{"compaction.strategy": "basic",
                                             "compaction.batch_size": 2}) for n in ("a", "b")]
    for t in tables:
        for i in range(6):  # three jobs due in each table
            t.ingest(rows(100, seed=i))
    order: list[str] = []
    real = continuous.run_job

    def noted(table: Any, *args: Any) -> Any:
        order.append(table.name)
        return real(table, *args)

    monkeypatch.setattr(continuous, "run_job", noted)
    m = Maintainer(lambda: tables, threads=1, tick_seconds=0.01, gc_every=3600)
    deadline = time.monotonic() + 30
    while len(order) < 4 and time.monotonic() < deadline:
        m.tick()
        time.sleep(0.02)
    m.close()
    assert sorted(order[:2]) == ["a", "b"] and sorted(order[2:4]) == ["a", "b"], order


def test_a_thread_freed_mid_tick_goes_to_the_table_passed_over(
        tmp_path: Path, monkeypatch: Any) -> None:
    # the race behind turn order ['a', 'a', 'b', 'a']: b is looked at while a's job still
    # holds the one thread, the job ends, and a (looked at next) took the freed thread
    # ahead of b. The thread frees exactly between the two looks here.
    import sediment.maintenance.pool as pool

    store = sd.Store.open(str(tmp_path), create=True)
    tables = [make_table(store, name=n, **{"compaction.strategy": "basic",
                                             "compaction.batch_size": 2}) for n in ("a", "b")]
    for t in tables:
        for i in range(4):
            t.ingest(rows(100, seed=i))
    m = Maintainer(lambda: tables, threads=1, tick_seconds=0.01, gc_every=3600)
    try:
        m._turn = 1  # b's turn
        looks = iter([0])  # b's look finds no idle thread; every later look finds one
        monkeypatch.setattr(pool.SmallestFirstPool, "idle", property(lambda self: next(looks, 1)))
        assert m.tick() == 0  # a does not take the thread b was waiting for
        assert not tables[0].state().jobs
        monkeypatch.undo()
        m.tick()  # the next tick starts at b, which gets the thread
        assert tables[1].state().jobs and not tables[0].state().jobs
    finally:
        m.close()


def test_a_crowded_leaf_merges_its_small_files_while_the_long_lane_is_busy(
        tmp_path: Path) -> None:
    # long jobs: an input of at least a twentieth of the threshold (500 records); ratio 0
    # groups every file of the leaf into one job, which the 600-record file makes long
    table = make_table(tmp_path, **{"partition.split.threshold": 10_000,
                                    "compaction.ratio": 0})
    gate = threading.Event()
    m = Maintainer(lambda: [table], threads=2, tick_seconds=0.01, gc_every=3600)
    try:
        m._pool.submit(0, lambda: gate.wait(10), long=True)  # the long lane is taken
        table.ingest(rows(600, seed=99))
        for i in range(5):  # 6 files, not crowded: the long merge of all waits for its lane
            table.ingest(rows(100, seed=i))
        m.tick()
        assert not table.state().jobs
        for i in range(5, 7):  # 8 files: crowded (more than half a batch of 12)
            table.ingest(rows(100, seed=i))
        m.tick()
        st = table.state()
        (job,) = st.jobs
        held = [r for r in st.references(ROOT_PARTITION_ID).values() if r.job_id == job]
        assert sorted(r.records for r in held) == [100] * 7  # the small files, merged now
    finally:
        gate.set()
        m.close()


def test_a_merge_of_many_small_files_is_short_while_the_long_lane_is_busy(
        tmp_path: Path) -> None:
    # however many records they add up to, small files merge on the kept thread: right after
    # a split a merge of two new files can exceed a twentieth of the threshold
    table = make_table(tmp_path, **{"partition.split.threshold": 10_000})
    gate = threading.Event()
    m = Maintainer(lambda: [table], threads=2, tick_seconds=0.01, gc_every=3600)
    try:
        m._pool.submit(0, lambda: gate.wait(10), long=True)  # the long lane is taken
        for i in range(6):  # 600 records in all, each file under 500
            table.ingest(rows(100, seed=i))
        m.tick()
        st = table.state()
        (job,) = st.jobs
        assert sum(r.records for r in st.references(ROOT_PARTITION_ID).values()
                   if r.job_id == job) == 600
    finally:
        gate.set()
        m.close()


def test_a_leaf_over_the_threshold_splits_once_it_holds_few_files(
        tmp_path: Path, monkeypatch: Any) -> None:
    import sediment.maintenance.split_pacing as split_pacing
    from sediment.handle import handle_of

    table = make_table(tmp_path)  # batch size 12: "a few" files are 4
    gate = hold_jobs(monkeypatch)
    for i in range(9):
        table.ingest(rows(100, seed=i))
    m = Maintainer(lambda: [table], threads=1, tick_seconds=0.01, gc_every=3600)
    h = handle_of(table)

    def ready() -> bool:
        st = table.state()
        return m._split_ready(h, st, st.leaf_partitions()[0])

    try:
        m.tick()  # one job merges the 9 files (and waits at the gate)
        assert len(table.state().jobs) == 1
        assert ready()  # the job leaves 1 file: few
        for i in range(9, 14):
            table.ingest(rows(100, seed=i))
        assert not ready()  # 1 + 5 files: waits for a merge of them
        monkeypatch.setattr(split_pacing, "SPLIT_WAIT_SECONDS", 0.0)
        assert ready()  # ... but not for longer than SPLIT_WAIT_SECONDS
        monkeypatch.setattr(split_pacing, "SPLIT_WAIT_SECONDS", 60.0)
        assert not ready()
    finally:
        gate.set()
    deadline = time.monotonic() + 30
    while (table.state().jobs or len(table.state().references(ROOT_PARTITION_ID)) > 2) and \
            time.monotonic() < deadline:
        m.tick()
        time.sleep(0.02)
    m.close()
    assert ready()  # the new files merged: few again


def test_unsplittable_leaf_reported_once(tmp_path: Path) -> None:
    table = make_table(tmp_path, **{"partition.split.threshold": 100})
    data = rows(300, seed=3)
    data = data.set_column(0, "key", pa.array(["same"] * 300, pa.string()))
    table.ingest(data)
    m = Maintainer(lambda: [table], tick_seconds=0.01, gc_every=3600)
    for _ in range(20):
        m.tick()
    m.close()
    events = [e for e in table._handle.status.events("split") if e.status == "unsplittable"]
    assert len(events) == 1
    assert len(table.state().leaf_partitions()) == 1


def test_offline_tables_only_collect_garbage(tmp_path: Path) -> None:
    table = make_table(tmp_path, **{"compaction.strategy": "basic", "compaction.batch_size": 2,
                                    "gc.delay_seconds": 0,
                                    "retention.seconds": 0, "gc.clock_skew_seconds": 0})
    for i in range(4):
        table.ingest(rows(40, seed=i))
    table.compact()
    table.ingest(rows(40, seed=9))
    table.ingest(rows(40, seed=10))
    old = list(table.state().unreferenced)
    assert old
    table.set_online(False)
    files = len(table.files())
    m = Maintainer(lambda: [table], tick_seconds=0.01, gc_every=0)
    m.tick()
    m.close()
    assert len(table.files()) == files  # no compaction
    listed = {o.key for o in table._handle.objects.list("data/")}
    assert not set(with_sidecars(old)) & listed  # but GC ran


def test_a_table_created_offline_is_left_alone_from_its_first_version(tmp_path: Path) -> None:
    store = sd.Store.open(str(tmp_path), create=True)
    table = store.create_table("quiet", SCHEMA, online=False,
                               properties={"compaction.strategy": "basic",
                                           "compaction.batch_size": 2})
    assert not table.online
    assert "offline" in table.history()[0].summary  # version 1 says so: no window
    for i in range(3):
        table.ingest(rows(40, seed=i))
    m = Maintainer(lambda: [table], tick_seconds=0.01, gc_every=0)
    try:
        m.tick()
        assert len(table.files()) == 3  # no compaction while offline
        table.set_online(True)
        m.tick()
        m._settle(threading.Event())
    finally:
        m.close()
    assert len(table.files()) < 3


def test_pool_runs_smallest_first_and_close_drops_queued_jobs() -> None:
    from sediment.maintenance.pool import SmallestFirstPool

    gate = threading.Event()
    ran: list[int] = []
    pool = SmallestFirstPool(1)
    blocker = pool.submit(0, gate.wait)
    futs = {p: pool.submit(p, lambda p=p: ran.append(p)) for p in (30, 10, 20)}
    time.sleep(0.05)
    assert pool.waiting == 3
    gate.set()
    for f in futs.values():
        f.result(5)
    assert blocker.done() and ran == [10, 20, 30]
    gate.clear()
    blocker = pool.submit(0, gate.wait)
    queued = pool.submit(1, lambda: ran.append(1))
    time.sleep(0.05)
    assert queued.cancel()  # what Maintainer.close() does to jobs not yet started
    gate.set()
    pool.shutdown()
    assert ran == [10, 20, 30] and queued.cancelled()


def test_pool_keeps_a_thread_for_short_jobs_while_long_ones_run() -> None:
    from sediment.maintenance.pool import SmallestFirstPool

    gate = threading.Event()
    started: list[str] = []

    def job(name: str, wait: bool = False) -> None:
        started.append(name)
        if wait:
            gate.wait(5)

    pool = SmallestFirstPool(2)
    first = pool.submit(100, lambda: job("long-1", wait=True), long=True)
    time.sleep(0.05)
    second = pool.submit(100, lambda: job("long-2", wait=True), long=True)
    time.sleep(0.05)
    assert started == ["long-1"]  # the other thread is kept for short jobs
    assert pool.waiting == 0  # a long job waiting for its lane does not hold back new jobs
    assert pool.long_slots == 0 and pool.idle == 0  # one running, one queued
    short = pool.submit(200, lambda: job("short"))
    short.result(5)  # runs at once, though it sorts after the queued long job
    assert started == ["long-1", "short"]
    gate.set()
    first.result(5)
    second.result(5)
    assert started == ["long-1", "short", "long-2"]
    deadline = time.monotonic() + 5  # a thread counts itself idle right after the result
    while pool.idle < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert pool.idle == 2 and pool.long_slots == 1
    pool.shutdown()

    one = SmallestFirstPool(1)  # with one thread, long jobs run as any other
    assert one.submit(1, lambda: "done", long=True).result(5) == "done"
    one.shutdown()


@pytest.mark.slow  # a maintainer process stopped by SIGTERM: the full lane
def test_sigterm_stops_the_loop_after_running_jobs(tmp_path: Path) -> None:
    import os
    import signal
    import subprocess
    import sys

    table = make_table(tmp_path, **{"compaction.strategy": "basic", "compaction.batch_size": 2})
    for i in range(4):
        table.ingest(rows(100, seed=i))
    proc = subprocess.Popen([sys.executable, "-m", "sediment.cli", "maintain", "--store",
                             str(tmp_path), "--loop", "--interval", "0.2", "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while len(table.files()) > 1 and time.monotonic() < deadline:
        time.sleep(0.1)
    os.kill(proc.pid, signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "stopping" in err
    assert len(table.files()) == 1
    assert not table.state().jobs
