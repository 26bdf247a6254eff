"""The per-table transaction log: ``log/<version:020d>.json``, one transaction each."""

from __future__ import annotations

import math
import os
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from sediment.core.transactions import (
    TRANSACTION_KINDS,
    KeyedWrite,
    Transaction,
    transaction_from_json,
)
from sediment.core.transactions.idempotency import keys_from_json
from sediment.errors import CorruptMetadataError, ObjectNotFoundError, UnsupportedFormatError
from sediment.pools import shared_pool
from sediment.state.documents import check_seal, parse_sealed, sealed
from sediment.storage.base import ObjectStore
from sediment.storage.checksums import get_verified
from sediment.storage.conditional import create_once

FORMAT_VERSION = 2
"""The newest on-storage metadata format this code understands. Each document is written in
the oldest format that holds it (``BASE_FORMAT`` unless it needs more), so a document names
the oldest Sediment that can read it, and older ones refuse it by name."""

BASE_FORMAT = 1
"""The format of every document that needs nothing newer. 2 (sediment.core.deletions
.KEYS_FORMAT): a delete by many whole keys written compactly, in a log entry or a
snapshot's deletions."""

LOG_PREFIX = "log/"
_T = TypeVar("_T")
_WRITER = f"{socket.gethostname()}:{os.getpid()}"


def log_key(version: int) -> str:
    return f"{LOG_PREFIX}{version:020d}.json"


def version_of_key(key: str, prefix: str) -> int | None:
    name = key[len(prefix):]
    stem = name.split(".", 1)[0]
    return int(stem) if stem.isdigit() and len(stem) == 20 else None


@dataclass(frozen=True, slots=True)
class LogEntry:
    """One committed transaction with its version and commit time."""

    version: int
    time: float
    transaction: Transaction
    writer: str = ""


@dataclass(frozen=True, slots=True)
class HistoryEntry:
    """A row of ``table.history()``."""

    version: int
    time: float
    kind: str
    summary: str


def check_format(doc: Any, where: str) -> None:
    """CorruptMetadataError naming ``where`` unless ``doc`` is a JSON object of a format this
    code reads (UnsupportedFormatError for a newer one). Takes any parsed value, so a reader
    that parsed with ``json.loads`` gets the same error for a list or a string as for damage."""
    if not isinstance(doc, dict):
        raise CorruptMetadataError(f"{where} is not a JSON object")
    fmt = doc.get("format")
    if not isinstance(fmt, int) or isinstance(fmt, bool):
        raise CorruptMetadataError(f"{where}: missing format version")
    if fmt > FORMAT_VERSION:
        raise UnsupportedFormatError(
            f"{where}: written in format {fmt}, this Sediment understands up to "
            f"{FORMAT_VERSION}; upgrade Sediment to read it")


def _commit_time(value: Any, where: str) -> float:
    """A logged commit time: a finite JSON number (seconds since the epoch), as ``encode``
    writes it. A string, even a numeric one, is damage: replaying it would give GC and
    retention a time no writer chose."""
    if isinstance(value, bool) or not isinstance(value, int | float) or \
            not math.isfinite(value):
        raise CorruptMetadataError(f"{where} has a commit time that is not a number: "
                                   f"{value!r}")
    return float(value)


