"""What garbage collection keeps, and why: the one classifier of unreclaimed files.

Every file GC finds that no current version references is either deleted by this pass or kept
for exactly one reason, with the time it becomes due. ``sediment gc`` printing "deleted 0"
told a user nothing while four settings each held files; this module says which. GC deletes
exactly what :func:`classify` calls ready, and reports what it calls kept, so the report can
never disagree with what GC does; ``Table.describe()`` and the dashboard use it too.

*Unreferenced* files (a version once referenced them, the head does not) are held by:

- ``tag``: a tag's version references it (or a tag cannot be read, and so might): until the
  tag is deleted (due: never by time).
- ``pin``: a live pin's version references it, or the pin names it: until the pin expires, when
  that is later than the time windows below.
- ``retention``, ``gc_delay``: ``retention.seconds`` (time travel) and ``gc.delay_seconds``
  (running queries), measured from when its last reference went away: the longer of the two
  is named, since lowering the shorter alone frees nothing (with the defaults, two days of
  retention hide the 15 minutes' delay: set both to free young files);
- ``clock_skew``: past both, within the ``gc.clock_skew_seconds`` margin.
  Whichever window holds it, a file is due when the margin after the longer window lapses.

*Orphans* (files under ``data/`` that no transaction added) are held by:

- ``lease``: a live writer's lease names it (it is about to be committed): until the lease
  lapses unless renewed (never by time for this process's own leases), and the timeout below.
- ``pin``: a live pin names it (a batcher job's staged files).
- ``orphan_timeout``: younger than the orphan timeout, by the store's clock.
- ``tag``: rarely, a tag's version references it though the head's log recorded it deleted
  (a pass that crashed between recording and deleting, then a tag of an older version).

A data file and its sidecars are one file, their bytes counted together. Files past
``gc.max_files_per_run`` are ready, not kept: the next pass deletes them.

Pure: a function of the state, the listing, the tags, pins and leases read, the settings and
the two clocks (this machine's for unreferenced files, whose times the committers' clocks
recorded; the store's for listed objects, pins and leases).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sediment.core.state import TableState
from sediment.files.sidecars import data_file_of
from sediment.settings import TableSettings
from sediment.storage.base import ObjectInfo

UNREFERENCED_REASONS = ("tag", "pin", "retention", "gc_delay", "clock_skew")
ORPHAN_REASONS = ("tag", "lease", "pin", "orphan_timeout")


@dataclass(frozen=True, slots=True)
class Kept:
    """The files one reason keeps: how many, their bytes (sidecars included), and when the
    first and the last of them become due (seconds since the epoch; None: not by time, e.g.
    until a tag is deleted). ``names``: the data files."""

    reason: str
    files: int
    bytes: int
    due: float | None
    last_due: float | None
    names: tuple[str, ...] = field(default=(), repr=False)

    def to_json(self) -> dict[str, Any]:
        return {"files": self.files, "bytes": self.bytes, "due": self.due,
                "last_due": self.last_due}


@dataclass(frozen=True, slots=True)
class GcKept:
    """What a GC pass kept: ``unreferenced`` and ``orphans``, each a mapping from reason (see
    the module) to :class:`Kept`, holding only the reasons that keep something."""

    unreferenced: Mapping[str, Kept] = field(default_factory=dict)
    orphans: Mapping[str, Kept] = field(default_factory=dict)

    @property
    def files(self) -> int:
        return sum(k.files for k in (*self.unreferenced.values(), *self.orphans.values()))

    @property
    def bytes(self) -> int:
        return sum(k.bytes for k in (*self.unreferenced.values(), *self.orphans.values()))

    def to_json(self) -> dict[str, Any]:
        """Plain data (``sediment gc --json``); times as seconds since the epoch."""
        return {"unreferenced": {r: k.to_json() for r, k in self.unreferenced.items()},
                "orphans": {r: k.to_json() for r, k in self.orphans.items()}}


@dataclass(frozen=True, slots=True)
class Hold:
    """A tag (``expires`` None) or a live pin, and the data files it keeps: those its version
    references, and a pin's own."""

    name: str
    expires: float | None
    files: frozenset[str]


@dataclass(frozen=True, slots=True)
class GcWindows:
    """The settings the classifier judges by (seconds)."""

    delay: float
    retention: float
    clock_skew: float
    orphan_timeout: float

    @classmethod
    def of(cls, settings: TableSettings, orphan_timeout: float | None = None) -> GcWindows:
        timeout = settings.gc_orphan_timeout_seconds if orphan_timeout is None \
            else orphan_timeout
        return cls(settings.gc_delay_seconds, settings.retention_seconds,
                   settings.gc_clock_skew_seconds, float(timeout))


