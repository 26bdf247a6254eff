"""A process running one file stream into a Sediment table, for test_stream_sink.py.

``python stream_sink_child.py STORE TABLE INPUT_FOLDER CHECKPOINT`` streams the folder's
Parquet files (one a micro-batch, ``availableNow``) into the table through the ``sediment``
sink, from the checkpoint. With ``SEDIMENT_TEST_KILL=before-commit:N`` (or
``after-commit:N``) the driver's commit of batch N SIGKILLs the whole process group (this
process, the JVM, its Python workers) just before (after) the sink's commit: the driver dies
between staging and commit (between commit and Spark's checkpoint). The test starts this
process in a new session, so its group is only its own.

The data source classes live in this module (imported by name, not as ``__main__``) so that
Spark's workers, which unpickle them, can import them.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

from pyspark.sql.datasource import WriterCommitMessage

from sediment.spark.datasource import SedimentDataSource
from sediment.spark.sink import SedimentStreamWriter

KILL = "SEDIMENT_TEST_KILL"
DRIVER_GROUP = "SEDIMENT_TEST_DRIVER_GROUP"


def _kill_at(point: str, batch_id: int) -> None:
    """SIGKILL the driver's process group (this process's parent Python and the JVM), then
    this worker's own (PySpark's worker daemon makes a group of its own)."""
    if os.environ.get(KILL) == f"{point}:{batch_id}":
        os.killpg(int(os.environ[DRIVER_GROUP]), signal.SIGKILL)
        os.killpg(os.getpgrp(), signal.SIGKILL)


class KillingWriter(SedimentStreamWriter):
    def commit(self, messages: list[WriterCommitMessage | None], batchId: int  # noqa: N803
               ) -> None:
        _kill_at("before-commit", batchId)
        super().commit(messages, batchId)
        _kill_at("after-commit", batchId)


class KillingSource(SedimentDataSource):
    @classmethod
    def name(cls) -> str:
        return "sediment_killing"

    def streamWriter(self, schema: Any, overwrite: bool) -> KillingWriter:  # noqa: N802
        return KillingWriter(dict(self.options), overwrite=overwrite)


def main(store: str, table: str, folder: str, checkpoint: str) -> None:
    from sediment.spark import session

    os.environ[DRIVER_GROUP] = str(os.getpgrp())  # the JVM and its workers inherit it
    spark = session("local[2]", app_name="sediment-stream-child",
                    conf={"spark.sql.shuffle.partitions": "2",
                          "spark.ui.enabled": "false",
                          "spark.driver.extraJavaOptions":
                              "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"})
    import stream_sink_child  # by name: the workers import the classes so

    spark.dataSource.register(stream_sink_child.KillingSource)
    df = (spark.readStream.schema("key string, ts long, value string, n long")
          .option("maxFilesPerTrigger", 1).parquet(folder))
    q = (df.writeStream.format("sediment_killing").option("store", store)
         .option("table", table).option("checkpointLocation", checkpoint)
         .trigger(availableNow=True).start())
    q.awaitTermination()
    if q.exception() is not None:
        raise SystemExit(f"stream failed: {q.exception()}")
    spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:5])
