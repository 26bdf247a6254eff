"""A correctly configured SparkSession for Sediment.

``session()`` gives ``local[*]`` by default; pass ``master="spark://host:7077"`` for a cluster or
``existing=spark`` to configure a session you already have. Workers must run a Python that has
pyarrow and Sediment: on one machine that is the current interpreter (set here); on a cluster,
install Sediment on the workers or ship it with :func:`ship_package`.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sediment.errors import JobError
from sediment.iterators.trust import TRUST_ENV, trusted_iterator_modules

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

DEFAULT_CONF: dict[str, str] = {
    "spark.sql.python.filterPushdown.enabled": "true",  # Python data source pushFilters
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.execution.arrow.maxRecordsPerBatch": "100000",  # 10k -> 100k: ~10% faster
    "spark.sql.execution.pythonUDF.arrow.enabled": "true",
    "spark.sql.shuffle.partitions": "16",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    # Spark's own Parquet reader (read_table's native leaves) checks the page CRCs Sediment
    # writes: without it a flipped page byte is read as data (measured: a wrong value)
    "spark.hadoop.parquet.page.verify-checksum.enabled": "true",
}

LOOPBACK_DRIVER: dict[str, str] = {
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.driver.host": "127.0.0.1",
}
"""The driver's address when every executor runs on this machine: loopback, so an embedded
session opens no port to the network. A master elsewhere gets Spark's own choice (this host's
address), which executors on other machines can connect back to."""


def on_this_machine(master: str) -> bool:
    """Whether a master's executors all run here: ``local[...]``, or a standalone master
    every one of whose addresses is loopback."""
    if master.startswith("local"):
        return True
    if not master.startswith("spark://"):
        return False  # yarn, k8s://...: executors run elsewhere
    for address in master[len("spark://"):].split(","):
        host = address.rpartition(":")[0] or address
        host = host.strip("[]")
        if host == "localhost":
            continue
        try:
            if not ipaddress.ip_address(host).is_loopback:
                return False
        except ValueError:
            return False  # a host name: assume another machine
    return True


def session_conf(master: str, conf: dict[str, Any] | None = None) -> dict[str, str]:
    """Sediment's settings for a session on ``master``, with ``conf`` over them."""
    base = {**DEFAULT_CONF, **(LOOPBACK_DRIVER if on_this_machine(master) else {})}
    return {k: str(v) for k, v in {**base, **(conf or {})}.items()}


def session(master: str | None = None, *, app_name: str = "sediment",
            existing: SparkSession | None = None, conf: dict[str, Any] | None = None
            ) -> SparkSession:
    """Create (or configure) a SparkSession with Sediment's settings and data source."""
    if (master or "local").startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # embedded: loopback only
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if existing is not None:
        spark = existing
        for k, v in session_conf("local", conf).items():
            if k.startswith("spark.hadoop."):
                # the Hadoop configuration is fixed once the context runs; a SQL setting of
                # the bare name reaches every file read's Hadoop configuration (measured)
                spark.conf.set(k.removeprefix("spark.hadoop."), v)
            elif not k.startswith(("spark.ui.", "spark.driver.")):  # fixed once it runs
                spark.conf.set(k, v)
    else:
        _check_master(master or "local[*]")
        from pyspark.sql import SparkSession

        builder = SparkSession.builder.master(master or "local[*]").appName(app_name)
        builder = builder.config("spark.pyspark.python", sys.executable)
        builder = builder.config("spark.pyspark.driver.python", sys.executable)
        builder = builder.config("spark.executorEnv.PYSPARK_PYTHON", sys.executable)
        trusted = trusted_iterator_modules()
        if trusted:  # a cluster's executors: their Python workers load these iterators
            builder = builder.config(f"spark.executorEnv.{TRUST_ENV}", ",".join(trusted))
        for k, v in session_conf(master or "local[*]", conf).items():
            builder = builder.config(k, v)
        spark = builder.getOrCreate()
        spark.sparkContext.setLogLevel("ERROR")
    register_data_source(spark)
    return spark


def _check_master(master: str, timeout: float = 5.0) -> None:
    """Refuse a standalone master (``spark://host:port[,host:port]``) none of whose addresses
    accepts a connection. Spark itself retries for about a minute, then leaves a stopped
    context whose next call fails with an error that never names the master."""
    if not master.startswith("spark://"):
        return
    problem: Exception | None = None
    for address in master[len("spark://"):].split(","):  # standby masters: any one will do
        host, _, port = address.rpartition(":")
        try:
            with socket.create_connection((host or address, int(port or 7077)), timeout):
                return
        except (OSError, ValueError) as e:
            problem = e
    raise JobError(f"could not reach the Spark master {master} ({problem}); is it running, "
                   f"and is the address right?")


def register_data_source(spark: SparkSession) -> None:
    """Make ``spark.read.format("sediment")`` and ``df.write.format("sediment")`` work."""
    from sediment.spark.datasource import SedimentDataSource

    spark.dataSource.register(SedimentDataSource)


def ship_package(spark: SparkSession) -> str:
    """Zip the installed ``sediment`` package and add it to the executors' Python path.

    For clusters whose workers do not have Sediment installed (they still need pyarrow,
    numpy, datafusion and boto3). Returns the path of the zip.
    """
    import sediment

    root = Path(sediment.__file__).parent
    out = Path(tempfile.mkdtemp(prefix="sediment-ship-")) / "sediment.zip"
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for f in root.rglob("*.py"):
            z.write(f, Path("sediment") / f.relative_to(root))
    spark.sparkContext.addPyFile(str(out))
    return str(out)
