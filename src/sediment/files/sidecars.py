"""Sidecar names: every object a data file has beside it, derived from the data file's name.

A data file ``data/<partition>/<stem>.parquet`` has up to two sidecars in the same folder:

- ``_<stem>.sample``: its equi-depth key sample (Parquet inside, see sediment.files.sample);
- ``_<stem>.keys``: its key filters (see sediment.files.keyfilter).

Neither name ends in ``.parquet`` and both start with ``_``, so neither a ``*.parquet`` glob
(DuckDB, Polars, pyarrow) nor a directory read that skips ``_`` and ``.`` files (pyarrow
datasets, Spark, Hive) picks them up: a glob over ``data/**/*.parquet`` finds data files only.

Stores written before this layout named them ``<stem>.sample.parquet`` and ``<stem>.keys``
(the *legacy* names). Readers look for the current name first and fall back to the legacy one
(a read never writes); GC deletes a data file's sidecars under both names
(:func:`with_sidecars` with ``legacy``); orphan detection maps both back to their data file
(:func:`data_file_of`); ``sediment migrate-sidecars`` (:func:`migrate_sidecars`) renames
legacy sidecars to the current names, copy then delete, safe to rerun.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from sediment.errors import ObjectNotFoundError
from sediment.storage.base import ObjectStore

SAMPLE = "sample"
KEYS = "keys"
KINDS = (SAMPLE, KEYS)
"""The kinds of sidecar a data file may have."""

DATA_SUFFIX = ".parquet"
PREFIX = "_"
_CURRENT = {SAMPLE: ".sample", KEYS: ".keys"}
_LEGACY = {SAMPLE: ".sample.parquet", KEYS: ".keys"}


def _split(filename: str) -> tuple[str, str]:
    folder, slash, base = filename.rpartition("/")
    if not base.endswith(DATA_SUFFIX) or base.startswith(PREFIX):
        raise ValueError(f"{filename!r} is not a data file name (<stem>{DATA_SUFFIX})")
    return folder + slash, base[: -len(DATA_SUFFIX)]


def sidecar_name(filename: str, kind: str, *, legacy: bool = False) -> str:
    """The name of the ``kind`` sidecar (:data:`SAMPLE` or :data:`KEYS`) of data file
    ``filename``: ``<folder>/_<stem>.<kind>``, or with ``legacy`` the name stores written
    before this layout used (``<stem>.sample.parquet``, ``<stem>.keys``)."""
    folder, stem = _split(filename)
    if legacy:
        return folder + stem + _LEGACY[kind]
    return folder + PREFIX + stem + _CURRENT[kind]


def sidecar_names(filename: str) -> list[str]:
    """Every name a sidecar of ``filename`` may have, current names first."""
    return [sidecar_name(filename, kind, legacy=legacy)
            for legacy in (False, True) for kind in KINDS]


@dataclass(frozen=True, slots=True)
class Sidecar:
    """What a sidecar's name says: its data file, its kind, and whether the name is legacy."""

    data_file: str
    kind: str
    legacy: bool


def parse_sidecar(key: str) -> Sidecar | None:
    """The sidecar ``key`` names (the inverse of :func:`sidecar_name`), or None when ``key``
    is not a sidecar name (a data file, or anything else)."""
    folder, slash, base = key.rpartition("/")
    folder += slash
    if base.startswith(PREFIX):
        for kind, suffix in _CURRENT.items():
            if base.endswith(suffix) and len(base) > len(PREFIX) + len(suffix):
                return Sidecar(folder + base[len(PREFIX): -len(suffix)] + DATA_SUFFIX, kind,
                               False)
        return None
    for kind, suffix in _LEGACY.items():
        if base.endswith(suffix) and len(base) > len(suffix):
            return Sidecar(folder + base[: -len(suffix)] + DATA_SUFFIX, kind, True)
    return None


def data_file_of(key: str) -> str:
    """The data file an object belongs to: itself, or the file a sidecar (under its current or
    legacy name) describes."""
    sidecar = parse_sidecar(key)
    return key if sidecar is None else sidecar.data_file


