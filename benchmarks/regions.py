"""Per-field regions: a narrow range on the second row-key field only, on a box-partitioned
table (``partitioning="dimensions"``) against the same data partitioned lexicographically.

Run: ``python benchmarks/regions.py [--rows N] [--queries N] [--quick]`` (default 10M rows,
50 queries; ``--quick``: 1M rows, 20 queries).

Data: edges keyed by ``(source, destination)``: ``source`` one of a few values (graph data's
heavy hitters), ``destination`` a random int64, plus a string value. Both tables get the same
rows in one ingest and are then split and compacted until settled at the same
``partition.split.threshold`` (leaves of ~rows/128 records): the lexicographic table at the
median key, the box table as Sleeper splits (the first field whose median is neither its
minimum nor its maximum in the leaf). A query is ``sd.Region({"destination": sd.Range(x, x +
w)})`` selecting ~0.01% of the rows, timed warm; the files and row groups each plan reads are
counted by the reader's own pruning (leaves, then row-group statistics).

Both tables use every pruning Sediment has: on the lexicographic table, a leaf inside one
source is pruned exactly by its destination range, so only leaves spanning two sources are
read needlessly. A third row times the lexicographic table queried as before per-field
regions existed: ``filter=(pc.field("destination") >= x) & (... < x + w)``, which prunes row
groups by statistics but no leaf. Goal (issue 22): the box table >= 5x faster than the
lexicographic one (the region query; the filter query's ratio is printed too).
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from _common import Timer, goal_line, parse_args, print_table, save_results, temp_dir

import sediment as sd

SOURCES = 8
LEAVES = 128
DST_MAX = 10**12


def edges(rows: int, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    src = pa.array([f"user-{i:03d}" for i in range(SOURCES)]).take(
        pa.array(rng.integers(0, SOURCES, rows)))
    return pa.table({"source": src, "destination": pa.array(rng.integers(0, DST_MAX, rows)),
                     "weight": pa.array(rng.integers(0, 1000, rows))})


def schema() -> sd.Schema:
    return sd.Schema(row_keys=[("source", pa.string()), ("destination", pa.int64())],
                     values=[("weight", pa.int64())])


def build(store: sd.Store, name: str, data: pa.Table, partitioning: str) -> dict[str, Any]:
    table = store.create_table(name, schema(), properties={
        "partitioning": partitioning, "state.cache.refresh_seconds": 3600,
        "partition.split.threshold": max(1, data.num_rows // LEAVES)})
    with Timer() as t:
        table.ingest(data)
        rounds = 0
        while True:
            done = table.split().splits
            table.compact(full=True)
            rounds += 1
            if not done:
                break
    leaves = [p for p in table.partitions() if p.is_leaf]
    return {"table": table, "seconds": t.seconds, "rounds": rounds, "leaves": len(leaves),
            "files": len(table.files())}


def reads(table: sd.Table, ask: Any, how: str) -> tuple[int, int, int]:
    """Files the query's plan names (their footers are read), files with row groups left
    after pruning by statistics, and those row groups."""
    prepared = table.prepare(**{how: ask})
    ex = prepared.executor
    planned = files = groups = 0
    for sub in prepared.plan.subqueries:
        hashes = ex.point_hashes(sub)
        for ref in sub.references:
            planned += 1
            n = len(ex.row_groups(ref, sub, hashes, prepared.query_filter)[2])
            files += n > 0
            groups += n
    return planned, files, groups


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], extra=lambda p: (
        p.add_argument("--rows", type=int, default=None, help="rows (default 10M)"),
        p.add_argument("--queries", type=int, default=None, help="queries timed"),
    ))
    rows = args.rows or (1_000_000 if args.quick else 10_000_000)
    n_queries = args.queries or (20 if args.quick else 50)
    data = edges(rows, seed=5)
    width = DST_MAX // 10_000
    starts = np.random.default_rng(9).integers(0, DST_MAX - width, n_queries).tolist()
    regions = [sd.Region({"destination": sd.Range(int(x), int(x) + width)}) for x in starts]
    results: dict[str, Any] = {"rows": rows, "queries": n_queries, "sources": SOURCES,
                               "target_leaves": LEAVES, "tables": {}}
    with temp_dir() as tmp:
        store = sd.Store.open(str(tmp / "store"), create=True)
        built = {kind: build(store, kind, data, kind)
                 for kind in ("lexicographic", "dimensions")}
        answers: dict[str, list[int]] = {}
        filters = [(pc.field("destination") >= int(x)) & (pc.field("destination") < int(x) + width)
                   for x in starts]
        runs = [("lexicographic", "lexicographic", regions, "ranges"),
                ("dimensions", "dimensions", regions, "ranges"),
                ("lexicographic, filter=", "lexicographic", filters, "filter")]
        for label, kind, asks, how in runs:
            b = built[kind]
            table = b["table"]
            for a in asks[:5]:  # warm: state, footers, page cache
                table.query(**{how: a})
            lat, counts = [], []
            for a in asks:
                t0 = time.perf_counter()
                got = table.query(**{how: a})
                lat.append((time.perf_counter() - t0) * 1000)
                counts.append(got.num_rows)
            answers[label] = counts
            planned, files, groups = zip(*(reads(table, a, how) for a in asks), strict=True)
            results["tables"][label] = {
                "build_seconds": b["seconds"], "split_rounds": b["rounds"],
                "leaves": b["leaves"], "files": b["files"],
                "p50_ms": statistics.median(lat), "mean_ms": statistics.fmean(lat),
                "files_planned_mean": statistics.fmean(planned),
                "files_read_mean": statistics.fmean(files),
                "row_groups_read_mean": statistics.fmean(groups),
                "rows_per_query_mean": statistics.fmean(counts)}
        assert len({tuple(a) for a in answers.values()}) == 1, "the answers disagree"
    res = results["tables"]
    print_table(["partitioning", "leaves", "files", "build s", "p50 ms", "files planned",
                 "files read", "row groups read", "rows/query"],
                [[k, v["leaves"], v["files"], v["build_seconds"], v["p50_ms"],
                  v["files_planned_mean"], v["files_read_mean"], v["row_groups_read_mean"],
                  v["rows_per_query_mean"]]
                 for k, v in res.items()],
                title=f"Narrow range on the second row-key field, {rows:,} rows, warm")
    speedup = res["lexicographic"]["p50_ms"] / res["dimensions"]["p50_ms"]
    results["goals"] = [goal_line("box / lexicographic query speed (p50)", speedup, 5.0, "x")]
    before = res["lexicographic, filter="]["p50_ms"] / res["dimensions"]["p50_ms"]
    results["box_vs_lexicographic_filter"] = before
    print(f"box region / lexicographic filter= (no per-field regions): {before:.1f}x")
    if not args.no_save:
        save_results("regions", results, quick=args.quick)


if __name__ == "__main__":
    main()
