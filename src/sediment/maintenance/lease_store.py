"""The leases of ``sediment.maintenance.leases`` in the object store, and the thread that
keeps them (thin I/O around the pure planner).

Objects, at the root of the store::

    maintainers/members/<member>.json            a maintainer: host, pid, started, timeout,
                                                 the leases it holds (rewritten every beat)
    maintainers/leases/<name>/<epoch:012d>.json  one epoch of a lease (put-if-absent), then
                                                 rewritten by its holder only: beats, release

Ages are judged by the object store's clock (listed modification times against a probe's,
``sediment.storage.clock``), never one machine's clock against another's.

A maintainer acts on a lease only while its last beat of it was *sent* less than
``ACT_FRACTION`` of the timeout ago (by its own monotonic clock): the object's modification
time is at least that sending time, so others can take the lease over only after the holder
has stopped starting work under it, however late its beats are (a stalled process, a slow
store). Work already under way then ends on its own: a compaction commit is conditional on
its job's assignment, a batcher job on its decision object, so nothing commits twice.
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
from typing import Any
from urllib.parse import quote, unquote

from sediment.errors import SedimentError
from sediment.maintenance.leases import (
    STORE_LEASE,
    LeaseView,
    MemberView,
    plan_leases,
)
from sediment.storage.base import ObjectStore
from sediment.storage.clock import object_store_time
from sediment.storage.conditional import create_once

log = logging.getLogger(__name__)

MEMBERS = "maintainers/members/"
LEASES = "maintainers/leases/"
ACT_FRACTION = 0.5
"""A lease is acted on while its last beat was sent less than this fraction of the timeout
ago (see the module docstring)."""
BEATS_PER_TIMEOUT = 4
"""Beats (and looks at the listing) per lease timeout."""
FORGET_TIMEOUTS = 10
"""A member silent for this many of its timeouts is deleted from the listing (reports show it
as dead until then)."""


def lease_key(name: str, epoch: int) -> str:
    return f"{LEASES}{quote(name, safe='')}/{epoch:012d}.json"


def _parse_lease_key(key: str) -> tuple[str, int] | None:
    rest = key[len(LEASES):]
    folder, _, file = rest.partition("/")
    if not file.endswith(".json") or not file[:-5].isdigit():
        return None
    return unquote(folder), int(file[:-5])


def _read(objects: ObjectStore, key: str) -> dict[str, Any] | None:
    try:
        doc = json.loads(objects.get(key))
    except (SedimentError, ValueError):
        return None  # gone meanwhile, or damaged: looked at again next round
    return doc if isinstance(doc, dict) else None


@dataclass(frozen=True, slots=True)
class Listing:
    """One look at the store's maintainers: the latest epoch of every lease, every member's
    document and age, and the time by the store's clock."""

    leases: dict[str, LeaseView]
    lease_docs: dict[str, dict[str, Any]]
    members: dict[str, tuple[float, dict[str, Any]]]
    now: float
    old_epochs: list[str] = field(default_factory=list)
    keys: dict[str, list[str]] = field(default_factory=dict)
    """Lease -> every epoch object listed."""


def list_maintainers(objects: ObjectStore, *, now: float | None = None) -> Listing:
    """Read the members and the latest epoch of every lease (one listing each, one read per
    lease and member). Ages are against ``now`` when given (a reader that must not write,
    the dashboard, passes its own clock), else against the object store's clock."""
    now = now if now is not None else object_store_time(objects) or time.time()
    latest: dict[str, tuple[int, str, float]] = {}
    old: list[str] = []
    keys: dict[str, list[str]] = {}
    for o in objects.list(LEASES):
        parsed = _parse_lease_key(o.key)
        if parsed is None:
            continue
        name, epoch = parsed
        keys.setdefault(name, []).append(o.key)
        prev = latest.get(name)
        if prev is None or epoch > prev[0]:
            if prev is not None:
                old.append(prev[1])
            latest[name] = (epoch, o.key, o.mtime)
        else:
            old.append(o.key)
    leases: dict[str, LeaseView] = {}
    docs: dict[str, dict[str, Any]] = {}
    for name, (epoch, key, mtime) in latest.items():
        # unreadable (damaged, or gone meanwhile): a lease of nobody, taken at the next
        # epoch once its object is as old as a timeout
        doc = _read(objects, key) or {}
        docs[name] = doc
        leases[name] = LeaseView(name, epoch, str(doc.get("member", "")),
                                 max(0.0, now - mtime), bool(doc.get("released")))
    members: dict[str, tuple[float, dict[str, Any]]] = {}
    for o in objects.list(MEMBERS):
        member = _read(objects, o.key)
        if member is not None and "member" in member:
            members[str(member["member"])] = (max(0.0, now - o.mtime), member)
    return Listing(leases, docs, members, now, old, keys)