class TransactionLog:
    """Reads and conditionally writes log entries of one table."""

    def __init__(self, objects: ObjectStore, table_id: str, name: str | None = None) -> None:
        self.objects = objects
        self.table_id = table_id
        self.name = name or table_id
        """The table's name in errors (its id when none was given)."""

    def encode(self, version: int, time: float, txn: Transaction, commit_id: str,
               scheme_version: int | None = None) -> bytes:
        """The entry's bytes; ``commit_id`` (random per commit) lets a committer recognise
        its own entry when the response to its put was lost. ``scheme_version``: for a
        member of a partition scheme, the scheme version whose tree the transaction was
        validated against (co-sharding; the state records it too)."""
        doc: dict[str, Any] = {
            "format": txn.format(), "table_id": self.table_id, "version": version,
            "time": time, "writer": _WRITER, "commit_id": commit_id, "kind": txn.kind,
            "summary": txn.summary()}
        if scheme_version is not None:
            doc["scheme_version"] = scheme_version
        doc["transaction"] = txn.to_json()
        return sealed(doc, separators=(",", ":"))

    def try_append(self, version: int, time: float, txn: Transaction, commit_id: str,
                   scheme_version: int | None = None) -> bool:
        """Create the entry at ``version``: True when the slot holds this entry (written now,
        or by an earlier try whose answer was lost), False when another writer's. Raises
        WriteOutcomeUnknownError when the store cannot tell (see ``create_once``)."""
        return create_once(self.objects, log_key(version),
                           self.encode(version, time, txn, commit_id, scheme_version))

    def _where(self, version: int) -> str:
        return f"log entry {version} of table {self.name} ({log_key(version)})"

    def _document(self, version: int, data: bytes,
                  verified: bool | None | Literal["unchecked"] = "unchecked") -> dict[str, Any]:
        """The entry's checked document; ``verified``: its seal's :func:`check_seal` answer
        when the caller took it already (``_sealed``), else it is checked here."""
        where = self._where(version)
        if verified == "unchecked":
            verified = check_seal(data, where)
        doc = parse_sealed(data, where, verified)
        check_format(doc, where)
        if doc.get("version") != version:
            raise CorruptMetadataError(f"{where} claims version {doc.get('version')}")
        return doc

    def _fetch(self, version: int) -> dict[str, Any]:
        """The checked document of the entry at ``version``, read again while its checksum
        fails (then CorruptMetadataError naming the table and the key); ObjectNotFoundError
        when there is none."""
        return get_verified(self.objects, log_key(version),
                            lambda data: self._document(version, data),
                            error_cls=CorruptMetadataError, where=self._where(version))

    def _sealed(self, version: int) -> tuple[int, bytes, bool | None]:
        """The entry's bytes with their seal checked (read again while it fails), not yet
        parsed: what the log's reading threads do, leaving the parse (which holds the GIL) to
        the reader's own thread (``_fetch_all``). CorruptMetadataError when it is missing."""
        where = self._where(version)
        try:
            data, verified = get_verified(self.objects, log_key(version),
                                          lambda data: (data, check_seal(data, where)),
                                          error_cls=CorruptMetadataError, where=where)
        except ObjectNotFoundError:
            raise CorruptMetadataError(f"{where} is missing") from None
        return version, data, verified

    def _parsed(self, got: tuple[int, bytes, bool | None]) -> dict[str, Any]:
        version, data, verified = got
        return self._document(version, data, verified)

    def decode(self, version: int, data: bytes) -> LogEntry:
        """The entry in ``data``; CorruptMetadataError naming the table and the key for any
        damage (a checksum mismatch too), so every reader (queries, history, GC, the
        maintainer) fails the same, clear way instead of with a raw ValueError from deep in a
        replay."""
        return self._entry(version, self._document(version, data))

    def _entry(self, version: int, doc: dict[str, Any]) -> LogEntry:
        where = self._where(version)
        try:
            txn = transaction_from_json(str(doc["kind"]), doc["transaction"], where=where)
            when = _commit_time(doc["time"], where)
            return LogEntry(version, when, txn, str(doc.get("writer", "")))
        except KeyError as e:
            raise CorruptMetadataError(f"{where} lacks field {e}") from e
        except (TypeError, ValueError, AttributeError, IndexError) as e:
            # a transaction body of the wrong shape that its from_json did not catch
            raise CorruptMetadataError(f"{where} is malformed: {e!r}") from e

    def history_entry(self, version: int) -> HistoryEntry:
        """The entry's history row. Entries carry their summary line, so the row needs no
        transaction built (a 10,000-reference ingest decodes in ~30 ms, its row in ~3 ms);
        an entry written before summaries were logged is decoded whole. The kind, time and
        version are checked as ``decode`` checks them."""
        try:
            doc = self._fetch(version)
        except ObjectNotFoundError:
            raise CorruptMetadataError(f"{self._where(version)} is missing") from None
        return self._history_row(version, doc)

    def _history_row(self, version: int, doc: dict[str, Any]) -> HistoryEntry:
        summary, kind = doc.get("summary"), doc.get("kind")
        if not isinstance(summary, str) or not isinstance(kind, str) \
                or kind not in TRANSACTION_KINDS:
            e = self._entry(version, doc)
            return HistoryEntry(version, e.time, e.transaction.kind, e.transaction.summary())
        where = self._where(version)
        if "time" not in doc:
            raise CorruptMetadataError(f"{where} lacks field 'time'")
        return HistoryEntry(version, _commit_time(doc["time"], where), kind, summary)

    def read(self, version: int) -> LogEntry:
        try:
            doc = self._fetch(version)
        except ObjectNotFoundError:
            raise CorruptMetadataError(f"{self._where(version)} is missing") from None
        return self._entry(version, doc)

    def read_if_present(self, version: int) -> LogEntry | None:
        """The entry at ``version``, or None when there is none (not yet written, or pruned)."""
        try:
            doc = self._fetch(version)
        except ObjectNotFoundError:
            return None
        return self._entry(version, doc)

    def keys_at(self, version: int) -> tuple[KeyedWrite, ...] | None:
        """The idempotency keys the entry at ``version`` carries (empty: none), read from its
        checked document without building the transaction; None when there is no entry
        (not yet written, or pruned)."""
        try:
            doc = self._fetch(version)
        except ObjectNotFoundError:
            return None
        body = doc.get("transaction")
        try:
            return keys_from_json(body) if isinstance(body, dict) else ()
        except (TypeError, ValueError, IndexError) as e:
            raise CorruptMetadataError(f"{self._where(version)}: malformed idempotency keys: "
                                       f"{e!r}") from e

    def versions_after(self, version: int) -> list[int]:
        """Committed versions greater than ``version``, in order (one listing)."""
        out = []
        for o in self.objects.list(LOG_PREFIX, start_after=log_key(version)):
            v = version_of_key(o.key, LOG_PREFIX)
            if v is not None and v > version:
                out.append(v)
        return out

    def read_after(self, version: int, *, upto: int | None = None,
                   listed: list[int] | None = None) -> Iterator[LogEntry]:
        """Entries after ``version`` (up to ``upto``), checked to be gap-free. ``listed``: the
        caller's own ``versions_after(version)``, to save listing the log again."""
        if listed is None:
            listed = self.versions_after(version)
        for got in _fetch_all(self._sealed, self._gap_free(version, listed, upto)):
            yield self._entry(got[0], self._parsed(got))

    def _gap_free(self, version: int, listed: list[int], upto: int | None) -> list[int]:
        """The listed versions after ``version`` (up to ``upto``), checked gap-free. A
        listing with a gap is taken again once before the gap counts as damage: a listing
        carries no checksum, and a key damaged on the way (a flipped byte in the answer)
        reads as a missing version."""
        for attempt in range(2):
            versions = [v for v in listed if upto is None or v <= upto]
            try:
                self._check_gap_free(version, versions, upto)
                return versions
            except CorruptMetadataError:
                if attempt:
                    raise
                listed = self.versions_after(version)
        raise AssertionError("unreachable")

    def _check_gap_free(self, version: int, versions: list[int], upto: int | None) -> None:
        expected = version + 1
        for v in versions:
            if v != expected:
                raise CorruptMetadataError(
                    f"log of table {self.name} has a gap: version {expected} is missing")
            expected += 1
        if upto is not None and expected <= upto:  # the last wanted entries are missing
            raise CorruptMetadataError(
                f"log of table {self.name} has a gap: version {expected} is missing")

    def history_after(self, version: int, *, listed: list[int]) -> list[HistoryEntry]:
        """History rows of the entries after ``version``; ``listed`` is the caller's
        ``versions_after(version)``, checked gap-free as ``read_after`` checks it."""
        return [self._history_row(got[0], self._parsed(got))
                for got in _fetch_all(self._sealed, self._gap_free(version, listed, None))]


FETCH_THREADS = 16
"""Log entries read at once (object stores answer many small reads in parallel far faster
than in turn)."""


def _fetch_all(read: Callable[[int], _T], versions: list[int]) -> Iterator[_T]:
    """``read`` of each version, in order, up to :data:`FETCH_THREADS` at a time, on the
    process's log pool (sediment.pools: no threads started per call). ``read`` should do I/O
    and little else: work holding the GIL goes faster in the caller's thread, in turn."""
    if not versions:
        return
    if len(versions) == 1:
        yield read(versions[0])
        return
    yield from shared_pool("log", FETCH_THREADS).map(read, versions)
