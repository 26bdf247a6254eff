"""Crash tests: SIGKILL a process in the middle of ingest, compaction, split, GC and dump.

Two kinds of kill: at a random moment (a random delay after the worker starts looping the
operation), and at chosen points (just before or just after a given transaction is written to
the log, or right after GC deleted files). After every kill the table must load, every
committed record must be there exactly once, nothing uncommitted may be visible, and no
referenced file may be missing; at the end ``maintain`` + ``gc`` (orphan timeout and GC delay
0) must leave no orphan file behind.

Which of the killed worker's ingests committed is read from the table's history (its batches
are ingested one after the other, so the committed ones are the first ``n``).
"""

from __future__ import annotations

import json
import random
import subprocess
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import workers as w

import sediment as sd
from sediment.dump import dump as dump_module

ROWS = 40
READY_TIMEOUT = 60.0
KILL_POINT_TIMEOUT = 40.0

BASE_PROPERTIES = {
    "compaction.strategy": "basic",
    "compaction.batch_size": 3,
    "partition.split.threshold": 400,
    "parquet.row_group_rows": 128,
    "state.snapshot.interval": 7,
    "state.cache.refresh_seconds": 0,
}


class Harness:
    """A table, its expected content, and crash workers started one ahead (so a worker's
    import time overlaps the previous iteration's checks)."""

    def __init__(self, uri: str, options: dict[str, Any], tmp: Path, op: str,
                 properties: dict[str, Any] | None = None, seed: int = 0) -> None:
        self.uri, self.options, self.tmp, self.op = uri, options, tmp, op
        self.store = sd.Store.open(uri, **options, create=True)
        props = {**BASE_PROPERTIES, **(properties or {})}
        self.table = self.store.create_table(w.TABLE, w.schema_for(props),
                                             split_points=["g", "p"], properties=props)
        self.rng = random.Random(seed)
        self.expected: Counter[w.Row] = Counter()
        for b in range(3):
            rows = w.batch_rows("base", b, ROWS)
            self.table.ingest(w.to_arrow(rows))
            self.expected.update(rows)
        self.iteration = 0
        self.kills = 0
        self.committed_batches = 0

    # ---- workers -----------------------------------------------------------------------
    def spawn(self, **extra: Any) -> dict[str, Any]:
        self.iteration += 1
        folder = self.tmp / f"it-{self.iteration:03d}"
        folder.mkdir()
        args = {"uri": self.uri, "options": self.options, "op": self.op,
                "writer": f"w{self.iteration}", "rows": ROWS,
                "ready": str(folder / "ready"), "go": str(folder / "go"),
                "dump_root": str(self.tmp / "dumps" / f"it-{self.iteration:03d}"), **extra}
        if self.uri.startswith("s3://"):
            args["dump_root"] = f"{self.uri}-dumps/it-{self.iteration:03d}"
        log = open(folder / "worker.log", "wb")  # noqa: SIM115 - closed in finish()
        proc = subprocess.Popen(w.command("crash", args), env=w.worker_env(), stdout=log,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        return {"proc": proc, "args": args, "folder": folder, "log": log}

    def _wait_ready(self, worker: dict[str, Any]) -> None:
        deadline = time.monotonic() + READY_TIMEOUT
        ready = Path(worker["args"]["ready"])
        while not ready.exists():
            if worker["proc"].poll() is not None:
                raise AssertionError(f"worker died before ready: {self._log(worker)}")
            if time.monotonic() > deadline:
                raise AssertionError("worker never became ready")
            time.sleep(0.01)

    def _log(self, worker: dict[str, Any]) -> str:
        if not worker["log"].closed:
            worker["log"].flush()
        return (worker["folder"] / "worker.log").read_text(errors="replace")[-3000:]

    def run(self, worker: dict[str, Any], delay: float | None) -> int:
        """Start the worker's loop; SIGKILL it after ``delay`` seconds (None: it kills itself
        at its kill point). Returns the version before it started."""
        self._wait_ready(worker)
        before = sd.Store.open(self.uri, **self.options).table(w.TABLE).version
        Path(worker["args"]["go"]).touch()
        proc: subprocess.Popen[bytes] = worker["proc"]
        try:
            if delay is None:
                proc.wait(timeout=KILL_POINT_TIMEOUT)
            else:
                time.sleep(delay)
                if proc.poll() is None:
                    proc.kill()
                proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)
            raise AssertionError(f"kill point {worker['args'].get('kill_at')} not reached: "
                                 f"{self._log(worker)}") from None
        finally:
            worker["log"].close()
        assert proc.returncode == -9, \
            f"worker ended with {proc.returncode}, not SIGKILL: {self._log(worker)}"
        self.kills += 1
        return before

    # ---- checks ------------------------------------------------------------------------
    def check_after_kill(self, worker: dict[str, Any], before: int) -> sd.Table:
        """The table loads, holds exactly the committed records, and no file is missing."""
        table = sd.Store.open(self.uri, **self.options).table(w.TABLE)
        history = table.history()
        n = sum(1 for e in history if e.version > before and e.kind == "add_files")
        writer = worker["args"]["writer"]
        for b in range(n):
            self.expected.update(w.batch_rows(writer, b, ROWS))
        self.committed_batches += n
        self.assert_content(table)
        lo = table.state()
        missing = [f for f in lo.refcount if not table._handle.objects.exists(f)]
        assert not missing, f"after a kill, referenced files are missing: {missing}"
        return table

    def assert_content(self, table: sd.Table, version: int | None = None) -> None:
        got = table.query(version=version)
        assert w.is_sorted(got), "query result is not sorted by (key, ts)"
        rows = Counter(w.rows_of(got))
        lost = self.expected - rows
        extra = rows - self.expected
        assert not lost and not extra, \
            f"{sum(lost.values())} committed records lost ({list(lost)[:3]}), " \
            f"{sum(extra.values())} unexpected records ({list(extra)[:3]})"
        # a few ranges too: leaves are cut at g and p
        for lo, hi in (("a", "g"), ("g", "p"), ("h", None), (None, "c")):
            part = Counter(w.rows_of(table.query(ranges=[sd.Range(lo, hi)], version=version)))
            want = Counter({r: c for r, c in self.expected.items() if w.in_range(r[0], lo, hi)})
            assert part == want, f"range [{lo}, {hi}) differs from the committed records"

    def clean_up_and_check(self) -> sd.Table:
        """maintain + gc with no delays remove every leftover; content is unchanged."""
        table = sd.Store.open(self.uri, **self.options).table(w.TABLE)
        table.set_properties({"gc.delay_seconds": 0,
                              "retention.seconds": 0, "gc.clock_skew_seconds": 0,
                              "compaction.job_timeout_seconds": 0})
        table.maintain()
        # an hour later: killed writers' leases are dead and their files old enough
        w.collect_later(table)
        left = w.leftovers(table)
        assert not any(left.values()), f"leftovers after maintain + gc: {left}"
        assert not table.state().jobs, "compaction jobs still assigned after maintain"
        self.assert_content(table)
        return table


