"""Object stores: the only code that talks to disks and S3.

``open_object_store(uri)`` picks the implementation by URI scheme: a path or ``file://`` gives
:class:`LocalObjectStore`, ``s3://bucket/prefix`` gives :class:`S3ObjectStore`, ``memory://``
gives the in-memory fake used by logic tests.
"""

from sediment.storage.base import ObjectInfo, ObjectStore, open_object_store
from sediment.storage.local import LocalObjectStore
from sediment.storage.memory import MemoryObjectStore

__all__ = ["LocalObjectStore", "MemoryObjectStore", "ObjectInfo", "ObjectStore",
           "open_object_store"]
