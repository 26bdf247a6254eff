"""Sediment: a log-structured-merge table store of sorted Parquet files on object storage.

>>> import pyarrow as pa, sediment as sd
>>> store = sd.Store.open("memory://doctest")
>>> schema = sd.Schema(row_keys=[("key", pa.string())], values=[("value", pa.int64())])
>>> table = store.create_table("events", schema)
>>> table.version
1
"""

from typing import TYPE_CHECKING, Any

from sediment.errors import (
    CorruptDataError,
    CorruptionError,
    CorruptMetadataError,
    IdempotencyKeyReusedError,
    SedimentError,
)

if TYPE_CHECKING:
    from sediment.core.model import FileReference, Partition
    from sediment.core.regions import Range, Region
    from sediment.maintenance.purge import PurgeResult
    from sediment.maintenance.usage import StoreUsage, Usage
    from sediment.maintenance.verify import Damage, VerifyReport
    from sediment.query.request import ReadRequest
    from sediment.query.scan import Scan
    from sediment.schema import Schema
    from sediment.schemes.join import join, join_reader
    from sediment.state.log import HistoryEntry
    from sediment.store import Store
    from sediment.table import Table

_LAZY: dict[str, str] = {
    "FileReference": "sediment.core.model",
    "Partition": "sediment.core.model",
    "Range": "sediment.core.regions",
    "Region": "sediment.core.regions",
    "PurgeResult": "sediment.maintenance.purge",
    "StoreUsage": "sediment.maintenance.usage",
    "Usage": "sediment.maintenance.usage",
    "Damage": "sediment.maintenance.verify",
    "VerifyReport": "sediment.maintenance.verify",
    "ReadRequest": "sediment.query.request",
    "Scan": "sediment.query.scan",
    "Schema": "sediment.schema",
    "join": "sediment.schemes.join",
    "join_reader": "sediment.schemes.join",
    "HistoryEntry": "sediment.state.log",
    "Store": "sediment.store",
    "Table": "sediment.table",
}
"""The public names and the modules that define them, imported on first use: every process
that imports any ``sediment.X`` (each ``sediment`` command, each worker process, each Spark
task) imports this package first, and most need few of these (``sediment.cli`` imports what
its command runs; measured: half of a command's start was this package importing every room)."""


def __getattr__(name: str) -> Any:
    """``sediment.Store`` and the other public names, from their modules on first use (then
    kept in this module's namespace); a subpackage (``sediment.core``) by import."""
    import importlib

    module = _LAZY.get(name)
    if module is not None:
        value = getattr(importlib.import_module(module), name)
        globals()[name] = value
        return value
    if not name.startswith("_"):
        try:
            return importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as e:
            if e.name != f"{__name__}.{name}":
                raise
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


__version__ = "0.1.0"


def connect(uri: str, token: str | None = None, tls_root_certs: Any = None) -> Any:
    """A client of ``sediment serve`` at ``grpc://host:port`` (or ``grpc+tls://``): a
    :class:`sediment.serve.client.RemoteStore` whose tables answer as local ones do.

    ``token``: the server's bearer token; ``tls_root_certs``: PEM bytes or a PEM file that
    the server's certificate must chain to. The Flight client is imported on first use, so
    ``import sediment`` stays free of it (and by name, so that the rooms importing
    ``sediment`` for its API, such as ``sediment.spark``, do not count as importing the serve
    room, which sits above them)."""
    import importlib

    client = importlib.import_module("sediment.serve.client")
    return client.connect(uri, token=token, tls_root_certs=tls_root_certs)


__all__ = [
    "CorruptDataError",
    "CorruptMetadataError",
    "CorruptionError",
    "Damage",
    "FileReference",
    "HistoryEntry",
    "IdempotencyKeyReusedError",
    "Partition",
    "PurgeResult",
    "Range",
    "ReadRequest",
    "Region",
    "Scan",
    "Schema",
    "SedimentError",
    "Store",
    "StoreUsage",
    "Table",
    "Usage",
    "VerifyReport",
    "__version__",
    "connect",
    "join",
    "join_reader",
]
