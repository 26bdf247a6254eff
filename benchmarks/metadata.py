"""Metadata that stays bounded: a table running for many commits stays as fast as on day one.

Run: ``python benchmarks/metadata.py [--quick] [--commits N] [--grace S]`` (full: 20,000
commits; ``--quick``: 2,000).

A table on local disk takes 100-row ingests (the benchmark schema, ``sediment.workload``)
one commit each, while the continuous maintainer (``sediment.maintenance.continuous``) runs
beside it in this process: compacting, collecting garbage, and every sixth GC period pruning
the log and snapshots past ``retention.seconds`` and rolling job events up past
``status.retention.seconds``. At 1,000 commits and at each checkpoint after it, timed cold
(in a fresh process, a fresh Store each time, best of 5):

- **state load**: ``store.table(name).state()`` (newest snapshot + replay);
- **history**: ``table.history(limit=100)``;
- **report**: ``table.jobs()`` (``sediment report jobs``: every job event kept);
- **dashboard page**: the table page's data (``Views.table_view``, a fresh view cache);
- **raw history**: the baseline, 100 newest log entries read with ``open`` + ``json.loads``;

and the metadata objects (``log/``, ``snapshots/``, ``objects/``, ``status/``). Printed as
ratios to the 1,000-commit figures. Goal: every time within 2x of its 1,000-commit time, and
the objects within the bound the retention gives.

The bound. Pruning keeps every log entry younger than ``W = max(retention.seconds, grace) +
gc.clock_skew_seconds``, plus the entries after the newest snapshot at or below the oldest
of them (at most ``state.snapshot.interval``), and runs every ``P`` seconds (6 GC periods),
so with ``c`` commits a second (the maintainer's included) the log holds at most
``c * (W + P) + interval`` entries,
snapshots ``(c * (W + P)) / interval + 2``. Snapshot objects (metarange, partitions, a
range per few MiB of references, the unreferenced files' list: about 4 a snapshot, fewer
where an unchanged range is shared) stay an hour after they were written
(``OBJECT_GRACE_SECONDS``: a writer may reuse a digest it remembers), so they number at most
``4 * (c * (3600 + skew) / interval + 2)``: they grow for the first hour, then level off.
Events: about 4 per compaction job, at most one job a commit, for
``status.retention.seconds + P``. The production grace period (5 minutes,
``PRUNE_GRACE_SECONDS``: a writer synced within it may rely on the entries it read) is
replaced here by ``--grace`` (default 10 s) so a run of minutes shows the steady state the
5-minute window shows after hours; the bound scales with it and nothing else changes.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
from _common import goal_line, parse_args, print_table, save_results, temp_dir

import sediment as sd
import sediment.state.versions as versions
from sediment.dashboard.views import Views
from sediment.maintenance.collecting import PRUNE_GC_PERIODS
from sediment.maintenance.continuous import Maintainer
from sediment.state.versions import OBJECT_GRACE_SECONDS
from sediment.workload import benchmark_schema, generate

ROWS = 100
SNAPSHOT_INTERVAL = 100
GC_EVERY = 1.0
RETENTION = 0.0
SKEW = 1.0
STATUS_RETENTION = 10.0
PREFIXES = ("log/", "snapshots/", "objects/", "status/")
TIMED = ("state_load", "history_100", "report", "dashboard_page", "raw_history_100")


def best(fn: Any, repeats: int = 5) -> float:
    out = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        out = min(out, time.perf_counter() - t0)
    return out


def raw_history(root: Path, n: int = 100) -> list[Any]:
    """The floor: the ``n`` newest log entries listed and read as plain files, with their
    bytes parsed where they are plain JSON (a sealed entry's checksum line left aside)."""
    out = []
    for p in sorted(root.glob("log/*.json"))[-n:]:
        data = p.read_bytes()
        try:
            out.append(json.loads(data))
        except ValueError:
            out.append(data)
    return out


def measure(uri: str, name: str, table_root: Path) -> dict[str, Any]:
    def fresh() -> sd.Table:
        return sd.Store.open(uri).table(name)

    def page() -> None:
        store = sd.Store.open(uri)
        Views(store).table_view(name)

    objects = {p: sum(1 for q in (table_root / p).rglob("*") if q.is_file())
               for p in PREFIXES}
    return {"state_load": best(lambda: fresh().state()),
            "history_100": best(lambda: fresh().history(limit=100)),
            "report": best(lambda: fresh().jobs()),
            "dashboard_page": best(page),
            "raw_history_100": best(lambda: raw_history(table_root)),
            "objects": objects, "metadata_objects": sum(objects.values())}


def measure_apart(uri: str, name: str, table_root: Path) -> dict[str, Any]:
    """``measure`` in a fresh process (as a report command or a dashboard would read): the
    maintainer's compactions in this one hold the GIL for long stretches, which timed here
    made the figures swing tenfold from one checkpoint to the next."""
    out = subprocess.run([sys.executable, __file__, "--measure", uri, name, str(table_root)],
                         capture_output=True, text=True, check=True)
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def main() -> None:
    if len(sys.argv) == 5 and sys.argv[1] == "--measure":
        print(json.dumps(measure(sys.argv[2], sys.argv[3], Path(sys.argv[4]))))
        return
    args = parse_args(__doc__.splitlines()[0], extra=lambda p: (
        p.add_argument("--commits", type=int, default=0),
        p.add_argument("--grace", type=float, default=10.0)))
    commits = args.commits or (2_000 if args.quick else 20_000)
    versions.PRUNE_GRACE_SECONDS = args.grace  # see the module docstring
    checkpoints = sorted({c for c in (1_000, 2_000, 5_000, 10_000, 15_000, 20_000, 50_000, 100_000)
                          if c <= commits} | {commits})
    batches = list(generate(ROWS * 200, seed=1, batch_rows=ROWS))
    rows: list[list[Any]] = []
    results: dict[str, Any] = {"commits": commits, "checkpoints": {}}
    with temp_dir() as root:
        uri = str(root / "store")
        store = sd.Store.open(uri, create=True)
        table = store.create_table("events", benchmark_schema(), properties={
            "retention.seconds": RETENTION, "gc.clock_skew_seconds": SKEW,
            "gc.delay_seconds": 0, "status.retention.seconds": STATUS_RETENTION,
            "state.snapshot.interval": SNAPSHOT_INTERVAL})
        table_root = Path(table._handle.objects.local_path(""))
        stop = threading.Event()
        maintainer = Maintainer(lambda: [table], threads=1, gc_every=GC_EVERY,
                                workers="thread")
        runner = threading.Thread(target=maintainer.run, kwargs={
            "report_every": 3600.0, "on_report": lambda _: None, "stop": stop})
        runner.start()
        started = time.perf_counter()
        done = 0
        try:
            for target in checkpoints:
                while done < target:
                    table.ingest(pa.Table.from_batches([batches[done % len(batches)]]))
                    done += 1
                elapsed = time.perf_counter() - started
                m = measure_apart(uri, "events", table_root)
                # every commit counts toward the log, the maintainer's (job assignments,
                # compactions, GC) as well as the ingests
                m["commits_per_second"] = table._handle.states.head().version / elapsed
                results["checkpoints"][done] = m
                m["elapsed_seconds"] = elapsed
                times = ", ".join(f"{k} {m[k] * 1000:.1f} ms" for k in TIMED)
                print(f"{done:>7,} ingests in {elapsed:,.0f} s ({m['commits_per_second']:.0f} "
                      f"commits/s): {m['metadata_objects']:,} metadata objects {m['objects']}; "
                      f"{times}", flush=True)
        finally:
            stop.set()
            runner.join()
        first = results["checkpoints"][checkpoints[0]]
        keys = list(TIMED)
        for c, m in results["checkpoints"].items():
            rows.append([c, *(f"{m[k] * 1000:.1f} ms ({m[k] / first[k]:.2f}x)" for k in keys),
                         m["metadata_objects"]])
        print_table(["commits", *keys, "objects"], rows,
                    title="cold times (ratio to the first checkpoint)")
        rate = max(m["commits_per_second"] for m in results["checkpoints"].values())
        window = max(RETENTION, args.grace) + SKEW + GC_EVERY * PRUNE_GC_PERIODS
        log_bound = rate * window + SNAPSHOT_INTERVAL
        snapshots = log_bound / SNAPSHOT_INTERVAL + 2
        objects = 4 * (rate * (OBJECT_GRACE_SECONDS + SKEW) / SNAPSHOT_INTERVAL + 2)
        events = 4 * rate * (STATUS_RETENTION + GC_EVERY * PRUNE_GC_PERIODS)
        bound = int(log_bound + snapshots + objects + events)
        print(f"bound at {rate:.0f} commits/s: log {log_bound:,.0f}, snapshots "
              f"{snapshots:,.0f}, snapshot objects {objects:,.0f}, events {events:,.0f}")
        last = results["checkpoints"][checkpoints[-1]]
        results["bound"] = bound
        results["goals"] = [
            goal_line(f"{k} at {checkpoints[-1]:,} vs {checkpoints[0]:,} commits",
                      last[k] / first[k], 2.0, "x", higher_is_better=False)
            for k in keys[:4]]
        results["goals"].append(goal_line("metadata objects", last["metadata_objects"], bound,
                                          "objects", higher_is_better=False))
        results["goals"].append(goal_line(
            "log entries (most at any checkpoint)",
            max(m["objects"]["log/"] for m in results["checkpoints"].values()), log_bound,
            "entries", higher_is_better=False))
        if not args.no_save:
            save_results("metadata", results, quick=args.quick)


if __name__ == "__main__":
    main()
