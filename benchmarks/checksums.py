"""Checksums: what checking costs ingest, queries and compaction, with and without, same run.

Run: ``python benchmarks/checksums.py [--rows N] [--rounds N] [--quick]`` (default 2M rows;
``--quick``: 200k rows, fewer rounds).

Every object Sediment writes carries a checksum and every read checks it (issue 38;
docs/guarantees.md). Two module-level switches of ``sediment.storage.checksums``, which exist
for this benchmark only (no property, option or environment variable reaches them), give the
baselines in the same process:

* ``VERIFY_READS`` off: no read-side check at all (data pages' CRCs, footers, sizes and
  whole-file CRCs against the sums in the state, samples' CRCs, key filters' header and block
  CRCs, snapshot objects' SHA-256, metadata seals);
* ``WRITE_SUMS`` off: data files written without page CRCs and without the sums taken as the
  bytes stream out (whole-file, footer and sample CRC-32), so commits record none.

Three arms: **checked** (the defaults), **reads unchecked** (``VERIFY_READS`` off: the cost of
the read checks is checked / this), **unchecked** (both off: data files written and read as
before checksums; the write side's cost is reads unchecked / this). Key-filter CRCs (4 bytes
per row group) and metadata seals (a CRC of each JSON object) are always written: a few bytes
per row group or object. Every measurement alternates the arms round by round (A/B/C, A/B/C,
...) in one process, so drift of the shared machine's load falls on every arm alike, and
reports the median of each; ratios are checked / unchecked time (above 1: what checking
costs), by wall and by CPU time (this process, all threads).

1. **ingest**: ``table.ingest`` of ``--rows`` rows of the benchmark workload (generated
   before, untimed) into a new table (one leaf), and of 50,000 rows (a small batch: fixed
   costs, commit included), each into a new store.
2. **query**, on one table of ``--rows`` rows in one leaf of 4 files (4 ingests, written
   checked), warm (footers, filters, state and page cache; a warm-up pass first), arms in
   alternating blocks: exact-key latency p50/p95 over random existing keys; a range of
   ~10,000 rows; a full ``table.scan()`` (rows/s). Also cold: open the store and the table
   and look up one key (the state's seals and the files' footers checked: what the first
   query of a process pays). Only reads here: checked and unchecked.
3. **compaction**: a template store holding one leaf of 8 sorted files (``--rows`` in all);
   each run compacts a fresh copy (copied untimed): one job merging the 8 files into one
   (``table.compact()``: inputs verified, merge, write, commit). And ``table.maintain()`` of
   a template of 4 leaves holding 6 files each (compaction.batch_size 6; a split threshold
   under a leaf's rows, so it splits too, reading samples): split, compact, GC until done.

Goal (this benchmark's own: the issue asks for the cost, not a bound): checking costs at most
10% of the CPU time of ingest (``--rows``), an exact-key lookup (mean), a full scan and the
compaction job. The checks are CPU work (CRCs and hashes over bytes already read), so the CPU
ratio measures them; wall time on a shared 2-core machine swings by 10-20% between runs of the
same arm (load average printed with the results), so the wall ratios in the table need several
runs, or a quiet machine, before they say more than the CPU ones.
"""

from __future__ import annotations

import contextlib
import gc
import shutil
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from _common import Timer, goal_line, parse_args, print_table, rate, save_results, temp_dir

import sediment as sd
from sediment.storage import checksums
from sediment.workload import benchmark_schema
from support import workload

ARMS: dict[str, tuple[bool, bool]] = {
    "checked": (True, True),
    "reads unchecked": (False, True),
    "unchecked": (False, False),
}
"""(VERIFY_READS, WRITE_SUMS) of each arm."""
READ_ARMS = ("checked", "unchecked")
"""The arms of read-only measurements (the write switch changes nothing there)."""
COST_GOAL = 1.10
SMALL_ROWS = 50_000
COMPACTION_FILES = 8
MAINTAIN_LEAVES = 4
MAINTAIN_FILES = 6
RANGE_ROWS = 10_000
BLOCK = 25
"""Exact-key and range queries per block: the arms alternate block by block."""
TABLE = "bench"


@contextlib.contextmanager
def arm(name: str) -> Iterator[None]:
    """The checksum switches of arm ``name``, restored to on afterwards."""
    checksums.VERIFY_READS, checksums.WRITE_SUMS = ARMS[name]
    try:
        yield
    finally:
        checksums.VERIFY_READS = checksums.WRITE_SUMS = True


