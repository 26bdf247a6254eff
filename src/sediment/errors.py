"""Sediment's exceptions: one root, so callers can catch everything Sediment raises.

Backend errors (OS errors, botocore errors, Arrow errors) are translated at the edge where they
happen into one of these, with a message naming the table, field, file or row concerned.

    SedimentError
    ├── StorageError                 an object store failed (I/O, permissions, network)
    │   ├── ObjectNotFoundError      a key that should exist does not
    │   ├── AccessDeniedError        the store refused for want of permission (never retried)
    │   ├── WriteRefusedError        a write that cannot land (local disk: a file on the path,
    │   │                            a full or read-only disk; never retried)
    │   └── WriteOutcomeUnknownError a conditional write the store never confirmed or denied
    ├── CatalogError
    │   ├── StoreNotFoundError       no Sediment store at a URI (open with create=True to make one)
    │   ├── InvalidTableNameError    empty, separators, traversal, bad characters
    │   ├── TableExistsError
    │   ├── TableNotFoundError
    │   ├── SchemeExistsError        create_scheme for a name that is taken
    │   ├── SchemeNotFoundError      no partition scheme of that name
    │   └── SchemeInUseError         drop_scheme while member tables use the scheme
    ├── SchemaError                  bad schema definition (no row key, duplicate names, ...)
    │   └── SchemeMismatchError      a table's row keys differ from its partition scheme's
    ├── PropertyError                unknown property or invalid value
    │   └── IteratorModuleError      a python iterator whose module is untrusted, cannot be
    │                                imported, or names no RecordIterator subclass
    ├── TransactionError
    │   ├── TransactionInvalidError  a transaction does not validate against the state it follows
    │   ├── CommitConflictError      retries exhausted while racing other writers
    │   ├── CommitOutcomeUnknownError  the store never said whether the entry landed
    │   │                            (also a WriteOutcomeUnknownError)
    │   └── IdempotencyKeyReusedError  a write's idempotency key was used for another payload
    ├── CorruptionError              stored bytes that fail their checksum or cannot be decoded
    │   ├── CorruptMetadataError     a log entry, snapshot, tag, catalog entry or manifest
    │   │   └── UnsupportedFormatError  written by a newer format version
    │   └── CorruptDataError         a data file or sidecar (the table and the object named)
    ├── DataError                    input records that do not fit the schema (field, row named)
    ├── QueryError                   an invalid query (bad range, unknown column, bad version)
    │   ├── TagError                 a tag operation that cannot be done
    │   │   ├── InvalidTagNameError  a name that cannot be a tag (separators, all digits, ...)
    │   │   ├── TagExistsError       tag for a name that is taken
    │   │   └── TagNotFoundError     no tag of that name
    │   ├── VersionExpiredError      a version past retention.seconds: its files or log are gone
    │   ├── NotCoShardedError        a co-located join of tables that share no partition scheme
    │   ├── WhereError               ``--where`` text that does not parse, or too long or deep
    │   ├── FilterError              a filter outside the wire form, or too big or deep for it
    │   └── BadRequestError          a malformed request to the Flight service (sediment serve)
    ├── JobError                     a job (compaction, dump, ...) failed
    ├── MissingDependencyError       an optional dependency (an extra such as [spark]) is missing
    └── ServiceError                 the Flight service refused a call
        ├── AuthenticationError      no bearer token, or a wrong one
        ├── ReadOnlyError            a put or mutating action to a --read-only server
        ├── PermissionDeniedError    a call its token's scope does not allow (right, tables)
        ├── TokensFileError          a --tokens-file that cannot be read or has a bad line
        └── ServerBusyError          at --max-concurrency calls or put bytes, shutting down
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class SedimentError(Exception):
    """Root of every error Sediment raises on purpose."""

    committed: bool | None = None
    """What this error says of the commit it stopped: False when that commit surely wrote
    nothing (the writer may delete the files it staged for it at once), None when it cannot
    tell (the files are kept: GC's orphan pass judges them once a read tells). Set by the
    classes whose meaning is "nothing was committed" (see :func:`definitely_not_committed`)."""


class StorageError(SedimentError):
    """An object store operation failed."""


class ObjectNotFoundError(StorageError):
    """The object at a key does not exist."""


class AccessDeniedError(StorageError):
    """The store refused the request for want of permission (S3's 403 ``AccessDenied``): an
    answer, not a failure to answer, so it is never retried (a read-only role learns at once
    that it cannot write)."""


class WriteRefusedError(StorageError):
    """The store could not make the object, for a reason that settles it: nothing was written
    (local disk: a folder on the path that is a file, a full or read-only disk, a name too
    long). An answer, not a failure to answer: a conditional create raises it at once rather
    than trying again for an outcome it already knows."""


class WriteOutcomeUnknownError(StorageError):
    """A conditional write was sent, but the store never said (even when asked again) whether
    it landed. Nothing may be assumed either way; reading later tells."""


class CatalogError(SedimentError):
    """A problem with the store's catalog of tables."""


class StoreNotFoundError(CatalogError):
    """No Sediment store (no ``store.json``) at the URI opened without ``create=True``: a
    mistyped URI never makes a new, empty store."""


class InvalidTableNameError(CatalogError):
    """A table name that could escape its folder or is otherwise unusable."""


class TableExistsError(CatalogError):
    """create_table for a name that is taken."""


class TableNotFoundError(CatalogError):
    """No table of that name in the store (or no longer: a commit to a dropped table is
    refused before it writes anything)."""

    committed = False


class SchemeExistsError(CatalogError):
    """create_scheme for a name that is taken."""


class SchemeNotFoundError(CatalogError):
    """No partition scheme of that name in the store."""


class SchemeInUseError(CatalogError):
    """drop_scheme while tables still use the scheme: dropping it would leave them without
    the partition tree they follow."""


class SchemaError(SedimentError):
    """A schema definition that Sediment cannot accept."""


class SchemeMismatchError(SchemaError):
    """A table joining a partition scheme whose row keys differ from the scheme's (in number
    or type): co-located records need one key space."""


class PropertyError(SedimentError):
    """An unknown table/store property or an invalid value for one."""


class IteratorModuleError(PropertyError):
    """A ``{"type": "python", "class": "module:Name"}`` iterator this process will not load:
    its module is not trusted here (``--trust-iterator-module``,
    ``$SEDIMENT_TRUSTED_ITERATOR_MODULES``), cannot be imported, or has no
    ``RecordIterator`` subclass of that name. The message names the module."""


class TransactionError(SedimentError):
    """A transaction could not be committed."""


class TransactionInvalidError(TransactionError):
    """The transaction does not validate against the state it would follow (nothing was
    written: a transaction is validated before its entry is)."""

    committed = False


class CommitConflictError(TransactionError):
    """Too many other writers won the race for the next version (every attempt lost, so
    nothing was written)."""

    committed = False


class CommitOutcomeUnknownError(TransactionError, WriteOutcomeUnknownError):
    """The store did not answer whether a log entry was written, even when asked again: the
    transaction may have committed. Staged files are kept; reading the table tells."""

    committed = None


class IdempotencyKeyReusedError(TransactionError):
    """A keyed write (``idempotency_key=``) whose key the table recorded, within
    ``write.idempotency_window_seconds``, for a different payload: not a retry of that write
    but another write under a used key. Nothing was committed; the message names the table
    and the key."""

    committed = False


class CorruptionError(SedimentError):
    """Stored bytes that fail their checksum (after a re-read, so not a transient fault of the
    network) or cannot be decoded: damage to what Sediment wrote, never bad input (so not a
    DataError). The subclasses say whether metadata or data was damaged."""


class CorruptMetadataError(CorruptionError):
    """A log entry, snapshot, tag, catalog entry or manifest could not be read or parsed, or
    failed its checksum."""


class UnsupportedFormatError(CorruptMetadataError):
    """Metadata written by a newer, unknown format version."""


class CorruptDataError(CorruptionError):
    """A data file or one of its sidecars (sample, key filter) whose bytes fail their checksum
    even when read again. The message names the table and the object; ``table`` and ``key``
    hold them too when the raiser knows them (the Flight client rebuilds the error from its
    message alone, so they may be None there)."""

    def __init__(self, message: str, *, table: str | None = None,
                 key: str | None = None) -> None:
        super().__init__(message)
        self.table = table
        self.key = key

    def __reduce__(self) -> tuple[object, ...]:
        # keyword attributes survive pickling (Spark executors send errors to the driver)
        return _corrupt_data_error, (str(self), self.table, self.key)


class DataError(SedimentError):
    """Input records that do not match the table's schema."""


class QueryError(SedimentError):
    """A query that cannot be answered as asked."""


class TagError(QueryError):
    """A tag operation that cannot be done (a QueryError, as tag errors were before)."""


class InvalidTagNameError(TagError):
    """A name that cannot be a tag: separators, traversal, all digits (a number means a
    version)."""


class TagExistsError(TagError):
    """``tag`` for a name the table already uses."""


class TagNotFoundError(TagError):
    """The table has no tag of that name."""


class VersionExpiredError(QueryError):
    """A version older than the table's retention (``retention.seconds``) that can no longer be
    read: garbage collection deleted its data files, or pruning its log entries. The message
    names the table, the version and the retention setting with its value."""


class NotCoShardedError(QueryError):
    """A co-located join (``sd.join``, ``sediment.spark.co_join``) of tables that are not
    members of one partition scheme: their leaves do not align, so it cannot run leaf by leaf;
    an ordinary join (DuckDB, pandas, Spark) of their query results can."""


class JobError(SedimentError):
    """A background job failed."""


class MissingDependencyError(SedimentError):
    """A feature needs an optional dependency that is not installed; the message says which
    extra to install (:func:`install_hint`)."""


def install_hint(extra: str) -> str:
    """How to install the optional ``extra`` (``spark``, ``polars``, ``dashboard``...), for a
    message: from a checkout first, since the distribution is not on the package index yet
    (README "Install"), and the index's name for when it is."""
    return (f"pip install '.[{extra}]' in a checkout of Sediment "
            f"(pip install 'sediment-lsm[{extra}]' once it is released)")


class ServiceError(SedimentError):
    """A refusal of the Flight service itself (``sediment serve``) rather than of the table:
    see the subclasses."""


class AuthenticationError(ServiceError):
    """No bearer token, or a wrong one, for a server that requires one."""


class ReadOnlyError(ServiceError):
    """A put or a mutating action sent to a server started with ``--read-only``."""


class PermissionDeniedError(ServiceError):
    """A call its token's scope does not allow: a right below the call's (read < write <
    admin) or a table none of the token's patterns match (``--tokens-file``)."""


class TokensFileError(ServiceError):
    """A ``--tokens-file`` that cannot be read, or a line of it that is no token entry (the
    file and the line named)."""


class ServerBusyError(ServiceError):
    """The server is at ``--max-concurrency`` calls, holds as many put bytes as it may while
    they wait for group commits (``--group-commit-max-bytes``), or is shutting down: retry
    later. ``retry_after``: seconds the server suggests waiting (None: no hint)."""

    def __init__(self, message: str = "", *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class WhereError(QueryError):
    """A ``--where`` string that does not parse, or one too long or too deeply nested to
    evaluate safely (the message names the position and the limit)."""


class FilterError(QueryError):
    """A filter that cannot travel in the wire form (a function it does not carry, named), or
    a wire-form filter that is malformed, too big or too deeply nested. Raised before any
    Arrow code sees it: expression bytes from elsewhere are never deserialised."""


class BadRequestError(QueryError):
    """A malformed descriptor, ticket or action body sent to the service, or an argument that
    cannot travel to it."""


def _corrupt_data_error(message: str, table: str | None, key: str | None) -> CorruptDataError:
    return CorruptDataError(message, table=table, key=key)


def did_you_mean(name: object, choices: Iterable[str]) -> str:
    """The end of an error message for a mistyped ``name``: ``" (did you mean 'x'?)"`` with the
    closest of ``choices`` (as the CLI's commands and options suggest theirs), or ``""`` when
    none is close."""
    if not isinstance(name, str):
        return ""
    close = difflib.get_close_matches(name, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def definitely_not_committed(error: BaseException) -> bool:
    """True when ``error``, raised by a commit, says that commit surely wrote nothing
    (``SedimentError.committed is False``: refused as invalid, lost every race, the table
    dropped), so the files staged for it may go at once. Anything else (a storage error, an
    interrupt, an unknown outcome, an exception Sediment did not raise) may have committed."""
    return isinstance(error, SedimentError) and error.committed is False
