"""Local-disk object store. put-if-absent is an atomic hard link of a fully written temp file.

Durability: a put returns only once the object survives an OS crash or power loss: the temp
file is fsynced before it is renamed or linked into place, and so is the directory that holds
the new name afterwards (a rename or link lives in the directory, not in the file), as is the
parent of every directory the put had to create."""

from __future__ import annotations

import builtins
import contextlib
import errno
import os
import stat
import uuid
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import unquote_to_bytes
from urllib.request import url2pathname

import pyarrow.fs as pafs

from sediment.errors import ObjectNotFoundError, StorageError, WriteRefusedError
from sediment.storage.base import ObjectInfo, ObjectStore
from sediment.storage.streams import ObjectWriter

_TMP = ".tmp-"
_MISSING = (FileNotFoundError, IsADirectoryError, NotADirectoryError)
"""Errors meaning "no object at this key" (a folder, or a path through a file, is no object)."""


def file_uri_to_path(uri: str) -> str:
    """The local path a ``file:`` URI names: the one decoder of file URIs in Sediment.

    It is the inverse of :meth:`pathlib.Path.as_uri` (which makes ``LocalObjectStore.uri``):
    the path is percent-decoded exactly once, so ``%20`` is a space and ``%2520`` is a folder
    really named ``%20``; ``Store.open(store.uri)`` thus reopens the same store whatever its
    path holds. A file URI has no query or fragment here: a ``?`` or ``#`` left unencoded is
    part of the path (a hand-written ``file:///data/run#1`` names that folder). Accepted
    forms: ``file:///abs``, ``file://localhost/abs``, ``file:/abs`` and ``file:relative``.

    Raises:
        StorageError: a host other than ``localhost`` (``file://data/store`` is usually a
            relative path written with one slash too many, which would name ``/store``).
    """
    rest = uri[len("file:"):] if uri[:5].lower() == "file:" else uri
    if rest.startswith("//"):
        host, slash, path = rest[2:].partition("/")
        if host.lower() not in ("", "localhost"):
            if os.name == "nt":  # a UNC share: file://server/share/folder
                return url2pathname(f"//{host}/{path}")
            raise StorageError(f"file URI {uri!r} names host {host!r}; use file:///absolute/"
                               "path (three slashes) or a plain path")
        rest = slash + path
    if os.name == "nt":
        return url2pathname(rest)
    # The bytes of the name, decoded as the OS decodes names: a name that is not UTF-8
    # round-trips through its surrogate escapes, as Path.as_uri encoded it.
    return os.fsdecode(unquote_to_bytes(rest))


def _fsync_file(path: Path) -> None:
    """Make the bytes of the file at ``path`` durable (a missing file is skipped)."""
    try:  # Windows flushes only a file opened for writing
        fd = os.open(path, os.O_RDWR if os.name == "nt" else os.O_RDONLY)
    except FileNotFoundError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_directory(path: Path) -> None:
    """Make the entries of directory ``path`` (new names, renames) durable."""
    if os.name == "nt":  # Windows cannot open a directory for fsync; NTFS journals names
        return
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


_LINK_REFUSED = frozenset({errno.ENOENT, errno.ENOTDIR, errno.EACCES, errno.EPERM, errno.EROFS,
                           errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC),
                           errno.ENAMETOOLONG, errno.EXDEV, errno.EMLINK})
"""Errors of ``link`` that say it made nothing."""


