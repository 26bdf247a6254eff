"""Query benchmark: exact-key and range latency and full-scan speed, against DuckDB and pyarrow.

Run: ``python benchmarks/query.py [--rows N] [--quick] [--profile]`` (default 10M rows;
``--quick``: 1M).

A table of N rows of the benchmark workload (see ``support.workload``) is ingested into a fresh
local store (default properties, one leaf). Then, all warm (footers and state cached, OS page
cache hot; a warm-up pass runs first and is not counted; sediment and DuckDB run in alternating
blocks of queries so both see the same machine load):

* exact-key latency, p50/p99 over ``--keys`` random existing keys: ``table.query(keys=[k])``
  vs DuckDB ``SELECT * FROM read_parquet([<the table's files>]) WHERE key = ?`` (a parameterised
  statement, Parquet metadata cache on, result fetched as Arrow);
* range-query latency for ranges holding ~10, ~1000, ~100k (and ~1M) rows, vs DuckDB;
* full scan rows/s: ``table.scan()`` (streamed) and ``table.query()`` (materialised) vs
  ``pq.read_table`` of the same files (the goal's baseline) and, for reference, pyarrow's
  fastest path on these files, ``ParquetFile.iter_batches`` (streamed);
* a sweep of ``parquet.row_group_rows`` (4096, 8192, 16384, 65536): ingest, exact-key p50/p99
  (and DuckDB's), full-scan rate and file size for each, to choose the default.

Goals (10M rows): exact-key p50 <= 2 ms, p99 <= 10 ms, >= 3x faster than DuckDB (p50);
full scan >= 0.7x pyarrow's read.
"""

from __future__ import annotations

import cProfile
import gc
import io
import pstats
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from _common import (
    RssSampler,
    Timer,
    goal_line,
    parse_args,
    peak_rss_mib,
    print_table,
    rate,
    save_results,
    temp_dir,
)

import sediment as sd
from sediment.properties import defaults
from sediment.workload import benchmark_schema
from support import workload

P50_GOAL_MS = 2.0
P99_GOAL_MS = 10.0
DUCKDB_GOAL = 3.0
SCAN_GOAL = 0.7
ROW_GROUP_SIZES = (4096, 8192, 16384, 65536)


# ---- helpers ---------------------------------------------------------------------------------
def percentiles(seconds: Sequence[float]) -> dict[str, float]:
    """p50/p90/p99/max/mean in milliseconds."""
    ms = np.asarray(seconds) * 1000.0
    return {"p50_ms": float(np.percentile(ms, 50)), "p90_ms": float(np.percentile(ms, 90)),
            "p99_ms": float(np.percentile(ms, 99)), "max_ms": float(ms.max()),
            "mean_ms": float(ms.mean()), "count": len(ms)}


def timed_pairs(fa: Callable[[Any], int], fb: Callable[[Any], int], args: Sequence[Any],
                warm: Sequence[Any], block: int = 50
                ) -> tuple[list[float], list[int], list[float], list[int]]:
    """Time ``fa`` and ``fb`` on each argument, in alternating blocks of ``block`` calls, so
    both see the same machine load (call-by-call interleaving would let one engine's threads
    and cache footprint slow the other down); warm-up calls are not timed."""
    for a in warm:
        fa(a)
        fb(a)
    ta: list[float] = []
    tb: list[float] = []
    ca: list[int] = []
    cb: list[int] = []
    for start in range(0, len(args), block):
        chunk = args[start:start + block]
        for f, times, counts in ((fa, ta, ca), (fb, tb, cb)):
            for a in chunk:
                t0 = time.perf_counter()
                n = f(a)
                times.append(time.perf_counter() - t0)
                counts.append(n)
    return ta, ca, tb, cb


def build_table(data: pa.Table, root: Path, properties: dict[str, Any]
                ) -> tuple[sd.Table, list[str], float]:
    """Ingest ``data`` into a fresh store at ``root``: (table, data file paths, seconds)."""
    store = sd.Store.open(str(root), create=True)
    table = store.create_table("bench", benchmark_schema(), properties=properties)
    with Timer() as t:
        table.ingest(data)
    files = sorted({table._handle.objects.path(r.filename) for r in table.files()})
    return table, files, t.seconds


def file_stats(files: Sequence[str]) -> dict[str, Any]:
    groups = 0
    size = 0
    for f in files:
        groups += pq.ParquetFile(f).metadata.num_row_groups
        size += Path(f).stat().st_size
    return {"files": len(files), "row_groups": groups, "bytes": size}


