"""Upserts and deletes: Sediment side by side with Delta, Lance and Paimon, in one run.

Run: ``python benchmarks/upsert.py [--rows N] [--rounds R] [--quick]`` (default 10M rows, 3
rounds; ``--quick``: 200k rows, 2 rounds, about 30-60 s). Peers run in worker processes
(``_upsert_peers.py``) from their own interpreters: ``--peers-python`` (deltalake and pylance;
default ``/work/venvs/peers/bin/python``, else this interpreter) and ``--paimon-python``
(pypaimon pins ``pyarrow<20``; default ``/work/venvs/paimon/bin/python``). A peer whose
interpreter or package is missing is skipped and the reason printed and saved. To make them::

    python -m venv /work/venvs/peers && /work/venvs/peers/bin/pip install deltalake pylance
    python -m venv /work/venvs/paimon && /work/venvs/paimon/bin/pip install pypaimon pypaimon-rust

N rows of the benchmark schema (``support.workload``; record key = ``key`` + ``timestamp``)
are loaded into every engine: Sediment tables in one local store, each peer's table as its
docs recommend (see ``_upsert_peers.py``). Every Sediment table is maintained once after its
load, so each leaf starts with one file. Sediment's tables: ``base`` (never changed: the
baseline read in the same blocks as the others), ``upsert`` (default ``merge="none"``, written
with ``table.upsert``), ``last`` (``merge="last"``, written with ``table.upsert``) and
``ingest_last`` (``merge="last"``, written with plain ``table.ingest``).

1. **Upsert of 1% of the keys**, ``--rounds`` times: each round picks 1% of the existing
   records (same ``key`` and ``timestamp``, new ``value`` and ``nullable_value``) and every
   engine writes them, in an order rotated each round; each is timed until it returns
   committed (a new reader sees it: checked, not timed, by a read of one upserted key).
   Medians. Sediment ``upsert`` (on ``upsert`` and ``last``) and a plain ``ingest`` of the
   same rows into ``ingest_last``; Delta ``merge(...).when_matched_update_all()
   .when_not_matched_insert_all()``; Lance ``merge_insert``; Paimon a write + commit to a
   primary-key table.
2. **Exact-key lookups**, footers warm and the block cache emptied before each table's block
   of keys (every table's pages read alike), ``--lookups`` random existing keys, new to every
   table in each stage (and a quarter as many upserted ones, reported apart): p50 of
   ``table.query(keys=[k])`` on ``upsert`` and ``last`` right after round 1 (two files per
   leaf, no compaction), in alternating blocks with ``base``; again after one
   ``table.maintain()`` of each (``base`` maintained too). The peers' lookups before and
   after the upserts, for context.
3. **Full scan** (``table.scan()``, every column, streamed) of ``last`` after the last round
   (``rounds + 1`` files per leaf) vs a plain table holding the same rows (``last.query()``
   ingested once into a ``merge="none"`` table), alternated, medians.
4. **Range delete on moto S3**: a table of ``--s3-rows`` rows on the loopback moto server
   (``support.s3``), 8 leaves; ``table.delete(ranges=...)`` of a 1% range and of a range
   covering every key, alternated, medians (also on local disk, the ``upsert`` table).
5. **Delete of 1% by predicate** (``lo <= timestamp < hi``: the second key field, so it
   narrows no leaf and matches records in every file), ``--rounds`` times with distinct
   ranges: Sediment ``table.delete(filter=...)`` on ``upsert`` vs Delta ``delete(predicate)``
   and Lance ``delete``; timed until committed, and until a read of the predicate returns 0
   rows (visible).

Goals: (1) Sediment's upsert >= 5x faster than the fastest peer, and >= 0.9x the rate of a
plain ingest into a ``merge="last"`` table; (2) lookup p50 after the upsert <= 1.3x ``base``,
after one maintain <= 1.05x; (3) scan of ``last`` >= 0.9x the plain scan; (4) a range delete
on moto S3 < 50 ms; (5) the 1% delete by predicate >= 2x faster than Delta's.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from _common import (
    BENCH_DIR,
    PeerError,
    PeerProcess,
    fmt,
    goal_line,
    parse_args,
    peak_rss_mib,
    print_table,
    save_results,
    temp_dir,
)

import sediment as sd
from sediment.workload import benchmark_schema
from support import workload
from support.s3 import moto_s3_server

PEERS_SCRIPT = BENCH_DIR / "_upsert_peers.py"
PEER_PACKAGES = {"delta": "deltalake", "lance": "lance", "paimon": "pypaimon"}
UPSERT_GOAL = 5.0
INGEST_GOAL = 0.9
LOOKUP_AFTER_UPSERT_GOAL = 1.3
LOOKUP_AFTER_MAINTAIN_GOAL = 1.05
SCAN_GOAL = 0.9
RANGE_DELETE_GOAL_MS = 50.0
DELETE_GOAL = 2.0
BLOCK = 50
STAGES = 3
"""Lookup stages: before the upserts, after round 1, after one maintain."""




def peer_python(name: str, args: Any) -> str:
    if name == "paimon":
        return str(args.paimon_python)
    if args.peers_python:
        return str(args.peers_python)
    default = Path("/work/venvs/peers/bin/python")
    return str(default) if default.exists() else sys.executable


def start_peers(names: list[str], args: Any, root: Path, skipped: dict[str, str]
                ) -> dict[str, PeerProcess]:
    peers: dict[str, PeerProcess] = {}
    for name in names:
        python = peer_python(name, args)
        if not Path(python).exists():
            skipped[name] = f"no interpreter at {python} (see the module docstring)"
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


def drop_peer(peers: dict[str, PeerProcess], name: str, err: Exception,
              failed: dict[str, str]) -> None:
    print(f"peer {name} failed and is left out from here on: {err}")
    failed[name] = str(err)
    peers.pop(name).close()


# ---- workload ---------------------------------------------------------------------------------
def upsert_batch(base: pa.Table, round_no: int) -> pa.Table:
    """1% of ``base``'s records (distinct, random), their keys kept and their values new."""
    rng = np.random.default_rng(1000 + round_no)
    n = max(1, base.num_rows // 100)
    idx = np.sort(rng.choice(base.num_rows, size=n, replace=False))
    picked = base.select(["key", "timestamp"]).take(pa.array(idx))
    valid = rng.random(n) >= 0.5
    return pa.table({"key": picked.column("key"), "timestamp": picked.column("timestamp"),
                     "value": workload.random_strings(rng, n, workload.VALUE_LENGTH),
                     "nullable_value": workload.random_strings(rng, n, workload.VALUE_LENGTH,
                                                               valid)},
                    schema=workload.arrow_schema())


def percentile_ms(seconds: list[float], q: float = 50) -> float:
    return float(np.percentile(np.asarray(seconds) * 1000, q)) if seconds else float("nan")


def check_value(table: sd.Table, batch: pa.Table) -> None:
    """The first record of ``batch`` reads back with its new value (not timed)."""
    r = batch.slice(0, 1).to_pylist()[0]
    got = [x["value"] for x in table.query(keys=[r["key"]]).to_pylist()
           if x["timestamp"] == r["timestamp"]]
    if got != [r["value"]]:
        raise AssertionError(f"table {table.name}: key {r['key']!r} reads {got}, "
                             f"expected [{r['value']!r}]")


def files_per_leaf(table: sd.Table) -> float:
    return len(table.files()) / max(1, len(table.leaves()))


def sediment_lookups(tables: dict[str, sd.Table], keys: list[str], warm: int
                     ) -> dict[str, list[float]]:
    """Exact-key lookups on each table, in alternating blocks of ``BLOCK`` keys (so every
    table sees the same machine load); the first ``warm`` keys are not timed (they load the
    footers, key filters and page indexes).

    Every table is read alike: each stage has keys of its own, which no table has looked up
    before, and the process's block cache is emptied before each table's block, so every
    timed lookup reads its pages, and parses its row group's page index and key-filter block,
    as a cold one does. Keys shared by the stages would leave a table whose files did not
    change (``base``) with that per-row-group metadata of the timed keys already parsed,
    beside tables whose files an upsert or a maintain had just replaced (measured at 10M
    rows: 1.33-1.49x after a maintain against 1.00-1.02x on keys new to every table); and
    warming every key instead leaves the tables to evict each other's pages from the bounded
    cache, in an order that decides the ratios."""
    from sediment.query.blocks import BLOCKS

    for t in tables.values():
        for k in keys[:warm]:
            t.query(keys=[k])
    lat: dict[str, list[float]] = {name: [] for name in tables}
    timed = keys[warm:]
    for i in range(0, len(timed), BLOCK):
        for name, t in tables.items():
            BLOCKS.clear()
            for k in timed[i:i + BLOCK]:
                t0 = time.perf_counter()
                t.query(keys=[k])
                lat[name].append(time.perf_counter() - t0)
    return lat


def scan_rows(table: sd.Table) -> int:
    reader = table.scan()
    return sum(b.num_rows for b in reader)


def rotate(items: list[Any], k: int) -> list[Any]:
    k %= max(1, len(items))
    return items[k:] + items[:k]


# ---- stages -----------------------------------------------------------------------------------
def lookups_stage(label: str, tables: dict[str, sd.Table], peers: dict[str, PeerProcess],
                  keys: list[str], upserted: list[str], warm: int, peer_lookups: int,
                  failed: dict[str, str]) -> dict[str, Any]:
    lat = sediment_lookups(tables, keys + upserted, warm)
    n = len(keys) - warm
    out: dict[str, Any] = {name: {"p50_ms": percentile_ms(v[:n]),
                                  "p99_ms": percentile_ms(v[:n], 99),
                                  "upserted_p50_ms": percentile_ms(v[n:])}
                           for name, v in lat.items()}
    for name in list(peers):
        try:
            r = peers[name].call(op="lookups", keys=keys[:peer_lookups + 5], warm=5)
            out[name] = {"p50_ms": percentile_ms(r["seconds"]),
                         "p99_ms": percentile_ms(r["seconds"], 99)}
        except PeerError as e:
            drop_peer(peers, name, e, failed)
    print_table(["engine / table", "p50 ms", "p99 ms", "p50 ms (upserted keys)"],
                [[k, v["p50_ms"], v["p99_ms"], v.get("upserted_p50_ms", "")]
                 for k, v in out.items()],
                title=f"Exact-key lookups, block cache emptied per block: {label}")
    return out


def upsert_rounds(rounds: int, base: pa.Table, work: Path, tables: dict[str, sd.Table],
                  peers: dict[str, PeerProcess], failed: dict[str, str],
                  after_first: Callable[[list[pa.Table]], None]) -> dict[str, list[float]]:
    """``rounds`` rounds of a 1% upsert by every engine, in an order rotated each round."""
    sediment_ops: dict[str, Callable[[pa.Table], Any]] = {
        "sediment upsert": tables["upsert"].upsert,
        "sediment upsert (merge=last)": tables["last"].upsert,
        "sediment ingest (merge=last)": tables["ingest_last"].ingest,
    }
    checked = {"sediment upsert": tables["upsert"], "sediment upsert (merge=last)":
               tables["last"], "sediment ingest (merge=last)": tables["ingest_last"]}
    times: dict[str, list[float]] = {name: [] for name in [*sediment_ops, *peers]}
    batches: list[pa.Table] = []
    for r in range(rounds):
        batch = upsert_batch(base, r)
        batches.append(batch)
        path = work / f"upsert-{r}.parquet"
        pq.write_table(batch, path)
        first = batch.slice(0, 1).to_pylist()[0]
        for name in rotate([*sediment_ops, *peers], r):
            if name in sediment_ops:
                t0 = time.perf_counter()
                sediment_ops[name](batch)
                times[name].append(time.perf_counter() - t0)
                check_value(checked[name], batch)
            elif name in peers:
                try:
                    res = peers[name].call(op="upsert", path=str(path), check_key=first["key"],
                                           check_timestamp=first["timestamp"],
                                           check_value=first["value"])
                    times[name].append(res["seconds"])
                except PeerError as e:
                    drop_peer(peers, name, e, failed)
        print(f"round {r + 1}/{rounds}: " + ", ".join(
            f"{k} {v[-1]:.3f} s" for k, v in times.items() if len(v) == r + 1))
        if r == 0:
            after_first(batches)
    return times


def delete_rounds(rounds: int, table: sd.Table, peers: dict[str, PeerProcess],
                  failed: dict[str, str]) -> dict[str, dict[str, list[float]]]:
    """``rounds`` deletes of 1% of the records by a predicate on ``timestamp`` (a distinct
    1% of its span each round), every engine in an order rotated each round."""
    names = ["sediment", *[p for p in peers if p != "paimon"]]
    out: dict[str, dict[str, list[float]]] = {n: {"seconds": [], "visible_seconds": []}
                                              for n in names}
    width = workload.TIMESTAMP_SPAN // 100
    for r in range(rounds):
        lo = workload.TIMESTAMP_START + (10 + r) * width
        hi = lo + width
        for name in rotate(names, r):
            if name == "sediment":
                expr = (pc.field("timestamp") >= lo) & (pc.field("timestamp") < hi)
                t0 = time.perf_counter()
                table.delete(filter=expr)
                t1 = time.perf_counter()
                left = table.query(filter=expr, columns=["key"]).num_rows
                t2 = time.perf_counter()
                if left:
                    raise AssertionError(f"{left} records still match after the delete")
                out[name]["seconds"].append(t1 - t0)
                out[name]["visible_seconds"].append(t2 - t0)
            elif name in peers:
                try:
                    res = peers[name].call(op="delete", lo=lo, hi=hi)
                    out[name]["seconds"].append(res["seconds"])
                    out[name]["visible_seconds"].append(res["visible_seconds"])
                except PeerError as e:
                    drop_peer(peers, name, e, failed)
    return {k: v for k, v in out.items() if v["seconds"]}


def range_deletes(table: sd.Table, rows: int, repeats: int) -> dict[str, list[float]]:
    """``table.delete(ranges=...)`` of a 1% range and of a range over every key, alternated,
    each range moved on every repeat."""
    out: dict[str, list[float]] = {"1% range": [], "every key": []}
    for i in range(repeats):
        start = workload.int_to_key(workload.key_to_int("b") + i * 7_919_000_000_000)
        lo, hi = workload.key_range_for(start, rows / 100, rows)
        for name, rng in (("1% range", sd.Range(lo, hi)), ("every key", sd.Range(None, None))):
            t0 = time.perf_counter()
            table.delete(ranges=[rng])
            out[name].append(time.perf_counter() - t0)
    return out


def s3_range_deletes(rows: int, repeats: int) -> dict[str, Any]:
    with moto_s3_server() as s3:
        s3.create_bucket("bench")
        store = sd.Store.open("s3://bench/store", create=True, **s3.options)
        table = store.create_table("s3", benchmark_schema(),
                                   split_points=workload.split_points(8))
        table.ingest(workload.generate(rows, seed=5))
        files = len(table.files())
        times = range_deletes(table, rows, repeats)
        left = table.query(columns=["key"]).num_rows
    return {"rows": rows, "files": files, "rows_left": left, "seconds": times}


# ---- main ---------------------------------------------------------------------------------------
def add_args(p: Any) -> None:
    p.add_argument("--rows", type=int, default=None, help="rows per table (default 10M)")
    p.add_argument("--rounds", type=int, default=None, help="upsert and delete rounds")
    p.add_argument("--lookups", type=int, default=None, help="timed lookups per table")
    p.add_argument("--s3-rows", type=int, default=None, help="rows of the moto S3 table")
    p.add_argument("--peers", default="delta,lance,paimon", help="peers to run (or '')")
    p.add_argument("--peers-python", default=None,
                   help="interpreter with deltalake and pylance (default /work/venvs/peers)")
    p.add_argument("--paimon-python", default="/work/venvs/paimon/bin/python",
                   help="interpreter with pypaimon (it pins pyarrow<20)")
    p.add_argument("--work", default=None, help="folder for the tables (default: a temp one)")


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], extra=add_args)
    rows = args.rows or (200_000 if args.quick else 10_000_000)
    rounds = args.rounds or (2 if args.quick else 3)
    n_lookups = args.lookups or (200 if args.quick else 600)
    s3_rows = args.s3_rows or (50_000 if args.quick else 1_000_000)
    warm = 50
    peer_lookups = 50 if args.quick else 100
    results: dict[str, Any] = {"rows": rows, "rounds": rounds, "lookups": n_lookups,
                               "upsert_rows": rows // 100, "s3_rows": s3_rows}
    skipped: dict[str, str] = {}
    failed: dict[str, str] = {}
    names = [p for p in args.peers.split(",") if p]
    results["load_average_at_start"] = os.getloadavg()
    print(f"{rows:,} rows, {rounds} rounds of 1% ({rows // 100:,} rows); load "
          f"{os.getloadavg()[0]:.2f}")

    base = workload.generate(rows, seed=42)
    base_sorted = base.sort_by([("key", "ascending"), ("timestamp", "ascending")])
    # each lookup stage its own keys, never looked up before by any table (see
    # sediment_lookups), and its own upserted keys (all of them upserted in round 1)
    picked = workload.pick(base.column("key"), STAGES * (n_lookups + warm), seed=11)
    stage_keys = [picked[i::STAGES] for i in range(STAGES)]
    written = upsert_batch(base, 0).column("key").to_pylist()
    stage_upserted = [written[i::STAGES][:n_lookups // 4] for i in range(STAGES)]

    with temp_dir("sediment-upsert-") as tmp:
        work = Path(args.work) if args.work else tmp
        work.mkdir(parents=True, exist_ok=True)
        pq.write_table(base_sorted, work / "base.parquet")
        peers = start_peers(names, args, work, skipped)
        results["peer_versions"] = {n: p.versions for n, p in peers.items()}
        try:
            # -- load ------------------------------------------------------------------------
            store = sd.Store.open(str(work / "store"), create=True)
            props = {"base": {}, "upsert": {}, "last": {"merge": "last"},
                     "ingest_last": {"merge": "last"}}
            tables: dict[str, sd.Table] = {}
            load: dict[str, float] = {}
            for name, p in props.items():
                tables[name] = store.create_table(name, benchmark_schema(), properties=p)
                t0 = time.perf_counter()
                tables[name].ingest(base)
                load[f"sediment {name}"] = time.perf_counter() - t0
                tables[name].maintain()
            for name in list(peers):
                try:
                    load[name] = peers[name].call(op="load",
                                                  path=str(work / "base.parquet"))["seconds"]
                except PeerError as e:
                    drop_peer(peers, name, e, failed)
            results["load_seconds"] = load
            print_table(["engine", "load s", "rows/s"],
                        [[k, v, rows / v] for k, v in load.items()],
                        title=f"Load of {rows:,} rows (context)")
            results["files_per_leaf_loaded"] = {k: files_per_leaf(t) for k, t in tables.items()}

            # -- lookups before, upserts (lookups after round 1) -----------------------------
            look_tables = {k: tables[k] for k in ("base", "upsert", "last")}
            lookups: dict[str, Any] = {}
            lookups["before"] = lookups_stage("before the upserts", look_tables, peers,
                                              stage_keys[0], stage_upserted[0], warm,
                                              peer_lookups, failed)

            def after_first(_: list[pa.Table]) -> None:
                results["files_per_leaf_after_upsert"] = {
                    k: files_per_leaf(t) for k, t in tables.items()}
                lookups["after_upsert"] = lookups_stage(
                    "right after one 1% upsert, no compaction", look_tables, peers,
                    stage_keys[1], stage_upserted[1], warm, peer_lookups, failed)

            times = upsert_rounds(rounds, base, work, tables, peers, failed, after_first)
            results["upsert_seconds"] = times
            for name in ("upsert", "last", "ingest_last"):
                n = tables[name].query(columns=["key"]).num_rows
                if n != rows:
                    raise AssertionError(f"table {name} holds {n:,} records, not {rows:,}")

            # -- scan: merge="last" after the upserts vs a plain table of the same rows -------
            plain = store.create_table("plain", benchmark_schema())
            plain.ingest(tables["last"].query())
            plain.maintain()
            results["files_per_leaf_before_scan"] = {
                "last": files_per_leaf(tables["last"]), "plain": files_per_leaf(plain)}
            scans: dict[str, list[float]] = {"last": [], "plain": [], "upsert": []}
            scan_tables = {"last": tables["last"], "plain": plain, "upsert": tables["upsert"]}
            for name in scan_tables:  # warm
                scan_rows(scan_tables[name])
            for r in range(3):
                for name in rotate(list(scan_tables), r):
                    t0 = time.perf_counter()
                    n = scan_rows(scan_tables[name])
                    scans[name].append(n / (time.perf_counter() - t0))
                    if n != rows:
                        raise AssertionError(f"scan of {name}: {n:,} rows, not {rows:,}")
            results["scan_rows_per_second"] = scans

            # -- maintain, lookups after -----------------------------------------------------
            for name in ("base", "upsert", "last"):
                tables[name].maintain()
            results["files_per_leaf_after_maintain"] = {
                k: files_per_leaf(tables[k]) for k in ("base", "upsert", "last")}
            lookups["after_maintain"] = lookups_stage(
                "after one maintain()", look_tables, {}, stage_keys[2], stage_upserted[2], warm,
                0, failed)
            results["lookups"] = lookups

            # -- deletes -------------------------------------------------------------------
            deletes = delete_rounds(rounds, tables["upsert"], peers, failed)
            results["delete_by_predicate"] = deletes
            results["range_delete_local"] = range_deletes(tables["upsert"], rows, 5)
        finally:
            for peer in peers.values():
                peer.close()
    results["range_delete_s3"] = s3_range_deletes(s3_rows, 5)
    results["peers_skipped"] = skipped
    results["peers_failed"] = failed
    report(results, rows)
    if not args.no_save:
        save_results("upsert", results, quick=args.quick)


def med(v: list[float]) -> float:
    return statistics.median(v) if v else float("nan")


def report(results: dict[str, Any], rows: int) -> None:
    times = results["upsert_seconds"]
    up = med(times["sediment upsert"])
    peer_names = [k for k in times if not k.startswith("sediment") and times[k]]
    fastest = min(peer_names, key=lambda k: med(times[k])) if peer_names else None
    print_table(["engine", "median s", "min s", "max s", "rows/s", "x vs sediment upsert"],
                [[k, med(v), min(v), max(v), results["upsert_rows"] / med(v), med(v) / up]
                 for k, v in times.items() if v],
                title=f"Upsert of 1% ({results['upsert_rows']:,} rows) into {rows:,}, "
                      f"until committed; median of {results['rounds']}")
    lk = results["lookups"]
    print_table(["table", "before", "after 1 upsert", "after maintain", "vs base: after upsert",
                 "vs base: after maintain"],
                [[k, lk["before"][k]["p50_ms"], lk["after_upsert"][k]["p50_ms"],
                  lk["after_maintain"][k]["p50_ms"],
                  lk["after_upsert"][k]["p50_ms"] / lk["after_upsert"]["base"]["p50_ms"],
                  lk["after_maintain"][k]["p50_ms"] / lk["after_maintain"]["base"]["p50_ms"]]
                 for k in ("base", "upsert", "last")],
                title="Exact-key lookup p50 ms (Sediment tables, alternating blocks)")
    print_table(["table", "before", "after 1 upsert", "after maintain", "vs base: after upsert",
                 "vs base: after maintain"],
                [[k, lk["before"][k]["upserted_p50_ms"], lk["after_upsert"][k]["upserted_p50_ms"],
                  lk["after_maintain"][k]["upserted_p50_ms"],
                  lk["after_upsert"][k]["upserted_p50_ms"]
                  / lk["after_upsert"]["base"]["upserted_p50_ms"],
                  lk["after_maintain"][k]["upserted_p50_ms"]
                  / lk["after_maintain"]["base"]["upserted_p50_ms"]]
                 for k in ("base", "upsert", "last")],
                title="The same, for keys the first upsert wrote (context: each reads both files "
                      "of its leaf until compaction)")
    print("files per leaf: " + ", ".join(
        f"{k}: {results[k]}" for k in ("files_per_leaf_loaded", "files_per_leaf_after_upsert",
                                        "files_per_leaf_after_maintain")))
    peer_lk = [k for k in lk["before"] if k not in ("base", "upsert", "last")]
    if peer_lk:
        print_table(["peer", "p50 before", "p50 after upsert", "x"],
                    [[k, lk["before"][k]["p50_ms"], lk["after_upsert"].get(k, {}).get("p50_ms"),
                      lk["after_upsert"].get(k, {}).get("p50_ms", float("nan"))
                      / lk["before"][k]["p50_ms"]] for k in peer_lk],
                    title="Peers' exact-key lookup p50 ms (context)")
    scans = results["scan_rows_per_second"]
    print_table(["table", "median rows/s", "x plain"],
                [[k, med(v), med(v) / med(scans["plain"])] for k, v in scans.items()],
                title=f"Full scan (files per leaf: {results['files_per_leaf_before_scan']})")
    dels = results["delete_by_predicate"]
    print_table(["engine", "commit median s", "visible median s"],
                [[k, med(v["seconds"]), med(v["visible_seconds"])] for k, v in dels.items()],
                title="Delete of 1% by predicate (lo <= timestamp < hi)")
    s3 = results["range_delete_s3"]
    local = results["range_delete_local"]
    print_table(["range", "moto S3 median ms", "max ms", "local median ms"],
                [[k, med(v) * 1000, max(v) * 1000, med(local[k]) * 1000]
                 for k, v in s3["seconds"].items()],
                title=f"Range delete (moto S3: {s3['rows']:,} rows, {s3['files']} files; "
                      f"rows left after deleting every key: {s3['rows_left']})")
    print(f"load average {fmt(os.getloadavg()[0])}, peak RSS {peak_rss_mib():.0f} MiB")
    goals = []
    if fastest is not None:
        goals.append(goal_line(f"upsert 1%: fastest peer ({fastest}) / sediment upsert",
                               med(times[fastest]) / up, UPSERT_GOAL, "x"))
    else:
        print("GOAL upsert vs peers: no peer ran")
    goals.append(goal_line("upsert rate / plain ingest rate into merge=last",
                           med(times["sediment ingest (merge=last)"]) / up, INGEST_GOAL, "x"))
    for t in ("upsert", "last"):
        goals.append(goal_line(f"lookup p50 after the upsert / base ({t})",
                               lk["after_upsert"][t]["p50_ms"]
                               / lk["after_upsert"]["base"]["p50_ms"],
                               LOOKUP_AFTER_UPSERT_GOAL, "x", higher_is_better=False))
        goals.append(goal_line(f"lookup p50 after one maintain / base ({t})",
                               lk["after_maintain"][t]["p50_ms"]
                               / lk["after_maintain"]["base"]["p50_ms"],
                               LOOKUP_AFTER_MAINTAIN_GOAL, "x", higher_is_better=False))
    goals.append(goal_line("scan of merge=last after upserts / plain scan",
                           med(scans["last"]) / med(scans["plain"]), SCAN_GOAL, "x"))
    goals.append(goal_line("range delete on moto S3 (slowest median)",
                           max(med(v) for v in s3["seconds"].values()) * 1000,
                           RANGE_DELETE_GOAL_MS, "ms", higher_is_better=False))
    if "delta" in dels:
        goals.append(goal_line("1% delete by predicate: delta / sediment",
                               med(dels["delta"]["seconds"]) / med(dels["sediment"]["seconds"]),
                               DELETE_GOAL, "x"))
    else:
        print("GOAL delete vs delta: delta did not run")
    results["goals"] = goals


if __name__ == "__main__":
    main()
