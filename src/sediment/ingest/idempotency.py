"""Idempotent writes: the key index, and committing keyed writes exactly once.

A keyed write (``idempotency_key=`` on ``ingest``, ``upsert``, ``delete``, a buffered writer's
``write``) is found again by its key, as Kafka's idempotent producer finds a retried batch:

- **The index**: one small object per key, ``idempotency/<2 hex>/<sha256 of key>.json`` under
  the table's folder (sharded by the hash's first byte, so no listing grows with the keys
  and no head ever loads them). It holds the key, the payload's hash, the head version read
  before the claim (``since``), its creation time, and, once committed, the version and the
  write's result. It is read only when a key is presented, kept for
  ``write.idempotency_window_seconds`` (a record older than that reads as absent), and
  deleted by GC once expired (:func:`expire_keys`).
- **The claim**: before committing, a writer creates the key's record with
  :func:`~sediment.storage.conditional.create_once`. Whoever finds a record already there
  compares payload hashes: another payload is refused (IdempotencyKeyReusedError); a record
  with a version is answered from (the original result: nothing is written); a record
  without one (its writer is still committing, or died, or lost the answer) is committed by
  this writer too, under the log check below.
- **The log check** (:func:`commit_keyed`): the committed transaction carries its keys
  (:class:`~sediment.core.transactions.KeyedWrite` on AddFiles and DeleteRecords), and the
  transaction is built from each head the commit loop tries only after reading the log
  entries between the claim's ``since`` and that head: a key found there is already
  committed, and nothing is committed again. The log orders every commit, so of two writers
  of one key (two threads, two processes, two servers, a retry after a lost answer) the
  second to reach the log finds the first's entry: exactly once, decided by reading the log,
  never guessed. ``since`` is read before the record is created, so every commit of the key
  lies after it.

**Several keys in one commit.** :func:`commit_keyed` takes any number of
:class:`~sediment.core.transactions.KeyedWrite` (the buffered writer's flush, group commit in
the server) with one transaction carrying them all; it commits that transaction once, or
finds some of its keys already in the log and commits nothing, saying which (the caller then
drops those writes and commits the rest: :class:`KeyedCommit.found`). Each key is claimed
(:meth:`KeyIndex.claim`) before, and recorded (:meth:`KeyIndex.record_all`) after.

A key's record expires with the window: past it, the key may be used again, and a retry
that late is a new write. Two writers racing one key in the very instant its old record
expires may both commit (each may delete the expired record the other just replaced).
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from sediment.core.state import TableState
from sediment.core.transactions import AddFiles, KeyedWrite, Transaction
from sediment.core.transactions.idempotency import KEY_MAX_CHARS
from sediment.errors import (
    CommitOutcomeUnknownError,
    DataError,
    IdempotencyKeyReusedError,
    ObjectNotFoundError,
    TransactionError,
)
from sediment.files.staging import Staging
from sediment.pools import shared_pool
from sediment.state.documents import read_sealed, sealed
from sediment.storage.conditional import create_once

if TYPE_CHECKING:
    from sediment.handle import TableHandle

log = logging.getLogger(__name__)

INDEX_PREFIX = "idempotency/"
"""Where a table's key records live, under its folder."""
UNKNOWN_OUTCOME_ATTEMPTS = 3
"""Commits of one keyed transaction tried while the store does not tell whether the last
one landed (each next one reads the log first, so a landed one is found, not repeated)."""
HASH_CHUNK_ROWS = 65_536
"""Rows hashed at a time: the payload's hash does not depend on how its batches are cut."""
_NOTHING = AddFiles(())
"""What a commit whose keys the log already holds commits: nothing (no log entry)."""


def check_key(table: str, key: object) -> str:
    """``key`` as an idempotency key, or DataError naming the table."""
    if not isinstance(key, str):
        raise DataError(f"table {table}: an idempotency key is a string, not "
                        f"{type(key).__name__} {str(key)[:80]}")
    if not key or len(key) > KEY_MAX_CHARS:
        raise DataError(f"table {table}: an idempotency key is a non-empty string of at most "
                        f"{KEY_MAX_CHARS} characters, not {key[:80]!r}"
                        f"{f' ({len(key)} characters)' if key else ''}")
    return key


def record_key(key: str) -> str:
    """The object (table-rooted) holding ``key``'s record."""
    digest = hashlib.sha256(key.encode()).hexdigest()
    return f"{INDEX_PREFIX}{digest[:2]}/{digest}.json"


