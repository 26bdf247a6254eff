"""External engines over Sediment: DuckDB, DataFusion, Polars and a pyarrow plan_files reader,
side by side in one run.

Run: ``python benchmarks/engines.py [--rows N] [--leaves N] [--quick]`` (default 10M rows in 8
leaves; ``--quick``: 1M rows).

The rows (benchmark schema, ``support.workload``) are ingested into a table split into ``--leaves``
leaves, fully compacted (one file per leaf, the steady state), and also written, sorted by
(key, timestamp), as one plain Parquet file (the baseline).

(a) A group-by aggregation (``count(*)``, ``max(timestamp)``, ``min(value)`` grouped by the
    first two characters of the key) through DuckDB over the Sediment view
    (``table.to_duckdb``) and through DuckDB over the plain Parquet file, warm, best of 3.
    Goal: DuckDB-over-Parquet time / DuckDB-over-Sediment time >= 0.7.
(b) A selective key filter (one exact key, present) through each route: ``table.query``
    (the reference), DuckDB over the view (``where key = ...``), DataFusion
    (``register_datafusion(..., keys=[k])`` then a ``select``: it reads at registration),
    Polars (``to_polars(lazy=True).filter(pl.col("key") == k).collect()``), and
    ``plan_files(keys=[k])`` read with pyarrow (the planned row groups of each file, through
    a ``ParquetFile`` kept open per file as an engine keeps footers), restricted to the
    region and keys; median of several keys, warm. Goal for each: <= 3x ``table.query``.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from _common import Timer, goal_line, parse_args, print_table, save_results, temp_dir

import sediment as sd
from sediment.workload import benchmark_schema
from support import workload

GROUP_BY = ("select substr(key, 1, 2) as k2, count(*) as n, max(timestamp) as ts, "
            "min(value) as v from {src} group by 1 order by 1")


def best(fn: Any, repeats: int = 3) -> tuple[float, Any]:
    out: Any = None
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return min(times), out


def median_ms(fn: Any, keys: list[str]) -> float:
    for k in keys[:3]:  # warm
        fn(k)
    times = []
    for k in keys:
        t0 = time.perf_counter()
        fn(k)
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], extra=lambda p: (
        p.add_argument("--rows", type=int, default=None, help="rows (default 10M)"),
        p.add_argument("--leaves", type=int, default=8, help="leaf partitions"),
        p.add_argument("--lookups", type=int, default=None, help="keys for (b)"),
    ))
    import datafusion
    import duckdb
    import polars as pl

    rows = args.rows or (1_000_000 if args.quick else 10_000_000)
    n_keys = args.lookups or (10 if args.quick else 30)
    results: dict[str, Any] = {"rows": rows, "leaves": args.leaves}
    with temp_dir() as tmp:
        data = workload.generate(rows, seed=11)
        store = sd.Store.open(str(tmp / "store"), create=True)
        table = store.create_table("bench", benchmark_schema(),
                                   split_points=workload.split_points(args.leaves),
                                   properties={"state.cache.refresh_seconds": 3600})
        with Timer() as t_build:
            table.ingest(data)
            table.compact(full=True)
        plain = tmp / "plain.parquet"
        with Timer() as t_plain:
            pq.write_table(data.sort_by([("key", "ascending"), ("timestamp", "ascending")]),
                           plain)
        results["build_seconds"] = {"sediment": t_build.seconds, "plain_parquet": t_plain.seconds}
        print(f"{rows:,} rows: table built in {t_build.seconds:.1f} s "
              f"({len(table.files())} files), plain Parquet in {t_plain.seconds:.1f} s")

        # (a) group-by through DuckDB
        con = duckdb.connect()
        table.to_duckdb(con, "sediment_view")
        t_sed, got = best(lambda: con.sql(GROUP_BY.format(src="sediment_view")).fetchall())
        t_pq, want = best(lambda: con.sql(GROUP_BY.format(src=f"read_parquet('{plain}')")
                                          ).fetchall())
        assert got == want, "DuckDB over Sediment and over Parquet disagree"
        results["group_by_seconds"] = {"duckdb_sediment": t_sed, "duckdb_parquet": t_pq}
        print_table(["route", "seconds", "M rows/s"],
                    [["DuckDB over Sediment (to_duckdb)", t_sed, rows / t_sed / 1e6],
                     ["DuckDB over one sorted Parquet file", t_pq, rows / t_pq / 1e6]],
                    title="(a) group-by aggregation, warm, best of 3")

        # (b) selective key filter through each route
        rng = np.random.default_rng(5)
        keys = data.column("key").take(rng.integers(0, rows, n_keys)).to_pylist()
        schema = table.schema
        fs, _ = table._handle.objects.arrow_filesystem()
        lazy = table.to_polars(lazy=True)

        def via_duckdb(k: str) -> int:
            return len(con.execute("select * from sediment_view where key = ?", [k]).fetchall())

        def via_datafusion(k: str) -> int:
            ctx = datafusion.SessionContext()
            table.register_datafusion(ctx, "t", keys=[k])
            return ctx.sql("select * from t").to_arrow_table().num_rows

        def via_polars(k: str) -> int:
            return lazy.filter(pl.col("key") == k).collect().height

        footers: dict[str, pq.ParquetFile] = {}  # an engine keeps open what it reads often

        def via_plan(k: str) -> int:
            from sediment.files.keys import rows_in

            n = 0
            for p in table.plan_files(keys=[k]):  # compacted, no iterators: no merge
                assert not p.merge
                pf = footers.get(p.path)
                if pf is None:
                    pf = footers[p.path] = pq.ParquetFile(p.path, filesystem=fs)
                f = pf.read_row_groups(list(p.row_groups))
                n += rows_in(f, schema.row_key_names, p.region, p.ranges).num_rows
            return n

        routes = {"table.query": lambda k: table.query(keys=[k]).num_rows,
                  "DuckDB (to_duckdb)": via_duckdb, "DataFusion (register_datafusion)":
                  via_datafusion, "Polars (to_polars lazy)": via_polars,
                  "pyarrow (plan_files)": via_plan}
        for k in keys[:3]:
            counts = {name: fn(k) for name, fn in routes.items()}
            assert len(set(counts.values())) == 1, f"routes disagree for {k}: {counts}"
        lat = {name: median_ms(fn, keys) for name, fn in routes.items()}
        ref = lat["table.query"]
        results["key_filter_median_ms"] = lat
        print_table(["route", "median ms", "x table.query"],
                    [[name, ms, ms / ref] for name, ms in lat.items()],
                    title=f"(b) one exact key, median of {n_keys} keys, warm")

        goals = [goal_line("group-by: DuckDB over Parquet / DuckDB over Sediment", t_pq / t_sed,
                           0.7, "x")]
        for name, ms in lat.items():
            if name != "table.query":
                goals.append(goal_line(f"key filter: {name} / table.query", ms / ref, 3.0, "x",
                                       higher_is_better=False))
        results["goals"] = goals
        del data
    pa.default_memory_pool().release_unused()
    if not args.no_save:
        save_results("engines", results, quick=args.quick)


if __name__ == "__main__":
    main()
