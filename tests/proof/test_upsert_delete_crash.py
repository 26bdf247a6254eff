"""kill -9 during upserts and deletes: a worker process upserting, deleting by keys, ranges
and filters (and compacting leaves with pending deletions) is SIGKILLed at random points and
at chosen ones (just before and just after it writes the log entry of its operation, i.e.
mid-commit); on local disk and on the moto S3 server.

After each kill the table reads exactly the operations that committed, in order (the
reference of keyed_workers.py), never part of one: the committed ones are the first ``n``
of the worker's sequence, ``n`` read from the table's history (one log entry each). Then the
client's retry converges: operation ``n - 1`` run again (it may have been the one in flight
when the kill came after its commit) changes nothing (unless it is an ingest: that one is no
retry of the same records), and operation ``n`` (in flight, or not
yet started) run once gives the reference with it applied. Last, ``maintain`` + ``gc`` leave
no file behind and settle every deletion, and the content is unchanged.

The harness is test_crash.py's (its workers started one ahead, its kill and clean-up
checks), with keyed_workers.py's crash worker and reference.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import keyed_workers as kw
import pytest
import test_crash as tc
import workers as w

import sediment as sd

COMMITS = {"add_files", "delete_records"}


class KeyedHarness(tc.Harness):
    """test_crash's Harness over keyed operations: ``kinds`` is the cycle of operations the
    workers run; ``self.ref`` the reference (the base batches, then each committed op)."""

    def __init__(self, uri: str, options: dict[str, Any], tmp: Path, kinds: list[str], *,
                 properties: dict[str, Any] | None = None, seed: int = 0,
                 compact_every: int = 0) -> None:
        super().__init__(uri, options, tmp, "keyed", properties, seed)
        self.kinds = kinds
        self.compact_every = compact_every
        self.ref = kw.Reference(r for b in range(3) for r in w.batch_rows("base", b, tc.ROWS))
        self.committed_ops = 0
        self.retried = 0

    def spawn(self, **extra: Any) -> dict[str, Any]:
        self.iteration += 1
        folder = self.tmp / f"it-{self.iteration:03d}"
        folder.mkdir()
        args = {"uri": self.uri, "options": self.options, "kinds": self.kinds,
                "compact_every": self.compact_every, "writer": f"w{self.iteration}",
                "rows": tc.ROWS, "ready": str(folder / "ready"), "go": str(folder / "go"),
                **extra}
        log = open(folder / "worker.log", "wb")  # noqa: SIM115 - closed in run()
        proc = subprocess.Popen(kw.command("crash", args), env=w.worker_env(), stdout=log,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        return {"proc": proc, "args": args, "folder": folder, "log": log}

    def nth_op(self, worker: dict[str, Any], i: int) -> kw.Op:
        return kw.make_op(worker["args"]["writer"], i, self.kinds, rows=tc.ROWS)

    def check_after_kill(self, worker: dict[str, Any], before: int) -> sd.Table:
        table = sd.Store.open(self.uri, **self.options).table(w.TABLE)
        n = sum(1 for e in table.history() if e.version > before and e.kind in COMMITS)
        for i in range(n):
            self.ref.apply(self.nth_op(worker, i))
        self.committed_ops += n
        self.assert_content(table)
        missing = [f for f in table.state().refcount if not table._handle.objects.exists(f)]
        assert not missing, f"after a kill, referenced files are missing: {missing}"
        # the client retries: what may have been in flight, then what was next
        if n and (last := self.nth_op(worker, n - 1)).kind != "ingest":  # not idempotent
            last.run(table)
            self.assert_content(table)
        nxt = self.nth_op(worker, n)
        nxt.run(table)
        self.ref.apply(nxt)
        self.assert_content(table)
        self.retried += 1
        return table

    def assert_content(self, table: sd.Table, version: int | None = None) -> None:
        want = self.ref.content()
        got = w.rows_of(table.query(version=version))
        if got != want:
            lost = set(want) - set(got)
            extra = set(got) - set(want)
            raise AssertionError(f"{len(lost)} records lost ({sorted(lost)[:3]}), "
                                 f"{len(extra)} unexpected ({sorted(extra)[:3]}), "
                                 f"{len(got)} read, {len(want)} expected")
        for lo, hi in (("a", "g"), ("g", "p"), ("h", None), (None, "c")):
            part = w.rows_of(table.query(ranges=[sd.Range(lo, hi)], version=version))
            assert part == [r for r in want if w.in_range(r[0], lo, hi)], \
                f"range [{lo}, {hi}) differs from the reference"


def _settled(h: KeyedHarness) -> None:
    table = h.clean_up_and_check()
    state = table.state()
    assert not state.deletions, \
        f"deletions still pending after maintain: {[d.to_json() for d in state.deletions]}"
    assert h.committed_ops > 0 and h.retried == h.kills


UPSERTS = ["upsert", "upsert", "ingest"]
MIXED = ["upsert", "delete_keys", "ingest", "delete_range", "upsert", "delete_filter"]


def test_kill_during_upsert(tmp_path: Path) -> None:
    h = KeyedHarness(str(tmp_path / "store"), {}, tmp_path, UPSERTS, seed=21)
    tc.run_kill_points(h, [{"kind": "add_files", "when": "before", "nth": 2},
                           {"kind": "add_files", "when": "after", "nth": 1}])
    tc.run_random_kills(h, 2, 1.5)
    _settled(h)


def test_kill_during_delete(tmp_path: Path) -> None:
    """Deletes of each kind among upserts and ingests, a compaction after every third
    operation: kills before and after a delete's log entry, and before and after a
    compaction that applies pending deletions commits."""
    h = KeyedHarness(str(tmp_path / "store"), {}, tmp_path, MIXED, seed=22, compact_every=3)
    tc.run_kill_points(h, [{"kind": "delete_records", "when": when, "nth": nth}
                           for when, nth in (("before", 1), ("after", 2))]
                       + [{"kind": "replace_file_references", "when": when, "nth": 1}
                          for when in ("before", "after")])
    tc.run_random_kills(h, 2, 1.5)
    _settled(h)


def test_kill_during_purge(tmp_path: Path) -> None:
    """Purges among upserts and ingests: kills before and after a purge's delete, and
    before and after its rewrite (every file holding a purged record, one commit); a purge
    killed between the two leaves the records deleted from every read, and its retry
    rewrites the files."""
    h = KeyedHarness(str(tmp_path / "store"), {}, tmp_path,
                     ["upsert", "purge_keys", "ingest", "purge_keys"], seed=24)
    tc.run_kill_points(h, [{"kind": "delete_records", "when": "after", "nth": 1},
                           {"kind": "replace_file_references_batch", "when": "before",
                            "nth": 1},
                           {"kind": "replace_file_references_batch", "when": "after",
                            "nth": 1}])
    tc.run_random_kills(h, 1, 1.5)
    _settled(h)


@pytest.mark.s3
def test_kill_during_upsert_and_delete_on_s3(s3_store_uri: tuple[str, dict[str, Any]],
                                             tmp_path: Path) -> None:
    uri, options = s3_store_uri
    h = KeyedHarness(uri, options, tmp_path, MIXED, seed=23, compact_every=3)
    # the kill points local disk does not cover the same way (an S3 PUT, not a rename,
    # commits): around a delete's entry and a compaction's (the local tests take the rest)
    tc.run_kill_points(h, [{"kind": "delete_records", "when": "before", "nth": 1},
                           {"kind": "replace_file_references", "when": "after", "nth": 1}])
    tc.run_random_kills(h, 1, 3.0)
    _settled(h)
