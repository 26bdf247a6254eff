"""The Flight service (``sediment serve`` + ``sd.connect``) against the in-process API, side
by side in one run.

Run: ``python benchmarks/serve.py [--rows N] [--quick]`` (default 10M rows of the benchmark
schema in 8 leaves, fully compacted; ``--quick``: 1M rows).

The server is a real ``sediment serve`` process on 127.0.0.1 over the same store; the
in-process baseline is ``store.table(...)`` in this process.

(a) Exact-key lookups (one present key each), one after another: p50/p99 over Flight
    (``remote.table(...).query(keys=[k])``: get_flight_info + do_get) and in-process
    (``table.query(keys=[k])``). Goal: Flight p50 <= in-process p50 + 1 ms.
(b) Throughput of exact-key lookups: 8 client processes over Flight vs 8 threads in-process,
    each doing the same number of lookups. Goal: Flight/in-process >= 0.5 (lookups/s too).
(c) A streamed scan of the whole table: ``remote...scan()`` vs ``table.scan()``, batches
    counted as they arrive. Goal: Flight rows/s / in-process rows/s >= 0.5.
(d) Ingest of ``--ingest-rows`` rows (default: all of them) into an empty table: ``do_put``
    (``remote...ingest``) vs ``table.ingest``, best of two each. Goal: >= 0.7.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
from _common import Timer, goal_line, parse_args, print_table, save_results, temp_dir

import sediment as sd
from sediment.workload import benchmark_schema
from support import workload

CLIENTS = 8


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(store: str, log: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
    uri = f"grpc://127.0.0.1:{port}"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "sediment.cli", "serve", "--store",
                                 store, "--port", str(port), "--max-concurrency", "64"],
                                stdout=subprocess.DEVNULL, stderr=out)
    deadline = time.monotonic() + 60
    while True:
        try:
            sd.connect(uri).health()
            return proc, uri
        except sd.SedimentError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"server did not start: {log.read_text()[-2000:]}") from None
            time.sleep(0.1)


def percentiles(ms: list[float]) -> tuple[float, float]:
    a = np.array(ms)
    return float(np.percentile(a, 50)), float(np.percentile(a, 99))


def lookups_ms(query: Any, keys: list[str]) -> list[float]:
    for k in keys[:20]:  # warm: footers, key filters, connections
        query(k)
    out = []
    for k in keys:
        t0 = time.perf_counter()
        n = query(k)
        out.append((time.perf_counter() - t0) * 1000)
        assert n >= 1
    return out


def client_worker(uri: str, keys: list[str], start_at: float) -> tuple[float, float, int]:
    """One client process of (b): its lookups' start, end and count."""
    table = sd.connect(uri).table("bench")
    for k in keys[:5]:
        table.query(keys=[k])
    while time.time() < start_at:
        time.sleep(0.001)
    t0 = time.time()
    for k in keys:
        table.query(keys=[k])
    return t0, time.time(), len(keys)


