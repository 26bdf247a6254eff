"""Many small writes: the buffered writer in one process, and group commit over Flight.

Run: ``python benchmarks/small_writes.py [--quick] [--procs P --threads T --seconds S]
[--no-s3] [--no-writer]`` (full: 4,000 writes through the writer, 150 single ingests, and
8 processes x 8 threads putting for 60 s per Flight run; ``--quick``: 1,000 and 50 writes,
2 x 4 clients for 8 s).

Every write is 100 rows of the benchmark schema (``sediment.workload``), generated before
timing.

**In-process** (local disk, each into a fresh table):

- **baseline**: ``table.ingest(batch)`` per write (one set of files and one commit each);
- **writer**: ``with table.writer() as w: w.write(batch)`` for every write (defaults:
  100,000 rows, 64 MiB or 1 s per flush), timed until ``close()`` returns (everything
  committed);
- **writer, keyed**: the same with ``idempotency_key=`` on every write (each key hashed,
  looked up at write, claimed and recorded at the flush).

A warm-up (a few ingests and a keyed writer into another table) runs first, so no run pays
the first imports. Reported: rows/s, commits, rows per commit, files; the rows read back are
checked. Goal: the writer's rows/s at least 20x the baseline's.

**Over Flight** (``sediment serve``, one table): P client processes x T threads each put
100-row batches (``remote.ingest``) one after another for S seconds, with group commit on
(the server's default window, 20 ms, growing under load to 1 / ``write.group_commit_max_rate``)
and off (``--group-commit-ms 0``), on local disk and on moto S3 through the fault proxy
(``tests/faultproxy.py``, no faults: one more HTTP hop, as a real network adds). A put
refused as busy waits its retry-after hint and is put again. Reported per run:
acknowledged rows/s, commits/s on the table, p50/p99 acknowledgement latency, busy refusals;
the acknowledged rows are checked against the table's; with group commit on, where a put's
time went in the server (queued until its group was cut, then cut to answer; per group,
staging its files and committing them: the server's stats). Goals (S3): group commit on at least
20x the rows/s of off, at most 10 commits/s, p99 acknowledgement at most 1 s.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from _common import fmt, goal_line, parse_args, print_table, save_results, temp_dir

import sediment as sd
from sediment.errors import ServerBusyError
from sediment.workload import benchmark_schema, generate

ROWS_PER_WRITE = 100


def batches(n: int, seed: int) -> list[pa.RecordBatch]:
    return list(generate(n * ROWS_PER_WRITE, seed=seed, batch_rows=ROWS_PER_WRITE))


def run_baseline(table: sd.Table, data: list[pa.RecordBatch]) -> float:
    started = time.perf_counter()
    for b in data:
        table.ingest(b)
    return time.perf_counter() - started


def run_writer(table: sd.Table, data: list[pa.RecordBatch], keyed: bool) -> float:
    started = time.perf_counter()
    with table.writer() as w:
        for i, b in enumerate(data):
            w.write(b, idempotency_key=f"write-{i}" if keyed else None)
    return time.perf_counter() - started


def writer_part(args: Any, results: dict[str, Any]) -> list[dict[str, Any]]:
    n_writer, n_base = (1_000, 50) if args.quick else (4_000, 150)
    results["writes"] = {"baseline": n_base, "writer": n_writer, "writer_keyed": n_writer}
    rows_table = []
    figures: dict[str, dict[str, float]] = {}
    with temp_dir() as root:
        store = sd.Store.open(str(root / "store"), create=True)
        warm = store.create_table("warm-up", benchmark_schema())  # imports, first writes
        run_baseline(warm, batches(5, seed=99))
        run_writer(warm, batches(50, seed=98), True)
        for name, n, fn in (("baseline", n_base, lambda t, d: run_baseline(t, d)),
                            ("writer", n_writer, lambda t, d: run_writer(t, d, False)),
                            ("writer_keyed", n_writer, lambda t, d: run_writer(t, d, True))):
            data = batches(n, seed=len(figures))
            table = store.create_table(name, benchmark_schema())
            start_version = table.version
            seconds = fn(table, data)
            commits = table.version - start_version
            stored = table.query().num_rows
            assert stored == n * ROWS_PER_WRITE, (name, stored)
            rows = n * ROWS_PER_WRITE
            figures[name] = {"rows": rows, "seconds": seconds, "rows_per_second": rows / seconds,
                             "commits": commits, "rows_per_commit": rows / max(1, commits),
                             "files": len(table.files())}
            f = figures[name]
            rows_table.append([name, n, fmt(seconds), fmt(f["rows_per_second"]), commits,
                               fmt(f["rows_per_commit"]), f["files"]])
    print_table(["run", "writes", "seconds", "rows/s", "commits", "rows/commit", "files"],
                rows_table, title="100-row writes, local disk")
    base = figures["baseline"]["rows_per_second"]
    ratio = figures["writer"]["rows_per_second"] / base
    keyed = figures["writer_keyed"]["rows_per_second"] / base
    print(f"writer / baseline: {fmt(ratio)}x; keyed writer / baseline: {fmt(keyed)}x")
    results["figures"] = figures
    results["ratios"] = {"writer_vs_ingest_each": ratio, "keyed_writer_vs_ingest_each": keyed}
    return [goal_line("buffered writer vs one ingest per 100 rows", ratio, 20, "x"),
            goal_line("keyed buffered writer vs one ingest per 100 rows", keyed, 20, "x")]


# ---- over Flight ----------------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """Stop a process this benchmark started: SIGTERM, then SIGKILL after 60 s."""
    proc.terminate()
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()


@contextlib.contextmanager
def server(store: str, env: dict[str, str], log: Path, args: list[str]) -> Iterator[str]:
    """``sediment serve`` on a free loopback port; its URI."""
    port = _free_port()
    uri = f"grpc://127.0.0.1:{port}"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "sediment.cli", "serve", "--store",
                                 store, "--port", str(port), *args],
                                stdout=subprocess.DEVNULL, stderr=out,
                                env={**os.environ, **env})
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with sd.connect(uri) as c:
                    c.health()
                break
            except sd.SedimentError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"server did not start: {log.read_text()[-2000:]}"
                                       ) from None
                time.sleep(0.1)
        yield uri
    finally:
        _stop(proc)


@contextlib.contextmanager
def maintainer(store: str, env: dict[str, str], log: Path) -> Iterator[None]:
    """One ``sediment maintain --loop`` over ``store`` while the block runs."""
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "sediment.cli", "maintain", "--loop",
                                 "--interval", "5", "--store", store],
                                stdout=subprocess.DEVNULL, stderr=out,
                                env={**os.environ, **env})
    try:
        yield
    finally:
        _stop(proc)


def files_per_leaf(table: sd.Table) -> int:
    """The most files any leaf of ``table``'s head holds (what compaction keeps few)."""
    state = table.state()
    return max((len(state.references(leaf.id)) for leaf in state.leaf_partitions()),
               default=0)


