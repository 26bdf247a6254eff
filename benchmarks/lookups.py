"""Lookups side by side: Sediment against DuckDB (ART index) and Lance (BTREE index), one run.

Run: ``python benchmarks/lookups.py [--rows N] [--quick] [--mixed-seconds S]`` (default 10M
rows and a 600 s mixed run; ``--quick``: 1M rows, 20 s; ``--mixed-seconds 0`` skips the mixed
run). Peers run in worker processes (``_lookup_peers.py``): DuckDB with this interpreter, Lance
with ``--peers-python`` (default ``/work/venvs/peers/bin/python``, which has pylance; else
this interpreter). A peer that cannot start is skipped, the reason printed and saved.

N rows of the benchmark workload (``support.workload``) go into every engine on local disk
(the peers get them sorted by key, as their docs suggest; Sediment sorts what it ingests): two
Sediment tables in one store, ``bench`` (default properties, so the block
cache of ``query.block_cache_bytes``) and ``bench_cold`` (``query.block_cache_bytes`` = 0:
its reads bypass the block cache); a DuckDB table with an ART index; a Lance dataset with a
BTREE index (each built as its docs recommend: see ``_lookup_peers.py``). Every read returns an
Arrow table of every column; every engine must return the same row count for every key, range
and thread run (checked). Latencies are timed in alternating blocks (the engines' order
rotated), so all see the same machine load.

1. **Warm exact key**: a hot set of ``--hot`` existing keys, each looked up ``--warm-passes``
   times untimed, then ``--passes`` timed passes: p50/p99. Also DuckDB fetching Python tuples
   (``fetchall``, its fastest output for one row) beside its Arrow output.
2. **Cold exact key**: keys never looked up before. Sediment: ``bench_cold`` (block cache
   off), after an untimed lookup of the first key of every row group of its files (so its
   footers and key filters are cached; the OS cache is warm: the files were just written).
   Peers get the same warm-up and keys (DuckDB holds its table in memory; Lance reads its
   pages anew). Also Sediment's ``bench`` (cache on) for new keys: a miss and an insert.
3. **Threads**: ``--rate-lookups`` lookups by 1 thread and by 8 (``ThreadPoolExecutor``, a
   barrier starts them together; DuckDB a cursor per thread): warm (keys from the hot set) and
   cold (new keys; Sediment on ``bench_cold``). Lookups/s, best of ``--rounds``; 8 / 1.
4. **0.1% range**: ``--ranges`` ranges of rows/1000 rows (``workload.key_range_for``), timed
   when first asked (the goal's figure) and again (repeated; the block cache may hold them):
   p50. Sediment's ``bench_cold`` too, for context.
5. **RSS through a mixed run** (Sediment only; ``--mixed-seconds``): ``--mixed-threads``
   threads each doing lookups of random keys (from a pool of ``--mixed-pool`` existing keys
   spread over the table) and, one in 20, a 0.1% range at a random start, on ``bench``; the
   process RSS sampled every second (psutil when installed, else ``VmRSS``). Reported: the
   RSS after ingest (the generated data freed: the baseline), the max during the run, the
   growth, and the block cache's bound (its ``capacity`` when the counter API exists, else the
   property).

The block cache's counters (``sediment.query.blocks``: ``stats()`` or ``BLOCKS.stats()``) are
read around each stage when that API exists, so the script runs before and after it does.

Goals (issue 41, 10M rows): warm exact-key p50 <= 0.15 ms and >= 2x faster than the fastest
peer (DuckDB Arrow or tuples, Lance), p99 <= 1 ms; cold p50 <= 0.4 ms; 8 threads warm >=
6,000 lookups/s and >= 1.0x one thread; 8 threads cold >= 1.8x one thread; a 0.1% range >= 2x
faster than both peers; max RSS in the mixed run <= the cache bound + 256 MiB.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import importlib
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from functools import partial
from operator import methodcaller
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from _common import (
    BENCH_DIR,
    PeerError,
    PeerProcess,
    Timer,
    fmt,
    goal_line,
    parse_args,
    peak_rss_mib,
    print_table,
    save_results,
    temp_dir,
)
from _lookup_peers import Lookup, thread_rate, time_each

import sediment as sd
from sediment.workload import benchmark_schema
from support import workload

PEERS_SCRIPT = BENCH_DIR / "_lookup_peers.py"
PEER_PACKAGES = {"duckdb": "duckdb", "lance": "lance"}
WARM_P50_GOAL_MS = 0.15
WARM_P99_GOAL_MS = 1.0
PEER_GOAL = 2.0
COLD_P50_GOAL_MS = 0.4
THREADS = 8
RATE_GOAL = 6000.0
WARM_SCALING_GOAL = 1.0
COLD_SCALING_GOAL = 1.8
RANGE_GOAL = 2.0
RSS_MARGIN_MIB = 256.0
RANGE_SHARE = 0.05
BLOCK = 100

Timed = tuple[list[float], list[int]]
"""Latencies (s) and row counts of a block of reads."""




def start_peers(names: list[str], args: Any, root: Path, skipped: dict[str, str]
                ) -> dict[str, PeerProcess]:
    peers: dict[str, PeerProcess] = {}
    for name in names:
        python = sys.executable
        if name == "lance":
            default = Path("/work/venvs/peers/bin/python")
            python = args.peers_python or (str(default) if default.exists() else sys.executable)
        if not Path(python).exists():
            skipped[name] = f"no interpreter at {python}"
            continue
        probe = subprocess.run([python, "-c", f"import {PEER_PACKAGES[name]}"],
                               capture_output=True, text=True, check=False)
        if probe.returncode != 0:
            skipped[name] = (f"{python} cannot import {PEER_PACKAGES[name]}: "
                             f"{probe.stderr.strip().splitlines()[-1:]}")
            continue
        try:
            peers[name] = PeerProcess(PEERS_SCRIPT, name, python, root)
        except PeerError as e:
            skipped[name] = str(e)
    for name, why in skipped.items():
        print(f"peer {name} skipped: {why}")
    return peers


# ---- engines: one interface for Sediment (in process) and the peers (workers) ------------------
class Engine:
    """Reads timed by the loops of ``_lookup_peers`` (the same code for every engine)."""

    def exact(self, keys: Sequence[str], warm: int = 0) -> Timed:
        raise NotImplementedError

    def ranges(self, bounds: Sequence[tuple[str, str]], warm: int = 0) -> Timed:
        raise NotImplementedError

    def rate(self, keys: Sequence[str], threads: int) -> dict[str, Any]:
        raise NotImplementedError


class SedimentEngine(Engine):
    def __init__(self, table: sd.Table) -> None:
        self.table = table

    def lookup(self) -> Lookup:
        table = self.table
        return lambda k: table.query(keys=[k]).num_rows

    def exact(self, keys: Sequence[str], warm: int = 0) -> Timed:
        return time_each(self.lookup(), keys, warm)

    def ranges(self, bounds: Sequence[tuple[str, str]], warm: int = 0) -> Timed:
        table = self.table
        return time_each(lambda b: table.query(ranges=[sd.Range(b[0], b[1])]).num_rows,
                         bounds, warm)

    def rate(self, keys: Sequence[str], threads: int) -> dict[str, Any]:
        return thread_rate(self.lookup, keys, threads)


class PeerEngine(Engine):
    def __init__(self, peer: PeerProcess, output: str = "arrow") -> None:
        self.peer = peer
        self.output = output

    def exact(self, keys: Sequence[str], warm: int = 0) -> Timed:
        r = self.peer.call(op="exact", keys=list(keys), warm=warm, output=self.output)
        return r["seconds"], r["counts"]

    def ranges(self, bounds: Sequence[tuple[str, str]], warm: int = 0) -> Timed:
        r = self.peer.call(op="ranges", bounds=[list(b) for b in bounds], warm=warm)
        return r["seconds"], r["counts"]

    def rate(self, keys: Sequence[str], threads: int) -> dict[str, Any]:
        return self.peer.call(op="rate", keys=list(keys), threads=threads)


class Bench:
    """The engines of one run; a peer that fails is left out from then on (and said so)."""

    def __init__(self, engines: dict[str, Engine]) -> None:
        self.engines = engines
        self.failed: dict[str, str] = {}

    def run(self, name: str, fn: Callable[[Engine], Any]) -> Any:
        engine = self.engines.get(name)
        if engine is None:
            return None
        try:
            return fn(engine)
        except PeerError as e:
            print(f"{name} failed and is left out from here on: {e}")
            self.failed[name] = str(e)
            del self.engines[name]
            return None

    def alternate(self, names: Sequence[str], args: Sequence[Any],
                  read: Callable[..., Timed], block: int = BLOCK
                  ) -> dict[str, Timed]:
        """Each engine reads every argument once, in blocks of ``block`` arguments, the
        engines' order rotated block by block."""
        out: dict[str, Timed] = {n: ([], []) for n in names}
        for b, start in enumerate(range(0, len(args), block)):
            chunk = args[start:start + block]
            for name in rotate(list(names), b):
                got = self.run(name, partial(read, args=chunk))
                if got is not None:
                    out[name][0].extend(got[0])
                    out[name][1].extend(got[1])
        return {n: v for n, v in out.items() if n in self.engines and v[0]}


