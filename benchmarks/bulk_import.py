"""Bulk import benchmark: ``sediment.spark.bulk_import`` against Spark's own sorted write.

Run: ``python benchmarks/bulk_import.py [--rows N] [--quick] [--repeats R] [--files F]
[--variants ...] [--breakdown ...]`` (default 10M rows in 20 Parquet files; ``--quick``: 1M).

Data: Sleeper's system-test schema (``sediment.workload.generate``), written once (untimed) as
``--files`` Parquet files (snappy, one row group each) in a temp folder. One Spark session,
``sediment.spark.session("local[2]")``, runs everything; a warm-up on one file (JIT, Python
workers) comes first. Then ``--repeats`` rounds, each timing every variant once (the order
rotates per round); the fastest run of each variant is reported, with all runs:

* ``spark-native``: ``spark.read.parquet(folder).repartitionByRange(16, "key")
  .sortWithinPartitions("key", "timestamp").write.parquet(out)`` (the baseline; Spark's
  defaults: snappy, 128 MiB row groups);
* ``files``: ``bulk_import(spark, table, [folder + "/*.parquet"])`` into a table created with
  15 split points (16 equal slices of the uniform key space, ``datagen.split_points(16)``) and
  ``bulk_import.min_leaf_partitions=16`` (the default, 256, would pre-split a 16-leaf table
  into 256 leaves first);
* ``dataframe``: the same table set-up, source ``spark.read.parquet(folder)``;
* ``presplit``: ``files`` into an empty table with ``bulk_import.min_leaf_partitions=16``, so
  bulk import samples the input and splits the table into 16 leaves itself;
* ``files-256`` (not run by default): ``files`` into the 16-leaf table with default
  properties, which bulk import pre-splits to 256 leaves.

Every run is verified: row count (table state and the Parquet footers of the data files on
disk, or of Spark's output), and leaves. For each run: wall seconds, rows/s, CPU seconds of the
whole Spark process tree (JVM + Python workers, from /proc; steadier than wall time on a shared
machine), Spark stage metrics (from the status store; the UI is off), peak RSS of the Spark
process tree (sampled) and of this driver, bytes written, load average.

Then a **breakdown** of where the time goes (``--breakdown``, default ``files,native``): the
pipeline run step by step with the same internal functions as ``bulk_import``, each step a
separate Spark job that repeats the ones before (so a phase's cost is the difference):
read source (noop sink); presplit (sample job + split commits); + assign leaves (noop);
+ shuffle (noop); + stage (sort and write in tasks, ``collect``); commit. Python time inside
tasks is summed with accumulators: conform, ``leaf_indices``, the sort and the write inside
``stage_partition``, and time spent blocked on the JVM feeding a task. The native pipeline is
broken down the same way (read; + range partitioning with its sampling job; + sort; write).

Goal: sediment ``files`` >= 0.9x the Spark-native rows/s (best of repeats, same run).
"""

from __future__ import annotations

import glob
import importlib
import inspect
import math
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import datagen
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

RATIO_GOAL = 0.9
LEAVES = 16
VARIANTS = ("spark-native", "files", "dataframe", "presplit")
EXTRA_VARIANTS = ("files-256",)
BREAKDOWNS = ("files", "dataframe", "native")

bi = importlib.import_module("sediment.spark.bulk_import")  # the module (the package
# re-exports the function under the same name)


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
                       compression="snappy", row_group_size=per)
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
def run_native(spark: Any, tree: SparkTree, src: Path, out: Path, rows: int) -> dict[str, Any]:
    def go() -> None:
        (spark.read.parquet(str(src)).repartitionByRange(LEAVES, "key")
         .sortWithinPartitions("key", "timestamp").write.parquet(str(out)))

    m, _ = measure(spark, tree, go)
    files = glob.glob(str(out / "*.parquet"))
    found = _parquet_rows(files)
    if found != rows:
        raise AssertionError(f"spark-native wrote {found} rows, expected {rows}")
    m.update(rows=rows, files=len(files), bytes=_bytes(files))
    shutil.rmtree(out, ignore_errors=True)
    return m


def _sediment_table(root: Path, variant: str) -> Any:
    store = sd.Store.open(str(root), create=True)
    if variant == "presplit":
        return store.create_table("bench", benchmark_schema(),
                                  properties={"bulk_import.min_leaf_partitions": LEAVES})
    props = {} if variant == "files-256" else {"bulk_import.min_leaf_partitions": LEAVES}
    return store.create_table("bench", benchmark_schema(),
                              split_points=datagen.split_points(LEAVES), properties=props)


