"""Dump/load benchmark: ``table.dump`` and ``store.load`` against a plain copy of the same bytes.

Run: ``python benchmarks/dump_load.py [--rows N] [--leaves N] [--repeats N] [--s3] [--quick]``
(default 2M rows, 8 leaves, best of 3; ``--quick``: 200k rows, 1 repeat).

Data: Sleeper's system-test schema (see ``support.workload``), ingested (not timed) into a local
table pre-split into ``--leaves`` leaves, so the table holds one sorted file per leaf. Timed, in
the same run and on the same disk (page cache warm for every variant):

* dump: ``table.dump(root)`` of the whole table: one task per leaf, each leaf's one file
  copied whole as ``<version>-data.parquet`` + sample + manifest with its CRC-32 (and SHA-256
  where streamed), then the job manifest; with ``--s3`` the dump root is on the same service,
  so the files are copied inside S3;
* load: ``store.load(manifest, new_table)``: verify every checksum, path, row count and the
  tiling (each file read part by part), then copy the files byte for byte into a new table
  (inside S3 with ``--s3``) and commit once;
* baseline for dump: ``shutil.copytree`` of the table's ``data/`` folder (the bytes a dump
  reads); baseline for load: ``shutil.copytree`` of the dump's job folder (the bytes a load
  copies). With ``--s3`` the same runs go to a loopback moto S3 server, and the baselines are
  object-store get + put of the same files (8 threads).

Figures: rows/s and MB/s (MB = 10^6 bytes of the baseline's bytes, so ratios compare like with
like), the ratio of each Sediment operation's throughput to its baseline's, and each run's peak
RSS (sampled, and its growth over the run's start) against the 256 MiB a dump or load may hold
whatever its files' sizes: files move in parts of ``--part-size`` MiB (default: the stores'
8 MiB; lower it to see the bound hold on small data) and never whole.
"""

from __future__ import annotations

import shutil
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from _common import (
    RssSampler,
    Timer,
    fmt,
    parse_args,
    print_table,
    rate,
    save_results,
    temp_dir,
)

import sediment as sd
from sediment.storage import ObjectStore, open_object_store
from sediment.workload import benchmark_schema
from support import workload
from support.s3 import moto_s3_server

MB = 1e6


def _folder_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _object_bytes(objects: ObjectStore, prefix: str) -> int:
    return sum(o.size for o in objects.list(prefix) if not o.key.endswith("/"))


def _copy_objects(src: ObjectStore, prefix: str, dest: ObjectStore) -> int:
    """get + put every object under ``prefix`` (8 threads); returns the bytes copied."""
    keys = [o.key for o in src.list(prefix) if not o.key.endswith("/")]

    def one(key: str) -> int:
        data = src.get(key)
        dest.put(key, data)
        return len(data)

    with ThreadPoolExecutor(8) as pool:
        return sum(pool.map(one, keys))


def _best(runs: list[dict[str, Any]]) -> dict[str, Any]:
    return min(runs, key=lambda r: r["seconds"])


