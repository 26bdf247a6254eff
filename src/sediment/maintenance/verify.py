"""``verify``: every object the checked versions of a table need, read and checked against
its checksum; what is damaged, and which versions and tags the damage breaks.

What is read (``Table.verify``, ``sediment verify``):

- metadata, whole whatever the versions asked for (it is small): the store's ``store.json``
  and the table's catalog entry, every tag and pin, every retained log entry (each decoded
  as a reader decodes it), every snapshot's pointer and the content-addressed objects it
  names (their SHA-256 against the digest naming them, each object once);
- the data files the checked versions reference, each once (``verify_files``): size, footer
  and whole-file CRC-32 against the sums their commit recorded, the sample and the key filter;
  with ``deep``, every row group decoded, its page CRCs verified.

The checked versions are the head and every tag's and live pin's version, or the one asked
for. Objects without checksums (written before seals and sums) are counted *unchecked*, not
damaged. A missing object is damage.

What damage breaks, from one pass over what was found:

- a data file (or a sidecar of it) breaks the versions that reference it, from the commit that
  added it to the one that removed it (one replay of the log, only when a file is damaged);
- a log entry ``v`` breaks ``v`` and the versions after it up to the next readable snapshot;
- a snapshot, or an object it names, breaks nothing while the log under it replays (a reader
  passes over a damaged snapshot for an older one): only the versions no readable snapshot
  and log entries reach any more;
- a tag breaks itself; every damage names the tags whose versions it breaks.
"""

from __future__ import annotations

import functools
import hashlib
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

