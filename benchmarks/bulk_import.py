"""Bulk import benchmark: ``sediment.spark.bulk_import`` against Spark's own sorted write,
from ONE file, from EIGHT files and from a DataFrame, with the default properties.

Run: ``python benchmarks/bulk_import.py [--rows N] [--quick] [--repeats R] [--sources ...]``
(default 10M rows; ``--quick``: 1M).

Data: Sleeper's system-test schema (``sediment.workload.generate``), written once (untimed) as
one Parquet file and as eight (snappy, 131,072 rows per row group: a file is read in pieces
of whole row groups, so a writer's one-row-group file stays one piece). One Spark session,
``sediment.spark.session("local[2]")``, runs everything; a warm-up on a small file comes first
(JIT, Python workers). Then ``--repeats`` rounds; each round runs, per source, the bulk import
into a new empty table with the default properties (no leaf count set by hand: the import
sizes its leaves, ``bulk_import.target_leaf_rows``) and then Spark-native with as many ranges
as the import made leaves:

* ``one-file``: ``bulk_import(spark, table, [file])`` vs ``spark.read.parquet(file)
  .repartitionByRange(L, "key").sortWithinPartitions("key", "timestamp").write.parquet(out)``;
* ``eight-files``: the same over the folder of eight files;
* ``dataframe``: source ``spark.read.parquet(eight-file folder)`` (rows pass through the JVM
  into Python), the same native baseline.

Every run is verified: row count (table state and the Parquet footers of the data files on
disk, or of Spark's output), leaves, commits (one for the import). For each run: wall seconds,
rows/s, CPU seconds of the whole Spark process tree (JVM + Python workers, from /proc), Spark
stage metrics (tasks per stage), peak RSS of the Spark process tree.

Goal: every source >= 1x the Spark-native rate (best of repeats, same run).
"""

from __future__ import annotations

import argparse
import glob
import math
import os
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from _common import (
    goal_line,
    parse_args,
    peak_rss_mib,
    print_table,
    rate,
    save_results,
    temp_dir,
)

import sediment as sd
from sediment.files.sidecars import SAMPLE, parse_sidecar
from sediment.workload import benchmark_schema, generate

RATIO_GOAL = 1.0
ROW_GROUP_ROWS = 131_072
SOURCES = ("one-file", "eight-files", "dataframe")


# ---- the Spark process tree: CPU and memory from /proc ----------------------------------------
def _proc_table() -> dict[int, list[tuple[int, list[str]]]]:
    kids: dict[int, list[tuple[int, list[str]]]] = {}
    for p in glob.glob("/proc/[0-9]*/stat"):
        try:
            with open(p) as f:
                s = f.read()
        except OSError:
            continue
        fields = s.rsplit(")", 1)[1].split()
        kids.setdefault(int(fields[1]), []).append((int(p.split("/")[2]), fields))
    return kids


class SparkTree:
    """The JVM of a local Spark session and its descendants (the Python daemon and workers)."""

    def __init__(self, spark: Any) -> None:
        self.pid = int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())
        self.tick = os.sysconf("SC_CLK_TCK")
        self.page = os.sysconf("SC_PAGE_SIZE")

    def _tree(self) -> list[tuple[int, list[str]]]:
        kids = _proc_table()
        try:
            with open(f"/proc/{self.pid}/stat") as f:
                own = f.read().rsplit(")", 1)[1].split()
        except OSError:
            return []
        out = [(self.pid, own)]
        stack = [self.pid]
        while stack:
            for c in kids.get(stack.pop(), []):
                out.append(c)
                stack.append(c[0])
        return out

    def cpu_snapshot(self) -> dict[int, float]:
        """CPU seconds (utime + stime + reaped children's) of each process in the tree."""
        return {pid: sum(int(x) for x in f[11:15]) / self.tick for pid, f in self._tree()}

    def cpu_delta(self, before: dict[int, float]) -> tuple[float, float]:
        """(JVM, Python) CPU seconds since ``before``: the JVM's own threads, and every
        process under it (the Python daemon and workers). Per process, so that a worker that
        exits in between does not subtract its earlier CPU (one that starts and exits in
        between is missed: workers are reused, so that is rare)."""
        jvm = py = 0.0
        for pid, cpu in self.cpu_snapshot().items():
            d = max(0.0, cpu - before.get(pid, 0.0))
            if pid == self.pid:
                jvm += d
            else:
                py += d
        return jvm, py

    def rss_mib(self) -> float:
        return sum(int(f[21]) for _, f in self._tree()) * self.page / 2**20