class DuckQuery:
    """DuckDB over the table's files: one connection, parameterised statements (DuckDB caches
    the prepared plan per statement text), Parquet metadata cache on, Arrow results.

    (``PREPARE``/``EXECUTE 'literal'``, a view, or literal SQL measured the same, within 5%.)
    """

    def __init__(self, files: Sequence[str]) -> None:
        self.con = duckdb.connect()
        self.con.execute("SET parquet_metadata_cache = true")
        listing = ", ".join("'" + f.replace("'", "''") + "'" for f in files)
        source = f"read_parquet([{listing}])"
        self.exact_sql = f"SELECT * FROM {source} WHERE key = $1"
        self.range_sql = (f"SELECT * FROM {source} WHERE key >= $1 AND key < $2 "
                          "ORDER BY key, timestamp")

    def exact(self, key: str) -> int:
        return self.con.sql(self.exact_sql, params=[key]).to_arrow_table().num_rows

    def range(self, bounds: tuple[str, str]) -> int:
        return self.con.sql(self.range_sql, params=list(bounds)).to_arrow_table().num_rows

    def close(self) -> None:
        self.con.close()


def sediment_exact(table: sd.Table) -> Callable[[str], int]:
    def run(key: str) -> int:
        return table.query(keys=[key]).num_rows
    return run


def sediment_range(table: sd.Table) -> Callable[[tuple[str, str]], int]:
    def run(bounds: tuple[str, str]) -> int:
        return table.query(ranges=[sd.Range(bounds[0], bounds[1])]).num_rows
    return run


def check_found(name: str, counts: Sequence[int]) -> None:
    missing = sum(1 for c in counts if c == 0)
    if missing:
        raise AssertionError(f"{name}: {missing} of {len(counts)} existing keys returned no rows")


def exact_key_bench(table: sd.Table, duck: DuckQuery, keys: list[str], warm: list[str]
                    ) -> dict[str, Any]:
    gc.collect()
    t_sd, c_sd, t_dk, c_dk = timed_pairs(sediment_exact(table), duck.exact, keys, warm)
    check_found("sediment exact-key", c_sd)
    if c_dk != c_sd:
        raise AssertionError("sediment and DuckDB disagree on exact-key row counts")
    out = {"sediment": percentiles(t_sd), "duckdb": percentiles(t_dk)}
    out["duckdb_over_sediment_p50"] = out["duckdb"]["p50_ms"] / out["sediment"]["p50_ms"]
    out["rows_per_key_mean"] = float(statistics.mean(c_sd))
    return out


def scan_bench(table: sd.Table, files: list[str], repeats: int, rows: int) -> dict[str, Any]:
    def sd_scan() -> int:
        n = 0
        for b in table.scan():
            n += b.num_rows
        return n

    def sd_query() -> int:
        return table.query().num_rows

    def pa_read() -> int:
        return pq.read_table(files).num_rows

    def pa_read_1t() -> int:
        return pq.read_table(files, use_threads=False).num_rows

    def pa_stream() -> int:
        n = 0
        for f in files:
            for b in pq.ParquetFile(f).iter_batches(batch_size=65536):
                n += b.num_rows
        return n

    out: dict[str, Any] = {}
    for name, fn in (("pyarrow pq.read_table", pa_read),
                     ("pyarrow pq.read_table, 1 thread", pa_read_1t),
                     ("pyarrow iter_batches (streamed)", pa_stream),
                     ("sediment table.scan()", sd_scan),
                     ("sediment table.query()", sd_query)):
        fn()  # warm
        times = []
        with RssSampler() as mem:
            for _ in range(repeats):
                gc.collect()
                t0 = time.perf_counter()
                n = fn()
                times.append(time.perf_counter() - t0)
                if n != rows:
                    raise AssertionError(f"{name} returned {n} rows, expected {rows}")
        med = statistics.median(times)
        out[name] = {"seconds": med, "rows_per_second": rate(rows, med),
                     "peak_rss_delta_mib": mem.delta_mib, "runs": times}
    base = out["pyarrow pq.read_table"]["seconds"]
    stream = out["pyarrow iter_batches (streamed)"]["seconds"]
    for v in out.values():
        v["ratio_to_pyarrow"] = base / v["seconds"]
        v["ratio_to_pyarrow_streamed"] = stream / v["seconds"]
    return out


