"""An operation reads a table's head once and passes it down: counted reads of the log (each a
round trip on S3) and calls of ``StateStore.head`` stay a small constant, and the commit loop
reads the log again only when another writer took the version it tried.

Measured on the table below before the head was passed down (calls of the head, GETs of log
slots): a 4-job compaction pass 24 and 15, an ingest 3 and 3, ``Table.maintain`` 43 and 33, GC
3 and 3, a dump 24 and 15; after: 1 and 1 each, ``Table.maintain`` 5 and 4
(tests/support/counting.py counts them).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

import sediment as sd
from helpers import SCHEMA, rows
from sediment.handle import handle_of
from sediment.ingest.standard import ingest_files
from support.counting import CountingMemoryStore, StateReads, count_head_calls
from support.races import as_another_process


@pytest.fixture
def counted() -> Iterator[tuple[sd.Table, StateReads]]:
    """A table of four leaves, each holding two files (four jobs of two files are due), in a
    store whose log reads are counted."""
    reads = StateReads()
    store = sd.Store(CountingMemoryStore(f"heads-{uuid.uuid4().hex}", reads), {})
    data = rows(800, 1)
    keys = sorted(data.column("key").to_pylist())
    table = store.create_table("t", SCHEMA, split_points=[keys[200], keys[400], keys[600]],
                               properties={"compaction.strategy": "basic",
                                           "compaction.batch_size": 2,
                                           "compaction.threads": 4})
    table.ingest(data)
    table.ingest(rows(800, 2))
    reads.reset()
    with count_head_calls(reads):
        yield table, reads


def test_an_uncontended_four_job_compaction_pass_reads_the_head_once(
        counted: tuple[sd.Table, StateReads]) -> None:
    table, reads = counted
    result = table.compact()
    assert result.jobs_committed == 4
    assert reads.log_reads <= 3, reads  # 15 before
    assert reads.head_calls <= 1, reads  # 24 before


def test_an_ingest_reads_one_log_slot(counted: tuple[sd.Table, StateReads]) -> None:
    table, reads = counted
    table.ingest(rows(100, 3))
    assert reads.log_reads <= 1, reads  # 3 before
    assert reads.head_calls <= 1, reads  # 3 before


def test_a_maintenance_pass_reads_the_head_once_per_step_that_needs_it(
        counted: tuple[sd.Table, StateReads]) -> None:
    """A pass reads the head at its start and GC its own (after listing the files: its
    order); a pass's own commits are in this process's cached head."""
    table, reads = counted
    result = table.maintain(orphan_timeout=0)
    assert result.jobs_committed == 4 and result.passes == 2
    assert reads.log_reads <= 3 * result.passes, reads  # 33 before
    # and the metadata prune that ends a one-off maintain its own
    assert reads.head_calls <= 3 * result.passes + 1, reads  # 43 before


@pytest.mark.parametrize("operation", ["gc", "dump"])
def test_gc_and_a_dump_read_the_head_once(counted: tuple[sd.Table, StateReads],
                                          operation: str) -> None:
    table, reads = counted
    if operation == "gc":
        table.gc()
    else:
        table.dump(f"memory://dump-{uuid.uuid4().hex}")
    assert reads.log_reads <= 1, reads  # 3 (GC), 15 (dump) before
    assert reads.head_calls <= 1, reads  # 3, 24 before


def test_the_commit_loop_reads_the_log_again_on_a_conflict(
        counted: tuple[sd.Table, StateReads], tmp_path: Path) -> None:
    """Another writer commits between an ingest's read of the head and its commit: the commit
    loses the version, reads the entry that took it, and commits after it."""
    table, reads = counted
    other = as_another_process(table.store.table("t"))  # as another process's
    before = other.version
    path = str(tmp_path / "in.parquet")
    pq.write_table(rows(50, 4), path)

    def meanwhile(_: object) -> None:
        other.set_properties({"compaction.batch_size": 3})
        reads.reset()

    result = ingest_files(table._handle, [path], before_commit=meanwhile)
    assert result.version == before + 2  # after the other writer's
    assert reads.log_entries_read >= 1, reads  # the entry that took the version
    assert table.query().num_rows == 1650


def test_readers_of_an_expired_head_share_one_reread(
        counted: tuple[sd.Table, StateReads], monkeypatch: pytest.MonkeyPatch) -> None:
    """Eight readers find the cached head past its age limit at once (the herd of puts after
    an idle spell): one reads the log (slowly here), the others take what it read."""
    table, reads = counted
    # a limit far above the threads' start on a loaded machine: a reader joins a re-read
    # that started within it, so all eight must arrive within it of the first
    table.set_properties({"state.cache.refresh_seconds": 0.5})
    states = handle_of(table).states
    version = states.cached_head().version
    time.sleep(0.6)  # expired
    real = CountingMemoryStore.head

    def slow(self: CountingMemoryStore, key: str) -> Any:
        time.sleep(0.2)
        return real(self, key)

    monkeypatch.setattr(CountingMemoryStore, "head", slow)
    reads.reset()
    got: list[int] = []
    threads = [threading.Thread(target=lambda: got.append(states.cached_head().version))
               for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == [version] * 8
    assert reads.log_checks == 1 and reads.log_misses == 1, reads  # one probe: 8 before


def test_every_handle_of_a_table_in_a_process_sees_its_commits_at_once(tmp_path: Path) -> None:
    """Handles of one table in one process (the application's ``Table``, another from
    ``store.table``, a Spark writer's on the driver) share the newest head any of them
    read or committed: a commit through one is in every other's next read at once, however
    long ``state.cache.refresh_seconds`` (this process's own commits show at once); another
    process's commits still wait for a re-read."""
    store = sd.Store.open(str(tmp_path / "s"), create=True)
    mine = store.create_table("t", SCHEMA, properties={"state.cache.refresh_seconds": 3600})
    mine.ingest(rows(10, 1))
    assert mine.query().num_rows == 10  # the head is cached now, for an hour
    other = sd.Store.open(str(tmp_path / "s")).table("t")
    other.ingest(rows(5, 2))
    assert mine.version == other.version
    assert mine.query().num_rows == 15
    other.delete(keys=[r["key"] for r in rows(5, 2).to_pylist()])
    assert mine.query().num_rows == 10 and mine.version == other.version
    # the handles' caches are their own: a stale one reads what it had when the other is gone
    del other
    assert mine.query().num_rows == 10
