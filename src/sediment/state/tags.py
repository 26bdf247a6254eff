"""Tags (named versions kept for ever) and pins (tags with an owner and an expiry).

A tag is a small object ``tags/<name>.json`` created with put-if-absent: GC keeps the files of
its version and prune its log entries until it is deleted. A *pin* is the same object with an
owner, a time to live and, optionally, files: held by GC and prune exactly like a tag while it
lives, and expiring on its own when its owner stops renewing it. Pins are how a process keeps
what it still needs without leaving it kept for ever when it dies: a batcher job pins its base
version and its staged files until it is settled; stream checkpoints and followers pin the
versions they will read next. ``pin`` again renews (or moves) a pin; ``unpin`` lets it go.

A pin's expiry is judged by the object store's clock: its object's modification time (the last
``pin``) plus its ``ttl_seconds``, against the store's current time (a probe object, as for
leases), so no machine's clock decides when another machine's pin lapses. Expired pins are
listed nowhere and hold nothing; ``prune`` deletes their objects a day after they expired.
"""

from __future__ import annotations

import math
import os
import re
import socket
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass

from sediment.errors import (
    CorruptMetadataError,
    InvalidTagNameError,
    ObjectNotFoundError,
    TagError,
    TagExistsError,
    TagNotFoundError,
    VersionExpiredError,
)
from sediment.properties import defaults
from sediment.state.documents import MetadataChecksumMismatch, open_sealed, sealed
from sediment.state.prune_floor import still_readable
from sediment.state.store import StateStore
from sediment.storage.base import ObjectStore
from sediment.storage.checksums import ChecksumMismatch, get_verified
from sediment.storage.clock import object_store_time
from sediment.storage.conditional import create_once

TAG_PREFIX = "tags/"
_TAG = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}")
MAX_PIN_SECONDS = 100 * 365 * 86400.0
"""The longest time to live of a pin (a century, as the longest duration property)."""
FORGET_EXPIRED_PINS_SECONDS = 86400.0
"""Prune deletes a pin's object once it has been expired this long (its owner, long gone,
renews nothing: an owner that comes back after a lapse pins again)."""


def _tag_key(name: str, table: str) -> str:
    """The key of tag ``name`` (InvalidTagNameError naming ``table`` when it cannot be one)."""
    if not isinstance(name, str) or not _TAG.fullmatch(name) or ".." in name or \
            name.isdigit():
        raise InvalidTagNameError(
            f"table {table}: invalid tag name {name!r}: use 1-128 letters, digits, '_', '-' "
            "or '.', starting with a letter or digit, not all digits (a number means a "
            "version)")
    return f"{TAG_PREFIX}{name}.json"


@dataclass(frozen=True, slots=True)
class Tag:
    """A tag, or a pin when ``expires`` is set (then ``owner`` names the process that last
    pinned it, ``host:pid``, and ``files`` are data files it keeps besides its version's)."""

    name: str
    version: int
    created: float
    expires: float | None = None
    owner: str | None = None
    files: tuple[str, ...] = ()
    onward: bool = False
    """A pin that holds its version and every later one (a change-feed follower or a stream
    source: it still has to read what each later commit changed), not its version alone."""

    @property
    def is_pin(self) -> bool:
        return self.expires is not None


def create_tag(states: StateStore, name: str, version: int) -> Tag:
    """Tag ``version``. Raises InvalidTagNameError, TagExistsError (both TagErrors, which are
    QueryErrors), WriteOutcomeUnknownError when the store never says whether it landed."""
    key = _tag_key(name, states.name)
    # the random id makes the bytes ours alone, so a lost answer is resolved by reading
    created = time.time()
    doc = {"name": name, "version": version, "created": created, "id": uuid.uuid4().hex}
    if not create_once(states.objects, key, sealed(doc)):
        raise TagExistsError(f"table {states.name}: tag {name!r} already exists")
    _held_or_let_go(states, key, f"tag {name!r}", version)
    return Tag(name, version, created)


def _held_or_let_go(states: StateStore, key: str, what: str, version: int) -> None:
    """The tag's (or pin's) half of the handshake with prune (``sediment.state.prune_floor``):
    written, it reads the floors and the log, and is deleted again when prune is taking its
    version, or took it after the caller checked the version read."""
    if still_readable(states.objects, version):
        return
    states.objects.delete_many([key])
    seconds = float({**defaults(), **states.head().properties}["retention.seconds"])
    raise VersionExpiredError(
        f"table {states.name}: version {version} has expired: prune is deleting (or deleted) "
        f"its log, as it does for versions older than the table's retention.seconds = "
        f"{seconds:g} s; {what} let go. Tag a newer version, or raise retention.seconds")


