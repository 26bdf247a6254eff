"""Scale: 1M, 10M and 100M rows on one machine, bulk-imported by Spark and maintained.

Run: ``python benchmarks/scale.py [--rows N] [--work DIR] [--quick]`` (default 100M rows in
``./scale-work``; ``--quick``: 3M). Resumable: each stage's result is kept in
``DIR/progress.json`` and a stage already done is skipped when the script runs again, so it can
run in the background (``nohup python benchmarks/scale.py > scale.log 2>&1 &``) and be started
again after an interruption. Results are saved to ``benchmarks/results/scale.json`` after every
stage (``--quick``: ``scale.quick.json``).

Tables (one local store in ``DIR/store``), of ``N/100``, ``N/10`` and ``N`` rows of the
benchmark schema (``support.workload``: uniform random 10-letter keys):

1. **input**: ``N`` rows written as Parquet files of 5M rows (snappy), plus ``N/100`` rows
   apart; reused by later runs.
2. **import**: each table bulk-imported with ``sediment.spark.bulk_import`` on Spark
   ``local[2]`` from its share of the input files, with ``partition.split.threshold`` ``N/10``
   (10M at 100M) and ``bulk_import.target_leaf_rows`` half of that, so the largest table has
   about 20 leaves.
3. **maintain**: 1% more rows ingested with the standard ingest (a file per leaf), then
   ``table.compact(full=True)`` (every leaf's files merged into one: jobs of ``N/200`` to
   ``N/20`` rows) in a fresh process with ``compaction.threads`` 1, its peak RSS (``VmHWM``:
   the process, interpreter and all) compared with ``compaction.memory_limit_bytes`` + 256 MiB;
   then ``table.maintain()`` until it settles.
4. **ingest**: the standard ingest of ``N/10`` rows (10M at 100M) into a fresh table of one
   leaf, in batches of 1M rows: rows/s.
5. **query**: per table, warm: exact-key lookups of 300 keys taken from the table's input
   (after 50 to warm up): p50/p99; a range holding 0.1% of the rows (10 ranges, median);
   a full scan of every column through ``table.scan()``: rows/s.
6. **state**: per table, the head state loaded by a fresh Store (median of 5), the file
   references it holds; 20 commits (property changes) in a row: commits/s.
7. **disk**: bytes under the store, with the retention in force (``retention.seconds`` and
   ``gc.delay_seconds`` defaults: nothing replaced within them is deleted).

8. **upsert** (only with ``--upsert``): ``N/100`` records of the largest table (1M at 100M,
   from its first input file: random keys over every leaf) upserted with ``table.upsert``
   (same ``key`` and ``timestamp``, new values): until committed, and until a read of one of
   them answers its new value (visible); then warm exact-key p50 of upserted keys (before any
   compaction: each reads the old file and the new one) vs the p50 of stage 5 (random
   keys). It changes the largest table, so it runs last.

Goals: exact-key p50 at ``N`` within 1.5x of the p50 at ``N/100``; compaction peak RSS <=
``compaction.memory_limit_bytes`` + 256 MiB at every size; with ``--upsert``, the upsert of
``N/100`` keys visible within 5 s.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from _common import (
    Timer,
    emit_child_result,
    fmt,
    goal_line,
    parse_args,
    peak_rss_mib,
    print_table,
    rate,
    run_child_script,
    save_results,
)

import sediment as sd
from sediment.workload import benchmark_schema
from support import workload

FILE_ROWS = 5_000_000
MIB = 1024 * 1024
UPSERT_VISIBLE_GOAL_SECONDS = 5.0


# ---- progress: one JSON document, a key per finished stage ------------------------------------
class Progress:
    def __init__(self, work: Path, rows: int) -> None:
        self.path = work / "progress.json"
        self.doc: dict[str, Any] = json.loads(self.path.read_text()) if self.path.exists() \
            else {}
        if self.doc.get("rows", rows) != rows:
            raise SystemExit(f"{work} holds a run of {self.doc['rows']:,} rows; use another "
                             f"--work folder for {rows:,}")
        self.doc["rows"] = rows

    def done(self, stage: str) -> bool:
        return stage in self.doc

    def record(self, stage: str, result: Any) -> None:
        self.doc[stage] = result
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.doc, indent=2, default=str))
        tmp.replace(self.path)


def sizes(rows: int) -> list[int]:
    return [rows // 100, rows // 10, rows]


def table_name(n: int) -> str:
    return f"rows_{n}"


# ---- stages -----------------------------------------------------------------------------------
def write_inputs(work: Path, rows: int) -> dict[str, Any]:
    """``rows`` rows in files of FILE_ROWS (the last fewer), and rows/100 apart (``small``)."""
    folder = work / "input"
    folder.mkdir(parents=True, exist_ok=True)
    per = min(FILE_ROWS, max(1, rows // 4))
    plan = [(f"part-{i:04d}.parquet", min(per, rows - i * per), 1000 + i)
            for i in range((rows + per - 1) // per)]
    plan.append(("small.parquet", rows // 100, 7))
    with Timer() as t:
        for name, n, seed in plan:
            path = folder / name
            if path.exists() and pq.ParquetFile(path).metadata.num_rows == n:
                continue
            tmp = path.with_suffix(".tmp")
            with pq.ParquetWriter(tmp, workload.arrow_schema(), compression="snappy") as w:
                for b in workload.batches(n, seed=seed):
                    w.write_batch(b)
            tmp.replace(path)
    files = [p for p, _, _ in plan]
    return {"files": files, "file_rows": per, "seconds": t.seconds,
            "bytes": sum((folder / f).stat().st_size for f in files)}


def input_files(work: Path, rows: int, n: int, inputs: dict[str, Any]) -> list[str]:
    folder = work / "input"
    if n == rows // 100:
        return [str(folder / "small.parquet")]
    parts = [f for f in inputs["files"] if f.startswith("part-")]
    return [str(folder / f) for f in parts[: max(1, n // inputs["file_rows"])]]


def properties(rows: int) -> dict[str, Any]:
    threshold = max(100_000, rows // 10)
    return {"partition.split.threshold": threshold,
            "bulk_import.target_leaf_rows": threshold // 2}


def import_table(store: sd.Store, spark: Any, rows: int, n: int, files: list[str]
                 ) -> dict[str, Any]:
    from sediment.spark import bulk_import

    name = table_name(n)
    if name in store.tables():
        store.drop_table(name)  # a half-done import of an interrupted run
    table = store.create_table(name, benchmark_schema(), properties=properties(rows))
    with Timer() as t:
        result = bulk_import(spark, table, files)
    leaves = sum(p.is_leaf for p in table.partitions())
    return {"rows": result.rows, "seconds": t.seconds, "rows_per_second": rate(result.rows,
            t.seconds), "leaves": leaves, "files": len(table.files())}


def maintain_table(store: sd.Store, work: Path, n: int) -> dict[str, Any]:
    table = store.table(table_name(n))
    extra = max(1000, n // 100)
    with Timer() as t_in:
        table.ingest(workload.generate(extra, seed=99))
    before = len(table.files())
    child = run_child_script(__file__, ["--child-maintain", str(work / "store"),
                                        table_name(n)], f"maintain {table_name(n)}")
    with Timer() as t_settle:  # then as the maintainer would leave it
        settled = table.maintain()
    limit = int(table.properties["compaction.memory_limit_bytes"])
    return {"extra_rows": extra, "extra_ingest_seconds": t_in.seconds, "files_before": before,
            "files_after": len(table.files()), **child,
            "settle_seconds": t_settle.seconds, "settle_jobs": settled.jobs_committed,
            "rss_limit_mib": limit / MIB + 256}


def child_maintain(store_path: str, name: str) -> None:
    table = sd.Store.open(store_path).table(name)
    table.set_properties({"compaction.threads": 1})
    try:
        with Timer() as t:
            r = table.compact(full=True)
    finally:
        table.set_properties({"compaction.threads": 0})
    emit_child_result({"seconds": t.seconds, "peak_rss_mib": peak_rss_mib(),
                       "jobs": r.jobs_committed, "jobs_failed": r.jobs_failed,
                       "rows_in": r.rows_in, "rows_per_second": rate(r.rows_in, t.seconds),
                       "leaves": sum(p.is_leaf for p in table.partitions())})


def standard_ingest(store: sd.Store, rows: int) -> dict[str, Any]:
    n = max(100_000, rows // 10)
    name = "ingest_only"
    if name in store.tables():
        store.drop_table(name)
    table = store.create_table(name, benchmark_schema())
    data = [workload.generate(min(1_000_000, n - i), seed=500 + i // 1_000_000)
            for i in range(0, n, 1_000_000)]
    with Timer() as t:
        for d in data:
            table.ingest(d)
    store.drop_table(name)
    return {"rows": n, "batches": len(data), "seconds": t.seconds,
            "rows_per_second": rate(n, t.seconds)}


def query_table(store: sd.Store, n: int, files: list[str]) -> dict[str, Any]:
    table = store.table(table_name(n))
    keys = pq.ParquetFile(files[0]).read_row_group(0, columns=["key"]).column("key")
    picked = workload.pick(keys, 350, seed=n % 1000)
    for k in picked[:50]:
        table.query(keys=[k])
    lat = []
    for k in picked[50:]:
        t0 = time.perf_counter()
        got = table.query(keys=[k])
        lat.append((time.perf_counter() - t0) * 1000)
        assert got.num_rows >= 1, k
    lat.sort()
    ranges = []
    for i, start in enumerate(picked[:10]):
        lo, hi = workload.key_range_for(start, n * 0.001, n)
        t0 = time.perf_counter()
        got = table.query(ranges=[sd.Range(lo, hi)])
        ranges.append(((time.perf_counter() - t0) * 1000, got.num_rows, i))
    with Timer() as t_scan:
        scanned = sum(b.num_rows for b in table.scan())
    return {"lookup_p50_ms": lat[len(lat) // 2], "lookup_p99_ms": lat[int(len(lat) * 0.99)],
            "lookups": len(lat),
            "range_ms_median": statistics.median(r[0] for r in ranges),
            "range_rows_median": statistics.median(r[1] for r in ranges),
            "scan_rows": scanned, "scan_seconds": t_scan.seconds,
            "scan_rows_per_second": rate(scanned, t_scan.seconds)}


def state_table(store: sd.Store, work: Path, n: int) -> dict[str, Any]:
    times = []
    refs = 0
    for _ in range(5):
        t0 = time.perf_counter()
        st = sd.Store.open(str(work / "store")).table(table_name(n)).state()
        times.append(time.perf_counter() - t0)
        refs = sum(len(st.references(p.id)) for p in st.partitions.values())
    table = store.table(table_name(n))
    with Timer() as t:
        for i in range(20):
            table.set_properties({"compaction.threads": i % 2})
    table.set_properties({"compaction.threads": 0})
    return {"state_load_seconds_median": statistics.median(times), "file_references": refs,
            "commits": 20, "commits_per_second": rate(20, t.seconds)}


def upsert_table(store: sd.Store, rows: int, files: list[str]) -> dict[str, Any]:
    """``rows/100`` records of the largest table upserted (their record keys, new values):
    until committed, until visible (a read of one of them answers its new value), and the
    lookup p50 after, before any compaction."""
    import numpy as np
    import pyarrow as pa

    table = store.table(table_name(rows))
    count = max(1, rows // 100)
    keys = pq.read_table(files[0], columns=["key", "timestamp"]).slice(0, count)
    rng = np.random.default_rng(77)
    batch = pa.table({"key": keys.column("key"), "timestamp": keys.column("timestamp"),
                      "value": workload.random_strings(rng, keys.num_rows,
                                                       workload.VALUE_LENGTH),
                      "nullable_value": workload.random_strings(rng, keys.num_rows,
                                                                workload.VALUE_LENGTH)},
                     schema=workload.arrow_schema())
    first = batch.slice(0, 1).to_pylist()[0]
    files_before = len(table.files())
    t0 = time.perf_counter()
    result = table.upsert(batch)
    committed = time.perf_counter() - t0
    got = [r["value"] for r in table.query(keys=[first["key"]]).to_pylist()
           if r["timestamp"] == first["timestamp"]]
    visible = time.perf_counter() - t0
    if got != [first["value"]]:
        raise AssertionError(f"after the upsert {first['key']!r} reads {got}")
    picked = workload.pick(keys.column("key"), 350, seed=5)
    for k in picked[:50]:
        table.query(keys=[k])
    lat = []
    for k in picked[50:]:
        t1 = time.perf_counter()
        table.query(keys=[k])
        lat.append((time.perf_counter() - t1) * 1000)
    return {"rows": batch.num_rows, "committed_seconds": committed, "visible_seconds": visible,
            "rows_per_second": rate(batch.num_rows, committed), "files_written": result.files,
            "files_before": files_before, "files_after": len(table.files()),
            "upserted_key_lookup_p50_ms_after": statistics.median(lat)}


def disk(work: Path) -> dict[str, Any]:
    total = sum(p.stat().st_size for p in (work / "store").rglob("*") if p.is_file())
    d = sd.properties.defaults()
    return {"store_bytes": total, "retention_seconds": d["retention.seconds"],
            "gc_delay_seconds": d["gc.delay_seconds"]}


# ---- main -------------------------------------------------------------------------------------
def report(doc: dict[str, Any], rows: int) -> list[dict[str, Any]]:
    ns = [n for n in sizes(rows) if f"query_{n}" in doc]
    if ns:
        print_table(["rows", "leaves", "files", "p50 ms", "p99 ms", "0.1% range ms",
                     "scan Mrows/s", "state load s", "commits/s"],
                    [[f"{n:,}", doc.get(f"import_{n}", {}).get("leaves"),
                      doc.get(f"maintain_{n}", {}).get("files_after"),
                      doc[f"query_{n}"]["lookup_p50_ms"], doc[f"query_{n}"]["lookup_p99_ms"],
                      doc[f"query_{n}"]["range_ms_median"],
                      doc[f"query_{n}"]["scan_rows_per_second"] / 1e6,
                      doc.get(f"state_{n}", {}).get("state_load_seconds_median"),
                      doc.get(f"state_{n}", {}).get("commits_per_second")] for n in ns],
                    title="scale")
    goals = []
    small, big = sizes(rows)[0], sizes(rows)[-1]
    if f"query_{small}" in doc and f"query_{big}" in doc:
        ratio = doc[f"query_{big}"]["lookup_p50_ms"] / doc[f"query_{small}"]["lookup_p50_ms"]
        goals.append(goal_line(f"lookup p50 at {big:,} / at {small:,}", ratio, 1.5, "x",
                               higher_is_better=False))
    for n in sizes(rows):
        m = doc.get(f"maintain_{n}")
        if m:
            goals.append(goal_line(f"compaction peak RSS at {n:,} rows", m["peak_rss_mib"],
                                   m["rss_limit_mib"], "MiB", higher_is_better=False))
    if "upsert" in doc:
        u = doc["upsert"]
        before = doc.get(f"query_{big}", {}).get("lookup_p50_ms")
        print(f"upsert of {u['rows']:,} keys into {big:,} rows: committed in "
              f"{u['committed_seconds']:.2f} s, visible in {u['visible_seconds']:.2f} s; "
              f"lookup p50 of upserted keys after it "
              f"{u['upserted_key_lookup_p50_ms_after']:.2f} ms (random keys before: "
              f"{fmt(before)} ms)")
        goals.append(goal_line(f"upsert of {u['rows']:,} keys into {big:,} rows, visible",
                               u["visible_seconds"], UPSERT_VISIBLE_GOAL_SECONDS, "s",
                               higher_is_better=False))
    if "ingest" in doc:
        print(f"standard ingest of {doc['ingest']['rows']:,} rows: "
              f"{fmt(doc['ingest']['rows_per_second'] / 1e6)} M rows/s")
    if "disk" in doc:
        print(f"disk used: {doc['disk']['store_bytes'] / MIB:,.0f} MiB (retention "
              f"{doc['disk']['retention_seconds']:.0f} s, GC delay "
              f"{doc['disk']['gc_delay_seconds']:.0f} s)")
    return goals


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child-maintain":
        child_maintain(sys.argv[2], sys.argv[3])
        return
    args = parse_args(__doc__.splitlines()[0], extra=lambda p: (
        p.add_argument("--rows", type=int, default=0),
        p.add_argument("--work", default=""),
        p.add_argument("--upsert", action="store_true",
                       help="also upsert 1%% of the largest table's keys (stage 8)")))
    rows = args.rows or (3_000_000 if args.quick else 100_000_000)
    work = Path(args.work or ("scale-work-quick" if args.quick else "scale-work")).resolve()
    work.mkdir(parents=True, exist_ok=True)
    progress = Progress(work, rows)
    doc = progress.doc

    def save() -> None:
        goals = report(doc, rows)
        if not args.no_save:
            save_results("scale", {"rows": rows, "work": str(work), "stages": doc,
                                   "goals": goals}, quick=args.quick)

    if not progress.done("input"):
        progress.record("input", write_inputs(work, rows))
        print(f"input written: {doc['input']}", flush=True)
    store = sd.Store.open(str(work / "store"), create=True)
    spark = None
    for n in sizes(rows):
        files = input_files(work, rows, n, doc["input"])
        if not progress.done(f"import_{n}"):
            if spark is None:
                from sediment.spark import session

                spark = session("local[2]")
            progress.record(f"import_{n}", import_table(store, spark, rows, n, files))
            print(f"imported {n:,}: {doc[f'import_{n}']}", flush=True)
            for stage in (f"maintain_{n}", f"query_{n}", f"state_{n}", "upsert"):
                doc.pop(stage, None)
        if not progress.done(f"maintain_{n}"):
            progress.record(f"maintain_{n}", maintain_table(store, work, n))
            print(f"maintained {n:,}: {doc[f'maintain_{n}']}", flush=True)
        if not progress.done(f"query_{n}"):
            progress.record(f"query_{n}", query_table(store, n, files))
            print(f"queried {n:,}: {doc[f'query_{n}']}", flush=True)
        if not progress.done(f"state_{n}"):
            progress.record(f"state_{n}", state_table(store, work, n))
        save()
    if spark is not None:
        spark.stop()
    if args.upsert and not progress.done("upsert"):
        progress.record("upsert", upsert_table(store, rows, input_files(work, rows, rows,
                                                                         doc["input"])))
        print(f"upserted: {doc['upsert']}", flush=True)
    if not progress.done("ingest"):
        progress.record("ingest", standard_ingest(store, rows))
    progress.record("disk", disk(work))
    save()


if __name__ == "__main__":
    main()
