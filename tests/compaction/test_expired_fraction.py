"""Storage that shrinks (issue 46 item 2): files of which at least
``compaction.expired_fraction`` of the records are past an age-off TTL are rewritten by
maintenance (estimated from Parquet statistics), so bytes on storage drop once records expire,
on local disk and on S3."""

from __future__ import annotations

import io
import json
import time
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from test_compaction import add, plan_state, props

import sediment as sd
from reference import Reference, assert_matches
from sediment.compaction.expiry import AgeStats
from sediment.compaction.strategy import plan_compaction_jobs
from sediment.core.state import ROOT_PARTITION_ID
from sediment.workload import benchmark_schema

SCHEMA = benchmark_schema()
TTL = 600.0
HOUR_MS = 3_600_000


def batch(prefix: str, n: int, old: int, now_ms: int) -> pa.Table:
    """``n`` records keyed ``<prefix><i>``, the first ``old`` of them an hour old (past the
    TTL), the rest new: key order is time order, so row groups hold times apart."""
    ts = np.where(np.arange(n) < old, now_ms - HOUR_MS + np.arange(n), now_ms + np.arange(n))
    return pa.table({"key": [f"{prefix}{i:04d}" for i in range(n)],
                     "timestamp": pa.array(ts, pa.int64()),
                     "value": [f"v{i}" for i in range(n)],
                     "nullable_value": pa.nulls(n, pa.string())})


def data_bytes(table: sd.Table) -> int:
    return sum(o.size for o in table._handle.objects.list("data/"))


@pytest.mark.s3
def test_bytes_drop_once_records_expire_and_maintenance_runs(
        store_uri: tuple[str, dict[str, Any]]) -> None:
    uri, options = store_uri
    store = sd.Store.open(uri, **options, create=True)
    iterators = json.dumps([{"type": "age_off", "field": "timestamp", "ttl_seconds": TTL}])
    table = store.create_table(f"ttl{time.time_ns()}", SCHEMA, properties={
        "compaction.iterators": iterators, "parquet.row_group_rows": 128,
        "gc.delay_seconds": 0, "retention.seconds": 0, "gc.clock_skew_seconds": 0,
        "state.cache.refresh_seconds": 0})
    now_ms = int(time.time() * 1000)
    n = 1280  # ten row groups a file
    parts = {"a": batch("a", n, n, now_ms),          # all expired: rewritten (to nothing)
             "b": batch("b", n, 7 * 128, now_ms),    # 70% expired: rewritten
             "c": batch("c", n, 2 * 128, now_ms)}    # 20% expired: left for now
    for t in parts.values():
        table.ingest(t)
    files = {r.filename for r in table.files()}
    assert len(files) == 3
    [c_file] = [f for f in files if _first_key(table, f).startswith("c")]
    before = data_bytes(table)
    # the strategy alone (three equal files, batch 12, ratio 3) has nothing to merge
    result = table.maintain()
    assert result.jobs_committed == 1
    after = {r.filename: r for r in table.files()}
    assert c_file in after and len(after) == 2
    [new] = [r for f, r in after.items() if f != c_file]
    assert new.records == 3 * 128  # b's new records; a's and b's old ones dropped
    kept = pa.concat_tables(parts.values())
    cutoff = now_ms - int(TTL * 1000)
    # c's old records stay on storage (its file was not rewritten) and are dropped on read
    ref = Reference(SCHEMA)
    ref.add(kept.filter(pc.greater_equal(kept["timestamp"], cutoff)))
    assert_matches(table.query(), ref)
    # a's and b's files (and their sidecars) are gone: what is left is c's file and the new one
    left = data_bytes(table)
    assert left < before * 0.6
    again = table.maintain()  # nothing more is due: no rewrite loop
    assert again.jobs_committed == 0


def _first_key(table: sd.Table, filename: str) -> str:
    objects = table._handle.objects
    data = pq.read_table(io.BytesIO(objects.get(filename)), columns=["key"])
    return str(data["key"][0])


def test_statistics_estimate_expired_records_per_row_group() -> None:
    now_ms = int(time.time() * 1000)
    t = batch("k", 100, 37, now_ms)
    buf = io.BytesIO()
    pq.write_table(t, buf, row_group_size=10)
    stats = AgeStats.of(pq.read_metadata(io.BytesIO(buf.getvalue())), "timestamp")
    assert stats is not None
    cutoff = now_ms - int(TTL * 1000)
    truth = pc.sum(pc.less(t["timestamp"], cutoff)).as_py()
    # groups wholly on one side are exact; the one straddling the cutoff is interpolated
    assert abs(stats.expired(cutoff) - truth) <= 10
    assert stats.expired(now_ms - 2 * HOUR_MS) == 0
    assert stats.expired(now_ms + HOUR_MS) == 100
    assert AgeStats.of(pq.read_metadata(io.BytesIO(buf.getvalue())), "nope") is None


def test_the_strategy_rewrites_files_past_the_fraction_only() -> None:
    state = plan_state()
    f0, f1, f2 = add(state, ROOT_PARTITION_ID, 100, 100, 100)
    p = props(compaction__expired_fraction=0.5)
    assert plan_compaction_jobs(state, p) == []  # three equal files: the ratio waits
    jobs = plan_compaction_jobs(state, p, expired={f0: 0.9, f1: 0.5, f2: 0.49})
    assert [sorted(r.filename for r in j.inputs) for j in jobs] == [sorted([f0, f1])]
    # alone in its leaf, an expired file is rewritten on its own
    one = plan_state()
    [g] = add(one, ROOT_PARTITION_ID, 100)
    assert [[r.filename for r in j.inputs] for j in
            plan_compaction_jobs(one, p, expired={g: 1.0})] == [[g]]