def create_pin(states: StateStore, name: str, version: int, ttl_seconds: float,
               files: Iterable[str] = (), *, onward: bool = False) -> Tag:
    """Pin ``version`` (and ``files``) under ``name`` for ``ttl_seconds``, or renew (or move)
    the pin of that name. Raises InvalidTagNameError; TagError for a time to live that is not
    a positive number of seconds up to a century; TagExistsError when ``name`` is a tag (a
    tag is never turned into a pin); CorruptMetadataError when the object at ``name`` is
    damaged."""
    key = _tag_key(name, states.name)
    try:
        ttl = float(ttl_seconds)
    except (TypeError, ValueError):
        ttl = math.nan
    if isinstance(ttl_seconds, bool) or not 0 < ttl <= MAX_PIN_SECONDS:
        raise TagError(f"table {states.name}: pin {name!r}: ttl_seconds must be a number of "
                       f"seconds above 0 and at most {MAX_PIN_SECONDS:.0f}, not "
                       f"{ttl_seconds!r}")
    created = time.time()
    owner = f"{socket.gethostname()}:{os.getpid()}"
    kept = tuple(sorted(set(files)))
    doc = {"name": name, "version": int(version), "created": created, "id": uuid.uuid4().hex,
           "pin": True, "ttl_seconds": ttl, "expires": created + ttl, "owner": owner,
           "files": list(kept)}
    if onward:  # omitted otherwise: pins written before it read the same
        doc["onward"] = True
    data = sealed(doc)
    pin = Tag(name, int(version), created, created + ttl, owner, kept, onward)
    for _ in range(8):  # a pin deleted between our reads: look again
        if create_once(states.objects, key, data):
            _held_or_let_go(states, key, f"pin {name!r}", int(version))
            return pin
        try:
            held = _read_tag(states.objects, key, states.name)
        except ObjectNotFoundError:
            continue
        if not held.is_pin:
            raise TagExistsError(f"table {states.name}: {name!r} is a tag, not a pin: a tag "
                                 "is never turned into a pin (use another name)")
        states.objects.put(key, data)  # renew: only pins are ever overwritten
        if held.version != int(version):  # moved: prune held the old version, not this one
            _held_or_let_go(states, key, f"pin {name!r}", int(version))
        return pin
    raise TagError(f"table {states.name}: pin {name!r} kept appearing and vanishing while it "
                   "was being pinned; try again")


def delete_pin(states: StateStore, name: str) -> bool:
    """Let the pin ``name`` go; False when there is none (already let go, or forgotten after
    it expired). Raises InvalidTagNameError; TagError when ``name`` is a tag (delete tags with
    ``delete_tag``); CorruptMetadataError when its object is damaged."""
    key = _tag_key(name, states.name)
    try:
        held = _read_tag(states.objects, key, states.name)
    except ObjectNotFoundError:
        return False
    if not held.is_pin:
        raise TagError(f"table {states.name}: {name!r} is a tag, not a pin: delete it with "
                       f"`sediment tag {states.name} {name} --delete` (Table.delete_tag)")
    states.objects.delete_many([key])
    return True


@dataclass(frozen=True, slots=True)
class TagScan:
    """Every tag object of a table: those that parse (live pins among them), the pins that
    expired, and a message for each object that does not parse (naming the table and the
    object key, and how to remove it)."""

    tags: list[Tag]
    unreadable: list[str]
    expired: list[Tag]


def scan_tags(states: StateStore, now: float | None = None) -> TagScan:
    """Read every tag, keeping going past damaged ones: GC must see all the tags it can, and
    know that others exist, to keep (conservatively) what an unreadable one may protect.
    ``now`` is the object store's time to judge pins by (default: a probe, taken only when
    there is a pin)."""
    found: list[Tag] = []
    unreadable: list[str] = []
    for o in states.objects.list(TAG_PREFIX):
        try:
            found.append(_read_tag(states.objects, o.key, states.name, o.mtime))
        except ObjectNotFoundError:
            continue  # deleted since the listing (e.g. a dump job's tag as the job ends)
        except CorruptMetadataError as e:
            unreadable.append(str(e))
    if now is None and any(t.is_pin for t in found):
        now = object_store_time(states.objects) or time.time()
    live = [t for t in found if t.expires is None or now is None or t.expires > now]
    expired = [t for t in found if t.expires is not None and now is not None
               and t.expires <= now]
    return TagScan(sorted(live, key=_by_version), unreadable, sorted(expired, key=_by_version))


def _by_version(tag: Tag) -> tuple[int, str]:
    return tag.version, tag.name


def list_tags(states: StateStore) -> list[Tag]:
    """Every tag and live pin, by version. Raises CorruptMetadataError (naming the table and
    the key) when a tag object is damaged."""
    scan = scan_tags(states)
    if scan.unreadable:
        raise CorruptMetadataError(scan.unreadable[0])
    return scan.tags