def flight_client(uri: str, threads: int, start_at: float, seconds: float,
                  seed: int) -> dict[str, Any]:
    """One client process: ``threads`` threads putting 100-row batches from ``start_at``
    for ``seconds``; its acknowledged rows, latencies (ms) and busy refusals."""
    data = batches(50, seed=seed)
    lock = threading.Lock()
    out: dict[str, Any] = {"rows": 0, "puts": 0, "busy": 0, "latencies_ms": []}

    def work(t: int) -> None:
        with sd.connect(uri) as c:
            remote = c.table("bench")
            remote.describe()  # connected and warm before the start
            while time.time() < start_at:
                time.sleep(0.005)
            end = start_at + seconds
            i, lat, rows, busy = t, [], 0, 0
            while time.time() < end:
                b = data[i % len(data)]
                i += threads
                began = time.perf_counter()
                while True:
                    try:
                        remote.ingest(b)
                        break
                    except ServerBusyError as e:
                        busy += 1
                        time.sleep(e.retry_after or 0.05)
                lat.append((time.perf_counter() - began) * 1000)
                rows += b.num_rows
            with lock:
                out["rows"] += rows
                out["puts"] += len(lat)
                out["busy"] += busy
                out["latencies_ms"] += [round(x, 2) for x in lat]

    pool = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for th in pool:
        th.start()
    for th in pool:
        th.join()
    return out


