"""The maintainer's batcher lane on its own clock: a table's queue is looked at again the
moment its waiting group comes of age (``DueBatches.next_due``), not a polling period later.

In process, on local disk: the lane is the maintainer's (``sediment.maintenance.batching``),
given a table as the maintainer's tick would; the rows are checked against ``reference.py``.
"""

from __future__ import annotations

import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from helpers import make_table, rows
from reference import Reference, assert_matches
from sediment.handle import handle_of
from sediment.ingest import batcher
from sediment.maintenance import batching
from sediment.maintenance.batching import BatcherLane


def test_due_says_when_the_waiting_group_comes_of_age(tmp_path: Path) -> None:
    table = make_table(tmp_path / "store", **{"batcher.max_age_seconds": 30,
                                              "batcher.max_files": 3})
    path = tmp_path / "in.parquet"
    pq.write_table(rows(10, seed=1), path)
    batcher.submit(table, [str(path)], now=1000.0)
    batcher.submit(table, [str(path)], now=1005.0)
    d = batcher.due(table, now=1010.0)
    assert (d.batches, d.waiting, d.next_due) == ((), 2, 1030.0)
    # a full group is released at once; the one left waits from its own oldest request
    for at in (1011.0, 1012.0):
        batcher.submit(table, [str(path)], now=at)
    d = batcher.due(table, now=1013.0)
    assert [b.files for b, _ in d.batches] == [3]
    assert (d.waiting, d.next_due) == (1, 1042.0)
    assert batcher.due(table, now=1043.0).next_due is None  # released: nothing waits


def test_the_lane_starts_a_group_when_it_comes_of_age(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    # a polling period far longer than the test: only the group's own due time can start it
    monkeypatch.setattr(batching, "CHECK_SECONDS", 60.0)
    max_age = 0.5
    table = make_table(tmp_path / "store", **{"batcher.max_age_seconds": max_age})
    ref = Reference(table.schema)
    data = rows(50, seed=2)
    ref.add(data)
    path = tmp_path / "in.parquet"
    pq.write_table(data, path)
    errors: list[str] = []
    lane = BatcherLane(1, note=lambda t, e: errors.append(f"{t}: {e}"))
    try:
        submitted = time.time()
        batcher.submit(table, [str(path)], now=submitted)
        lane.hold([handle_of(table)])  # the first look finds the group not yet of age
        deadline = time.monotonic() + 20
        while sum(f.records for f in table.files()) < data.num_rows:
            assert time.monotonic() < deadline, "the group was not ingested in 20 s"
            time.sleep(0.02)
        visible = time.time() - submitted
    finally:
        lane.close()
    assert not errors
    # not before it came of age, and long before the next polling period
    assert max_age <= visible < max_age + 5, visible
    assert_matches(table.query(), ref)


def test_an_idle_queue_is_looked_at_less_often_up_to_half_its_max_age() -> None:
    idle = batcher.DueBatches((), (), 0, None, max_age=300.0)
    waits = [batching.CHECK_SECONDS]
    for _ in range(10):
        waits.append(batching.next_wait(waits[-1], idle))
    assert waits[:4] == [0.5, 1.0, 2.0, 4.0]
    assert waits[-1] == batching.IDLE_CHECK_MAX_SECONDS  # capped (half of 300 s is more)
    short = batcher.DueBatches((), (), 0, None, max_age=3.0)
    assert batching.next_wait(8.0, short) == 1.5  # a request seen then is planned in time
    assert batching.next_wait(8.0, batcher.DueBatches((), (), 0, None, max_age=0.0)) == 0.5
    waiting = batcher.DueBatches((), (), 1, 1030.0, max_age=300.0)
    assert batching.next_wait(30.0, waiting) == batching.CHECK_SECONDS  # work: back to busy


def test_a_look_at_a_queue_reads_only_documents_it_has_not_seen(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Requests and finished jobs never change: a look reads each once per process, so an
    idle queue's look is its listings (it read every kept job record, twice a look)."""
    from sediment.ingest import batcher_store

    table = make_table(tmp_path / "store", **{"batcher.max_age_seconds": 0})
    path = tmp_path / "in.parquet"
    pq.write_table(rows(10, seed=3), path)
    for _ in range(3):
        batcher.submit(table, [str(path)])
        assert [o.state for o in batcher.run(table).jobs] == ["committed"]
    reads: list[str] = []
    real = batcher_store.read_json
    monkeypatch.setattr(batcher_store, "read_json",
                        lambda t, key: reads.append(key) or real(t, key))
    batcher.due(table)  # this process ran the jobs: it may still read their last records
    reads.clear()
    d = batcher.due(table)
    assert (d.batches, d.waiting, d.recovered, reads) == ((), 0, (), [])
    assert [j["state"] for j in batcher.jobs(table)] == ["committed"] * 3
    batcher.submit(table, [str(path)], now=time.time() + 60)  # not yet of age
    d = batcher.due(table, now=time.time())
    assert d.waiting == 1 and [k.split("/")[1] for k in reads] == ["requests"]
    assert batcher.status(table)["pending"]["requests"] == 1