def main() -> None:
    args = parse_args(__doc__ or "", extra=lambda p: (
        p.add_argument("--rows", type=int, default=None, help="rows (default 10M)"),
        p.add_argument("--leaves", type=int, default=8),
        p.add_argument("--lookups", type=int, default=None,
                       help="lookups for (a) and per client for (b)"),
        p.add_argument("--ingest-rows", type=int, default=None)))
    rows = args.rows or (1_000_000 if args.quick else 10_000_000)
    lookups = args.lookups or (300 if args.quick else 1000)
    ingest_rows = args.ingest_rows or rows
    results: dict[str, Any] = {"rows": rows, "leaves": args.leaves, "lookups": lookups,
                               "ingest_rows": ingest_rows, "clients": CLIENTS}
    goals = []
    with temp_dir() as tmp:
        data = workload.generate(rows, seed=11)
        store = sd.Store.open(str(tmp / "store"), create=True)
        with Timer() as t_build:
            table = store.create_table("bench", benchmark_schema(),
                                       split_points=workload.split_points(args.leaves))
            table.ingest(data)
            table.compact(full=True)
        print(f"{rows:,} rows in {args.leaves} leaves: built in {t_build.seconds:.1f} s")
        proc, uri = start_server(store.uri, tmp / "server.log")
        try:
            remote = sd.connect(uri).table("bench")
            rng = np.random.default_rng(5)
            keys = data.column("key").take(rng.integers(0, rows, lookups)).to_pylist()

            # (a) latency
            local_ms = lookups_ms(lambda k: table.query(keys=[k]).num_rows, keys)
            flight_ms = lookups_ms(lambda k: remote.query(keys=[k]).num_rows, keys)
            lp50, lp99 = percentiles(local_ms)
            fp50, fp99 = percentiles(flight_ms)
            print_table(["exact-key lookup", "p50 ms", "p99 ms"],
                        [["in-process table.query", lp50, lp99],
                         ["Flight (sd.connect)", fp50, fp99]], title="(a) latency")
            results["lookup_ms"] = {"in_process": {"p50": lp50, "p99": lp99},
                                    "flight": {"p50": fp50, "p99": fp99}}
            goals.append(goal_line("lookup p50: Flight - in-process", fp50 - lp50, 1.0, "ms",
                                   higher_is_better=False))

            # (b) throughput: 8 threads here vs 8 client processes
            per = [keys[i::CLIENTS] * max(1, lookups * 2 // len(keys)) for i in
                   range(CLIENTS)]
            for k in keys[:20]:
                table.query(keys=[k])
            with Timer() as t_threads, ThreadPoolExecutor(CLIENTS) as pool:
                list(pool.map(lambda ks: [table.query(keys=[k]) for k in ks], per))
            n_total = sum(len(p) for p in per)
            threads_rate = n_total / t_threads.seconds
            ctx = mp.get_context("spawn")
            with ctx.Pool(CLIENTS) as pool:
                start_at = time.time() + 3.0  # every process connected and warm by then
                spans = pool.starmap(client_worker, [(uri, p, start_at) for p in per])
            flight_rate = sum(s[2] for s in spans) / (max(s[1] for s in spans) -
                                                       min(s[0] for s in spans))
            print_table(["8 concurrent lookers", "lookups/s"],
                        [["8 threads in-process", threads_rate],
                         ["8 client processes over Flight", flight_rate]],
                        title="(b) throughput")
            results["lookups_per_second"] = {"in_process_threads": threads_rate,
                                             "flight_processes": flight_rate}
            goals.append(goal_line("lookup throughput: Flight / in-process",
                                   flight_rate / threads_rate, 0.5, "x"))

            # (c) streamed scan
            def count(reader: Any) -> int:
                return sum(b.num_rows for b in reader)

            scans = {}
            for name, fn in (("in_process", lambda: count(table.scan())),
                             ("flight", lambda: count(remote.scan()))):
                times = []
                for _ in range(2):
                    with Timer() as t:
                        n = fn()
                    assert n == rows, (name, n)
                    times.append(t.seconds)
                scans[name] = min(times)
            print_table(["streamed scan", "seconds", "M rows/s"],
                        [[k, v, rows / v / 1e6] for k, v in scans.items()], title="(c) scan")
            results["scan_seconds"] = scans
            goals.append(goal_line("scan: Flight rows/s / in-process rows/s",
                                   scans["in_process"] / scans["flight"], 0.5, "x"))

            # (d) ingest into empty tables, best of two each (fresh tables every time)
            part = data.slice(0, ingest_rows)
            remote_store = sd.connect(uri)
            local_s, remote_s = [], []
            for i in range(2):
                local_t = store.create_table(f"ingest_local_{i}", benchmark_schema(),
                                             split_points=workload.split_points(args.leaves))
                remote_store.create_table(f"ingest_remote_{i}", benchmark_schema(),
                                          split_points=workload.split_points(args.leaves))
                with Timer() as t_local:
                    local_t.ingest(part)
                with Timer() as t_remote:
                    res = remote_store.table(f"ingest_remote_{i}").ingest(part)
                assert res.rows == ingest_rows
                local_s.append(t_local.seconds)
                remote_s.append(t_remote.seconds)
            t_in, t_fl = min(local_s), min(remote_s)
            print_table(["ingest (best of 2)", "seconds", "M rows/s"],
                        [["in-process table.ingest", t_in, ingest_rows / t_in / 1e6],
                         ["Flight do_put", t_fl, ingest_rows / t_fl / 1e6]], title="(d) ingest")
            results["ingest_seconds"] = {"in_process": t_in, "flight": t_fl}
            goals.append(goal_line("ingest: Flight rows/s / in-process rows/s", t_in / t_fl,
                                   0.7, "x"))
            results["server_stats"] = sd.connect(uri).stats()["methods"]
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
        results["goals"] = goals
        results["cpus"] = os.cpu_count()
        results["median_lookup_ms"] = {"in_process": statistics.median(local_ms),
                                       "flight": statistics.median(flight_ms)}
    if not args.no_save:
        save_results("serve", results, quick=args.quick)


if __name__ == "__main__":
    main()
