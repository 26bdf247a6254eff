"""The streaming pipeline of docs/howto/streams.md end to end: a file stream upserted into table
A, A's change stream transformed into table B, the maintainer (``sediment maintain --loop``, a
real process) compacting both meanwhile; files keep arriving, some re-sending earlier records
with new values. At the end B equals the reference: the last value sent for each record key
(key, ts), upper-cased."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.parquet as pq
import pytest
from spark_helpers import SCHEMA, arrow, canonical, make_frame, reader_options

import sediment as sd

pytestmark = pytest.mark.spark

SPARK_SCHEMA = "key string, ts long, value string, n long"
SCRIPT = Path(sys.executable).with_name("sediment")


def _drop(folder: Path, i: int, frame: pd.DataFrame) -> None:
    """A file appearing in ``folder`` whole (written aside, then renamed in)."""
    tmp = folder.parent / f".part-{i:03d}.parquet"
    pq.write_table(arrow(frame), tmp)
    os.replace(tmp, folder / f"part-{i:03d}.parquet")


def _reference(frames: list[pd.DataFrame]) -> pd.DataFrame:
    ref = pd.concat(frames, ignore_index=True).drop_duplicates(["key", "ts"], keep="last")
    return ref.assign(value=ref["value"].str.upper())


def test_a_file_stream_into_a_then_as_changes_into_b_with_the_maintainer_running(
        spark_local: Any, tmp_path: Path) -> None:
    from pyspark.sql import functions as F

    store = sd.Store.open(str(tmp_path / "store"), create=True)
    props = {"state.cache.refresh_seconds": 0, "compaction.batch_size": 2}
    a = store.create_table("a", SCHEMA, split_points=["k020"], properties=props)
    b = store.create_table("b", SCHEMA, split_points=["k020"], properties=props)
    incoming = tmp_path / "incoming"
    incoming.mkdir()
    first = make_frame(80, seed=1)
    frames = [first, make_frame(80, seed=2, start=80)]
    for i, f in enumerate(frames):
        _drop(incoming, i, f)

    maintainer = subprocess.Popen(
        [str(SCRIPT), "maintain", "--loop", "--interval", "0.5", "--store", store.uri],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    q1 = q2 = None
    try:
        files = (spark_local.readStream.schema(SPARK_SCHEMA).option("maxFilesPerTrigger", 1)
                 .parquet(str(incoming)))
        q1 = (files.writeStream.format("sediment").options(**reader_options(store))
              .option("table", "a").option("write", "upsert")
              .option("checkpointLocation", str(tmp_path / "cp-a"))
              .trigger(processingTime="0.5 seconds").start())
        changes = (spark_local.readStream.format("sediment").options(**reader_options(store))
                   .option("table", "a").load()
                   .withColumn("value", F.upper(F.col("value"))))
        q2 = (changes.writeStream.format("sediment").options(**reader_options(store))
              .option("table", "b").option("write", "upsert")
              .option("checkpointLocation", str(tmp_path / "cp-b"))
              .trigger(processingTime="0.5 seconds").start())
        # more files while both run: new records, and earlier ones re-sent with new values
        resent = first.sample(20, random_state=3).assign(value=lambda d: d["value"] + "-again")
        for i, f in enumerate([make_frame(60, seed=3, start=160), resent], start=len(frames)):
            time.sleep(1.0)
            _drop(incoming, i, f)
            frames.append(f)
        expected = canonical(_reference(frames))
        deadline = time.monotonic() + 120
        got = None
        while time.monotonic() < deadline:
            for q in (q1, q2):
                assert q.exception() is None, q.exception()
            got = canonical(b.query().to_pandas())
            if len(got) == len(expected) and got.equals(expected):
                break
            time.sleep(0.5)
        assert got is not None and got.equals(expected), "table b never equalled the reference"
        assert canonical(a.query().to_pandas()).equals(
            canonical(pd.concat(frames).drop_duplicates(["key", "ts"], keep="last")))
    finally:
        for q in (q1, q2):
            if q is not None:
                q.stop()
        maintainer.send_signal(signal.SIGTERM)
        try:
            _, err = maintainer.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            maintainer.kill()
            err = ""
    assert maintainer.returncode == 0, err
    # the maintainer compacted while the streams committed
    assert any(e.kind == "replace_file_references" for e in a.history())
