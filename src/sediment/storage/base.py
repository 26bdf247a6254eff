"""The ObjectStore interface: keys are '/'-separated paths relative to the store's root."""

from __future__ import annotations

import builtins
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow.fs as pafs

from sediment.storage.streams import (
    PART_SIZE,
    BufferedWriter,
    CopyResult,
    MultipartUpload,
    ObjectWriter,
)


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    """One listed object."""

    key: str
    size: int
    mtime: float


class ObjectStore(ABC):
    """Get, put, put-if-absent, list and delete objects under one root.

    ``put_if_absent`` is the only coordination primitive Sediment needs: it must be atomic
    (exactly one of many concurrent callers for a key wins) and never expose a partial object.
    """

    uri: str
    """The normalised root URI (``file:///abs/path`` percent-encoded, ``s3://bucket/prefix``
    and ``memory://x`` as written); ``open_object_store(uri)`` opens this store again."""
    probe_limit: int = 64

    @property
    def identity(self) -> str:
        """What names the storage behind this store: two stores of one identity hold the same
        objects (a process shares what it knows of a table among its handles by it:
        ``sediment.state.head_cache``). The URI, unless the URI alone cannot tell."""
        return self.uri

    part_size: int = PART_SIZE
    """Bytes per part of a streaming write (S3: a multipart upload's parts) and per ranged
    read of :meth:`read_parts` (``sediment.storage.streams``)."""
    """How many new log entries a state refresh reads one GET after another before it lists
    the log instead: many where a GET is cheap and a listing costs O(folder size) (local disk,
    memory), few where every request is a network round trip (S3)."""

    @abstractmethod
    def get(self, key: str) -> bytes:
        """The whole object; ObjectNotFoundError when missing."""

    @abstractmethod
    def get_range(self, key: str, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of the object."""

    def get_ranges(self, key: str, spans: Sequence[tuple[int, int]]) -> list[bytes]:
        """Bytes ``[start, end)`` of the object for each span, in order: a :meth:`get_range`
        each, unless the store reads them more cheaply together (local disk opens the file
        once for them all)."""
        return [self.get_range(key, start, end) for start, end in spans]

    @abstractmethod
    def put(self, key: str, data: bytes) -> None:
        """Write (or overwrite) an object atomically: readers see old or new, never partial."""

    def put_report(self, key: str, data: bytes) -> None:
        """:meth:`put` of an object no guarantee rests on (a status event): atomic, but a
        store may skip making it durable, so that writing a report costs its writer no disk
        flush (an OS crash may then lose it, or leave it empty: its reader leaves out what
        fails its checksum)."""
        self.put(key, data)

    @abstractmethod
    def put_if_absent(self, key: str, data: bytes) -> bool:
        """Create the object only if no object has the key; False when it was taken."""

    @abstractmethod
    def list(self, prefix: str, *, start_after: str | None = None) -> Iterator[ObjectInfo]:
        """Objects whose key starts with ``prefix``, sorted by key, after ``start_after``."""

    @abstractmethod
    def delete_many(self, keys: Iterable[str]) -> None:
        """Delete objects (missing keys are ignored), in batches."""

    @abstractmethod
    def head(self, key: str) -> ObjectInfo | None:
        """Size and time of an object, or None when it does not exist."""

    @abstractmethod
    def arrow_filesystem(self) -> tuple[pafs.FileSystem, str]:
        """A pyarrow filesystem and the base path of this store's root within it."""

    def exists(self, key: str) -> bool:
        return self.head(key) is not None

    # ---- objects of any size (sediment.storage.streams) -------------------------------
    def open_writer(self, key: str, *, size: int | None = None) -> ObjectWriter:
        """A streaming write of ``key`` (``size``: the bytes to come when known, which may
        choose larger parts); the object appears whole at ``commit``. By default the bytes
        are gathered and put at once (stores that hold objects in memory)."""
        return BufferedWriter(self, key)

    def read_parts(self, key: str, *, size: int | None = None,
                   part_size: int | None = None) -> Iterator[bytes]:
        """The object's bytes in ranged reads of ``part_size`` (default :attr:`part_size`),
        one part in memory at a time; ``size`` spares the HEAD when known.
        ObjectNotFoundError when it is missing."""
        if size is None:
            info = self.head(key)
            if info is None:
                from sediment.errors import ObjectNotFoundError

                raise ObjectNotFoundError(f"no object {key!r} in {self.uri}")
            size = info.size
        step = part_size or self.part_size
        for start in range(0, size, step):
            yield self.get_range(key, start, min(size, start + step))

    def copy_from(self, source: ObjectStore, source_key: str, key: str) -> CopyResult | None:
        """Copy ``source_key`` of ``source`` to ``key`` here without the bytes passing
        through this process, when the storage service can (both ends on it); None when it
        cannot, and the caller streams instead (``sediment.storage.transfer``)."""
        return None

    def multipart_uploads(self, prefix: str) -> Iterator[MultipartUpload]:
        """Uploads under ``prefix`` started and never completed nor aborted (a writer
        killed mid-object); none where writes do not leave them (local disk, memory)."""
        return iter(())

    def abort_uploads(self, uploads: Iterable[MultipartUpload]) -> int:
        """Abort ``uploads`` (gone ones are no error); how many were aborted."""
        return 0

    def locate(self, key: str) -> tuple[ObjectStore, str]:
        """The store that holds ``key`` at its root, and the key there (a prefixed view's
        inner store and prefixed key): how two stores tell whether they share a service."""
        return self, key

    def list_folders(self, prefix: str) -> builtins.list[str]:
        """Names of the folders directly under ``prefix`` (which ends with '/'), sorted: the
        next key segment of every object below it. Stores override this with a listing that
        does not visit every object (a delimiter listing, a directory read)."""
        names = {o.key[len(prefix):].split("/", 1)[0] for o in self.list(prefix)
                 if "/" in o.key[len(prefix):]}
        return sorted(names)

    def delete_folder(self, prefix: str) -> int:
        """Delete every object (and leftover temporary) under ``prefix``; how many."""
        keys = [o.key for o in self.list(prefix)] + [o.key for o in self.temporaries(prefix)]
        self.delete_many(keys)
        return len(keys)

    def temporaries(self, prefix: str) -> Iterator[ObjectInfo]:
        """Leftovers of writes interrupted by a crash under ``prefix`` that ``list`` hides
        (the local store's temp files); ``delete_many`` removes them. None by default."""
        return iter(())

    def local_path(self, key: str) -> str | None:
        """The local filesystem path of ``key`` when this store keeps its objects in local
        files (readers may then open it directly), else None."""
        return None

    def sync(self, keys: Iterable[str]) -> None:
        """Make the objects ``keys`` durable before anything refers to them (a commit naming
        data files): objects written through :meth:`arrow_filesystem` are not made durable
        by their writer. Keys that do not exist are skipped. Nothing to do where a finished
        write is durable already (S3, memory)."""
        return None

    def cache_name(self, key: str) -> str | None:
        """A name of ``key`` unique across stores (endpoint, bucket, full key) under which the
        disk cache (sediment.storage.diskcache) keeps its ranges, or None for a store whose
        reads are cheap already and are not cached (local disk, memory)."""
        return None

    def reopen_options(self) -> dict[str, Any]:
        """The options that reopen this store elsewhere (in a Spark task, another process):
        ``open_object_store(store.uri, **store.reopen_options())``; empty for a store that
        takes no options."""
        return {}

    def path(self, key: str) -> str:
        """Path of ``key`` in :meth:`arrow_filesystem` (for Parquet reads and writes)."""
        _, base = self.arrow_filesystem()
        return f"{base}/{key}" if base else key

    def root(self) -> ObjectStore:
        """The underlying store when this is a prefixed view (a table's folder), else self."""
        return self

    def child(self, prefix: str) -> ObjectStore:
        """The same store rooted at ``prefix`` (a table's own folder, say)."""
        return PrefixedObjectStore(self, prefix)


class PrefixedObjectStore(ObjectStore):
    """A view of another store under a key prefix."""

    def __init__(self, inner: ObjectStore, prefix: str) -> None:
        self.inner = inner
        self.probe_limit = inner.probe_limit
        self.prefix = prefix.strip("/") + "/"
        self.uri = inner.uri.rstrip("/") + "/" + prefix.strip("/")

    @property
    def identity(self) -> str:
        return self.inner.identity.rstrip("/") + "/" + self.prefix.rstrip("/")

    def _k(self, key: str) -> str:
        return self.prefix + key

    @property
    def part_size(self) -> int:
        """The inner store's (a view reads and writes through it; setting it sets theirs)."""
        return self.inner.part_size

    @part_size.setter
    def part_size(self, value: int) -> None:
        self.inner.part_size = value

    def root(self) -> ObjectStore:
        return self.inner.root()

    def get(self, key: str) -> bytes:
        return self.inner.get(self._k(key))

    def get_range(self, key: str, start: int, end: int) -> bytes:
        return self.inner.get_range(self._k(key), start, end)

    def get_ranges(self, key: str, spans: Sequence[tuple[int, int]]) -> list[bytes]:
        return self.inner.get_ranges(self._k(key), spans)

    def put(self, key: str, data: bytes) -> None:
        self.inner.put(self._k(key), data)

    def put_report(self, key: str, data: bytes) -> None:
        self.inner.put_report(self._k(key), data)

    def put_if_absent(self, key: str, data: bytes) -> bool:
        return self.inner.put_if_absent(self._k(key), data)

    def list(self, prefix: str, *, start_after: str | None = None) -> Iterator[ObjectInfo]:
        n = len(self.prefix)
        sa = None if start_after is None else self._k(start_after)
        for o in self.inner.list(self._k(prefix), start_after=sa):
            yield ObjectInfo(o.key[n:], o.size, o.mtime)

    def delete_many(self, keys: Iterable[str]) -> None:
        self.inner.delete_many(self._k(k) for k in keys)

    def temporaries(self, prefix: str) -> Iterator[ObjectInfo]:
        n = len(self.prefix)
        for o in self.inner.temporaries(self._k(prefix)):
            yield ObjectInfo(o.key[n:], o.size, o.mtime)

    def list_folders(self, prefix: str) -> builtins.list[str]:
        return self.inner.list_folders(self._k(prefix))

    def delete_folder(self, prefix: str) -> int:
        return self.inner.delete_folder(self._k(prefix))

    def head(self, key: str) -> ObjectInfo | None:
        o = self.inner.head(self._k(key))
        return None if o is None else ObjectInfo(key, o.size, o.mtime)

    def local_path(self, key: str) -> str | None:
        return self.inner.local_path(self._k(key))

    def open_writer(self, key: str, *, size: int | None = None) -> ObjectWriter:
        return self.inner.open_writer(self._k(key), size=size)

    def read_parts(self, key: str, *, size: int | None = None,
                   part_size: int | None = None) -> Iterator[bytes]:
        return self.inner.read_parts(self._k(key), size=size, part_size=part_size)

    def copy_from(self, source: ObjectStore, source_key: str, key: str) -> CopyResult | None:
        return self.inner.copy_from(source, source_key, self._k(key))

    def multipart_uploads(self, prefix: str) -> Iterator[MultipartUpload]:
        n = len(self.prefix)
        for u in self.inner.multipart_uploads(self._k(prefix)):
            yield MultipartUpload(u.key[n:], u.upload_id, u.initiated)

    def abort_uploads(self, uploads: Iterable[MultipartUpload]) -> int:
        return self.inner.abort_uploads(MultipartUpload(self._k(u.key), u.upload_id,
                                                        u.initiated) for u in uploads)

    def locate(self, key: str) -> tuple[ObjectStore, str]:
        return self.inner.locate(self._k(key))

    def sync(self, keys: Iterable[str]) -> None:
        self.inner.sync(self._k(k) for k in keys)

    def cache_name(self, key: str) -> str | None:
        return self.inner.cache_name(self._k(key))

    def reopen_options(self) -> dict[str, Any]:
        return self.inner.reopen_options()

    def arrow_filesystem(self) -> tuple[pafs.FileSystem, str]:
        fs, base = self.inner.arrow_filesystem()
        return fs, (f"{base}/" if base else "") + self.prefix.rstrip("/")