def flight_run(label: str, store_uri: str, options: dict[str, Any], env: dict[str, str],
               group_ms: float, args: Any, root: Path) -> dict[str, Any]:
    """One Flight run into a fresh table: its figures."""
    name = f"bench-{label}-{int(group_ms)}ms".replace("+", "-")
    sub = f"{store_uri.rstrip('/')}/{name}"  # a store of its own per run
    store = sd.Store.open(sub, create=True, **options)
    table = store.create_table("bench", benchmark_schema())
    start_version = table.version
    clients = args.procs * args.threads
    # with group commit on, one maintainer runs beside the writers (the goal: files
    # per leaf stay within the compaction batch size); sampled every second while they put
    peak: list[int] = []
    with contextlib.ExitStack() as stack:
        uri = stack.enter_context(server(sub, env, root / f"{name}.log",
                                         ["--group-commit-ms", str(group_ms),
                                          "--max-concurrency", str(clients + 16)]))
        if group_ms:
            stack.enter_context(maintainer(sub, env, root / f"{name}-maintain.log"))
        ctx = mp.get_context("spawn")
        with ctx.Pool(args.procs) as pool:
            start_at = time.time() + 4.0 + args.procs  # every process connected and warm
            pending = pool.starmap_async(flight_client,
                                         [(uri, args.threads, start_at, args.seconds, p)
                                          for p in range(args.procs)])
            while not pending.ready():
                pending.wait(1.0)
                if group_ms:
                    peak.append(files_per_leaf(table))
            parts = pending.get()
        with sd.connect(uri) as c:
            stats = c.stats().get("group_commit", {})
    commits = table.version - start_version
    acked = sum(p["rows"] for p in parts)
    # counted from the file references (a query of the thousands of files an ungrouped run
    # makes takes minutes); a put past the end may land unanswered, so at least
    stored = sum(f.records for f in table.files())
    assert stored >= acked, (label, stored, acked)
    lat = np.array([x for p in parts for x in p["latencies_ms"]] or [0.0])
    # where a put's time went in the server (sediment.ingest.group.GroupTimings), per put
    # and per group, in ms
    spent = stats.get("seconds", {}).get("bench", {})
    puts_in, groups = max(1, spent.get("puts", 0)), max(1, stats.get("groups") or 0)
    phases = {"put_queued_ms": 1000 * spent.get("waited", 0.0) / puts_in,
              "put_cut_to_answer_ms": 1000 * spent.get("answered_after_cut", 0.0) / puts_in,
              "group_staging_ms": 1000 * spent.get("staging", 0.0) / groups,
              "group_committing_ms": 1000 * spent.get("committing", 0.0) / groups} \
        if spent else {}
    return {"store": label, "group_commit_ms": group_ms, "clients": clients,
            "seconds": args.seconds, "rows": acked, "rows_stored": stored,
            "puts": sum(p["puts"] for p in parts), "busy": sum(p["busy"] for p in parts),
            "commits": commits, "rows_per_second": acked / args.seconds,
            "commits_per_second": commits / args.seconds,
            "ack_p50_ms": float(np.percentile(lat, 50)),
            "ack_p99_ms": float(np.percentile(lat, 99)), "groups": stats.get("groups"),
            "max_files_per_leaf": max(peak) if peak else None,
            "batch_size": int(table.properties["compaction.batch_size"]), **phases}


