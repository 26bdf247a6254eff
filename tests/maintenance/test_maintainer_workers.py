"""The continuous maintainer with compaction jobs in worker processes: results equal the
reference, jobs run outside the maintainer's process, and a killed worker's job runs again
(nothing lost, nothing duplicated)."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import helpers
import sediment as sd
from helpers import rows
from reference import Reference, assert_matches
from sediment.compaction.runner import create_jobs
from sediment.handle import handle_of
from sediment.maintenance.continuous import Maintainer
from sediment.maintenance.workers import WorkerProcesses

SCHEMA = sd.workload.benchmark_schema()


@pytest.mark.slow  # maintainer worker processes keeping up with ingest: the full lane
def test_maintainer_with_worker_processes_keeps_up(tmp_path: Path) -> None:
    table = helpers.make_table(tmp_path, **{"partition.split.threshold": 3000,
                                            "compaction.batch_size": 4,
                                            "parquet.row_group_rows": 128})
    ref = Reference(SCHEMA)
    stop = threading.Event()
    reports: list[Any] = []
    m = Maintainer(lambda: [sd.Store.open(str(tmp_path)).table(table.name)], threads=2,
                   tick_seconds=0.02, gc_every=0.5, workers="process")
    th = threading.Thread(target=m.run, kwargs={"report_every": 0.2, "stop": stop,
                                                "on_report": reports.append})
    th.start()
    try:
        for i in range(30):
            data = rows(300, seed=i)
            table.ingest(data)
            ref.add(data)
            time.sleep(0.02)
        # until the maintainer has reported some jobs committed (the log holds a worker's
        # commit before the maintainer reaps the job and counts it in its next report)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and \
                sum(int(r["jobs"]) for rep in list(reports) for r in rep) < 3:
            time.sleep(0.1)
        assert sum(h.kind == "replace_file_references" for h in table.history()) >= 3
        assert m._processes is not None
        workers = m._processes.pids()
        assert workers and os.getpid() not in workers
    finally:
        stop.set()
        th.join(120)
    assert not th.is_alive()
    done = [r for rep in reports for r in rep]
    assert sum(int(r["jobs"]) for r in done) >= 3 and not any("error" in r for r in done), done
    assert_matches(table.query(), ref)
    # a split's pushed-down references carry estimated counts until compaction rewrites
    # them; the maintainer stopped wherever it was, so settle before counting exactly
    table.maintain()
    assert sum(r.records for r in table.files()) == len(ref.rows)


@pytest.mark.slow  # a worker process killed and its job run again: the full lane
def test_killed_worker_job_runs_again(tmp_path: Path) -> None:
    table = helpers.make_table(tmp_path, **{"compaction.strategy": "basic",
                                            "compaction.batch_size": 4})
    ref = Reference(SCHEMA)
    for i in range(4):
        data = rows(20_000, seed=i)
        table.ingest(data)
        ref.add(data)
    handle = handle_of(table)
    (job,) = create_jobs(handle)
    state = handle.states.head()
    workers = WorkerProcesses(1)
    result: list[Any] = []
    th = threading.Thread(target=lambda: result.append(workers.run_job(handle, state, job)))
    try:
        th.start()
        deadline = time.monotonic() + 30
        while not workers.pids() and time.monotonic() < deadline:
            time.sleep(0.01)
        (victim,) = workers.pids()
        os.kill(victim, signal.SIGKILL)  # while it starts up or merges: before any result
        th.join(120)
        assert not th.is_alive()
    finally:
        workers.close()
    (r,) = result
    assert r.committed, r.error
    assert workers.replaced == 1
    (out,) = table.files()
    assert out.records == len(ref.rows) == 80_000
    assert_matches(table.query(), ref)
    assert not table.state().jobs


@pytest.mark.slow  # a maintainer process and its workers: the full lane
def test_workers_go_when_their_maintainer_is_killed(tmp_path: Path) -> None:
    """Workers ignore SIGTERM and Ctrl-C (the maintainer stops them): a maintainer killed
    with -9 must not leave them running for ever, reparented."""
    import subprocess
    import sys

    helpers.make_table(tmp_path / "s")
    script = ("import sys\nfrom sediment.cli.app import main\n"
              "sys.argv = ['sediment', 'maintain', '--loop', '--interval', '0.5', '--workers',"
              f" 'process', '--store', {str(tmp_path / 's')!r}]\nmain()\n")
    maintainer = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL)

    def children() -> list[int]:
        found = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    stat = (entry / "stat").read_text()
                except OSError:
                    continue
                if int(stat.rsplit(")", 1)[1].split()[1]) == maintainer.pid:
                    found.append(int(entry.name))
        return found

    try:
        deadline = time.monotonic() + 60
        while not children() and time.monotonic() < deadline:
            time.sleep(0.1)
        workers = children()
        assert workers, "the maintainer started no worker processes"
        time.sleep(1.0)  # past the workers' start-up
        maintainer.kill()
        maintainer.wait(30)
        deadline = time.monotonic() + 30
        alive = workers
        while alive and time.monotonic() < deadline:
            time.sleep(0.2)
            alive = [p for p in alive if Path(f"/proc/{p}").exists()
                     and "Z" not in (Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1]
                                     .split()[:1])]
        assert alive == [], f"workers {alive} outlived their maintainer"
    finally:
        maintainer.kill()
        for p in children():
            os.kill(p, signal.SIGKILL)