def rotate(items: list[Any], k: int) -> list[Any]:
    k %= max(1, len(items))
    return items[k:] + items[:k]


def check_same(what: str, args: Sequence[Any], timed: dict[str, Timed],
               nonzero: bool = False) -> None:
    """Every engine returned the same row count for every argument (and, for existing keys,
    at least one row)."""
    names = list(timed)
    if not names:
        return
    ref = timed[names[0]][1]
    for name in names:
        counts = timed[name][1]
        if len(counts) != len(ref):
            raise AssertionError(f"{what}: {name} answered {len(counts)} reads, "
                                 f"{names[0]} {len(ref)}")
        for i, (a, b) in enumerate(zip(counts, ref, strict=True)):
            if a != b:
                raise AssertionError(f"{what}: {name} returns {a} rows for "
                                     f"{args[i % len(args)]!r}, {names[0]} {b}")
        if nonzero and 0 in counts:
            raise AssertionError(f"{what}: {name} finds no row for an existing key")


def summary(seconds: Sequence[float]) -> dict[str, float]:
    ms = np.asarray(seconds) * 1000.0
    return {"p50_ms": float(np.percentile(ms, 50)), "p90_ms": float(np.percentile(ms, 90)),
            "p99_ms": float(np.percentile(ms, 99)), "max_ms": float(ms.max()),
            "mean_ms": float(ms.mean()), "count": len(ms)}