def interleaved(arms: Sequence[str], rounds: int,
                run: Callable[[str, int], tuple[float, float]]) -> dict[str, dict[str, Any]]:
    """``run(arm, round) -> (wall, cpu seconds)`` for every arm in every round, the arms in
    turn within each round (the first arm rotating, so none always runs first); the median and
    every run of each."""
    times: dict[str, list[tuple[float, float]]] = {a: [] for a in arms}
    for r in range(rounds):
        order = list(arms[r % len(arms):]) + list(arms[:r % len(arms)])
        for a in order:
            gc.collect()
            with arm(a):
                times[a].append(run(a, r))
    return {a: {"seconds": statistics.median(w for w, _ in ts),
                "cpu_seconds": statistics.median(c for _, c in ts),
                "runs": [w for w, _ in ts]} for a, ts in times.items()}


def _store(root: Path) -> sd.Store:
    return sd.Store.open(str(root), create=True)


# ---- 1. ingest -------------------------------------------------------------------------------
def bench_ingest(data: pa.Table, tmp: Path, rounds: int) -> dict[str, dict[str, Any]]:
    def run(a: str, r: int) -> tuple[float, float]:
        root = tmp / f"ingest-{data.num_rows}-{r}-{a.replace(' ', '-')}"
        table = _store(root).create_table(TABLE, benchmark_schema())
        with Timer() as t:
            result = table.ingest(data)
        if result.rows != data.num_rows:
            raise AssertionError(f"ingested {result.rows} of {data.num_rows} rows")
        shutil.rmtree(root)
        return t.seconds, t.cpu

    return interleaved(list(ARMS), rounds, run)


# ---- 2. queries ------------------------------------------------------------------------------
def blocks(tables: dict[str, sd.Table], fn: Callable[[sd.Table, Any], int],
           args: Sequence[Any], warm: Sequence[Any], block: int
           ) -> dict[str, dict[str, float]]:
    """``fn(table, arg)`` timed for every argument in each arm, the arms alternating block by
    block (each with its switches set); the warm-up calls are not timed. Per arm: wall-time
    percentiles and the mean CPU time of a call (this process, all threads)."""
    for a in READ_ARMS:
        with arm(a):
            for w in warm:
                fn(tables[a], w)
    wall: dict[str, list[float]] = {a: [] for a in READ_ARMS}
    cpu: dict[str, float] = dict.fromkeys(READ_ARMS, 0.0)
    for i, start in enumerate(range(0, len(args), block)):
        order = READ_ARMS if i % 2 == 0 else READ_ARMS[::-1]
        for a in order:
            with arm(a):
                c0 = time.process_time()
                for x in args[start:start + block]:
                    t0 = time.perf_counter()
                    if fn(tables[a], x) == 0:
                        raise AssertionError(f"no rows for {x!r}")
                    wall[a].append(time.perf_counter() - t0)
                cpu[a] += time.process_time() - c0
    return {a: {**pct(wall[a]), "cpu_mean_ms": cpu[a] * 1000 / len(wall[a])}
            for a in READ_ARMS}


def pct(seconds: Sequence[float]) -> dict[str, float]:
    ms = np.asarray(seconds) * 1000.0
    return {"p50_ms": float(np.percentile(ms, 50)), "p95_ms": float(np.percentile(ms, 95)),
            "mean_ms": float(ms.mean()), "count": len(ms)}


