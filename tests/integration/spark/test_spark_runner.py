"""``table.compact(runner="spark")``: compaction jobs run as Spark tasks and commit from the
driver; the result equals the reference and the local runner's."""

from __future__ import annotations

from typing import Any

import pytest
from spark_helpers import (
    SCHEMA,
    assert_files_in_their_regions,
    assert_same_rows,
    assert_sorted,
    leaves,
    make_frame,
    open_store,
    spark_and_store,
)

pytestmark = pytest.mark.spark


@spark_and_store(("local", "local"), ("cluster", "s3"))
def test_compaction_on_spark_commits_jobs(spark: Any, store_uri: Any) -> None:
    store = open_store(store_uri)
    table = store.create_table("events", SCHEMA, split_points=[("k013",), ("k026",)],
                               properties={"compaction.strategy": "basic",
                                           "compaction.batch_size": 3})
    frames = [make_frame(600, keys=40, seed=20 + i, start=1000 * i) for i in range(3)]
    for f in frames:
        table.ingest(f)
    assert len(table.files()) == 9  # three ingests x three leaves
    before = table.version

    result = table.compact(runner="spark")

    assert result.errors == ()
    assert result.jobs_created == 3 and result.jobs_committed == 3
    assert result.rows_in == result.rows_out == 1800
    kinds = [h.kind for h in table.history() if h.version > before]
    assert kinds.count("replace_file_references") == 3
    assert len(table.files()) == len(leaves(table)) == 3
    events = [e.status for e in table._handle.status.events("compaction") if e.status != "created"]
    assert sorted(events) == ["committed"] * 3 + ["finished"] * 3 + ["started"] * 3
    assert_files_in_their_regions(table)
    out = table.query()
    assert_sorted(out)
    assert_same_rows(out, *frames)
    # nothing left to do
    again = table.compact(runner="spark")
    assert again.jobs_created == 0


@spark_and_store(("local", "local"))
def test_dump_on_spark_loads_back(spark: Any, store_uri: Any, tmp_path: Any) -> None:
    store = open_store(store_uri)
    table = store.create_table("events", SCHEMA, split_points=[("k020",)])
    frame = make_frame(500, keys=40, seed=7)
    table.ingest(frame)

    job = table.dump(str(tmp_path / "dumps"), runner="spark")

    assert job.tasks == 2 and job.rows == 500
    assert_same_rows(store.load(job.manifest_uri, "copy").query(), frame)
