"""``steady_state.py --maintainers N``: N maintainers against one over the same backlog, and the
batcher loop's latency from submit to visible.

One backlog, copied: ``--tables`` tables (default 4; a lease is per table, so one table cannot
be shared) of the benchmark schema, each given ``--files`` ingests (default 36; quick 18) of
``--batch-rows`` rows (default 20k) with nothing maintaining them (``compaction.batch_size``
``--batch-size``, default 12: each leaf starts three batches over it). The store is copied
before anything runs, and each copy is worked down by ``sediment maintain --loop`` processes
(``--workers process``, the default threads) until every table has settled (no job assigned,
every leaf within the batch size, no commit for a second): once by one maintainer, once by
N. Both runs see the same backlog on the same machine, one after the other.

Reported: seconds to settle and rows merged per second (``rows_in`` of the committed
compaction jobs, from the status events), each maintainer's leases (``report maintainers``),
the jobs started more than once (duplicated work: the status events' ``started`` per job id)
or committed more than once, and the most files per leaf at the end.

The batcher loop: during both runs (the same load for both), a table ``queued``
(``batcher.max_age_seconds`` 1) receives ``--submits`` files (default 10; 2k rows each) through
``sediment.ingest.batcher.submit``, one every 0.5 s; each file's latency is from its submit to
the first version its rows are visible at (polled every 50 ms).

Goals: no duplicated work; N maintainers reach at least 0.95x one maintainer's throughput;
every leaf within the batch size at the end; every submitted file visible within
``batcher.max_age_seconds`` plus one tick of the batcher lane (0.5 s) (p100).
"""

from __future__ import annotations

import math
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from _common import goal_line, print_table, save_results, temp_dir

import sediment as sd
from sediment.ingest import batcher
from sediment.maintenance.lease_store import maintainers_report
from sediment.workload import benchmark_schema, generate

MAX_AGE = 1.0
"""``batcher.max_age_seconds`` of the queued table."""
LANE_TICK = 0.5
"""How often the maintainer looks at a batcher queue (sediment.maintenance.batching)."""


def make_backlog(root: Path, tables: int, files: int, rows: int, batch_size: int) -> int:
    store = sd.Store.open(str(root), create=True)
    total = 0
    for t in range(tables):
        table = store.create_table(f"t{t}", benchmark_schema(), properties={
            "compaction.batch_size": batch_size, "partition.split.threshold": 10 ** 9})
        for i in range(files):
            for b in generate(rows, seed=t * 100_000 + i, batch_rows=rows):
                table.ingest(b)
                total += b.num_rows
    return total


