"""Lookups on S3 with the disk cache against lookups on local disk, one run.

Run: ``python benchmarks/disk_cache.py [--rows N] [--keys N] [--passes N] [--quick]`` (default
1M rows, 200 keys, 5 timed passes; ``--quick``: 200k rows, 100 keys, 3 passes).

Setup (untimed): the same N rows of the benchmark workload (``support.workload``) ingested
into three tables of the benchmark schema with default properties but the block cache off
(``query.block_cache_bytes`` = 0, so every lookup reads its pages: what is compared is where
the bytes come from, not the in-memory cache in front of both):

- ``local``: a store on local disk (the OS page cache warm: the files were just written);
- ``s3``: a store on a loopback moto S3 server, ``query.disk_cache_bytes`` at its default,
  its cache folder (``SEDIMENT_CACHE_DIR``) in a temp folder;
- ``s3_nocache``: the same on S3 with ``query.disk_cache_bytes`` = 0 (every lookup GETs its
  pages: what the cache saves).

Each of ``--keys`` existing keys is looked up once in every table untimed (the footers, page
indexes, key filters in memory; on ``s3`` every range they read in the disk cache). Then
``--passes`` passes over the keys, each pass timing the tables in turn (their order rotated
from pass to pass, so all see the same machine load), every lookup timed alone: p50 and p99.
The S3 store's ranged GETs of data files and sidecars during the timed passes are counted
(``s3`` must make none). Every lookup's row count is checked against the other tables'.

Also, **warm from a new store** (``s3_fresh``): the keys looked up through a newly opened store
on the same S3 bucket and cache folder (its memory caches empty, as in a new process):
each first lookup of a file reads its footer, page index and filters from the disk cache,
none from S3 (counted).

Goal (issue 43): warm S3 exact-key p50 within 1.5x of local disk (``s3`` / ``local`` <= 1.5).
"""

from __future__ import annotations

import os
import statistics
import time
import uuid
from typing import Any

from _common import fmt, goal_line, parse_args, print_table, save_results, temp_dir

import sediment as sd
from sediment.storage import diskcache
from sediment.workload import benchmark_schema
from support import workload
from support.s3 import moto_s3_server

BLOCKS_OFF = {"query.block_cache_bytes": 0}


class GetCounter:
    """Counts ranged GETs of one table's data files and sidecars (its ``data/`` folder),
    at its store's root S3 store (which the store's other tables share)."""

    def __init__(self, table: sd.Table) -> None:
        self.count = 0
        objects: Any = table._handle.objects
        root = objects.root()
        folder = f"{objects.prefix}data/"  # (a table's store: its root's, under a prefix)
        inner = root.get_range

        def counted(key: str, start: int, end: int) -> bytes:
            if key.startswith(folder):
                self.count += 1
            return inner(key, start, end)

        root.get_range = counted  # type: ignore[method-assign]


def lookup_ms(table: sd.Table, key: str) -> tuple[float, int]:
    start = time.perf_counter()
    rows = table.query(keys=[key]).num_rows
    return (time.perf_counter() - start) * 1000, rows


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], extra=lambda p: (
        p.add_argument("--rows", type=int, default=0),
        p.add_argument("--keys", type=int, default=0),
        p.add_argument("--passes", type=int, default=0)))
    rows = args.rows or (200_000 if args.quick else 1_000_000)
    n_keys = args.keys or (100 if args.quick else 200)
    passes = args.passes or (3 if args.quick else 5)
    with temp_dir("sediment-diskcache-") as tmp, moto_s3_server() as server:
        os.environ[diskcache.ENV] = str(tmp / "cache")
        data = workload.generate(rows)
        keys = list(dict.fromkeys(workload.pick(data.column("key"), n_keys, seed=11)))
        bucket = server.create_bucket(f"bench-{uuid.uuid4().hex[:12]}")
        s3 = sd.Store.open(f"s3://{bucket}/store", **server.options, create=True)
        local = sd.Store.open(str(tmp / "local"), create=True)
        tables = {
            "local": local.create_table("t", benchmark_schema(), properties=BLOCKS_OFF),
            "s3": s3.create_table("t", benchmark_schema(), properties=BLOCKS_OFF),
            "s3_nocache": s3.create_table("t_nocache", benchmark_schema(), properties={
                **BLOCKS_OFF, "query.disk_cache_bytes": 0}),
        }
        for t in tables.values():
            t.ingest(data)
        del data
        counter = GetCounter(tables["s3"])
        want = {}
        for name, t in tables.items():  # untimed: every cache warm
            for k in keys:
                got = t.query(keys=[k]).num_rows
                assert want.setdefault(k, got) == got, (name, k)
        warmup_gets = counter.count
        counter.count = 0
        times: dict[str, list[float]] = {name: [] for name in tables}
        order = list(tables)
        for p in range(passes):
            for name in order[p % len(order):] + order[:p % len(order)]:
                t = tables[name]
                for k in keys:
                    ms, got = lookup_ms(t, k)
                    assert got == want[k], (name, k)
                    times[name].append(ms)
        warm_gets = counter.count
        fresh = sd.Store.open(f"s3://{bucket}/store", **server.options).table("t")
        fresh_counter = GetCounter(fresh)
        fresh_first = [lookup_ms(fresh, k)[0] for k in keys]
        fresh_gets = fresh_counter.count
        cache_bytes = sum(f.stat().st_size for f in (tmp / "cache").rglob("*") if f.is_file())

    stats = {name: {"p50_ms": statistics.median(v), "p99_ms": pct(v, 0.99),
                    "lookups": len(v)} for name, v in times.items()}
    stats["s3_fresh"] = {"p50_ms": statistics.median(fresh_first),
                         "p99_ms": pct(fresh_first, 0.99), "lookups": len(fresh_first)}
    base = stats["local"]["p50_ms"]
    print_table(["table", "p50 ms", "p99 ms", "x local p50", "lookups"],
                [[n, s["p50_ms"], s["p99_ms"], s["p50_ms"] / base, s["lookups"]]
                 for n, s in stats.items()],
                title=f"exact-key lookups, {rows:,} rows, {len(keys)} keys x {passes} passes, "
                      "block cache off")
    print(f"S3 GETs of data files and sidecars: warm-up {warmup_gets}, timed passes "
          f"{warm_gets}, new store (memory caches empty) {fresh_gets}; disk cache "
          f"{cache_bytes / 1e6:.1f} MB")
    ratio = stats["s3"]["p50_ms"] / base
    print(f"warm S3 p50 / local p50: {fmt(ratio)}x; S3 without the cache / local: "
          f"{fmt(stats['s3_nocache']['p50_ms'] / base)}x; "
          f"new store / local: {fmt(stats['s3_fresh']['p50_ms'] / base)}x")
    goals = [goal_line("warm S3 lookup p50 / local disk p50", ratio, 1.5, "x",
                       higher_is_better=False),
             goal_line("warm S3 GETs of data files and sidecars", float(warm_gets + fresh_gets),
                       0.0, "GETs", higher_is_better=False)]
    if not args.no_save:
        results: dict[str, Any] = {
            "rows": rows, "keys": len(keys), "passes": passes, "lookups": stats,
            "ratios_to_local_p50": {n: s["p50_ms"] / base for n, s in stats.items()},
            "s3_data_gets": {"warm_up": warmup_gets, "timed": warm_gets,
                             "new_store": fresh_gets},
            "disk_cache_bytes_used": cache_bytes, "goals": goals,
            "note": "timed on a machine shared with other jobs: ratios, same run, interleaved"}
        save_results("disk_cache", results, quick=args.quick)


if __name__ == "__main__":
    main()
