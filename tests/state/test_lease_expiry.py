"""Expired pending-file leases: GC records them in the log (ExpireLeases) before deleting what
they protected, and a writer holding files under such a lease refuses to commit them.

The paused-process proof (a real writer SIGSTOPped between its lease check and its append)
is ``tests/proof/test_paused_writer.py``; these are the in-process pieces, each fast.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

import sediment as sd
from helpers import make_table, rows
from sediment.core.transactions import ExpireLeases
from sediment.core.transactions.files import EXPIRED_LEASES_KEPT_SECONDS
from sediment.errors import PropertyError, TransactionInvalidError
from sediment.ingest.standard import commit_staged, stage_batches
from sediment.maintenance.gc import gc
from sediment.state import pending
from sediment.state.store import StateStore


def _stage(table: sd.Table, seed: int) -> list[str]:
    """Write (not commit) one ingest's files; their names."""
    handle = table._handle
    staged = stage_batches(handle, handle.states.head(),
                           (("input", b) for b in rows(300, seed=seed).to_batches()))
    return [w.filename for w in staged.written]


def _lease_of(table: sd.Table) -> str:
    keys = [o.key for o in table._handle.objects.list(pending.PENDING_PREFIX)]
    assert len(keys) == 1, keys
    return pending.lease_id_of(keys[0])


def test_gc_records_a_dead_lease_once_and_commits_nothing_otherwise(tmp_path: Path) -> None:
    table = make_table(tmp_path / "store")
    objects = table._handle.objects
    assert gc(table._handle).did_work is False
    assert table.version == 1, "a pass with no dead lease commits nothing"
    objects.put("pending/0123abcd.json", b'{"writer": "gone:1", "files": ["data/x/y.parquet"]}')
    gc(table._handle)  # the lease is fresh: it protects, and nothing is recorded
    assert table.version == 1
    gc(table._handle, now=time.time() + 2 * 3600)  # its writer stopped long ago
    assert table.version == 2
    assert [h.kind for h in table.history()][-1] == "expire_leases"
    assert set(table.state().expired_leases) == {"0123abcd"}
    assert not objects.exists("pending/0123abcd.json")
    gc(table._handle, now=time.time() + 2 * 3600)
    assert table.version == 2, "a recorded lease is not recorded again"
    # the record survives a snapshot: a writer far behind loads its head from one
    table._handle.states.write_snapshot()
    fresh = StateStore(objects, table._handle.table_id, table.name)
    assert set(fresh.head().expired_leases) == {"0123abcd"}


def test_old_records_are_dropped() -> None:
    from sediment.core.state import TableState

    state = TableState("t")
    ExpireLeases(["old"]).apply(state, 1000.0)
    ExpireLeases(["new"]).apply(state, 1000.0 + EXPIRED_LEASES_KEPT_SECONDS)
    assert dict(state.expired_leases) == {"new": 1000.0 + EXPIRED_LEASES_KEPT_SECONDS}


def test_files_under_a_recorded_lease_are_refused_naming_it(tmp_path: Path) -> None:
    """GC recorded this process's lease (as it does once the lease is dead by the store's
    clock): the staged files are refused, deleted at once, and the next ingest lands under a
    fresh lease."""
    table = make_table(tmp_path / "store")
    handle = table._handle
    staged = stage_batches(handle, handle.states.head(),
                           (("input", b) for b in rows(300, seed=1).to_batches()))
    lease = _lease_of(table)
    handle.states.commit(ExpireLeases([lease]))
    with pytest.raises(TransactionInvalidError, match=f"lease {lease} .*expired"):
        commit_staged(handle, staged, time.perf_counter())
    assert [w.filename for w in staged.written if handle.objects.exists(w.filename)] == []
    assert table.version == 2
    table.ingest(rows(300, seed=2))
    assert table.version == 3
    assert len(table.query()) == 300
    assert not handle.objects.exists(f"pending/{lease}.json"), "retired, never rewritten"


def test_the_record_reaches_a_writer_whose_append_lost_to_it(tmp_path: Path) -> None:
    """The gap itself, in one process: the writer checks its lease, then (as if paused)
    another process's GC records the lease expired at the very version the writer appends;
    the writer's append loses, it re-reads, re-validates and refuses."""
    uri = str(tmp_path / "store")
    table = make_table(uri)
    handle = table._handle
    staged = stage_batches(handle, handle.states.head(),
                           (("input", b) for b in rows(300, seed=1).to_batches()))
    lease = _lease_of(table)
    collector = sd.Store.open(uri).table(table.name)._handle.states  # another process's view
    real_append = handle.states.commits._append
    appends: list[int] = []

    def gc_first(version: int, *args: object) -> bool:
        if not appends:
            collector.commit(ExpireLeases([lease]))  # takes ``version``
        appends.append(version)
        return real_append(version, *args)  # type: ignore[arg-type]

    handle.states.commits._append = gc_first  # type: ignore[method-assign]
    with pytest.raises(TransactionInvalidError, match=f"lease {lease} .*expired"):
        commit_staged(handle, staged, time.perf_counter())
    assert appends == [2], "one append, lost to the record; the re-validation refused"
    assert table.version == 2 and table.state().refcount == {}