def run_sediment(spark: Any, tree: SparkTree, variant: str, src: Path, root: Path,
                 rows: int) -> dict[str, Any]:
    from sediment.spark import bulk_import

    table = _sediment_table(root, variant)
    source: Any = (spark.read.parquet(str(src)) if variant == "dataframe"
                   else [str(src / "*.parquet")])
    m, result = measure(spark, tree, lambda: bulk_import(spark, table, source))
    desc = table.describe()
    data, samples = _data_files(root)
    on_disk = _parquet_rows(data)
    if not (result.rows == desc["records"] == on_disk == rows):
        raise AssertionError(f"{variant}: bulk import reported {result.rows} rows, the table "
                             f"holds {desc['records']}, files on disk {on_disk}; expected {rows}")
    # files-256: bulk import pre-splits the 16-leaf table until it has at least 256 leaves
    # (255 quantiles of the input, each splitting the leaf it falls in: more than 256)
    leaves_ok = (desc["leaf_partitions"] >= 256 if variant == "files-256"
                 else desc["leaf_partitions"] == LEAVES)
    if not leaves_ok:
        raise AssertionError(f"{variant}: {desc['leaf_partitions']} leaves")
    m.update(rows=rows, files=result.files, leaves=desc["leaf_partitions"],
             version=result.version, bytes=_bytes(data), sample_bytes=_bytes(samples),
             reported_seconds=result.seconds)
    shutil.rmtree(root, ignore_errors=True)
    return m


# ---- breakdown: the pipeline step by step, with Python time summed in accumulators ------------
# These functions run in the Python workers: they are pickled by value (this is __main__) and
# must only use sediment, pyarrow and the standard library.
def _timed(fn: Callable[..., Any], spent: dict[str, float], key: str) -> Callable[..., Any]:
    """``fn``, adding its wall and CPU (this worker process, all threads) seconds to
    ``spent[key]`` and ``spent[key + "_cpu"]``."""
    def run(*a: Any, **k: Any) -> Any:
        t0, c0 = time.perf_counter(), time.process_time()
        try:
            return fn(*a, **k)
        finally:
            spent[key] += time.perf_counter() - t0
            spent[key + "_cpu"] += time.process_time() - c0

    return run


def _fed(batches: Iterator[pa.RecordBatch], spent: dict[str, float]
         ) -> Iterator[pa.RecordBatch]:
    """``batches``, adding the time spent waiting for each (the JVM feeding the task) to
    ``spent["wait"]``."""
    while True:
        t0 = time.perf_counter()
        b = next(batches, None)
        spent["wait"] += time.perf_counter() - t0
        if b is None:
            return
        yield b


def _timed_assign(acc: dict[str, Any], schema: Any, name: str, boundaries: pa.Table,
                  buckets: list[int]) -> Callable[[Iterator[pa.RecordBatch]],
                                                  Iterator[pa.RecordBatch]]:
    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import time as _t

        import sediment.ingest.sources as src_mod
        from sediment.spark import tasks as tk

        real_conform, real_leaf = src_mod.conform, tk.leaf_indices
        spent = dict.fromkeys(acc, 0.0)
        conform = _timed(real_conform, spent, "conform")
        leaf = _timed(real_leaf, spent, "leaf_indices")
        src_mod.conform, tk.leaf_indices = conform, leaf
        try:
            gen = tk.assign_leaves(_fed(batches, spent), schema, name, boundaries, buckets)
            while True:
                t0, c0 = _t.perf_counter(), _t.process_time()
                out = next(gen, None)
                spent["total"] += _t.perf_counter() - t0
                spent["total_cpu"] += _t.process_time() - c0
                if out is None:
                    break
                yield out
        finally:
            src_mod.conform, tk.leaf_indices = real_conform, real_leaf
            for k, v in spent.items():
                acc[k].add(v)

    return run