# ---- the block cache's counters and bound (used only when the API exists) ----------------------
def cache_stats() -> dict[str, int] | None:
    """The process block cache's counters, or None before ``sediment.query.blocks`` exists."""
    try:
        blocks = importlib.import_module("sediment.query.blocks")
    except ImportError:
        return None
    fn = getattr(blocks, "stats", None)
    if callable(fn):
        return dict(fn())
    cache = getattr(blocks, "BLOCKS", None)
    fn = getattr(cache, "stats", None)
    if not callable(fn):
        return None
    s = fn()
    return dict(s.as_dict()) if hasattr(s, "as_dict") else dict(vars(s))


def stats_delta(before: dict[str, int] | None) -> dict[str, int] | None:
    """Counters gained since ``before`` (hits, misses, ...), and the cache's size now."""
    after = cache_stats()
    if after is None or before is None:
        return after
    return {k: v - before.get(k, 0) if k in ("hits", "misses", "inserts", "evictions") else v
            for k, v in after.items()}


def cache_bound(table: sd.Table) -> tuple[int, str]:
    """The block cache's bound in bytes, and where it comes from."""
    stats = cache_stats()
    if stats and "capacity" in stats:
        return int(stats["capacity"]), "sediment.query.blocks capacity"
    env = os.environ.get("SEDIMENT_BLOCK_CACHE_BYTES", "").strip()
    if env:
        return int(env), "SEDIMENT_BLOCK_CACHE_BYTES"
    return int(table.properties["query.block_cache_bytes"]), "query.block_cache_bytes"


def free_memory() -> None:
    """Give freed memory back to the system: the cyclic GC, Arrow's pool, and glibc's heap
    (``malloc_trim``: the generated rows live in numpy buffers from ``malloc``, which glibc
    keeps after they are freed; without it the RSS baseline holds ~450 MiB of them at 10M
    rows)."""
    gc.collect()
    pa.default_memory_pool().release_unused()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def rss_mib() -> float:
    """This process's resident set now (psutil when installed, else VmRSS)."""
    try:
        import psutil

        return float(psutil.Process().memory_info().rss) / 2**20
    except ImportError:
        pass
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no way to read this process's RSS")


# ---- setup ----------------------------------------------------------------------------------
def row_group_first_keys(table: sd.Table) -> list[str]:
    """The first key of every row group of the table's files (from their footers): a lookup
    of each caches every footer and every row group's key filter."""
    out: list[str] = []
    for ref in table.files():
        md = pq.ParquetFile(table._handle.objects.path(ref.filename)).metadata
        col = md.schema.to_arrow_schema().get_field_index("key")
        for g in range(md.num_row_groups):
            st = md.row_group(g).column(col).statistics
            if st is not None and st.has_min_max:
                v = st.min
                out.append(v.decode() if isinstance(v, bytes) else str(v))
    return out


