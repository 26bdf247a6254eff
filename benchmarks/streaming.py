"""Changes and streams: the change feed's read rate against a plain scan, in one run.

Run: ``python benchmarks/streaming.py [--rows N] [--quick]`` (default 2M rows; ``--quick``:
200k rows, well under a minute).

**Change feed read rate.** N rows of the benchmark schema (``support.workload``; record key
``key`` + ``timestamp``) are ingested in 10 commits into a ``merge="none"`` table, then a mix of
10% more: half upserts of existing records (new values) and half deletes by key of existing
records, in 10 commits each, interleaved. ``table.changes(0)`` (every change row, streamed,
every column) is timed against ``table.scan()`` of a table holding as many records as the
feed has rows (plain ingests of the same data), alternated, medians of 3. Rates are rows/s.

Goal: the change feed's read rate >= 0.8x the plain scan's.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import numpy as np
import pyarrow as pa
from _common import fmt, goal_line, parse_args, print_table, save_results, temp_dir

import sediment as sd
from sediment.workload import benchmark_schema
from support import workload


def _load(table: sd.Table, rows: int, commits: int) -> pa.Table:
    """``rows`` records in ``commits`` ingests; returns them."""
    data = workload.generate(rows, seed=42)
    step = -(-rows // commits)
    for i in range(commits):
        table.ingest(data.slice(i * step, step))
    return data


def _mix(table: sd.Table, data: pa.Table, fraction: float, commits: int) -> int:
    """Upserts of ``fraction / 2`` of the records (new values) and deletes by key of as many
    others, in ``commits`` commits of each, interleaved. Returns the rows changed."""
    rng = np.random.default_rng(7)
    n = int(data.num_rows * fraction / 2)
    picks = rng.permutation(data.num_rows)[: 2 * n]
    ups = data.take(pa.array(picks[:n]))
    ups = ups.set_column(ups.schema.get_field_index("value"), "value",
                         workload.random_strings(rng, n, workload.VALUE_LENGTH))
    dels = data.take(pa.array(picks[n:])).column("key").to_pylist()
    step = -(-n // commits)
    for i in range(commits):
        table.upsert(ups.slice(i * step, step))
        table.delete(keys=dels[i * step:(i + 1) * step])
    return 2 * n


def _timed(fn: Any) -> tuple[float, int]:
    t0 = time.perf_counter()
    rows = 0
    for batch in fn():
        rows += batch.num_rows
    return time.perf_counter() - t0, rows


def main() -> None:
    args = parse_args(__doc__ or "", extra=lambda p: p.add_argument("--rows", type=int,
                                                                    default=2_000_000))
    rows = 200_000 if args.quick else args.rows
    results: dict[str, Any] = {"rows": rows}
    with temp_dir() as d:
        store = sd.Store.open(str(d / "store"), create=True)
        split = workload.split_points(8)
        feed = store.create_table("feed", benchmark_schema(), split_points=split)
        data = _load(feed, rows, 10)
        changed = _mix(feed, data, 0.10, 10)
        expected = rows + changed + changed // 2  # inserts, deletes, pre + post images
        plain = store.create_table("plain", benchmark_schema(), split_points=split)
        _load(plain, expected, 10)
        feed.maintain()
        plain.maintain()
        times: dict[str, list[float]] = {"changes": [], "scan": []}
        counts: dict[str, int] = {}
        for _ in range(3):
            for name, fn in (("changes", lambda: feed.changes(0)),
                             ("scan", lambda: plain.scan())):
                s, n = _timed(fn)
                times[name].append(s)
                counts[name] = n
    med = {k: statistics.median(v) for k, v in times.items()}
    rate = {k: counts[k] / med[k] for k in med}
    print_table(["read", "rows", "median s", "rows/s"],
                [[k, counts[k], fmt(med[k]), fmt(rate[k])] for k in med],
                title=f"change feed vs plain scan ({rows:,} rows + 10% upserts and deletes)")
    ratio = rate["changes"] / rate["scan"]
    results.update(times=times, counts=counts, rates=rate, ratio=ratio,
                   goals=[goal_line("change feed read rate / plain scan", ratio, 0.8, "x")])
    save_results("streaming", results, quick=args.quick)


if __name__ == "__main__":
    main()
