"""Soak: writers, maintainers and readers on one table for N minutes, with kill -9 chaos.

The long variant of ``tests/proof`` (the concurrency and crash suites), run as a benchmark:

    .venv/bin/python benchmarks/soak.py --minutes 10            # local disk
    .venv/bin/python benchmarks/soak.py --minutes 10 --s3       # and the loopback S3 server
    .venv/bin/python benchmarks/soak.py --quick                 # 30 s smoke run
    .venv/bin/python benchmarks/soak.py --proof-scale 10        # + tests/proof, 10x longer
    .venv/bin/python benchmarks/soak.py --faults --minutes 2    # S3 through the fault proxy
    .venv/bin/python benchmarks/soak.py --chaos --minutes 60    # FoundationDB's fault mix

Processes (each its own Python, racing only through the object store): ``--writers`` ingest
batches of unique records until the time is up; ``--maintainers`` run ``sediment maintain
--loop``; ``--readers`` query random key ranges (and now and then an old version). Every
``--chaos-seconds`` one writer or maintainer is killed with SIGKILL and replaced by a fresh
one. The main process samples the largest file count per leaf every second.

At the end it prints, per store:

- records lost (must be 0) and duplicated (0): a record is identified by its value, and the
  records of a killed writer's last batch must be all present or all absent;
- wrong query answers (0): every answer must equal the table at some version committed while
  the query ran (time-travel answers: exactly their version);
- p50/p99 query latency while maintenance ran, and the largest file count per leaf (during
  the run and after a final ``maintain``);
- leftovers after ``maintain`` + ``gc`` with no delays (0: no orphan, no missing file).

With ``--proof-scale N`` it also runs ``tests/proof`` with ``SEDIMENT_PROOF_SCALE=N``: N times
the hypothesis examples of the model-based test and N times the random kills of the crash
tests (the long variants of what CI runs at scale 1).

With ``--faults`` the run is on the loopback S3 server only, and every process reaches it
through the fault-injecting proxy of ``tests/faultproxy.py`` (seeded by ``--seed``): the answers
of log-entry PUTs are lost (the write happened; the committer must recognise its own entry),
so are some answers of other writes, and connections are reset, answered 503 or delayed at
random (``--fault-scale`` multiplies the probabilities). The checks run without the proxy. A
failed ingest or query is then allowed (reported) as long as nothing it did is visible; lost,
duplicated and wrong stay 0-targets. The proxy's fault counts are printed and saved.

With ``--chaos`` the run is ``benchmarks/_chaos.py``'s (see there): FoundationDB's fault mix
on every request, keyed writers (ingest, upsert, delete, new columns), a streaming sink, a
dump and load, GC and prune under a skewed clock, a kill -9 about every 30 s; ``./dev soak``
runs it for 5 or 60 minutes.

Exit status 1 when any of the zero-targets is not met.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR.parent / "tests" / "proof"))  # the proof suites' workers
sys.path.insert(0, str(BENCH_DIR.parent / "tests"))  # the fault proxy

import _common  # noqa: E402
from _soak_run import soak_one  # noqa: E402

from support.s3 import moto_s3_server  # noqa: E402


# ---- loopback S3 -----------------------------------------------------------------------------
@contextlib.contextmanager
def s3_server() -> Iterator[tuple[str, dict[str, Any], dict[str, str]]]:
    """(store uri, storage options, environment for CLI processes) on a fresh bucket of a
    loopback moto server (support.s3: serialised, so conditional PUTs are atomic)."""
    with moto_s3_server() as server:
        server.create_bucket("soak")
        yield "s3://soak/store", server.options, server.env()


def run_proof_suites(scale: int) -> dict[str, Any]:
    """The long variants of the model, crash, concurrency and bad-input suites."""
    print(f"\n[proof] tests/proof with SEDIMENT_PROOF_SCALE={scale}", flush=True)
    env = {**os.environ, "SEDIMENT_PROOF_SCALE": str(scale)}
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "pytest", str(BENCH_DIR.parent / "tests" / "proof"),
                        "-q", "-p", "no:cacheprovider", "--timeout=0"], env=env,
                       cwd=BENCH_DIR.parent, capture_output=True, text=True)
    print(r.stdout.strip().splitlines()[-1] if r.stdout.strip() else r.stderr[-2000:])
    if r.returncode:
        print(r.stdout[-5000:])
    print(f"[proof] {time.perf_counter() - t0:.0f} s")
    return _common.goal_line(f"tests/proof at scale {scale} failed runs", r.returncode, 0, "",
                             higher_is_better=False)


def main(argv: list[str] | None = None) -> int:
    def extra(p: argparse.ArgumentParser) -> None:
        p.add_argument("--minutes", type=float, default=None,
                       help="length of each run (default 2; --quick: 0.5)")
        p.add_argument("--s3", action="store_true", help="also run on a loopback S3 server")
        p.add_argument("--faults", action="store_true",
                       help="run only on the loopback S3 server, every process through the "
                            "fault proxy (tests/faultproxy.py): lost answers, resets, 503s, "
                            "delays at random")
        p.add_argument("--chaos", action="store_true",
                       help="FoundationDB's fault mix on the loopback S3 server, keyed writers, "
                            "a sink, a dump and load, GC and prune under a skewed clock "
                            "(benchmarks/_chaos.py)")
        p.add_argument("--work", default="", help="with --chaos: keep the processes' logs "
                                                  "in this folder")
        p.add_argument("--fault-scale", type=float, default=1.0,
                       help="with --faults or --chaos: multiply every fault probability by this")
        p.add_argument("--writers", type=int, default=None, help="default 3 (--chaos: 8)")
        p.add_argument("--maintainers", type=int, default=2)
        p.add_argument("--readers", type=int, default=2)
        p.add_argument("--rows", type=int, default=2000, help="records per ingest")
        p.add_argument("--chaos-seconds", type=float, default=None,
                       help="kill -9 a writer or maintainer this often (0: never; default 10; "
                            "--chaos: any process, 30 on average)")
        p.add_argument("--seed", type=int, default=1)
        p.add_argument("--proof-scale", type=int, default=0,
                       help="also run tests/proof with SEDIMENT_PROOF_SCALE=N (N times the "
                            "hypothesis examples and crash iterations); 0: skip")

    args = _common.parse_args("Sediment soak: concurrent ingest, maintenance, queries, "
                              "kill -9 chaos; records lost/duplicated must be 0.", argv, extra)
    if args.minutes is None:
        args.minutes = 0.5 if args.quick else 2.0
    if args.quick:
        args.rows = min(args.rows, 500)
    if args.writers is None:
        args.writers = 8 if args.chaos else 3
    if args.chaos_seconds is None:
        args.chaos_seconds = 30.0 if args.chaos else 10.0
    if args.chaos:
        from _chaos import run_chaos
        from _chaos_report import report_chaos

        return report_chaos(run_chaos(args), args)
    results = []
    if args.faults:
        from faultproxy import FaultProxy

        with s3_server() as (uri, options, env), \
                FaultProxy(options["endpoint_url"], seed=args.seed) as proxy:
            results.append(soak_one("s3+faults", uri, options, env, args, proxy))
    else:
        results.append(soak_one("local", "", {}, {}, args))
        if args.s3:
            with s3_server() as (uri, options, env):
                results.append(soak_one("s3", uri, options, env, args))
    _common.print_table(
        ["store", "records", "lost", "dup", "partial", "queries", "wrong", "p50 ms", "p99 ms",
         "files/leaf max", "final", "leaves", "kills", "settle s", "leftovers"],
        [[r["store"], r["records"], r["records_lost"], r["records_duplicated"],
          r["partial_batches"], r["queries"], r["wrong_answers"], r["query_p50_ms"],
          r["query_p99_ms"], r["max_files_per_leaf_during"], r["max_files_per_leaf_final"],
          r["leaves"], sum(r["kills"].values()), r["settle_seconds"], r["leftovers"]]
         for r in results],
        title="Soak results")
    goals = []
    if args.proof_scale:
        goals.append(run_proof_suites(args.proof_scale))
    for r in results:
        s = r["store"]
        for key in ("records_lost", "records_duplicated", "records_unexpected",
                    "partial_batches", "wrong_answers", "leftovers", "ingests_failed"):
            if key == "ingests_failed" and "faults" in r:
                continue  # under faults a clean failure is allowed (its records are checked)
            goals.append(_common.goal_line(f"{s} {key}", r[key], 0, "",
                                           higher_is_better=False))
        if "faults" in r:
            f = r["faults"]
            print(f"  {s}: faults injected {json.dumps(f['rules'])}; proxy "
                  f"{json.dumps(f['counts'])}; ingests failed cleanly "
                  f"{r['ingests_failed']}, queries failed {r['query_errors']}")
        goals.append(_common.goal_line(f"{s} content kept by settle", int(r["content_kept"]), 1,
                                       ""))
        for example in r["wrong_examples"]:
            print(f"  wrong answer: {example}")
        if r["leftover_examples"]:
            print(f"  leftovers: {r['leftover_examples']}")
    print(f"peak RSS of this process: {_common.peak_rss_mib():.0f} MiB")
    if not args.no_save:
        _common.save_results("soak_faults" if args.faults else "soak",
                             {"parameters": dict(vars(args)), "runs": results, "goals": goals},
                             quick=args.quick)
    return 0 if all(g["passed"] for g in goals) else 1


if __name__ == "__main__":
    sys.exit(main())
