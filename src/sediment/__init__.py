"""Sediment: a log-structured-merge table store of sorted Parquet files on object storage.

>>> import pyarrow as pa, sediment as sd
>>> store = sd.Store.open("memory://doctest")
>>> schema = sd.Schema(row_keys=[("key", pa.string())], values=[("value", pa.int64())])
>>> table = store.create_table("events", schema)
>>> table.version
1
"""

from sediment.core.model import FileReference, Partition, Region
from sediment.core.ranges import Range
from sediment.errors import SedimentError
from sediment.schema import Schema
from sediment.state.log import HistoryEntry
from sediment.store import Store
from sediment.table import Table

__version__ = "0.1.0"


def __getattr__(name: str) -> object:
    """``connect`` is imported on first use: ``import sediment`` stays free of Flight. (By
    name, so that the rooms importing ``sediment`` for its API, such as ``sediment.spark``,
    do not count as importing the serve room, which sits above them.)"""
    if name == "connect":
        import importlib

        return importlib.import_module("sediment.serve.client").connect
    raise AttributeError(f"module 'sediment' has no attribute {name!r}")


__all__ = [
    "FileReference",
    "HistoryEntry",
    "Partition",
    "Range",
    "Region",
    "Schema",
    "SedimentError",
    "Store",
    "Table",
    "__version__",
    "connect",
]
