"""The ingest batcher's objects (``sediment.ingest.batcher``): requests, claims, job records,
decisions, and the pin an unsettled job holds.

Every function takes the table's handle and reads or writes the objects the batcher's module
docs describe, under ``batcher/`` in the table's folder, and the job's pin ``batcher-<job>``
(``sediment.state.tags``): from its record until it is settled, a job pins the version it
started from (so prune keeps the log after it, where its commit would be) and, once staged, its
staged files (so GC keeps them though no lease names them once its runner died). Without the
pin, a pruned log and a collected file could not tell "committed, compacted and collected" from
"never committed".
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sediment.core.transactions import AddFiles
from sediment.errors import CorruptMetadataError, ObjectNotFoundError, SedimentError
from sediment.state.documents import read_sealed, sealed
from sediment.state.tags import TAG_PREFIX, create_pin, delete_pin
from sediment.storage.checksums import ChecksumMismatch, get_verified

if TYPE_CHECKING:
    from sediment.handle import TableHandle

PREFIX = "batcher/"
REQUESTS = PREFIX + "requests/"
CLAIMED = PREFIX + "claimed/"
FAILED = PREFIX + "failed/"
JOBS = PREFIX + "jobs/"
TERMINAL = ("committed", "failed", "aborted", "empty")
JOB_PIN_SECONDS = 7 * 86400.0
"""How long a job's pin lives unless renewed: its runner finishes within the job timeout, and
every run that tries to settle the job after that renews it, so it lapses only when no batcher
run has come for a week."""


@dataclass(frozen=True, slots=True)
class Request:
    """One file to ingest: its path (local or ``s3://``), size in bytes and submit time."""

    id: str
    path: str
    size: int
    submitted: float

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "path": self.path, "size": self.size,
                "submitted": self.submitted}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Request:
        return cls(str(doc["id"]), str(doc["path"]), int(doc["size"]), float(doc["submitted"]))


def read_json(table: TableHandle, key: str) -> dict[str, Any] | None:
    """The JSON object at ``key``, its checksum checked (read again while it fails); None
    when there is none. CorruptMetadataError naming the table and the key when it is damaged
    or not a JSON object."""
    try:
        return read_sealed(table.objects, key, f"batcher object {key} of table {table.name}")
    except ObjectNotFoundError:
        return None


def encode_json(doc: Mapping[str, Any]) -> bytes:
    """The sealed bytes of a batcher document (``put_json``, and ``create_once`` sites)."""
    return sealed(doc, separators=(",", ":"))


def put_json(table: TableHandle, key: str, doc: Mapping[str, Any]) -> None:
    table.objects.put(key, encode_json(doc))


_SETTLED: dict[tuple[str, str], dict[str, Any]] = {}
"""(the table's folder, key) -> a batcher document that never changes once written: a request
(its id fixes its content; a requeued request is written again the same) or the record of a
finished job. The continuous maintainer looks at every table's queue twice a second; reading
only the documents it has not seen keeps an idle table's look to its listings, where it read
every record kept (up to ``KEEP_FINISHED_JOBS`` finished jobs, twice a look: hundreds of GETs a
second per table on S3). Claims and unfinished jobs change (a claim is deleted and made again
for another job), so they are read every time."""
_SETTLED_MAX = 50_000
"""Documents kept at most (the cache starts again empty past it)."""


def list_docs(table: TableHandle, prefix: str, *,
              settled: Callable[[dict[str, Any]], bool] | None = None
              ) -> Iterator[dict[str, Any]]:
    """The documents under ``prefix``; those ``settled`` says never change again are read once
    per process (a copy of each is yielded)."""
    folder = table.objects.uri
    for o in table.objects.list(prefix):
        if not o.key.endswith(".json"):
            continue
        doc = _SETTLED.get((folder, o.key))
        if doc is None:
            doc = read_json(table, o.key)
            if doc is None:
                continue
            if settled is not None and settled(doc):
                if len(_SETTLED) >= _SETTLED_MAX:
                    _SETTLED.clear()
                _SETTLED[(folder, o.key)] = doc
        yield dict(doc)