def forget_expired_pins(states: StateStore, scan: TagScan, now: float) -> int:
    """Delete the objects of pins expired for ``FORGET_EXPIRED_PINS_SECONDS`` by ``now`` (the
    store's time); how many."""
    keys = [f"{TAG_PREFIX}{t.name}.json" for t in scan.expired
            if t.expires is not None and now - t.expires >= FORGET_EXPIRED_PINS_SECONDS]
    states.objects.delete_many(keys)
    return len(keys)


def _tag_name_of(key: str) -> str:
    name = key[len(TAG_PREFIX):]
    return name[: -len(".json")] if name.endswith(".json") else name


def _damaged(key: str, table: str, problem: str) -> str:
    return (f"tag object {key} of table {table} is corrupt: {problem}; delete it with "
            f"`sediment tag {table} {_tag_name_of(key)} --delete` (Table.delete_tag)")


def _read_tag(objects: ObjectStore, key: str, table: str, mtime: float | None = None) -> Tag:
    """The tag at ``key`` (see ``_parse_tag``), read again while its checksum fails; then
    CorruptMetadataError naming the table and the key. ObjectNotFoundError when it is gone."""
    return _read_raw_tag(objects, key, table, mtime)[1]


def _read_raw_tag(objects: ObjectStore, key: str, table: str,
                  mtime: float | None = None) -> tuple[bytes, Tag]:
    try:
        return get_verified(objects, key, lambda raw: (raw, _parse_tag(raw, key, table, mtime)),
                            error_cls=CorruptMetadataError,
                            where=f"tag object {key} of table {table}")
    except CorruptMetadataError as e:
        if isinstance(e.__cause__, ChecksumMismatch):  # damaged for good: say how to be rid of it
            raise CorruptMetadataError(_damaged(key, table, "checksum mismatch after "
                                                f"reading it again ({e.__cause__.detail})")
                                       ) from e
        raise


def _parse_tag(raw: bytes, key: str, table: str, mtime: float | None = None) -> Tag:
    """The tag in ``raw``; a pin's ``expires`` is ``mtime`` (its object's modification time,
    the store's clock) plus its time to live, or its writer's own expiry without ``mtime``.
    A checksum mismatch raises MetadataChecksumMismatch (read again by ``_read_tag``)."""
    try:
        doc = open_sealed(raw, f"tag object {key} of table {table}")
    except MetadataChecksumMismatch:
        raise
    except CorruptMetadataError as e:
        raise CorruptMetadataError(_damaged(key, table, str(e))) from e
    try:
        name, version, created = str(doc["name"]), int(doc["version"]), float(doc["created"])
        if not doc.get("pin"):
            return Tag(name, version, created)
        ttl = float(doc["ttl_seconds"])
        expires = float(doc["expires"]) if mtime is None else mtime + ttl
        files = doc.get("files") or []
        if not isinstance(files, list) or not all(isinstance(f, str) for f in files) or \
                math.isnan(expires):
            raise ValueError(f"malformed pin: files {files!r}, expiry {expires!r}")
        return Tag(name, version, created, expires, str(doc.get("owner") or ""), tuple(files),
                   doc.get("onward") is True)
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise CorruptMetadataError(_damaged(key, table, repr(e))) from e


def _no_tag(table: str, name: str) -> str:
    return (f"table {table} has no tag {name!r} (its tags: `sediment tags {table}` or "
            f"table.tags())")


def get_tag(states: StateStore, name: str) -> Tag:
    """The tag (or live pin) ``name``. Raises InvalidTagNameError, TagNotFoundError (for an
    expired pin too), CorruptMetadataError."""
    key = _tag_key(name, states.name)
    try:
        raw, tag = _read_raw_tag(states.objects, key, states.name)
    except ObjectNotFoundError:
        raise TagNotFoundError(_no_tag(states.name, name)) from None
    if tag.is_pin:
        info = states.objects.head(key)
        if info is None:
            raise TagNotFoundError(_no_tag(states.name, name))
        tag = _parse_tag(raw, key, states.name, info.mtime)
        now = object_store_time(states.objects) or time.time()
        if tag.expires is not None and tag.expires <= now:
            raise TagNotFoundError(f"table {states.name}: pin {name!r} expired (its owner "
                                   "stopped renewing it)")
    return tag


def delete_tag(states: StateStore, name: str) -> None:
    """Delete tag ``name``, even a damaged one (deleting is the way to be rid of it), and a
    pin too (as ``unpin``). Raises InvalidTagNameError, TagNotFoundError."""
    key = _tag_key(name, states.name)
    if not states.objects.exists(key):
        raise TagNotFoundError(_no_tag(states.name, name))
    states.objects.delete_many([key])