from sediment.core.model import FileSums
from sediment.core.state import TableState
from sediment.errors import (
    CorruptionError,
    CorruptMetadataError,
    ObjectNotFoundError,
    SedimentError,
)
from sediment.handle import TableHandle
from sediment.maintenance.verify_files import FILE_KINDS, check_file
from sediment.state.documents import open_sealed
from sediment.state.log import check_format, log_key
from sediment.state.snapshot import (
    OBJECT_PREFIX,
    object_key,
    read_metarange,
    read_snapshot,
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
VERSION = "version"
"""A version that does not load for a reason no damaged object explains."""
KINDS = (STORE_FILE, CATALOG_ENTRY, TAG, LOG_ENTRY, SNAPSHOT, SNAPSHOT_OBJECT, *FILE_KINDS)
"""The kinds of object verify counts, in the order reports list them."""

FILE_THREADS = 4
"""Data files checked at once: reads of a remote store overlap, and CRC-32 releases the GIL."""
DEEP_THREADS = 2
"""Data files decoded at once with ``deep`` (each holds one decoded row group)."""

_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class Damage:
    """One damaged (or missing) object: its ``kind`` (``data file``, ``sample``, ``key
    filter``, ``log entry``, ``snapshot``, ``snapshot object``, ``tag``, ``catalog entry``,
    ``store file``, or ``version`` for a version that does not load for another reason),
    its ``key`` (in the table's folder; ``store.json`` and catalog entries in the store's),
    what is wrong with it, the ``versions`` it breaks (half-open ranges, in order) and the
    ``tags`` (and pins) whose versions it breaks."""

    kind: str
    key: str
    problem: str
    versions: tuple[range, ...] = ()
    tags: tuple[str, ...] = ()

    def breaks(self, version: int) -> bool:
        """Whether this damage breaks ``version`` (it cannot be read as committed)."""
        return any(version in r for r in self.versions)

    def to_json(self) -> dict[str, Any]:
        """JSON: ``versions`` as ``{"first": a, "last": b}`` spans (inclusive)."""
        return {"kind": self.kind, "key": self.key, "problem": self.problem,
                "versions": [{"first": r.start, "last": r.stop - 1} for r in self.versions],
                "tags": list(self.tags)}


@dataclass(frozen=True, slots=True)
class VerifyReport:
    """What ``Table.verify`` found: objects ``checked`` against a checksum and ``unchecked``
    (written before checksums: existence only), by kind; the ``damaged`` ones; the
    ``versions`` whose objects were checked; the bytes read and the seconds it took."""

    table: str
    versions: tuple[int, ...]
    deep: bool
    checked: Mapping[str, int]
    unchecked: Mapping[str, int]
    damaged: tuple[Damage, ...]
    bytes: int = 0
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        """Nothing is damaged (unchecked objects are not damage)."""
        return not self.damaged

    def to_json(self) -> dict[str, Any]:
        return {"table": self.table, "ok": self.ok, "versions": list(self.versions),
                "deep": self.deep, "checked": dict(self.checked),
                "unchecked": dict(self.unchecked),
                "damaged": [d.to_json() for d in self.damaged], "bytes": self.bytes,
                "seconds": self.seconds}


@dataclass(slots=True)
class _Found:
    """A damaged object, before its versions are known: they are the broken runs starting
    at ``starts`` (metadata), or the versions referencing ``file`` (a data file's objects)."""

    kind: str
    key: str
    problem: str
    starts: tuple[int, ...] = ()
    file: str | None = None
    tags: tuple[str, ...] = ()


@dataclass(slots=True)
class _Tally:
    checked: Counter[str] = field(default_factory=Counter)
    unchecked: Counter[str] = field(default_factory=Counter)
    found: list[_Found] = field(default_factory=list)
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
            self.found.append(_Found(kind, key, "missing", starts, tags=tags))
            return None
        except CorruptionError as e:
            self.found.append(_Found(kind, key, _problem(e), starts, tags=tags))
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


def _problem(e: BaseException) -> str:
    """A damage's problem, without the object's name (the report names it)."""
    cause = e.__cause__
    if isinstance(cause, ChecksumMismatch):
        return f"checksum mismatch (read 3 times): {cause.detail}"
    return str(e)


def verify_table(handle: TableHandle, version: int | str | None = None, *, deep: bool = False,
                 documents: Sequence[tuple[str, str]] = (),
                 progress: Callable[[int, int], None] | None = None) -> VerifyReport:
    """Check the objects of ``handle``'s table at ``version`` (None: the head and every tag's
    and live pin's version); ``documents``: (kind, key) of sealed JSON objects of the store
    (its ``store.json``, the table's catalog entry). ``progress(done, total)``: data files.

    Raises QueryError (naming the table) for a ``version`` the table does not have; damage,
    however deep, is reported, never raised."""
    started = time.monotonic()
    states, objects, name = handle.states, handle.objects, handle.name
    tally = _Tally()
    for kind, key in documents:
        where = f"{kind} {key} (table {name})"
        tally.read(kind, key, where, objects.root(), functools.partial(_document, where=where))
    tags = _check_tags(tally, states)
    head: TableState | None
    try:
        head = states.head()
    except CorruptionError:
        head = None  # its log entries or snapshots are damaged: reported below
    listed, entries = _check_log(tally, states, 0 if head is None else head.version)
    snaps = _check_snapshots(tally, states)
    last = max([*listed, *snaps, 0 if head is None else head.version])
    first = listed[0] if listed else last + 1
    broken = _broken(first, last, entries, snaps)

    wanted = _wanted(handle, version, head, tags)
    files, unloadable = _files_of(states, wanted, head)
    _check_files(tally, objects, name, files, deep, progress)
    spans: dict[str, list[range]] = {}
    damaged_files = {f.file for f in tally.found if f.file is not None}
    if damaged_files:
        spans = _reference_spans(states, damaged_files, first, last, entries, snaps)
    damage = [_damage(f, broken, spans, tags, last) for f in tally.found]
    for v, problem in sorted(unloadable.items()):
        if not any(d.breaks(v) for d in damage):
            damage.append(Damage(VERSION, f"version {v}", problem, (range(v, v + 1),),
                                 _tags_in(tags, [range(v, v + 1)])))
    return VerifyReport(name, tuple(sorted(wanted)), deep, _ordered(tally.checked),
                        _ordered(tally.unchecked), tuple(damage), tally.size,
                        time.monotonic() - started)


def _ordered(counts: Counter[str]) -> dict[str, int]:
    return {k: counts[k] for k in KINDS if counts[k]}


# ---- metadata ----------------------------------------------------------------------------------
def _check_tags(tally: _Tally, states: StateStore) -> dict[str, int]:
    """Every tag and pin object checked; the live ones' versions by name."""
    for o in states.objects.list(TAG_PREFIX):
        tag = o.key[len(TAG_PREFIX):].removesuffix(".json")
        where = f"tag object {o.key} of table {states.name}"
        tally.read(TAG, o.key, where, states.objects, functools.partial(_document, where=where),
                   tags=(tag,))
    return {t.name: t.version for t in scan_tags(states).tags}


def _check_log(tally: _Tally, states: StateStore, head: int) -> tuple[list[int], set[int]]:
    """Every retained log entry read and decoded (16 at a time); the listed versions and
    the readable ones. An entry missing between the first listed and the head is damage."""
    log = states.log
    listed = log.versions_after(0)

    def one(v: int) -> tuple[int, tuple[bool, Any] | CorruptionError | None]:
        try:
            return v, _sealed(states.objects, log_key(v),
                              f"log entry {v} of table {states.name}",
                              lambda d: log.decode(v, d))
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
                tally.found.append(_Found(LOG_ENTRY, log_key(v), problem, (v,)))
    if listed:
        for v in sorted(set(range(listed[0], max(head, listed[-1]) + 1)) - set(listed)):
            tally.found.append(_Found(LOG_ENTRY, log_key(v), "missing", (v,)))
    return listed, readable


def _check_snapshots(tally: _Tally, states: StateStore) -> set[int]:
    """Every snapshot's pointer and the objects it names (each object once); the versions
    of the readable snapshots."""
    objects = states.objects
    seen: dict[str, _Found | None] = {}
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
            tally.found.append(_Found(SNAPSHOT, snapshot_key(v), problem, (v,)))
            continue
        bad = [seen[k] for k in keys if seen[k] is not None]
        for f in bad:
            assert f is not None
            f.starts = (*f.starts, v)
        if not bad:
            readable.add(v)
    return readable


def _object_keys(objects: ObjectStore, doc: dict[str, Any], where: str,
                 seen: dict[str, _Found | None], tally: _Tally) -> list[str]:
    """The keys of the objects a snapshot pointer names, each checked (once: ``seen``)."""
    meta = object_key(str(doc["metarange"]))
    keys = [meta]
    _check_object(objects, meta, seen, tally)
    if seen[meta] is None:
        keys += [object_key(r.digest) for r in read_metarange(objects, doc["metarange"], where)]
    keys += [f"{OBJECT_PREFIX}{doc[k]}.json" for k in ("partitions", "unreferenced",
                                                         "unreferenced_sums") if k in doc]
    for k in keys:
        _check_object(objects, k, seen, tally)
    return keys


def _check_object(objects: ObjectStore, key: str, seen: dict[str, _Found | None],
                  tally: _Tally) -> None:
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
        seen[key] = _Found(SNAPSHOT_OBJECT, key, "missing")
    except CorruptionError as e:
        seen[key] = _Found(SNAPSHOT_OBJECT, key, _problem(e))
    found = seen[key]
    if found is not None:
        tally.found.append(found)


# ---- versions and their files ------------------------------------------------------------------
def _wanted(handle: TableHandle, version: int | str | None, head: TableState | None,
            tags: Mapping[str, int]) -> set[int]:
    if version is not None:
        v = handle.resolve_version(version)
        assert v is not None
        return {v}
    return {*([] if head is None else [head.version]), *tags.values()}


def _files_of(states: StateStore, versions: Iterable[int], head: TableState | None
              ) -> tuple[dict[str, FileSums | None], dict[int, str]]:
    """The data files the versions reference, with their sums (None: none recorded), and
    a problem for each version that does not load. An unknown version is a QueryError."""
    files: dict[str, FileSums | None] = {}
    unloadable: dict[int, str] = {}
    for v in sorted(versions):
        try:
            state = head if head is not None and v == head.version else states.load(v)
        except CorruptionError as e:
            unloadable[v] = str(e)
            continue
        for f in state.refcount:
            if files.get(f) is None:
                files[f] = state.file_sums(f)
    return files, unloadable


def _check_files(tally: _Tally, objects: ObjectStore, table: str,
                 files: Mapping[str, FileSums | None], deep: bool,
                 progress: Callable[[int, int], None] | None) -> None:
    names = sorted(files)
    if progress is not None:
        progress(0, len(names))
    with ThreadPoolExecutor(DEEP_THREADS if deep else FILE_THREADS) as pool:
        results = pool.map(lambda f: check_file(objects, table, f, files[f], deep=deep), names)
        for done, (filename, found) in enumerate(zip(names, results, strict=True), 1):
            tally.checked.update(found.checked)
            tally.unchecked.update(found.unchecked)
            tally.size += found.bytes
            tally.found += [_Found(kind, key, problem, file=filename)
                            for kind, key, problem in found.damage]
            if progress is not None:
                progress(done, len(names))


# ---- what damage breaks ------------------------------------------------------------------------
def _broken(first: int, last: int, entries: set[int], snaps: set[int]) -> set[int]:
    """The versions from the oldest retained (``first - 1`` when the log was pruned) to
    ``last`` that no readable snapshot and readable log entries after it reach."""
    lo = first - 1 if first > 1 else 1
    reach = first <= 1  # the empty state before version 1
    out: set[int] = set()
    for v in range(1, last + 1):
        reach = v in snaps or (reach and v in entries)
        if v >= lo and not reach:
            out.add(v)
    return out


def _run(start: int, broken: set[int]) -> list[range]:
    """The broken versions from ``start`` on, up to the first one that loads."""
    end = start
    while end in broken:
        end += 1
    return [range(start, end)] if end > start else []


def _merged(spans: Iterable[range]) -> tuple[range, ...]:
    out: list[range] = []
    for r in sorted((r for r in spans if len(r)), key=lambda r: r.start):
        if out and r.start <= out[-1].stop:
            out[-1] = range(out[-1].start, max(out[-1].stop, r.stop))
        else:
            out.append(r)
    return tuple(out)


def _tags_in(tags: Mapping[str, int], spans: Sequence[range]) -> tuple[str, ...]:
    return tuple(sorted(n for n, v in tags.items() if any(v in r for r in spans)))


def _damage(found: _Found, broken: set[int], spans: Mapping[str, list[range]],
            tags: Mapping[str, int], last: int) -> Damage:
    if found.file is not None:
        versions = _merged(spans.get(found.file, ()))
    else:
        versions = _merged(r for s in found.starts for r in _run(s, broken))
    named = tuple(sorted({*found.tags, *_tags_in(tags, versions)}))
    problem = found.problem
    if found.kind == SNAPSHOT_OBJECT and found.starts:
        problem += f" (named by snapshot{'s' * (len(found.starts) > 1)} " \
                   f"{', '.join(map(str, found.starts))})"
    return Damage(found.kind, found.key, problem, versions, named)


def _reference_spans(states: StateStore, files: set[str], first: int, last: int,
                     entries: set[int], snaps: set[int]) -> dict[str, list[range]]:
    """The versions referencing each of ``files``: one replay of the retained log, from the
    oldest state it starts at (the empty one, or the base snapshot of a pruned log). Past a
    damaged entry the replay starts again at the next readable snapshot; versions between
    (broken anyway) are left out."""
    spans: dict[str, list[range]] = {f: [] for f in files}
    since: dict[str, int] = {}
    state: TableState | None = TableState(states.table_id, states.name) if first <= 1 else None
    for v in range(1, last + 1):
        if state is not None and v in entries:
            try:
                states.heads.replay(state, states.log.read(v))
            except CorruptionError:
                state = None
        else:
            state = None
        if state is None and v in snaps:
            try:
                state = read_snapshot(states.objects, v, states.table_id, name=states.name)
            except SedimentError:
                state = None
        for f in files:
            if state is not None and f in state.refcount:
                since.setdefault(f, v)
            elif f in since:
                spans[f].append(range(since.pop(f), v))
    for f, v in since.items():
        spans[f].append(range(v, last + 1))
    return spans