def jobs(table: TableHandle) -> list[dict[str, Any]]:
    """Every recorded batcher job, oldest first."""
    return sorted((d for d in list_docs(table, JOBS,
                                        settled=lambda d: d.get("state") in TERMINAL)
                   if "id" in d),
                  key=lambda d: (d.get("created", 0), d["id"]))


def job_key(job_id: str) -> str:
    return f"{JOBS}{job_id}.json"


def decision_key(job_id: str) -> str:
    return f"{JOBS}{job_id}.decision"


DECISIONS = (b"commit", b"abort")
"""What a decision object holds: a closed set, so anything else is damage (and no single
flipped byte turns one word into the other)."""


def check_decision(data: bytes) -> str:
    """The decision in ``data``; ChecksumMismatch for anything but ``commit`` or ``abort``."""
    if data not in DECISIONS:
        raise ChecksumMismatch(f"decision {data[:16]!r} is neither commit nor abort",
                               f"{data[:16]!r} is neither commit nor abort")
    return data.decode()


def decision(table: TableHandle, job_id: str) -> str | None:
    """``commit``, ``abort``, or None when the job has not decided (StorageError when the store
    cannot say; CorruptMetadataError naming the table and the key when the object holds
    anything else, even when read again)."""
    key = decision_key(job_id)
    try:
        return get_verified(table.objects, key, check_decision, error_cls=CorruptMetadataError,
                            where=f"batcher decision {key} of table {table.name}")
    except ObjectNotFoundError:
        return None


def save_job(table: TableHandle, job: dict[str, Any], **changes: Any) -> None:
    """Record ``changes`` in the job, as its runner's progress (``updated`` is now)."""
    job.update(changes, updated=time.time())
    put_json(table, job_key(job["id"]), job)


def claims_of(table: TableHandle, job_id: str) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for o in table.objects.list(CLAIMED):
        doc = read_json(table, o.key)
        if doc is not None and doc.get("job") == job_id:
            out.append((o.key, doc))
    return out


def requeue(table: TableHandle, job_id: str) -> None:
    """Give the job's claimed requests back to the queue."""
    for key, doc in claims_of(table, job_id):
        r = Request.from_json(doc)
        put_json(table, f"{REQUESTS}{r.id}.json", r.to_json())
        table.objects.delete_many([key])


def release(table: TableHandle, job_id: str) -> None:
    """Forget the job's claims (its requests are finished)."""
    table.objects.delete_many([key for key, _ in claims_of(table, job_id)])


def fail_requests(table: TableHandle, job_id: str, error: str) -> None:
    for key, doc in claims_of(table, job_id):
        put_json(table, f"{FAILED}{doc['id']}.json", {**doc, "error": error})
        table.objects.delete_many([key])


def committed_version(table: TableHandle, base_version: int, files: Sequence[str]) -> int | None:
    """The version of the AddFiles after ``base_version`` that added any of ``files``.
    CorruptMetadataError when the log after ``base_version`` is no longer whole."""
    wanted = set(files)
    if not wanted:
        return None
    for entry in table.states.log.read_after(base_version):
        txn = entry.transaction
        if isinstance(txn, AddFiles) and any(r.filename in wanted for r in txn.references):
            return entry.version
    return None


# ---- the job's pin -----------------------------------------------------------------------------
def pin_name(job_id: str) -> str:
    return f"batcher-{job_id}"


def pin_job(table: TableHandle, job: Mapping[str, Any], version: int | None = None) -> None:
    """Pin (or renew the pin of) the job's base version, or ``version``, and its staged files."""
    create_pin(table.states, pin_name(str(job["id"])),
               int(job["base_version"]) if version is None else version, JOB_PIN_SECONDS,
               job.get("files") or [])


def unpin_job(table: TableHandle, job_id: str) -> None:
    """Let a settled job's pin go; a failure leaves it to the next run's clean-up (or to its
    expiry), never fails the job."""
    with contextlib.suppress(SedimentError):
        delete_pin(table.states, pin_name(job_id))


def job_pins(table: TableHandle) -> list[str]:
    """The ids of the jobs that hold a pin (from the pins' keys, no object read)."""
    prefix = f"{TAG_PREFIX}{pin_name('')}"
    return [o.key[len(prefix):-len(".json")] for o in table.objects.list(prefix)
            if o.key.endswith(".json")]
