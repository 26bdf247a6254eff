"""Pending files: data files a live writer has written (or is writing) and not yet committed.

GC's orphan pass deletes files that no transaction references once they are old enough. Age
alone cannot tell a dead writer's leftovers from a slow writer's work in progress (a long ingest,
bulk import or compaction), so every process that writes data files holds, per table, one
*lease* object ``pending/<lease-id>.json`` naming its pending files. The lease is written before
a file is created and rewritten by a heartbeat thread every ``heartbeat_seconds()``; the
collector skips every file named by a lease written less than ``lease_timeout()`` ago, both
times read from the object store's own clock (the lease's modification time against
``sediment.storage.clock.object_store_time``), so machine clocks never enter the judgement.

A lease can expire under a live writer: its process was stopped (SIGSTOP, a frozen VM) for
longer than the timeout. Two defences keep such a writer from committing files the collector
took:

- By its own clock: a lease last renewed longer ago than the timeout is *retired*, never
  renewed (the heartbeat retires it when it wakes; ``check_fresh`` refuses its files). New
  files go to a fresh lease, so the process carries on.
- By the log, for the clock that did not see the pause (a suspended VM's monotonic clock, or a
  writer paused between its last check and its append): GC records every lease it finds dead
  (``ExpireLeases``) before it deletes what the lease protected. The writer's conditional
  append of version ``v`` then finds ``v`` taken, re-reads the log, and ``StateStore.commit``
  refuses files protected by a lease that the head records as expired (``expired_holders``).

``StateStore.commit`` also checks that the files still exist before their first append.

``SEDIMENT_LEASE_TIMEOUT_SECONDS`` sets the timeout (default ``LEASE_TIMEOUT_SECONDS``) for the
process it is set in; the heartbeat runs at a fifteenth of it (at most ``HEARTBEAT_SECONDS``).
Processes that disagree are safe, only slower: a collector with a shorter timeout expires a
slow writer's lease, and the writer's commit is refused cleanly.
"""

from __future__ import annotations

import atexit
import logging
import math
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Collection, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from sediment.errors import (
    CorruptMetadataError,
    ObjectNotFoundError,
    PropertyError,
    SedimentError,
)
from sediment.pools import shared_pool
from sediment.state.documents import read_sealed, sealed
from sediment.storage.base import ObjectStore

log = logging.getLogger(__name__)

PENDING_PREFIX = "pending/"
HEARTBEAT_SECONDS = 20.0
"""How often a live process rewrites its leases (at the default timeout)."""
LEASE_TIMEOUT_SECONDS = 300.0
"""A lease not rewritten for this long (by the store's clock) protects nothing."""
LEASE_TIMEOUT_ENV = "SEDIMENT_LEASE_TIMEOUT_SECONDS"


def lease_timeout() -> float:
    """The lease timeout of this process: ``$SEDIMENT_LEASE_TIMEOUT_SECONDS`` or the default
    (PropertyError naming the variable when it is not a number of seconds > 0)."""
    raw = os.environ.get(LEASE_TIMEOUT_ENV, "").strip()
    if not raw:
        return LEASE_TIMEOUT_SECONDS
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise PropertyError(f"${LEASE_TIMEOUT_ENV} must be a number of seconds > 0, "
                            f"not {raw!r}")
    return value


def heartbeat_seconds() -> float:
    """How often the heartbeat renews leases: a fifteenth of the timeout, at most 20 s."""
    return min(HEARTBEAT_SECONDS, lease_timeout() / 15)


def lease_id_of(key: str) -> str:
    """The id of the lease stored at ``key`` (``pending/<id>.json``)."""
    name = key[len(PENDING_PREFIX):] if key.startswith(PENDING_PREFIX) else key
    return name[: -len(".json")] if name.endswith(".json") else name


@dataclass
class _Lease:
    """One process's pending files in one table folder."""

    objects: ObjectStore
    key: str
    files: set[str] = field(default_factory=set)
    written: float = 0.0
    """When the lease object was last written (monotonic), 0 when never."""
    retired: bool = False
    """Lapsed or recorded expired: never written again, its files never committed."""
    write_lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def lease_id(self) -> str:
        return lease_id_of(self.key)

    def document(self) -> bytes:
        return sealed({"writer": f"{socket.gethostname()}:{os.getpid()}",
                       "files": sorted(self.files)})

    def write(self) -> None:
        """Rewrite (or, when empty, delete) the lease object; serialised so that an older
        document never overwrites a newer one. A retired lease is never written again."""
        with self.write_lock:
            with _LOCK:
                if self.retired:
                    return
                doc = self.document() if self.files else None
            started = time.monotonic()
            if doc is None:
                self.objects.delete_many([self.key])
            else:
                self.objects.put(self.key, doc)
            self.written = started

    def age(self) -> float:
        """Seconds since the lease object was last written (by this process's clock; the
        clock's whole reading when it never was: such a lease protects nothing yet)."""
        return time.monotonic() - self.written


