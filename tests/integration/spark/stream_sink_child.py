"""A process running file streams into Sediment tables, SIGKILLed around their commits, for
test_stream_sink.py.

``python stream_sink_child.py STORE MEETING (TABLE FOLDER CHECKPOINT POINT)...`` streams each
folder's Parquet files (one a micro-batch, ``availableNow``) into its table through the
``sediment`` sink, all at once. ``POINT`` is ``before-commit:N`` or ``after-commit:N``: that
stream's driver-side commit of batch N stops just before (after) the sink's commit and waits
there until every stream has reached its point (each notes its arrival in the folder
``MEETING``); the last to arrive SIGKILLs the driver's process group (this process and the
JVM) and its own (PySpark's worker daemon makes a group of its own). So one JVM dies between
staging and commit for one stream and between commit and Spark's checkpoint for another. The
test starts this process in a new session, so its group is only its own.

The data source classes live in this module (imported by name, not as ``__main__``) so that
Spark's Python workers, which unpickle them, can import them.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from pyspark.sql.datasource import WriterCommitMessage

from sediment.spark.datasource import SedimentDataSource
from sediment.spark.sink import SedimentStreamWriter

DRIVER_GROUP = "SEDIMENT_TEST_DRIVER_GROUP"
MEET_SECONDS = 240.0


def _meet_and_kill(meeting: Path, name: str, expected: int) -> None:
    (meeting / name).touch()
    deadline = time.monotonic() + MEET_SECONDS
    while len(list(meeting.iterdir())) < expected and time.monotonic() < deadline:
        time.sleep(0.05)
    os.killpg(int(os.environ[DRIVER_GROUP]), signal.SIGKILL)
    os.killpg(os.getpgrp(), signal.SIGKILL)


class KillingWriter(SedimentStreamWriter):
    def __init__(self, options: dict[str, str], *, overwrite: bool = False) -> None:
        super().__init__(options, overwrite=overwrite)
        self.point = options["killpoint"]
        self.meeting = Path(options["meeting"])
        self.streams = int(options["streams"])

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int  # noqa: N803
               ) -> None:
        if self.point == f"before-commit:{batchId}":
            _meet_and_kill(self.meeting, self.point, self.streams)
        super().commit(messages, batchId)
        if self.point == f"after-commit:{batchId}":
            _meet_and_kill(self.meeting, self.point, self.streams)


class KillingSource(SedimentDataSource):
    @classmethod
    def name(cls) -> str:
        return "sediment_killing"

    def streamWriter(self, schema: Any, overwrite: bool) -> KillingWriter:  # noqa: N802
        return KillingWriter(dict(self.options), overwrite=overwrite)


def main(store: str, meeting: str, *streams: str) -> None:
    from sediment.spark import session

    os.environ[DRIVER_GROUP] = str(os.getpgrp())  # the JVM and its workers inherit it
    spark = session("local[2]", app_name="sediment-stream-child",
                    conf={"spark.sql.shuffle.partitions": "2", "spark.ui.enabled": "false",
                          "spark.driver.extraJavaOptions":
                              "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"})
    import stream_sink_child  # by name: the workers import the classes so

    spark.dataSource.register(stream_sink_child.KillingSource)
    queries = []
    for i in range(0, len(streams), 4):
        table, folder, checkpoint, point = streams[i:i + 4]
        df = (spark.readStream.schema("key string, ts long, value string, n long")
              .option("maxFilesPerTrigger", 1).parquet(folder))
        queries.append(
            df.writeStream.format("sediment_killing").option("store", store)
            .option("table", table).option("checkpointLocation", checkpoint)
            .option("killpoint", point).option("meeting", meeting)
            .option("streams", str(len(streams) // 4)).trigger(availableNow=True).start())
    for q in queries:
        q.awaitTermination()
    raise SystemExit("the streams ended without meeting their kill points")


if __name__ == "__main__":
    main(*sys.argv[1:])