class TreeRssSampler:
    """Peak summed RSS of the Spark tree while the block runs (polled every ``interval`` s)."""

    def __init__(self, tree: SparkTree, interval: float = 0.25) -> None:
        self.tree, self.interval = tree, interval
        self.peak_mib = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _poll(self) -> None:
        while not self._stop.is_set():
            self.peak_mib = max(self.peak_mib, self.tree.rss_mib())
            self._stop.wait(self.interval)

    def __enter__(self) -> TreeRssSampler:
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()


# ---- measuring one Spark action ---------------------------------------------------------------
_GROUP = [0]


def _stages(spark: Any, group: str) -> list[dict[str, Any]]:
    """Metrics of the stages of every job in ``group`` (from the status store)."""
    sc = spark.sparkContext
    store = sc._jsc.sc().statusStore()
    tracker = sc.statusTracker()
    out = []
    deadline = time.monotonic() + 5
    for job in sorted(tracker.getJobIdsForGroup(group)):
        info = tracker.getJobInfo(job)
        for sid in sorted(info.stageIds if info else []):
            while True:  # the listener is asynchronous: wait for the stage to be recorded
                try:
                    s = store.lastStageAttempt(sid)
                except Exception:  # noqa: BLE001 - not known (yet)
                    s = None
                if s is not None and (s.completionTime().isDefined()
                                      or s.status().toString() == "SKIPPED"):
                    break
                if time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            if s is None or not s.completionTime().isDefined():
                continue
            out.append({
                "stage": sid, "job": job, "name": s.name().split(" at ")[0],
                "tasks": s.numTasks(),
                "seconds": (s.completionTime().get().getTime()
                            - s.submissionTime().get().getTime()) / 1000,
                "task_run_seconds": s.executorRunTime() / 1000,
                "jvm_cpu_seconds": s.executorCpuTime() / 1e9,
                "gc_seconds": s.jvmGcTime() / 1000,
                "input_mib": s.inputBytes() / 2**20,
                "shuffle_write_mib": s.shuffleWriteBytes() / 2**20,
                "shuffle_write_seconds": s.shuffleWriteTime() / 1e9,
                "shuffle_read_mib": s.shuffleReadBytes() / 2**20,
                "spill_disk_mib": s.diskBytesSpilled() / 2**20,
                "output_mib": s.outputBytes() / 2**20,
            })
    return out


def measure(spark: Any, tree: SparkTree, fn: Callable[[], Any]) -> tuple[dict[str, Any], Any]:
    """Run ``fn`` (Spark actions) as one job group: wall, CPU, stages, memory, load."""
    _GROUP[0] += 1
    group = f"bench-{_GROUP[0]}"
    spark.sparkContext.setJobGroup(group, group)
    load0 = os.getloadavg()[0]
    cpu0, drv0 = tree.cpu_snapshot(), time.process_time()
    with TreeRssSampler(tree) as mem:
        t0 = time.perf_counter()
        out = fn()
        seconds = time.perf_counter() - t0
    (jvm, py), drv1 = tree.cpu_delta(cpu0), time.process_time()
    spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)
    stages = _stages(spark, group)
    return {"seconds": seconds, "spark_cpu_seconds": jvm + py, "jvm_cpu_seconds": jvm,
            "python_cpu_seconds": py, "driver_cpu_seconds": drv1 - drv0,
            "spark_peak_rss_mib": mem.peak_mib, "load_before": load0,
            "load_after": os.getloadavg()[0], "stages": stages,
            "gc_seconds": sum(st["gc_seconds"] for st in stages)}, out


# ---- data -------------------------------------------------------------------------------------
def write_input(folder: Path, rows: int, files: int) -> dict[str, Any]:
    folder.mkdir(parents=True, exist_ok=True)
    per = math.ceil(rows / files)
    t0 = time.perf_counter()
    for i, batch in enumerate(generate(rows, batch_rows=per)):
        pq.write_table(pa.Table.from_batches([batch]), folder / f"part-{i:05d}.parquet",
                       compression="snappy", row_group_size=ROW_GROUP_ROWS)
    return {"seconds": time.perf_counter() - t0, "files": len(list(folder.glob("*.parquet"))),
            "bytes": _bytes(folder.glob("*.parquet"))}


def _bytes(paths: Any) -> int:
    return sum(Path(p).stat().st_size for p in paths)


