"""The continuous maintainer on Spark (``maintain --loop --spark``): each tick's compaction
jobs of a table run as one Spark stage, the batcher's big groups go to bulk import, and the
table settles with every row once."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pyarrow.fs as pafs
import pytest
from spark_helpers import SCHEMA, arrow, assert_same_rows, make_frame, write_input

import sediment as sd
from sediment.ingest import batcher
from sediment.maintenance.continuous import Maintainer
from sediment.maintenance.lease_store import LeaseHolder, maintainers_report
from sediment.spark.runner import run_jobs_on_spark


@pytest.mark.spark
def test_the_continuous_maintainer_runs_compaction_on_spark_and_bulk_imports(
        spark_local: Any, tmp_path: Path) -> None:
    store = sd.Store.open(str(tmp_path / "store"), create=True)
    table = store.create_table("events", SCHEMA, properties={
        "compaction.strategy": "basic", "compaction.batch_size": 3,
        "state.cache.refresh_seconds": 0, "batcher.max_age_seconds": 0.0,
        "batcher.bulk_import_min_bytes": 1})
    ingested = [make_frame(200, seed=i, start=i * 1000) for i in range(6)]
    for f in ingested:
        table.ingest(arrow(f))
    queued = [make_frame(300, seed=50 + i, start=10_000 + i * 1000) for i in range(2)]
    for i, f in enumerate(queued):
        write_input(pafs.LocalFileSystem(), str(tmp_path), f"queued-{i}.parquet", f)
    batcher.submit(table, [str(tmp_path / "queued-*.parquet")])

    calls: list[int] = []

    def on_spark(t: Any, state: Any, jobs: Any, **kw: Any) -> Any:
        calls.append(len(jobs))
        return run_jobs_on_spark(t, state, jobs, **kw)

    leases = LeaseHolder(store.objects, timeout=30.0)
    m = Maintainer(lambda: [sd.Store.open(str(tmp_path / "store")).table("events")],
                   threads=2, tick_seconds=0.05, gc_every=3600, batcher_threads=1,
                   batch_runner=on_spark, spark=spark_local, leases=leases)
    reports: list[Any] = []
    th = threading.Thread(target=m.run, kwargs={"report_every": 0.5, "max_reports": 2,
                                                "on_report": reports.extend})
    th.start()
    th.join(180)
    assert not th.is_alive()
    rows = [r for r in reports if r["table"] == "events"]
    assert not any("error" in r for r in rows), rows
    assert sum(int(r["jobs"]) for r in rows) == sum(calls) >= 2
    assert max(calls) >= 2  # one stage carried a tick's jobs of the table
    assert sum(int(r.get("ingests", 0)) for r in rows) == 1
    assert [j["route"] for j in batcher.jobs(table)] == ["bulk_import"]
    st = table.state()
    assert not st.jobs and all(len(st.references(p.id)) < 3 for p in st.leaf_partitions())
    assert_same_rows(table.query(), *ingested, *queued)
    assert {r["state"] for r in maintainers_report(store.objects)["leases"]} == {"released"}
