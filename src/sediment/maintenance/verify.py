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

import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from sediment.core.model import FileSums
from sediment.core.state import TableState
from sediment.errors import CorruptionError, SedimentError
from sediment.handle import TableHandle
from sediment.maintenance.verify_breaks import (
    broken_run,
    broken_versions,
    merged,
    reference_spans,
    tags_in,
)
from sediment.maintenance.verify_files import DATA, FILE_KINDS, check_file
from sediment.maintenance.verify_metadata import (
    CATALOG_ENTRY,
    METADATA_KINDS,
    SNAPSHOT_OBJECT,
    STORE_FILE,
    Found,
    Tally,
    check_document,
    check_log,
    check_snapshots,
    check_tags,
)
from sediment.query.expiry import check_files, collected, load_version
from sediment.state.store import StateStore
from sediment.storage.base import ObjectStore

__all__ = ["CATALOG_ENTRY", "STORE_FILE", "Damage", "VerifyReport", "verify_table"]

VERSION = "version"
"""A version that does not load for a reason no damaged object explains."""
KINDS = (*METADATA_KINDS, *FILE_KINDS)
"""The kinds of object verify counts, in the order reports list them."""

FILE_THREADS = 4
"""Data files checked at once: reads of a remote store overlap, and CRC-32 releases the GIL."""
DEEP_THREADS = 2
"""Data files decoded at once with ``deep`` (each holds one decoded row group)."""


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
    """What ``Table.verify`` found: by kind, the objects ``checked`` (they match their
    checksum) and ``unchecked`` (written before checksums: they exist and show no damage);
    the ``damaged`` (or missing) ones, each once; the ``versions`` whose objects were
    checked; the bytes read and the seconds it took."""

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
    tally = Tally()
    for kind, key in documents:
        where = f"{kind} {key} (table {name})"
        check_document(tally, objects.root(), kind, key, where)
    tags = check_tags(tally, states)
    head: TableState | None
    try:
        head = states.head()
    except CorruptionError:
        head = None  # its log entries or snapshots are damaged: reported below
    listed, entries = check_log(tally, states, 0 if head is None else head.version)
    snaps = check_snapshots(tally, states)
    last = max([*listed, *snaps, 0 if head is None else head.version])
    first = listed[0] if listed else last + 1
    broken = broken_versions(first, last, entries, snaps)

    wanted = _wanted(handle, version, head, tags)
    files, unloadable = _files_of(states, wanted, head, strict=version is not None)
    _check_files(tally, objects, name, files, deep, progress)
    _forget_collected(tally, states)
    spans: dict[str, list[range]] = {}
    damaged_files = {f.file for f in tally.found if f.file is not None}
    if damaged_files:
        spans = reference_spans(states, damaged_files, first, last, entries, snaps)
    damage = [_damage(f, broken, spans, tags) for f in tally.found]
    for v, problem in sorted(unloadable.items()):
        if not any(d.breaks(v) for d in damage):
            damage.append(Damage(VERSION, f"version {v}", problem, (range(v, v + 1),),
                                 tags_in(tags, [range(v, v + 1)])))
    return VerifyReport(name, tuple(sorted(wanted)), deep, _ordered(tally.checked),
                        _ordered(tally.unchecked), tuple(damage), tally.size,
                        time.monotonic() - started)


def _ordered(counts: Counter[str]) -> dict[str, int]:
    return {k: counts[k] for k in KINDS if counts[k]}


# ---- versions and their files ------------------------------------------------------------------
def _wanted(handle: TableHandle, version: int | str | None, head: TableState | None,
            tags: Mapping[str, int]) -> set[int]:
    if version is not None:
        v = handle.resolve_version(version)
        assert v is not None
        return {v}
    return {*([] if head is None else [head.version]), *tags.values()}


def _files_of(states: StateStore, versions: Iterable[int], head: TableState | None, *,
              strict: bool) -> tuple[dict[str, FileSums | None], dict[int, str]]:
    """The data files the versions reference, with their sums (None: none recorded), and
    a problem for each version that does not load; with ``strict`` (a version asked for),
    only damage is a problem, and an unknown version a QueryError."""
    files: dict[str, FileSums | None] = {}
    unloadable: dict[int, str] = {}
    for v in sorted(versions):
        try:
            if head is not None and v == head.version:
                state = head
            elif strict:  # VersionExpiredError for one past retention, as every read says
                state = load_version(states, states.name, v)
                check_files(states, states.name, state)
            else:
                state = states.load(v)
        except CorruptionError as e:
            unloadable[v] = str(e)
            continue
        except SedimentError as e:  # a tag's version pruned, say: the tag no longer reads
            if strict:
                raise
            unloadable[v] = str(e)
            continue
        for f in state.refcount:
            if files.get(f) is None:
                files[f] = state.file_sums(f)
    return files, unloadable


def _check_files(tally: Tally, objects: ObjectStore, table: str,
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
            tally.found += [Found(kind, key, problem, file=filename)
                            for kind, key, problem in found.damage]
            if progress is not None:
                progress(done, len(names))


def _forget_collected(tally: Tally, states: StateStore) -> None:
    """A data file found missing that GC deleted meanwhile (the head, read again, neither
    references it nor holds it unreferenced: only GC's DeleteFiles drops one) is no damage:
    the head referencing it was replaced while verify ran, and left retention since."""
    missing = [f.file for f in tally.found
               if f.file is not None and f.kind == DATA and f.problem == "missing"]
    if not missing:
        return
    try:
        gone = set(collected(missing, states.head()))
    except CorruptionError:
        return
    tally.found = [f for f in tally.found if f.file not in gone]


# ---- what damage breaks ------------------------------------------------------------------------
def _damage(found: Found, broken: set[int], spans: Mapping[str, list[range]],
            tags: Mapping[str, int]) -> Damage:
    """``found`` with the versions it breaks (see ``verify_breaks``) and their tags."""
    if found.file is not None:
        versions = merged(spans.get(found.file, ()))
    else:
        versions = merged(r for s in found.starts for r in broken_run(s, broken))
    named = tuple(sorted({*found.tags, *tags_in(tags, versions)}))
    problem = found.problem
    if found.kind == SNAPSHOT_OBJECT and found.starts:
        problem += f" (named by snapshot{'s' * (len(found.starts) > 1)} " \
                   f"{', '.join(map(str, found.starts))})"
    return Damage(found.kind, found.key, problem, versions, named)