def bench_query(data: pa.Table, tmp: Path, keys: int, ranges: int, rounds: int
                ) -> dict[str, Any]:
    rows = data.num_rows
    root = tmp / "query"
    table = _store(root).create_table(TABLE, benchmark_schema(),
                                      properties={"state.cache.refresh_seconds": 3600})
    for i in range(4):  # one leaf of 4 files, as between two compactions
        table.ingest(data.slice(i * rows // 4, (i + 1) * rows // 4 - i * rows // 4))
    # one handle per arm: each caches only what it read under its own switches
    tables = {a: sd.Store.open(str(root)).table(TABLE) for a in READ_ARMS}
    all_keys = data.column("key")
    exact = workload.pick(all_keys, keys, seed=1)
    warm = workload.pick(all_keys, max(20, keys // 10), seed=2)
    starts = workload.random_strings(np.random.default_rng(4), ranges + 3,
                                     workload.KEY_LENGTH).to_pylist()
    bounds = [workload.key_range_for(s, RANGE_ROWS, rows) for s in starts]

    def lookup(t: sd.Table, k: str) -> int:
        return t.query(keys=[k]).num_rows

    def span(t: sd.Table, b: tuple[str, str]) -> int:
        return t.query(ranges=[sd.Range(b[0], b[1])]).num_rows

    out: dict[str, Any] = {"rows": rows, "files": len(table.files())}
    out["exact_key"] = blocks(tables, lookup, exact, warm, BLOCK)
    out["range"] = blocks(tables, span, bounds[3:], bounds[:3], max(1, BLOCK // 5))

    def scan(a: str, r: int) -> tuple[float, float]:
        n = 0
        with Timer() as t:
            for b in tables[a].scan():
                n += b.num_rows
        if n != rows:
            raise AssertionError(f"scan returned {n} of {rows} rows")
        return t.seconds, t.cpu

    for a in READ_ARMS:  # warm
        with arm(a):
            scan(a, -1)
    out["scan"] = interleaved(READ_ARMS, rounds, scan)
    for v in out["scan"].values():
        v["rows_per_second"] = rate(rows, v["seconds"])
    cold_keys = workload.pick(all_keys, rounds * 4, seed=5)

    def cold(a: str, r: int) -> tuple[float, float]:
        with Timer() as t:
            fresh = sd.Store.open(str(root)).table(TABLE)
            n = lookup(fresh, cold_keys[r])
        if n == 0:
            raise AssertionError(f"no rows for {cold_keys[r]!r}")
        return t.seconds, t.cpu

    out["cold_lookup"] = interleaved(READ_ARMS, rounds * 4, cold)
    return out


# ---- 3. compaction and maintain ----------------------------------------------------------------
def compaction_template(root: Path, rows: int) -> int:
    """One leaf of COMPACTION_FILES sorted files: its rows."""
    table = _store(root).create_table(TABLE, benchmark_schema(), properties={
        "compaction.strategy": "basic", "compaction.batch_size": COMPACTION_FILES,
        "ingest.memory_limit_bytes": max(512 * 2**20, rows * 400 // COMPACTION_FILES),
        "gc.delay_seconds": 3600})
    for i in range(COMPACTION_FILES):
        table.ingest(workload.generate(rows // COMPACTION_FILES, seed=1000 + i))
    if len(table.files()) != COMPACTION_FILES:
        raise AssertionError(f"expected {COMPACTION_FILES} files, got {len(table.files())}")
    return sum(r.records for r in table.files())


def maintain_template(root: Path, rows: int) -> int:
    """MAINTAIN_LEAVES leaves of MAINTAIN_FILES files each, a leaf over the split threshold
    once compacted: its rows."""
    leaf_rows = rows // MAINTAIN_LEAVES
    table = _store(root).create_table(
        TABLE, benchmark_schema(), split_points=workload.split_points(MAINTAIN_LEAVES),
        properties={"compaction.strategy": "basic", "compaction.batch_size": MAINTAIN_FILES,
                    "partition.split.threshold": max(1000, leaf_rows * 3 // 4),
                    "gc.delay_seconds": 3600})
    for i in range(MAINTAIN_FILES):
        table.ingest(workload.generate(rows // MAINTAIN_FILES, seed=2000 + i))
    return sum(r.records for r in table.files())


def bench_job(template: Path, tmp: Path, rows: int, rounds: int, what: str
              ) -> dict[str, dict[str, Any]]:
    def run(a: str, r: int) -> tuple[float, float]:
        root = tmp / f"{what}-{r}-{a.replace(' ', '-')}"
        shutil.copytree(template, root)
        table = sd.Store.open(str(root)).table(TABLE)
        table.properties  # noqa: B018 - state loaded before timing
        with Timer() as t:
            result = table.compact() if what == "compact" else table.maintain()
        after = table.files()
        if sum(r.records for r in after) != rows or \
                (what == "compact" and (result.jobs_committed != 1 or len(after) != 1)):
            raise AssertionError(f"{what}: {result}, {len(after)} files")
        shutil.rmtree(root)
        return t.seconds, t.cpu

    return interleaved(list(ARMS), rounds, run)


# ---- report ----------------------------------------------------------------------------------
def cost(v: dict[str, dict[str, Any]], key: str = "seconds", base: str = "unchecked") -> float:
    return float(v["checked"][key] / v[base][key])


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], extra=lambda p: (
        p.add_argument("--rows", type=int, default=None, help="rows (default 2M; quick 200k)"),
        p.add_argument("--rounds", type=int, default=None,
                       help="rounds of each timed measurement (default 5; quick 3)"),
        p.add_argument("--keys", type=int, default=None, help="exact keys timed per arm"),
    ))
    rows = args.rows or (200_000 if args.quick else 2_000_000)
    rounds = args.rounds or (3 if args.quick else 5)
    keys = args.keys or (300 if args.quick else 2000)
    ranges = 20 if args.quick else 100
    results: dict[str, Any] = {"rows": rows, "rounds": rounds, "keys": keys,
                               "ranges": ranges, "small_rows": SMALL_ROWS}
    with Timer() as t_gen:
        data = workload.generate(rows)
        small = workload.generate(SMALL_ROWS, seed=9)
    print(f"{rows:,} rows ({data.nbytes / 2**20:,.0f} MiB) generated in {t_gen.seconds:.2f} s; "
          f"{rounds} rounds per measurement, arms {', '.join(ARMS)}")
    with temp_dir() as tmp:
        results["ingest"] = bench_ingest(data, tmp, rounds)
        results["ingest_small"] = bench_ingest(small, tmp, rounds * 3)
        print("ingest done")
        results["query"] = bench_query(data, tmp, keys, ranges, rounds)
        print("queries done")
        del data
        template = tmp / "compaction-template"
        crows = compaction_template(template, rows)
        results["compact"] = bench_job(template, tmp, crows, rounds, "compact")
        shutil.rmtree(template)
        template = tmp / "maintain-template"
        mrows = maintain_template(template, rows)
        results["maintain"] = bench_job(template, tmp, mrows, rounds, "maintain")
    q = results["query"]
    lines: list[list[Any]] = []

    def timed_line(label: str, v: dict[str, dict[str, Any]], unit: float = 1.0) -> None:
        writes = "reads unchecked" in v
        lines.append([label, v["checked"]["seconds"] * unit,
                      v["reads unchecked"]["seconds"] * unit if writes else "-",
                      v["unchecked"]["seconds"] * unit, cost(v),
                      cost(v, base="reads unchecked") if writes else "-",
                      v["reads unchecked"]["seconds"] / v["unchecked"]["seconds"]
                      if writes else "-", cost(v, "cpu_seconds")])

    def latency_line(label: str, v: dict[str, dict[str, Any]], key: str) -> None:
        lines.append([label, v["checked"][key], "-", v["unchecked"][key],
                      v["checked"][key] / v["unchecked"][key], "-", "-",
                      v["checked"]["cpu_mean_ms"] / v["unchecked"]["cpu_mean_ms"]])

    timed_line(f"ingest {rows:,} rows, s", results["ingest"])
    timed_line(f"ingest {SMALL_ROWS:,} rows, ms", results["ingest_small"], 1000)
    latency_line("exact key p50, ms (warm)", q["exact_key"], "p50_ms")
    latency_line("exact key p95, ms (warm)", q["exact_key"], "p95_ms")
    latency_line(f"range ~{RANGE_ROWS:,} rows p50, ms", q["range"], "p50_ms")
    timed_line(f"full scan {rows:,} rows, s", q["scan"])
    timed_line("open + first lookup (cold), ms", q["cold_lookup"], 1000)
    timed_line(f"compact: 1 job, {COMPACTION_FILES} files, s", results["compact"])
    timed_line(f"maintain: {MAINTAIN_LEAVES} leaves x {MAINTAIN_FILES} files, s",
               results["maintain"])
    print_table(["measure (median)", "checked", "reads unchecked", "unchecked",
                 "checked / unchecked", "read checks x", "write sums x", "CPU checked / unchecked"],
                lines, title=f"Checksums on and off, {rows:,} rows, {rounds} rounds per measure "
                             "(x: time ratio; above 1 is what checking costs)")
    scan = q["scan"]
    print(f"full scan: {scan['checked']['rows_per_second'] / 1e6:.2f} M rows/s checked, "
          f"{scan['unchecked']['rows_per_second'] / 1e6:.2f} M rows/s unchecked")
    results["table"] = lines
    ex = q["exact_key"]
    results["goals"] = [
        goal_line(f"ingest {rows:,} rows: CPU checked / unchecked",
                  cost(results["ingest"], "cpu_seconds"), COST_GOAL, "x",
                  higher_is_better=False),
        goal_line("exact-key lookup: CPU checked / unchecked",
                  ex["checked"]["cpu_mean_ms"] / ex["unchecked"]["cpu_mean_ms"], COST_GOAL, "x",
                  higher_is_better=False),
        goal_line("full scan: CPU checked / unchecked", cost(scan, "cpu_seconds"), COST_GOAL,
                  "x", higher_is_better=False),
        goal_line("compaction job: CPU checked / unchecked",
                  cost(results["compact"], "cpu_seconds"), COST_GOAL, "x",
                  higher_is_better=False),
    ]
    if not args.no_save:
        save_results("checksums", results, quick=args.quick)


if __name__ == "__main__":
    main()