def sort_rows_for_peers(data: pa.Table, work: Path, peers: dict[str, PeerProcess]) -> None:
    """``work/data.parquet``: the rows sorted by (key, timestamp), as the peers' docs suggest
    for lookups by key (Sediment ingests ``data`` as it is: it sorts). DuckDB's worker sorts
    when it runs (a third of pyarrow's time on 2 cores, and no sorted copy in this process)."""
    if "duckdb" in peers:
        pq.write_table(data, work / "unsorted.parquet")
        try:
            peers["duckdb"].call(op="sort", src=str(work / "unsorted.parquet"),
                                 dst=str(work / "data.parquet"))
            return
        except PeerError as e:
            print(f"sorting in DuckDB's worker failed, sorting here: {e}")
        finally:
            (work / "unsorted.parquet").unlink(missing_ok=True)
    pq.write_table(data.sort_by([("key", "ascending"), ("timestamp", "ascending")]),
                   work / "data.parquet")


def split_keys(keys: list[str], sizes: dict[str, int]) -> dict[str, list[str]]:
    """Disjoint slices of ``keys`` (distinct, random), named."""
    need = sum(sizes.values())
    if need > len(keys):
        raise ValueError(f"{need:,} distinct keys asked, {len(keys):,} picked")
    out: dict[str, list[str]] = {}
    at = 0
    for name, n in sizes.items():
        out[name] = keys[at:at + n]
        at += n
    return out


def random_ranges(rng: np.random.Generator, n: int, rows: int) -> list[tuple[str, str]]:
    starts = workload.random_strings(rng, n, workload.KEY_LENGTH).to_pylist()
    return [workload.key_range_for(s, rows / 1000, rows) for s in starts]


# ---- stages -----------------------------------------------------------------------------------
def warm_stage(bench: Bench, hot: list[str], warm_passes: int, passes: int) -> dict[str, Any]:
    names = [n for n in ("sediment", "duckdb", "duckdb rows", "lance") if n in bench.engines]
    for name in names:
        if name != "duckdb rows":  # the same DuckDB worker and table as "duckdb"
            bench.run(name, lambda e: e.exact(hot * warm_passes, warm=len(hot) * warm_passes))
    before = cache_stats()
    args = hot * passes
    timed = bench.alternate(names, args, lambda e, args: e.exact(args))
    check_same("warm exact keys", args, timed, nonzero=True)
    out: dict[str, Any] = {n: summary(t) for n, (t, _) in timed.items()}
    out["rows_per_key_mean"] = float(statistics.mean(next(iter(timed.values()))[1]))
    out["block_cache"] = stats_delta(before)
    return out


def cold_stage(bench: Bench, cold: list[str], cold_on: list[str], first_keys: list[str]
               ) -> dict[str, Any]:
    """New keys: Sediment on ``bench_cold`` (reported as ``sediment``), the peers as they
    are; then new keys on ``bench`` (cache on: a miss and an insert)."""
    names = [n for n in ("sediment cold", "duckdb", "lance") if n in bench.engines]
    for name in [*names, "sediment cache on"]:  # footers and key filters of every row group
        bench.run(name, lambda e: e.exact(first_keys, warm=len(first_keys)))
    before = cache_stats()
    timed = bench.alternate(names, cold, lambda e, args: e.exact(args))
    check_same("cold exact keys", cold, timed, nonzero=True)
    out: dict[str, Any] = {("sediment" if n == "sediment cold" else n): summary(t)
                           for n, (t, _) in timed.items()}
    out["block_cache"] = stats_delta(before)
    on = bench.run("sediment cache on", lambda e: e.exact(cold_on))
    if on is not None:
        out["sediment cache on, new keys"] = summary(on[0])
    return out


def rate_stage(bench: Bench, hot: list[str], fresh: list[list[str]], lookups: int, rounds: int,
               seed: int) -> dict[str, Any]:
    """Lookups/s by 1 and by THREADS threads, warm and cold, best of ``rounds``."""
    rng = np.random.default_rng(seed)
    warm_keys = [hot[i] for i in rng.integers(0, len(hot), size=lookups)]
    runs: dict[str, list[dict[str, Any]]] = {}
    cold_sets = iter(fresh)
    for r in range(rounds):
        for mode in ("warm", "cold"):
            for threads in (1, THREADS):
                keys = warm_keys if mode == "warm" else next(cold_sets)
                rows: dict[str, int] = {}
                for name in rotate(["sediment", "duckdb", "lance"], r):
                    eng = "sediment cold" if mode == "cold" and name == "sediment" else name
                    got = bench.run(eng, methodcaller("rate", keys, threads))
                    if got is None:
                        continue
                    runs.setdefault(f"{name} {mode} {threads}", []).append(got)
                    rows[name] = got["rows"]
                if len(set(rows.values())) > 1:
                    raise AssertionError(f"{mode} lookups by {threads} thread(s), round {r}: "
                                         f"the engines return different row totals {rows}")
    best = {k: max(v, key=lambda x: x["rate"]) for k, v in runs.items()}
    return {"lookups": lookups, "rounds": rounds, "best": best, "runs": runs}


