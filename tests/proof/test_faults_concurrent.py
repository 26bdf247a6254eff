"""Concurrency under network faults: writer, reader and ``sediment maintain --loop`` processes
reach the S3 server only through the fault proxy (tests/faultproxy.py), which at random
(seeded) loses responses of writes that happened, resets connections, answers 503, delays,
and flips a byte of 0.5% of read answers (``corruption_fault_specs``, issue 38).

Model checks afterwards, on a handle opened directly on the server:

- every acknowledged ingest's records are present exactly once, no failed ingest's record is
  present, and nothing else is (``writers`` record their outcome per batch);
- every ingest claims its own version, and the log holds no AddFiles no writer acknowledged;
- every version of the log is readable, its content equal to the acknowledged ingests at or
  before it (every file of every version exists: GC keeps old versions here);
- every query answered during the run equals the table at a version committed while it ran
  (queries may fail under faults; a wrong answer may not);
- after ``maintain`` + ``gc`` without faults nothing is left over and the content is kept.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import test_concurrent_processes as tcp
import workers as w

import sediment as sd
from faultproxy import ProxiedS3, corruption_fault_specs, random_fault_specs

pytestmark = [pytest.mark.s3, pytest.mark.slow]

SEED = 11


class FaultyRun(tcp.Run):
    """tcp.Run through the proxy, with failed ingests allowed (but checked to be absent)."""

    def committed_and_failed(self) -> tuple[list[tuple[int, list[w.Row]]], list[w.Row]]:
        commits: list[tuple[int, list[w.Row]]] = []
        failed: list[w.Row] = []
        for i in range(self.writers):
            done, errors, unfinished = w.read_ingest_log(self.tmp / f"writer-{i}.jsonl")
            assert unfinished is None and len(done) + len(errors) == self.batches
            commits.extend((v, w.batch_rows(f"w{i}", b, self.rows)) for b, v in done.items())
            for b in errors:
                failed.extend(w.batch_rows(f"w{i}", b, self.rows))
        commits.sort(key=lambda c: c[0])
        return commits, failed

    def model_check(self, direct: dict[str, Any]) -> dict[str, Any]:
        commits, failed = self.committed_and_failed()
        versions = [v for v, _ in commits]
        assert len(set(versions)) == len(versions), "two ingests claim one version"
        table = sd.Store.open(self.uri, **direct).table(w.TABLE)
        expected = Counter(r for _, rows in commits for r in rows)
        got = Counter(w.rows_of(table.query()))
        lost, extra = expected - got, got - expected
        failed_present = sum(1 for r in failed if got[r])
        assert not lost and not extra, (
            f"{sum(lost.values())} acknowledged records lost, {sum(extra.values())} "
            f"duplicated or unexpected ({failed_present} of them from failed ingests)")
        history = table.history()
        kinds = {e.version: e.kind for e in history}
        for v in versions:
            assert kinds.get(v) == "add_files", f"ingest acknowledged at {v}: a {kinds.get(v)}"
        unclaimed = [v for v, k in kinds.items() if k == "add_files" and v not in versions]
        assert not unclaimed, f"AddFiles at versions {unclaimed} acknowledged by no writer"
        checker = w.QueryChecker(commits)
        present = {o.key for o in table._handle.objects.list("data/")}
        for e in history:  # every version readable, with the right content
            missing = [r.filename for r in table.files(version=e.version)
                       if r.filename not in present]
            assert not missing, f"version {e.version} references missing files {missing[:3]}"
            res = table.query(version=e.version)
            assert w.digest(res.column("value").to_pylist()) == \
                checker.digest_at(e.version, None, None), f"version {e.version} reads wrong"
        wrong, errors, answered = [], 0, 0
        for i in range(self.readers):
            path = self.tmp / f"reader-{i}.jsonl"
            for line in path.read_text().splitlines() if path.exists() else []:
                q = json.loads(line)
                if "error" in q:
                    errors += 1
                    continue
                problem = checker.check(q)
                answered += 1
                if problem:
                    wrong.append(problem)
        assert not wrong, f"{len(wrong)} wrong answers, e.g. {wrong[:3]}"
        assert answered > 0, f"no query answered ({errors} failed)"
        return {"records": sum(expected.values()), "acknowledged": len(commits),
                "failed_ingests": len(failed) // max(1, self.rows), "versions": table.version,
                "queries": answered, "query_errors": errors,
                "transactions": dict(Counter(kinds.values()))}


def test_writers_maintainer_and_readers_through_faults(proxied_s3: ProxiedS3,
                                                       tmp_path: Path) -> None:
    s3 = proxied_s3
    proxy = s3.proxy
    proxy._rng.seed(SEED * w.SCALE)
    run = FaultyRun(s3.uri, s3.options, tmp_path, writers=2, batches=6 * w.SCALE, rows=80,
                    readers=1, env=s3.env(), maintain_interval=0.2, split_points=["m"])
    # one certain ambiguous commit (the third log-entry PUT's answer lost) before the random
    # mix: at p=0.15 over some 20 log PUTs, the random rule alone injects none in ~4% of runs
    certain = {"action": "drop_response", "method": "PUT", "path": r"/log/\d{20}\.json$",
               "skip": 2, "count": 1, "name": "lost log-entry answer (certain)"}
    # and one certain flipped byte in a ranged data-file read and in a log entry's read
    flips = [{"action": "corrupt", "path": r"/data/.*\.parquet$", "ranged": True, "skip": 5,
              "count": 1, "name": "corrupt data read (certain)"},
             {"action": "corrupt", "path": r"/log/\d{20}\.json$", "ranged": False, "skip": 5,
              "count": 1, "name": "corrupt log read (certain)"}]
    proxy.add_rules([certain, *flips, *random_fault_specs(), *corruption_fault_specs()])
    try:
        run.execute(timeout=240 * w.SCALE)
    finally:
        counts = dict(proxy.counts)
        rules = {r.name: r.fired for r in proxy.rules}
        proxy.clear()
    print(json.dumps({"proxy": counts, "rules": rules}))
    assert rules["lost log-entry answer (certain)"] == 1, "no ambiguous commit was injected"
    assert rules["corrupt data read (certain)"] == rules["corrupt log read (certain)"] == 1
    summary = run.model_check(s3.direct_options)
    print(json.dumps(summary))
    run.options = s3.direct_options
    assert run.settle_and_check_files() <= tcp.PROPERTIES["compaction.batch_size"]


def test_one_writer_every_log_answer_lost(proxied_s3: ProxiedS3, tmp_path: Path) -> None:
    """Every log entry's answer is lost (each commit is ambiguous) for one writer process and
    the maintainer: every commit must still be recognised as its writer's own.

    Two tries a request (``AWS_MAX_ATTEMPTS``): the client's retries of a lost answer find the
    entry taken, their answers lost too, so every commit is resolved by reading it back
    whatever the retries; five retries only backed off up to 31 s a commit before it."""
    s3 = proxied_s3
    run = FaultyRun(s3.uri, s3.options, tmp_path, writers=1, batches=3, rows=60, readers=1,
                    env={**s3.env(), "AWS_MAX_ATTEMPTS": "2"}, maintain_interval=0.2,
                    split_points=["m"])
    rule = s3.proxy.add_rule("drop_response", method="PUT", path=r"/log/\d{20}\.json$")
    try:
        run.execute(timeout=180)
    finally:
        s3.proxy.clear()
    assert rule.fired >= 5
    summary = run.model_check(s3.direct_options)
    assert summary["failed_ingests"] == 0, summary
    print(json.dumps({"lost answers": rule.fired, **summary}))