class LeaseHolder:
    """One maintainer's membership and leases, kept by a background thread: every
    ``timeout / BEATS_PER_TIMEOUT`` seconds it beats its member object and each lease it
    holds, lists the others, and takes or releases leases as :func:`plan_leases` says.

    The maintainer's tick calls :meth:`offer` with the tables it could maintain (and those
    with work under way) and asks :meth:`holds` before it acts on one."""

    def __init__(self, objects: ObjectStore, *, timeout: float = 30.0,
                 member: str | None = None) -> None:
        self.objects = objects.root()
        self.timeout = timeout
        self.member = member or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.started = time.time()
        self._lock = threading.Lock()
        self._wanted: list[str] = []
        self._offered = False
        self._busy: set[str] = set()
        self._held: dict[str, tuple[int, float]] = {}
        """Lease -> its epoch and when (monotonic) its last beat was sent."""
        self._draining: frozenset[str] = frozenset()
        """Leases being handed over: beaten, but no new work starts under them."""
        self._taken: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.rounds = 0
        self.errors: list[str] = []

    # ---- what the maintainer asks ------------------------------------------------------------
    def offer(self, tables: Iterable[str], *, busy: Iterable[str] = (),
              store: bool = True) -> None:
        """The tables this maintainer could maintain now, and those with work of its own
        under way (never released); ``store``: it runs the store steps too (one that
        maintains only some tables does not, and leaves their lease to others). Starts the
        beating thread on the first call."""
        with self._lock:
            self._wanted = [*tables, *([STORE_LEASE] if store else [])]
            self._busy = set(busy)
            first = not self._offered
            self._offered = True
        if first:
            self.round()  # the first leases at once, not a beat later
            self._thread = threading.Thread(target=self._run, daemon=True,
                                            name=f"sediment-leases-{self.member}")
            self._thread.start()

    def holds(self, name: str) -> bool:
        """True while this maintainer may start work under lease ``name``."""
        with self._lock:
            held = self._held.get(name)
            if name in self._draining:
                return False
        return held is not None and \
            time.monotonic() - held[1] < self.timeout * ACT_FRACTION

    def holds_store(self) -> bool:
        return self.holds(STORE_LEASE)

    def held(self) -> list[str]:
        with self._lock:
            return sorted(self._held)

    # ---- one round ---------------------------------------------------------------------------
    @property
    def interval(self) -> float:
        return max(0.02, self.timeout / BEATS_PER_TIMEOUT)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.round()

    def round(self) -> None:
        """Beat, look, take and release once; a storage error is logged and the next round
        tries again (the leases not beaten then stop being acted on: ``holds``)."""
        try:
            self._round()
        except Exception as e:  # noqa: BLE001 - the beating thread must go on
            with self._lock:
                self.errors = [*self.errors[-9:], f"{type(e).__name__}: {e}"]
            log.warning("maintainer %s: leases: %s", self.member, e)
        self.rounds += 1

    def take_errors(self) -> list[str]:
        """The rounds' errors since the last call (the maintainer reports them)."""
        with self._lock:
            out, self.errors = self.errors, []
        return out

    def _round(self) -> None:
        with self._lock:
            wanted, busy = list(self._wanted), set(self._busy)
            held = dict(self._held)
        # beats first, before any listing: the sooner they are sent, the longer the leases
        # may be acted on (a beat of an epoch another has superseded changes nothing: the
        # highest epoch holds the lease)
        for name, (epoch, _) in held.items():
            self._beat(name, epoch)
        self._beat_member(held)
        listing = list_maintainers(self.objects)
        for name, (epoch, _) in held.items():  # still ours?
            v = listing.leases.get(name)
            if v is None or v.epoch != epoch or v.member != self.member or v.released:
                self._drop(name)
        members = [MemberView(m, age) for m, (age, _) in listing.members.items()]
        plan = plan_leases(self.member, wanted, listing.leases, members,
                           timeout=self.timeout, busy=busy)
        with self._lock:
            self._draining = plan.drain
        for name in plan.release:
            self._release(name, listing)
        for name, epoch in plan.take:
            self._take(name, epoch, listing)
        self._forget(listing, wanted)

    def _doc(self, name: str, epoch: int, **more: Any) -> bytes:
        return json.dumps({"lease": name, "epoch": epoch, "member": self.member,
                           "heartbeat": time.time(), **more}).encode()

    def _beat(self, name: str, epoch: int) -> None:
        sent = time.monotonic()
        self.objects.put(lease_key(name, epoch),
                         self._doc(name, epoch, taken=self._taken.get(name)))
        with self._lock:
            if name in self._held:
                self._held[name] = (epoch, sent)

    def _take(self, name: str, epoch: int, listing: Listing) -> None:
        sent = time.monotonic()
        before = listing.leases.get(name)
        data = self._doc(name, epoch, taken=time.time(), nonce=uuid.uuid4().hex,
                         previous=None if before is None else before.member)
        if not create_once(self.objects, lease_key(name, epoch), data):
            return  # another maintainer took it first
        with self._lock:
            self._held[name] = (epoch, sent)
            self._taken[name] = time.time()
        # the epochs before the previous one are history no one reads
        old = [k for k in listing.old_epochs if (p := _parse_lease_key(k)) and p[0] == name]
        if old:
            self.objects.delete_many(old)

    def _release(self, name: str, listing: Listing) -> None:
        self._drop(name)  # first: no new work under it
        v = listing.leases.get(name)
        if v is None or v.member != self.member:
            return
        self.objects.put(lease_key(name, v.epoch),
                         self._doc(name, v.epoch, released=True,
                                   taken=listing.lease_docs[name].get("taken")))

    def _drop(self, name: str) -> None:
        with self._lock:
            self._held.pop(name, None)

    def _beat_member(self, held: dict[str, tuple[int, float]]) -> None:
        doc = {"member": self.member, "host": socket.gethostname(), "pid": os.getpid(),
               "started": self.started, "heartbeat": time.time(), "timeout": self.timeout,
               "leases": sorted(held)}
        self.objects.put(f"{MEMBERS}{quote(self.member, safe='')}.json",
                         json.dumps(doc).encode())

    def _forget(self, listing: Listing, wanted: list[str]) -> None:
        """Delete members silent for ``FORGET_TIMEOUTS`` of their timeouts, and the leases
        of tables no longer here (dropped) once as long unheld."""
        def forget(member: str) -> float:  # by the longer of our and the holder's timeouts
            doc = listing.members.get(member, (0.0, {}))[1]
            return FORGET_TIMEOUTS * max(self.timeout, float(doc.get("timeout", 0.0)))

        gone = [f"{MEMBERS}{quote(m, safe='')}.json" for m, (age, doc) in listing.members.items()
                if m != self.member and
                age > FORGET_TIMEOUTS * float(doc.get("timeout", self.timeout))]
        # a lease of a dropped table: released or expired, and not beaten for that long
        gone += [k for name, v in listing.leases.items()
                 if name not in wanted and name != STORE_LEASE and v.age > forget(v.member)
                 for k in listing.keys.get(name, [])]
        if gone:
            self.objects.delete_many(gone)

    # ---- stopping ----------------------------------------------------------------------------
    def close(self) -> None:
        """Stop beating, release every lease held (others take them at once instead of after
        the timeout) and leave the members."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(max(5.0, self.interval * 2))
        try:
            listing = list_maintainers(self.objects)
            for name in self.held():
                self._release(name, listing)
            self.objects.delete_many([f"{MEMBERS}{quote(self.member, safe='')}.json"])
        except SedimentError as e:  # they expire instead
            log.warning("maintainer %s: leases not released: %s", self.member, e)


def maintainers_report(objects: ObjectStore, *, now: float | None = None) -> dict[str, Any]:
    """Who holds what (``sediment report maintainers``, the dashboard): every member with its
    host, pid, leases and last heartbeat, and every lease with its holder, epoch, last
    heartbeat and state (``held``, ``expired``: free for another to take, ``released``).
    Ages are seconds by the object store's clock (by ``now``, when given: see
    :func:`list_maintainers`)."""
    listing = list_maintainers(objects.root(), now=now)
    timeouts = {m: float(doc.get("timeout", 30.0)) for m, (_, doc) in listing.members.items()}
    leases = []
    for name, v in sorted(listing.leases.items()):
        timeout = timeouts.get(v.member, 30.0)
        state = "released" if v.released else "held" if v.age < timeout else "expired"
        leases.append({"lease": name, "member": v.member, "epoch": v.epoch,
                       "heartbeat_age_seconds": round(v.age, 3), "state": state,
                       "taken": listing.lease_docs[name].get("taken"),
                       "previous": listing.lease_docs[name].get("previous")})
    members = []
    for m, (age, doc) in sorted(listing.members.items()):
        held = [r["lease"] for r in leases if r["member"] == m and r["state"] == "held"]
        members.append({"member": m, "host": doc.get("host"), "pid": doc.get("pid"),
                        "started": doc.get("started"), "timeout": timeouts[m],
                        "heartbeat_age_seconds": round(age, 3),
                        "live": age < timeouts[m], "leases": held})
    return {"time": listing.now, "members": members, "leases": leases}