def _timed_stage(acc: dict[str, Any], spec: dict[str, Any], name: str, version: int,
                 table_id: str) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import time as _t

        import sediment.ingest.standard as std
        from sediment.spark import tasks as tk

        real_sort, real_write = std.sort_table, std._write_partitioned
        spent = dict.fromkeys(acc, 0.0)
        std.sort_table = _timed(real_sort, spent, "sort")
        std._write_partitioned = _timed(real_write, spent, "write_and_sort")
        t0, c0 = _t.perf_counter(), _t.process_time()
        try:
            yield from tk.stage_partition(_fed(batches, spent), spec, name, version, table_id)
        finally:
            spent["total"] += _t.perf_counter() - t0
            spent["total_cpu"] += _t.process_time() - c0
            std.sort_table, std._write_partitioned = real_sort, real_write
            for k, v in spent.items():
                acc[k].add(v)

    return run


def _noop(df: Any) -> None:
    df.write.format("noop").mode("overwrite").save()


def _accumulators(spark: Any, names: tuple[str, ...]) -> dict[str, Any]:
    return {n: spark.sparkContext.accumulator(0.0) for n in names}


def breakdown_sediment(spark: Any, tree: SparkTree, source_kind: str, src: Path, root: Path,
                       rows: int) -> dict[str, Any]:
    """bulk_import's steps one by one on an empty table (min_leaf_partitions=16)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    from sediment.core.model import FileReference
    from sediment.files.writer import WrittenFile
    from sediment.ingest.standard import StagedFiles, commit_staged
    from sediment.spark import tasks

    table = _sediment_table(root, "presplit")
    source: Any = (spark.read.parquet(str(src)) if source_kind == "dataframe"
                   else [str(src / "*.parquet")])
    steps: dict[str, dict[str, Any]] = {}
    frame = bi._source_frame(spark, table, source)
    steps["read"], _ = measure(spark, tree, lambda: _noop(frame))
    steps["presplit"], made = measure(spark, tree,
                                      lambda: bi.presplit(spark, table, frame, LEAVES))
    state = table._handle.states.head()
    leaves = state.leaf_partitions()
    boundaries = tasks.boundary_table(state)
    buckets = bi._bucket_values(len(leaves))
    schema, name, spec = table.schema, table.name, table.store.spec()
    pid_schema = from_arrow_schema(schema.to_arrow().append(pa.field(tasks.PID, pa.int64(),
                                                                     False)))
    # A bulk_import whose _source_frame takes ``leaves`` reads (or validates) and assigns in
    # one Python pass: break that down as it runs (no Python timers in that pass).
    fused = "leaves" in inspect.signature(bi._source_frame).parameters
    if fused:
        with_pid = bi._source_frame(spark, table, source, (boundaries, buckets))
    else:
        acc_a = _accumulators(spark, ("conform", "conform_cpu", "leaf_indices",
                                      "leaf_indices_cpu", "wait", "total", "total_cpu"))
        with_pid = frame.mapInArrow(_timed_assign(acc_a, schema, name, boundaries, buckets),
                                    pid_schema)
    steps["read+assign"], _ = measure(spark, tree, lambda: _noop(with_pid))
    assign_python = None if fused else {k: a.value for k, a in acc_a.items()}
    shuffled = with_pid.repartition(len(leaves), tasks.PID)
    steps["read+assign+shuffle"], _ = measure(spark, tree, lambda: _noop(shuffled))
    acc_s = _accumulators(spark, ("sort", "sort_cpu", "write_and_sort", "write_and_sort_cpu",
                                  "wait", "total", "total_cpu"))
    staged_df = shuffled.mapInArrow(
        _timed_stage(acc_s, spec, name, state.version, table.table_id),
        from_arrow_schema(tasks.STAGED_SCHEMA))
    steps["read+assign+shuffle+stage"], staged_rows = measure(spark, tree, staged_df.collect)
    stage_python = {k: a.value for k, a in acc_s.items()}
    refs = [FileReference(r["filename"], r["partition_id"], int(r["records"]))
            for r in staged_rows]
    written = [WrittenFile(r["filename"], 0, int(r["bytes"])) for r in staged_rows]
    staged = StagedFiles(sum(r.records for r in refs), refs, written)
    steps["commit"], result = measure(
        spark, tree, lambda: commit_staged(table._handle, staged, time.perf_counter(),
                                           kind="bulk_import"))
    if result.rows != rows or table.describe()["records"] != rows:
        raise AssertionError(f"breakdown {source_kind}: {result.rows} rows committed, "
                             f"expected {rows}")
    shutil.rmtree(root, ignore_errors=True)
    s = steps
    phases = {
        "read source": _phase(s["read"]),
        "presplit (sample job + split commits)": _phase(s["presplit"]),
        ("assign leaves (same pass)" if fused else "assign leaves (+ a Python round trip)"):
            _phase(s["read+assign"], s["read"]),
        "shuffle": _phase(s["read+assign+shuffle"], s["read+assign"]),
        "stage (sort + write in tasks)": _phase(s["read+assign+shuffle+stage"],
                                                s["read+assign+shuffle"]),
        "commit": _phase(s["commit"]),
    }
    pipeline = (s["presplit"]["seconds"] + s["read+assign+shuffle+stage"]["seconds"]
                + s["commit"]["seconds"])
    return {"source": source_kind, "fused_read_and_assign": fused, "splits_made": made,
            "steps": steps, "phases": phases,
            "pipeline_seconds": pipeline, "assign_python_seconds": assign_python,
            "stage_python_seconds": stage_python}


def breakdown_native(spark: Any, tree: SparkTree, src: Path, out: Path) -> dict[str, Any]:
    def df() -> Any:
        return spark.read.parquet(str(src))

    steps: dict[str, dict[str, Any]] = {}
    steps["read"], _ = measure(spark, tree, lambda: _noop(df()))
    steps["read+range"], _ = measure(
        spark, tree, lambda: _noop(df().repartitionByRange(LEAVES, "key")))
    steps["read+range+sort"], _ = measure(spark, tree, lambda: _noop(
        df().repartitionByRange(LEAVES, "key").sortWithinPartitions("key", "timestamp")))
    steps["read+range+sort+write"], _ = measure(spark, tree, lambda: (
        df().repartitionByRange(LEAVES, "key").sortWithinPartitions("key", "timestamp")
        .write.parquet(str(out))))
    shutil.rmtree(out, ignore_errors=True)
    s = steps
    return {"source": "native", "steps": steps, "phases": {
        "read source": _phase(s["read"]),
        "range partitioning (sample job + shuffle)": _phase(s["read+range"], s["read"]),
        "sort within partitions": _phase(s["read+range+sort"], s["read+range"]),
        "write Parquet": _phase(s["read+range+sort+write"], s["read+range+sort"]),
    }, "pipeline_seconds": s["read+range+sort+write"]["seconds"]}


_PHASE_KEYS = ("seconds", "spark_cpu_seconds", "jvm_cpu_seconds", "python_cpu_seconds",
               "driver_cpu_seconds")


def _phase(step: dict[str, Any], minus: dict[str, Any] | None = None) -> dict[str, float]:
    return {k: step[k] - (minus[k] if minus else 0.0) for k in _PHASE_KEYS}


# ---- main -------------------------------------------------------------------------------------
def _stage_lines(m: dict[str, Any]) -> str:
    return "; ".join(f"{s['name']}[{s['tasks']}] {s['seconds']:.1f}s"
                     f" (task {s['task_run_seconds']:.1f}s, gc {s['gc_seconds']:.1f}s"
                     + (f", shuffle w {s['shuffle_write_mib']:.0f} MiB"
                        if s["shuffle_write_mib"] else "") + ")"
                     for s in m["stages"] if s["seconds"] >= 0.05)


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], extra=lambda p: (
        p.add_argument("--rows", type=int, default=None, help="rows (default 10M; quick 1M)"),
        p.add_argument("--files", type=int, default=20, help="input Parquet files"),
        p.add_argument("--repeats", type=int, default=2,
                       help="rounds of all variants (order rotates); the fastest is reported"),
        p.add_argument("--variants", default=",".join(VARIANTS),
                       help=f"comma-separated, from {', '.join(VARIANTS + EXTRA_VARIANTS)}"),
        p.add_argument("--breakdown", default="files,native",
                       help=f"comma-separated step-by-step runs, from {', '.join(BREAKDOWNS)}"
                            " (empty: none)"),
        p.add_argument("--master", default="local[2]"),
        p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                       help="extra Spark configuration for the session (repeatable)"),
    ))
    rows = args.rows or (1_000_000 if args.quick else 10_000_000)
    variants = [v for v in args.variants.split(",") if v]
    unknown = [v for v in variants if v not in VARIANTS + EXTRA_VARIANTS]
    breakdowns = [b for b in args.breakdown.split(",") if b]
    unknown += [b for b in breakdowns if b not in BREAKDOWNS]
    if unknown:
        raise SystemExit(f"unknown variant or breakdown: {unknown[0]}")
    if "spark-native" not in variants:
        variants.insert(0, "spark-native")
    started = time.perf_counter()
    results: dict[str, Any] = {"rows": rows, "leaves": LEAVES, "master": args.master,
                               "repeats": args.repeats, "load_average_start": os.getloadavg()}
    with temp_dir("sediment-bulk-bench-") as tmp:
        src = tmp / "input"
        gen = write_input(src, rows, args.files)
        results["input"] = gen
        print(f"input: {rows:,} rows in {gen['files']} Parquet files "
              f"({gen['bytes'] / 2**20:,.0f} MiB, snappy), written in {gen['seconds']:.1f} s")

        from sediment.spark import bulk_import, session

        t0 = time.perf_counter()
        extra_conf = dict(c.split("=", 1) for c in args.conf)
        results["extra_conf"] = extra_conf
        spark = session(args.master, conf=extra_conf)
        results["session_start_seconds"] = time.perf_counter() - t0
        try:
            tree = SparkTree(spark)
            # warm-up on one file: JVM JIT, Python workers, imports in the workers
            one = tmp / "warm"
            one.mkdir()
            shutil.copy(sorted(src.glob("*.parquet"))[0], one / "part-00000.parquet")
            warm_rows = _parquet_rows([str(one / "part-00000.parquet")])
            w0 = time.perf_counter()
            run_native(spark, tree, one, tmp / "warm-native", warm_rows)
            wt = _sediment_table(tmp / "warm-store", "files")
            bulk_import(spark, wt, [str(one / "*.parquet")])
            wt2 = sd.Store.open(str(tmp / "warm-store"), create=True).create_table(
                "df", benchmark_schema(), split_points=datagen.split_points(LEAVES),
                properties={"bulk_import.min_leaf_partitions": LEAVES})
            bulk_import(spark, wt2, spark.read.parquet(str(one)))
            shutil.rmtree(tmp / "warm-store", ignore_errors=True)
            results["session_and_warmup"] = {
                "session_seconds": results["session_start_seconds"],
                "warmup_seconds": time.perf_counter() - w0}
            conf = spark.sparkContext.getConf()
            results["spark_conf"] = {k: conf.get(k, "(default)") for k in (
                "spark.driver.memory", "spark.sql.shuffle.partitions",
                "spark.sql.execution.arrow.maxRecordsPerBatch", "spark.python.worker.reuse",
                "spark.buffer.size", *extra_conf)}
            print(f"Spark conf: {results['spark_conf']}")
            print(f"Spark {spark.version} {args.master}: session "
                  f"{results['session_start_seconds']:.1f} s, warm-up "
                  f"{results['session_and_warmup']['warmup_seconds']:.1f} s")

            runs: dict[str, list[dict[str, Any]]] = {v: [] for v in variants}
            for rep in range(max(1, args.repeats)):
                order = variants[rep % len(variants):] + variants[:rep % len(variants)]
                for v in order:
                    if v == "spark-native":
                        m = run_native(spark, tree, src, tmp / "native-out", rows)
                    else:
                        m = run_sediment(spark, tree, v, src, tmp / f"store-{v}", rows)
                    m["rows_per_second"] = rate(rows, m["seconds"])
                    runs[v].append(m)
                    print(f"[{rep + 1}] {v}: {m['seconds']:.1f} s, "
                          f"{m['rows_per_second'] / 1e6:.2f} M rows/s, CPU JVM "
                          f"{m['jvm_cpu_seconds']:.1f} + Python {m['python_cpu_seconds']:.1f}"
                          f" s, JVM GC {m['gc_seconds']:.1f} s, load {m['load_before']:.1f}"
                          f"->{m['load_after']:.1f}; {_stage_lines(m)}")

            bd: dict[str, Any] = {}
            for b in breakdowns:
                print(f"breakdown: {b} ...", flush=True)
                if b == "native":
                    bd[b] = breakdown_native(spark, tree, src, tmp / "bd-native")
                else:
                    bd[b] = breakdown_sediment(spark, tree, b, src, tmp / f"bd-{b}", rows)
        finally:
            spark.stop()

    best: dict[str, dict[str, Any]] = {}
    for v, rs in runs.items():
        b = dict(min(rs, key=lambda r: r["seconds"]))
        b["all_seconds"] = [r["seconds"] for r in rs]
        b["all_spark_cpu_seconds"] = [r["spark_cpu_seconds"] for r in rs]
        best[v] = b
    base = best["spark-native"]
    table_rows = []
    for v, b in best.items():
        b["ratio_to_native"] = base["seconds"] / b["seconds"]
        b["cpu_ratio_to_native"] = (min(base["all_spark_cpu_seconds"])
                                    / min(b["all_spark_cpu_seconds"]))
        table_rows.append([v, b["seconds"], b["rows_per_second"] / 1e6, b["ratio_to_native"],
                           min(b["all_spark_cpu_seconds"]),
                           min(r["python_cpu_seconds"] for r in runs[v]),
                           b["cpu_ratio_to_native"],
                           b["files"], b["bytes"] / 2**20, b["spark_peak_rss_mib"],
                           " / ".join(f"{s:.1f}" for s in b["all_seconds"])])
    print_table(["variant (best of repeats)", "seconds", "Mrows/s", "x native", "CPU s (min)",
                 "Python CPU s", "CPU x native", "files", "MiB out", "Spark RSS MiB",
                 "all runs s"],
                table_rows, title=f"Bulk import of {rows:,} rows into {LEAVES} leaves, "
                                  f"{args.master}")
    paired = [n["seconds"] / f["seconds"]
              for n, f in zip(runs["spark-native"], runs.get("files", []), strict=False)]
    if paired:
        print("files / native rate ratio per round: "
              + ", ".join(f"{p:.2f}" for p in paired))

    for b, d in bd.items():
        rows_out = [[k, p["seconds"], p["spark_cpu_seconds"], p["jvm_cpu_seconds"],
                     p["python_cpu_seconds"], p["driver_cpu_seconds"]]
                    for k, p in d["phases"].items()]
        print_table(["phase", "seconds", "Spark CPU s", "JVM CPU s", "Python CPU s",
                     "driver CPU s"], rows_out,
                    title=f"Breakdown: {b} (each step a separate job; a phase is the "
                          f"difference between steps; pipeline {d['pipeline_seconds']:.1f} s)")
        if d.get("assign_python_seconds"):
            a = d["assign_python_seconds"]
            print(f"Python in assign tasks, wall/CPU s: all {a['total']:.2f}/"
                  f"{a['total_cpu']:.2f} (conform {a['conform']:.2f}/{a['conform_cpu']:.2f}, "
                  f"leaf_indices {a['leaf_indices']:.2f}/{a['leaf_indices_cpu']:.2f}); "
                  f"blocked on JVM input {a['wait']:.2f}")
        if d.get("stage_python_seconds"):
            s = d["stage_python_seconds"]
            print(f"Python in stage tasks, wall/CPU s: all {s['total']:.2f}/"
                  f"{s['total_cpu']:.2f} (sort {s['sort']:.2f}/{s['sort_cpu']:.2f}, write "
                  f"{s['write_and_sort'] - s['sort']:.2f}/"
                  f"{s['write_and_sort_cpu'] - s['sort_cpu']:.2f}); blocked on JVM input "
                  f"{s['wait']:.2f}")
        for k, m in d["steps"].items():
            print(f"  step {k}: {m['seconds']:.1f} s; {_stage_lines(m)}")

    goals = []
    if "files" in best:
        goals.append(goal_line("bulk import (files) rate vs Spark-native sorted write",
                               best["files"]["ratio_to_native"], RATIO_GOAL, "x"))
    for v in ("dataframe", "presplit", "files-256"):
        if v in best:
            print(f"(for information) {v}: {best[v]['ratio_to_native']:.2f}x native")
    load_end = os.getloadavg()
    print(f"\nload average at start {results['load_average_start']}, at end {load_end}; "
          f"driver peak RSS {peak_rss_mib():,.0f} MiB; Spark tree peak RSS "
          f"{max(b['spark_peak_rss_mib'] for b in best.values()):,.0f} MiB; "
          f"total {time.perf_counter() - started:.0f} s")
    results.update({"best": best, "runs": runs, "paired_ratios": paired, "breakdown": bd,
                    "goals": goals, "load_average_end": load_end,
                    "driver_peak_rss_mib": peak_rss_mib(),
                    "total_seconds": time.perf_counter() - started})
    if not args.no_save:
        save_results("bulk_import", results, quick=args.quick)


if __name__ == "__main__":
    main()