_LOCK = threading.Lock()
_LEASES: dict[str, _Lease] = {}
_RETIRED: dict[str, list[_Lease]] = {}
"""Per store URI, this process's retired leases that still name files (their writers'
commits are refused: see the module)."""
_OWNER = [0]
"""The pid that owns ``_LEASES`` (a forked child starts with none, and its own thread)."""
_STOP = threading.Event()
EXIT_SECONDS = 2.0
"""How long a process's exit waits for its empty leases to be deleted (:func:`_at_exit`)."""
_AT_EXIT = [False]
"""Whether :func:`_at_exit` is registered (once per interpreter; a spawned child registers its
own)."""


def _leases() -> dict[str, _Lease]:
    if _OWNER[0] != os.getpid():
        _LEASES.clear()
        _RETIRED.clear()
        _OWNER[0] = os.getpid()
        threading.Thread(target=_heartbeat, name="sediment-leases", daemon=True).start()
        if not _AT_EXIT[0]:
            _AT_EXIT[0] = True
            atexit.register(_at_exit)
    return _LEASES


def _at_exit() -> None:
    """Delete this process's empty leases as it exits. A lease emptied by its commit is
    deleted by the next heartbeat, which a short-lived process (a CLI command, a script)
    never reaches: left behind, the lease outlives its timeout and ``sediment doctor``
    reports a dead writer after every such command. A lease that still names files is left
    (a writer that exits with files it did not commit: they are orphans, the lease's
    timeout and the collector settle them)."""
    if _OWNER[0] != os.getpid():  # a forked child exiting through atexit: not its leases
        return
    with _LOCK:
        empty = [lease for lease in _LEASES.values() if not lease.files]
    if not empty:
        return

    def delete() -> None:
        for lease in empty:
            try:
                lease.write()  # (empty: deleted)
            except SedimentError as e:  # the lease's timeout settles it
                log.warning("could not delete pending-file lease %s at exit: %s", lease.key, e)

    # bounded: a store that no longer answers (an endpoint gone before the process) would
    # hold the exit for the storage client's every retry and backoff; what is left, the
    # lease's timeout settles
    worker = threading.Thread(target=delete, name="sediment-leases-exit", daemon=True)
    worker.start()
    worker.join(EXIT_SECONDS)


def _lapse_limit() -> float:
    """A lease last written longer ago than this (by this process's clock) may be dead to
    the collector already: the timeout less one heartbeat, for the write's own latency."""
    return lease_timeout() - heartbeat_seconds()


def _heartbeat() -> None:
    while True:
        try:
            interval = heartbeat_seconds()
        except PropertyError:  # reported to the writers by register
            interval = HEARTBEAT_SECONDS
        if _STOP.wait(interval):
            return
        _beat()


def _beat() -> None:
    with _LOCK:
        leases = list(_LEASES.values())
    try:
        limit = _lapse_limit()
    except PropertyError:
        limit = LEASE_TIMEOUT_SECONDS - HEARTBEAT_SECONDS
    for lease in leases:
        with _LOCK:  # an empty lease is deleted once, then forgotten until a file registers
            if not lease.files and _LEASES.get(lease.objects.uri) is lease:
                del _LEASES[lease.objects.uri]
        if lease.files and lease.written and lease.age() >= limit:  # (0: being written)
            # This process was stopped past the timeout: the collector may have expired
            # the lease and taken its files. Renewing it would hide that; retire it.
            log.warning("pending-file lease %s of %s lapsed (last renewed %.0f s ago): its "
                        "files will not be committed", lease.key, lease.objects.uri,
                        lease.age())
            _retire(lease)
            continue
        try:
            lease.write()
        except SedimentError as e:  # the next beat tries again; commits check freshness
            if lease.files:
                log.warning("could not refresh pending-file lease %s: %s", lease.key, e)


