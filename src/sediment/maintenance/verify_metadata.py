"""``verify`` of a table's metadata: sealed JSON documents (the store file, the catalog
entry, tags and pins, log entries, snapshot pointers) and the content-addressed objects the
snapshots name, each checked against its checksum and counted in a :class:`Tally` (checked,
unchecked: written before seals), damage noted as :class:`Found` (its versions are worked
out later, by ``sediment.maintenance.verify_breaks``)."""

from __future__ import annotations

import functools
import hashlib
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

from sediment.errors import CorruptionError, CorruptMetadataError, ObjectNotFoundError
from sediment.state.documents import open_sealed
from sediment.state.log import check_format, log_key
from sediment.state.snapshot import (
    OBJECT_PREFIX,
    object_key,
    read_metarange,
    snapshot_key,
    snapshot_versions,
)
from sediment.state.store import StateStore
from sediment.state.tags import TAG_PREFIX, scan_tags
from sediment.storage.base import ObjectStore
from sediment.storage.checksums import ChecksumMismatch, get_verified, unseal_json

STORE_FILE = "store file"
CATALOG_ENTRY = "catalog entry"
TAG = "tag"
LOG_ENTRY = "log entry"
SNAPSHOT = "snapshot"
SNAPSHOT_OBJECT = "snapshot object"
METADATA_KINDS = (STORE_FILE, CATALOG_ENTRY, TAG, LOG_ENTRY, SNAPSHOT, SNAPSHOT_OBJECT)

_T = TypeVar("_T")


@dataclass(slots=True)
class Found:
    """A damaged object, before its versions are known: they are the broken runs starting
    at ``starts`` (metadata), or the versions referencing ``file`` (a data file's objects)."""

    kind: str
    key: str
    problem: str
    starts: tuple[int, ...] = ()
    file: str | None = None
    tags: tuple[str, ...] = ()


@dataclass(slots=True)
class Tally:
    """What verify has found so far: counts by kind, damage, bytes read."""

    checked: Counter[str] = field(default_factory=Counter)
    unchecked: Counter[str] = field(default_factory=Counter)
    found: list[Found] = field(default_factory=list)
    size: int = 0
    """Bytes read."""

    def read(self, kind: str, key: str, where: str, objects: ObjectStore,
             parse: Callable[[bytes], _T], *, starts: tuple[int, ...] = (),
             tags: tuple[str, ...] = ()) -> _T | None:
        """``parse`` of a sealed JSON object, counted checked or unchecked; None (and the
        damage noted) when it is missing or damaged."""
        try:
            sealed, value = _sealed(objects, key, where, parse)
        except ObjectNotFoundError:
            self.found.append(Found(kind, key, "missing", starts, tags=tags))
            return None
        except CorruptionError as e:
            self.found.append(Found(kind, key, _problem(e), starts, tags=tags))
            return None
        (self.checked if sealed else self.unchecked)[kind] += 1
        return value


def _sealed(objects: ObjectStore, key: str, where: str,
            parse: Callable[[bytes], _T]) -> tuple[bool, _T]:
    """(whether the object at ``key`` is sealed, ``parse`` of it), read again while its seal
    fails; CorruptMetadataError when it stays damaged or does not parse."""
    def check(data: bytes) -> tuple[bool, _T]:
        return bool(unseal_json(data)), parse(data)

    return get_verified(objects, key, check, error_cls=CorruptMetadataError, where=where)


def _document(data: bytes, where: str) -> dict[str, Any]:
    return open_sealed(data, where)


def _decoded(entry: object) -> None:
    """Nothing of a decoded log entry is kept (a large one holds thousands of references)."""
    del entry


def _problem(e: BaseException) -> str:
    """A damage's problem, without the object's name (the report names it)."""
    cause = e.__cause__
    if isinstance(cause, ChecksumMismatch):
        return f"checksum mismatch (read 3 times): {cause.detail}"
    return str(e)

def check_document(tally: Tally, objects: ObjectStore, kind: str, key: str,
                   where: str) -> None:
    """A sealed JSON document of the store (its ``store.json``, a catalog entry)."""
    tally.read(kind, key, where, objects, functools.partial(_document, where=where))


def check_tags(tally: Tally, states: StateStore) -> dict[str, int]:
    """Every tag and pin object checked; the live ones' versions by name."""
    for o in states.objects.list(TAG_PREFIX):
        tag = o.key[len(TAG_PREFIX):].removesuffix(".json")
        where = f"tag object {o.key} of table {states.name}"
        tally.read(TAG, o.key, where, states.objects, functools.partial(_document, where=where),
                   tags=(tag,))
    return {t.name: t.version for t in scan_tags(states).tags}


