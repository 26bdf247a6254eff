"""The table's one-dump-at-a-time lock: an object in the table, its heartbeat, its owner.

A dump holds ``dumps/lock.json`` (created with put-if-absent) for its whole life. Three rules
keep a slow dump and a resumed one from running the same job side by side:

- **The heartbeat runs while tasks run.** A background thread rewrites the lock every quarter
  of the staleness limit (at most every ``MAX_BEAT_SECONDS``), so one long task (a leaf of
  thousands of files) never makes a live job look dead. The thread is stopped, and joined,
  whatever way the dump ends.
- **Staleness is judged by the object store's clock**: the lock object's modification time
  against the store's current time (a probe object's, ``sediment.storage.clock``), never the
  writer's clock against the reader's. The ``heartbeat`` field in the document is for people; a
  lock written before owners existed (no ``owner`` field) is still judged by it, as then.
  ``heartbeat: 0`` marks a lock stale at once (a failed job: the next dump to its root resumes
  it).
- **Every write names its owner** (a random id of this process's hold on the lock). A beat, a
  stale mark or a release first reads the lock and does nothing when it is not ours: the job
  was resumed by another dump after a stall (it finishes the job) or finished; a lock that went
  away is never written back. Tasks check the owner before they write (``check_owner``), and
  the job before it writes its job manifest.

Two dumps resuming the same stale lock at once are told apart by a put-if-absent on a marker
named after the stale lock's bytes: one wins, the other is refused as if the lock were live.
"""

from __future__ import annotations

import hashlib
import logging
import math
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from contextvars import ContextVar
from typing import Any

from sediment.errors import CorruptMetadataError, JobError, ObjectNotFoundError, SedimentError
from sediment.state.documents import MetadataChecksumMismatch, open_sealed, sealed
from sediment.storage.base import ObjectStore
from sediment.storage.checksums import get_verified
from sediment.storage.clock import object_store_time
from sediment.storage.conditional import create_once

log = logging.getLogger(__name__)

LOCK_KEY = "dumps/lock.json"
TAKEOVER_PREFIX = "dumps/takeover-"
"""Markers that let exactly one dump resume a given stale lock (deleted once it has)."""
MAX_BEAT_SECONDS = 20.0
MIN_BEAT_SECONDS = 0.05
GUARD: ContextVar[Callable[[], None] | None] = ContextVar("sediment_dump_guard", default=None)
"""The running task's check that its job still holds the dump lock (set per task by
``run_dump_task_retried``; a context variable, so each worker thread has its own)."""


def guard() -> None:
    """Raise DumpLockLostError when the running task's job no longer holds the dump lock."""
    check = GUARD.get()
    if check is not None:
        check()


class DumpLockLostError(JobError):
    """This dump no longer holds the table's dump lock: another dump resumed the job after this
    one's heartbeat went stale, or the job finished or was abandoned meanwhile."""


def _lock_document(raw: bytes) -> tuple[bytes, dict[str, Any]]:
    try:
        return raw, open_sealed(raw, f"dump lock {LOCK_KEY}")
    except MetadataChecksumMismatch:
        raise  # read again (get_verified)
    except CorruptMetadataError:
        return raw, {}


def read_lock(objects: ObjectStore) -> tuple[bytes, dict[str, Any]] | None:
    """The lock's bytes and document, None when there is no lock. The document's checksum is
    checked and a mismatch read again; an unreadable document, and one that stays damaged,
    counts as a lock of nobody: it can only be abandoned or resumed."""
    try:
        return get_verified(objects, LOCK_KEY, _lock_document, error_cls=CorruptMetadataError,
                            where=f"dump lock {LOCK_KEY} in {objects.uri}")
    except ObjectNotFoundError:
        return None
    except CorruptMetadataError as e:
        log.warning("%s: taken for a lock of nobody (abandon or resume the dump)", e)
        try:
            return objects.get(LOCK_KEY), {}
        except ObjectNotFoundError:
            return None


def check_owner(objects: ObjectStore, owner: str, table: str, job_id: str) -> None:
    """Raise DumpLockLostError unless the lock is held by ``owner`` (a dump's task calls this
    before it writes, so a stalled dump that lost its job never overwrites the job's files)."""
    held = read_lock(objects)
    if held is None or held[1].get("owner") != owner:
        who = "nobody (the job finished or was abandoned)" if held is None else \
            f"another dump (owner {held[1].get('owner')})"
        raise DumpLockLostError(f"table {table}: dump job {job_id} lost its lock to {who}; this "
                                "dump stalled longer than the lock's staleness limit")