def run_random_kills(h: Harness, iterations: int, max_delay: float,
                     after_kill: Callable[[], None] | None = None, **extra: Any) -> None:
    iterations *= w.SCALE
    nxt = h.spawn(**extra)
    for i in range(iterations):
        cur = nxt
        delay = h.rng.uniform(0.0, max_delay)
        before = h.run(cur, delay)
        if i + 1 < iterations:
            nxt = h.spawn(**extra)  # imports while we check
        h.check_after_kill(cur, before)
        if after_kill is not None:
            after_kill()


def run_kill_points(h: Harness, points: list[dict[str, Any]]) -> None:
    workers = [h.spawn(kill_at=p) if "kind" in p else h.spawn(**p) for p in points[:1]]
    for i in range(len(points)):
        cur = workers[i]
        before = h.run(cur, None)
        if i + 1 < len(points):
            p = points[i + 1]
            workers.append(h.spawn(kill_at=p) if "kind" in p else h.spawn(**p))
        h.check_after_kill(cur, before)


# ---- local disk ------------------------------------------------------------------------------
def test_kill_during_ingest(tmp_path: Path) -> None:
    h = Harness(str(tmp_path / "store"), {}, tmp_path, "ingest", seed=1)
    run_kill_points(h, [{"kind": "add_files", "when": "before", "nth": 2},
                        {"kind": "add_files", "when": "after", "nth": 1}])
    run_random_kills(h, 3, 1.5)
    assert h.committed_batches > 0
    h.clean_up_and_check()


def test_kill_during_compaction(tmp_path: Path) -> None:
    h = Harness(str(tmp_path / "store"), {}, tmp_path, "compact", seed=2)
    run_kill_points(h, [{"kind": k, "when": when, "nth": 1}
                        for k in ("assign_job_ids", "replace_file_references")
                        for when in ("before", "after")])
    run_random_kills(h, 3, 2.0)
    table = h.clean_up_and_check()
    assert w.max_files_per_leaf(table) <= 2


def test_kill_during_split(tmp_path: Path) -> None:
    """Splits, and the pushing down of references that follows them (in maintain)."""
    h = Harness(str(tmp_path / "store"), {}, tmp_path, "maintain", seed=3,
                properties={"partition.split.threshold": 60})
    run_kill_points(h, [{"kind": k, "when": when, "nth": 1}
                        for k in ("split_partition", "split_file_references")
                        for when in ("before", "after")])
    h.op = "split"
    run_random_kills(h, 3, 1.5)
    table = h.clean_up_and_check()
    assert len(table.state().leaf_partitions()) > 3