def _parquet_rows(paths: list[str]) -> int:
    return sum(pq.ParquetFile(p).metadata.num_rows for p in paths)


def _data_files(root: Path) -> tuple[list[str], list[str]]:
    every = glob.glob(str(root / "**" / "data" / "**" / "*.parquet"), recursive=True)
    # sidecars (files.sidecars) do not end in .parquet: list them beside the data files
    samples = [p for p in glob.glob(str(root / "**" / "data" / "**" / "*"), recursive=True)
               if (s := parse_sidecar(p)) is not None and s.kind == SAMPLE]
    return every, samples


# ---- variants ---------------------------------------------------------------------------------
def run_native(spark: Any, tree: SparkTree, src: Path, out: Path, rows: int,
               ranges: int) -> dict[str, Any]:
    def go() -> None:
        (spark.read.parquet(str(src)).repartitionByRange(ranges, "key")
         .sortWithinPartitions("key", "timestamp").write.parquet(str(out)))

    m, _ = measure(spark, tree, go)
    files = glob.glob(str(out / "*.parquet"))
    found = _parquet_rows(files)
    if found != rows:
        raise AssertionError(f"spark-native wrote {found} rows, expected {rows}")
    m.update(rows=rows, files=len(files), bytes=_bytes(files), ranges=ranges)
    shutil.rmtree(out, ignore_errors=True)
    return m


def run_sediment(spark: Any, tree: SparkTree, source: str, src: Path, root: Path,
                 rows: int) -> dict[str, Any]:
    from sediment.spark import bulk_import

    table = sd.Store.open(str(root), create=True).create_table("bench", benchmark_schema())
    before = table.version
    data_in: Any = (spark.read.parquet(str(src)) if source == "dataframe"
                    else [str(src / "*.parquet")])
    m, result = measure(spark, tree, lambda: bulk_import(spark, table, data_in))
    desc = table.describe()
    data, samples = _data_files(root)
    on_disk = _parquet_rows(data)
    if not (result.rows == desc["records"] == on_disk == rows):
        raise AssertionError(f"{source}: bulk import reported {result.rows} rows, the table "
                             f"holds {desc['records']}, files on disk {on_disk}; expected {rows}")
    commits = [h.kind for h in table.history() if h.version > before]
    if len(commits) != 1:
        raise AssertionError(f"{source}: {len(commits)} commits ({commits}), expected one")
    m.update(rows=rows, files=result.files, leaves=desc["leaf_partitions"], commits=commits,
             version=result.version, bytes=_bytes(data), sample_bytes=_bytes(samples),
             reported_seconds=result.seconds)
    shutil.rmtree(root, ignore_errors=True)
    return m


# ---- main -------------------------------------------------------------------------------------
def _stage_lines(m: dict[str, Any]) -> str:
    return "; ".join(f"{s['name']}[{s['tasks']}] {s['seconds']:.1f}s"
                     f" (task {s['task_run_seconds']:.1f}s, gc {s['gc_seconds']:.1f}s"
                     + (f", shuffle w {s['shuffle_write_mib']:.0f} MiB"
                        if s["shuffle_write_mib"] else "") + ")"
                     for s in m["stages"] if s["seconds"] >= 0.05)


def _print_run(rep: int, name: str, m: dict[str, Any]) -> None:
    print(f"[{rep + 1}] {name}: {m['seconds']:.1f} s, {m['rows_per_second'] / 1e6:.2f} M rows/s, "
          f"CPU JVM {m['jvm_cpu_seconds']:.1f} + Python {m['python_cpu_seconds']:.1f} s, "
          f"load {m['load_before']:.1f}->{m['load_after']:.1f}; {_stage_lines(m)}", flush=True)