class DumpLock:
    """One dump's hold on the table's dump lock."""

    def __init__(self, objects: ObjectStore, table: str, doc: dict[str, Any],
                 timeout: float) -> None:
        self.objects = objects
        self.table = table
        self.timeout = timeout
        self.owner = uuid.uuid4().hex
        self.doc: dict[str, Any] = {**doc, "owner": self.owner, "beats": 0,
                                    "started": time.time(), "heartbeat": time.time()}
        self.lost = False
        self._mutex = threading.Lock()

    @property
    def job_id(self) -> str:
        return str(self.doc["job_id"])

    # ---- taking the lock ---------------------------------------------------------------------
    def acquire(self) -> bool:
        """True when the job is new; False when it resumes a stale job to the same root and
        range. JobError when a live job holds the lock, or a stale one to elsewhere."""
        for _ in range(8):  # a lock deleted or replaced between our reads: look again
            if create_once(self.objects, LOCK_KEY, self._bytes()):
                return True
            held = read_lock(self.objects)
            if held is None:
                continue
            raw, doc = held
            age = self._age(doc)
            if age is None:
                continue
            if age < self.timeout:
                raise self._busy(doc, f"heartbeat {age:.0f} s ago")
            if doc.get("root") != self.doc["root"] or doc.get("range") != self.doc["range"]:
                raise JobError(f"table {self.table}: an interrupted dump job "
                               f"{doc.get('job_id')} to {doc.get('root')} must be resumed (dump "
                               "to that root and range again) or abandoned (`sediment dump "
                               f"{self.table} {doc.get('root')} --abandon`) first")
            if self._take_over(raw, doc):
                return False
        raise JobError(f"table {self.table}: the dump lock kept changing while this dump read "
                       "it; try again")

    def _age(self, doc: dict[str, Any]) -> float | None:
        return lock_age(self.objects, doc)

    def _take_over(self, raw: bytes, doc: dict[str, Any]) -> bool:
        """Resume the stale job holding ``raw``: True when this dump now holds its lock."""
        marker = f"{TAKEOVER_PREFIX}{hashlib.sha256(raw).hexdigest()[:24]}.json"
        if not create_once(self.objects, marker, self.owner.encode()):
            raise self._busy(doc, "another dump is resuming it")
        try:
            again = read_lock(self.objects)
            if again is None or again[0] != raw:  # its owner woke up, or another took it
                return False
            self.doc = {**doc, "owner": self.owner, "beats": 0, "heartbeat": time.time()}
            self.objects.put(LOCK_KEY, self._bytes())
            return True
        finally:
            # once the stale bytes are replaced they never come back: the marker has done its job
            with suppress(SedimentError):
                self.objects.delete_many([marker])

    def _busy(self, doc: dict[str, Any], why: str) -> JobError:
        return JobError(f"table {self.table}: dump job {doc.get('job_id')} to {doc.get('root')} "
                        f"is running ({why}); one dump job per table at a time (a dump that "
                        f"was killed holds the lock until its heartbeat is {self.timeout:.0f} s "
                        f"old; then dump to that root again to resume it, or `sediment dump "
                        f"{self.table} {doc.get('root')} --abandon`)")

    # ---- holding it --------------------------------------------------------------------------
    def _bytes(self) -> bytes:
        return sealed(self.doc)

    def _ours(self) -> bool:
        held = read_lock(self.objects)
        ours = held is not None and held[1].get("owner") == self.owner
        self.lost = self.lost or not ours
        return ours

    def check(self) -> None:
        """Raise DumpLockLostError unless this dump still holds the lock."""
        check_owner(self.objects, self.owner, self.table, self.job_id)

    def beat(self) -> bool:
        """Rewrite the lock (fresh by the store's clock) if it is still ours; False once lost."""
        with self._mutex:
            if self.lost or not self._ours():
                return False
            self.doc["beats"] = int(self.doc.get("beats", 0)) + 1
            self.doc["heartbeat"] = time.time()
            self.objects.put(LOCK_KEY, self._bytes())
            return True

    @contextmanager
    def heartbeat(self) -> Iterator[None]:
        """Beat from a background thread while the body runs; the thread is stopped and joined
        however the body ends."""
        interval = max(MIN_BEAT_SECONDS, min(MAX_BEAT_SECONDS, self.timeout / 4))
        stop = threading.Event()

        def run() -> None:
            while not stop.wait(interval):
                try:
                    if not self.beat():
                        return  # lost: another dump holds the job now, or it is over
                except SedimentError as e:  # the next beat may get through; staleness decides
                    log.warning("table %s: dump job %s: heartbeat failed: %s", self.table,
                                self.job_id, e)

        thread = threading.Thread(target=run, name=f"dump-heartbeat-{self.job_id}",
                                  daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join(max(30.0, interval * 2))

    # ---- letting it go -----------------------------------------------------------------------
    def mark_stale(self) -> bool:
        """Heartbeat 0 (the next dump to the same root resumes the job at once) if the lock is
        still ours; a lock that is another's, or gone, is left alone. True when marked."""
        with self._mutex:
            if not self._ours():
                return False
            self.doc["heartbeat"] = 0.0
            self.objects.put(LOCK_KEY, self._bytes())
            self.lost = True  # no more beats: they would make it fresh again
            return True

    def release(self) -> bool:
        """Delete the lock if it is still ours; True when it was."""
        with self._mutex:
            if not self._ours():
                return False
            self.objects.delete_many([LOCK_KEY])
            self.lost = True
            return True


def lock_age(objects: ObjectStore, doc: dict[str, Any]) -> float | None:
    """Seconds since the lock holding ``doc`` was last written, by the object store's clock
    (None: it vanished meanwhile)."""
    if doc.get("heartbeat") == 0:
        return math.inf
    if "owner" not in doc:  # written before owners: its own heartbeat field, as then
        try:
            return time.time() - float(doc.get("heartbeat", 0))
        except (TypeError, ValueError):
            return math.inf
    info = objects.head(LOCK_KEY)
    if info is None:
        return None
    now = object_store_time(objects) or time.time()
    return max(0.0, now - info.mtime)


def abandon(objects: ObjectStore) -> dict[str, Any] | None:
    """Delete the lock and any takeover markers; the abandoned lock's document, if any."""
    held = read_lock(objects)
    markers = [o.key for o in objects.list(TAKEOVER_PREFIX)]
    objects.delete_many([LOCK_KEY, *markers] if held is not None else markers)
    return None if held is None else held[1]
