"""The main job on an embedded local store: generate, ingest, query, and report how fast.

``sediment demo --store ./demo-store`` (what ``./dev demo`` runs). Later stages of the project
grow this into maintenance and Spark bulk import.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table as RichTable

from sediment.catalog import Store
from sediment.core.ranges import Range
from sediment.errors import TableNotFoundError
from sediment.workload import benchmark_schema, generate


def _percentiles(samples: list[float]) -> tuple[float, float]:
    a = np.array(samples) * 1000
    return float(np.percentile(a, 50)), float(np.percentile(a, 99))


def run_demo(store_uri: str, *, rows: int = 2_000_000, table_name: str = "demo",
             lookups: int = 1000, console: Console | None = None,
             **storage_options: Any) -> dict[str, Any]:
    """Create a table of the benchmark schema, ingest ``rows``, run exact and range queries."""
    con = console or Console()
    store = Store.open(store_uri, **storage_options)
    try:
        store.drop_table(table_name)
    except TableNotFoundError:
        pass
    table = store.create_table(table_name, benchmark_schema())
    con.print(f"[bold]Sediment demo[/bold]: store {store.uri}, table {table_name!r}")

    with Progress(TextColumn("ingest"), BarColumn(), TextColumn("{task.completed:,} rows"),
                  TimeRemainingColumn(), console=con, transient=True) as bar:
        task = bar.add_task("ingest", total=rows)
        result = table.ingest(generate(rows, seed=42),
                              progress=lambda n: bar.advance(task, n))
    con.print(f"ingested {result.rows:,} rows into {result.files} file(s), "
              f"{result.bytes / 1e6:.1f} MB, in {result.seconds:.2f} s "
              f"({result.rows_per_second / 1e6:.2f} M rows/s) -> version {result.version}")

    # exact-key lookups of keys known to exist (every 997th generated key)
    keys = []
    for batch in generate(rows, seed=42):
        keys.extend(batch.column("key").to_numpy(zero_copy_only=False)[::997].tolist())
    rng = np.random.default_rng(7)
    picks = [keys[i] for i in rng.integers(0, len(keys), size=lookups)]
    for k in picks[:50]:  # warm caches
        table.query(keys=[k])
    lat, found = [], 0
    for k in picks:
        t0 = time.perf_counter()
        found += table.query(keys=[k]).num_rows
        lat.append(time.perf_counter() - t0)
    p50, p99 = _percentiles(lat)

    t0 = time.perf_counter()
    rng_rows = table.query(ranges=[Range("ma", "mb")]).num_rows
    range_s = time.perf_counter() - t0

    t0 = time.perf_counter()
    scanned = sum(b.num_rows for b in table.scan(columns=["key", "timestamp"]))
    scan_s = time.perf_counter() - t0

    out = {
        "rows": result.rows, "files": result.files, "bytes": result.bytes,
        "ingest_seconds": result.seconds, "ingest_rows_per_second": result.rows_per_second,
        "lookups": lookups, "lookup_rows_found": found,
        "lookup_p50_ms": p50, "lookup_p99_ms": p99,
        "range_rows": rng_rows, "range_seconds": range_s,
        "scan_rows": scanned, "scan_seconds": scan_s, "version": table.version,
    }
    summary = RichTable(title="what the demo did")
    summary.add_column("step")
    summary.add_column("result", justify="right")
    summary.add_row("ingest", f"{result.rows:,} rows, {result.rows_per_second / 1e6:.2f} M rows/s")
    summary.add_row(f"{lookups} exact-key queries",
                    f"p50 {p50:.2f} ms, p99 {p99:.2f} ms, {found:,} rows")
    summary.add_row("range query [ma, mb)", f"{rng_rows:,} rows in {range_s * 1000:.1f} ms")
    summary.add_row("full scan (key, timestamp)",
                    f"{scanned:,} rows, {scanned / scan_s / 1e6:.2f} M rows/s")
    con.print(summary)
    if scanned != rows:
        raise RuntimeError(f"demo: scanned {scanned} rows, ingested {rows}")
    return out
