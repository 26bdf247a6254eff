"""Skip indexes: a point filter on a value column, with parquet.bloom_columns and without.

Run: ``python benchmarks/skip_indexes.py [--rows N] [--quick]`` (default 10M rows; ``--quick``:
1M rows).

Four tables of the same rows of the benchmark schema are built in one store, each by five
ingests (five files in its leaf, as a table between compactions holds): a plain table
(``merge="none"``) and a ``merge="last"`` table, each with ``parquet.bloom_columns = "value"``
and without (the baseline). The merge table then takes a second write of 1% of its record keys
with new values, so a value of a replaced record is stale and must not be returned. Then
``table.query(filter=pc.field("value") == v)`` is timed warm for values present in the data,
values that were replaced (merge table: no answer) and absent values, interleaved: each
round runs the baseline once and the indexed table several times, both in the same run.
Every answer of an indexed table is checked equal to the baseline's.

Also printed: ingest time and file bytes with and without the filters (what the index costs
at write).

Goal: a point filter on the indexed value column >= 20x faster (p50) than the same filter
without the index, on the plain table and on the merge="last" table.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from _common import Timer, goal_line, parse_args, print_table, save_results, temp_dir

import sediment as sd
from sediment.workload import benchmark_schema
from support import workload

FILES = 5
INDEXED_PER_ROUND = 5


def build(store: sd.Store, name: str, data: pa.Table, merge: str, index: bool,
          replaced: pa.Table | None) -> tuple[sd.Table, float]:
    props: dict[str, Any] = {"merge": merge, "state.cache.refresh_seconds": 3600}
    if index:
        props["parquet.bloom_columns"] = "value"
    table = store.create_table(name, benchmark_schema(), properties=props)
    n = data.num_rows
    with Timer() as t:
        for i in range(FILES):
            table.ingest(data.slice(i * n // FILES, (i + 1) * n // FILES - i * n // FILES))
        if replaced is not None:
            table.ingest(replaced)
    return table, t.seconds


def timed(table: sd.Table, value: str) -> tuple[float, pa.Table]:
    t0 = time.perf_counter()
    got = table.query(filter=pc.field("value") == value)
    return (time.perf_counter() - t0) * 1000, got


def run(tables: dict[str, sd.Table], values: list[str], rounds: int) -> dict[str, Any]:
    """Interleaved rounds: baseline once, indexed table INDEXED_PER_ROUND times; each
    indexed answer checked against the baseline's."""
    idx, base = tables["index"], tables["no index"]
    for v in values[:2]:  # warm: footers, bloom filters, page cache
        timed(idx, v)
    lat: dict[str, list[float]] = {"index": [], "no index": []}
    rows = 0
    for r in range(rounds):
        v = values[r % len(values)]
        ms, want = timed(base, v)
        lat["no index"].append(ms)
        for _ in range(INDEXED_PER_ROUND):
            ms, got = timed(idx, v)
            lat["index"].append(ms)
            if not got.equals(want):
                raise AssertionError(f"value {v!r}: {got.num_rows} rows with the index, "
                                     f"{want.num_rows} without")
        rows += want.num_rows
    return {k: {"p50_ms": float(np.percentile(x, 50)), "p90_ms": float(np.percentile(x, 90)),
                "n": len(x)} for k, x in lat.items()} | {"rows_found": rows}


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], extra=lambda p: (
        p.add_argument("--rows", type=int, default=None, help="rows per table (default 10M)"),
        p.add_argument("--rounds", type=int, default=None, help="baseline queries per kind"),
    ))
    rows = args.rows or (1_000_000 if args.quick else 10_000_000)
    rounds = args.rounds or (4 if args.quick else 6)
    data = workload.generate(rows, seed=11)
    rng = np.random.default_rng(5)
    picks = rng.choice(rows, rounds * 2, replace=False)
    replaced_rows = np.sort(rng.choice(rows, rows // 100, replace=False))
    stale = set(replaced_rows.tolist())
    present = [data.column("value")[int(i)].as_py() for i in picks if int(i) not in stale]
    old = data.take(pa.array(replaced_rows))
    replaced = old.set_column(old.schema.get_field_index("value"), "value",
                              workload.random_strings(np.random.default_rng(9), old.num_rows,
                                                      workload.KEY_LENGTH))
    stale_values = old.column("value").take(pa.array(np.arange(rounds))).to_pylist()
    absent = workload.random_strings(np.random.default_rng(77), rounds,
                                     workload.KEY_LENGTH).to_pylist()
    results: dict[str, Any] = {"rows": rows, "files_per_leaf": FILES, "rounds": rounds,
                               "indexed_queries_per_round": INDEXED_PER_ROUND, "tables": {}}
    out_rows = []
    goals = []
    with temp_dir() as tmp:
        store = sd.Store.open(str(tmp / "store"), create=True)
        for merge in ("none", "last"):
            extra = replaced if merge == "last" else None
            tables, seconds, size = {}, {}, {}
            for index in (True, False):  # built one after the other: same machine state
                name = "index" if index else "no index"
                tables[name], seconds[name] = build(store, f"{merge}_{index}", data, merge,
                                                   index, extra)
                size[name] = sum(f.stat().st_size for f in
                                 (tmp / "store").rglob("*.parquet")
                                 if tables[name].table_id in str(f))
            kinds = {"present": run(tables, present, rounds),
                     "absent": run(tables, absent, rounds)}
            if merge == "last":
                kinds["replaced"] = run(tables, stale_values, rounds)
                assert kinds["replaced"]["rows_found"] == 0, "a stale record was returned"
            results["tables"][merge] = {"ingest_seconds": seconds, "bytes": size,
                                        "queries": kinds}
            for kind, r in kinds.items():
                out_rows.append([f"merge={merge}", kind, r["index"]["p50_ms"],
                                 r["no index"]["p50_ms"],
                                 r["no index"]["p50_ms"] / r["index"]["p50_ms"]])
            p = kinds["present"]
            goals.append(goal_line(
                f"point filter on an indexed value column, merge={merge}: speed-up (p50) "
                f"over no index", p["no index"]["p50_ms"] / p["index"]["p50_ms"], 20, "x"))
            print(f"merge={merge}: ingest {seconds['index']:.1f} s with blooms, "
                  f"{seconds['no index']:.1f} s without "
                  f"({seconds['index'] / seconds['no index']:.2f}x); files "
                  f"{size['index'] / 1e6:.1f} MB vs {size['no index'] / 1e6:.1f} MB "
                  f"(+{100 * (size['index'] / size['no index'] - 1):.1f}%)")
    print_table(["table", "values", "p50 ms (index)", "p50 ms (no index)", "speed-up"],
                out_rows, title=f"filter value == v, {rows:,} rows, {FILES} files per leaf, "
                                "warm")
    results["goals"] = goals
    if not args.no_save:
        save_results("skip_indexes", results, quick=args.quick)


if __name__ == "__main__":
    main()
