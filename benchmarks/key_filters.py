"""Key filters: exact-key lookups in a leaf of many files, with filters and without.

Run: ``python benchmarks/key_filters.py [--rows N] [--lookups N] [--quick]`` (default 2M rows,
2000 lookups; ``--quick``: 400k rows, 500 lookups).

For each layout (the same rows in one leaf as 1, 4, 12 and 24 files of the benchmark schema,
written by ``table.ingest``) two tables are built in one store: one with the default
``parquet.key_filter_bits`` (10) and the baseline with 0 (no filters: a lookup decodes one row
group in each file whose [min, max] covers the key). Lookups of keys that exist and of keys that
do not are timed warm, in alternating blocks across the two tables. Also timed: ingest of the
same rows with and without filters (the cost of building them).

Goals: with 12 files per leaf (the compaction batch size, the most a leaf holds), exact-key p50
with filters <= 1.5x the p50 of a single-file leaf; ingest with filters >= 0.85x the rate
without.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
from _common import (
    Timer,
    goal_line,
    parse_args,
    print_table,
    save_results,
    temp_dir,
)

import sediment as sd
from sediment.workload import benchmark_schema
from support import workload

BLOCK = 100


def build(store: sd.Store, name: str, data: Any, files: int, bits: int) -> tuple[sd.Table, float]:
    table = store.create_table(name, benchmark_schema(), properties={
        "parquet.key_filter_bits": bits, "state.cache.refresh_seconds": 3600})
    n = data.num_rows
    with Timer() as t:
        for i in range(files):
            table.ingest(data.slice(i * n // files, (i + 1) * n // files - i * n // files))
    return table, t.seconds


def lookups(tables: dict[str, sd.Table], keys: list[str]) -> dict[str, list[float]]:
    lat: dict[str, list[float]] = {name: [] for name in tables}
    for t in tables.values():  # warm: footers, filter blocks, page cache
        for k in keys[:200]:
            t.query(keys=[k])
    for i in range(0, len(keys), BLOCK):
        for name, t in tables.items():
            for k in keys[i : i + BLOCK]:
                t0 = time.perf_counter()
                t.query(keys=[k])
                lat[name].append((time.perf_counter() - t0) * 1000)
    return lat


def pct(values: list[float]) -> dict[str, float]:
    a = np.asarray(values)
    return {"p50_ms": float(np.percentile(a, 50)), "p99_ms": float(np.percentile(a, 99))}


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], extra=lambda p: (
        p.add_argument("--rows", type=int, default=None, help="rows per table (default 2M)"),
        p.add_argument("--lookups", type=int, default=None, help="lookups per kind"),
    ))
    rows = args.rows or (400_000 if args.quick else 2_000_000)
    n_lookups = args.lookups or (500 if args.quick else 2000)
    data = workload.generate(rows, seed=7)
    rng = np.random.default_rng(3)
    present = data.column("key").take(rng.integers(0, rows, n_lookups)).to_pylist()
    absent = workload.random_strings(np.random.default_rng(99), n_lookups,
                                    workload.KEY_LENGTH).to_pylist()
    results: dict[str, Any] = {"rows": rows, "lookups": n_lookups, "layouts": {}}
    out_rows = []
    with temp_dir() as tmp:
        store = sd.Store.open(str(tmp / "store"), create=True)
        for files in (1, 4, 12, 24):
            with_f, t_with = build(store, f"f{files}", data, files, 10)
            without, t_without = build(store, f"n{files}", data, files, 0)
            tables = {"filters": with_f, "no filters": without}
            hit = lookups(tables, present)
            miss = lookups(tables, absent)
            r = {"files": files, "ingest_seconds": {"filters": t_with, "no filters": t_without},
                 "present": {k: pct(v) for k, v in hit.items()},
                 "absent": {k: pct(v) for k, v in miss.items()}}
            results["layouts"][str(files)] = r
            out_rows.append([files, r["present"]["filters"]["p50_ms"],
                             r["present"]["no filters"]["p50_ms"],
                             r["present"]["filters"]["p99_ms"],
                             r["present"]["no filters"]["p99_ms"],
                             r["absent"]["filters"]["p50_ms"],
                             r["absent"]["no filters"]["p50_ms"],
                             rows / t_with, rows / t_without])
    print_table(["files in leaf", "hit p50 ms (filters)", "hit p50 ms (none)",
                 "hit p99 (filters)", "hit p99 (none)", "miss p50 (filters)", "miss p50 (none)",
                 "ingest rows/s (filters)", "ingest rows/s (none)"], out_rows,
                title=f"Exact-key lookups, {rows:,} rows in one leaf, warm")
    lay = results["layouts"]
    p50_12 = lay["12"]["present"]["filters"]["p50_ms"]
    p50_1 = lay["1"]["present"]["filters"]["p50_ms"]
    t_with = sum(v["ingest_seconds"]["filters"] for v in lay.values())
    t_without = sum(v["ingest_seconds"]["no filters"] for v in lay.values())
    goals = [
        goal_line("exact-key p50, 12 files per leaf / 1 file (with filters)", p50_12 / p50_1,
                  1.5, "x", higher_is_better=False),
        goal_line("ingest rate with filters / without", t_without / t_with, 0.85, "x"),
    ]
    print(f"(for comparison) 12 files without filters / 1 file: "
          f"{lay['12']['present']['no filters']['p50_ms'] / p50_1:.2f}x")
    results["goals"] = goals
    if not args.no_save:
        save_results("key_filters", results, quick=args.quick)


if __name__ == "__main__":
    main()
