"""The main job on an embedded local store: bulk import, ingest, maintain, query, dump.

``sediment demo --store ./demo-store`` (what ``./dev demo`` runs):

1. writes the benchmark data set (Sleeper's schema) as Parquet files,
2. bulk-imports them with Spark in ``local[*]`` mode (standard ingest when Java is missing),
3. ingests a further batch with standard ingest (a second file per leaf),
4. runs maintenance until the table settles (compaction, splitting, GC),
5. runs exact-key, range and full-scan queries and reports latency and throughput,
6. tags the version, dumps it and loads it back into a second table, and checks both agree.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from rich.console import Console
from rich.markup import escape
from rich.table import Table as RichTable

from sediment.core.regions import Range
from sediment.errors import TableNotFoundError, install_hint
from sediment.store import Store
from sediment.workload import benchmark_schema, generate


def _percentiles(samples: list[float]) -> tuple[float, float]:
    a = np.array(samples) * 1000
    return float(np.percentile(a, 50)), float(np.percentile(a, 99))


def java_command() -> str | None:
    """The ``java`` Spark would start: ``$JAVA_HOME/bin/java`` when JAVA_HOME is set (as
    Spark's launcher does), else ``java`` on the PATH; None when neither exists."""
    home = os.environ.get("JAVA_HOME", "").strip()
    if home:
        candidate = Path(home) / "bin" / ("java.exe" if os.name == "nt" else "java")
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return shutil.which("java")


def java_version() -> int | None:
    """The major version of :func:`java_command` (``java -version`` prints it on stderr:
    ``openjdk version "17.0.15"``, or ``"1.8.0_392"`` for Java 8); None when there is no java
    or it does not run."""
    cmd = java_command()
    if cmd is None:
        return None
    try:
        done = subprocess.run([cmd, "-version"], capture_output=True, text=True, timeout=60,
                              check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r'version "(\d+)(?:\.(\d+))?', done.stderr + done.stdout)
    if m is None:
        return None
    major = int(m.group(1))
    return int(m.group(2)) if major == 1 and m.group(2) else major


SPARK_JAVA = 17
"""The oldest Java the Spark version Sediment uses runs on."""


def java_problem() -> str | None:
    """Why Spark cannot start here for lack of a suitable Java (None: Java is fine)."""
    version = java_version()
    if version is None:
        return ("Java not found (looked for $JAVA_HOME/bin/java, then java on the PATH)"
                if java_command() is None else f"{java_command()} -version failed")
    if version < SPARK_JAVA:
        return f"Java {version} found, Spark needs Java {SPARK_JAVA}+"
    return None


def _java_available() -> bool:
    return java_problem() is None


def _pyspark_installed() -> bool:
    """Whether the optional ``[spark]`` extra (pyspark) can be imported."""
    try:
        return importlib.util.find_spec("pyspark") is not None
    except (ImportError, ValueError):
        return False


def _warm_up(spark: Any, work: Path) -> None:
    """A small bulk import into a scratch store: starting the Python workers, their imports
    and the JVM's first compilations are Spark's one-time cost, reported apart from the
    import's rate."""
    from sediment.spark import bulk_import

    sample = work / "warm-up.parquet"
    pq.write_table(pa.Table.from_batches(list(generate(20_000, seed=7))), sample)
    scratch = Store.open(str(work / "warm-up-store"), create=True)
    bulk_import(spark, scratch.create_table("warm_up", benchmark_schema()), [str(sample)])
    sample.unlink()


def run_demo(store_uri: str, *, rows: int = 2_000_000, table_name: str = "demo",
             lookups: int = 1000, use_spark: bool | None = None,
             console: Console | None = None, **storage_options: Any) -> dict[str, Any]:
    """Run the demo; returns the figures it printed."""
    con = console or Console()
    store = Store.open(store_uri, create=True, **storage_options)
    for name in (table_name, f"{table_name}_loaded"):
        try:
            store.drop_table(name)
        except TableNotFoundError:
            pass
    table = store.create_table(table_name, benchmark_schema(), properties={
        # a demo shows GC at work at once: no retention window for old versions (the
        # default keeps two days of them readable) and no margin for clock skew (one machine)
        "gc.delay_seconds": 0, "retention.seconds": 0, "gc.clock_skew_seconds": 0,
        # about eight leaves whatever --rows is, so that maintenance has leaves to work on
        "bulk_import.target_leaf_rows": max(1, rows // 8),
        "compaction.strategy": "basic", "compaction.batch_size": 2})
    con.print(f"[bold]Sediment demo[/bold]: store {store.uri}, table {table_name!r}")
    steps: list[tuple[str, str]] = []
    out: dict[str, Any] = {"rows": rows}
    work = Path(tempfile.mkdtemp(prefix="sediment-demo-"))
    try:
        t0 = time.perf_counter()
        for i, batch in enumerate(generate(rows, seed=42, batch_rows=500_000)):
            pq.write_table(pa.Table.from_batches([batch]), work / f"part-{i:04d}.parquet")
        steps.append(("generate", f"{rows:,} rows as Parquet in "
                                  f"{time.perf_counter() - t0:.1f} s"))

        has_pyspark = _pyspark_installed()
        spark_ok = (has_pyspark and _java_available()) if use_spark is None else use_spark
        if spark_ok:
            from sediment.spark import bulk_import, session

            t0 = time.perf_counter()
            con.print("starting Spark (local[*]) ...")
            spark = session()
            start_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            _warm_up(spark, work)
            warm_s = time.perf_counter() - t0
            result = bulk_import(spark, table, [str(work / "*.parquet")])
            spark.stop()
            steps.append(("Spark start", f"{start_s:.1f} s session, {warm_s:.1f} s warm-up "
                                         "(a 20k-row import: Python workers, JIT)"))
            steps.append(("Spark bulk import", f"{result.rows:,} rows, {result.files} files, "
                          f"{table.describe()['leaf_partitions']} leaves, one commit, "
                          f"{result.rows_per_second / 1e6:.2f} M rows/s warm"))
            out["spark_start_seconds"], out["spark_warmup_seconds"] = start_s, warm_s
        else:
            why = ("Spark bulk import not asked for (--no-spark)" if use_spark is False
                   else f"PySpark not installed ({install_hint('spark')})"
                   if not has_pyspark else java_problem() or "Java not usable")
            con.print(f"[yellow]{escape(why)}: using standard ingest instead of Spark "
                      "bulk import[/yellow]")
            result = table.ingest_files([str(work / "*.parquet")])
            steps.append(("standard ingest", f"{result.rows:,} rows, "
                          f"{result.rows_per_second / 1e6:.2f} M rows/s"))
        out["import_rows_per_second"] = result.rows_per_second

        extra = max(1, rows // 10)
        r2 = table.ingest(generate(extra, seed=43))
        steps.append(("standard ingest", f"{r2.rows:,} rows, {r2.files} files, "
                      f"{r2.rows_per_second / 1e6:.2f} M rows/s"))
        out["ingest_rows_per_second"] = r2.rows_per_second

        m = table.maintain()
        d = table.describe()
        steps.append(("maintain", f"{m.passes} passes, {m.jobs_committed} compactions, "
                      f"{m.splits} splits, {m.files_deleted} files deleted -> "
                      f"{d['leaf_partitions']} leaves, {d['files']} files"))

        keys = np.concatenate([b.column("key").to_numpy(zero_copy_only=False)[::997]
                               for b in generate(rows, seed=42, batch_rows=500_000)])
        picks = np.random.default_rng(7).choice(keys, size=lookups)
        for k in picks[:50]:
            table.query(keys=[k])
        lat, found = [], 0
        for k in picks:
            t0 = time.perf_counter()
            found += table.query(keys=[k]).num_rows
            lat.append(time.perf_counter() - t0)
        p50, p99 = _percentiles(lat)
        steps.append((f"{lookups} exact-key queries",
                      f"p50 {p50:.2f} ms, p99 {p99:.2f} ms, {found:,} rows"))
        t0 = time.perf_counter()
        n_range = table.query(ranges=[Range("ma", "mb")]).num_rows
        steps.append(("range query [ma, mb)",
                      f"{n_range:,} rows in {(time.perf_counter() - t0) * 1000:.1f} ms"))
        t0 = time.perf_counter()
        scanned = sum(b.num_rows for b in table.scan(columns=["key", "timestamp"]))
        scan_s = time.perf_counter() - t0
        steps.append(("full scan", f"{scanned:,} rows, {scanned / scan_s / 1e6:.2f} M rows/s"))
        if scanned != rows + extra:
            raise RuntimeError(f"demo: scanned {scanned} rows, expected {rows + extra}")

        table.tag("demo-v1")
        t0 = time.perf_counter()
        job = table.dump(str(work / "dump"), version="demo-v1")
        loaded = store.load(job.manifest_uri, f"{table_name}_loaded")
        same = loaded.query(ranges=[Range("ma", "mb")]).equals(
            table.query(ranges=[Range("ma", "mb")], version="demo-v1"))
        steps.append(("tag, dump, load", f"{job.rows:,} rows in {job.tasks} tasks; loaded "
                      f"copy {'matches' if same else 'DIFFERS'} "
                      f"({time.perf_counter() - t0:.1f} s)"))
        if not same:
            raise RuntimeError("demo: the loaded copy differs from the source")
        out.update(lookup_p50_ms=p50, lookup_p99_ms=p99, range_rows=n_range,
                   scan_rows=scanned, scan_rows_per_second=scanned / scan_s,
                   version=table.version, leaves=d["leaf_partitions"], files=d["files"])
    finally:
        shutil.rmtree(work, ignore_errors=True)
    summary = RichTable(title="what the demo did")
    summary.add_column("step")
    summary.add_column("result")
    for step, text in steps:
        summary.add_row(step, text)
    con.print(summary)
    return out
