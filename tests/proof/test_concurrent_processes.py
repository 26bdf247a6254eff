"""Concurrency: writer processes ingest, ``sediment maintain --loop`` splits/compacts/collects,
reader processes query, all at once, on local disk and on the S3 server.

At the end every ingested record is present exactly once (multisets of record identities), and
every query answered during the run equals the table at some version committed while it ran:
content at version ``v`` is what the ingests that committed at or before ``v`` wrote (each
ingest reports its version), so the check needs no time travel. Time-travel queries made
during the run must equal the content at their version exactly.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import workers as w

import sediment as sd
from sediment.maintenance.lease_store import list_maintainers

PROPERTIES = {
    "partition.split.threshold": 600,
    "compaction.strategy": "basic",
    "compaction.batch_size": 4,
    "parquet.row_group_rows": 256,
    "state.snapshot.interval": 10,
    "state.cache.refresh_seconds": 0,  # a query reads the head at the time it starts
    "gc.delay_seconds": 3600,  # keep old versions' files while readers may use them
    "compaction.threads": 1,
}


class Run:
    """One concurrent run and its checks."""

    def __init__(self, uri: str, options: dict[str, Any], tmp: Path, *, writers: int,
                 batches: int, rows: int, readers: int, env: dict[str, str] | None = None,
                 maintain_interval: float = 0.05, split_points: list[str] | None = None,
                 maintainers: int = 1, properties: dict[str, Any] | None = None,
                 awaits: tuple[str, ...] = ()) -> None:
        self.uri, self.options, self.tmp = uri, options, tmp
        self.writers, self.batches, self.rows, self.readers = writers, batches, rows, readers
        self.env = w.worker_env(env)
        self.store = sd.Store.open(uri, **options, create=True)
        props = {**PROPERTIES, **(properties or {})}
        self.table = self.store.create_table(w.TABLE, w.schema_for(props),
                                             split_points=split_points, properties=props)
        self.maintainers = maintainers
        self.awaits = awaits
        """Transaction kinds the maintainers are given time to commit (up to a deadline)
        after the writers end, while the readers go on."""
        self.maintain_interval = maintain_interval
        self.stop = tmp / "stop"
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def _start(self, name: str, argv: list[str]) -> None:
        log = open(self.tmp / f"{name}.log", "wb")  # noqa: SIM115 - child owns it
        # A shell's background jobs inherit SIGINT ignored (and Python keeps that): restore
        # the default so that SIGINT stops ``maintain --loop`` as Ctrl-C does.
        self.procs[name] = subprocess.Popen(
            argv, env=self.env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        log.close()

    def log(self, name: str) -> str:
        return (self.tmp / f"{name}.log").read_text(errors="replace")[-3000:]

    def execute(self, timeout: float) -> float:
        """Start everything, wait for the writers, stop the others; returns seconds taken."""
        started = time.monotonic()
        base = {"uri": self.uri, "options": self.options}
        for i in range(self.maintainers):
            self._start(f"maintain-{i}", [sys.executable, "-m", "sediment.cli", "maintain",
                                          "--store", self.uri, "--table", w.TABLE, "--loop",
                                          "--interval", str(self.maintain_interval), "--json"])
        try:
            # the writers start once every maintainer has joined the store's leases and one
            # reports ticks of the table (the one holding its lease; the others stand by): on
            # a loaded machine the maintainers can take longer to start than the writers take
            # to finish, and the run then proves nothing about maintenance concurrent with
            # ingest
            objects = sd.Store.open(self.uri, **self.options).objects
            while (len(list_maintainers(objects).members) < self.maintainers or
                   not any('"table"' in self.log(f"maintain-{i}")
                           for i in range(self.maintainers))) and \
                    time.monotonic() < started + timeout / 2:
                for i in range(self.maintainers):
                    assert self.procs[f"maintain-{i}"].poll() is None, \
                        self.log(f"maintain-{i}")
                time.sleep(0.05)
            for i in range(self.writers):
                self._start(f"writer-{i}", w.command("ingest", {
                    **base, "writer": f"w{i}", "batches": self.batches, "rows": self.rows,
                    "out": str(self.tmp / f"writer-{i}.jsonl"), "pause": 0.05}))
            for i in range(self.readers):
                self._start(f"reader-{i}", w.command("query", {
                    **base, "seed": i, "stop": str(self.stop),
                    "out": str(self.tmp / f"reader-{i}.jsonl")}))
            for i in range(self.writers):
                rc = self.procs[f"writer-{i}"].wait(timeout=max(1.0, started + timeout
                                                                - time.monotonic()))
                assert rc == 0, f"writer {i} failed: {self.log(f'writer-{i}')}"
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and not set(self.awaits) <= \
                    {e.kind for e in self.table.history()}:
                time.sleep(0.2)
            time.sleep(0.5)  # let maintenance and the readers see the last commits
        finally:
            self.stop.touch()
            for i in range(self.maintainers):
                m = self.procs[f"maintain-{i}"]
                if m.poll() is None:
                    m.send_signal(signal.SIGINT)  # stops like an operator's Ctrl-C
            for name, p in self.procs.items():
                try:
                    p.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
                    raise AssertionError(f"{name} did not stop: {self.log(name)}") from None
        for i in range(self.maintainers):
            name = f"maintain-{i}"
            assert self.procs[name].returncode in (0, 1, 130, -signal.SIGINT), self.log(name)
            assert "Traceback" not in self.log(name) or \
                "KeyboardInterrupt" in self.log(name), self.log(name)
        for i in range(self.readers):
            assert self.procs[f"reader-{i}"].returncode == 0, self.log(f"reader-{i}")
        return time.monotonic() - started

    # ---- checks -----------------------------------------------------------------------------
    def committed(self) -> tuple[list[tuple[int, list[w.Row]]], Counter[str]]:
        """(version, rows) of every committed ingest, sorted by version; failed batches."""
        out: list[tuple[int, list[w.Row]]] = []
        failed: Counter[str] = Counter()
        for i in range(self.writers):
            done, errors, unfinished = w.read_ingest_log(self.tmp / f"writer-{i}.jsonl")
            assert unfinished is None and len(done) + len(errors) == self.batches, \
                f"writer {i} reported {len(done) + len(errors)} batches"
            failed.update(e.split(":")[0] for e in errors.values())
            out.extend((v, w.batch_rows(f"w{i}", b, self.rows)) for b, v in done.items())
        out.sort(key=lambda x: x[0])
        versions = [v for v, _ in out]
        assert len(set(versions)) == len(versions), "two ingests claim one version"
        return out, failed

    def check(self) -> dict[str, Any]:
        commits, failed = self.committed()
        assert not failed, f"ingests failed: {dict(failed)}"
        table = sd.Store.open(self.uri, **self.options).table(w.TABLE)
        expected = Counter(r for _, rows in commits for r in rows)
        got = Counter(w.rows_of(table.query()))
        lost, dup = expected - got, got - expected
        assert not lost and not dup, \
            f"{sum(lost.values())} records lost, {sum(dup.values())} extra/duplicated"
        history = {e.version: e.kind for e in table.history()}
        for v, _ in commits:
            assert history.get(v) == "add_files", f"ingest version {v} is a {history.get(v)}"
        assert sum(k == "add_files" for k in history.values()) == len(commits), \
            "the log holds add_files commits no writer reported"
        queries = self.check_queries(commits)
        return {"records": sum(expected.values()), "versions": table.version,
                "queries": queries, "maintenance": Counter(history.values())}

    def check_queries(self, commits: list[tuple[int, list[w.Row]]]) -> int:
        checker = w.QueryChecker(commits)
        checked = 0
        for i in range(self.readers):
            for line in (self.tmp / f"reader-{i}.jsonl").read_text().splitlines():
                problem = checker.check(json.loads(line))
                assert problem is None, problem
                checked += 1
        assert checked > 0, "no query ran"
        return checked

    def settle_and_check_files(self) -> int:
        """After the run: maintain + gc with no delays leave no leftover; content kept."""
        table = sd.Store.open(self.uri, **self.options).table(w.TABLE)
        before = Counter(w.rows_of(table.query()))
        table.set_properties({"gc.delay_seconds": 0,
                              "retention.seconds": 0, "gc.clock_skew_seconds": 0,
                              "compaction.job_timeout_seconds": 0})
        table.maintain()
        w.collect_later(table)
        left = w.leftovers(table)
        assert not any(left.values()), f"leftovers after maintain + gc: {left}"
        assert Counter(w.rows_of(table.query())) == before
        return w.max_files_per_leaf(table)


def test_writers_maintainer_and_readers_on_local_disk(tmp_path: Path) -> None:
    # two maintainers (one holds the table's lease, the other stands by), and jobs count as
    # stale after 0.5 s: a job run again while its first run goes on commits once, the
    # other run fails cleanly (its output an orphan for GC)
    run = Run(str(tmp_path / "store"), {}, tmp_path, writers=3, batches=12, rows=150,
              readers=2, maintainers=2,
              properties={"compaction.job_timeout_seconds": 0.5},
              awaits=("replace_file_references", "split_partition"))
    run.execute(timeout=120)
    summary = run.check()
    print(summary)
    assert summary["maintenance"]["replace_file_references"] > 0, summary
    assert summary["maintenance"]["split_partition"] > 0, summary
    assert run.settle_and_check_files() <= PROPERTIES["compaction.batch_size"]


@pytest.mark.s3
def test_writers_maintainer_and_readers_on_s3(s3_server: str,
                                              s3_store_uri: tuple[str, dict[str, Any]],
                                              tmp_path: Path) -> None:
    uri, options = s3_store_uri
    env = {"AWS_ENDPOINT_URL": s3_server, "AWS_ACCESS_KEY_ID": options["access_key_id"],
           "AWS_SECRET_ACCESS_KEY": options["secret_access_key"],
           "AWS_REGION": options["region"]}
    # fewer batches than on local disk: each ingest and query is a few dozen requests to moto
    run = Run(uri, options, tmp_path, writers=2, batches=5, rows=120, readers=1, env=env,
              maintain_interval=0.2, split_points=["m"], awaits=("replace_file_references",))
    run.execute(timeout=150)
    summary = run.check()
    print(summary)
    assert summary["maintenance"]["replace_file_references"] > 0, summary
    assert run.settle_and_check_files() <= PROPERTIES["compaction.batch_size"]


def test_query_record_check_catches_a_wrong_answer(tmp_path: Path) -> None:
    """The checker itself: a digest matching no version is reported."""
    run = Run(str(tmp_path / "store"), {}, tmp_path, writers=1, batches=1, rows=5,
              readers=1)
    rows = w.batch_rows("w0", 0, 5)
    commits = [(2, rows)]
    bad = {"lo": None, "hi": None, "v0": 1, "v1": 2, "rows": 4, "sorted": True,
           "digest": w.digest(r[2] for r in rows[:4])}
    (tmp_path / "reader-0.jsonl").write_text(json.dumps(bad) + "\n")
    with pytest.raises(AssertionError, match="equals no committed version"):
        run.check_queries(commits)
    assert os.path.exists(tmp_path / "store")


def test_writers_maintainer_and_readers_on_box_partitions(tmp_path: Path) -> None:
    """The same proof on a table of box partitions (partitioning=dimensions) keyed by
    ``(key, ts)``: splits cut either field (the cycle rule), ingest descends the tree, queries
    merge the leaves."""
    run = Run(str(tmp_path / "store"), {}, tmp_path, writers=2, batches=8, rows=150,
              readers=2, maintainers=2,
              properties={"compaction.job_timeout_seconds": 0.5,
                          "partitioning": "dimensions",
                          "partition.split.dimension": "cycle"},
              awaits=("split_partition",))
    run.execute(timeout=120)
    summary = run.check()
    print(summary)
    assert summary["maintenance"]["split_partition"] > 0, summary
    assert run.settle_and_check_files() <= PROPERTIES["compaction.batch_size"]
