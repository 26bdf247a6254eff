"""Pending files: data files a live writer has written (or is writing) and not yet committed.

GC's orphan pass deletes files that no transaction references once they are old enough. Age
alone cannot tell a dead writer's leftovers from a slow writer's work in progress (a long ingest,
bulk import or compaction), so every process that writes data files holds, per table, one
*lease* object ``pending/<lease-id>.json`` naming its pending files. The lease is written before
a file is created and rewritten by a heartbeat thread every ``HEARTBEAT_SECONDS``; the collector
skips every file named by a lease written less than ``LEASE_TIMEOUT_SECONDS`` ago, both times
read from the object store's own clock (the lease's modification time against
``sediment.storage.clock.object_store_time``), so machine clocks never enter the judgement.

A committer whose lease went stale (its process was stopped longer than the timeout) refuses to
commit files it registered: the collector may be deleting them. ``StateStore.commit`` checks
that the files still exist in any case.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field

from sediment.errors import CorruptMetadataError, ObjectNotFoundError, SedimentError
from sediment.storage.base import ObjectStore

log = logging.getLogger(__name__)

PENDING_PREFIX = "pending/"
HEARTBEAT_SECONDS = 20.0
"""How often a live process rewrites its leases."""
LEASE_TIMEOUT_SECONDS = 300.0
"""A lease not rewritten for this long (by the store's clock) protects nothing."""


@dataclass
class _Lease:
    """One process's pending files in one table folder."""

    objects: ObjectStore
    key: str
    files: set[str] = field(default_factory=set)
    written: float = 0.0
    """When the lease object was last written (monotonic), 0 when never."""
    write_lock: threading.Lock = field(default_factory=threading.Lock)

    def document(self) -> bytes:
        return json.dumps({"writer": f"{socket.gethostname()}:{os.getpid()}",
                           "files": sorted(self.files)}).encode()

    def write(self) -> None:
        """Rewrite (or, when empty, delete) the lease object; serialised so that an older
        document never overwrites a newer one."""
        with self.write_lock:
            with _LOCK:
                doc = self.document() if self.files else None
            started = time.monotonic()
            if doc is None:
                self.objects.delete_many([self.key])
            else:
                self.objects.put(self.key, doc)
            self.written = started


_LOCK = threading.Lock()
_LEASES: dict[str, _Lease] = {}
_OWNER = [0]
"""The pid that owns ``_LEASES`` (a forked child starts with none, and its own thread)."""
_STOP = threading.Event()


def _leases() -> dict[str, _Lease]:
    if _OWNER[0] != os.getpid():
        _LEASES.clear()
        _OWNER[0] = os.getpid()
        threading.Thread(target=_heartbeat, name="sediment-leases", daemon=True).start()
    return _LEASES


def _heartbeat() -> None:
    while not _STOP.wait(HEARTBEAT_SECONDS):
        with _LOCK:
            leases = list(_LEASES.values())
        for lease in leases:
            with _LOCK:  # an empty lease is deleted once, then forgotten until a file registers
                if not lease.files and _LEASES.get(lease.objects.uri) is lease:
                    del _LEASES[lease.objects.uri]
            try:
                lease.write()
            except SedimentError as e:  # the next beat tries again; commits check freshness
                if lease.files:
                    log.warning("could not refresh pending-file lease %s: %s", lease.key, e)


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
    names = list(filenames)
    if not names:
        return
    with _LOCK:
        leases = _leases()
        lease = leases.get(objects.uri)
        if lease is None:
            lease = leases[objects.uri] = _Lease(
                objects, f"{PENDING_PREFIX}{uuid.uuid4().hex}.json")
        lease.files.update(names)
    lease.write()


def release(objects: ObjectStore, filenames: Iterable[str]) -> None:
    """Stop protecting ``filenames`` (committed, deleted, or left to the collector). The
    lease object catches up at the next heartbeat: until then it protects a little more."""
    with _LOCK:
        lease = _leases().get(objects.uri)
        if lease is None:
            return
        lease.files.difference_update(filenames)


def held(objects: ObjectStore, filenames: Iterable[str]) -> list[str]:
    """Those of ``filenames`` that this process protects in ``objects``."""
    with _LOCK:
        lease = _leases().get(objects.uri)
        return [] if lease is None else [n for n in filenames if n in lease.files]


def check_fresh(objects: ObjectStore, filenames: Iterable[str]) -> str | None:
    """Why ``filenames`` may no longer be safe to commit (a lease of this process that names
    them was last written too long ago for the collector to honour it), or None."""
    with _LOCK:
        lease = _leases().get(objects.uri)
        if lease is None or not any(n in lease.files for n in filenames):
            return None
        age = time.monotonic() - lease.written
    if age < LEASE_TIMEOUT_SECONDS - HEARTBEAT_SECONDS:
        return None
    return (f"the lease protecting its files was last renewed {age:.0f} s ago "
            f"(limit {LEASE_TIMEOUT_SECONDS - HEARTBEAT_SECONDS:.0f} s)")


def live_pending(objects: ObjectStore, now: float, table: str | None = None) -> set[str]:
    """Files named by live leases under ``objects`` (``now``: the store's clock). Leases dead
    for longer than the timeout are deleted: their files are ordinary orphans now.

    A live lease that cannot be read raises CorruptMetadataError naming it (and ``table``, the
    table's name, when given): the files it protects are unknown, so no orphan may go. It
    heals itself: once the lease is older than the timeout it is dead and deleted."""
    with _LOCK:  # this process's own lease: its in-memory files are newer than its object
        own = _leases().get(objects.uri)
        protected: set[str] = set() if own is None else set(own.files)
    dead: list[str] = []
    for o in objects.list(PENDING_PREFIX):
        if own is not None and o.key == own.key:
            continue
        if now - o.mtime >= LEASE_TIMEOUT_SECONDS:
            dead.append(o.key)
            continue
        try:
            doc = json.loads(objects.get(o.key))
            protected.update(str(f) for f in doc["files"])
        except ObjectNotFoundError:
            continue  # released and deleted since the listing
        except (ValueError, KeyError, TypeError) as e:
            owner = f"table {table}" if table else objects.uri
            raise CorruptMetadataError(f"pending-file lease {o.key} of {owner} is "
                                       f"unreadable: {e!r}") from e
    if dead:
        objects.delete_many(dead)
    return protected
