"""Spark read benchmark: a Spark SQL group-by over ``spark.read.format("sediment")`` against the
same query over the plain Parquet file of the same rows.

Run: ``python benchmarks/spark_read.py [--rows N] [--quick] [--repeats R]`` (default 10M rows;
``--quick``: 1M).

Data: Sleeper's system-test schema (``workload.generate``), ingested (untimed) into a one-leaf
table in one file (``ingest.memory_limit_bytes`` raised so nothing spills: the read merges
nothing), and written as one plain Parquet file (snappy, Spark's default) beside it. One
session, ``sediment.spark.session("local[2]")``, runs both; a warm-up run of each comes first
(JIT, Python workers, caches). Then ``--repeats`` rounds time each variant once (the order
alternates); the fastest run is reported, with all runs and Spark's partition count:

* ``sediment``: ``SELECT substr(key, 1, 2), count(*), max(timestamp) FROM t GROUP BY 1`` over
  ``spark.read.format("sediment")`` (the table's default ``spark.read.target_partition_rows``
  cuts the one leaf into key sub-ranges, one Spark task each);
* ``sediment-columns``: the same with ``.option("columns", "key,timestamp")``, the column
  pruning Spark 4.3.0 does not do for a Python data source;
* ``read_table``: the same over ``sediment.spark.read_table(spark, table)``, which lets
  Spark read the leaves that need no merge (here the one leaf, one file) with its own Parquet
  reader and the others through the data source;
* ``parquet``: the same query over ``spark.read.parquet(plain)``;
* ``python-parquet``: the same query over the least a Python data source does: one
  partition per row group of the plain file, each ``read`` yielding that row group's Arrow
  batches (pyarrow, no merge, no key ranges). Spark 4.3.0 hands a Python data source no
  column pruning, so every column crosses from the Python worker to the JVM: this is the
  floor of any ``spark.read.format(<python source>)``, the yardstick for sediment's own cost.

Every run's answer is checked: the groups' counts add up to the rows, and every variant gives
the same groups. The machine's load average is recorded (other jobs share its cores).

Goal: parquet seconds / sediment seconds >= 0.8 (best of repeats, same run) for
``read_table``, Sediment's DataFrame for Spark SQL. ``spark.read.format("sediment")`` (every
column through Python) is printed beside it: on Spark 4.3.0 it cannot beat the
``python-parquet`` floor, which is about half of Spark's own Parquet rate.
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

import pyarrow.parquet as pq
from _common import goal_line, parse_args, print_table, save_results, temp_dir

import sediment as sd
from sediment.workload import benchmark_schema
from support import workload

QUERY = ("SELECT substr(key, 1, 2) AS p, count(*) AS c, max(timestamp) AS m FROM {view} "
         "GROUP BY 1")


def _python_parquet(path: str) -> Any:
    """A minimal Python data source over one Parquet file: a partition per row group."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
    from pyspark.sql.pandas.types import from_arrow_schema

    class RowGroup(InputPartition):
        def __init__(self, index: int) -> None:
            self.index = index

    class Reader(DataSourceReader):
        def partitions(self) -> list[InputPartition]:
            return [RowGroup(i) for i in range(pq.ParquetFile(path).num_row_groups)]

        def read(self, partition: InputPartition) -> Any:
            assert isinstance(partition, RowGroup)
            table = pq.ParquetFile(path).read_row_group(partition.index)
            yield from table.to_batches(max_chunksize=100_000)

    class Source(DataSource):
        @classmethod
        def name(cls) -> str:
            return "python_parquet"

        def schema(self) -> Any:
            return from_arrow_schema(workload.arrow_schema())

        def reader(self, schema: Any) -> DataSourceReader:
            return Reader()

    return Source


def _run(spark: Any, view: str) -> tuple[float, dict[str, tuple[int, int]]]:
    """One timed query: seconds and its groups."""
    started = time.perf_counter()
    rows = spark.sql(QUERY.format(view=view)).collect()
    seconds = time.perf_counter() - started
    return seconds, {r["p"]: (int(r["c"]), int(r["m"])) for r in rows}


