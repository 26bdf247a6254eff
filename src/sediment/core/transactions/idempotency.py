"""Idempotency keys carried by a commit: which keyed writes a transaction is.

A keyed write (``Table.ingest(..., idempotency_key=K)``, ``upsert``, ``delete``, a buffered
writer's ``write``) commits a transaction that carries a :class:`KeyedWrite` per key: the key,
a hash of its payload (its records after validation, or what a delete names) and its rows.
One transaction may carry several (the buffered writer, group commit in the server). The keys
are written to the log entry with the transaction, so that "the write is in the table" and
"the log records its key" are one fact; they change nothing in the state (``apply`` ignores
them): the head never holds keys. What finds a key again is an index of its own
(``sediment.ingest.idempotency``), read only when a key is presented, and the log entries
after its claim, read only to resolve a claim whose writer did not record its version.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

KEY_MAX_CHARS = 512
"""The longest idempotency key taken (it is written into every log entry that carries it)."""


@dataclass(frozen=True, slots=True)
class KeyedWrite:
    """One keyed write inside a commit: its key, its payload's hash, and its rows (0 for a
    delete)."""

    key: str
    payload: str
    rows: int = 0

    def to_json(self) -> list[Any]:
        return [self.key, self.payload, self.rows]

    @classmethod
    def from_json(cls, doc: Sequence[Any]) -> KeyedWrite:
        return cls(str(doc[0]), str(doc[1]), int(doc[2]) if len(doc) > 2 else 0)


def keys_to_json(doc: dict[str, Any], keys: Sequence[KeyedWrite]) -> dict[str, Any]:
    """``doc`` with an ``idempotency`` list when ``keys`` has any (omitted otherwise: entries
    without keys stay as they always were)."""
    if keys:
        doc["idempotency"] = [k.to_json() for k in keys]
    return doc


def keys_from_json(doc: Mapping[str, Any]) -> tuple[KeyedWrite, ...]:
    """The keyed writes a logged transaction body carries (inverse of :func:`keys_to_json`)."""
    return tuple(KeyedWrite.from_json(k) for k in doc.get("idempotency") or ())
