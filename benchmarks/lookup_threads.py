"""Lookups from 1 thread and from 8, warm and cold, in one process and one run: the ratios.

Run: ``python benchmarks/lookup_threads.py [--rows N] [--store DIR] [--lookups N]
[--rounds R]``. A shorter loop than ``benchmarks/lookups.py`` (same definitions: warm is
``bench`` with its block cache hot, cold is ``bench_cold`` with ``query.block_cache_bytes`` = 0
after a lookup of every row group's first key, so footers and key filters are cached), for
working on the thread scaling on a shared machine: the store is kept in ``--store`` and built
only when missing, and the 1- and 8-thread runs alternate round by round (best of
``--rounds``), so both see the same load. Also the process's CPU time per lookup (least of
the rounds: on a busy machine the wall-clock rates move with the other processes' load, the
CPU a lookup costs much less), the voluntary context switches per lookup (a thread that
waits: for the GIL another thread gave up, a lock, I/O), and the warm p50 of one thread.
"""

from __future__ import annotations

import argparse
import resource
import time
from pathlib import Path

import numpy as np
from _common import print_table
from _lookup_peers import thread_rate
from lookups import row_group_first_keys

import sediment as sd
from sediment.workload import benchmark_schema
from support import workload


def build(root: Path, rows: int) -> None:
    data = workload.generate(rows)
    store = sd.Store.open(str(root), create=True)
    store.create_table("bench", benchmark_schema()).ingest(data)
    store.create_table("bench_cold", benchmark_schema(),
                       properties={"query.block_cache_bytes": 0}).ingest(data)
    (root / "keys.txt").write_text("\n".join(
        dict.fromkeys(workload.pick(data.column("key"), 60_000, seed=11))))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--store", default="/tmp/sediment-lookup-threads")
    p.add_argument("--lookups", type=int, default=4000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--hot", type=int, default=1000)
    args = p.parse_args()
    root = Path(args.store) / str(args.rows)
    if not (root / "keys.txt").exists():
        build(root, args.rows)
    store = sd.Store.open(str(root))
    warm, cold = store.table("bench"), store.table("bench_cold")
    keys = (root / "keys.txt").read_text().split("\n")
    hot, fresh = keys[:args.hot], keys[args.hot:]
    for k in row_group_first_keys(cold):
        cold.query(keys=[k])
    for k in hot * 2:
        warm.query(keys=[k])
    rng = np.random.default_rng(3)
    warm_keys = [hot[i] for i in rng.integers(0, len(hot), size=args.lookups)]

    def lookup(table: sd.Table):  # type: ignore[no-untyped-def]
        return lambda: (lambda k: table.query(keys=[k]).num_rows)

    best: dict[tuple[str, int], float] = {}
    cpu: dict[tuple[str, int], float] = {}
    waits: dict[tuple[str, int], float] = {}
    at = 0
    for _ in range(args.rounds):
        for mode, table in (("warm", warm), ("cold", cold)):
            for threads in (1, 8):
                if mode == "warm":
                    ks = warm_keys
                else:
                    ks = fresh[at:at + args.lookups]
                    at += args.lookups
                    if len(ks) < args.lookups:
                        raise SystemExit("not enough fresh keys: lower --lookups/--rounds")
                before = resource.getrusage(resource.RUSAGE_SELF).ru_nvcsw
                r = thread_rate(lookup(table), ks, threads)
                switches = resource.getrusage(resource.RUSAGE_SELF).ru_nvcsw - before
                waits[mode, threads] = min(waits.get((mode, threads), float("inf")),
                                           switches / len(ks))
                best[mode, threads] = max(best.get((mode, threads), 0.0), r["rate"])
                cpu[mode, threads] = min(cpu.get((mode, threads), float("inf")),
                                         r["cpu_seconds"] / len(ks) * 1e6)
    lat = []
    for k in hot:
        t0 = time.perf_counter()
        warm.query(keys=[k])
        lat.append(time.perf_counter() - t0)
    rows = [[mode, best[mode, 1], best[mode, 8], best[mode, 8] / best[mode, 1],
             cpu[mode, 1], cpu[mode, 8], waits[mode, 1], waits[mode, 8]]
            for mode in ("warm", "cold")]
    print_table(["mode", "1 thread /s", "8 threads /s", "8/1", "CPU us/lookup 1",
                 "CPU us/lookup 8", "waits/lookup 1", "waits/lookup 8"], rows,
                title=f"{args.rows:,} rows, {args.lookups} lookups, best of {args.rounds}")
    print(f"warm p50 {np.percentile(lat, 50) * 1000:.3f} ms, "
          f"p99 {np.percentile(lat, 99) * 1000:.3f} ms")


if __name__ == "__main__":
    main()
