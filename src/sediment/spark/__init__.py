"""Sediment on Spark (PySpark, imported lazily): session helper, bulk import, the Python data
source ``spark.read.format("sediment")`` / ``df.write.format("sediment")``, and a Spark runner
for compaction jobs.

Only this package imports pyspark; the rest of Sediment runs without it. pyspark is the optional
``[spark]`` extra: importing this package (which every Spark command, ``runner="spark"`` and
``bulk_import`` do) without it raises :class:`~sediment.errors.MissingDependencyError` saying what
to install.
"""

from sediment.errors import MissingDependencyError, install_hint

SPARK_INSTALL_HINT = install_hint("spark")

try:
    import pyspark  # noqa: F401  (the check: every Spark entry point imports this package)
except ImportError as exc:
    raise MissingDependencyError(
        f"PySpark is not installed and this runs on Spark: {SPARK_INSTALL_HINT}") from exc

from sediment.spark.bulk_import import bulk_import  # noqa: E402  (after the check)
from sediment.spark.cojoin import co_join  # noqa: E402
from sediment.spark.frames import read_table, register_view  # noqa: E402
from sediment.spark.session import register_data_source, session, ship_package  # noqa: E402

__all__ = ["bulk_import", "co_join", "read_table", "register_data_source", "register_view",
           "session", "ship_package"]