def test_kill_during_gc(tmp_path: Path) -> None:
    h = Harness(str(tmp_path / "store"), {}, tmp_path, "gc", seed=4,
                properties={"gc.delay_seconds": 0,
                            "retention.seconds": 0, "gc.clock_skew_seconds": 0})
    run_kill_points(h, [{"kind": "delete_files", "when": "before", "nth": 1},
                        {"kind": "delete_files", "when": "after", "nth": 1},
                        {"kill_after_delete": 1}])
    run_random_kills(h, 3, 2.0)
    h.clean_up_and_check()


def test_restore_after_gc_killed_between_delete_and_record(tmp_path: Path) -> None:
    """GC killed between deleting files and recording it must not let a restore bring back
    references to files that are gone (a restore validates against the recorded state)."""
    h = Harness(str(tmp_path / "store"), {}, tmp_path, "gc", seed=5,
                properties={"gc.delay_seconds": 0,
                            "retention.seconds": 0, "gc.clock_skew_seconds": 0})
    old = h.table.version  # base data, three small files per leaf, before any compaction
    old_expected = Counter(h.expected)
    worker = h.spawn(kill_after_delete=1)
    before = h.run(worker, None)
    table = h.check_after_kill(worker, before)
    try:
        table.restore(old)
    except sd.SedimentError as e:  # refusing is fine: the files are gone
        assert "garbage collection deleted" in str(e) or "no longer" in str(e), e
        return
    # the restore committed: every record of the old version must be readable
    h.expected = old_expected
    h.assert_content(table)


def test_kill_during_dump(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    h = Harness(str(tmp_path / "store"), {}, tmp_path, "dump", seed=6)
    for b in range(6):  # more files, more leaves to dump
        rows = w.batch_rows("more", b, ROWS)
        h.table.ingest(w.to_arrow(rows))
        h.expected.update(rows)
    monkeypatch.setattr(dump_module, "LOCK_TIMEOUT_SECONDS", 0.0)  # in this process only
    run_random_kills(h, 4, 1.5, after_kill=lambda: check_dump_resume(h))
    h.clean_up_and_check()


def check_dump_resume(h: Harness) -> None:
    """An interrupted dump resumes (here at once: the test made heartbeats stale after 0 s)
    and loads back whole; the lock and the version tag are gone afterwards."""
    table = sd.Store.open(h.uri, **h.options).table(w.TABLE)
    try:
        held = json.loads(table._handle.objects.get(dump_module.LOCK_KEY))
    except sd.SedimentError:
        held = None  # killed between two dumps
    root = held["root"] if held is not None else str(h.tmp / "dumps" / f"fresh-{h.kills}")
    job = table.dump(root)
    assert held is None or job.job_id == held["job_id"], "the interrupted job was not resumed"
    assert not table._handle.objects.exists(dump_module.LOCK_KEY)
    assert not [t for t in table.tags() if t.name.startswith("dump-")]
    name = f"reloaded-{h.kills}"
    loaded = h.store.load(job.manifest_uri, name)
    assert Counter(w.rows_of(loaded.query())) == h.expected
    h.store.drop_table(name)


# ---- S3 --------------------------------------------------------------------------------------
@pytest.mark.s3
def test_kill_during_ingest_and_compaction_on_s3(
        s3_store_uri: tuple[str, dict[str, Any]], tmp_path: Path) -> None:
    uri, options = s3_store_uri
    h = Harness(uri, options, tmp_path, "compact", seed=7)
    run_kill_points(h, [{"kind": "add_files", "when": "before", "nth": 2},
                        {"kind": "replace_file_references", "when": "before", "nth": 1}])
    run_random_kills(h, 1, 3.0)  # the local tests take the many random kills
    h.clean_up_and_check()


# ---- box partitions (partitioning=dimensions) ---------------------------------------------------
def test_kill_during_ingest_into_box_partitions(tmp_path: Path) -> None:
    h = Harness(str(tmp_path / "store"), {}, tmp_path, "ingest", seed=11,
                properties={"partitioning": "dimensions",
                            "partition.split.dimension": "cycle"})
    run_kill_points(h, [{"kind": "add_files", "when": "before", "nth": 2},
                        {"kind": "add_files", "when": "after", "nth": 1}])
    run_random_kills(h, 2, 1.5)
    assert h.committed_batches > 0
    h.clean_up_and_check()


def test_kill_during_split_of_box_partitions(tmp_path: Path) -> None:
    h = Harness(str(tmp_path / "store"), {}, tmp_path, "maintain", seed=13,
                properties={"partition.split.threshold": 60, "partitioning": "dimensions",
                            "partition.split.dimension": "cycle"})
    run_kill_points(h, [{"kind": k, "when": when, "nth": 1}
                        for k in ("split_partition", "split_file_references")
                        for when in ("before", "after")])
    h.op = "split"
    run_random_kills(h, 2, 1.5)
    table = h.clean_up_and_check()
    assert len(table.state().leaf_partitions()) > 3
    assert all(type(p.region).__name__ == "Cell" for p in table.partitions())
    # the cycle rule cut the second field (ts) too
    assert any(p.region.bounds[1] != (None, None)  # type: ignore[attr-defined]
               for p in table.partitions())
