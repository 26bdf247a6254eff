"""Co-located join benchmark: two co-sharded tables joined on the row key, leaf by leaf.

Run: ``python benchmarks/co_join.py [--left-rows N] [--right-rows N] [--leaves N]
[--repeats R] [--quick] [--no-spark]`` (default 5M and 1M rows, 8 leaves; ``--quick``: 500k
and 100k).

Data (untimed): a partition scheme cut into ``--leaves`` leaves at evenly spaced key prefixes
(the benchmark keys are uniform over [a..z]^10), and two member tables of the benchmark
schema (``support.workload``): the left with ``--left-rows`` random rows, the right with
``--right-rows`` rows whose keys are drawn from the left's (so most right rows match one left
row), each ingested and compacted to one file per leaf.

Side by side in one run, each variant ``--repeats`` times (alternating), the fastest reported:

* (a) ``sediment.spark.co_join(spark, left, right)`` written to Spark's ``noop`` sink (every
  row and column computed), against Spark's own join of the two tables read with
  ``spark.read.format("sediment")`` (a shuffle: Exchange on both sides) to the same sink, on
  one ``local[2]`` session. The co_join plan is checked to hold no Exchange.
* (b) ``sd.join(left, right)`` (an Arrow table of the result) against DuckDB joining the two
  tables' ``to_arrow()`` results into an Arrow table, the ``to_arrow()`` calls included in
  DuckDB's time.

Every variant's row count is checked to be the same. Goals: (a) Spark join seconds / co_join
seconds >= 2; (b) DuckDB seconds / sd.join seconds >= 1.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np
import pyarrow as pa
from _common import goal_line, parse_args, print_table, save_results, temp_dir

import sediment as sd
from sediment.workload import benchmark_schema
from support import workload


def _options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--left-rows", type=int, default=0)
    p.add_argument("--right-rows", type=int, default=0)
    p.add_argument("--leaves", type=int, default=8)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--no-spark", action="store_true", help="skip part (a)")


def split_points(leaves: int) -> list[str]:
    """Evenly spaced cuts of the uniform key space [a..z]^10 (two-letter prefixes)."""
    out = []
    for i in range(1, leaves):
        pos = i * 26 * 26 // leaves
        out.append(chr(97 + pos // 26) + chr(97 + pos % 26))
    return out


def build(store: sd.Store, left_rows: int, right_rows: int, leaves: int
          ) -> tuple[sd.Table, sd.Table]:
    store.create_scheme("bench", row_keys=[("key", pa.string())],
                        split_points=split_points(leaves))
    props = {"ingest.memory_limit_bytes": 4 * 1024 ** 3}
    left = store.create_table("left", benchmark_schema(), scheme="bench", properties=props)
    right = store.create_table("right", benchmark_schema(), scheme="bench", properties=props)
    data = workload.generate(left_rows)
    left.ingest(data)
    pick = np.random.default_rng(7).integers(0, left_rows, right_rows)
    other = workload.generate(right_rows, seed=43)
    right.ingest(other.set_column(0, "key", data.column("key").take(pa.array(pick))))
    del data, other
    store.maintain()
    return store.table("left"), store.table("right")


def timed(fn: Any) -> tuple[float, Any]:
    started = time.perf_counter()
    out = fn()
    return time.perf_counter() - started, out


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], extra=_options)
    left_rows = args.left_rows or (500_000 if args.quick else 5_000_000)
    right_rows = args.right_rows or (100_000 if args.quick else 1_000_000)
    results: dict[str, Any] = {"left_rows": left_rows, "right_rows": right_rows,
                               "leaves": args.leaves, "goals": []}
    with temp_dir() as tmp:
        store = sd.Store.open(str(tmp / "store"), create=True)
        seconds, (left, right) = timed(lambda: build(store, left_rows, right_rows,
                                                     args.leaves))
        print(f"setup: {left_rows:,} + {right_rows:,} rows in {seconds:.1f}s, "
              f"{store.describe_scheme('bench').leaves} leaves")
        results["setup_seconds"] = seconds

        # ---- (b) sd.join vs DuckDB over to_arrow() -------------------------------------------
        import duckdb

        def sediment_join() -> int:
            return sd.join(left, right).num_rows

        def duckdb_join() -> int:
            lt = left.to_arrow()  # noqa: F841 (DuckDB reads it by name)
            rt = right.to_arrow()  # noqa: F841
            con = duckdb.connect()
            out = con.sql("SELECT * FROM lt JOIN rt USING (key)").to_arrow_table()
            con.close()
            return out.num_rows

        runs: dict[str, list[float]] = {"sd.join": [], "duckdb": []}
        counts: dict[str, int] = {}
        for r in range(args.repeats):
            order = [("sd.join", sediment_join), ("duckdb", duckdb_join)]
            for name, fn in (order if r % 2 == 0 else order[::-1]):
                s, n = timed(fn)
                runs[name].append(s)
                counts[name] = n
        assert counts["sd.join"] == counts["duckdb"], counts
        best = {k: min(v) for k, v in runs.items()}
        print_table(["variant", "best s", "runs", "rows out"],
                    [(k, f"{best[k]:.2f}", ", ".join(f"{x:.2f}" for x in runs[k]),
                      f"{counts[k]:,}") for k in runs], title="(b) Python joins")
        results["python"] = {"runs": runs, "best": best, "rows_out": counts["sd.join"]}
        results["goals"].append(goal_line("sd.join vs DuckDB over to_arrow() (speed-up)",
                                          best["duckdb"] / best["sd.join"], 1.0, "x"))

        # ---- (a) co_join vs Spark's join of two format("sediment") reads -------------------
        if not args.no_spark:
            from sediment.spark import co_join, register_data_source, session

            spark = session("local[2]", app_name="sediment-bench-co-join",
                            conf={"spark.sql.shuffle.partitions": "8",
                                  "spark.ui.enabled": "false",
                                  "spark.sql.autoBroadcastJoinThreshold": "-1"})
            register_data_source(spark)

            def read(name: str) -> Any:
                return (spark.read.format("sediment").option("store", store.uri)
                        .option("table", name).load())

            co = co_join(spark, left, right)
            r_df = read("right")
            plain = read("left").join(
                r_df.select("key", *[r_df[c].alias(f"{c}_right") for c in r_df.columns
                                     if c != "key"]), on="key")
            co_plan = co._jdf.queryExecution().executedPlan().toString()
            plain_plan = plain._jdf.queryExecution().executedPlan().toString()
            assert "Exchange" not in co_plan, co_plan
            results["spark_plans"] = {"co_join": co_plan, "spark_join": plain_plan}

            def sink(df: Any) -> None:
                df.write.format("noop").mode("overwrite").save()

            spark_runs: dict[str, list[float]] = {"co_join": [], "spark join": []}
            for r in range(args.repeats + 1):  # the first round warms up
                order = [("co_join", co), ("spark join", plain)]
                for name, df in (order if r % 2 == 0 else order[::-1]):
                    s, _ = timed(lambda df=df: sink(df))
                    if r:
                        spark_runs[name].append(s)
            n_co, n_plain = co.count(), plain.count()
            assert n_co == n_plain == counts["sd.join"], (n_co, n_plain)
            sbest = {k: min(v) for k, v in spark_runs.items()}
            print_table(["variant", "best s", "runs", "partitions"],
                        [(k, f"{sbest[k]:.2f}", ", ".join(f"{x:.2f}" for x in spark_runs[k]),
                          df.rdd.getNumPartitions())
                         for k, df in (("co_join", co), ("spark join", plain))],
                        title="(a) Spark joins, local[2]")
            results["spark"] = {"runs": spark_runs, "best": sbest,
                                "exchange_in_spark_join": "Exchange" in plain_plan}
            results["goals"].append(goal_line("co_join vs Spark join (speed-up)",
                                              sbest["spark join"] / sbest["co_join"], 2.0, "x"))
            spark.stop()
    if not args.no_save:
        save_results("co_join", results, quick=args.quick)


if __name__ == "__main__":
    main()
