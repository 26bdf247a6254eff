"""The 50k-row ingest of ``benchmarks/ingest.py``, two or more versions of the code side by
side: for a change to the small ingest, on a machine where absolute times drift.

Run: ``python benchmarks/small_ingest_ab.py [--rev REV ...] [--rounds N] [--ingests K]``
(default: ``--rev main --rev WORKTREE``, 8 rounds of 25 ingests). Each ``REV`` is a git
revision (its ``src`` taken with ``git archive``) or ``WORKTREE`` (the working tree's
``src``). A round runs one fresh process per version, in rotating order; each process makes
a table of the benchmark schema, ingests the 50k rows once untimed, then ``K`` times timed.
Reported per version: p10, p50 and p90 of the wall time and p50 of the process's CPU time
per ingest (all threads). Compare the versions of one run only.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import parse_args, print_table, temp_dir

REPO = Path(__file__).resolve().parent.parent

CHILD = """
import json, sys, tempfile, shutil, time
sys.path.insert(0, {tests!r})
import sediment as sd
from sediment.workload import benchmark_schema
from support import workload
data = workload.generate(50_000)
root = tempfile.mkdtemp(prefix="sediment-ab-")
try:
    table = sd.Store.open(root, create=True).create_table("small", benchmark_schema())
    table.ingest(data)
    wall, cpu = [], []
    for _ in range({ingests}):
        c, s = time.process_time(), time.perf_counter()
        table.ingest(data)
        wall.append(time.perf_counter() - s)
        cpu.append(time.process_time() - c)
    print(json.dumps({{"wall": wall, "cpu": cpu}}))
finally:
    shutil.rmtree(root, ignore_errors=True)
"""


def _source(rev: str, into: Path) -> str:
    """The ``src`` folder of ``rev`` (extracted under ``into``), or the working tree's."""
    if rev == "WORKTREE":
        return str(REPO / "src")
    out = into / rev.replace("/", "_")
    out.mkdir()
    archive = subprocess.run(["git", "-C", str(REPO), "archive", rev, "src"], check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(out)], input=archive, check=True)
    return str(out / "src")


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], extra=lambda p: (
        p.add_argument("--rev", action="append", default=None,
                       help="a git revision, or WORKTREE (repeat: one per version)"),
        p.add_argument("--rounds", type=int, default=8),
        p.add_argument("--ingests", type=int, default=25),
    ))
    revs = args.rev or ["main", "WORKTREE"]
    rounds, ingests = (2, 5) if args.quick else (args.rounds, args.ingests)
    child = CHILD.format(tests=str(REPO / "tests"), ingests=ingests)
    wall: dict[str, list[float]] = {r: [] for r in revs}
    cpu: dict[str, list[float]] = {r: [] for r in revs}
    with temp_dir() as tmp:
        sources = {r: _source(r, tmp) for r in revs}
        script = Path(tempfile.mkstemp(suffix=".py", dir=tmp)[1])
        script.write_text(child)
        for i in range(rounds):
            for rev in revs[i % len(revs):] + revs[:i % len(revs)]:
                env = {**os.environ, "PYTHONPATH": sources[rev]}
                out = subprocess.run([sys.executable, str(script)], env=env, check=True,
                                     capture_output=True, text=True).stdout
                doc = json.loads(out.strip().splitlines()[-1])
                wall[rev] += doc["wall"]
                cpu[rev] += doc["cpu"]
    rows = []
    for rev in revs:
        xs = sorted(wall[rev])
        rows.append([rev, len(xs), f"{xs[len(xs) // 10] * 1e3:.1f}",
                     f"{statistics.median(xs) * 1e3:.1f}", f"{xs[len(xs) * 9 // 10] * 1e3:.1f}",
                     f"{statistics.median(cpu[rev]) * 1e3:.1f}"])
    print_table(["version", "ingests", "p10 ms", "p50 ms", "p90 ms", "CPU p50 ms"], rows,
                title="50k-row ingest, versions side by side")


if __name__ == "__main__":
    main()
