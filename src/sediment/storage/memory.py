"""In-memory object store: a fake for logic tests (same semantics, no I/O).

It holds real Parquet: :meth:`MemoryObjectStore.arrow_filesystem` is a ``pyarrow.fs``
filesystem over the same bytes (a :class:`pafs.PyFileSystem` of :class:`MemoryFileSystem`), so
data files written through pyarrow are objects of the store and objects put into the store are
files to pyarrow. Ingest, query and compaction run on it as on local disk or S3, without the
disk.
"""

from __future__ import annotations

import io
import threading
import time
from collections.abc import Iterable, Iterator
from typing import Any, ClassVar

import pyarrow as pa
import pyarrow.fs as pafs

from sediment.errors import ObjectNotFoundError
from sediment.storage.base import ObjectInfo, ObjectStore


class MemoryObjectStore(ObjectStore):
    """A dict of bytes guarded by a lock. ``memory://name`` opens a shared named instance."""

    _named: ClassVar[dict[str, MemoryObjectStore]] = {}

    def __init__(self, name: str = "") -> None:
        self.uri = f"memory://{name}"
        self._objects: dict[str, tuple[bytes, float]] = {}
        self._lock = threading.Lock()
        self._fs: pafs.FileSystem | None = None

    @property
    def identity(self) -> str:
        # an unnamed instance is a store of its own (every one has the URI memory://)
        return self.uri if self.uri != "memory://" else f"memory://#{id(self)}"

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
        """A pyarrow filesystem over this store's objects (paths are keys; the base is "")."""
        if self._fs is None:
            self._fs = pafs.PyFileSystem(MemoryFileSystem(self))
        return self._fs, ""


class MemoryFileSystem(pafs.FileSystemHandler):
    """The pyarrow filesystem of a :class:`MemoryObjectStore`: a file is an object (its path
    is its key), a directory is any key prefix ending at a '/', as on S3 (so creating one
    writes nothing and deleting one deletes the objects under it). A file being written
    becomes an object, whole, when its stream closes: readers see old bytes or new, never a
    part. An open input file reads the bytes the object held when it was opened."""

    def __init__(self, store: MemoryObjectStore) -> None:
        self.store = store

    def __eq__(self, other: object) -> bool:
        return isinstance(other, MemoryFileSystem) and other.store is self.store

    def __ne__(self, other: object) -> bool:
        return not self == other

    def __hash__(self) -> int:
        return id(self.store)

    def get_type_name(self) -> str:
        return "sediment-memory"

    def normalize_path(self, path: str) -> str:
        return path.strip("/")

    # ---- metadata ----------------------------------------------------------------------------
    def _info(self, path: str) -> pafs.FileInfo:
        path = path.strip("/")
        o = self.store.head(path) if path else None
        if o is not None:
            return pafs.FileInfo(path, pafs.FileType.File, size=o.size, mtime=o.mtime)
        if not path or next(self.store.list(path + "/"), None) is not None:
            return pafs.FileInfo(path, pafs.FileType.Directory)
        return pafs.FileInfo(path, pafs.FileType.NotFound)

    def get_file_info(self, paths: list[str]) -> list[pafs.FileInfo]:
        return [self._info(p) for p in paths]

    def get_file_info_selector(self, selector: pafs.FileSelector) -> list[pafs.FileInfo]:
        base = selector.base_dir.strip("/")
        info = self._info(base)
        if info.type == pafs.FileType.NotFound:
            if selector.allow_not_found:
                return []
            raise FileNotFoundError(f"no directory {base!r} in {self.store.uri}")
        if info.type == pafs.FileType.File:
            raise NotADirectoryError(f"{base!r} in {self.store.uri} is a file")
        prefix = f"{base}/" if base else ""
        out: dict[str, pafs.FileInfo] = {}
        for o in self.store.list(prefix):
            parts = o.key[len(prefix):].split("/")
            # every folder between the base and the object, then the object itself
            depth = len(parts) if selector.recursive else 1
            for i in range(1, min(depth, len(parts) - 1) + 1):
                folder = prefix + "/".join(parts[:i])
                out.setdefault(folder, pafs.FileInfo(folder, pafs.FileType.Directory))
            if selector.recursive or len(parts) == 1:
                out[o.key] = pafs.FileInfo(o.key, pafs.FileType.File, size=o.size,
                                           mtime=o.mtime)
        return [out[k] for k in sorted(out)]

    # ---- folders ---------------------------------------------------------------------------------
    def create_dir(self, path: str, recursive: bool) -> None:
        if self._info(path).type == pafs.FileType.File:
            raise FileExistsError(f"{path!r} in {self.store.uri} is a file")

    def _keys_under(self, path: str) -> list[str]:
        path = path.strip("/")
        return [o.key for o in self.store.list(f"{path}/" if path else "")]

    def delete_dir(self, path: str) -> None:
        if self._info(path).type != pafs.FileType.Directory:
            raise FileNotFoundError(f"no directory {path!r} in {self.store.uri}")
        self.store.delete_many(self._keys_under(path))

    def delete_dir_contents(self, path: str, missing_dir_ok: bool = False) -> None:
        if not missing_dir_ok and self._info(path).type != pafs.FileType.Directory:
            raise FileNotFoundError(f"no directory {path!r} in {self.store.uri}")
        self.store.delete_many(self._keys_under(path))

    def delete_root_dir_contents(self) -> None:
        self.store.delete_many(self._keys_under(""))

    # ---- files ---------------------------------------------------------------------------------
    def delete_file(self, path: str) -> None:
        path = path.strip("/")
        if self.store.head(path) is None:
            raise FileNotFoundError(f"no file {path!r} in {self.store.uri}")
        self.store.delete_many([path])

    def copy_file(self, src: str, dest: str) -> None:
        self.store.put(dest.strip("/"), self._bytes(src))

    def move(self, src: str, dest: str) -> None:
        src, dest = src.strip("/"), dest.strip("/")
        if self.store.head(src) is not None:
            self.store.put(dest, self.store.get(src))
            self.store.delete_many([src])
            return
        keys = self._keys_under(src)
        if not keys:
            raise FileNotFoundError(f"no file or directory {src!r} in {self.store.uri}")
        for k in keys:
            self.store.put(dest + k[len(src):], self.store.get(k))
        self.store.delete_many(keys)

    def _bytes(self, path: str) -> bytes:
        try:
            return self.store.get(path.strip("/"))
        except ObjectNotFoundError:
            raise FileNotFoundError(f"no file {path!r} in {self.store.uri}") from None

    def open_input_file(self, path: str) -> pa.NativeFile:
        return pa.BufferReader(self._bytes(path))

    def open_input_stream(self, path: str) -> pa.NativeFile:
        return pa.BufferReader(self._bytes(path))

    def open_output_stream(self, path: str, metadata: Any) -> pa.NativeFile:
        return pa.PythonFile(_Upload(self.store, path.strip("/")), mode="w")

    def open_append_stream(self, path: str, metadata: Any) -> pa.NativeFile:
        key = path.strip("/")
        upload = _Upload(self.store, key)
        if self.store.head(key) is not None:
            upload.write(self.store.get(key))
        return pa.PythonFile(upload, mode="w")


class _Upload(io.BytesIO):
    """The bytes of a file being written, put into the store as one object on close."""

    def __init__(self, store: MemoryObjectStore, key: str) -> None:
        super().__init__()
        self._store = store
        self._key = key

    def close(self) -> None:
        if not self.closed:
            self._store.put(self._key, self.getvalue())
        super().close()
