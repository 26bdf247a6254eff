"""The Structured Streaming sink (``df.writeStream.format("sediment")``), exactly once.

File and rate streams into a table hold every row once against a pandas reference; a batch
Spark hands over again is not committed twice (the writer's commit called twice; the driver
SIGKILLed between staging and commit and between commit and checkpoint, then restarted from
the checkpoint: stream_sink_child.py); a deleted checkpoint starts a new stream whose batches
are all committed; ``write=upsert``; options refused with errors naming the table."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from spark_helpers import SCHEMA, arrow, assert_same_rows, canonical, make_frame, reader_options

import sediment as sd
from sediment.errors import QueryError
from sediment.spark.sink import SedimentStreamWriter

pytestmark = pytest.mark.spark

HERE = Path(__file__).parent
SPARK_SCHEMA = "key string, ts long, value string, n long"


def _inputs(folder: Path, frames: list[pd.DataFrame]) -> Path:
    """One Parquet file per frame, modified in order (the file source's batch order)."""
    folder.mkdir(parents=True, exist_ok=True)
    for i, f in enumerate(frames):
        path = folder / f"part-{i:03d}.parquet"
        pq.write_table(arrow(f), path)
        stamp = time.time() - 1000 + i
        os.utime(path, (stamp, stamp))
    return folder


def _frames(n: int, rows: int = 60, seed: int = 0) -> list[pd.DataFrame]:
    return [make_frame(rows, seed=seed + i, start=i * rows) for i in range(n)]


def _stream(spark: Any, folder: Path, store: sd.Store, table: str, checkpoint: Path,
            **options: str) -> Any:
    """A file stream of ``folder`` (a file a batch) into ``table``, run to its end
    (``availableNow``)."""
    df = (spark.readStream.schema(SPARK_SCHEMA).option("maxFilesPerTrigger", 1)
          .parquet(str(folder)))
    writer = df.writeStream.format("sediment").options(**reader_options(store), table=table,
                                                       **options)
    q = writer.option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start()
    q.awaitTermination(120)
    assert q.exception() is None, q.exception()
    return q


def _now(table: sd.Table) -> sd.Table:
    """``table`` opened afresh: its commits come from other processes (Spark's Python
    workers), which a table's cached head sees only after ``state.cache.refresh_seconds``."""
    return sd.Store.open(table.store.uri).table(table.name)


def _query_id(checkpoint: Path) -> str:
    return str(json.loads((checkpoint / "metadata").read_text())["id"])


def _stream_commits(table: sd.Table) -> list[str]:
    return [h.summary for h in _now(table).history() if "(stream " in h.summary]


def test_a_file_stream_commits_each_batch_once(spark_local: Any, tmp_path: Path) -> None:
    store = sd.Store.open(str(tmp_path / "store"), create=True)
    table = store.create_table("events", SCHEMA, split_points=["k020"])
    frames = _frames(2)
    checkpoint = tmp_path / "ck"
    _stream(spark_local, _inputs(tmp_path / "in", frames), store, "events", checkpoint)
    assert_same_rows(_now(table).query(), *frames)
    commits = _stream_commits(table)
    assert len(commits) == 2, commits  # one transaction per micro-batch
    # one entry, by the query id: the last batch id
    assert {k: v[0] for k, v in _now(table).state().streams.items()} == {
        _query_id(checkpoint): 1}


def test_a_rate_stream_holds_every_value_once(spark_local: Any, tmp_path: Path) -> None:
    store = sd.Store.open(str(tmp_path / "store"), create=True)
    schema = sd.Schema(row_keys=[("value", pa.int64())], values=[("bucket", pa.int64())])
    table = store.create_table("rates", schema)
    df = (spark_local.readStream.format("rate-micro-batch").option("rowsPerBatch", 50)
          .option("numPartitions", 2).load()
          .selectExpr("value", "value % 7 AS bucket"))
    q = (df.writeStream.format("sediment").options(**reader_options(store), table="rates")
         .option("checkpointLocation", str(tmp_path / "ck"))
         .trigger(processingTime="100 milliseconds").start())
    try:
        deadline = time.monotonic() + 90
        while len(_stream_commits(table)) < 3 and time.monotonic() < deadline:
            assert q.exception() is None, q.exception()
            time.sleep(0.2)
    finally:
        q.stop()
    got = _now(table).query().to_pandas()
    n = len(got)
    assert n >= 150 and n % 50 == 0
    want = pd.DataFrame({"value": range(n)}).assign(bucket=lambda f: f["value"] % 7)
    pd.testing.assert_frame_equal(got.sort_values("value").reset_index(drop=True), want,
                                  check_dtype=False)


def test_a_replayed_batch_is_not_committed_twice(tmp_path: Path) -> None:
    """The writer's commit of one batch id twice (the second with files staged anew, as a
    replay after a driver failure stages them): the rows are in the table once, the replay's
    files are deleted, and an older batch id under the same identity is refused."""
    store = sd.Store.open(str(tmp_path / "store"), create=True)
    table = store.create_table("events", SCHEMA)
    options = {**reader_options(store), "table": "events", "streamId": "s1"}
    frame = make_frame(50)

    def staged(writer: SedimentStreamWriter) -> Any:
        return writer.write(iter(arrow(frame).to_batches()))

    first = SedimentStreamWriter(options)
    assert first.commit_batch([staged(first)], 7)
    before = _now(table).version
    replay = SedimentStreamWriter(options)
    message = staged(replay)
    assert not replay.commit_batch([message], 7)
    assert _now(table).version == before
    assert_same_rows(_now(table).query(), frame)
    for r in message.rows:
        assert not _now(table)._handle.objects.exists(r["filename"])
    older = staged(first)
    with pytest.raises(sd.SedimentError, match="table events at version .*: stream s1: "
                                               "batch 3 is older than batch 7"):
        SedimentStreamWriter(options).commit_batch([older], 3)
    assert not any(_now(table)._handle.objects.exists(r["filename"]) for r in older.rows)
    later = make_frame(30, seed=1, start=1000)
    assert first.commit_batch([first.write(iter(arrow(later).to_batches()))], 8)
    assert_same_rows(_now(table).query(), frame, later)


def test_a_deleted_checkpoint_starts_a_new_stream(spark_local: Any, tmp_path: Path) -> None:
    """Batch ids start again at 0 under the new query id: none is taken for a replay."""
    store = sd.Store.open(str(tmp_path / "store"), create=True)
    table = store.create_table("events", SCHEMA)
    first, second = _frames(2, seed=0), _frames(2, seed=5)
    second = [f.assign(ts=f["ts"] + 50_000) for f in second]
    checkpoint = tmp_path / "ck"
    _stream(spark_local, _inputs(tmp_path / "a", first), store, "events", checkpoint)
    old = _query_id(checkpoint)
    import shutil

    shutil.rmtree(checkpoint)
    _stream(spark_local, _inputs(tmp_path / "b", second), store, "events", checkpoint)
    assert _query_id(checkpoint) != old
    assert_same_rows(_now(table).query(), *first, *second)
    assert {k: v[0] for k, v in _now(table).state().streams.items()} == {
        old: 1, _query_id(checkpoint): 1}


def test_upsert_mode_keeps_the_last_record_of_each_key(spark_local: Any,
                                                      tmp_path: Path) -> None:
    store = sd.Store.open(str(tmp_path / "store"), create=True)
    table = store.create_table("events", SCHEMA)
    base = make_frame(80, keys=10)
    frames = [base]
    for i in range(2):  # later batches re-send some record keys with new values
        f = base.sample(30, random_state=i).copy()
        f["value"] = [f"u{i}-{j}" for j in range(len(f))]
        frames.append(f.reset_index(drop=True))
    _stream(spark_local, _inputs(tmp_path / "in", frames), store, "events",
            tmp_path / "ck", write="upsert")
    want = pd.concat(frames, ignore_index=True).drop_duplicates(["key", "ts"], keep="last")
    pd.testing.assert_frame_equal(canonical(_now(table).query()), canonical(want),
                                  check_dtype=False)


def test_the_sink_refuses_a_stream_without_identity(tmp_path: Path) -> None:
    store = sd.Store.open(str(tmp_path / "store"), create=True)
    store.create_table("events", SCHEMA)
    options = {**reader_options(store), "table": "events"}
    with pytest.raises(QueryError, match="table events: give the query option "
                                         "checkpointLocation"):
        SedimentStreamWriter(options)
    with pytest.raises(QueryError, match="table events: cannot read the query id"):
        SedimentStreamWriter({**options, "checkpointlocation": str(tmp_path / "nowhere")})
    with pytest.raises(QueryError, match="table events: option streamId is empty"):
        SedimentStreamWriter({**options, "streamid": " "})
    with pytest.raises(QueryError, match="table events: option write='merge'"):
        SedimentStreamWriter({**options, "streamId": "s", "write": "merge"})


def test_a_driver_killed_around_the_commit_restarts_exactly_once(spark_local: Any,
                                                                tmp_path: Path) -> None:
    """One child process runs two streams and is SIGKILLed (driver, JVM and workers) when
    stream ``a``'s tasks have staged batch 0 and its commit has not begun, and stream ``b``
    has committed batch 0 and Spark has not written it to its checkpoint
    (stream_sink_child.py). Restarted from their checkpoints (in this process's session):
    every row is in each table once; ``b``'s replay of batch 0 added nothing."""
    store = sd.Store.open(str(tmp_path / "store"), create=True)
    tables = {n: store.create_table(n, SCHEMA) for n in ("a", "b")}
    frames = _frames(2)
    args = [str(tmp_path / "store"), str(tmp_path / "meeting")]
    for name, point in (("a", "before-commit:0"), ("b", "after-commit:0")):
        args += [name, str(_inputs(tmp_path / f"in-{name}", frames)), str(tmp_path / name),
                 point]
    (tmp_path / "meeting").mkdir()
    env = {**os.environ,
           "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
    run = subprocess.run([sys.executable, str(HERE / "stream_sink_child.py"), *args],
                         env=env, capture_output=True, text=True, timeout=400,
                         start_new_session=True)  # its SIGKILL takes its own group only
    assert run.returncode == -9, run.stderr[-3000:]
    assert _now(tables["a"]).version == 1  # killed before the commit: nothing committed
    assert_same_rows(_now(tables["b"]).query(), frames[0])  # committed, not checkpointed
    assert not (tmp_path / "b" / "commits" / "0").exists()
    for name, table in tables.items():
        _stream(spark_local, tmp_path / f"in-{name}", store, name, tmp_path / name)
        assert_same_rows(_now(table).query(), *frames)
        assert len(_stream_commits(table)) == 2
        assert {k: v[0] for k, v in _now(table).state().streams.items()} == {
            _query_id(tmp_path / name): 1}