@dataclass(frozen=True, slots=True)
class GcPlan:
    """The classifier's answer: what GC deletes now and what it keeps."""

    unreferenced_ready: tuple[str, ...]
    """Unreferenced data files due, oldest first (ties by name)."""
    orphans_ready: tuple[str, ...]
    """Listed orphan objects due (data files and sidecars alike)."""
    kept: GcKept
    unreferenced_bytes: int
    """Bytes of every unreferenced file, due or kept (sidecars included)."""
    orphan_bytes: int
    """Bytes of every orphan, due or kept."""


class _Group:
    """Files of one class kept for one reason, gathered file by file."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        self.dues: dict[str, float | None] = {}
        self.bytes = 0

    def add(self, name: str, due: float | None, size: int) -> None:
        if name in self.dues:  # a second object (a sidecar) of the same file
            old = self.dues[name]
            due = None if old is None or due is None else max(old, due)
        self.dues[name] = due
        self.bytes += size

    def kept(self) -> Kept:
        times = [d for d in self.dues.values() if d is not None]
        last = None if len(times) < len(self.dues) else max(times)
        return Kept(self.reason, len(self.dues), self.bytes, min(times) if times else None,
                    last, tuple(sorted(self.dues)))


def _finish(groups: dict[str, _Group], order: Sequence[str]) -> dict[str, Kept]:
    return {r: groups[r].kept() for r in order if r in groups}


def _later(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else max(a, b)


def classify(state: TableState, listed: Iterable[ObjectInfo], *, holds: Sequence[Hold],
             unreadable_tags: bool, leases: Mapping[str, float | None],
             windows: GcWindows, now: float, store_now: float) -> GcPlan:
    """Sort every unreferenced file of ``state`` and every orphan of ``listed`` (the table's
    ``data/`` objects, listed before ``state`` was loaded) into due and kept (see the module).

    ``holds``: the tags and live pins; ``unreadable_tags``: some tag cannot be read, so every
    unreferenced file is kept for it; ``leases``: file -> when its live lease lapses (None:
    renewed while its process lives); ``now``: this machine's clock; ``store_now``: the
    store's.
    """
    sizes: dict[str, int] = {}
    objects: list[ObjectInfo] = []
    for o in listed:
        if o.key.endswith("/"):
            continue  # a folder marker (pyarrow's S3 create_dir writes them), not a file
        objects.append(o)
        f = data_file_of(o.key)
        sizes[f] = sizes.get(f, 0) + o.size
    tagged: set[str] = set()
    pinned: dict[str, float] = {}
    for h in holds:
        if h.expires is None:
            tagged.update(h.files)
        else:
            for f in h.files:
                pinned[f] = max(pinned.get(f, h.expires), h.expires)

    # ---- unreferenced: tag, pin, then the time windows -------------------------------------
    window = max(windows.delay, windows.retention)
    longer = "retention" if windows.retention > windows.delay else "gc_delay"
    groups: dict[str, _Group] = {}
    ready: list[tuple[float, str]] = []
    unreferenced_bytes = 0
    for f, t in state.unreferenced.items():
        size = sizes.get(f, 0)
        unreferenced_bytes += size
        due = t + window + windows.clock_skew
        pin = pinned.get(f)
        if unreadable_tags or f in tagged:
            reason, due_at = "tag", None
        elif pin is not None and (pin >= due or now >= due):
            reason, due_at = "pin", pin
        elif now >= due:
            ready.append((t, f))
            continue
        else:
            reason, due_at = (longer if now - t < window else "clock_skew"), due
        groups.setdefault(reason, _Group(reason)).add(f, due_at, size)
    unreferenced = _finish(groups, UNREFERENCED_REASONS)

    # ---- orphans: lease, pin, then the orphan timeout --------------------------------------
    known = set(state.refcount) | set(state.unreferenced)
    groups = {}
    orphans_ready: list[str] = []
    orphan_bytes = 0
    for o in objects:
        f = data_file_of(o.key)
        if f in known:
            continue
        orphan_bytes += o.size
        timeout_due = o.mtime + windows.orphan_timeout
        if f in tagged:
            reason, due_at = "tag", None
        elif f in leases:
            reason, due_at = "lease", _later(leases[f], timeout_due)
        elif f in pinned:
            reason, due_at = "pin", max(pinned[f], timeout_due)
        elif store_now >= timeout_due:
            orphans_ready.append(o.key)
            continue
        else:
            reason, due_at = "orphan_timeout", timeout_due
        groups.setdefault(reason, _Group(reason)).add(f, due_at, o.size)
    orphans = _finish(groups, ORPHAN_REASONS)
    return GcPlan(tuple(f for _, f in sorted(ready)), tuple(orphans_ready),
                  GcKept(unreferenced, orphans), unreferenced_bytes, orphan_bytes)