def check_log(tally: Tally, states: StateStore, head: int) -> tuple[list[int], set[int]]:
    """Every retained log entry read and decoded (16 at a time); the listed versions and
    the readable ones. An entry missing between the first listed and the head is damage."""
    log = states.log
    listed = log.versions_after(0)

    def one(v: int) -> tuple[int, tuple[bool, None] | CorruptionError | None]:
        try:
            return v, _sealed(states.objects, log_key(v),
                              f"log entry {v} of table {states.name}",
                              lambda d: _decoded(log.decode(v, d)))
        except ObjectNotFoundError:
            return v, None
        except CorruptionError as e:
            return v, e

    readable: set[int] = set()
    with ThreadPoolExecutor(16) as pool:
        for v, got in pool.map(one, listed):
            if isinstance(got, tuple):
                readable.add(v)
                (tally.checked if got[0] else tally.unchecked)[LOG_ENTRY] += 1
            else:
                problem = "missing" if got is None else _problem(got)
                tally.found.append(Found(LOG_ENTRY, log_key(v), problem, (v,)))
    if listed:
        for v in sorted(set(range(listed[0], max(head, listed[-1]) + 1)) - set(listed)):
            tally.found.append(Found(LOG_ENTRY, log_key(v), "missing", (v,)))
    return listed, readable


def check_snapshots(tally: Tally, states: StateStore) -> set[int]:
    """Every snapshot's pointer and the objects it names (each object once); the versions
    of the readable snapshots."""
    objects = states.objects
    seen: dict[str, Found | None] = {}
    readable: set[int] = set()
    for v in snapshot_versions(objects):
        where = f"snapshot {v} of table {states.name}"

        def pointer(data: bytes, where: str = where) -> dict[str, Any]:
            doc = open_sealed(data, where)
            check_format(doc, where)
            return doc

        doc = tally.read(SNAPSHOT, snapshot_key(v), where, objects, pointer, starts=(v,))
        if doc is None:
            continue
        try:
            keys = _object_keys(objects, doc, where, seen, tally)
        except (KeyError, TypeError, ValueError, AttributeError, CorruptionError) as e:
            problem = _problem(e) if isinstance(e, CorruptionError) else f"malformed: {e!r}"
            tally.found.append(Found(SNAPSHOT, snapshot_key(v), problem, (v,)))
            continue
        bad = [seen[k] for k in keys if seen[k] is not None]
        for f in bad:
            assert f is not None
            f.starts = (*f.starts, v)
        if not bad:
            readable.add(v)
    return readable


def _object_keys(objects: ObjectStore, doc: dict[str, Any], where: str,
                 seen: dict[str, Found | None], tally: Tally) -> list[str]:
    """The keys of the objects a snapshot pointer names, each checked (once: ``seen``)."""
    meta = object_key(str(doc["metarange"]))
    keys = [meta]
    _check_object(objects, meta, seen, tally)
    if seen[meta] is None:
        keys += [object_key(r.digest) for r in read_metarange(objects, doc["metarange"], where)]
    keys += [f"{OBJECT_PREFIX}{doc[k]}.json" for k in ("partitions", "unreferenced",
                                                         "unreferenced_sums", "deletions")
             if k in doc]
    for k in keys:
        _check_object(objects, k, seen, tally)
    return keys


def _check_object(objects: ObjectStore, key: str, seen: dict[str, Found | None],
                  tally: Tally) -> None:
    """A content-addressed object against the SHA-256 naming it (read again while it
    differs); noted once in ``seen`` (None: good)."""
    if key in seen:
        return
    digest = key[len(OBJECT_PREFIX):].split(".", 1)[0]

    def check(data: bytes) -> int:
        got = hashlib.sha256(data).hexdigest()
        if got != digest:
            raise ChecksumMismatch(f"SHA-256 {got}", f"its SHA-256 is {got}, not the digest "
                                                     "that names it")
        return len(data)

    try:
        tally.size += get_verified(objects, key, check, error_cls=CorruptMetadataError,
                                    where=key)
        seen[key] = None
        tally.checked[SNAPSHOT_OBJECT] += 1
    except ObjectNotFoundError:
        seen[key] = Found(SNAPSHOT_OBJECT, key, "missing")
    except CorruptionError as e:
        seen[key] = Found(SNAPSHOT_OBJECT, key, _problem(e))
    found = seen[key]
    if found is not None:
        tally.found.append(found)