def _retire(lease: _Lease) -> None:
    """Stop renewing ``lease`` and delete its object (best effort); its files stay named by
    it, so their commits are refused; new files of this process go to a fresh lease."""
    with _LOCK:
        if lease.retired:
            return
        lease.retired = True
        uri = lease.objects.uri
        if _LEASES.get(uri) is lease:
            del _LEASES[uri]
        if lease.files:
            _RETIRED.setdefault(uri, []).append(lease)
    try:
        with lease.write_lock:
            lease.objects.delete_many([lease.key])
    except SedimentError as e:  # dead by its age: the collector deletes it later
        log.warning("could not delete retired pending-file lease %s: %s", lease.key, e)


def _mine(uri: str) -> list[_Lease]:
    """This process's leases under ``uri``, the current one first (call with ``_LOCK``)."""
    own = _leases().get(uri)
    return ([] if own is None else [own]) + _RETIRED.get(uri, [])


def flush() -> None:
    """Do the heartbeat's work now: rewrite every lease of this process, and delete and forget
    the empty ones. For a process about to lose its store's endpoint (a test's proxy), so no
    background write is left to fail against it later."""
    with _LOCK:
        leases = list(_leases().values())
    for lease in leases:
        with _LOCK:
            if not lease.files and _LEASES.get(lease.objects.uri) is lease:
                del _LEASES[lease.objects.uri]
        try:
            lease.write()
        except SedimentError as e:
            log.warning("could not write pending-file lease %s: %s", lease.key, e)


def register(objects: ObjectStore, filenames: Iterable[str]) -> None:
    """Protect ``filenames`` (table-rooted keys of ``objects``) from the orphan collector
    until :func:`release`; the lease is written before this returns."""
    lease = _named(objects, filenames)
    if lease is not None:
        lease.write()


def register_later(objects: ObjectStore, filenames: Iterable[str]) -> Callable[[], None]:
    """:func:`register`, the lease written on a thread: returns ``wait``, which returns once
    the lease naming ``filenames`` is written (raising what writing it raised). For a writer
    that creates the files only after ``wait()``: the lease's write (an fsync of the lease and
    of its folder on local disk, a PUT on S3) overlaps the writer's sorting and encoding
    instead of coming before them. The guarantee is :func:`register`'s: no file is created
    before a lease naming it is stored."""
    lease = _named(objects, filenames)
    if lease is None:
        return lambda: None
    written = _writer_pool().submit(lease.write)
    return lambda: written.result()


def _named(objects: ObjectStore, filenames: Iterable[str]) -> _Lease | None:
    """This process's lease of ``objects``, naming ``filenames`` now (in memory), or None for
    no names."""
    names = list(filenames)
    if not names:
        return None
    lease_timeout()  # a bad $SEDIMENT_LEASE_TIMEOUT_SECONDS fails the writer, not the heartbeat
    with _LOCK:
        leases = _leases()
        lease = leases.get(objects.uri)
        if lease is None:
            lease = leases[objects.uri] = _Lease(
                objects, f"{PENDING_PREFIX}{uuid.uuid4().hex}.json")
        lease.files.update(names)
    return lease


def _writer_pool() -> ThreadPoolExecutor:
    """The threads that write leases for :func:`register_later` (sediment.pools)."""
    return shared_pool("lease", 2)


def release(objects: ObjectStore, filenames: Iterable[str], *, now: bool = False) -> None:
    """Stop protecting ``filenames`` (committed, deleted, or left to the collector). The
    lease object catches up at the next heartbeat (until then it protects a little more),
    or at once with ``now``: deleted, and the lease forgotten, when it names nothing else
    (for files deleted at a refusal, so that nothing of the failed write is left)."""
    names = set(filenames)
    with _LOCK:
        uri = objects.uri
        for lease in _mine(uri):
            lease.files.difference_update(names)
        retired = [r for r in _RETIRED.get(uri, []) if r.files]
        if retired:
            _RETIRED[uri] = retired
        else:
            _RETIRED.pop(uri, None)
        current = _leases().get(uri)
        if current is None or not now:
            return
        if not current.files:
            del _LEASES[uri]
    try:
        current.write()
    except SedimentError as e:  # the heartbeat (or the lease's timeout) settles it
        log.warning("could not write pending-file lease %s: %s", current.key, e)