def start(root: Path, log: Path, threads: int) -> subprocess.Popen[bytes]:
    exe = Path(sys.executable).with_name("sediment")
    with open(log, "wb") as out:
        return subprocess.Popen([str(exe), "maintain", "--store", str(root), "--loop",
                                 "--interval", "1", "--lease-timeout", "5", "--threads",
                                 str(threads), "--json"],
                                stdout=out, stderr=subprocess.STDOUT,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"})


def settled(store: sd.Store, names: list[str], batch_size: int) -> bool:
    for n in names:
        st = store.table(n).state()
        if st.jobs or any(len(st.references(p.id)) > batch_size
                          for p in st.leaf_partitions()):
            return False
    return True


def work_down(root: Path, work: Path, n: int, names: list[str], batch_size: int,
              during: Any = None) -> dict[str, Any]:
    store = sd.Store.open(str(root))
    versions = {t: store.table(t).version for t in names}
    # the same job workers in all: N maintainers share the CPUs one maintainer would use
    threads = max(1, (os.cpu_count() or 2) // n)
    procs = [start(root, work / f"maintain-{n}-{i}.log", threads) for i in range(n)]
    # timed from when every maintainer is up (it has written its member object): the
    # processes' start (imports) is not the maintainers' work
    deadline = time.monotonic() + 120
    while len(maintainers_report(store.objects)["members"]) < n:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{n} maintainers did not start in 120 s")
        time.sleep(0.05)
    began = time.monotonic()
    side = threading.Thread(target=during) if during is not None else None
    if side is not None:
        side.start()
    leases: dict[str, Any] = {}
    try:
        quiet_since = None
        while True:
            time.sleep(0.25)
            if time.monotonic() - began > 900:
                raise RuntimeError("the backlog did not settle in 900 s")
            if time.monotonic() - began < 5:  # who holds what once the shares settled
                leases = maintainers_report(store.objects)
            now_versions = {t: store.table(t).version for t in names}
            changed = now_versions != versions
            versions = now_versions
            if changed or not settled(store, names, batch_size):
                quiet_since = None
                continue
            quiet_since = quiet_since or time.monotonic()
            if time.monotonic() - quiet_since >= 1.0:
                break
        seconds = quiet_since - began
        if side is not None:
            side.join()
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            p.wait(120)
    started: Counter[str] = Counter()
    committed: Counter[str] = Counter()
    merged: dict[str, int] = {}
    most = 0
    for name in names:
        t = store.table(name)
        for e in t.events():
            if e.kind != "compaction":
                continue
            if e.status == "started":
                started[e.job_id] += 1
            elif e.status == "finished":
                merged[e.job_id] = int(e.details.get("rows_in", 0) or 0)
            elif e.status == "committed":
                committed[e.job_id] += 1
        st = t.state()
        most = max([most, *(len(st.references(p.id)) for p in st.leaf_partitions())])
    rows_in = sum(merged.get(j, 0) for j in committed)
    return {"maintainers": n, "seconds": seconds, "rows_merged": rows_in,
            "rows_per_second": rows_in / seconds if seconds else 0.0,
            "jobs": len(started), "started_twice": sum(c > 1 for c in started.values()),
            "committed_twice": sum(c > 1 for c in committed.values()),
            "max_files_per_leaf": most,
            "leases": {m["member"]: m["leases"] for m in leases.get("members", [])}}


def submit_and_watch(root: Path, work: Path, submits: int, latencies: list[float]) -> None:
    """Submit files to the queued table one every 0.5 s; record each one's latency."""
    table = sd.Store.open(str(root)).table("queued")
    pending: dict[str, tuple[float, int]] = {}
    seen = 0
    for i in range(submits):
        data = pa.Table.from_batches(list(generate(2000, seed=900_000 + i, batch_rows=2000)))
        path = work / f"queued-{i}.parquet"
        pq.write_table(data, path)
        r = batcher.submit(table, [str(path)])
        pending[r[0].id] = (time.time(), 2000)
        deadline = time.monotonic() + 0.5
        while time.monotonic() < deadline:
            seen = _note_visible(table, pending, seen, latencies)
            time.sleep(0.05)
    end = time.monotonic() + 60
    while pending and time.monotonic() < end:
        seen = _note_visible(table, pending, seen, latencies)
        time.sleep(0.05)


def _note_visible(table: sd.Table, pending: dict[str, tuple[float, int]], seen: int,
                  latencies: list[float]) -> int:
    """Rows visible now; the oldest pending files they cover count as visible now (files
    are ingested in submit order by a single queue's jobs, oldest first)."""
    rows = sum(r.records for r in table.files())
    now = time.time()
    while pending and rows - seen >= next(iter(pending.values()))[1]:
        key = next(iter(pending))
        submitted, n = pending.pop(key)
        latencies.append(now - submitted)
        seen += n
    return seen


def run(args: Any) -> None:
    files = args.files or (18 if args.quick else 36)
    names = [f"t{i}" for i in range(args.tables)]
    print(f"load average: {os.getloadavg()}")
    print(f"backlog: {args.tables} tables x {files} files of {args.batch_rows_backlog:,} rows, "
          f"compaction.batch_size {args.batch_size}; 1 maintainer, then {args.maintainers} "
          f"(the job threads shared among them)")
    with temp_dir() as tmp:
        base = tmp / "backlog"
        total = make_backlog(base, args.tables, files, args.batch_rows_backlog,
                             args.batch_size)
        sd.Store.open(str(base)).create_table("queued", benchmark_schema(), properties={
            "batcher.max_age_seconds": MAX_AGE})
        one, many = tmp / "one", tmp / "many"
        shutil.copytree(base, one)
        shutil.copytree(base, many)
        work = tmp / "work"
        work.mkdir()
        # the same batcher load in both runs (its ingests take CPU from compaction)
        lat1: list[float] = []
        r1 = work_down(one, work, 1, names, args.batch_size,
                       during=lambda: submit_and_watch(one, work, args.submits, lat1))
        latencies: list[float] = []
        rn = work_down(many, work, args.maintainers, names, args.batch_size,
                       during=lambda: submit_and_watch(many, work, args.submits, latencies))
    print_table(["maintainers", "seconds", "rows merged", "rows/s", "jobs", "started twice",
                 "committed twice", "max files/leaf"],
                [[r["maintainers"], r["seconds"], r["rows_merged"], r["rows_per_second"],
                  r["jobs"], r["started_twice"], r["committed_twice"], r["max_files_per_leaf"]]
                 for r in (r1, rn)], title=f"backlog of {total:,} rows")
    for member, leases in rn["leases"].items():
        print(f"  {member}: {', '.join(leases)}")
    lat = sorted(latencies)
    for who, ls in (("1 maintainer", sorted(lat1)), (f"{args.maintainers} maintainers", lat)):
        p99 = ls[math.ceil(0.99 * len(ls)) - 1] if ls else 0.0  # nearest rank
        print(f"batcher loop with {who}, submit to visible ({len(ls)} files): "
              f"min {ls[0]:.2f} s, median {ls[len(ls) // 2]:.2f} s, p99 {p99:.2f} s, "
              f"max {ls[-1]:.2f} s"
              if ls else f"batcher loop with {who}: no file became visible")
    goals = [
        goal_line("duplicated jobs (started or committed twice)",
                  rn["started_twice"] + rn["committed_twice"], 0, "jobs",
                  higher_is_better=False),
        goal_line(f"{args.maintainers} maintainers over 1 (throughput)",
                  rn["rows_per_second"] / r1["rows_per_second"] if r1["rows_per_second"]
                  else 0.0, 0.95, "x"),
        goal_line("most files per leaf at the end", rn["max_files_per_leaf"], args.batch_size,
                  "files", higher_is_better=False),
        goal_line("batcher submit to visible (max)", lat[-1] if lat else float("inf"),
                  MAX_AGE + LANE_TICK, "s", higher_is_better=False),
    ]
    if not args.no_save:
        save_results("steady_state_maintainers", {
            "one": r1, "many": rn, "batcher_latencies_s": lat,
            "batcher_latencies_one_s": sorted(lat1), "goals": goals},
            quick=args.quick)