def flight_part(args: Any, results: dict[str, Any]) -> list[dict[str, Any]]:
    runs: list[dict[str, Any]] = []
    with temp_dir() as root:
        for ms in (20.0, 0.0):
            runs.append(flight_run("local", str(root / "local"), {}, {}, ms, args, root))
        if not args.no_s3:
            from faultproxy import FaultProxy
            from support.s3 import moto_s3_server

            with moto_s3_server() as s3, FaultProxy(s3.endpoint_url, seed=1) as proxy:
                s3.create_bucket("bench")
                options = {**s3.options, "endpoint_url": proxy.url}
                env = {**s3.env(), "AWS_ENDPOINT_URL": proxy.url}
                for ms in (20.0, 0.0):
                    runs.append(flight_run("s3+proxy", "s3://bench/store", options, env, ms,
                                           args, root))
    print_table(["store", "group ms", "clients", "rows/s", "commits/s", "puts", "busy",
                 "ack p50 ms", "ack p99 ms"],
                [[r["store"], r["group_commit_ms"], r["clients"], fmt(r["rows_per_second"]),
                  fmt(r["commits_per_second"]), r["puts"], r["busy"], fmt(r["ack_p50_ms"]),
                  fmt(r["ack_p99_ms"])] for r in runs],
                title=f"100-row puts over Flight, {args.procs} processes x {args.threads} "
                      f"threads, {args.seconds:g} s each")
    grouped = [r for r in runs if "put_queued_ms" in r]
    if grouped:
        print_table(["store", "put queued ms", "cut to answer ms", "staging ms/group",
                     "committing ms/group"],
                    [[r["store"], fmt(r["put_queued_ms"]), fmt(r["put_cut_to_answer_ms"]),
                      fmt(r["group_staging_ms"]), fmt(r["group_committing_ms"])]
                     for r in grouped],
                    title="where a put's time went in the server, group commit on")
    results["flight"] = {"procs": args.procs, "threads": args.threads,
                         "seconds": args.seconds, "runs": runs}
    goals = []
    by = {(r["store"], r["group_commit_ms"]): r for r in runs}
    for label in ("s3+proxy", "local"):
        on, off = by.get((label, 20.0)), by.get((label, 0.0))
        if on is None or off is None:
            continue
        ratio = on["rows_per_second"] / max(off["rows_per_second"], 1e-9)
        results["flight"][f"ratio_{label}"] = ratio
        if label == "s3+proxy":
            goals += [goal_line("group commit on/off rows/s (S3)", ratio, 20, "x"),
                      goal_line("commits/s per table, group commit on (S3)",
                                on["commits_per_second"], 10, "/s", higher_is_better=False),
                      goal_line("p99 acknowledgement, group commit on (S3)",
                                on["ack_p99_ms"], 1000, "ms", higher_is_better=False)]
        if on["max_files_per_leaf"] is not None:
            goals.append(goal_line(f"most files per leaf, group commit on, one maintainer "
                                   f"({label})", on["max_files_per_leaf"], on["batch_size"],
                                   "files", higher_is_better=False))
        else:
            print(f"local disk: group commit on/off rows/s {fmt(ratio)}x")
    return goals


def main() -> None:
    def extra(p: Any) -> None:
        p.add_argument("--procs", type=int, default=None, help="client processes (8)")
        p.add_argument("--threads", type=int, default=None, help="threads each (8)")
        p.add_argument("--seconds", type=float, default=None, help="per Flight run (60)")
        p.add_argument("--no-s3", action="store_true", help="skip the S3 Flight runs")
        p.add_argument("--no-writer", action="store_true", help="skip the in-process part")
        p.add_argument("--no-flight", action="store_true", help="skip the Flight part")

    args = parse_args(__doc__ or "", extra=extra)
    args.procs = args.procs or (2 if args.quick else 8)
    args.threads = args.threads or (4 if args.quick else 8)
    args.seconds = args.seconds or (8.0 if args.quick else 60.0)
    results: dict[str, Any] = {"rows_per_write": ROWS_PER_WRITE}
    goals = []
    if not args.no_writer:
        goals += writer_part(args, results)
    if not args.no_flight:
        goals += flight_part(args, results)
    results["goals"] = goals
    if not args.no_save:
        save_results("small_writes", results, quick=args.quick)


if __name__ == "__main__":
    main()
