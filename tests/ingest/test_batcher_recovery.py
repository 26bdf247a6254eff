"""The batcher never loses a submitted file: a runner SIGKILLed at its AddFiles commit (before or
after the log entry lands), then recovery that fails under S3 503s, a prune and a GC in
between, a recovering run killed after taking its marker, and a job whose log was pruned all
the same. Every time the file's rows land exactly once, or the job is reported, files kept.

Runners and recovering runs are real processes (``batcher_worker.py``), killed with SIGKILL
at a chosen point; S3 goes through ``tests/faultproxy.py``. Expected contents come from the
independent reference in ``reference.py``.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

import sediment as sd
from helpers import rows
from reference import Reference, assert_matches
from sediment.ingest import batcher
from sediment.maintenance.gc import gc
from sediment.state.store import StateStore
from sediment.workload import benchmark_schema

SCHEMA = benchmark_schema()
WORKER = Path(__file__).resolve().with_name("batcher_worker.py")
TIMEOUT = 3600.0  # batcher.job_timeout_seconds (the default)
PROPERTIES = {"batcher.max_age_seconds": 0, "state.snapshot.interval": 2,
              "retention.seconds": 0, "gc.delay_seconds": 0, "gc.clock_skew_seconds": 0,
              "state.cache.refresh_seconds": 0}
"""Nothing but a tag or a pin keeps any version, log entry or file from prune and GC."""


# ---- workers ---------------------------------------------------------------------------------
def run_killed(tmp_path: Path, uri: str, options: dict[str, Any], **args: Any) -> None:
    """Run the batcher in a process that SIGKILLs itself at the point ``args`` name."""
    doc = json.dumps({"uri": uri, "options": options, **args})
    proc = subprocess.run([sys.executable, str(WORKER), doc], capture_output=True, timeout=120,
                          cwd=tmp_path, stdin=subprocess.DEVNULL)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()[-3000:]


# ---- helpers ----------------------------------------------------------------------------------
def ingest(table: sd.Table, ref: Reference, n: int, seed: int) -> None:
    data = rows(n, seed)
    table.ingest(data)
    ref.add(data)


def submit(table: sd.Table, tmp_path: Path, seed: int) -> Any:
    data = rows(80, seed)
    path = tmp_path / f"in-{seed}.parquet"
    pq.write_table(data, path)
    batcher.submit(table, [str(path)])
    return data


def data_keys(table: sd.Table) -> set[str]:
    return {o.key for o in table._handle.objects.list("data/") if not o.key.endswith("/")}


def settled_cleanly(table: sd.Table) -> None:
    """No pin, claim, request or unsettled job is left."""
    assert table.tags() == []
    assert list(table._handle.objects.list(batcher.CLAIMED)) == []
    assert batcher.pending(table) == []
    status = batcher.status(table)
    assert status["running"] == [] and status["unsettled"] == []


# ---- the tests --------------------------------------------------------------------------------
@pytest.mark.s3
@pytest.mark.parametrize("when", ["before", "after"])
def test_runner_killed_at_its_commit_then_recovery_under_503s_and_a_prune(
        when: str, proxied_s3: Any, tmp_path: Path, no_prune_grace: None) -> None:
    proxy = proxied_s3.proxy
    store = proxied_s3.open()
    table = store.create_table("events", SCHEMA, properties=PROPERTIES)
    ref = Reference(SCHEMA)
    ingest(table, ref, 50, 1)
    data = submit(table, tmp_path, 99)

    run_killed(tmp_path, proxied_s3.uri, proxied_s3.direct_options,
               kill_at={"kind": "add_files", "when": when, "nth": 1})
    [job] = batcher.jobs(table)
    assert job["state"] == "staged" and job["files"]
    base, staged = int(job["base_version"]), set(job["files"])
    if when == "after":
        ref.add(data)  # the commit landed before the runner died
    [pin] = table.tags()  # the unsettled job holds its base version and its files
    assert (pin.name, pin.version, set(pin.files)) == (f"batcher-{job['id']}", base, staged)

    # the table moves on and maintenance runs meanwhile: compaction, GC (a day later by its
    # clock, orphans at once), prune with no retention: only the pin holds anything back
    for i in range(2, 4):
        ingest(table, ref, 20, i)
    table.compact(full=True)
    gc(table._handle, now=time.time() + 86400, orphan_timeout=0)
    assert table.prune().log_entries > 0
    assert table._handle.states.earliest_version() <= base
    assert staged <= data_keys(table)  # committed and compacted, or never committed: kept

    # recovery meets 503s reading the job's decision: it settles nothing, reports the job
    late = float(job["updated"]) + TIMEOUT + 1
    rule = proxy.add_rule("status", status=503, method="GET",
                          path=r"/batcher/jobs/[^/]+\.decision$")
    failed = batcher.run(table, now=late)
    proxy.remove_rule(rule)
    assert rule.fired >= 5  # every try botocore made
    assert [o.state for o in failed.recovered] == ["unsettled"] and failed.jobs == ()
    [error] = failed.errors
    assert job["id"] in error and "events" in error and "a later run tries again" in error
    [unsettled] = batcher.status(table)["unsettled"]
    assert unsettled["id"] == job["id"] and unsettled["recovery_attempts"] == 1
    assert [j["state"] for j in batcher.jobs(table)] == ["staged"]
    assert batcher.pending(table) == [] and staged <= data_keys(table)
    assert [t.name for t in table.tags()] == [pin.name]

    # the next run settles it, through 503s its client retries
    noise = proxy.add_rule("status", status=503, method="GET", path=r"/(batcher|log)/",
                           probability=0.15)
    again = batcher.run(table, now=late)
    proxy.remove_rule(noise)
    assert again.errors == ()
    if when == "before":  # never committed: re-queued, and ingested by this run, once
        assert [o.state for o in again.recovered] == ["requeued"]
        assert [o.state for o in again.jobs] == ["committed"]
        ref.add(data)
        assert not staged & data_keys(table)  # the dead runner's files are gone
    else:  # committed: recorded at the version that landed, nothing re-queued
        [o] = again.recovered
        assert o.state == "committed" and base < (o.version or 0) <= table.version
        assert again.jobs == ()
    settled_cleanly(table)
    direct = proxied_s3.open_direct().table("events")
    assert_matches(direct.query(), ref)  # the file's rows exactly once
    assert batcher.run(table, now=late + TIMEOUT).recovered == ()


def test_a_killed_recovering_run_is_taken_over_after_its_marker_expires(tmp_path: Path
                                                                        ) -> None:
    uri = str(tmp_path / "store")
    table = sd.Store.open(uri, create=True).create_table("events", SCHEMA,
                                                         properties=PROPERTIES)
    ref = Reference(SCHEMA)
    ingest(table, ref, 30, 1)
    data = submit(table, tmp_path, 98)
    run_killed(tmp_path, uri, {}, kill_at={"kind": "add_files", "when": "before", "nth": 1})
    [job] = batcher.jobs(table)
    late = float(job["updated"]) + TIMEOUT + 1
    run_killed(tmp_path, uri, {}, now=late, kill_after_marker=True)  # dies holding the marker
    marker = json.loads(table._handle.objects.get(f"batcher/jobs/{job['id']}.recovering"))
    assert marker["owner"] and marker["expires"] == late + TIMEOUT

    held = batcher.run(table, now=late + 60)  # the marker still holds: left to its owner
    assert held.recovered == () and held.errors == () and held.jobs == ()
    taken = batcher.run(table, now=late + TIMEOUT + 1)  # expired: this run takes over
    assert [o.state for o in taken.recovered] == ["requeued"]
    assert [o.state for o in taken.jobs] == ["committed"] and taken.errors == ()
    assert table._handle.objects.exists(f"batcher/jobs/{job['id']}.recovering.1")
    ref.add(data)
    settled_cleanly(table)
    assert_matches(table.query(), ref)


def test_a_marker_written_before_markers_expired_does_not_block_for_ever(tmp_path: Path
                                                                         ) -> None:
    """A run of an earlier version left ``{time, id}``: it holds for the job timeout."""
    table = sd.Store.open(str(tmp_path / "store"), create=True).create_table(
        "events", SCHEMA, properties=PROPERTIES)
    ref = Reference(SCHEMA)
    data = submit(table, tmp_path, 97)
    _crash_at_commit(table)
    [job] = batcher.jobs(table)
    late = float(job["updated"]) + TIMEOUT + 1
    table._handle.objects.put(f"batcher/jobs/{job['id']}.recovering",
                              json.dumps({"time": late, "id": "old"}).encode())
    assert batcher.run(table, now=late).recovered == ()
    assert [o.state for o in batcher.run(table, now=late + TIMEOUT + 1).recovered] == [
        "requeued"]
    ref.add(data)
    settled_cleanly(table)
    assert_matches(table.query(), ref)


def _crash_at_commit(table: sd.Table) -> None:
    """The runner dies as it commits (in this process: the commit raises KeyboardInterrupt)."""
    real = StateStore.commit

    def crash(*args: Any, **kwargs: Any) -> Any:
        raise KeyboardInterrupt("killed at the commit")

    StateStore.commit = crash  # type: ignore[method-assign]
    try:
        with pytest.raises(KeyboardInterrupt):
            batcher.run(table)
    finally:
        StateStore.commit = real  # type: ignore[method-assign]


def test_a_job_no_run_can_settle_is_reported_and_its_files_kept(tmp_path: Path,
                                                                 no_prune_grace: None) -> None:
    """Its pin lapsed (here: let go by hand) and prune took the log after its base version:
    whether it committed cannot be told, so nothing is re-queued or deleted on a guess."""
    table = sd.Store.open(str(tmp_path / "store"), create=True).create_table(
        "events", SCHEMA, properties=PROPERTIES)
    ref = Reference(SCHEMA)
    ingest(table, ref, 30, 1)
    submit(table, tmp_path, 96)
    _crash_at_commit(table)
    [job] = batcher.jobs(table)
    staged, base = set(job["files"]), int(job["base_version"])
    assert table.unpin(f"batcher-{job['id']}")
    for i in range(2, 6):
        ingest(table, ref, 20, i)
    table.prune()
    assert table._handle.states.earliest_version() > base + 1

    late = float(job["updated"]) + TIMEOUT + 1
    for attempt in (1, 2):  # every later run tries, and reports it again
        r = batcher.run(table, now=late)
        assert [o.state for o in r.recovered] == ["unsettled"] and r.jobs == ()
        [error] = r.errors
        assert job["id"] in error and "cannot be settled" in error and "kept" in error
        [unsettled] = batcher.status(table)["unsettled"]
        assert unsettled["recovery_attempts"] == attempt
    # its files are pinned (at a version that loads), so GC keeps them, orphans or not
    [pin] = table.tags()
    assert pin.version == table.version and set(pin.files) == staged
    assert gc(table._handle, now=time.time() + 86400, orphan_timeout=0).unreadable_tags == ()
    assert staged <= data_keys(table)
    claims = [json.loads(table._handle.objects.get(o.key))
              for o in table._handle.objects.list(batcher.CLAIMED)]
    assert [c["job"] for c in claims] == [job["id"]]  # the request is neither lost nor re-run
    assert batcher.pending(table) == [] and batcher.failed_requests(table) == []
    assert_matches(table.query(), ref)

    # from a shell: `batcher run` fails naming it, `batcher status` shows it
    from typer.testing import CliRunner

    from sediment.cli import app

    record = batcher.jobs(table)[0]
    record["updated"] -= 2 * TIMEOUT  # its timeout passed by this machine's clock too
    table._handle.objects.put(f"batcher/jobs/{job['id']}.json", json.dumps(record).encode())
    store = str(tmp_path / "store")
    ran = CliRunner().invoke(app, ["batcher", "run", "events", "--store", store])
    assert ran.exit_code == 1 and "could not be settled" in ran.stderr, ran.output
    assert job["id"] in ran.stderr and "Traceback" not in ran.output
    shown = CliRunner().invoke(app, ["batcher", "status", "events", "--store", store])
    assert shown.exit_code == 0 and "not settled after 3 attempt(s)" in shown.stdout
