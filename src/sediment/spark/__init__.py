"""Sediment on Spark (PySpark, imported lazily): session helper, bulk import, the Python data
source ``spark.read.format("sediment")`` / ``df.write.format("sediment")``, and a Spark runner
for compaction jobs.

Only this package imports pyspark; the rest of Sediment runs without it.
"""

from sediment.spark.bulk_import import bulk_import
from sediment.spark.session import register_data_source, session, ship_package

__all__ = ["bulk_import", "register_data_source", "session", "ship_package"]