def _options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--rows", type=int, default=None)
    p.add_argument("--repeats", type=int, default=3)


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], extra=_options)
    rows = args.rows or (1_000_000 if args.quick else 10_000_000)
    from sediment.spark import session

    with temp_dir() as tmp:
        data = workload.generate(rows)
        plain = str(tmp / "plain.parquet")
        pq.write_table(data, plain, compression="snappy", row_group_size=1_000_000)
        store = sd.Store.open(str(tmp / "store"), create=True)
        table = store.create_table("bench", benchmark_schema(), properties={
            "ingest.memory_limit_bytes": 8 * 1024 ** 3})
        started = time.perf_counter()
        table.ingest(data)
        ingest_seconds = time.perf_counter() - started
        plan = table.plan()
        leaves, files = len(plan.subqueries), len(plan.files)
        del data

        spark = session("local[2]", app_name="sediment-bench-spark-read",
                        conf={"spark.sql.shuffle.partitions": "8",
                              "spark.ui.enabled": "false"})
        sediment_df = (spark.read.format("sediment").option("store", store.uri)
                       .option("table", "bench").load())
        sediment_df.createOrReplaceTempView("sediment_t")
        (spark.read.format("sediment").option("store", store.uri).option("table", "bench")
         .option("columns", "key,timestamp").load().createOrReplaceTempView("narrow_t"))
        spark.read.parquet(plain).createOrReplaceTempView("parquet_t")
        from sediment.spark import read_table

        native_df = read_table(spark, table)
        native_df.createOrReplaceTempView("read_table_t")
        spark.dataSource.register(_python_parquet(plain))
        floor_df = spark.read.format("python_parquet").load()
        floor_df.createOrReplaceTempView("python_parquet_t")
        partitions = {"sediment": sediment_df.rdd.getNumPartitions(),
                      "sediment-columns": sediment_df.rdd.getNumPartitions(),
                      "read_table": native_df.rdd.getNumPartitions(),
                      "parquet": spark.read.parquet(plain).rdd.getNumPartitions(),
                      "python-parquet": floor_df.rdd.getNumPartitions()}
        views = {"sediment": "sediment_t", "sediment-columns": "narrow_t",
                 "read_table": "read_table_t", "parquet": "parquet_t",
                 "python-parquet": "python_parquet_t"}
        answers: dict[str, dict[str, tuple[int, int]]] = {}
        for name, view in views.items():  # warm-up
            _, answers[name] = _run(spark, view)
        assert all(a == answers["parquet"] for a in answers.values()), "the reads disagree"
        assert sum(c for c, _ in answers["sediment"].values()) == rows
        runs: dict[str, list[float]] = {n: [] for n in views}
        for i in range(args.repeats):
            order = list(views)[i % len(views):] + list(views)[:i % len(views)]  # rotate
            for name in order:
                seconds, got = _run(spark, views[name])
                assert got == answers[name]
                runs[name].append(seconds)
        spark.stop()

    best = {n: min(v) for n, v in runs.items()}
    print_table(["variant", "best s", "runs", "Spark partitions"],
                [[n, best[n], ", ".join(f"{s:.2f}" for s in runs[n]), partitions[n]]
                 for n in views],
                title=f"{QUERY.format(view='t')}: {rows:,} rows, local[2], "
                      f"{leaves} leaf, {files} file(s)")
    goal = goal_line("parquet seconds / read_table seconds",
                     best["parquet"] / best["read_table"], 0.8, "x")
    source = best["parquet"] / best["sediment"]
    print(f"parquet seconds / sediment (data source, every column) seconds: {source:.3f} x")
    floor = best["python-parquet"] / best["sediment"]
    print(f"python-parquet seconds / sediment seconds: {floor:.3f} x (a Python data source "
          "reading the plain file; above 1: sediment costs less than that floor)")
    narrow = best["parquet"] / best["sediment-columns"]
    print(f"parquet seconds / sediment-columns seconds: {narrow:.3f} x (columns=key,timestamp)")
    if not args.no_save:
        save_results("spark_read", {
            "rows": rows, "query": QUERY.format(view="t"), "leaves": leaves, "files": files,
            "ingest_seconds": ingest_seconds, "partitions": partitions, "runs": runs,
            "best_seconds": best, "python_parquet_over_sediment": floor,
            "parquet_over_sediment_data_source": source,
            "parquet_over_sediment_columns": narrow,
            "cpus": os.cpu_count(), "load_average_after": os.getloadavg(), "goals": [goal]},
            quick=args.quick)


if __name__ == "__main__":
    main()
