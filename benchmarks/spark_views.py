"""Spark view benchmark: which temp view of a table is the fastest correct one for Spark SQL,
``spark.read.format("sediment")`` or ``sediment.spark.read_table`` (what
``sediment.spark.register_view`` registers), per kind of table.

Run: ``python benchmarks/spark_views.py [--rows N] [--quick] [--repeats R]`` (default 2M rows;
``--quick``: 500k).

Tables (ingested untimed, in 8 leaves by split points):

* ``plain``: no iterators, compacted (one file per leaf): read_table reads every leaf with
  Spark's own Parquet reader;
* ``summed``: an ``aggregate`` query iterator (sum per row and sort key) over two ingests of the
  same rows (two files per leaf): every leaf needs Sediment's merge, so read_table reads them
  all through the data source.

Views (one session, ``local[2]``): ``source`` is a temp view of
``spark.read.format("sediment")`` (pushdown off, its default: a temp view must not push down,
see docs/howto/spark.md); ``register_view`` is ``register_view(spark, table, name)``. Queries:
one key (``WHERE key = ...``), a 1% key range (``count(*)``), and a group-by over every row.
Each is run once to warm up, then ``--repeats`` times in rotating order; the best time is
reported. Every answer is checked against ``table.query()``.
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

import numpy as np
import pyarrow as pa
from _common import parse_args, print_table, save_results, temp_dir

import sediment as sd

SCHEMA = sd.Schema(row_keys=[("key", pa.string())], sort_keys=[("ts", pa.int64())],
                   values=[("value", pa.int64()), ("payload", pa.string())])
QUERIES = {
    "one key": "SELECT * FROM {view} WHERE key = 'k{one}'",
    "1% range": "SELECT count(*) AS c FROM {view} WHERE key >= 'k{lo}' AND key < 'k{hi}'",
    "group-by": "SELECT substr(key, 1, 3) AS p, count(*) AS c, sum(value) AS s FROM {view} "
                "GROUP BY 1",
}


def _data(rows: int) -> pa.Table:
    rng = np.random.default_rng(7)
    keys = np.char.add("k", np.char.zfill(np.arange(rows).astype(str), 9))
    return pa.table({"key": keys, "ts": np.zeros(rows, dtype=np.int64),
                     "value": rng.integers(0, 1000, rows),
                     "payload": np.char.add("p", rng.integers(0, 10**6, rows).astype(str))},
                    schema=SCHEMA.to_arrow())


def _options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--rows", type=int, default=None)
    p.add_argument("--repeats", type=int, default=3)


def _answer(spark: Any, sql: str) -> tuple[float, list[tuple[Any, ...]]]:
    started = time.perf_counter()
    rows = spark.sql(sql).collect()
    return time.perf_counter() - started, sorted(tuple(r) for r in rows)


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], extra=_options)
    rows = args.rows or (500_000 if args.quick else 2_000_000)
    from sediment.spark import register_view, session

    splits = [f"k{rows * i // 8:09d}" for i in range(1, 8)]
    one, lo, hi = f"{rows // 3:09d}", f"{rows // 2:09d}", f"{rows // 2 + rows // 100:09d}"
    results: dict[str, dict[str, dict[str, list[float]]]] = {}
    with temp_dir() as tmp:
        data = _data(rows)
        store = sd.Store.open(str(tmp / "store"), create=True)
        plain = store.create_table("plain", SCHEMA, split_points=splits)
        plain.ingest(data)
        plain.compact(full=True)
        summed = store.create_table("summed", SCHEMA, split_points=splits, properties={
            "query.iterators": '[{"type": "aggregate", "functions": {"value": "sum", '
                               '"payload": "last"}}]'})
        summed.ingest(data)
        summed.ingest(data)
        del data
        spark = session("local[2]", app_name="sediment-bench-spark-views",
                        conf={"spark.sql.shuffle.partitions": "8", "spark.ui.enabled": "false"})
        for table in (plain, summed):
            source = f"{table.name}_source"
            (spark.read.format("sediment").option("store", store.uri)
             .option("table", table.name).load().createOrReplaceTempView(source))
            fast = f"{table.name}_view"
            register_view(spark, table, fast)
            views = {"source": source, "register_view": fast}
            want = {"one key": sorted(tuple(r.values())
                                      for r in table.query(keys=[f"k{one}"]).to_pylist()),
                    "1% range": [(table.query(ranges=[sd.Range(f"k{lo}", f"k{hi}")],
                                              columns=["key"]).num_rows,)]}
            runs: dict[str, dict[str, list[float]]] = {q: {v: [] for v in views}
                                                       for q in QUERIES}
            for q, sql in QUERIES.items():
                answers = {}
                for v, view in views.items():  # warm-up, and the answers
                    _, answers[v] = _answer(spark, sql.format(view=view, one=one, lo=lo, hi=hi))
                assert answers["source"] == answers["register_view"], (table.name, q)
                if q in want:
                    assert answers["source"] == want[q], (table.name, q)
                for i in range(args.repeats):
                    order = list(views)[i % 2:] + list(views)[:i % 2]
                    for v in order:
                        seconds, _ = _answer(spark, sql.format(view=views[v], one=one, lo=lo,
                                                               hi=hi))
                        runs[q][v].append(seconds)
            results[table.name] = runs
        spark.stop()

    table_rows = []
    for name, runs in results.items():
        for q, by_view in runs.items():
            best = {v: min(s) for v, s in by_view.items()}
            table_rows.append([name, q, best["source"], best["register_view"],
                               best["source"] / best["register_view"]])
    print_table(["table", "query", "source view s", "register_view s", "speed-up"], table_rows,
                title=f"{rows:,} rows, 8 leaves, local[2], best of {args.repeats}")
    if not args.no_save:
        save_results("spark_views", {"rows": rows, "queries": QUERIES, "runs": results,
                                     "cpus": os.cpu_count(),
                                     "load_average_after": os.getloadavg()}, quick=args.quick)


if __name__ == "__main__":
    main()