class PayloadHash:
    """SHA-256 of a write's records as the caller gave them, independent of how they are cut
    into batches: rows are re-cut into :data:`HASH_CHUNK_ROWS`-row pieces, each copied afresh
    (``take``: no slice offsets) and hashed as Arrow IPC without schema metadata, without the
    columns null in every row of the piece (a record without a column reads as null in it).
    ``kind`` (ingest, upsert) is hashed first: the same records upserted are another payload
    than ingested.

    The records are hashed before they are fitted to the table's schema: a retry is the same
    request sent again, so it hashes the same whatever schema changes landed between its
    attempts (a column added, widened or dropped), where the fitted records would differ."""

    def __init__(self, kind: str) -> None:
        self._hash = hashlib.sha256(kind.encode() + b"\0")
        self._held: list[pa.RecordBatch] = []
        self._rows = 0
        self.rows = 0

    def update(self, batch: pa.RecordBatch) -> None:
        if not batch.num_rows:
            return
        if self._held and not batch.schema.equals(self._held[0].schema, check_metadata=False):
            # records as given may change shape between sources (files of one write): each
            # shape's run is hashed on its own, cut the same way on every attempt
            self._emit(pa.Table.from_batches(self._held))
            self._held, self._rows = [], 0
        self._held.append(batch.replace_schema_metadata(None))
        self._rows += batch.num_rows
        self.rows += batch.num_rows
        while self._rows >= HASH_CHUNK_ROWS:
            held = pa.Table.from_batches(self._held)
            self._emit(held.slice(0, HASH_CHUNK_ROWS))
            rest = held.slice(HASH_CHUNK_ROWS)
            self._held, self._rows = rest.to_batches(), rest.num_rows

    def _emit(self, table: pa.Table) -> None:
        # a column null in every row is what a record without it reads as
        table = table.select([i for i, c in enumerate(table.columns)
                              if c.null_count < table.num_rows])
        fresh = table.take(np.arange(table.num_rows)).combine_chunks()
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, fresh.schema) as w:
            w.write_table(fresh)
        self._hash.update(sink.getvalue())

    def hexdigest(self) -> str:
        if self._held:
            self._emit(pa.Table.from_batches(self._held))
            self._held, self._rows = [], 0
        return self._hash.hexdigest()


