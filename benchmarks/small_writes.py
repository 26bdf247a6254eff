"""Many small writes in one process: the buffered writer vs one ``ingest`` per 100 rows.

Run: ``python benchmarks/small_writes.py [--quick]`` (full: 4,000 writes through the
writer, 150 single ingests; ``--quick``: 1,000 and 50, well under a minute). This is the
in-process part of issue 44's benchmark; the Flight group-commit part (64 clients over the
service) belongs with group commit in the server.

Every write is 100 rows of the benchmark schema (``sediment.workload``), generated before
timing. In one run, on local disk, each into a fresh table:

- **baseline**: ``table.ingest(batch)`` per write (one set of files and one commit each);
- **writer**: ``with table.writer() as w: w.write(batch)`` for every write (defaults:
  100,000 rows, 64 MiB or 1 s per flush), timed until ``close()`` returns (everything
  committed);
- **writer, keyed**: the same with ``idempotency_key=`` on every write (each key hashed,
  looked up at write, claimed and recorded at the flush).

A warm-up (a few ingests and a keyed writer into another table) runs first, so no run pays
the first imports. Reported: rows/s, commits, rows per commit, files; the rows read back are
checked. Goal: the writer's rows/s at least 20x the baseline's (the keyed writer's is
reported against the same goal: each key costs an index read at write, and a claim and a
record written at its flush).
"""

from __future__ import annotations

import time
from typing import Any

import pyarrow as pa
from _common import fmt, goal_line, parse_args, print_table, save_results, temp_dir

import sediment as sd
from sediment.workload import benchmark_schema, generate

ROWS_PER_WRITE = 100


def batches(n: int, seed: int) -> list[pa.RecordBatch]:
    return list(generate(n * ROWS_PER_WRITE, seed=seed, batch_rows=ROWS_PER_WRITE))


def run_baseline(table: sd.Table, data: list[pa.RecordBatch]) -> float:
    started = time.perf_counter()
    for b in data:
        table.ingest(b)
    return time.perf_counter() - started


def run_writer(table: sd.Table, data: list[pa.RecordBatch], keyed: bool) -> float:
    started = time.perf_counter()
    with table.writer() as w:
        for i, b in enumerate(data):
            w.write(b, idempotency_key=f"write-{i}" if keyed else None)
    return time.perf_counter() - started


def main() -> None:
    args = parse_args(__doc__ or "")
    n_writer, n_base = (1_000, 50) if args.quick else (4_000, 150)
    results: dict[str, Any] = {"rows_per_write": ROWS_PER_WRITE, "writes": {
        "baseline": n_base, "writer": n_writer, "writer_keyed": n_writer}}
    rows_table = []
    figures: dict[str, dict[str, float]] = {}
    with temp_dir() as root:
        store = sd.Store.open(str(root / "store"), create=True)
        warm = store.create_table("warm-up", benchmark_schema())  # imports, first writes
        run_baseline(warm, batches(5, seed=99))
        run_writer(warm, batches(50, seed=98), True)
        for name, n, fn in (("baseline", n_base, lambda t, d: run_baseline(t, d)),
                            ("writer", n_writer, lambda t, d: run_writer(t, d, False)),
                            ("writer_keyed", n_writer, lambda t, d: run_writer(t, d, True))):
            data = batches(n, seed=len(figures))
            table = store.create_table(name, benchmark_schema())
            start_version = table.version
            seconds = fn(table, data)
            commits = table.version - start_version
            stored = table.query().num_rows
            assert stored == n * ROWS_PER_WRITE, (name, stored)
            rows = n * ROWS_PER_WRITE
            figures[name] = {"rows": rows, "seconds": seconds, "rows_per_second": rows / seconds,
                             "commits": commits, "rows_per_commit": rows / max(1, commits),
                             "files": len(table.files())}
            f = figures[name]
            rows_table.append([name, n, fmt(seconds), fmt(f["rows_per_second"]), commits,
                               fmt(f["rows_per_commit"]), f["files"]])
    print_table(["run", "writes", "seconds", "rows/s", "commits", "rows/commit", "files"],
                rows_table, title="100-row writes, local disk")
    base = figures["baseline"]["rows_per_second"]
    ratio = figures["writer"]["rows_per_second"] / base
    keyed = figures["writer_keyed"]["rows_per_second"] / base
    print(f"writer / baseline: {fmt(ratio)}x; keyed writer / baseline: {fmt(keyed)}x")
    results["figures"] = figures
    results["ratios"] = {"writer_vs_ingest_each": ratio, "keyed_writer_vs_ingest_each": keyed}
    results["goals"] = [goal_line("buffered writer vs one ingest per 100 rows", ratio, 20, "x"),
                        goal_line("keyed buffered writer vs one ingest per 100 rows", keyed,
                                  20, "x")]
    if not args.no_save:
        save_results("small_writes", results, quick=args.quick)


if __name__ == "__main__":
    main()
