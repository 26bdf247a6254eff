"""Who maintains what when several maintainers share one store: the lease planner (pure).

Every ``sediment maintain --loop`` over a store is a *member* (``maintainers/members/<id>``)
and holds *leases*, one per table it maintains and one, :data:`STORE_LEASE`, for the store
steps. A lease is a chain of objects ``maintainers/leases/<name>/<epoch>.json``, each created
with put-if-absent: the holder of the highest epoch holds the lease while it is not released
and its heartbeat (the object's modification time, by the object store's clock) is younger
than the timeout. Only the holder writes its epoch (beats, release); taking a lease over is
creating the next epoch, which one maintainer wins. A maintainer whose beat is late stops
acting on a lease before anyone may take it (see ``sediment.maintenance.lease_store``).

This module decides, from one listing, what a member does next (:func:`plan_leases`):

- it keeps what it holds;
- it takes free leases (none yet, released, or expired) up to its share, ``ceil(n / k)``
  for ``n`` leases and ``k`` live members, in the order of a hash of (member, lease), so
  members that look at once want different leases (rendezvous hashing) and few creates race;
- it releases leases above its share when another live member holds fewer (above
  ``floor(n / k)`` when one holds fewer than that); a lease with work of its own under way is
  drained first (no new work starts under it, and it is released once that work ends): a
  member joining late gets a share within a few rounds, and work spreads evenly.

Why per table: every step of the maintainer (splits, compaction jobs, GC, the batcher) looks
at one table's head at a time, and a table's jobs commit through its own log; leases per leaf
would let two maintainers split and compact one big table, which the log resolves anyway
(compaction commits are conditional on their assignment), at the cost of a lease per leaf.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass

STORE_LEASE = "(store)"
"""The lease of the store steps (the folders no catalog entry names)."""


@dataclass(frozen=True, slots=True)
class LeaseView:
    """The latest epoch of one lease as listed: who holds it, how long since its last beat
    (seconds, by the object store's clock), and whether its holder let it go."""

    name: str
    epoch: int
    member: str
    age: float
    released: bool = False

    def live(self, timeout: float) -> bool:
        return not self.released and self.age < timeout


@dataclass(frozen=True, slots=True)
class MemberView:
    """A member as listed: its id and how long since its last beat."""

    member: str
    age: float


@dataclass(frozen=True, slots=True)
class LeasePlan:
    """What one member does next: the leases it ``keep``s, those it ``take``s (name and the
    epoch to create), those it ``release``s, and those it ``drain``s: to be handed over, but
    with work of its own under way, they are kept (and beaten) while that work ends, and no
    new work starts under them, so they are released at a later round."""

    keep: frozenset[str]
    take: tuple[tuple[str, int], ...]
    release: tuple[str, ...]
    drain: frozenset[str] = frozenset()


def rank(member: str, name: str) -> str:
    """The order in which ``member`` wants leases (rendezvous hashing): different members
    prefer different leases, so simultaneous takes rarely race for one."""
    return hashlib.sha256(f"{member}\0{name}".encode()).hexdigest()


def holders(leases: Mapping[str, LeaseView], timeout: float) -> dict[str, set[str]]:
    """Member -> the leases it holds live."""
    out: dict[str, set[str]] = {}
    for v in leases.values():
        if v.live(timeout):
            out.setdefault(v.member, set()).add(v.name)
    return out


def plan_leases(me: str, wanted: Sequence[str], leases: Mapping[str, LeaseView],
                members: Sequence[MemberView], *, timeout: float,
                busy: Set[str] = frozenset()) -> LeasePlan:
    """See the module docstring. ``wanted``: every lease to be held (the tables, and
    :data:`STORE_LEASE`); ``leases``: the latest epoch of each listed lease; ``members``:
    the listed members; ``busy``: leases of ``me`` with work under way (never released)."""
    names = sorted(set(wanted))
    mine = {n for n, v in leases.items()
            if v.member == me and not v.released}
    held = holders(leases, timeout)
    live = {me} | {m.member for m in members if m.age < timeout} | set(held)
    counts = {m: len(held.get(m, set()) & set(names)) for m in live}
    counts[me] = len(mine & set(names))
    k = len(live)
    hi = math.ceil(len(names) / k) if names else 0
    lo = len(names) // k
    keep = mine & set(names)
    release = sorted(n for n in mine - set(names) if n not in busy)  # dropped tables
    fewest = min((c for m, c in counts.items() if m != me), default=hi)
    # another member is short of its share: hand leases over rather than take more
    cap = lo if fewest < lo else hi
    target = min(len(keep), cap) if fewest < hi else len(keep)
    drain: set[str] = set()
    if len(keep) > target:
        # idle ones first (released at once), then busy ones (drained); each the least
        # wanted first
        least = sorted(keep, key=lambda n: rank(me, n), reverse=True)
        spare = ([n for n in least if n not in busy] + [n for n in least if n in busy]
                 )[:len(keep) - target]
        keep -= set(spare)
        release += [n for n in spare if n not in busy]
        drain = {n for n in spare if n in busy}
    take: list[tuple[str, int]] = []
    if len(keep) + len(drain) < cap:
        free = [n for n in names if n not in mine and
                (n not in leases or not leases[n].live(timeout))]
        for n in sorted(free, key=lambda n: rank(me, n))[:cap - len(keep) - len(drain)]:
            take.append((n, leases[n].epoch + 1 if n in leases else 1))
    return LeasePlan(frozenset(keep), tuple(take), tuple(release), frozenset(drain))
