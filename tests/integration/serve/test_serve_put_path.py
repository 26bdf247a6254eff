"""What a put meets in the server before its group commits, in-process: the catalog entry of
its table (one request re-reads an expired entry while the others keep it) and the spacing
between groups (the rate, stretched while compaction falls behind in a leaf)."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

import sediment as sd
from helpers import make_table, rows
from sediment.core.state import ROOT_PARTITION_ID
from sediment.core.transactions.jobs import AssignJobIds, JobAssignment
from sediment.handle import handle_of
from sediment.serve.puts import CROWDED_STRETCH, GroupedPuts
from sediment.serve.server import SedimentFlightServer


def test_one_request_rereads_an_expired_catalog_entry(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Eight puts find the table's entry expired at once: one reads the catalog again (slowly
    here), the seven others are answered from the entry they had, at once."""
    store = sd.Store.open(str(tmp_path / "s"), create=True)
    table = make_table(store, name="events")
    server = SedimentFlightServer(store, "grpc://127.0.0.1:0")
    try:
        assert server.table("events").table_id == table.table_id
        real = sd.Store.table
        reads: list[float] = []

        def slow(self: sd.Store, name: str) -> Any:
            reads.append(time.monotonic())
            time.sleep(1.0)  # far above the threads' start on a loaded machine
            return real(self, name)

        monkeypatch.setattr(sd.Store, "table", slow)
        server._refresh = 0.0  # every entry expired
        took: list[float] = []
        lock = threading.Lock()

        def open_it() -> None:
            began = time.monotonic()
            assert server.table("events").table_id == table.table_id
            with lock:
                took.append(time.monotonic() - began)

        threads = [threading.Thread(target=open_it) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(reads) == 1
        assert sorted(took)[:7] == pytest.approx([0.0] * 7, abs=0.5)
        assert max(took) >= 1.0
    finally:
        server.shutdown()


def test_the_spacing_is_the_rate_stretched_while_a_leaf_is_crowded(tmp_path: Path) -> None:
    """1 / write.group_commit_max_rate while every leaf holds at most half a compaction
    batch; past that, stretched linearly up to CROWDED_STRETCH times at the batch size and
    beyond; 0 (no limit) with a rate of 0."""
    table = make_table(tmp_path / "s", **{"compaction.batch_size": 4,
                                          "write.group_commit_max_rate": 5.0})
    spacing = []
    for i in range(6):
        spacing.append(GroupedPuts.spacing_of(table.state()))
        table.ingest(rows(3, i))
    assert spacing[:3] == [0.2, 0.2, 0.2]  # 0, 1, 2 files: calm (half of 4)
    assert spacing[3] == pytest.approx(0.2 * (1 + (CROWDED_STRETCH - 1) / 2))  # 3 files
    assert spacing[4] == spacing[5] == pytest.approx(0.2 * CROWDED_STRETCH)  # 4, 5 files
    table.set_properties({"write.group_commit_max_rate": 0})
    assert GroupedPuts.spacing_of(table.state()) == 0.0


def test_files_a_running_job_merges_stretch_the_spacing_only_near_the_batch_size(
        tmp_path: Path) -> None:
    """A leaf of 8 files, 7 of them the inputs of a running compaction job, is not behind
    (it holds 2 files once the job lands): no stretch, where counting every file stretched
    it twice. Near the batch size the files counted one by one brake again: past two thirds
    of a batch of 12, linearly up to the most at 12 files."""
    table = make_table(tmp_path / "s", **{"compaction.batch_size": 12,
                                          "write.group_commit_max_rate": 10.0})
    for i in range(8):
        table.ingest(rows(2, i))
    held = sorted(table.state().references(ROOT_PARTITION_ID))[:7]
    handle_of(table).states.commit(
        AssignJobIds([JobAssignment("running", ROOT_PARTITION_ID, tuple(held))]))
    assert GroupedPuts.spacing_of(table.state()) == pytest.approx(0.1)  # 8 files, 2 after
    table.ingest(rows(2, 8))
    assert GroupedPuts.spacing_of(table.state()) == pytest.approx(
        0.1 * (1 + (CROWDED_STRETCH - 1) / 4))  # 9 files: a quarter of the way from 8
    table.ingest(rows(2, 9))
    assert GroupedPuts.spacing_of(table.state()) == pytest.approx(
        0.1 * (1 + (CROWDED_STRETCH - 1) / 2))  # 10 files
    for i in range(10, 12):
        table.ingest(rows(2, i))
    assert GroupedPuts.spacing_of(table.state()) == pytest.approx(0.1 * CROWDED_STRETCH)