def range_stage(bench: Bench, bounds: list[tuple[str, str]]) -> dict[str, Any]:
    names = [n for n in ("sediment", "duckdb", "lance", "sediment cold") if n in bench.engines]
    out: dict[str, Any] = {"expected_rows": None}
    for label in ("new", "again"):
        before = cache_stats()
        timed = bench.alternate(names, bounds, lambda e, args: e.ranges(args), block=10)
        check_same(f"0.1% ranges ({label})", bounds, timed)
        out[label] = {n: summary(t) for n, (t, _) in timed.items()}
        out[label]["block_cache"] = stats_delta(before)
        out["expected_rows"] = float(statistics.mean(next(iter(timed.values()))[1]))
    return out


def mixed_stage(table: sd.Table, pool: list[str], rows: int, seconds: float, threads: int,
                baseline_mib: float) -> dict[str, Any]:
    """``threads`` threads doing random lookups and (1 in 20) 0.1% ranges for ``seconds``,
    the RSS sampled every second."""
    stop = threading.Event()
    samples: list[tuple[float, float]] = []
    ops = [0] * threads
    nranges = [0] * threads
    errors: list[str] = []
    space = workload.BASE ** workload.KEY_LENGTH
    width = int(space * (rows / 1000) / rows)

    def worker(i: int) -> None:
        rng = np.random.default_rng(1000 + i)
        try:
            while not stop.is_set():
                if rng.random() < RANGE_SHARE:
                    lo = workload.int_to_key(int(rng.integers(0, space - width)))
                    hi = workload.int_to_key(workload.key_to_int(lo) + width)
                    table.query(ranges=[sd.Range(lo, hi)])
                    nranges[i] += 1
                else:
                    table.query(keys=[pool[int(rng.integers(0, len(pool)))]])
                ops[i] += 1
        except Exception as e:  # reported, and the run stops
            errors.append(f"{type(e).__name__}: {e}")
            stop.set()

    def sampler() -> None:
        t0 = time.perf_counter()
        while not stop.is_set():
            samples.append((time.perf_counter() - t0, rss_mib()))
            stop.wait(1.0)

    free_memory()  # what earlier stages freed is not the mixed run's
    before = cache_stats()
    start_mib = rss_mib()
    workers = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(threads)]
    watch = threading.Thread(target=sampler, daemon=True)
    t0 = time.perf_counter()
    watch.start()
    for w in workers:
        w.start()
    stop.wait(seconds)
    stop.set()
    for w in workers:
        w.join()
    watch.join()
    elapsed = time.perf_counter() - t0
    samples.append((elapsed, rss_mib()))
    if errors:
        raise RuntimeError(f"the mixed run failed: {errors[0]}")
    max_mib = max(s[1] for s in samples)
    return {"seconds": elapsed, "threads": threads, "operations": sum(ops),
            "ranges": sum(nranges), "operations_per_second": sum(ops) / elapsed,
            "rss_baseline_mib": baseline_mib, "rss_start_mib": start_mib,
            "rss_max_mib": max_mib, "rss_end_mib": samples[-1][1],
            "rss_growth_mib": max_mib - baseline_mib,
            "rss_sampler": "psutil" if _has_psutil() else "VmRSS",
            "block_cache": stats_delta(before), "samples": samples}


def _has_psutil() -> bool:
    try:
        import psutil  # noqa: F401
    except ImportError:
        return False
    return True