def delete_payload(selection: dict[str, Any]) -> str:
    """The hash of what a delete names (its ranges' and filter's JSON, as logged)."""
    doc = json.dumps(selection, sort_keys=True, default=str)
    return hashlib.sha256(b"delete\0" + doc.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class KeyRecord:
    """A key's record in the index (see the module)."""

    key: str
    payload: str
    since: int
    created: float
    claim: str
    version: int | None = None
    result: dict[str, Any] = field(default_factory=dict)

    def to_bytes(self) -> bytes:
        return sealed({"key": self.key, "payload": self.payload, "since": self.since,
                       "created": self.created, "claim": self.claim,
                       "version": self.version, "result": self.result})

    @classmethod
    def from_doc(cls, doc: dict[str, Any]) -> KeyRecord:
        version = doc.get("version")
        return cls(str(doc["key"]), str(doc["payload"]), int(doc["since"]),
                   float(doc["created"]), str(doc["claim"]),
                   None if version is None else int(version), dict(doc.get("result") or {}))

    def expired(self, window: float, now: float | None = None) -> bool:
        return (time.time() if now is None else now) - self.created > window

    def check(self, table: str, payload: str) -> None:
        """Refuse ``payload`` under this key when it is not the recorded one."""
        if payload != self.payload:
            raise IdempotencyKeyReusedError(
                f"table {table}: idempotency key {self.key!r} was used for a different "
                f"payload (first at version {self.version if self.version else '?'}, "
                f"recorded {time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime(self.created))} "
                f"UTC): a retry must send what the first attempt sent (its records, or a "
                f"delete's keys, ranges and filter); this call committed nothing")


class KeyIndex:
    """The key records of one table (see the module); ``window``: the table's
    ``write.idempotency_window_seconds``."""

    def __init__(self, table: TableHandle, window: float) -> None:
        self.table = table
        self.objects = table.objects
        self.window = window

    def _read(self, path: str) -> KeyRecord | None:
        try:
            doc = read_sealed(self.objects, path, f"idempotency record {path} of table "
                                                  f"{self.table.name}")
        except ObjectNotFoundError:
            return None
        return KeyRecord.from_doc(doc)

    def get(self, key: str) -> KeyRecord | None:
        """``key``'s live record (None: none, or expired)."""
        found = self._read(record_key(key))
        return None if found is None or found.expired(self.window) else found

    def claim(self, write: KeyedWrite, since: int) -> KeyRecord:
        """Create ``write``'s record (``since``: a head version read before this call), or
        return the live one already there. An expired record is deleted and replaced."""
        path = record_key(write.key)
        mine = KeyRecord(write.key, write.payload, since, time.time(), uuid.uuid4().hex)
        for _ in range(4):
            if create_once(self.objects, path, mine.to_bytes()):
                return mine
            held = self._read(path)
            if held is None:
                continue  # deleted (expired, by GC) since: create it again
            if not held.expired(self.window):
                return held
            self.objects.delete_many([path])
        raise TransactionError(f"table {self.table.name}: could not claim idempotency key "
                               f"{write.key!r}: its record keeps changing")

    def claim_all(self, writes: Sequence[KeyedWrite], since: int) -> list[KeyRecord]:
        return list(_parallel(lambda w: self.claim(w, since), writes))

    def record_all(self, records: Sequence[KeyRecord], version: int,
                   results: Sequence[dict[str, Any]]) -> None:
        """Write each record with its committed ``version`` and result: later retries are
        answered from it without reading the log. A failure is logged, not raised: the commit
        landed, and a retry finds its key in the log."""
        def put(pair: tuple[KeyRecord, dict[str, Any]]) -> None:
            rec, result = pair
            done = KeyRecord(rec.key, rec.payload, rec.since, rec.created, rec.claim,
                             version, result)
            try:
                self.objects.put(record_key(rec.key), done.to_bytes())
            except Exception as e:  # noqa: BLE001 - the commit stands; the log tells a retry
                log.warning("table %s: idempotency key %r committed at version %d, but its "
                            "record was not updated: %s", self.table.name, rec.key, version, e)

        list(_parallel(put, list(zip(records, results, strict=True))))


def _parallel(fn: Any, items: Sequence[Any]) -> Iterable[Any]:
    """``fn`` of each item, 16 at a time in a pool kept for the process (sediment.pools: a
    flush of many keys claims and records each, small object writes far faster in parallel;
    a pool made per call spent more time starting threads than writing)."""
    if len(items) <= 1:
        return [fn(i) for i in items]
    return list(shared_pool("idempotency", 16).map(fn, items))


@dataclass(frozen=True, slots=True)
class KeyedCommit:
    """What :func:`commit_keyed` did: ``committed`` True when its transaction went in at
    ``version`` (by this call, or by an earlier attempt of it whose answer was lost);
    otherwise ``found`` maps the keys the log already held to their versions, and nothing
    was committed. ``state``: the head after it."""

    committed: bool
    version: int
    state: TableState
    found: dict[str, int]


def commit_keyed(table: TableHandle, writes: Sequence[KeyedWrite], since: int,
                 transaction: Transaction, staging: Staging | None = None) -> KeyedCommit:
    """Commit ``transaction`` (which carries ``writes``, each claimed with a record whose
    ``since`` is at least ``since``) unless the log after ``since`` already holds any of
    their keys: read from each head the commit loop tries, so exactly once (see the module).
    ``staging``: the staged files the transaction brings in (committed through it). A lost
    answer is resolved by committing again: the next attempt reads the log first."""
    names = {w.key for w in writes}
    scanned = since
    found: dict[str, int] = {}
    built: list[Transaction] = []

    def source(head: TableState) -> Transaction:
        nonlocal scanned
        for v in range(scanned + 1, head.version + 1):
            keys = table.states.log.keys_at(v)
            if keys is None:
                raise TransactionError(
                    f"table {table.name}: cannot tell whether idempotency keys "
                    f"{sorted(names)[:3]} were committed: log entry {v} is gone (pruned "
                    f"past retention.seconds); nothing was committed")
            for k in keys:
                if k.key in names:
                    found.setdefault(k.key, v)
            scanned = v
        built.append(_NOTHING if found else transaction)
        return built[-1]

    for attempt in range(1, UNKNOWN_OUTCOME_ATTEMPTS + 1):
        try:
            state = (staging.commit(table.states, source) if staging is not None
                     else table.states.commit(source))
            break
        except CommitOutcomeUnknownError as e:
            if attempt == UNKNOWN_OUTCOME_ATTEMPTS:
                raise
            log.warning("table %s: %s; reading the log to tell", table.name, e)
    if built[-1] is not _NOTHING:
        return KeyedCommit(True, state.version, state, {})
    versions = set(found.values())
    if len(found) == len(names) and len(versions) == 1 \
            and _is_ours(table, versions.pop(), transaction):
        # an earlier attempt of this call landed (its answer was lost)
        return KeyedCommit(True, next(iter(found.values())), state, {})
    return KeyedCommit(False, state.version, state, found)


def _is_ours(table: TableHandle, version: int, transaction: Transaction) -> bool:
    """Whether the entry at ``version`` is ``transaction`` (by its new files, the only part
    unique to one attempt; a transaction without files is ours when it names the same keys,
    which ``commit_keyed``'s caller checked)."""
    mine = transaction.new_files()
    if not mine:
        return True
    return table.states.log.read(version).transaction.new_files() == mine


def expire_keys(table: TableHandle, window: float, store_now: float, margin: float) -> int:
    """Delete the key records written (last) more than ``window`` + ``margin`` seconds
    before ``store_now`` (by the store's clock: objects' modification times); GC's part.
    A record is rewritten once, when its write commits, so its age is at least its
    creation's: no live record is deleted. Returns how many were deleted."""
    old = [o.key for o in table.objects.list(INDEX_PREFIX)
           if store_now - o.mtime > window + margin]
    for i in range(0, len(old), 1000):
        table.objects.delete_many(old[i:i + 1000])
    return len(old)
