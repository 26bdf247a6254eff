"""Compaction on S3: inputs read in place (ranged reads) against whole local copies.

Run: ``python benchmarks/compaction_s3.py [--files N] [--rows-per-file N] [--repeats N]
[--quick]`` (default 8 files x 1M rows; ``--quick``: 8 x 200k).

Setup (untimed): a loopback moto S3 server, a table of the benchmark schema with one leaf and N
ingests of ``--rows-per-file`` rows (N sorted files with overlapping keys).

Timed, alternating (``--repeats`` rounds, the fastest of each reported, so both see the same
machine load), the table's one compaction job run by ``run_compaction_job`` (the merge, the
region filter, the output's Parquet, sample and key filters uploaded; not committed, and the
output deleted after each run):

1. **copy** (today's path): ``compaction.local_disk_bytes`` above the inputs' size: every input
   is downloaded whole to a local temp folder first (eight GETs at a time), then merged.
2. **in place**: ``compaction.local_disk_bytes = 0``: DataFusion reads the inputs from S3 with
   ranged GETs (footer, then a row group's column chunks at a time, coalesced).
3. For information, **in place with rounds**: ``compaction.max_merge_inputs = 2`` as well, so
   the merge rounds' files are written to and read back from the store.

For each: rows/s, the peak size of the job's local temp folder (polled every 5 ms: what the job
puts on local disk) and the peak RSS above the process's RSS at the start.

Goals: in place >= 0.9x the copying path's rate; in place peak local disk <= the property
(0 bytes here).
"""

from __future__ import annotations

import os
import tempfile
import threading
import uuid
from pathlib import Path
from typing import Any

from _common import (
    RssSampler,
    Timer,
    fmt,
    goal_line,
    parse_args,
    print_table,
    rate,
    save_results,
    temp_dir,
)

import sediment as sd
from sediment.compaction.job import run_compaction_job
from sediment.compaction.strategy import CompactionJob
from sediment.files.writer import with_sidecars
from sediment.state import pending
from sediment.workload import benchmark_schema
from support import workload
from support.s3 import moto_s3_server

MB = 1024 * 1024


class DiskSampler:
    """Peak total size of the files under ``root`` while the block runs (polled)."""

    def __init__(self, root: Path, interval: float = 0.005) -> None:
        self.root = root
        self.interval = interval
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _size(self) -> int:
        total = 0
        for dirpath, _, names in os.walk(self.root):
            for n in names:
                try:
                    total += os.path.getsize(os.path.join(dirpath, n))
                except OSError:
                    pass
        return total

    def _poll(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self._size())
            self._stop.wait(self.interval)

    def __enter__(self) -> DiskSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def run_once(table: sd.Table, overrides: dict[str, Any], scratch: Path) -> dict[str, Any]:
    state = table._handle.states.head()
    refs = tuple(sorted(table.files(), key=lambda r: r.sequence))
    job = CompactionJob(f"bench-{uuid.uuid4().hex[:8]}", refs[0].partition_id, refs)
    props = {**table.properties, **overrides}
    tempfile.tempdir = str(scratch)  # the job's temp folder goes here, where it is measured
    try:
        with DiskSampler(scratch) as disk, RssSampler() as rss, Timer() as t:
            out = run_compaction_job(table._handle.objects, table.schema, props, job,
                                     state.partitions[job.partition_id].region)
    finally:
        tempfile.tempdir = None
    assert out.written is not None
    objects = table._handle.objects
    objects.delete_many(with_sidecars([out.written.filename]))
    pending.release(objects, [out.written.filename])
    return {"seconds": t.seconds, "cpu_seconds": t.cpu, "rows": out.rows_in,
            "rows_per_second": rate(out.rows_in, t.seconds), "peak_local_disk_bytes": disk.peak,
            "peak_rss_delta_mib": rss.delta_mib}


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], extra=lambda p: (
        p.add_argument("--files", type=int, default=8),
        p.add_argument("--rows-per-file", type=int, default=0),
        p.add_argument("--repeats", type=int, default=0)))
    per_file = args.rows_per_file or (200_000 if args.quick else 1_000_000)
    repeats = args.repeats or (2 if args.quick else 3)
    variants = {
        "copy": {"compaction.local_disk_bytes": 1 << 50},
        "in_place": {"compaction.local_disk_bytes": 0},
        "in_place_rounds": {"compaction.local_disk_bytes": 0, "compaction.max_merge_inputs": 2},
    }
    with temp_dir() as tmp, moto_s3_server() as server:
        bucket = server.create_bucket(f"bench-{uuid.uuid4().hex[:12]}")
        store = sd.Store.open(f"s3://{bucket}/store", **server.options, create=True)
        table = store.create_table("bench", benchmark_schema(), properties={
            "compaction.strategy": "basic", "compaction.batch_size": args.files})
        with Timer() as t_ingest:
            for i in range(args.files):
                table.ingest(workload.generate(per_file, seed=100 + i))
        size = sum(o.size for o in table._handle.objects.list("data/")
                   if o.key.endswith(".parquet"))
        print(f"{args.files} files x {per_file:,} rows on moto S3 ({size / MB:,.0f} MB of "
              f"Parquet) ingested in {t_ingest.seconds:.1f} s; best of {repeats}")
        scratch = tmp / "scratch"
        scratch.mkdir()
        rounds: dict[str, list[dict[str, Any]]] = {k: [] for k in variants}
        for _ in range(repeats):
            for name, overrides in variants.items():
                rounds[name].append(run_once(table, overrides, scratch))
    best = {k: min(v, key=lambda r: r["seconds"]) for k, v in rounds.items()}
    worst_disk = {k: max(r["peak_local_disk_bytes"] for r in v) for k, v in rounds.items()}
    print_table(["path", "seconds", "Mrows/s", "peak local disk MB", "peak RSS +MiB"],
                [[k, r["seconds"], r["rows_per_second"] / 1e6, worst_disk[k] / MB,
                  r["peak_rss_delta_mib"]] for k, r in best.items()],
                title=f"one compaction job of {args.files} x {per_file:,} rows on S3")
    ratio = best["in_place"]["rows_per_second"] / best["copy"]["rows_per_second"]
    print(f"in place vs copy: {fmt(ratio)}x")
    goals = [goal_line("in-place rate vs copying", ratio, 0.9, "x"),
             goal_line("in-place peak local disk", worst_disk["in_place"] / MB, 0.0, "MB",
                       higher_is_better=False)]
    if not args.no_save:
        save_results("compaction_s3", {
            "files": args.files, "rows_per_file": per_file, "input_bytes": size,
            "repeats": repeats, "best": best, "peak_local_disk_bytes": worst_disk,
            "in_place_vs_copy": ratio, "goals": goals, "rounds": rounds}, quick=args.quick)


if __name__ == "__main__":
    main()