# ---- main -------------------------------------------------------------------------------------
class Stages:
    """Wall seconds of each stage, printed as it ends."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._t = time.perf_counter()

    def done(self, name: str) -> None:
        now = time.perf_counter()
        self.seconds[name] = now - self._t
        self._t = now
        print(f"{name}: {self.seconds[name]:.1f} s")


def add_args(p: Any) -> None:
    p.add_argument("--rows", type=int, default=None, help="rows (default 10M; --quick 1M)")
    p.add_argument("--hot", type=int, default=None, help="hot keys (default 1000; quick 300)")
    p.add_argument("--warm-passes", type=int, default=3, help="untimed passes over the hot set")
    p.add_argument("--passes", type=int, default=2, help="timed passes over the hot set")
    p.add_argument("--cold", type=int, default=None, help="cold keys (default 1000; quick 300)")
    p.add_argument("--rate-lookups", type=int, default=None,
                   help="lookups per thread-rate run (default 2000; quick 600)")
    p.add_argument("--rounds", type=int, default=None, help="thread-rate rounds (2; quick 1)")
    p.add_argument("--ranges", type=int, default=None, help="0.1%% ranges (50; quick 20)")
    p.add_argument("--mixed-seconds", type=float, default=None,
                   help="seconds of the mixed RSS run (600; quick 20; 0 skips it)")
    p.add_argument("--mixed-threads", type=int, default=4, help="threads of the mixed run")
    p.add_argument("--mixed-pool", type=int, default=100_000, help="keys the mixed run picks")
    p.add_argument("--peers", default="duckdb,lance", help="peers to run (or '')")
    p.add_argument("--peers-python", default=None,
                   help="interpreter with pylance (default /work/venvs/peers/bin/python)")
    p.add_argument("--work", default=None, help="folder for the tables (default: a temp one)")


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], extra=add_args)
    q = args.quick
    rows = args.rows or (1_000_000 if q else 10_000_000)
    n_hot = args.hot or (300 if q else 1000)
    n_cold = args.cold or (300 if q else 1000)
    n_rate = args.rate_lookups or (600 if q else 2000)
    rounds = args.rounds or (1 if q else 2)
    n_ranges = args.ranges or (20 if q else 50)
    mixed_seconds = args.mixed_seconds if args.mixed_seconds is not None else (20 if q else 600)
    t_start = time.perf_counter()
    results: dict[str, Any] = {
        "rows": rows, "hot_keys": n_hot, "warm_passes": args.warm_passes,
        "timed_passes": args.passes, "cold_keys": n_cold, "rate_lookups": n_rate,
        "rate_rounds": rounds, "ranges": n_ranges, "threads": THREADS,
        "mixed_seconds": mixed_seconds, "mixed_threads": args.mixed_threads,
        "load_average_at_start": os.getloadavg()}
    skipped: dict[str, str] = {}
    print(f"{rows:,} rows; load {os.getloadavg()[0]:.2f}")

    with temp_dir("sediment-lookups-") as tmp:
        work = Path(args.work) if args.work else tmp
        work.mkdir(parents=True, exist_ok=True)
        # -- data (sorted by key, as every engine's docs suggest for lookups by key) ----------
        stages = Stages()
        data = workload.generate(rows)
        stages.done("generate")
        peers = start_peers([p for p in args.peers.split(",") if p], args, work, skipped)
        results["peer_versions"] = {n: p.versions for n, p in peers.items()}
        results["peers_skipped"] = skipped
        try:
            sort_rows_for_peers(data, work, peers)
            stages.done("sort (for the peers)")
            rng = np.random.default_rng(7)
            n_fresh = 2 * rounds * n_rate
            picked = list(dict.fromkeys(workload.pick(
                data.column("key"), 2 * n_hot + 2 * n_cold + n_fresh + 1000, seed=11)))
            keys = split_keys(picked, {"hot": n_hot, "cold": n_cold, "cold_on": n_cold,
                                       "fresh": n_fresh})
            fresh = [keys["fresh"][i * n_rate:(i + 1) * n_rate] for i in range(2 * rounds)]
            pool = workload.pick(data.column("key"), min(args.mixed_pool, rows), seed=13)
            bounds = random_ranges(rng, n_ranges, rows)

            # -- load -------------------------------------------------------------------------
            load: dict[str, Any] = {}
            store = sd.Store.open(str(work / "store"), create=True)
            tables = {"bench": store.create_table("bench", benchmark_schema()),
                      "bench_cold": store.create_table(
                          "bench_cold", benchmark_schema(),
                          properties={"query.block_cache_bytes": 0})}
            for name, table in tables.items():
                with Timer() as t:
                    table.ingest(data)
                load[f"sediment {name}"] = {"load_seconds": t.seconds,
                                            "files": len(table.files())}
            del data
            free_memory()
            for name in list(peers):
                try:
                    load[name] = peers[name].call(op="load", path=str(work / "data.parquet"))
                except PeerError as e:
                    skipped[name] = str(e)
                    print(f"peer {name} skipped: {e}")
                    peers.pop(name).close()
            os.sync()  # the files just written go to disk now, not during the timings
            stages.done("load")
            results["load"] = load
            print_table(["engine", "load s", "index s"],
                        [[k, v["load_seconds"], v.get("index_seconds", "")]
                         for k, v in load.items()], title=f"Load of {rows:,} rows (context)")
            first_keys = row_group_first_keys(tables["bench_cold"])
            baseline_mib = rss_mib()
            results["rss_after_ingest_mib"] = baseline_mib
            results["row_groups"] = len(first_keys)

            engines: dict[str, Engine] = {"sediment": SedimentEngine(tables["bench"]),
                                          "sediment cache on": SedimentEngine(tables["bench"]),
                                          "sediment cold": SedimentEngine(tables["bench_cold"])}
            for name, p in peers.items():
                engines[name] = PeerEngine(p)
                if name == "duckdb":
                    engines["duckdb rows"] = PeerEngine(p, "rows")
            bench = Bench(engines)
            results["warm"] = warm_stage(bench, keys["hot"], args.warm_passes, args.passes)
            stages.done("warm exact keys")
            results["cold"] = cold_stage(bench, keys["cold"], keys["cold_on"], first_keys)
            stages.done("cold exact keys")
            results["rates"] = rate_stage(bench, keys["hot"], fresh, n_rate, rounds, seed=17)
            stages.done("thread rates")
            results["ranges_0_1pct"] = range_stage(bench, bounds)
            stages.done("ranges")
            results["peers_failed"] = bench.failed
        finally:
            for p in peers.values():
                p.close()
        results["before_mixed_seconds"] = time.perf_counter() - t_start
        bound, source = cache_bound(tables["bench"])
        results["cache_bound_bytes"] = bound
        results["cache_bound_source"] = source
        if mixed_seconds > 0:
            print(f"mixed run: {mixed_seconds:.0f} s, {args.mixed_threads} threads")
            results["mixed"] = mixed_stage(tables["bench"], pool, rows, mixed_seconds,
                                           args.mixed_threads, baseline_mib)
            stages.done("mixed run")
        results["stage_seconds"] = stages.seconds
    results["total_seconds"] = time.perf_counter() - t_start
    report(results)
    if not args.no_save:
        save_results("lookups", results, quick=q)


# ---- report -----------------------------------------------------------------------------------
def report(results: dict[str, Any]) -> None:
    warm, cold, rates = results["warm"], results["cold"], results["rates"]["best"]
    rng = results["ranges_0_1pct"]
    engines = ["sediment", "duckdb", "duckdb rows", "lance"]

    def get(d: dict[str, Any], *path: str) -> Any:
        for p in path:
            if not isinstance(d, dict) or p not in d:
                return None
            d = d[p]
        return d

    print_table(["engine", "warm p50 ms", "warm p99 ms", "cold p50 ms", "cold p99 ms",
                 "0.1% range p50 ms", "range again p50 ms"],
                [[e, get(warm, e, "p50_ms"), get(warm, e, "p99_ms"), get(cold, e, "p50_ms"),
                  get(cold, e, "p99_ms"), get(rng, "new", e, "p50_ms"),
                  get(rng, "again", e, "p50_ms")]
                 for e in engines if e in warm or e in cold],
                title=f"Latency, {results['rows']:,} rows (warm: {results['hot_keys']} hot keys "
                      f"x {results['timed_passes']}; cold: {results['cold_keys']} new keys, "
                      f"Sediment's block cache off; ranges ~{fmt(rng['expected_rows'])} rows)")
    on = cold.get("sediment cache on, new keys")
    if on:
        print(f"sediment, cache on, keys never asked: p50 {on['p50_ms']:.3f} ms, "
              f"p99 {on['p99_ms']:.3f} ms")
    if "sediment cold" in rng["new"]:
        print(f"sediment 0.1% range with the block cache off: p50 "
              f"{rng['new']['sediment cold']['p50_ms']:.3f} ms (again "
              f"{rng['again']['sediment cold']['p50_ms']:.3f} ms)")

    def r(e: str, mode: str, t: int) -> float | None:
        v = rates.get(f"{e} {mode} {t}")
        return None if v is None else float(v["rate"])

    def ratio(a: float | None, b: float | None) -> float | None:
        return None if a is None or b is None or b == 0 else a / b

    rows = []
    for e in ("sediment", "duckdb", "lance"):
        w1, w8, c1, c8 = r(e, "warm", 1), r(e, "warm", THREADS), r(e, "cold", 1), \
            r(e, "cold", THREADS)
        if w1 is None and c1 is None:
            continue
        cores = get(rates, f"{e} warm {THREADS}")
        rows.append([e, w1, w8, ratio(w8, w1), c1, c8, ratio(c8, c1),
                     cores["cpu_seconds"] / cores["seconds"] if cores else None])
    print_table(["engine", "warm 1 thr/s", f"warm {THREADS} thr/s", f"{THREADS}/1",
                 "cold 1 thr/s", f"cold {THREADS} thr/s", f"{THREADS}/1",
                 f"cores ({THREADS} warm)"], rows,
                title=f"Lookups/s, {results['rate_lookups']:,} lookups per run, best of "
                      f"{results['rate_rounds']}")

    peers_warm = {e: warm[e]["p50_ms"] for e in ("duckdb", "duckdb rows", "lance") if e in warm}
    peers_range = {e: rng["new"][e]["p50_ms"] for e in ("duckdb", "lance") if e in rng["new"]}
    sw = warm["sediment"]["p50_ms"]
    if peers_warm:
        fastest = min(peers_warm, key=lambda k: peers_warm[k])
        print(f"warm p50: fastest peer {fastest} {peers_warm[fastest]:.3f} ms = "
              f"{peers_warm[fastest] / sw:.2f}x Sediment's {sw:.3f} ms")
    goals = [goal_line("warm exact-key p50", sw, WARM_P50_GOAL_MS, "ms", higher_is_better=False)]
    if peers_warm:
        goals.append(goal_line(f"warm exact-key p50: fastest peer ({fastest}) / sediment",
                               peers_warm[fastest] / sw, PEER_GOAL, "x"))
    else:
        print("GOAL warm exact-key vs peers: no peer ran")
    goals.append(goal_line("warm exact-key p99", warm["sediment"]["p99_ms"], WARM_P99_GOAL_MS,
                           "ms", higher_is_better=False))
    goals.append(goal_line("cold exact-key p50 (block cache off)", cold["sediment"]["p50_ms"],
                           COLD_P50_GOAL_MS, "ms", higher_is_better=False))
    w1, w8 = r("sediment", "warm", 1), r("sediment", "warm", THREADS)
    c1, c8 = r("sediment", "cold", 1), r("sediment", "cold", THREADS)
    if w1 and w8:
        goals.append(goal_line(f"{THREADS} threads warm", w8, RATE_GOAL, "lookups/s"))
        goals.append(goal_line(f"{THREADS} threads warm / 1 thread", w8 / w1,
                               WARM_SCALING_GOAL, "x"))
    if c1 and c8:
        goals.append(goal_line(f"{THREADS} threads cold / 1 thread", c8 / c1,
                               COLD_SCALING_GOAL, "x"))
    sr = rng["new"]["sediment"]["p50_ms"]
    if peers_range:
        rfast = min(peers_range, key=lambda k: peers_range[k])
        goals.append(goal_line(f"0.1% range p50 (new ranges): faster peer ({rfast}) / sediment",
                               peers_range[rfast] / sr, RANGE_GOAL, "x"))
        again = {e: rng["again"][e]["p50_ms"] for e in peers_range if e in rng["again"]}
        if again and "sediment" in rng["again"]:
            af = min(again.values())
            print(f"(0.1% range asked again: faster peer / sediment = "
                  f"{af / rng['again']['sediment']['p50_ms']:.2f}x)")
    else:
        print("GOAL 0.1% range vs peers: no peer ran")
    bound_mib = results["cache_bound_bytes"] / 2**20
    mixed = results.get("mixed")
    if mixed:
        print(f"\nMixed run: {mixed['seconds']:.0f} s, {mixed['threads']} threads, "
              f"{mixed['operations']:,} reads ({mixed['ranges']:,} ranges, "
              f"{mixed['operations_per_second']:.0f}/s); RSS ({mixed['rss_sampler']}) after "
              f"ingest {mixed['rss_baseline_mib']:.0f} MiB, at start {mixed['rss_start_mib']:.0f}"
              f" MiB, max {mixed['rss_max_mib']:.0f} MiB (growth "
              f"{mixed['rss_growth_mib']:+.0f} MiB), end {mixed['rss_end_mib']:.0f} MiB; cache "
              f"bound {bound_mib:.0f} MiB ({results['cache_bound_source']}); block cache "
              f"{mixed['block_cache']}")
        goals.append(goal_line("max RSS in the mixed run (absolute)", mixed["rss_max_mib"],
                               bound_mib + RSS_MARGIN_MIB, "MiB", higher_is_better=False))
        print(f"(growth over the post-ingest RSS: {mixed['rss_growth_mib']:.0f} MiB, "
              f"{'within' if mixed['rss_growth_mib'] <= bound_mib + RSS_MARGIN_MIB else 'over'}"
              f" bound + {RSS_MARGIN_MIB:.0f} MiB)")
    else:
        print("GOAL RSS through the mixed run: skipped (--mixed-seconds 0)")
    for stage in ("warm", "cold"):
        if results[stage].get("block_cache") is not None:
            print(f"block cache during {stage} lookups: {results[stage]['block_cache']}")
    print(f"load average {os.getloadavg()[0]:.2f}, peak RSS {peak_rss_mib():.0f} MiB, "
          f"{results['total_seconds']:.0f} s in all ({results['before_mixed_seconds']:.0f} s "
          f"before the mixed run)")
    if results.get("peers_failed"):
        print(f"peers failed: {results['peers_failed']}")
    results["goals"] = goals


if __name__ == "__main__":
    main()