def profile(label: str, fn: Callable[[Any], int], args: Sequence[Any]) -> None:
    prof = cProfile.Profile()
    prof.enable()
    for a in args:
        fn(a)
    prof.disable()
    s = io.StringIO()
    pstats.Stats(prof, stream=s).sort_stats("cumulative").print_stats(30)
    print(f"\ncProfile of {label} ({len(args)} calls), cumulative:")
    print(s.getvalue())
    s = io.StringIO()
    pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(15)
    print(s.getvalue())


# ---- main ------------------------------------------------------------------------------------
def main() -> None:
    args = parse_args(__doc__.splitlines()[0], extra=lambda p: (
        p.add_argument("--rows", type=int, default=None, help="rows (default 10M; quick 1M)"),
        p.add_argument("--keys", type=int, default=1000, help="exact keys timed"),
        p.add_argument("--warm", type=int, default=100, help="warm-up queries"),
        p.add_argument("--sweep-keys", type=int, default=300,
                       help="exact keys timed per row-group size"),
        p.add_argument("--no-sweep", action="store_true", help="skip the row-group sweep"),
        p.add_argument("--profile", action="store_true",
                       help="print cProfiles of exact-key and range queries"),
    ))
    rows = args.rows or (1_000_000 if args.quick else 10_000_000)
    default_rg = int(defaults()["parquet.row_group_rows"])
    results: dict[str, Any] = {"rows": rows, "default_row_group_rows": default_rg}

    with Timer() as t_gen:
        data = workload.generate(rows)
    print(f"generated {rows:,} rows ({data.nbytes / 2**20:,.0f} MiB) in {t_gen.seconds:.2f} s")
    all_keys = data.column("key")
    keys = workload.pick(all_keys, args.keys, seed=1)
    warm = workload.pick(all_keys, args.warm, seed=2)
    sweep_keys = workload.pick(all_keys, args.sweep_keys, seed=3)
    rng = np.random.default_rng(4)
    range_sizes = [10, 1_000, 100_000] + ([1_000_000] if rows >= 5_000_000 else [])
    range_counts = {10: 200, 1_000: 100, 100_000: 20, 1_000_000: 5}

    with temp_dir() as tmp:
        table, files, ingest_s = build_table(data, tmp / "main", {})
        fstats = file_stats(files)
        print(f"ingested in {ingest_s:.2f} s ({rate(rows, ingest_s) / 1e6:.2f} M rows/s): "
              f"{fstats['files']} file(s), {fstats['row_groups']:,} row groups, "
              f"{fstats['bytes'] / 2**20:,.0f} MiB")
        results["table"] = {"ingest_seconds": ingest_s, **fstats}
        duck = DuckQuery(files)

        # -- exact keys
        ex = exact_key_bench(table, duck, keys, warm)
        results["exact_key"] = ex
        print_table(["exact-key query", "p50 ms", "p90 ms", "p99 ms", "max ms", "mean ms"],
                    [[name, v["p50_ms"], v["p90_ms"], v["p99_ms"], v["max_ms"], v["mean_ms"]]
                     for name, v in (("sediment table.query(keys=[k])", ex["sediment"]),
                                     ("DuckDB, same files", ex["duckdb"]))],
                    title=f"Exact-key latency, {len(keys)} random existing keys, {rows:,} rows")
        print(f"DuckDB p50 / sediment p50 = {ex['duckdb_over_sediment_p50']:.2f}x")

        # -- ranges
        range_rows = []
        results["ranges"] = []
        for size in range_sizes:
            n = range_counts[size]
            starts = workload.random_strings(rng, n + 5, workload.KEY_LENGTH).to_pylist()
            bounds = [workload.key_range_for(s, size, rows) for s in starts]
            t_sd, c_sd, t_dk, c_dk = timed_pairs(sediment_range(table), duck.range, bounds[5:],
                                                 bounds[:5], block=10)
            if c_sd != c_dk:
                raise AssertionError(f"range ~{size} rows: sediment and DuckDB disagree")
            ps, pd = percentiles(t_sd), percentiles(t_dk)
            mean_rows = float(statistics.mean(c_sd))
            r = {"expected_rows": size, "queries": n, "mean_rows": mean_rows,
                 "sediment": ps, "duckdb": pd,
                 "sediment_rows_per_second": rate(sum(c_sd), sum(t_sd)),
                 "duckdb_rows_per_second": rate(sum(c_dk), sum(t_dk))}
            results["ranges"].append(r)
            range_rows.append([f"~{size:,} rows", n, mean_rows, ps["p50_ms"], ps["p99_ms"],
                               pd["p50_ms"], pd["p99_ms"], pd["p50_ms"] / ps["p50_ms"],
                               r["sediment_rows_per_second"] / 1e6])
        print_table(["range", "queries", "mean rows", "sediment p50 ms", "p99 ms",
                     "DuckDB p50 ms", "p99 ms", "DuckDB/sed", "sed Mrows/s"], range_rows,
                    title="Range-query latency")

        if args.profile:
            profile("exact-key queries", sediment_exact(table), keys[:300])
            profile("~1000-row range queries", sediment_range(table),
                    [workload.key_range_for(s, 1000, rows) for s in
                     workload.random_strings(rng, 50, workload.KEY_LENGTH).to_pylist()])

        # -- full scan
        repeats = 3 if rows <= 10_000_000 else 1
        scan = scan_bench(table, files, repeats, rows)
        results["scan"] = scan
        print_table(["full scan", "seconds", "Mrows/s", "x read_table", "x iter_batches",
                     "peak RSS +MiB"],
                    [[k, v["seconds"], v["rows_per_second"] / 1e6, v["ratio_to_pyarrow"],
                      v["ratio_to_pyarrow_streamed"], v["peak_rss_delta_mib"]]
                     for k, v in scan.items()],
                    title=f"Full scan of {rows:,} rows (median of {repeats})")
        duck.close()

        # -- row-group sweep
        sweep = []
        if not args.no_sweep:
            for rg in ROW_GROUP_SIZES:
                if rg == default_rg:
                    t, f, ing = table, files, ingest_s
                else:
                    t, f, ing = build_table(data, tmp / f"rg{rg}", {"parquet.row_group_rows": rg})
                d = DuckQuery(f)
                e = exact_key_bench(t, d, sweep_keys, warm[:50])
                d.close()
                s = scan_bench(t, f, 2, rows) if rg != default_rg else scan
                st = file_stats(f)
                entry = {"row_group_rows": rg, "ingest_seconds": ing,
                         "ingest_rows_per_second": rate(rows, ing), **st,
                         "sediment_exact": e["sediment"], "duckdb_exact": e["duckdb"],
                         "scan_rows_per_second": s["sediment table.scan()"]["rows_per_second"],
                         "scan_ratio_to_pyarrow": s["sediment table.scan()"]["ratio_to_pyarrow"],
                         "pyarrow_read_rows_per_second":
                             s["pyarrow pq.read_table"]["rows_per_second"]}
                sweep.append(entry)
                print(f"row groups of {rg:,}: exact p50 {e['sediment']['p50_ms']:.2f} ms, "
                      f"scan {entry['scan_rows_per_second'] / 1e6:.2f} M rows/s")
            print_table(["row group rows", "groups", "MiB", "ingest Mrows/s", "exact p50 ms",
                         "p99 ms", "DuckDB p50 ms", "scan Mrows/s", "scan x pyarrow",
                         "pyarrow read Mrows/s"],
                        [[e["row_group_rows"], e["row_groups"], e["bytes"] / 2**20,
                          e["ingest_rows_per_second"] / 1e6, e["sediment_exact"]["p50_ms"],
                          e["sediment_exact"]["p99_ms"], e["duckdb_exact"]["p50_ms"],
                          e["scan_rows_per_second"] / 1e6, e["scan_ratio_to_pyarrow"],
                          e["pyarrow_read_rows_per_second"] / 1e6] for e in sweep],
                        title=f"Row-group size sweep ({rows:,} rows, {len(sweep_keys)} keys each; "
                              f"default {default_rg:,})")
        results["row_group_sweep"] = sweep

    print(f"\npeak RSS of the process: {peak_rss_mib():,.0f} MiB\n")
    goals = [
        goal_line("exact-key p50", ex["sediment"]["p50_ms"], P50_GOAL_MS, "ms",
                  higher_is_better=False),
        goal_line("exact-key p99", ex["sediment"]["p99_ms"], P99_GOAL_MS, "ms",
                  higher_is_better=False),
        goal_line("exact-key p50 speed-up over DuckDB", ex["duckdb_over_sediment_p50"],
                  DUCKDB_GOAL, "x"),
        goal_line("full scan (table.scan) vs pyarrow read",
                  scan["sediment table.scan()"]["ratio_to_pyarrow"], SCAN_GOAL, "x"),
    ]
    results["goals"] = goals
    if not args.no_save:
        save_results("query", results, quick=args.quick)


if __name__ == "__main__":
    main()
