"""The prune floor: the handshake between ``prune`` and a tag or pin of an old version.

Prune reads the tags and pins, then deletes the log entries and snapshots below a base version
none of them needs. A tag or pin written after that read names a version whose log is going:
the pin would succeed, and its version would not read (the race of a short retention against
readers holding old versions, PostHog PR #78455). Each side writes, then reads the other's
write:

- prune records its base as a floor object (``prune/floor-<base>-<id>``), then reads the tags
  and pins again, and deletes nothing when one of them now holds a version below the base
  (its floor object removed: the next prune goes on from the tags it sees then);
- a tag or pin, once written, reads the floors and the log: it is let go (and the caller told
  ``VersionExpiredError``) when its version is below a floor of a prune at work, or its log
  entry and snapshot are gone.

Either prune sees the new tag, or the tag sees the prune's floor (or, once the prune is over,
that its version is gone). A floor lives while its prune runs: the prune deletes it at the end,
and a floor left by a prune that was killed is deleted by a later prune once it is older than
``STALE_FLOOR_SECONDS`` (until then it only makes tags of versions below it be refused).
"""

from __future__ import annotations

import re
import uuid

from sediment.state.log import log_key
from sediment.state.snapshot import snapshot_key
from sediment.storage.base import ObjectStore

FLOOR_PREFIX = "prune/"
STALE_FLOOR_SECONDS = 3600.0
"""A floor older than this is a killed prune's: no prune runs for an hour."""

_FLOOR = re.compile(r"^prune/floor-(\d{20})-[0-9a-f]{32}$")


def record_floor(objects: ObjectStore, base: int) -> str:
    """Record that a prune is deleting everything below ``base``; returns the floor's key."""
    key = f"{FLOOR_PREFIX}floor-{base:020d}-{uuid.uuid4().hex}"
    objects.put(key, b"")
    return key


def floors(objects: ObjectStore) -> dict[str, tuple[int, float]]:
    """Every floor object: its key to (base, modification time)."""
    out: dict[str, tuple[int, float]] = {}
    for o in objects.list(FLOOR_PREFIX):
        m = _FLOOR.match(o.key)
        if m is not None:
            out[o.key] = (int(m.group(1)), o.mtime)
    return out


def forget_floors(objects: ObjectStore, own: str, clock: float) -> None:
    """The end of a prune: its own floor, and those of killed prunes, deleted."""
    stale = [k for k, (_, mtime) in floors(objects).items()
             if k != own and clock - mtime >= STALE_FLOOR_SECONDS]
    objects.delete_many([own, *stale])


def still_readable(objects: ObjectStore, version: int) -> bool:
    """Whether ``version`` is above every floor of a prune at work, and its log entry or its
    snapshot is still there: asked by a tag or pin just written (see the module docs)."""
    if any(version < base for base, _ in floors(objects).values()):
        return False
    return objects.exists(log_key(version)) or objects.exists(snapshot_key(version))