class LocalObjectStore(ObjectStore):
    """Objects are files under a root folder; keys map to relative paths."""

    sync_directories: bool = True
    """Fsync directories after a put (see the module docstring). Only the state-store
    benchmark turns it off, to measure what it costs."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.directory = Path(root).expanduser().resolve()
        self.uri = self.directory.as_uri()
        self._fs = pafs.LocalFileSystem()

    def _p(self, key: str) -> Path:
        if not key or key.startswith("/") or any(p in ("..", ".") for p in key.split("/")):
            raise StorageError(f"invalid object key {key!r} in store {self.uri}")
        return self.directory / key

    def get(self, key: str) -> bytes:
        try:
            return self._p(key).read_bytes()
        except _MISSING:
            raise ObjectNotFoundError(f"no object {key!r} in {self.uri}") from None
        except OSError as e:
            raise StorageError(f"reading {key!r} in {self.uri}: {e}") from e

    def get_range(self, key: str, start: int, end: int) -> bytes:
        try:
            with open(self._p(key), "rb") as f:
                f.seek(start)
                return f.read(max(0, end - start))
        except _MISSING:
            raise ObjectNotFoundError(f"no object {key!r} in {self.uri}") from None
        except OSError as e:
            raise StorageError(f"reading {key!r} in {self.uri}: {e}") from e

    def get_ranges(self, key: str, spans: Sequence[tuple[int, int]]) -> list[bytes]:
        """The spans of the file read through one unbuffered open (a cold lookup reads a
        page of each column: one open, not one per page; every open, read and close gives
        up the GIL, and with many threads each time hands it to another)."""
        try:
            fd = os.open(self._p(key), os.O_RDONLY)  # (no file object: fewer system calls)
            try:
                return [os.pread(fd, max(0, end - start), start) for start, end in spans]
            finally:
                os.close(fd)
        except _MISSING:
            raise ObjectNotFoundError(f"no object {key!r} in {self.uri}") from None
        except OSError as e:
            raise StorageError(f"reading {key!r} in {self.uri}: {e}") from e

    def _make_directories(self, folder: Path) -> None:
        """Create ``folder`` and its missing parents, each made durable in its parent."""
        if folder.is_dir():
            return
        missing: list[Path] = []
        d = folder
        while not d.is_dir() and d != d.parent:
            missing.append(d)
            d = d.parent
        for d in reversed(missing):
            try:
                d.mkdir()
            except FileExistsError:
                if not d.is_dir():
                    raise
                continue  # made by a concurrent put, which syncs its parent itself
            if self.sync_directories:
                _fsync_directory(d.parent)

    def _write_temp(self, path: Path, data: bytes, *, durable: bool = True) -> Path:
        self._make_directories(path.parent)
        tmp = path.parent / f"{_TMP}{uuid.uuid4().hex}"
        with open(tmp, "wb") as f:
            f.write(data)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        return tmp

    def put_report(self, key: str, data: bytes) -> None:
        """A rename of a complete temp file (atomic for readers), with no fsync of the file
        or its folder: a report is written on its writer's path (an ingest's status event)
        and no guarantee rests on it."""
        path = self._p(key)
        try:
            os.replace(self._write_temp(path, data, durable=False), path)
        except OSError as e:
            raise StorageError(f"writing {key!r} in {self.uri}: {e}") from e

    def put(self, key: str, data: bytes) -> None:
        path = self._p(key)
        try:
            tmp = self._write_temp(path, data)
            os.replace(tmp, path)
            if self.sync_directories:
                _fsync_directory(path.parent)
        except OSError as e:
            raise StorageError(f"writing {key!r} in {self.uri}: {e}") from e

    def put_if_absent(self, key: str, data: bytes) -> bool:
        """Create ``key`` unless it exists. A failure to write the temp file leaves no object
        (the link is the only step that creates it), and so does a link refused for a reason
        the file system settles (a missing or read-only folder, no room, no right): those are
        a :class:`WriteRefusedError`, an answer, not an unknown outcome. Any other failure of
        the link (an I/O error, which a network file system may give for a link it made) is
        a plain StorageError, which a reader of the key settles."""
        path = self._p(key)
        try:
            tmp = self._write_temp(path, data)
        except OSError as e:
            raise WriteRefusedError(f"writing {key!r} in {self.uri}: {e}") from e
        try:
            os.link(tmp, path)  # atomic: fails if the name exists; content is complete
        except FileExistsError:
            return False
        except OSError as e:
            refused = e.errno in _LINK_REFUSED
            raise (WriteRefusedError if refused else StorageError)(
                f"creating {key!r} in {self.uri}: {e}") from e
        finally:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        if self.sync_directories:
            # Only now is the new name durable (one fsync covers the link and the unlink).
            try:
                _fsync_directory(path.parent)
            except OSError as e:
                raise StorageError(f"syncing the folder of {key!r} in {self.uri}: {e}") from e
        return True

    def open_writer(self, key: str, *, size: int | None = None) -> ObjectWriter:
        """A temp file beside the object, written as bytes come, fsynced and renamed into
        place at commit (as a put; a crash leaves a temp file, which GC collects)."""
        path = self._p(key)
        try:
            self._make_directories(path.parent)
            return _LocalWriter(self, key, path)
        except OSError as e:
            raise StorageError(f"writing {key!r} in {self.uri}: {e}") from e

    def list(self, prefix: str, *, start_after: str | None = None) -> Iterator[ObjectInfo]:
        yield from self._walk(prefix, start_after, temporary=False)

    def temporaries(self, prefix: str) -> Iterator[ObjectInfo]:
        """Temp files of puts whose writer died before the rename/link (never objects)."""
        yield from self._walk(prefix, None, temporary=True)

    def _walk(self, prefix: str, start_after: str | None, *,
              temporary: bool) -> Iterator[ObjectInfo]:
        # Walk only the folder that holds the prefix; sort keys as S3 does (by full key).
        folder, _, _ = prefix.rpartition("/")
        base = self.directory / folder if folder else self.directory
        if not base.is_dir():
            return
        out: list[ObjectInfo] = []
        for dirpath, _dirs, files in os.walk(base):
            rel = os.path.relpath(dirpath, self.directory)
            rel = "" if rel == "." else rel.replace(os.sep, "/") + "/"
            for name in files:
                if name.startswith(_TMP) != temporary:
                    continue
                key = rel + name
                if not key.startswith(prefix) or (start_after is not None
                                                  and key <= start_after):
                    continue
                try:
                    st = os.stat(os.path.join(dirpath, name))
                except FileNotFoundError:
                    continue
                out.append(ObjectInfo(key, st.st_size, st.st_mtime))
        out.sort(key=lambda o: o.key)
        yield from out

    def list_folders(self, prefix: str) -> builtins.list[str]:
        folder, _, start = prefix.rpartition("/")
        base = self.directory / folder if folder else self.directory
        try:
            entries = list(os.scandir(base))
        except (FileNotFoundError, NotADirectoryError):
            return []
        except OSError as e:
            raise StorageError(f"listing {prefix!r} in {self.uri}: {e}") from e
        return sorted(e.name for e in entries if e.is_dir() and e.name.startswith(start))

    def delete_folder(self, prefix: str) -> int:
        """Delete the objects and temporaries under ``prefix``, then its empty directories."""
        n = super().delete_folder(prefix)
        folder = prefix.rstrip("/")
        if folder and prefix.endswith("/"):
            top = self._p(folder)
            for dirpath, _dirs, _files in sorted(os.walk(top), key=lambda w: -len(w[0])):
                with contextlib.suppress(OSError):  # not empty (a late write): kept
                    os.rmdir(dirpath)
        return n

    def delete_many(self, keys: Iterable[str]) -> None:
        for key in keys:
            try:
                self._p(key).unlink()
            except _MISSING:
                pass
            except OSError as e:
                raise StorageError(f"deleting {key!r} in {self.uri}: {e}") from e

    def head(self, key: str) -> ObjectInfo | None:
        try:
            st = self._p(key).stat()
        except _MISSING:
            return None
        except OSError as e:
            raise StorageError(f"reading {key!r} in {self.uri}: {e}") from e
        if not stat.S_ISREG(st.st_mode):
            return None
        return ObjectInfo(key, st.st_size, st.st_mtime)

    def local_path(self, key: str) -> str:
        return str(self._p(key))

    def sync(self, keys: Iterable[str]) -> None:
        """fsync each file, then each folder holding one (its name): a commit's log entry,
        fsynced by its put, must never outlive the data files it names after an OS crash.
        The fsyncs run on threads (each waits on the disk, not on Python)."""
        paths = [self._p(k) for k in keys]
        if not paths:
            return
        try:
            if len(paths) == 1:  # no pool to start for one file
                _fsync_file(paths[0])
            else:
                with ThreadPoolExecutor(min(8, len(paths))) as pool:
                    list(pool.map(_fsync_file, paths))
            for folder in {p.parent for p in paths}:
                if folder.is_dir():
                    _fsync_directory(folder)
        except OSError as e:  # not durable: nothing may refer to them
            raise StorageError(f"could not make files durable in {self.uri}: {e}") from e

    def arrow_filesystem(self) -> tuple[pafs.FileSystem, str]:
        return self._fs, str(self.directory)


class _LocalWriter(ObjectWriter):
    """A streaming write to a temp file beside the object, renamed into place at commit."""

    def __init__(self, store: LocalObjectStore, key: str, path: Path) -> None:
        super().__init__(key)
        self._store = store
        self._path = path
        self._tmp = path.parent / f"{_TMP}{uuid.uuid4().hex}"
        self._file = open(self._tmp, "wb")  # noqa: SIM115 - closed by commit or abort

    def _write(self, data: memoryview) -> None:
        try:
            self._file.write(data)
        except OSError as e:
            raise StorageError(f"writing {self.key!r} in {self._store.uri}: {e}") from e

    def _commit(self) -> None:
        try:
            self._file.flush()
            os.fsync(self._file.fileno())
            self._file.close()
            os.replace(self._tmp, self._path)
            if self._store.sync_directories:
                _fsync_directory(self._path.parent)
        except OSError as e:
            self._abort()
            raise StorageError(f"writing {self.key!r} in {self._store.uri}: {e}") from e

    def _abort(self) -> None:
        with contextlib.suppress(OSError):
            self._file.close()
        with contextlib.suppress(OSError):
            os.unlink(self._tmp)