def run_once(store: sd.Store, table: sd.Table, scratch: str, rows: int, i: int, *,
             s3_options: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    """One round: dump, load, and both baselines (each into fresh destinations)."""
    out: dict[str, dict[str, Any]] = {}
    data_prefix = f"tables/{table.table_id}/data/"
    dump_root = f"{scratch}/dump-{i}"

    # baseline for dump: copy the table's data files
    with RssSampler() as mem, Timer() as t:
        if s3_options is None:
            src = Path(store.objects.uri.removeprefix("file://")) / data_prefix
            shutil.copytree(src, Path(scratch) / f"copy-data-{i}")
            size = _folder_bytes(Path(scratch) / f"copy-data-{i}")
        else:
            size = _copy_objects(store.objects, data_prefix,
                                 open_object_store(f"{scratch}/copy-data-{i}", **s3_options))
    out["copy_data"] = {"seconds": t.seconds, "bytes": size, "peak_rss_delta_mib": mem.delta_mib}
    data_bytes = size

    with RssSampler() as mem, Timer() as t:
        job = table.dump(dump_root)
    assert job.rows == rows, (job.rows, rows)
    out["dump"] = {"seconds": t.seconds, "bytes": data_bytes, "bytes_written": job.bytes,
                   "tasks": job.tasks, "peak_rss_delta_mib": mem.delta_mib,
                   "peak_rss_mib": mem.peak_mib}

    # baseline for load: copy the dump's job folder
    with RssSampler() as mem, Timer() as t:
        if s3_options is None:
            shutil.copytree(Path(dump_root) / job.job_id, Path(scratch) / f"copy-dump-{i}")
            size = _folder_bytes(Path(scratch) / f"copy-dump-{i}")
        else:
            size = _copy_objects(open_object_store(dump_root, **s3_options), f"{job.job_id}/",
                                 open_object_store(f"{scratch}/copy-dump-{i}", **s3_options))
    out["copy_dump"] = {"seconds": t.seconds, "bytes": size, "peak_rss_delta_mib": mem.delta_mib}

    name = f"loaded_{i}_{uuid.uuid4().hex[:6]}"
    with RssSampler() as mem, Timer() as t:
        loaded = store.load(job.manifest_uri, name)
    d = loaded.describe()
    assert d["records"] == rows, (d["records"], rows)
    out["load"] = {"seconds": t.seconds, "bytes": size, "files": d["files"],
                   "peak_rss_delta_mib": mem.delta_mib, "peak_rss_mib": mem.peak_mib}
    store.drop_table(name)
    return out


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], extra=lambda p: (
        p.add_argument("--rows", type=int, default=None),
        p.add_argument("--leaves", type=int, default=8),
        p.add_argument("--repeats", type=int, default=None),
        p.add_argument("--s3", action="store_true",
                       help="run on a loopback moto S3 server instead of a local folder"),
        p.add_argument("--part-size", type=float, default=None,
                       help="MiB per part of streamed writes and reads (default: 8)")))
    if args.part_size:
        from sediment.storage.local import LocalObjectStore
        from sediment.storage.s3 import S3ObjectStore

        LocalObjectStore.part_size = S3ObjectStore.part_size = int(args.part_size * 2**20)
    rows = args.rows or (200_000 if args.quick else 2_000_000)
    repeats = args.repeats or (1 if args.quick else 3)
    with Timer() as t_gen:
        data = workload.generate(rows)
    print(f"generated {rows:,} rows ({data.nbytes / MB:,.0f} MB in memory) "
          f"in {t_gen.seconds:.1f} s; {args.leaves} leaves, best of {repeats}, "
          f"{'S3 (moto)' if args.s3 else 'local disk'}")

    with temp_dir() as tmp, (moto_s3_server() if args.s3 else _nothing()) as server:
        if server is not None:
            bucket = server.create_bucket(f"bench-{uuid.uuid4().hex[:12]}")
            options = server.options
            store = sd.Store.open(f"s3://{bucket}/store", **options, create=True)
            scratch = f"s3://{bucket}/scratch"
        else:
            options = None
            store = sd.Store.open(str(tmp / "store"), create=True)
            scratch = str(tmp / "scratch")
            Path(scratch).mkdir()
        table = store.create_table("bench", benchmark_schema(),
                                   split_points=workload.split_points(args.leaves))
        with Timer() as t_ingest:
            table.ingest(data)
        del data
        files = table.files()
        print(f"ingested in {t_ingest.seconds:.1f} s: {len(files)} files in "
              f"{sum(p.is_leaf for p in table.partitions())} leaves")
        rounds = [run_once(store, table, scratch, rows, i, s3_options=options)
                  for i in range(repeats)]

    best = {k: _best([r[k] for r in rounds]) for k in rounds[0]}
    for r in best.values():
        r["rows_per_second"] = rate(rows, r["seconds"])
        r["mb_per_second"] = rate(r["bytes"] / MB, r["seconds"])
    ratios = {
        "dump_vs_copy": best["dump"]["mb_per_second"] / best["copy_data"]["mb_per_second"],
        "load_vs_copy": best["load"]["mb_per_second"] / best["copy_dump"]["mb_per_second"],
    }
    labels = {"dump": "sediment dump", "copy_data": "baseline: copy table data/",
              "load": "sediment load (verify + copy + commit)",
              "copy_dump": "baseline: copy dump job folder"}
    print_table(["run (best of repeats)", "seconds", "Mrows/s", "MB", "MB/s", "peak RSS +MiB"],
                [[labels[k], r["seconds"], r["rows_per_second"] / 1e6, r["bytes"] / MB,
                  r["mb_per_second"], r["peak_rss_delta_mib"]]
                 for k, r in [(k, best[k]) for k in ("dump", "copy_data", "load", "copy_dump")]],
                title=f"dump / load of {rows:,} rows")
    print(f"\ndump written: {best['dump']['bytes_written'] / MB:,.1f} MB in "
          f"{best['dump']['tasks']} tasks")
    print(f"dump throughput vs plain copy of the table's files: {fmt(ratios['dump_vs_copy'])}x")
    print(f"load throughput vs plain copy of the dump's files:  {fmt(ratios['load_vs_copy'])}x")
    for k in ("dump", "load"):
        r = best[k]
        print(f"{k}: the process grew by {r['peak_rss_delta_mib']:,.0f} MiB at its peak "
              f"({r['peak_rss_mib']:,.0f} MiB, the generated data's leftovers included; a "
              "dump or load holds at most 256 MiB of its own)")
    if not args.no_save:
        save_results("dump_load" + ("_s3" if args.s3 else ""),
                     {"rows": rows, "leaves": args.leaves, "repeats": repeats,
                      "storage": "s3-moto" if args.s3 else "local",
                      "ingest_seconds": t_ingest.seconds, "best": best, "ratios": ratios,
                      "rounds": rounds}, quick=args.quick)


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


if __name__ == "__main__":
    main()
