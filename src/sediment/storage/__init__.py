"""Object stores: the only code that talks to disks and S3.

``open_object_store(uri, **options)`` picks the implementation by URI scheme (see
:mod:`sediment.storage.registry`): a path or ``file://`` gives :class:`LocalObjectStore`,
``s3://bucket/prefix`` gives :class:`S3ObjectStore`, ``memory://`` gives the in-memory fake used
by logic tests. Callers use the :class:`ObjectStore` interface only (``local_path``,
``reopen_options``, ``arrow_filesystem`` say what differs between stores), never a concrete
class.
"""

from sediment.storage.base import ObjectInfo, ObjectStore
from sediment.storage.local import LocalObjectStore, file_uri_to_path
from sediment.storage.memory import MemoryObjectStore
from sediment.storage.registry import (
    open_object_store,
    open_object_store_beside,
    register_scheme,
    spec_options,
)

__all__ = ["LocalObjectStore", "MemoryObjectStore", "ObjectInfo", "ObjectStore",
           "file_uri_to_path", "open_object_store", "open_object_store_beside", "register_scheme",
           "spec_options"]
