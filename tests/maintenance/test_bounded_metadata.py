"""Bounded metadata (issue 46 item 1): the maintainer prunes the log and snapshots past
``retention.seconds`` (never below a tag), job events past ``status.retention.seconds`` are
rolled up into totals and deleted, and ``history(limit=N)`` reads only the newest entries."""

from __future__ import annotations

import collections
import functools
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import helpers
from helpers import rows
from reference import Reference, assert_matches
from sediment.maintenance.continuous import Maintainer
from sediment.state.log import LOG_PREFIX
from sediment.state.snapshot import SNAPSHOT_PREFIX
from sediment.status.events import ROLLUP_PREFIX, STATUS_PREFIX, StatusStore

SCHEMA = helpers.SCHEMA
make_table = functools.partial(helpers.make_table, **{"state.snapshot.interval": 5})


def keys(table: Any, prefix: str) -> list[str]:
    return sorted(o.key for o in table._handle.objects.list(prefix))


def ingest(table: Any, ref: Reference, n: int, seed: int) -> None:
    data = rows(n, seed)
    table.ingest(data)
    ref.add(data)


def age(table: Any, prefix: str, seconds: float) -> None:
    """Make every object under ``prefix`` (local disk) ``seconds`` older: what a table that
    has run that long looks like to a prune, without waiting."""
    root = Path(table._handle.objects.local_path(prefix))
    then = time.time() - seconds
    for p in root.rglob("*"):
        if p.is_file():
            os.utime(p, (then, then))


def test_history_limit_reads_only_the_newest_entries(tmp_path: Path) -> None:
    table = make_table(tmp_path)
    for i in range(12):
        table.ingest(rows(10, i))
    whole = table.history()
    assert [e.version for e in whole] == list(range(1, 14))
    listed: list[int] = []
    log = table._handle.states.log
    versions_after = log.versions_after

    def spy(version: int) -> list[int]:
        listed.append(version)
        return versions_after(version)

    log.versions_after = spy  # type: ignore[method-assign]
    assert table.history(limit=5) == whole[-5:]
    assert listed == [13 - 5]  # listed from the head less the limit, not from the start
    assert table.history(limit=0) == []
    assert table.history(limit=100) == whole


def test_status_events_roll_up_into_totals_and_expire(tmp_path: Path) -> None:
    table = make_table(tmp_path)
    status = StatusStore(table._handle.objects)
    t0 = time.time()
    for i in range(6):
        status.record("compaction", f"j{i}", "created", records_in=10 + i)
        status.record("compaction", f"j{i}", "committed" if i % 2 else "failed")
    old = list(status.events("compaction"))
    expected = collections.Counter(e.status for e in old)
    records_in = sum(e.details.get("records_in", 0) for e in old)
    result = status.expire(0.0)
    assert result.events == len(old)
    assert not keys(table, f"{STATUS_PREFIX}compaction/")
    total = status.rollup("compaction")
    assert total.counts == dict(expected)
    assert total.sums["created"]["records_in"] == records_in
    # new events are kept within the window; a second expiry adds to the totals once
    status.record("compaction", "j9", "failed", reason="boom")
    assert status.expire(3600.0).events == 0
    assert [e.job_id for e in status.events("compaction")] == ["j9"]
    r = status.expire(0.0, now=time.time() + 1)
    assert (r.events, r.rollups) == (1, 1)
    assert status.rollup("compaction").counts == {**expected, "failed": expected["failed"] + 1}
    assert len(keys(table, f"{ROLLUP_PREFIX}compaction/")) == 1
    assert t0 < status.rollup("compaction").until


def test_the_maintainer_prunes_the_log_but_never_below_a_tag(tmp_path: Path,
                                                           no_prune_grace: None) -> None:
    table = make_table(tmp_path, **{"retention.seconds": 0, "status.retention.seconds": 0,
                                    "gc.delay_seconds": 0, "gc.clock_skew_seconds": 0})
    ref = Reference(SCHEMA)
    for i in range(8):
        ingest(table, ref, 20, i)
    table.tag("keep", table.version)
    tagged = ref.upto(8)
    tagged_version = table.version
    for i in range(8, 30):
        ingest(table, ref, 20, i)
    logs_before = len(keys(table, LOG_PREFIX))
    m = Maintainer(lambda: [table], threads=1, gc_every=0.0)
    m.tick()
    m.close()
    logs = keys(table, LOG_PREFIX)
    assert len(logs) < logs_before
    earliest = table._handle.states.earliest_version()
    assert 1 < earliest <= tagged_version  # pruned, down to the tag
    assert len(keys(table, SNAPSHOT_PREFIX)) <= (table.version - earliest) // 5 + 2
    assert_matches(table.query(), ref)
    assert_matches(table.query(version="keep"), tagged)
    assert [e.version for e in table.history()][-1] == table.version


@pytest.mark.slow  # a maintainer process: the full lane
def test_a_maintainer_process_bounds_log_snapshots_and_events(tmp_path: Path) -> None:
    """``sediment maintain --loop`` on a table whose log is a day old: it prunes to the last
    snapshot and rolls every event up, and the table reads the same."""
    table = make_table(tmp_path, **{"retention.seconds": 0, "status.retention.seconds": 0,
                                    "compaction.strategy": "basic",
                                    "compaction.batch_size": 4})
    ref = Reference(SCHEMA)
    for i in range(21):
        ingest(table, ref, 20, i)
    table.compact()
    events = len(keys(table, f"{STATUS_PREFIX}compaction/"))
    assert events
    age(table, LOG_PREFIX, 86400)
    age(table, "snapshots/", 86400)
    age(table, "objects/", 86400)
    head = table.version
    proc = subprocess.run(
        [sys.executable, "-m", "sediment.cli", "maintain", "--store", str(tmp_path), "--loop",
         "--interval", "0.3", "--max-loops", "2", "--workers", "thread", "--json"],
        capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    logs = keys(table, LOG_PREFIX)
    # every entry at or below the newest snapshot at the head's time went: the log holds
    # at most a snapshot interval of entries plus what the maintainer itself committed
    assert len(logs) <= 5 + (table.version - head)
    assert len(keys(table, SNAPSHOT_PREFIX)) <= 2
    rolled = StatusStore(table._handle.objects).rollup("compaction")
    assert sum(rolled.counts.values()) >= events
    assert len(keys(table, f"{STATUS_PREFIX}compaction/")) < events
    assert_matches(table.query(), ref)
    assert '"pruned"' in proc.stdout