def test_a_compaction_job_under_a_recorded_lease_is_refused(tmp_path: Path) -> None:
    """The same gap for a compaction job's commit: the job is reported failed naming the
    lease, its output deleted, and the table keeps its inputs."""
    from sediment.compaction.runner import commit_job, create_jobs, execute_job

    uri = str(tmp_path / "store")
    table = make_table(uri)
    for seed in range(2):
        table.ingest(rows(300, seed=seed))
    handle = table._handle
    before = set(table.state().refcount)
    (job,) = create_jobs(handle, full=True)
    out = execute_job(handle, job, handle.states.head().partitions[job.partition_id].region)
    assert not isinstance(out, str) and out.written is not None
    lease = pending.lease_id_of(next(
        k for k in (o.key for o in handle.objects.list("pending/"))
        if out.written.filename in json.loads(handle.objects.get(k))["files"]))
    collector = sd.Store.open(uri).table(table.name)._handle.states
    real_append = handle.states.commits._append

    def gc_first(version: int, *args: object) -> bool:
        collector.commit(ExpireLeases([lease]))
        handle.states.commits._append = real_append  # type: ignore[method-assign]
        return real_append(version, *args)  # type: ignore[arg-type]

    handle.states.commits._append = gc_first  # type: ignore[method-assign]
    result = commit_job(handle, job, out)
    assert not result.committed and f"lease {lease}" in (result.error or "")
    assert not handle.objects.exists(out.written.filename)
    assert set(table.state().refcount) == before
    assert len(table.query()) == 600


def test_a_lapsed_lease_is_retired_not_renewed(tmp_path: Path) -> None:
    """A process that wakes past its lease timeout (by its own clock) retires the lease: its
    files are refused, its object deleted, and new files go to a fresh lease."""
    table = make_table(tmp_path / "store")
    objects = table._handle.objects
    first = _stage(table, 1)
    lease = _lease_of(table)
    current = pending._leases()[objects.uri]
    current.written = time.monotonic() - pending.LEASE_TIMEOUT_SECONDS
    pending._beat()  # what the heartbeat does when it wakes
    assert not objects.exists(f"pending/{lease}.json")
    assert pending.held(objects, first) == first  # still named: their commit is refused
    assert "lapsed" in (pending.check_fresh(objects, first) or "")
    second = _stage(table, 2)
    assert _lease_of(table) != lease
    assert pending.check_fresh(objects, second) is None
    pending.release(objects, first + second, now=True)
    assert list(objects.list("pending/")) == []


def test_the_lease_timeout_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(pending.LEASE_TIMEOUT_ENV, "3")
    assert pending.lease_timeout() == 3.0
    assert pending.heartbeat_seconds() == pytest.approx(0.2)
    monkeypatch.setenv(pending.LEASE_TIMEOUT_ENV, "soon")
    with pytest.raises(PropertyError, match="SEDIMENT_LEASE_TIMEOUT_SECONDS .*'soon'"):
        pending.lease_timeout()
    monkeypatch.delenv(pending.LEASE_TIMEOUT_ENV)
    assert pending.lease_timeout() == pending.LEASE_TIMEOUT_SECONDS


def test_a_process_that_exits_after_its_commit_leaves_no_lease(tmp_path: Path) -> None:
    """A short-lived writer (a CLI command, a script) exits before its heartbeat would
    delete its emptied lease: the lease is deleted as it exits, so ``sediment doctor`` does
    not find a dead writer's lease after every command."""
    import subprocess
    import sys

    table = make_table(tmp_path / "s")
    script = ("import sys; sys.path.insert(0, 'tests'); import sediment as sd\n"
              "from helpers import rows\n"
              f"t = sd.Store.open({str(tmp_path / 's')!r}).table({table.name!r})\n"
              "t.ingest(rows(20, 1)); t.compact()\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120, check=False, cwd=Path(__file__).parents[2])
    assert done.returncode == 0, done.stderr
    assert table.query().num_rows == 20
    objects = table._handle.objects
    assert [o.key for o in objects.list(pending.PENDING_PREFIX)] == []


def test_an_exit_does_not_wait_on_a_store_that_no_longer_answers(tmp_path: Path) -> None:
    """The leases' deletion at exit is bounded (``EXIT_SECONDS``): a store that no longer
    answers (an S3 endpoint gone before the process) would hold the exit for every retry
    and backoff of its client; the lease's timeout settles what is left."""
    import subprocess
    import sys

    table = make_table(tmp_path / "s")
    script = ("import sys, time; sys.path.insert(0, 'tests'); import sediment as sd\n"
              "from helpers import rows\n"
              "from sediment.state import pending\n"
              f"t = sd.Store.open({str(tmp_path / 's')!r}).table({table.name!r})\n"
              "t.ingest(rows(20, 1))\n"
              "pending._Lease.write = lambda self: time.sleep(600)  # a store that hangs\n")
    # without the bound, the exit waits out the hang: TimeoutExpired
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120, check=False, cwd=Path(__file__).parents[2])
    assert done.returncode == 0, done.stderr