def main() -> None:
    def extra(p: argparse.ArgumentParser) -> None:
        p.add_argument("--rows", type=int, default=None, help="rows (default 10M; quick 1M)")
        p.add_argument("--repeats", type=int, default=2,
                       help="rounds of all sources; the fastest run of each is reported")
        p.add_argument("--sources", default=",".join(SOURCES),
                       help=f"comma-separated, from {', '.join(SOURCES)}")
        p.add_argument("--master", default="local[2]")

    args = parse_args(__doc__.splitlines()[0], extra=extra)
    rows = args.rows or (1_000_000 if args.quick else 10_000_000)
    sources = [v for v in args.sources.split(",") if v]
    unknown = [v for v in sources if v not in SOURCES]
    if unknown:
        raise SystemExit(f"unknown source: {unknown[0]}")
    started = time.perf_counter()
    results: dict[str, Any] = {"rows": rows, "master": args.master, "repeats": args.repeats,
                               "row_group_rows": ROW_GROUP_ROWS,
                               "load_average_start": os.getloadavg()}
    with temp_dir("sediment-bulk-bench-") as tmp:
        one, eight = tmp / "one", tmp / "eight"
        results["input"] = {"one-file": write_input(one, rows, 1),
                            "eight-files": write_input(eight, rows, 8)}
        print(f"input: {rows:,} rows as 1 and as 8 Parquet files "
              f"({results['input']['one-file']['bytes'] / 2**20:,.0f} MiB, snappy, "
              f"{ROW_GROUP_ROWS:,} rows per row group)")

        from sediment.spark import bulk_import, session

        t0 = time.perf_counter()
        spark = session(args.master)
        results["session_start_seconds"] = time.perf_counter() - t0
        try:
            tree = SparkTree(spark)
            warm = tmp / "warm"
            write_input(warm, 50_000, 1)
            w0 = time.perf_counter()
            run_native(spark, tree, warm, tmp / "warm-native", 50_000, 2)
            warm_sources: list[Any] = [[str(warm / "*.parquet")], spark.read.parquet(str(warm))]
            for i, src in enumerate(warm_sources):
                wt = sd.Store.open(str(tmp / "warm-store"), create=True).create_table(
                    f"w{i}", benchmark_schema())
                bulk_import(spark, wt, src)
            shutil.rmtree(tmp / "warm-store", ignore_errors=True)
            results["warmup_seconds"] = time.perf_counter() - w0
            print(f"Spark {spark.version} {args.master}: session "
                  f"{results['session_start_seconds']:.1f} s, warm-up "
                  f"{results['warmup_seconds']:.1f} s", flush=True)

            runs: dict[str, list[dict[str, Any]]] = {}
            for rep in range(max(1, args.repeats)):
                order = sources[rep % len(sources):] + sources[:rep % len(sources)]
                for source in order:
                    src = one if source == "one-file" else eight
                    m = run_sediment(spark, tree, source, src, tmp / f"store-{source}", rows)
                    m["rows_per_second"] = rate(rows, m["seconds"])
                    runs.setdefault(source, []).append(m)
                    _print_run(rep, source, m)
                    n = run_native(spark, tree, src, tmp / "native-out", rows, m["leaves"])
                    n["rows_per_second"] = rate(rows, n["seconds"])
                    runs.setdefault(f"{source} native", []).append(n)
                    _print_run(rep, f"{source} native[{m['leaves']}]", n)
        finally:
            spark.stop()

    best: dict[str, dict[str, Any]] = {}
    for v, rs in runs.items():
        b = dict(min(rs, key=lambda r: r["seconds"]))
        b["all_seconds"] = [r["seconds"] for r in rs]
        best[v] = b
    table_rows = []
    goals = []
    for source in sources:
        s, n = best[source], best[f"{source} native"]
        s["ratio_to_native"] = n["seconds"] / s["seconds"]
        table_rows.append([source, s["leaves"], s["files"], s["seconds"],
                           s["rows_per_second"] / 1e6, n["seconds"],
                           n["rows_per_second"] / 1e6, s["ratio_to_native"],
                           max(st["tasks"] for st in s["stages"]),
                           " / ".join(f"{x:.1f}" for x in s["all_seconds"]),
                           " / ".join(f"{x:.1f}" for x in n["all_seconds"])])
        goals.append(goal_line(f"bulk import ({source}) rate vs Spark-native sorted write",
                               s["ratio_to_native"], RATIO_GOAL, "x"))
    print_table(["source (best of repeats)", "leaves", "files", "sediment s", "Mrows/s",
                 "native s", "native Mrows/s", "x native", "max tasks/stage", "sediment runs s",
                 "native runs s"], table_rows,
                title=f"Bulk import of {rows:,} rows, default properties, {args.master}")
    load_end = os.getloadavg()
    print(f"\nload average at start {results['load_average_start']}, at end {load_end}; "
          f"driver peak RSS {peak_rss_mib():,.0f} MiB; total "
          f"{time.perf_counter() - started:.0f} s")
    results.update({"best": best, "runs": runs, "goals": goals, "load_average_end": load_end,
                    "driver_peak_rss_mib": peak_rss_mib(),
                    "total_seconds": time.perf_counter() - started})
    if not args.no_save:
        save_results("bulk_import", results, quick=args.quick)


if __name__ == "__main__":
    main()
