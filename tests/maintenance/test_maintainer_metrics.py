"""``sediment maintain --loop --metrics-port``: the real maintainer's endpoint, scraped over
HTTP, follows what it does to a table: its compaction commits and the files its collector
deletes match the table's own history, files per leaf falls to one, and the batcher's queue
counts a file-ingest request waiting; its heartbeat is in the store while it runs and gone
once it stops."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import sediment as sd
from helpers import stop_process
from sediment.ingest import batcher
from support.s3 import free_port
from support.scrape import Scrape, value, wait_for_scrape

SCHEMA = sd.Schema(row_keys=[("k", pa.string())], values=[("v", pa.int64())])


@pytest.mark.slow
def test_the_maintainers_metrics_move_with_its_work(tmp_path: Path) -> None:
    """Slow (4-12 s): a maintainer process started and stopped, and two compactions and the
    collection of their inputs waited for."""
    store = sd.Store.open(str(tmp_path / "s"), create=True)
    table = store.create_table("t", SCHEMA, properties={
        "compaction.strategy": "basic", "compaction.batch_size": 2, "gc.delay_seconds": 0,
        "retention.seconds": 0, "gc.clock_skew_seconds": 0})
    port = free_port()
    log = tmp_path / "maintain.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "sediment.cli", "maintain", "--store", store.uri, "--loop",
             "--interval", "0.3", "--workers", "thread", "--threads", "1",
             "--metrics-port", str(port)],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        wait_for_scrape(port, lambda s: ("sediment_queue_depth", frozenset({("queue", "jobs")}))
                        in s, what="the jobs queue")
        for i in range(3):
            table.ingest(pa.table({"k": [f"k{i}"], "v": [i]}))

        def settled(s: Scrape) -> bool:
            compacted = value(s, "sediment_commits_total", table="t",
                              kind="replace_file_references")
            return compacted >= 2 and value(s, "sediment_gc_deleted_files_total", table="t") \
                >= 4 and value(s, "sediment_files_per_leaf", table="t") == 1

        after = wait_for_scrape(port, settled, what="two compactions and their inputs "
                                "collected")
        history = table.history()
        assert value(after, "sediment_commits_total", table="t",
                     kind="replace_file_references") == \
            sum(1 for e in history if e.kind == "replace_file_references")
        assert value(after, "sediment_gc_deleted_files_total", table="t") == 4
        assert len(table.files()) == 1
        assert value(after, "sediment_compaction_rows_total", table="t") >= 3
        assert value(after, "sediment_ingest_rows_total", table="t") == 0  # not its ingests

        pq.write_table(pa.table({"k": ["x"], "v": [1]}), tmp_path / "in.parquet")
        batcher.submit(table, str(tmp_path / "in.parquet"))
        wait_for_scrape(port, lambda s: value(s, "sediment_queue_depth", queue="batcher") == 1,
                        what="the batcher request waiting")
        beats = list((tmp_path / "s" / "maintainers" / "members").glob("*.json"))
        assert len(beats) == 1  # its membership of the leases, for `sediment doctor`
    finally:
        stop_process(proc)
    assert proc.returncode == 0, log.read_text()
    assert not beats[0].exists()  # stopped on purpose: no member left to miss