def with_sidecars(filenames: Iterable[str], *, legacy: bool = False) -> list[str]:
    """Data files and their sidecars under their current names (what a file written now has
    beside it), with ``legacy`` under their legacy names too: what deleting a data file of any
    store deletes (GC)."""
    names = sidecar_names if legacy else _current_names
    return [k for f in filenames for k in (f, *names(f))]


def _current_names(filename: str) -> list[str]:
    return [sidecar_name(filename, kind) for kind in KINDS]


def read_sidecar(objects: ObjectStore, filename: str, kind: str) -> tuple[str, bytes]:
    """The ``kind`` sidecar of ``filename``: (the name it was found under, its bytes). Tries
    the current name, then the legacy one, then the current one again (a migration may have
    renamed it between the two reads). Never writes. Raises ObjectNotFoundError naming the
    current name when there is none."""
    return _read(objects, filename, kind, lambda name: objects.get(name))


def read_sidecar_range(objects: ObjectStore, filename: str, kind: str, start: int,
                       end: int, *, read: Callable[[str, int, int], bytes] | None = None
                       ) -> tuple[str, bytes]:
    """Bytes ``[start, end)`` of the ``kind`` sidecar of ``filename``, looked up as
    :func:`read_sidecar` does: (the name it was found under, the bytes). ``read(key, start,
    end)`` reads in place of ``objects.get_range`` (the disk cache's reads)."""
    get_range = objects.get_range if read is None else read
    return _read(objects, filename, kind, lambda name: get_range(name, start, end))


def _read(objects: ObjectStore, filename: str, kind: str,
          get: Callable[[str], bytes]) -> tuple[str, bytes]:
    current = sidecar_name(filename, kind)
    for name in (current, sidecar_name(filename, kind, legacy=True), current):
        try:
            return name, get(name)
        except ObjectNotFoundError:
            continue
    raise ObjectNotFoundError(f"{current} (or its legacy name "
                              f"{sidecar_name(filename, kind, legacy=True)}) is missing from "
                              f"{objects.uri}")


@dataclass(frozen=True, slots=True)
class MigrationResult:
    """What :func:`migrate_sidecars` found and did: legacy sidecars seen, renamed (copied to the
    current name, then deleted), and legacy copies deleted because the current name already
    existed (a rerun after an interrupted migration). With ``dry_run`` nothing is written and
    ``renamed``/``removed`` count what would be done."""

    legacy: int
    renamed: int
    removed: int
    bytes: int
    dry_run: bool


def legacy_sidecars(objects: ObjectStore) -> list[tuple[str, Sidecar, int]]:
    """(key, sidecar, size) of every sidecar under a legacy name in a table's ``data/``
    folder."""
    found = []
    for o in objects.list("data/"):
        sidecar = parse_sidecar(o.key)
        if sidecar is not None and sidecar.legacy:
            found.append((o.key, sidecar, o.size))
    return found


def migrate_sidecars(objects: ObjectStore, *, dry_run: bool = False,
                     progress: Callable[[int, int], None] | None = None) -> MigrationResult:
    """Rename a table's legacy sidecars to their current names: copy each to its current name
    (unless already there with the same size), then delete the legacy one, so at every moment
    one of the two names exists and a reader (which tries both) finds it. Safe to rerun and to
    run beside readers, writers and GC (which treat both names as the data file's).
    ``objects`` is the table's object store; ``progress(done, total)`` is called as it goes."""
    found = legacy_sidecars(objects)
    renamed = removed = size = 0
    if progress is not None:
        progress(0, len(found))
    for i, (key, sidecar, n) in enumerate(found, 1):
        target = sidecar_name(sidecar.data_file, sidecar.kind)
        there = objects.head(target)
        if there is None or there.size != n:
            if not dry_run:
                try:
                    data = objects.get(key)
                except ObjectNotFoundError:
                    continue  # deleted meanwhile (GC of its data file, another migration)
                objects.put(target, data)
            renamed += 1
            size += n
        else:
            removed += 1
        if not dry_run:
            objects.delete_many([key])
        if progress is not None:
            progress(i, len(found))
    return MigrationResult(len(found), renamed, removed, size, dry_run)
