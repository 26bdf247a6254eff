"""Per-field regions: a narrow range on the second row-key field only, on box-partitioned
tables (``partitioning="dimensions"``) against the same data partitioned lexicographically.

Run: ``python benchmarks/regions.py [--rows N] [--queries N] [--quick]`` (default 10M rows,
50 queries; ``--quick``: 1M rows, 20 queries).

Data: edges keyed by ``(source, destination)``, ``destination`` a random int64, plus a value,
in two shapes: **few sources** (8: graph data's heavy hitters) and **many sources** (100k,
uniform: users, hosts, accounts). Each shape is loaded into three tables in one ingest each,
then split and compacted until settled at the same ``partition.split.threshold`` (leaves of
~rows/128 records):

* **lexicographic**: split at the median key;
* **box, first**: ``partition.split.dimension=first``, Sleeper's rule (the first field whose
  median is neither its minimum nor its maximum in the leaf);
* **box, cycle**: ``partition.split.dimension=cycle``, a k-d tree's rule (a leaf d levels
  down tries field d mod 2 first).

A query is ``sd.Region({"destination": sd.Range(x, x + w)})`` selecting ~0.01% of the rows,
timed warm; the files and row groups each plan reads are counted by the reader's own pruning
(leaves, then row-group statistics). Every table uses every pruning Sediment has: on the
lexicographic table a leaf inside one source is pruned exactly by its destination range. A
fourth row times the lexicographic table queried as before per-field regions existed:
``filter=(pc.field("destination") >= x) & (... < x + w)``, which prunes row groups by
statistics but no leaf.

Why both rules: under Sleeper's rule a box tree cuts the second field only where the first is
nearly constant, which is where a lexicographic leaf bounds the second field too; with many
sources it never does, and the box tree is the lexicographic tree. The cycle rule bounds the
destination in every leaf. Goal (issue 22): a box table >= 5x faster than the lexicographic
one for the region query, on the many-sources shape with the cycle rule; every other ratio is
printed and saved too.
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

SHAPES = {"few sources": 8, "many sources": 100_000}
LEAVES = 128
DST_MAX = 10**12
KINDS = {"lexicographic": ("lexicographic", "first"), "box, first": ("dimensions", "first"),
         "box, cycle": ("dimensions", "cycle")}


def edges(rows: int, sources: int, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    src = pa.array([f"user-{i:06d}" for i in range(sources)]).take(
        pa.array(rng.integers(0, sources, rows)))
    return pa.table({"source": src, "destination": pa.array(rng.integers(0, DST_MAX, rows)),
                     "weight": pa.array(rng.integers(0, 1000, rows))})


def schema() -> sd.Schema:
    return sd.Schema(row_keys=[("source", pa.string()), ("destination", pa.int64())],
                     values=[("weight", pa.int64())])


def build(store: sd.Store, name: str, data: pa.Table, kind: str) -> dict[str, Any]:
    partitioning, rule = KINDS[kind]
    table = store.create_table(name, schema(), properties={
        "partitioning": partitioning, "partition.split.dimension": rule,
        "state.cache.refresh_seconds": 3600,
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


def time_queries(table: sd.Table, asks: list[Any], how: str) -> tuple[dict[str, Any],
                                                                       list[int]]:
    for a in asks[:5]:  # warm: state, footers, page cache
        table.query(**{how: a})
    lat, counts = [], []
    for a in asks:
        t0 = time.perf_counter()
        got = table.query(**{how: a})
        lat.append((time.perf_counter() - t0) * 1000)
        counts.append(got.num_rows)
    planned, files, groups = zip(*(reads(table, a, how) for a in asks), strict=True)
    return {"p50_ms": statistics.median(lat), "mean_ms": statistics.fmean(lat),
            "files_planned_mean": statistics.fmean(planned),
            "files_read_mean": statistics.fmean(files),
            "row_groups_read_mean": statistics.fmean(groups),
            "rows_per_query_mean": statistics.fmean(counts)}, counts


def run_shape(store: sd.Store, shape: str, rows: int, regions: list[Any],
              filters: list[Any]) -> dict[str, Any]:
    """Build the three tables of one data shape, time the queries, drop the tables."""
    data = edges(rows, SHAPES[shape], seed=5)
    built = {kind: build(store, f"t{i}", data, kind) for i, kind in enumerate(KINDS)}
    del data
    out: dict[str, Any] = {}
    answers: dict[str, list[int]] = {}
    runs = [(kind, kind, regions, "ranges") for kind in KINDS]
    runs.append(("lexicographic, filter=", "lexicographic", filters, "filter"))
    for label, kind, asks, how in runs:
        b = built[kind]
        timed, answers[label] = time_queries(b["table"], asks, how)
        out[label] = {"build_seconds": b["seconds"], "split_rounds": b["rounds"],
                      "leaves": b["leaves"], "files": b["files"], **timed}
    assert len({tuple(a) for a in answers.values()}) == 1, f"{shape}: the answers disagree"
    for b in built.values():
        store.drop_table(b["table"].name)
    return out


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], extra=lambda p: (
        p.add_argument("--rows", type=int, default=None, help="rows (default 10M)"),
        p.add_argument("--queries", type=int, default=None, help="queries timed"),
    ))
    rows = args.rows or (1_000_000 if args.quick else 10_000_000)
    n_queries = args.queries or (20 if args.quick else 50)
    width = DST_MAX // 10_000
    starts = np.random.default_rng(9).integers(0, DST_MAX - width, n_queries).tolist()
    regions = [sd.Region({"destination": sd.Range(int(x), int(x) + width)}) for x in starts]
    filters = [(pc.field("destination") >= int(x)) & (pc.field("destination") < int(x) + width)
               for x in starts]
    results: dict[str, Any] = {"rows": rows, "queries": n_queries, "shapes": SHAPES,
                               "target_leaves": LEAVES, "tables": {}}
    with temp_dir() as tmp:
        store = sd.Store.open(str(tmp / "store"), create=True)
        for shape in SHAPES:
            results["tables"][shape] = run_shape(store, shape, rows, regions, filters)
    goals = []
    for shape, res in results["tables"].items():
        print_table(["table", "leaves", "files", "build s", "p50 ms", "files planned",
                     "files read", "row groups read", "rows/query"],
                    [[k, v["leaves"], v["files"], v["build_seconds"], v["p50_ms"],
                      v["files_planned_mean"], v["files_read_mean"], v["row_groups_read_mean"],
                      v["rows_per_query_mean"]] for k, v in res.items()],
                    title=f"{shape} ({SHAPES[shape]:,}): narrow range on the second row-key "
                          f"field, {rows:,} rows, warm")
        lex = res["lexicographic"]["p50_ms"]
        ratios = {k: lex / res[k]["p50_ms"] for k in ("box, first", "box, cycle")}
        ratios["box, cycle / lexicographic filter="] = \
            res["lexicographic, filter="]["p50_ms"] / res["box, cycle"]["p50_ms"]
        results.setdefault("ratios", {})[shape] = ratios
        for k, r in ratios.items():
            print(f"{shape}: {k} {'' if '/' in k else '/ lexicographic '}= {r:.2f}x faster")
        if shape == "many sources":
            goals.append(goal_line("many sources: box (cycle) / lexicographic query speed (p50)",
                                   ratios["box, cycle"], 5.0, "x"))
    results["goals"] = goals
    if not args.no_save:
        save_results("regions", results, quick=args.quick)


if __name__ == "__main__":
    main()