def held(objects: ObjectStore, filenames: Iterable[str]) -> list[str]:
    """Those of ``filenames`` that this process protects (or protected, in a retired lease)
    in ``objects``."""
    with _LOCK:
        leases = _mine(objects.uri)
        return [n for n in filenames if any(n in lease.files for lease in leases)]


def expired_holders(objects: ObjectStore, filenames: Collection[str],
                    expired: Mapping[str, float]) -> list[str]:
    """Ids of this process's leases naming any of ``filenames`` that ``expired`` (a state's
    ``expired_leases``) records; each is retired. Their files must not be committed: GC
    recorded the lease dead and may have deleted them."""
    if not expired:
        return []
    with _LOCK:
        found = [lease for lease in _mine(objects.uri)
                 if lease.lease_id in expired and not lease.files.isdisjoint(filenames)]
    for lease in found:
        _retire(lease)
    return [lease.lease_id for lease in found]


def check_fresh(objects: ObjectStore, filenames: Iterable[str]) -> str | None:
    """Why ``filenames`` may no longer be safe to commit (a lease of this process that names
    them was last written too long ago for the collector to honour it, or was retired), or
    None."""
    names = set(filenames)
    with _LOCK:
        leases = [lease for lease in _mine(objects.uri) if not lease.files.isdisjoint(names)]
    limit = _lapse_limit()
    for lease in leases:
        if lease.retired:
            return (f"the pending-file lease {lease.lease_id} protecting its files lapsed "
                    f"(this process was stopped longer than the lease timeout, "
                    f"{lease_timeout():.0f} s)")
        age = lease.age()
        if age >= limit:
            _retire(lease)
            return (f"the pending-file lease {lease.lease_id} protecting its files was last "
                    f"renewed {age:.0f} s ago (limit {limit:.0f} s)")
    return None


@dataclass(frozen=True, slots=True)
class LeaseScan:
    """What the collector learns from the leases of one table folder."""

    protected: frozenset[str]
    """Files named by live leases (and by this process's own)."""
    dead: tuple[str, ...]
    """Keys of leases not renewed for longer than the timeout: their files are ordinary
    orphans once the expiry is recorded (``ExpireLeases``) and the lease deleted."""
    lapses: Mapping[str, float | None] = field(default_factory=dict)
    """Each protected file -> when (the store's clock) the last live lease naming it lapses
    unless renewed; None for this process's own lease, renewed as long as it lives (what
    GC's report of kept files says is due when)."""

    @property
    def dead_ids(self) -> list[str]:
        return [lease_id_of(k) for k in self.dead]


def scan_leases(objects: ObjectStore, now: float, table: str | None = None) -> LeaseScan:
    """The leases under ``objects`` (``now``: the store's clock): the files live ones
    protect, and the dead ones, left in place for the collector to record, then
    :func:`delete_dead`.

    A live lease that cannot be read raises CorruptMetadataError naming it (and ``table``, the
    table's name, when given): the files it protects are unknown, so no orphan may go. It
    heals itself: once the lease is older than the timeout it is dead and deleted."""
    timeout = lease_timeout()
    with _LOCK:  # this process's own lease: its in-memory files are newer than its object
        own = _leases().get(objects.uri)
        lapses: dict[str, float | None] = {} if own is None else dict.fromkeys(own.files)
    dead: list[str] = []
    for o in objects.list(PENDING_PREFIX):
        if own is not None and o.key == own.key:
            continue
        if now - o.mtime >= timeout:
            dead.append(o.key)
            continue
        owner = f"table {table}" if table else objects.uri
        try:
            doc = read_sealed(objects, o.key, f"pending-file lease {o.key} of {owner}")
            lapse = o.mtime + timeout
            for f in (str(f) for f in doc["files"]):
                held = lapses.get(f, lapse)
                lapses[f] = None if held is None else max(held, lapse)
        except ObjectNotFoundError:
            continue  # released and deleted since the listing
        except (ValueError, KeyError, TypeError) as e:
            raise CorruptMetadataError(f"pending-file lease {o.key} of {owner} is "
                                       f"unreadable: {e!r}") from e
    return LeaseScan(frozenset(lapses), tuple(dead), lapses)


def delete_dead(objects: ObjectStore, scan: LeaseScan) -> None:
    """Delete the dead leases ``scan`` found (once their expiry is recorded)."""
    if scan.dead:
        objects.delete_many(scan.dead)
