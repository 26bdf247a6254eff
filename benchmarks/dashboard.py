"""Dashboard benchmark: server time of every page and JSON endpoint on a large table.

Run: ``python benchmarks/dashboard.py [--quick]`` (see benchmarks/README.md).

The table has 10,000 leaves (9,999 split points) and 100,000 file references: ten ingests
with ``ingest.write_strategy=shared_file``, each one real Parquet file holding a row in every
leaf and so referenced from all 10,000 leaves (queries read real data). A few tags and a
second, small table make the store page list more than one table; a snapshot is written at
the head (a table that has lived has one at most ``state.snapshot.interval`` versions back).

Each request goes through the whole ASGI application (routing, the token check, the view, the
JSON or the template) called in-process, without a socket: the server's own time. ``cold`` is
the first request to a fresh application (the table state loaded, the figures computed);
``after start`` the first request once the start-up warm-up of ``sediment dashboard`` has
prepared the tables' views (its own time is printed apart); ``warm`` the median of the next
requests (figures cached per table version, as a refreshing page finds them).

Goal: every page and endpoint under 1 s, reported for all three. A cold request pays for
loading the table's state (its snapshot; the figures count references from the snapshot's
Arrow slices without decoding them) and, for the table page, reading the log for the commit
timeline (``table.history()``: each entry's logged summary line, no transaction decoded). A
query over the whole table decodes every reference to plan its 10,000 leaves.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pyarrow as pa
from _common import goal_line, parse_args, print_table, save_results, temp_dir

import sediment as sd
from sediment.dashboard.app import create_app, warm_up
from sediment.state.store import StateStore
from sediment.workload import benchmark_schema

GOAL_SECONDS = 1.0
TOKEN = "bench-token"


def build(root: Path, leaves: int, ingests: int) -> sd.Store:
    store = sd.Store.open(str(root), create=True)
    points = [f"k{i:07d}" for i in range(1, leaves)]
    t0 = time.perf_counter()
    table = store.create_table("big", benchmark_schema(), split_points=points, properties={
        "ingest.write_strategy": "shared_file", "compaction.batch_size": 12})
    for seed in range(ingests):
        keys = [f"k{i:07d}-{seed}" for i in range(leaves)]
        n = len(keys)
        table.ingest(pa.table({
            "key": pa.array(keys, pa.string()),
            "timestamp": pa.array(range(seed * n, (seed + 1) * n), pa.int64()),
            "value": pa.array([f"v{seed}"] * n, pa.string()),
            "nullable_value": pa.array([None] * n, pa.string()),
        }))
        if seed in (0, ingests // 2):
            table.tag(f"after-{seed}")
    # A table that has lived has a snapshot at most state.snapshot.interval versions back:
    # write one at the head, as the interval would have (loads then read no long log).
    StateStore(store.table_objects(table.table_id), table.table_id).write_snapshot(
        table.state())
    small = store.create_table("small", benchmark_schema())
    small.ingest(pa.table({"key": ["a", "b"], "timestamp": [1, 2], "value": ["x", "y"],
                           "nullable_value": pa.array([None, None], pa.string())}))
    d = table.describe()
    print(f"built {d['leaf_partitions']:,} leaves, {d['references']:,} references, "
          f"{d['records']:,} records in {time.perf_counter() - t0:.1f} s", flush=True)
    return store


async def _request(app: Any, path: str) -> tuple[int, int]:
    """GET ``path`` through the ASGI app in-process: (status, body bytes)."""
    raw_path, _, query = path.partition("?")
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
             "method": "GET", "scheme": "http", "path": raw_path,
             "raw_path": raw_path.encode(), "query_string": query.encode(),
             "root_path": "", "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 8050),
             "headers": [(b"host", b"127.0.0.1"),
                         (b"authorization", f"Bearer {TOKEN}".encode())]}
    status, size = 0, 0
    sent = False

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await asyncio.sleep(3600)
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        nonlocal status, size
        if message["type"] == "http.response.start":
            status = message["status"]
        elif message["type"] == "http.response.body":
            size += len(message.get("body", b""))

    await app(scope, receive, send)
    return status, size


def timed(app: Any, path: str) -> tuple[float, int, int]:
    t0 = time.perf_counter()
    status, size = asyncio.run(_request(app, path))
    return time.perf_counter() - t0, status, size


def main(argv: list[str] | None = None) -> int:
    args = parse_args(__doc__.split("\n", 1)[0], argv)
    leaves, ingests, warm_runs = (1000, 3, 3) if args.quick else (10_000, 10, 5)
    lo = leaves * 4 // 10  # a range over 1% of the leaves, keys in the first and last leaves
    q_range = urlencode({"start": f"k{lo:07d}", "end": f"k{lo + leaves // 100:07d}",
                         "limit": 100})
    q_keys = urlencode({"keys": f"k0000005-0\nk{leaves - 1:07d}-0", "version": "after-0"})
    paths = [
        ("store page", "/"), ("GET /api/store", "/api/store"),
        ("table page", "/tables/big"), ("GET /api/tables/big", "/api/tables/big"),
        ("GET /api/tables/big/partitions", "/api/tables/big/partitions"),
        ("query page (range)", f"/tables/big/query?{q_range}"),
        ("GET /api/tables/big/query (range)", f"/api/tables/big/query?{q_range}"),
        ("GET /api/tables/big/query (keys, tag)", f"/api/tables/big/query?{q_keys}"),
        ("GET /api/tables/big/query (whole table)", "/api/tables/big/query?limit=100"),
    ]
    rows, results = [], []
    with temp_dir() as root:
        store = build(root / "store", leaves, ingests)
        warm_ups = []
        for label, path in paths:
            app = create_app(sd.Store.open(store.uri), token=TOKEN)  # nothing cached
            cold, status, size = timed(app, path)
            if status != 200:
                raise RuntimeError(f"{path}: HTTP {status}")
            warm = statistics.median(timed(app, path)[0] for _ in range(warm_runs))
            started = create_app(sd.Store.open(store.uri), token=TOKEN)
            t0 = time.perf_counter()
            warm_up(started.state.views)  # what `sediment dashboard` does as it starts
            warm_ups.append(time.perf_counter() - t0)
            first = timed(started, path)[0]
            rows.append((label, cold, first, warm, size))
            results.append({"view": label, "path": path, "cold_seconds": cold,
                            "first_after_warm_up_seconds": first, "warm_seconds": warm,
                            "response_bytes": size})
    print(f"\nstart-up warm-up (both tables' views prepared in a thread): median "
          f"{statistics.median(warm_ups):.2f} s")
    print_table(["view", "cold s", "after start s", "warm s", "bytes"], rows,
                title=f"server time per request ({leaves:,} leaves, "
                      f"{leaves * ingests:,} references)")
    goals = [
        goal_line("slowest page or endpoint of a running dashboard (warm)",
                  max(r["warm_seconds"] for r in results), GOAL_SECONDS, "s",
                  higher_is_better=False),
        goal_line("slowest page or endpoint, first visit once started (warm-up done)",
                  max(r["first_after_warm_up_seconds"] for r in results), GOAL_SECONDS, "s",
                  higher_is_better=False),
        goal_line("slowest page or endpoint, first request with nothing loaded (cold)",
                  max(r["cold_seconds"] for r in results), GOAL_SECONDS, "s",
                  higher_is_better=False),
    ]
    if not args.no_save:
        save_results("dashboard", {"parameters": {"leaves": leaves, "ingests": ingests,
                                                  "references": leaves * ingests,
                                                  "warm_runs": warm_runs},
                                   "warm_up_seconds": statistics.median(warm_ups),
                                   "results": results, "goals": goals}, quick=args.quick)
    return 0


if __name__ == "__main__":
    sys.exit(main())
