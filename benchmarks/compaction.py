"""Compaction benchmark: ``table.compact()`` of N sorted files into one, against raw DataFusion.

Run: ``python benchmarks/compaction.py [--files N] [--rows-per-file N] [--repeats N] [--big]
[--profile] [--quick]`` (default 10 files x 1M rows; ``--quick``: 10 x 200k).

Setup (untimed): a fresh local store, a table of the benchmark schema (see ``support.workload``)
with ``compaction.strategy=basic`` and ``compaction.batch_size`` = the number of files, and N
ingests of ``--rows-per-file`` rows each (one leaf, so each ingest writes one sorted file). That
store is the template; every timed run works on a fresh copy of it, in a fresh process (so its
memory is its own), and the runs of the variants alternate (``--repeats`` rounds) so every
variant sees the same machine load. The fastest run of each is reported, with its CPU seconds
(all threads): on a machine shared with other jobs, wall time depends on the share of the cores
a process gets, CPU time much less.

1. **sediment**: ``table.compact()`` on the copy: one job merges every file into one (push-down,
   job assignment, the merge, the sample, the commit). Rows/s = input rows / wall seconds of
   ``compact()``; the job's own seconds (from its status event) are shown too.
2. **baseline**: DataFusion's sort-preserving merge of the same Parquet files:
   ``read_parquet(file_sort_order=(key, timestamp))`` per file, ``union``, ``sort``, with
   ``target_partitions`` >= the number of files (the plan is a SortPreservingMergeExec only),
   written with DataFusion's ``write_parquet`` (zstd level 1, its default 1M-row row groups).
3. For information (same rounds): the same DataFusion merge written with 4096-row row groups
   (sediment's default ``parquet.row_group_rows``, chosen for exact-key reads), and the merge
   drained without writing (the merge alone).

Then a **stage breakdown** of the sediment job (``run_compaction_job``'s pipeline rebuilt from
its own functions, timing the time the Python thread spends in each stage: waiting for the next
merged batch from DataFusion (incl. ``to_pyarrow`` and the cast), the region filter, and
``SortedFileWriter.write`` / ``close``), the write side alone on the merged rows held in memory,
and with ``--profile`` a cProfile of one job.

Finally the **12-input memory test**: 12 files of ``--mem-rows`` rows (default 500k and 2M per
file, with ``--big`` also 5M; ``--quick``: 100k and 400k), compacted by one job in a fresh
process that does nothing else, twice (once with ``--quick``) on fresh copies; the worst peak
RSS (``VmHWM``: the whole process, interpreter, pyarrow and DataFusion included; not
``ru_maxrss``, which Linux carries over from the parent across fork + exec) is compared with
1 GiB, for each size, to show whether it grows with the data. For information, the same for a
16-input job (``compaction.max_merge_inputs``: the most inputs one merge round takes) at the
smallest size.

Goals: sediment >= 0.9x the raw DataFusion merge and >= 3M rows/s (Sleeper's DataFusion
compactor: about 3.5-4M rows/s per 4-vCPU task; this machine has 2 cores); peak RSS <= 1 GiB for
a 12-input job at every size.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import re
import shutil
import time
from pathlib import Path
from typing import Any

from _common import (
    RssSampler,
    Timer,
    emit_child_result,
    goal_line,
    parse_args,
    peak_rss_mib,
    print_table,
    rate,
    run_child_script,
    save_results,
    temp_dir,
)

import sediment as sd
from sediment.workload import benchmark_schema
from support import workload

RATIO_GOAL = 0.9
RATE_GOAL = 3_000_000.0
MEMORY_GOAL_MIB = 1024.0
MEM_INPUTS = 12
INFO_INPUTS = 16  # compaction.max_merge_inputs: the most inputs one merge round takes
TABLE = "bench"
VARIANTS = ("sediment", "datafusion", "datafusion_rg4096", "datafusion_merge_only")
VARIANT_NAMES = {
    "sediment": "sediment table.compact()",
    "datafusion": "DataFusion merge + write_parquet zstd(1)",
    "datafusion_rg4096": "DataFusion merge + write_parquet zstd(1), 4096-row groups",
    "datafusion_merge_only": "DataFusion merge, drained (no write)",
}


def process_peak_mib() -> float:
    """Peak RSS of this process in MiB: ``VmHWM`` from /proc/self/status, which starts afresh
    at ``exec``. (``ru_maxrss`` does not: Linux carries it over ``fork`` + ``exec``, so a child
    started by a parent that once used 700 MiB reports at least 700 MiB.)"""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except (OSError, ValueError, IndexError):
        pass
    return peak_rss_mib()


# ---- setup -----------------------------------------------------------------------------------
def build_template(root: Path, files: int, rows_per_file: int) -> dict[str, Any]:
    """A store with one table holding ``files`` sorted files of ``rows_per_file`` rows."""
    store = sd.Store.open(str(root), create=True)
    table = store.create_table(TABLE, benchmark_schema(), properties={
        "compaction.strategy": "basic",
        "compaction.batch_size": files,
        # one ingest = one sorted file: the whole batch fits the ingest buffer
        "ingest.memory_limit_bytes": max(512 * 2**20, rows_per_file * 400),
        "gc.delay_seconds": 3600,
    })
    with Timer() as t:
        for i in range(files):
            data = workload.generate(rows_per_file, seed=1000 + i)
            table.ingest(data)
            del data
    refs = table.files()
    if len(refs) != files or sum(r.records for r in refs) != files * rows_per_file:
        raise AssertionError(f"expected {files} files of {rows_per_file} rows, got "
                             f"{[(r.filename, r.records) for r in refs]}")
    paths = [table._handle.objects.path(r.filename) for r in refs]
    return {"seconds": t.seconds, "files": files, "rows_per_file": rows_per_file,
            "bytes": sum(os.path.getsize(p) for p in paths)}


def input_paths(root: Path) -> list[str]:
    table = sd.Store.open(str(root)).table(TABLE)
    return [table._handle.objects.path(r.filename) for r in table.files()]


def _dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*.parquet") if p.is_file())


# ---- the measured runs (each in a fresh process) -------------------------------------------
def run_sediment(root: Path, profile: bool = False) -> dict[str, Any]:
    table = sd.Store.open(str(root)).table(TABLE)
    refs = table.files()
    rows = sum(r.records for r in refs)
    table.properties  # noqa: B018 - state loaded before timing
    prof = cProfile.Profile() if profile else None
    with RssSampler() as mem, Timer() as t:
        if prof is not None:
            prof.enable()
        result = table.compact()
        if prof is not None:
            prof.disable()
    after = table.files()
    if result.jobs_committed != 1 or len(after) != 1 or after[0].records != rows:
        raise AssertionError(f"compaction did not produce one file of {rows} rows: {result}, "
                             f"{after}")
    job = [e for e in table._handle.status.jobs("compaction") if e.get("seconds")]
    out = {"seconds": t.seconds, "cpu_seconds": t.cpu, "rows": rows,
           "rows_per_second": rate(rows, t.seconds),
           "job_seconds": job[-1]["seconds"] if job else None,
           "bytes_out": os.path.getsize(table._handle.objects.path(after[0].filename)),
           "inputs": len(refs), "peak_rss_delta_mib": mem.delta_mib,
           "rss_before_mib": mem.start_mib}
    if prof is not None:
        out["profile"] = _profile_text(prof)
    return out


def _df_merge(paths: list[str], batch_rows: int = 8192) -> Any:
    import datafusion
    from datafusion import SessionConfig, SessionContext, col

    config = SessionConfig().with_target_partitions(max(2, len(paths))).with_batch_size(
        batch_rows)
    ctx = SessionContext(config)
    order = [[col("key").sort(), col("timestamp").sort()]]
    arrow = workload.arrow_schema()
    frames = [ctx.read_parquet(p, schema=arrow, file_sort_order=order) for p in paths]
    df = frames[0]
    for f in frames[1:]:
        df = df.union(f)
    return df.sort(datafusion.col("key").sort(), datafusion.col("timestamp").sort())


def run_datafusion(paths: list[str], out_dir: Path, variant: str) -> dict[str, Any]:
    import datafusion

    rows = sum(datafusion_rows(p) for p in paths)
    out_path = out_dir / "merged.parquet"
    with RssSampler() as mem, Timer() as t:
        df = _df_merge(paths)
        if variant == "datafusion":
            df.write_parquet(str(out_path), compression="zstd", compression_level=1)
        elif variant == "datafusion_rg4096":
            df.write_parquet(str(out_path), datafusion.ParquetWriterOptions(
                compression="zstd(1)", max_row_group_size=4096))
        else:
            n = 0
            for b in df.execute_stream():
                n += b.to_pyarrow().num_rows
            if n != rows:
                raise AssertionError(f"merge yielded {n} rows, expected {rows}")
    out: dict[str, Any] = {"seconds": t.seconds, "cpu_seconds": t.cpu, "rows": rows,
                           "rows_per_second": rate(rows, t.seconds), "inputs": len(paths),
                           "peak_rss_delta_mib": mem.delta_mib, "rss_before_mib": mem.start_mib}
    if variant != "datafusion_merge_only":
        out["bytes_out"] = _dir_bytes(out_dir)
        if variant == "datafusion":
            out["plan"] = _plan_text(paths)
    return out


def datafusion_rows(path: str) -> int:
    import pyarrow.parquet as pq

    return pq.ParquetFile(path).metadata.num_rows


def _plan_text(paths: list[str]) -> str:
    """The physical plan of the baseline merge (SortPreservingMergeExec over the files), with
    the file lists shortened."""
    text = str(_df_merge(paths).execution_plan().display_indent())
    lines = [re.sub(r"file_groups=\{(\d+) groups?:.*?\]\}, projection",
                    r"file_groups={\1 groups: ...}, projection", ln)
             for ln in text.splitlines()]
    return "\n".join(lines)


def _profile_text(prof: cProfile.Profile) -> str:
    s = io.StringIO()
    pstats.Stats(prof, stream=s).sort_stats("cumulative").print_stats(30)
    pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(20)
    return s.getvalue()


def run_stages(root: Path) -> dict[str, Any]:
    """The sediment job's pipeline rebuilt from its own functions, timing each stage.

    Exclusive seconds of the Python thread in: ``next()`` on the merged stream (DataFusion's
    merge running ahead in its own threads + ``to_pyarrow`` + the cast to the table's schema),
    the region filter, ``SortedFileWriter.write`` (sample + buffering + Parquet encoding of
    full row groups) and ``close`` (last row group, footer, sample file). The file written is a
    throwaway (the table is not changed)."""
    from sediment.compaction.job import _in_region, _merged_batches
    from sediment.files.writer import SortedFileWriter, new_data_filename

    table = sd.Store.open(str(root)).table(TABLE)
    props = table.properties
    schema = table.schema
    state = table.state()
    refs = table.files()
    leaf = refs[0].partition_id
    region = state.partitions[leaf].region
    paths = [table._handle.objects.path(r.filename) for r in refs]
    rows = sum(r.records for r in refs)
    stages = {"merge_next": 0.0, "region_filter": 0.0, "writer_write": 0.0,
              "writer_close": 0.0}
    batches = 0
    with Timer() as total:
        merged = _merged_batches(paths, schema, int(props["compaction.batch_rows"]),
                                 int(props["compaction.memory_limit_bytes"]))
        writer = SortedFileWriter(table._handle.objects, new_data_filename(leaf), schema, props)
        while True:
            t0 = time.perf_counter()
            b = next(merged, None)
            t1 = time.perf_counter()
            stages["merge_next"] += t1 - t0
            if b is None:
                break
            batches += 1
            filtered = list(_in_region(iter([b]), schema.row_key_names, region, [0]))
            t2 = time.perf_counter()
            stages["region_filter"] += t2 - t1
            for f in filtered:
                writer.write(f)
            stages["writer_write"] += time.perf_counter() - t2
        t3 = time.perf_counter()
        written = writer.close()
        stages["writer_close"] = time.perf_counter() - t3
    if written.rows != rows:
        raise AssertionError(f"stage run wrote {written.rows} rows, expected {rows}")
    table._handle.objects.delete_many([written.filename])
    return {"seconds": total.seconds, "cpu_seconds": total.cpu, "rows": rows,
            "batches": batches, "stages": stages,
            "rows_per_second": rate(rows, total.seconds)}


def run_writer_only(root: Path) -> dict[str, Any]:
    """The merged rows held in memory first, then only ``SortedFileWriter`` timed (one thread,
    no merge running alongside), and pyarrow ``write_table`` with the same options."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from sediment.compaction.job import _merged_batches
    from sediment.files.sample import KeySampler
    from sediment.files.writer import SortedFileWriter, new_data_filename, writer_options

    table = sd.Store.open(str(root)).table(TABLE)
    props = table.properties
    schema = table.schema
    refs = table.files()
    paths = [table._handle.objects.path(r.filename) for r in refs]
    batches = list(_merged_batches(paths, schema, int(props["compaction.batch_rows"]),
                                   int(props["compaction.memory_limit_bytes"])))
    data = pa.Table.from_batches(batches)
    rows = data.num_rows
    out: dict[str, Any] = {"rows": rows}
    with Timer() as t:
        w = SortedFileWriter(table._handle.objects, new_data_filename(refs[0].partition_id), schema,
                             props)
        for b in batches:
            w.write(b)
        written = w.close()
    table._handle.objects.delete_many([written.filename])
    out["sorted_file_writer_seconds"] = t.seconds
    with Timer() as t:
        sampler = KeySampler(schema.row_key_names, int(props["sample.size"]))
        for b in batches:
            sampler.add(pa.Table.from_batches([b]))
    out["sampler_seconds"] = t.seconds
    tmp = Path(table._handle.objects.path("bench-writer-only.parquet"))
    opts = writer_options(schema, props)
    for rg in (int(props["parquet.row_group_rows"]), 1024 * 1024):
        with Timer() as t:
            pq.write_table(data, tmp, row_group_size=rg, **opts)
        out[f"pq_write_table_rg{rg}_seconds"] = t.seconds
    tmp.unlink()
    return out


def run_memory_job(root: Path) -> dict[str, Any]:
    """One 12-input job in a process that does nothing else: its VmHWM is the job's."""
    table = sd.Store.open(str(root)).table(TABLE)
    rows = sum(r.records for r in table.files())
    with RssSampler(interval=0.01) as mem, Timer() as t:
        result = table.compact()
    if result.jobs_committed != 1 or len(table.files()) != 1:
        raise AssertionError(f"memory job: {result}")
    return {"rows": rows, "seconds": t.seconds, "rows_per_second": rate(rows, t.seconds),
            "rss_table_opened_mib": mem.start_mib, "sampled_peak_mib": mem.peak_mib,
            "sampled_delta_mib": mem.delta_mib}


def child(args: argparse.Namespace) -> dict[str, Any]:
    import datafusion  # noqa: F401  (loaded before measuring: library code is not data memory)

    root = Path(args.root)
    if args.child == "sediment":
        return run_sediment(root, args.profile)
    if args.child == "stages":
        return run_stages(root)
    if args.child == "writer_only":
        return run_writer_only(root)
    if args.child == "memory":
        return run_memory_job(root)
    with temp_dir() as out_dir:
        return run_datafusion(input_paths(root), out_dir, args.child)


def run_child(kind: str, root: Path, *, profile: bool = False) -> dict[str, Any]:
    args = ["--child", kind, "--root", str(root), "--no-save"]
    return run_child_script(__file__, args + (["--profile"] if profile else []),
                            f"{kind} run")


def fresh_copy(template: Path, dest: Path) -> Path:
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(template, dest)
    return dest


# ---- main ------------------------------------------------------------------------------------
def merge_benchmark(tmp: Path, files: int, rows_per_file: int, repeats: int,
                    profile: bool) -> dict[str, Any]:
    template = tmp / "template"
    setup = build_template(template, files, rows_per_file)
    rows = files * rows_per_file
    print(f"setup: {files} files x {rows_per_file:,} rows ingested in {setup['seconds']:.1f} s "
          f"({setup['bytes'] / 2**20:,.1f} MiB of Parquet)")
    runs: dict[str, list[dict[str, Any]]] = {v: [] for v in VARIANTS}
    for rep in range(repeats):
        for v in VARIANTS:
            work = fresh_copy(template, tmp / "work")
            r = run_child(v, work)
            runs[v].append(r)
            print(f"[{rep + 1}] {VARIANT_NAMES[v]}: {r['seconds']:.2f} s "
                  f"({r['rows_per_second'] / 1e6:.2f} M rows/s, cpu {r['cpu_seconds']:.2f} s, "
                  f"RSS +{r['peak_rss_delta_mib']:,.0f} MiB)")
    best: dict[str, dict[str, Any]] = {}
    for v, rs in runs.items():
        b = dict(min(rs, key=lambda r: r["seconds"]))
        b["name"] = VARIANT_NAMES[v]
        b["all_seconds"] = [r["seconds"] for r in rs]
        b["peak_rss_delta_mib"] = max(r["peak_rss_delta_mib"] for r in rs)
        best[v] = b
    base = best["datafusion"]
    table_rows = []
    for b in best.values():
        b["ratio_to_baseline"] = base["seconds"] / b["seconds"]
        b["cpu_ratio_to_baseline"] = base["cpu_seconds"] / b["cpu_seconds"]
        table_rows.append([b["name"], b["seconds"], b["rows_per_second"] / 1e6,
                           b["ratio_to_baseline"], b["cpu_seconds"],
                           b["cpu_ratio_to_baseline"], b["cpu_seconds"] / b["seconds"],
                           b.get("bytes_out", 0) / 2**20, b["peak_rss_delta_mib"],
                           " / ".join(f"{s:.2f}" for s in b["all_seconds"])])
    print_table(["run (best of repeats)", "seconds", "Mrows/s", "x baseline", "CPU s",
                 "x baseline CPU", "cores used",
                 "MiB out", "RSS +MiB", "all runs s"], table_rows,
                title=f"Compaction of {files} files x {rows_per_file:,} rows = {rows:,} rows")
    print("(CPU s = process CPU seconds, all threads; x baseline CPU = baseline CPU s / CPU s; "
          "cores used = CPU s / wall s; RSS +MiB = sampled peak above the process RSS when the "
          "run started)")
    sed = best["sediment"]
    if sed.get("job_seconds"):
        print(f"sediment job alone (status event): {sed['job_seconds']:.2f} s; compact() "
              f"overhead (push-down, assign, commit): {sed['seconds'] - sed['job_seconds']:.2f} s")
    print("\nbaseline plan:\n" + base.get("plan", "?"))

    # where the time goes: stage timings (and optionally a profile), on fresh copies
    stage = run_child("stages", fresh_copy(template, tmp / "work"))
    s = stage["stages"]
    print_table(["stage (Python thread, exclusive)", "seconds", "share"],
                [[k, v, v / stage["seconds"]] for k, v in s.items()]
                + [["total", stage["seconds"], 1.0]],
                title=f"Sediment job pipeline ({stage['batches']} merged batches, "
                      f"{stage['rows_per_second'] / 1e6:.2f} M rows/s, "
                      f"cores used {stage['cpu_seconds'] / stage['seconds']:.2f})")
    wo = run_child("writer_only", fresh_copy(template, tmp / "work"))
    print_table(["writer alone, data in memory", "seconds", "M rows/s"],
                [[k.removesuffix("_seconds"), v, rows / v / 1e6] for k, v in wo.items()
                 if k.endswith("_seconds")], title="Write side alone (one thread)")
    prof_text = None
    if profile:
        pr = run_child("sediment", fresh_copy(template, tmp / "work"), profile=True)
        prof_text = pr.get("profile")
        print("\ncProfile of table.compact():\n" + (prof_text or ""))
    shutil.rmtree(tmp / "work", ignore_errors=True)
    return {"files": files, "rows_per_file": rows_per_file, "rows": rows, "setup": setup,
            "repeats": repeats, "best": best, "all_runs": runs, "stages": stage,
            "writer_only": wo, "profile": prof_text}


def memory_benchmark(tmp: Path, sizes: list[int], repeats: int) -> list[dict[str, Any]]:
    """Peak RSS of one job per (inputs, rows per file), the worst of ``repeats`` runs (each on
    a fresh copy, in a fresh process); 16 inputs (``compaction.max_merge_inputs``, the most one
    merge round takes) at the smallest size, for information."""
    out = []
    cases = [(MEM_INPUTS, n) for n in sizes] + [(INFO_INPUTS, min(sizes))]
    for inputs, rows_per_file in cases:
        template = tmp / f"mem-{inputs}-{rows_per_file}"
        setup = build_template(template, inputs, rows_per_file)
        runs = [run_child("memory", fresh_copy(template, tmp / "work")) for _ in range(repeats)]
        worst = dict(max(runs, key=lambda r: r["process_peak_rss_mib"]))
        worst.update({"inputs": inputs, "rows_per_file": rows_per_file,
                      "input_bytes": setup["bytes"], "setup_seconds": setup["seconds"],
                      "all_peaks_mib": [r["process_peak_rss_mib"] for r in runs],
                      "all_seconds": [r["seconds"] for r in runs]})
        out.append(worst)
        print(f"memory test {inputs} x {rows_per_file:,}: job process peak RSS (VmHWM) "
              + " / ".join(f"{p:,.0f}" for p in worst["all_peaks_mib"])
              + f" MiB (table opened: {worst['rss_table_opened_mib']:,.0f} MiB); "
              f"{worst['seconds']:.1f} s, {worst['rows_per_second'] / 1e6:.2f} M rows/s")
        shutil.rmtree(template, ignore_errors=True)
        shutil.rmtree(tmp / "work", ignore_errors=True)
    print_table(["job", "rows", "input MiB", "seconds", "Mrows/s", "peak RSS MiB",
                 "all runs MiB"],
                [[f"{r['inputs']} x {r['rows_per_file']:,}", r["rows"],
                  r["input_bytes"] / 2**20, r["seconds"], r["rows_per_second"] / 1e6,
                  r["process_peak_rss_mib"],
                  " / ".join(f"{p:,.0f}" for p in r["all_peaks_mib"])] for r in out],
                title="Peak memory of one compaction job (VmHWM of a process doing nothing "
                      "else; worst run)")
    return out


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], extra=lambda p: (
        p.add_argument("--files", type=int, default=10, help="files merged by one job"),
        p.add_argument("--rows-per-file", type=int, default=None,
                       help="rows per input file (default 1M; quick 200k)"),
        p.add_argument("--repeats", type=int, default=None,
                       help="alternating rounds of every variant (default 3; quick 2)"),
        p.add_argument("--mem-rows", type=int, nargs="*", default=None,
                       help="rows per file of the 12-input memory tests (default 500k 2M; "
                            "quick 100k 400k)"),
        p.add_argument("--big", action="store_true", help="add a 12 x 5M memory test"),
        p.add_argument("--profile", action="store_true", help="cProfile one sediment job"),
        p.add_argument("--skip-memory", action="store_true", help="skip the memory test"),
        p.add_argument("--child", default=None, help=argparse.SUPPRESS),
        p.add_argument("--root", default=None, help=argparse.SUPPRESS),
    ))
    if args.child:
        out = child(args)
        out["process_peak_rss_mib"] = process_peak_mib()
        emit_child_result(out)
        return
    rows_per_file = args.rows_per_file or (200_000 if args.quick else 1_000_000)
    repeats = args.repeats or (2 if args.quick else 3)
    mem_rows = args.mem_rows if args.mem_rows is not None else (
        [100_000, 400_000] if args.quick else [500_000, 2_000_000])
    mem_repeats = 1 if args.quick else 2
    if args.big:
        mem_rows = [*mem_rows, 5_000_000]
    print(f"load average: {os.getloadavg()}")
    with temp_dir() as tmp:
        merge = merge_benchmark(tmp, args.files, rows_per_file, repeats, args.profile)
        memory = [] if args.skip_memory else memory_benchmark(tmp, mem_rows, mem_repeats)
    best = merge["best"]
    goals = [
        goal_line("sediment compaction vs raw DataFusion merge",
                  best["sediment"]["ratio_to_baseline"], RATIO_GOAL, "x"),
        goal_line("sediment compaction rows/s", best["sediment"]["rows_per_second"],
                  RATE_GOAL, "rows/s"),
    ]
    for r in memory:
        if r["inputs"] != MEM_INPUTS:
            continue
        goals.append(goal_line(f"peak RSS of a 12 x {r['rows_per_file']:,}-row job",
                               r["process_peak_rss_mib"], MEMORY_GOAL_MIB, "MiB",
                               higher_is_better=False))
    print(f"load average: {os.getloadavg()}")
    if not args.no_save:
        save_results("compaction", {"merge": merge, "memory": memory, "goals": goals},
                     quick=args.quick)


if __name__ == "__main__":
    main()
