"""Steady state: continuous ingest while ``sediment maintain --loop`` runs, with queries.

Run: ``python benchmarks/steady_state.py [--seconds N] [--batch-rows N] [--interval S]
[--split-threshold N] [--qps N] [--stall-files N] [--quick]`` (default 60 s; ``--quick``:
20 s). ``--maintainers N [--tables N] [--files N]``: N maintainers against one over the same
backlog, and the batcher loop's latency (``benchmarks/steady_maintainers.py``).

One table of the benchmark schema (see ``support.workload``) with ``partition.split.threshold`` 2M
(``--quick``: 1M), ``compaction.batch_size`` 12, the default ``size_ratio`` strategy and
``ingest.stall_files`` 12 (``--stall-files``; 0 runs without the write stall), in a fresh
local store. For ``--seconds``, each in its own process (they race only through the
store, as separate machines would):

* **ingest**: a batch of ``--batch-rows`` rows (default 50k) every ``--interval`` seconds
  (default 0.2 s; when an ingest takes longer the next one starts at once), each batch one
  ``table.ingest`` call (one file per leaf it touches, one transaction), which waits before
  its commit while a leaf it adds to holds ``ingest.stall_files`` files (the write stall:
  its time is reported, and counts against the ingest rate);
* **maintain**: ``sediment maintain --loop --interval 1`` (the CLI: split, compact, gc passes),
  started first: the other processes start once it has printed its first report (its job
  workers up, the table looked at for a second), so the run measures a maintainer that keeps
  up rather than one still importing while the first seconds of ingest pile up;
* **query**: ``table.query(keys=[k])`` for a random key of an already-ingested batch, ``--qps``
  times a second (default 20), each latency recorded with the key; right before or after each
  (alternating), the same key in the **reference table**: a second table of the same store
  holding every batch the run will ingest, fully compacted (one file per leaf) before the run
  starts, which nothing writes to during the run. Both see the same machine load at the same
  moment, so their ratio is the cost of the live table's layout and upkeep, not of the CPU
  that ingest and compaction take from queries on a 2-core box;
* **monitor**: every 0.5 s, the head state's files per leaf: its own references (the goal's
  measure), and the files a query of that leaf reads (the leaf's plus its ancestors' references,
  not yet pushed down).

The table keeps the default ``gc.delay_seconds`` (15 min): no file the run replaced is deleted
before the end, so the replays below can read old versions. (Pinning them with tags instead
would slow the maintainer down: every GC pass loads the state of every tagged version.)

Then (ingest and queries stopped, the maintainer terminated; ``compaction.job_timeout_seconds``
set to 0 so jobs the terminated maintainer had assigned run again) ``table.maintain()`` runs
until it settles. The same keys the run queried are then replayed in a fresh process, warm, in
alternating blocks against three table versions, with nothing else of ours running:

* **settled**: as ``maintain`` left it (size-ratio: a leaf may keep several files);
* **fully compacted**: one file per leaf (``compaction.ratio`` 0 and a batch size of 1000 make
  the next ``maintain`` merge every leaf's files into one) - the goal's reference;
* **peak layout**: the version with the most files per leaf seen during the run (the layout
  alone, without the ingest and compaction load the run's queries competed with).

Also reported: compaction jobs (from the status events), transactions and the gaps between
compaction passes (from the log), and each process's CPU seconds (is the run short of CPU?).

Goals: files per leaf (own references) never above ``compaction.batch_size`` while the loop
runs; query p99 during the run <= 2x the p99 on the fully compacted reference table queried
at the same moments. (Also printed, not a goal: the run's p99 over the idle replay of the fully
compacted version, which adds the CPU contention of running ingest and compaction on the same
two cores.)
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
from _common import (
    Timer,
    goal_line,
    parse_args,
    peak_rss_mib,
    print_table,
    save_results,
    temp_dir,
)

import sediment as sd
from sediment.workload import benchmark_schema
from support import workload

TABLE = "steady"
REFERENCE = "steady_reference"
SEED = 5000
P99_RATIO_GOAL = 2.0
KEYS_PER_BATCH = 20
RECENT_BATCHES = 10  # queries pick batches older than this (the query state cache is 1 s)
REPLAY_BLOCK = 100


def table_properties(split_threshold: int, batch_size: int, stall_files: int
                     ) -> dict[str, Any]:
    return {
        "partition.split.threshold": split_threshold,
        "compaction.batch_size": batch_size,
        "ingest.stall_files": stall_files,
    }


def batch_keys(i: int, batch_rows: int) -> list[str]:
    """Some keys of ingest batch ``i`` (``workload.chunk`` draws the keys first from its rng)."""
    rng = np.random.default_rng(SEED + i)
    keys = workload.random_strings(rng, batch_rows, workload.KEY_LENGTH)
    pick = np.random.default_rng(i).choice(batch_rows, size=KEYS_PER_BATCH, replace=False)
    return keys.take(pick).to_pylist()


def percentiles(values: list[float], unit: str = "_ms") -> dict[str, float]:
    if not values:
        return {"count": 0}
    a = np.asarray(values)
    return {"count": len(a), f"p50{unit}": float(np.percentile(a, 50)),
            f"p90{unit}": float(np.percentile(a, 90)), f"p99{unit}": float(np.percentile(a, 99)),
            f"max{unit}": float(a.max()), f"mean{unit}": float(a.mean())}


def layout(state: Any) -> dict[str, Any]:
    """Files per leaf of a state: own references, and what a query of the leaf reads."""
    own: list[int] = []
    reads: list[int] = []
    fullest: Any = None
    for leaf in state.leaf_partitions():
        n = len(state.references(leaf.id))
        if not own or n > max(own):
            fullest = leaf
        own.append(n)
        reads.append(n + sum(len(state.references(a.id)) for a in state.ancestors(leaf.id)))
    # the fullest leaf's files, to tell what held them (thousands of records, "~" for a share
    # of a wider file, "*" for a file a job is merging)
    files = sorted(state.references(fullest.id).values(), key=lambda r: -r.records)
    fullest_files = " ".join(
        f"{r.records / 1000:.0f}k"
        f"{'~' if r.approximate or state.refcount.get(r.filename, 0) > 1 else ''}"
        f"{'*' if r.job_id else ''}" for r in files)
    return {"version": state.version, "leaves": len(own), "max_files_per_leaf": max(own),
            "fullest_leaf_files": fullest_files,
            "mean_files_per_leaf": sum(own) / len(own),
            "max_files_read_per_leaf_query": max(reads),
            "records": sum(r.records for r in state.all_references()),
            "references": state.reference_count()}


# ---- children --------------------------------------------------------------------------------
def child_ingest(table: sd.Table, a: dict[str, Any]) -> dict[str, Any]:
    stop = Path(a["stop"])
    progress = Path(a["progress"])
    deadline = time.monotonic() + a["seconds"]
    latencies: list[float] = []
    stalls: list[float] = []
    i = 0
    start = time.monotonic()
    next_at = start
    while time.monotonic() < deadline and not stop.exists():
        data = workload.chunk(np.random.default_rng(SEED + i), a["batch_rows"])
        t0 = time.perf_counter()
        stalls.append(table.ingest(data).stalled_seconds)
        latencies.append(time.perf_counter() - t0)
        i += 1
        tmp = progress.with_suffix(".tmp")
        tmp.write_text(str(i))
        os.replace(tmp, progress)
        next_at += a["interval"]
        time.sleep(max(0.0, next_at - time.monotonic()))
    elapsed = time.monotonic() - start
    ms = [x * 1000 for x in latencies]
    return {"batches": i, "rows": i * a["batch_rows"], "seconds": elapsed,
            "rows_per_second": i * a["batch_rows"] / elapsed if elapsed else 0.0,
            "target_rows_per_second": a["batch_rows"] / a["interval"],
            "ingest_latency": percentiles(ms),
            "stalled_seconds": sum(stalls), "stalled_batches": sum(1 for x in stalls if x),
            "longest_stall_seconds": max(stalls, default=0.0)}


def _read_progress(path: Path) -> int:
    try:
        return int(path.read_text())
    except (OSError, ValueError):
        return 0


def child_query(table: sd.Table, a: dict[str, Any]) -> dict[str, Any]:
    """Exact-key queries at ``qps`` until the stop file exists, each key also queried in the
    fully compacted reference table (alternately before and after)."""
    reference = table.store.table(REFERENCE)
    states = table._handle.states  # to tell the queries that re-read the log
    stop = Path(a["stop"])
    progress = Path(a["progress"])
    rng = random.Random(11)
    keys_of: dict[int, list[str]] = {}
    samples: list[dict[str, Any]] = []
    period = 1.0 / a["qps"]
    start = time.monotonic()
    next_at = start
    while not stop.exists():
        done = _read_progress(progress)
        if done <= RECENT_BATCHES:
            time.sleep(0.05)
            next_at = time.monotonic()
            continue
        b = rng.randrange(0, done - RECENT_BATCHES)
        if b not in keys_of:
            keys_of[b] = batch_keys(b, a["batch_rows"])
        key = rng.choice(keys_of[b])
        timed: dict[str, tuple[float, int]] = {}
        order = (table, reference) if len(samples) % 2 == 0 else (reference, table)
        synced = states._cached()[1]
        for t in order:
            t0 = time.perf_counter()
            n = t.query(keys=[key]).num_rows
            timed[t.name] = (time.perf_counter() - t0, n)
        samples.append({"t": round(time.monotonic() - start, 3), "ms": timed[TABLE][0] * 1000,
                        "refreshed": states._cached()[1] != synced,
                        "key": key, "rows": timed[TABLE][1],
                        "reference_ms": timed[REFERENCE][0] * 1000,
                        "reference_rows": timed[REFERENCE][1]})
        next_at += period
        time.sleep(max(0.0, next_at - time.monotonic()))
    return {"queries": samples,
            "latency": percentiles([s["ms"] for s in samples]),
            "latency_refreshing": percentiles([s["ms"] for s in samples if s["refreshed"]]),
            "latency_cached": percentiles([s["ms"] for s in samples if not s["refreshed"]]),
            "reference_latency": percentiles([s["reference_ms"] for s in samples]),
            "not_found": sum(1 for s in samples if s["rows"] == 0),
            "reference_not_found": sum(1 for s in samples if s["reference_rows"] == 0)}


def child_monitor(table: sd.Table, a: dict[str, Any]) -> dict[str, Any]:
    stop = Path(a["stop"])
    timeline: list[dict[str, Any]] = []
    start = time.monotonic()
    while not stop.exists():
        lay = layout(table.state())
        lay["t"] = round(time.monotonic() - start, 2)
        timeline.append(lay)
        time.sleep(a["interval"])
    return {"timeline": timeline}


def child_replay(table: sd.Table, a: dict[str, Any]) -> dict[str, Any]:
    """The run's keys against pinned versions, in alternating blocks, after a warm-up.

    A query pins a version by preparing it against that version's state, loaded once, with
    the table's own executor (what ``table.query`` does with its cached head):
    ``query(version=v)`` reloads the state from the log on every call, which is not what is
    measured here."""
    from sediment.query.prepare import prepare_query

    keys: list[str] = a["keys"]
    states = {name: table.state(v) for name, v in a["versions"].items()}
    executor = table.prepare().executor
    lat: dict[str, list[float]] = {name: [] for name in states}
    for st in states.values():  # warm-up: footers and page cache, not timed
        for k in keys[: min(len(keys), 200)]:
            prepare_query(st, executor, table.name, keys=[k]).run()
    for i in range(0, len(keys), REPLAY_BLOCK):
        block = keys[i : i + REPLAY_BLOCK]
        for name, st in states.items():
            for k in block:
                t0 = time.perf_counter()
                prepare_query(st, executor, table.name, keys=[k]).run()
                lat[name].append((time.perf_counter() - t0) * 1000)
    return {"latency": {name: percentiles(ms) for name, ms in lat.items()}}


CHILDREN = {"ingest": child_ingest, "query": child_query, "monitor": child_monitor,
            "replay": child_replay}


def run_child_main(kind: str, root: str, args_file: str, out_file: str) -> None:
    a = json.loads(Path(args_file).read_text())
    table = sd.Store.open(root).table(TABLE)
    out = CHILDREN[kind](table, a)
    out["process_peak_rss_mib"] = peak_rss_mib()
    out["cpu_seconds"] = time.process_time()
    Path(out_file).write_text(json.dumps(out))


def spawn(kind: str, root: Path, work: Path, a: dict[str, Any]) -> tuple[subprocess.Popen[bytes],
                                                                          Path]:
    args_file = work / f"{kind}.args.json"
    out_file = work / f"{kind}.out.json"
    args_file.write_text(json.dumps(a))
    log = open(work / f"{kind}.log", "wb")
    proc = subprocess.Popen([sys.executable, __file__, "--child", kind, "--root", str(root),
                             "--args-file", str(args_file), "--out-file", str(out_file)],
                            stdout=log, stderr=subprocess.STDOUT)
    return proc, out_file


def wait_child(kind: str, proc: subprocess.Popen[bytes], out_file: Path, work: Path,
               timeout: float = 600) -> dict[str, Any]:
    rc = proc.wait(timeout)
    if rc != 0 or not out_file.exists():
        log = (work / f"{kind}.log").read_text(errors="replace")[-4000:]
        raise RuntimeError(f"{kind} child failed ({rc}):\n{log}")
    return json.loads(out_file.read_text())


def start_maintainer(root: Path, work: Path, workers: str, threads: int
                     ) -> subprocess.Popen[bytes]:
    exe = Path(sys.executable).with_name("sediment")
    log = open(work / "maintain.log", "wb")
    return subprocess.Popen([str(exe), "maintain", "--table", TABLE, "--loop", "--interval",
                             "1", "--workers", workers, "--threads", str(threads),
                             "--store", str(root), "--json"],
                            stdout=log, stderr=subprocess.STDOUT,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})


def wait_for_maintainer(maintainer: subprocess.Popen[bytes], work: Path,
                        timeout: float = 120.0) -> float:
    """Seconds until the maintainer printed its first report (it has started its workers and
    looked at the table for a report interval): the run measures a maintainer that keeps up,
    not one still starting while the first seconds of ingest pile up."""
    start = time.monotonic()
    while not maintainer_passes(work):
        if maintainer.poll() is not None:
            log = (work / "maintain.log").read_text(errors="replace")[-4000:]
            raise RuntimeError(f"the maintainer exited ({maintainer.returncode}):\n{log}")
        if time.monotonic() - start > timeout:
            raise RuntimeError(f"the maintainer printed no report in {timeout:.0f} s")
        time.sleep(0.1)
    return time.monotonic() - start


def tree_cpu_seconds(pid: int) -> tuple[float, float]:
    """CPU seconds of a process, and of its live children (the maintainer's job workers)."""
    children = 0.0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            children += process_cpu_seconds(int(entry))
    return process_cpu_seconds(pid), children


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a running process (all its threads), from /proc."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return float("nan")


def maintainer_passes(work: Path) -> list[dict[str, Any]]:
    """The rows ``sediment maintain --loop --json`` printed (one indented JSON list a loop)."""
    text = (work / "maintain.log").read_text(errors="replace")
    dec = json.JSONDecoder()
    rows: list[dict[str, Any]] = []
    i = 0
    while i < len(text):
        if text[i] in "[{":
            try:
                doc, i = dec.raw_decode(text, i)
            except ValueError:
                i = text.find("\n", i) + 1 or len(text)
                continue
            rows.extend(d for d in (doc if isinstance(doc, list) else [doc])
                        if isinstance(d, dict))
        else:
            i += 1
    return rows


def job_stats(table: sd.Table, since: float, until: float) -> dict[str, Any]:
    """Compaction jobs created in [since, until] from the status events: counts, rows read
    (``rows_in``: whole input files, also the rows outside the job's partition that a
    pushed-down reference leaves out) and written, job seconds, inputs per job."""
    jobs = [j for j in table._handle.status.jobs("compaction") if since <= j["created"] <= until]
    done = [j for j in jobs if j.get("status") == "committed"]
    secs = [float(j["seconds"]) for j in done if "seconds" in j]
    lag = [float(j["updated"]) - float(j["created"]) for j in done]
    return {"created": len(jobs), "committed": len(done),
            "failed": sum(1 for j in jobs if j.get("status") == "failed"),
            "rows_in": sum(int(j.get("rows_in", 0)) for j in done),
            "rows_out": sum(int(j.get("rows_out", 0)) for j in done),
            "job_seconds": percentiles([x * 1000 for x in secs]),
            "created_to_committed_ms": percentiles([x * 1000 for x in lag]),
            "inputs": percentiles([float(j.get("inputs", 0)) for j in done], "")}


def log_stats(table: sd.Table, since: float, until: float) -> dict[str, Any]:
    """From the transaction log of the run: transactions by kind, and the gaps between
    consecutive job assignments (one per compaction pass that found work: the pass period)
    and between consecutive compaction commits."""
    hist = [h for h in table.history() if since <= h.time <= until]

    def gaps(kind: str) -> dict[str, float]:
        ts = [h.time for h in hist if h.kind == kind]
        return percentiles([(b - a) * 1000 for a, b in zip(ts, ts[1:], strict=False)])

    return {"transactions": dict(Counter(h.kind for h in hist)),
            "assign_gap": gaps("assign_job_ids"),
            "compaction_commit_gap": gaps("replace_file_references"),
            "split_gap": gaps("split_partition")}


def build_reference(store: sd.Store, props: dict[str, Any], batches: int,
                    batch_rows: int) -> sd.Table:
    """The batches the run ingests (the same seeds), split like the live table and fully
    compacted: one file per leaf."""
    ref = store.create_table(REFERENCE, benchmark_schema(), properties={
        **props, "compaction.ratio": 0, "compaction.batch_size": 1000,
        "ingest.stall_files": 0})  # no maintainer runs while it is built
    for i in range(0, batches, 20):
        ref.ingest([workload.chunk(np.random.default_rng(SEED + j), batch_rows)
                    for j in range(i, min(batches, i + 20))])
    ref.maintain()
    lay = layout(ref.state())
    if lay["max_files_per_leaf"] != 1:
        raise AssertionError(f"reference table not fully compacted: {lay}")
    return ref


# ---- main ------------------------------------------------------------------------------------
def main() -> None:
    args = parse_args(__doc__.splitlines()[0], extra=lambda p: (
        p.add_argument("--seconds", type=float, default=None,
                       help="ingest duration (default 60; quick 20)"),
        p.add_argument("--batch-rows", type=int, default=50_000, help="rows per ingest"),
        p.add_argument("--interval", type=float, default=0.2, help="seconds between ingests"),
        p.add_argument("--split-threshold", type=int, default=None,
                       help="partition.split.threshold (default 2M; quick 1M)"),
        p.add_argument("--batch-size", type=int, default=12, help="compaction.batch_size"),
        p.add_argument("--stall-files", type=int, default=None,
                       help="ingest.stall_files (default: the batch size; 0: no write stall)"),
        p.add_argument("--qps", type=float, default=20.0, help="queries per second"),
        p.add_argument("--workers", choices=["process", "thread"], default="process",
                       help="the maintainer's job workers (maintain --loop --workers)"),
        p.add_argument("--threads", type=int, default=0,
                       help="jobs the maintainer runs at once (maintain --loop --threads; "
                            "0: its default)"),
        p.add_argument("--maintainers", type=int, default=0,
                       help="N maintainers against one over the same backlog, and the batcher "
                            "loop's latency (benchmarks/steady_maintainers.py)"),
        p.add_argument("--tables", type=int, default=4,
                       help="--maintainers: tables of the backlog"),
        p.add_argument("--files", type=int, default=0,
                       help="--maintainers: ingests per table (default 36; quick 18)"),
        p.add_argument("--batch-rows-backlog", type=int, default=20_000,
                       help="--maintainers: rows per backlog ingest"),
        p.add_argument("--submits", type=int, default=10,
                       help="--maintainers: files submitted to the batcher"),
        p.add_argument("--child", default=None, help=argparse.SUPPRESS),
        p.add_argument("--root", default=None, help=argparse.SUPPRESS),
        p.add_argument("--args-file", default=None, help=argparse.SUPPRESS),
        p.add_argument("--out-file", default=None, help=argparse.SUPPRESS),
    ))
    if args.child:
        run_child_main(args.child, args.root, args.args_file, args.out_file)
        return
    if args.maintainers:
        import steady_maintainers

        steady_maintainers.run(args)
        return
    seconds = args.seconds or (20.0 if args.quick else 60.0)
    threshold = args.split_threshold or (1_000_000 if args.quick else 2_000_000)
    stall_files = args.batch_size if args.stall_files is None else args.stall_files
    props = table_properties(threshold, args.batch_size, stall_files)
    load_before = os.getloadavg()
    print(f"load average: {load_before}")
    print(f"{seconds:.0f} s of ingest: {args.batch_rows:,} rows every {args.interval} s "
          f"(target {args.batch_rows / args.interval:,.0f} rows/s), split threshold "
          f"{threshold:,}, batch size {args.batch_size}, write stall at {stall_files} files "
          f"per leaf (0: none), {args.qps:g} exact-key queries/s; "
          f"`sediment maintain --loop --interval 1`")
    with temp_dir() as tmp:
        root = tmp / "store"
        work = tmp / "work"
        work.mkdir()
        store = sd.Store.open(str(root), create=True)
        with Timer() as ref_t:
            reference = build_reference(store, props, int(seconds / args.interval) + 1,
                                        args.batch_rows)
        ref_layout = layout(reference.state())
        print(f"reference table: {ref_layout['records']:,} rows in {ref_layout['leaves']} "
              f"leaves, one file each, built in {ref_t.seconds:.1f} s")
        table = store.create_table(TABLE, benchmark_schema(), properties=props)
        common = {"stop": str(work / "stop"), "progress": str(work / "progress"),
                  "batch_rows": args.batch_rows}
        maintainer = start_maintainer(root, work, args.workers, args.threads)
        # a run that fails must not leave the maintainer (and its job workers) running
        atexit.register(lambda: maintainer.poll() is None and maintainer.terminate())
        maintainer_ready = wait_for_maintainer(maintainer, work)
        print(f"maintainer up (first report) after {maintainer_ready:.1f} s")
        monitor = spawn("monitor", root, work, {**common, "interval": 0.5})
        query = spawn("query", root, work, {**common, "qps": args.qps})
        ingest = spawn("ingest", root, work, {**common, "seconds": seconds,
                                               "interval": args.interval})
        run_start = time.time()
        with Timer() as run_t:
            ingested = wait_child("ingest", *ingest, work, timeout=seconds + 600)
        (work / "stop").touch()
        queried = wait_child("query", *query, work)
        monitored = wait_child("monitor", *monitor, work)
        planner_cpu, workers_cpu = tree_cpu_seconds(maintainer.pid)
        maintainer.send_signal(signal.SIGTERM)
        try:
            maintainer.wait(30)
        except subprocess.TimeoutExpired:
            maintainer.kill()
            maintainer.wait(10)
        load_run = os.getloadavg()
        passes = maintainer_passes(work)
        jobs = job_stats(table, run_start, time.time())
        txlog = log_stats(table, run_start, time.time())
        end_layout = layout(table.state())
        timeline = monitored["timeline"]
        peak = max(timeline, key=lambda r: r["max_files_per_leaf"])
        print(f"compaction jobs during the run: {jobs['committed']} committed, "
              f"{jobs['failed']} failed; rows read {jobs['rows_in']:,} "
              f"({jobs['rows_in'] / max(1, ingested['rows']):.2f} per ingested row), written "
              f"{jobs['rows_out']:,} ({jobs['rows_out'] / max(1, ingested['rows']):.2f} per "
              f"ingested row; the rest were outside the job's partition); job "
              f"p50 {jobs['job_seconds'].get('p50_ms', 0):.0f} ms, max "
              f"{jobs['job_seconds'].get('max_ms', 0):.0f} ms; inputs per job p50 "
              f"{jobs['inputs'].get('p50', 0):.0f}, max {jobs['inputs'].get('max', 0):.0f}")
        cpu = {"ingest": ingested["cpu_seconds"], "maintainer": planner_cpu,
               "job workers": workers_cpu,
               "queries": queried["cpu_seconds"], "monitor": monitored["cpu_seconds"]}
        print("CPU seconds during the run (cores used = CPU s / run s): " + ", ".join(
            f"{k} {v:.1f} ({v / run_t.seconds:.2f})" for k, v in cpu.items())
            + f"; all {sum(cpu.values()):.1f} ({sum(cpu.values()) / run_t.seconds:.2f} of "
            f"{os.cpu_count()} cores; load average {load_run[0]:.1f})")
        ag, cg = txlog["assign_gap"], txlog["compaction_commit_gap"]
        print(f"transactions during the run: {txlog['transactions']}")
        print(f"time between compaction passes that assigned jobs: p50 "
              f"{ag.get('p50_ms', 0):.0f} ms, p90 {ag.get('p90_ms', 0):.0f} ms, max "
              f"{ag.get('max_ms', 0):.0f} ms; between compaction commits: p50 "
              f"{cg.get('p50_ms', 0):.0f} ms, max {cg.get('max_ms', 0):.0f} ms")
        if queried["reference_not_found"] or queried["not_found"]:
            raise AssertionError(f"keys not found: live {queried['not_found']}, reference "
                                 f"{queried['reference_not_found']}")
        print(f"ran {run_t.seconds:.1f} s: ingested {ingested['rows']:,} rows in "
              f"{ingested['batches']} batches ({ingested['rows_per_second']:,.0f} rows/s; "
              f"ingest p50 {ingested['ingest_latency']['p50_ms']:.0f} ms, p99 "
              f"{ingested['ingest_latency']['p99_ms']:.0f} ms; of {ingested['seconds']:.1f} s, "
              f"{ingested['stalled_seconds']:.1f} s stalled in {ingested['stalled_batches']} "
              f"batches, longest {ingested['longest_stall_seconds']:.2f} s); maintainer loops: "
              f"{len(passes)} ({sum(int(p.get('passes', 0)) for p in passes)} passes); "
              f"{len(queried['queries'])} queries "
              f"({queried['not_found']} found nothing)")

        # settle, then compact fully (old versions stay readable: GC delay)
        table.set_properties({"compaction.job_timeout_seconds": 0})
        with Timer() as settle_t:
            settled_run = table.maintain()
        settled = layout(table.state())
        table.set_properties({"compaction.ratio": 0, "compaction.batch_size": 1000})
        with Timer() as full_t:
            table.maintain()
        full = layout(table.state())
        if full["records"] != ingested["rows"]:
            raise AssertionError(f"table holds {full['records']:,} records, ingested "
                                 f"{ingested['rows']:,}")
        keys = [q["key"] for q in queried["queries"]]
        versions = {"fully compacted": full["version"], "settled": settled["version"],
                    "peak layout": peak["version"]}
        replay = wait_child("replay", *spawn("replay", root, work,
                                             {"keys": keys, "versions": versions}),
                            work)["latency"]

    during = queried["latency"]
    during_ref = queried["reference_latency"]
    compacted = replay["fully compacted"]
    print_table(["t (s)", "version", "leaves", "max files/leaf", "max files read/leaf query",
                 "records"],
                [[r["t"], r["version"], r["leaves"], r["max_files_per_leaf"],
                  r["max_files_read_per_leaf_query"], r["records"]]
                 for r in timeline[:: max(1, len(timeline) // 20)]],
                title="Layout over time (every ~5% of the monitor's samples)")
    print_table(["layout", "version", "leaves", "max files/leaf", "mean files/leaf",
                 "max files read/leaf query"],
                [[name, r["version"], r["leaves"], r["max_files_per_leaf"],
                  r["mean_files_per_leaf"], r["max_files_read_per_leaf_query"]]
                 for name, r in (("peak during run", peak), ("end of run", end_layout),
                                 ("settled (maintain)", settled),
                                 ("fully compacted", full))],
                title="Files per leaf")
    print(f"settle: {settle_t.seconds:.1f} s ({settled_run.passes} passes, "
          f"{settled_run.jobs_committed} jobs, {settled_run.splits} splits); full compaction: "
          f"{full_t.seconds:.1f} s")
    lat_rows = [["during the run: live table", during],
                ["  of which ran while its log was re-read", queried["latency_refreshing"]],
                ["  of which used the cached state", queried["latency_cached"]],
                ["during the run: reference (fully compacted)", during_ref]]
    lat_rows += [[f"replay: {name}", r] for name, r in replay.items()]
    print_table(["exact-key queries", "count", "p50 ms", "p90 ms", "p99 ms", "max ms"],
                [[n, r["count"], r.get("p50_ms", 0), r.get("p90_ms", 0), r.get("p99_ms", 0),
                  r.get("max_ms", 0)] for n, r in lat_rows],
                title="Query latency (the replays: the same keys, warm, alternating blocks)")
    load_after = os.getloadavg()
    print(f"load average: before {load_before}, end of run {load_run}, end {load_after}")
    goals = [
        goal_line("max files per leaf during the run", peak["max_files_per_leaf"],
                  args.batch_size, "files", higher_is_better=False),
        goal_line("query p99 during the run / p99 of the fully compacted reference, same "
                  "moments", during["p99_ms"] / during_ref["p99_ms"], P99_RATIO_GOAL, "x",
                  higher_is_better=False),
    ]
    print(f"(not a goal) query p99 during the run / idle replay of the fully compacted "
          f"version: {during['p99_ms'] / compacted['p99_ms']:.1f}x; the reference during the "
          f"run / idle: {during_ref['p99_ms'] / compacted['p99_ms']:.1f}x (CPU contention)")
    if not args.no_save:
        save_results("steady_state", {
            "parameters": {"seconds": seconds, "batch_rows": args.batch_rows,
                           "interval": args.interval, "split_threshold": threshold,
                           "batch_size": args.batch_size, "stall_files": stall_files,
                           "qps": args.qps,
                           "properties": props},
            "load_average": {"before": load_before, "end_of_run": load_run,
                             "after": load_after},
            "maintainer_ready_seconds": maintainer_ready, "run_seconds": run_t.seconds,
            "cpu_seconds": cpu,
            "ingest": ingested, "maintainer_loops": passes, "compaction_jobs": jobs,
            "transaction_log": txlog,
            "layout": {"peak": peak, "end_of_run": end_layout, "settled": settled,
                       "fully_compacted": full, "timeline": timeline},
            "settle_seconds": settle_t.seconds, "full_compaction_seconds": full_t.seconds,
            "query": {"during_run": during, "not_found": queried["not_found"],
                      "reference_during_run": during_ref,
                      "reference_not_found": queried["reference_not_found"],
                      "replay": replay,
                      "latency_timeline": [[q["t"], round(q["ms"], 3),
                                            round(q["reference_ms"], 3)]
                                           for q in queried["queries"]]},
            "goals": goals}, quick=args.quick)


if __name__ == "__main__":
    main()
