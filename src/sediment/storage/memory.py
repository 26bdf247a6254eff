"""In-memory object store: a fake for logic tests (same semantics, no I/O)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Iterator
from typing import ClassVar

import pyarrow.fs as pafs

from sediment.errors import ObjectNotFoundError, StorageError
from sediment.storage.base import ObjectInfo, ObjectStore


class MemoryObjectStore(ObjectStore):
    """A dict of bytes guarded by a lock. ``memory://name`` opens a shared named instance."""

    _named: ClassVar[dict[str, MemoryObjectStore]] = {}

    def __init__(self, name: str = "") -> None:
        self.uri = f"memory://{name}"
        self._objects: dict[str, tuple[bytes, float]] = {}
        self._lock = threading.Lock()

    @classmethod
    def named(cls, name: str) -> MemoryObjectStore:
        if name not in cls._named:
            cls._named[name] = cls(name)
        return cls._named[name]

    def get(self, key: str) -> bytes:
        try:
            return self._objects[key][0]
        except KeyError:
            raise ObjectNotFoundError(f"no object {key!r} in {self.uri}") from None

    def get_range(self, key: str, start: int, end: int) -> bytes:
        return self.get(key)[start:end]

    def put(self, key: str, data: bytes) -> None:
        with self._lock:
            self._objects[key] = (bytes(data), time.time())

    def put_if_absent(self, key: str, data: bytes) -> bool:
        with self._lock:
            if key in self._objects:
                return False
            self._objects[key] = (bytes(data), time.time())
            return True

    def list(self, prefix: str, *, start_after: str | None = None) -> Iterator[ObjectInfo]:
        with self._lock:
            items = sorted(self._objects.items())
        for k, (data, t) in items:
            if k.startswith(prefix) and (start_after is None or k > start_after):
                yield ObjectInfo(k, len(data), t)

    def delete_many(self, keys: Iterable[str]) -> None:
        with self._lock:
            for k in keys:
                self._objects.pop(k, None)

    def head(self, key: str) -> ObjectInfo | None:
        v = self._objects.get(key)
        return None if v is None else ObjectInfo(key, len(v[0]), v[1])

    def arrow_filesystem(self) -> tuple[pafs.FileSystem, str]:
        raise StorageError(f"{self.uri} is an in-memory store for table-state logic and holds "
                           "no Parquet data files; open a local folder or S3 store instead")
