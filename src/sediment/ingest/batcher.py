"""The ingest batcher (Sleeper's): file-ingest requests accumulate and are grouped into jobs.

``submit(table, paths)`` records one request per file (globs expanded): its path, size in bytes
and submit time. ``run(table, spark=None)`` groups the pending requests into jobs by count
(``batcher.max_files``) and size (``batcher.max_bytes``), oldest first; a group that is not full
waits until its oldest request is ``batcher.max_age_seconds`` old. Each job goes to Spark bulk
import when it holds at least ``batcher.bulk_import_min_bytes`` and a Spark session is given,
else to standard ingest; either way one job is one AddFiles transaction. Planning
(:func:`plan_batches`) is a pure function of the requests, the properties and the time.

Objects, under the table's folder (``table.objects``)::

    batcher/requests/<id>.json    a pending request {id, path, size, submitted}
    batcher/claimed/<id>.json     a request taken by a job (the request plus "job")
    batcher/failed/<id>.json      a request whose job failed on bad input (plus "error")
    batcher/jobs/<job>.json       a job: route, state, requests, base version, staged files,
                                  committed version, error
    batcher/jobs/<job>.decision   "commit" or "abort", created once (put-if-absent)
    batcher/jobs/<job>.recovering created once by the run that settles an abandoned job

Request ids start with the submit time in microseconds, so listing order is submit order.

Exactly once. Every request is ingested by at most one committed transaction, and a request is
only given up by an explicit, recorded failure:

1. *Claim.* A job first writes its record, then claims each request by creating
   ``claimed/<id>`` with put-if-absent (one job wins), checks that ``requests/<id>`` still
   exists (else the request was finished by another job, which deleted it when claiming: the
   claim is released), and deletes ``requests/<id>``. A request is pending, or claimed by
   exactly one job; a claimed request is never planned again.
2. *Stage, record, decide.* The job writes its data files (not yet committed), records their
   names and the table version it started from in its record, and only then creates
   ``jobs/<job>.decision`` = ``commit`` with put-if-absent. If that object already says
   ``abort`` (a recovering run gave the job up), the job deletes its files and stops.
3. *Commit* the files in one AddFiles transaction, record the version in the job record, and
   delete the claims. A crash after the commit leaves claims behind but never re-queues them.
4. *Recover.* ``run`` first looks at unfinished jobs older than ``batcher.job_timeout_seconds``
   (their runner is presumed dead). One run per job wins ``jobs/<job>.recovering`` and settles
   it: if it can create the decision ``abort``, the job can no longer commit, so its staged
   files are deleted and its requests go back to ``requests/``. If the decision is already
   ``commit``, the log after the job's base version is searched for an AddFiles of its staged
   files: found, the job is recorded as committed at that version (the crash was after the
   commit); not found, the commit never happened (a committer that decided to commit finishes
   or dies within the timeout), so the requests are re-queued. Log entries name the files they
   add, so the answer holds even after compaction and GC removed those files.
5. A job that fails on bad input (DataError: unreadable file, wrong schema, null key) moves its
   requests to ``failed/`` with the error (``status`` lists them; submit them again once fixed).
   Any other failure re-queues the requests, after checking the log as in 4 in case the commit
   happened although it reported an error.
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow.fs as pafs

from sediment.core.transactions import AddFiles
from sediment.errors import DataError, ObjectNotFoundError, SedimentError
from sediment.handle import handle_of
from sediment.ingest.sources import expand_paths, file_format
from sediment.ingest.standard import StagedFiles, delete_staged, ingest_files
from sediment.properties import defaults
from sediment.state.store import definitely_not_committed
from sediment.storage.conditional import create_once

if TYPE_CHECKING:
    from sediment.handle import TableHandle, TableLike

SparkSession = Any
"""A ``pyspark.sql.SparkSession`` (only sediment.spark imports pyspark)."""

PREFIX = "batcher/"
REQUESTS = PREFIX + "requests/"
CLAIMED = PREFIX + "claimed/"
FAILED = PREFIX + "failed/"
JOBS = PREFIX + "jobs/"
KEEP_FINISHED_JOBS = 200
"""Finished job records kept for ``status`` (older ones are deleted by ``run``)."""

TERMINAL = ("committed", "failed", "aborted", "empty")


# ---- requests and planning (pure) ------------------------------------------------------------
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


@dataclass(frozen=True, slots=True)
class Batch:
    """Requests that make one job, and why it is released now: ``files`` (count reached),
    ``bytes`` (size reached), ``age`` (the oldest request waited long enough) or ``flush``
    (released at once on request: ``run(flush=True)``)."""

    requests: tuple[Request, ...]
    reason: str

    @property
    def files(self) -> int:
        return len(self.requests)

    @property
    def bytes(self) -> int:
        return sum(r.size for r in self.requests)

    @property
    def oldest(self) -> float:
        return min(r.submitted for r in self.requests)


def _settings(properties: Mapping[str, Any]) -> tuple[int, int, float]:
    props = {**defaults(), **properties}
    return (int(props["batcher.max_files"]), int(props["batcher.max_bytes"]),
            float(props["batcher.max_age_seconds"]))


def plan_batches(requests: Sequence[Request], properties: Mapping[str, Any],
                 now: float, *, flush: bool = False) -> list[Batch]:
    """Group requests, oldest first, into jobs of at most ``batcher.max_files`` files and
    ``batcher.max_bytes`` bytes (a larger file is a job alone). Full groups are released; the
    last, partial group only once its oldest request is ``batcher.max_age_seconds`` old, or at
    once with ``flush`` (reason ``flush``)."""
    max_files, max_bytes, max_age = _settings(properties)
    ordered = sorted(requests, key=lambda r: (r.submitted, r.id))
    out: list[Batch] = []
    group: list[Request] = []
    size = 0
    for r in ordered:
        if group and (len(group) >= max_files or size + r.size > max_bytes):
            out.append(Batch(tuple(group), "files" if len(group) >= max_files else "bytes"))
            group, size = [], 0
        group.append(r)
        size += r.size
    if group:
        if len(group) >= max_files:
            out.append(Batch(tuple(group), "files"))
        elif size >= max_bytes:
            out.append(Batch(tuple(group), "bytes"))
        elif now - group[0].submitted >= max_age:
            out.append(Batch(tuple(group), "age"))
        elif flush:
            out.append(Batch(tuple(group), "flush"))
    return out


def route_for(batch: Batch, properties: Mapping[str, Any], spark_available: bool) -> str:
    """``bulk_import`` for a big enough job when Spark is available, else ``ingest``."""
    threshold = int({**defaults(), **properties}["batcher.bulk_import_min_bytes"])
    return "bulk_import" if spark_available and batch.bytes >= threshold else "ingest"


# ---- submitting and listing ------------------------------------------------------------------
def _request_id(submitted: float) -> str:
    return f"{int(submitted * 1_000_000):020d}-{uuid.uuid4().hex[:12]}"


def _read_json(table: TableHandle, key: str) -> dict[str, Any] | None:
    try:
        doc = json.loads(table.objects.get(key))
    except ObjectNotFoundError:
        return None
    return doc if isinstance(doc, dict) else None


def _put_json(table: TableHandle, key: str, doc: Mapping[str, Any]) -> None:
    table.objects.put(key, json.dumps(doc, separators=(",", ":")).encode())


def submit(table: TableLike, paths: Sequence[str] | str, *, now: float | None = None
           ) -> list[Request]:
    """Record a request for every file named by ``paths`` (local or S3; globs expanded).

    Missing files, patterns matching nothing and unknown formats raise DataError before any
    request is recorded.
    """
    table = handle_of(table)
    if isinstance(paths, str):
        paths = [paths]
    files = expand_paths(list(paths), table.objects)
    if not files:
        raise DataError(f"batcher for table {table.name}: no input files given")
    found: list[tuple[str, int]] = []
    for fs, path in files:
        file_format(path)  # DataError for a format Sediment cannot read
        uri = f"s3://{path}" if isinstance(fs, pafs.S3FileSystem) else path
        found.append((uri, int(fs.get_file_info(path).size or 0)))
    submitted = time.time() if now is None else now
    out = []
    for uri, size in found:
        r = Request(_request_id(submitted), uri, size, submitted)
        _put_json(table, f"{REQUESTS}{r.id}.json", r.to_json())
        out.append(r)
    return out


def _list_docs(table: TableHandle, prefix: str) -> Iterator[dict[str, Any]]:
    for o in table.objects.list(prefix):
        if o.key.endswith(".json"):
            doc = _read_json(table, o.key)
            if doc is not None:
                yield doc


def pending(table: TableLike) -> list[Request]:
    """Requests waiting for a job, oldest first."""
    table = handle_of(table)
    return sorted((Request.from_json(d) for d in _list_docs(table, REQUESTS)),
                  key=lambda r: (r.submitted, r.id))


def failed_requests(table: TableLike) -> list[dict[str, Any]]:
    """Requests whose job failed on bad input, with the error."""
    table = handle_of(table)
    return sorted(_list_docs(table, FAILED), key=lambda d: (d.get("submitted", 0), d["id"]))


def jobs(table: TableLike) -> list[dict[str, Any]]:
    """Every recorded batcher job, oldest first."""
    table = handle_of(table)
    return sorted((d for d in _list_docs(table, JOBS) if "id" in d),
                  key=lambda d: (d.get("created", 0), d["id"]))


# ---- running ---------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class JobOutcome:
    """What one batcher job did."""

    job_id: str
    route: str
    state: str  # committed | failed | requeued | aborted | empty | unknown
    files: int
    bytes: int
    rows: int = 0
    version: int | None = None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class RunResult:
    """One ``run``: the jobs made now, the abandoned jobs settled, requests left waiting."""

    jobs: tuple[JobOutcome, ...] = ()
    recovered: tuple[JobOutcome, ...] = ()
    waiting: int = 0
    errors: tuple[str, ...] = field(default=())

    def to_json(self) -> dict[str, Any]:
        return {"jobs": [_outcome_json(o) for o in self.jobs],
                "recovered": [_outcome_json(o) for o in self.recovered],
                "waiting": self.waiting}


def _outcome_json(o: JobOutcome) -> dict[str, Any]:
    return {"job_id": o.job_id, "route": o.route, "state": o.state, "files": o.files,
            "bytes": o.bytes, "rows": o.rows, "version": o.version, "error": o.error}


class _Aborted(Exception):
    """A recovering run gave this job up before it could decide to commit."""


def _job_key(job_id: str) -> str:
    return f"{JOBS}{job_id}.json"


def _decision(table: TableHandle, job_id: str) -> str | None:
    try:
        return table.objects.get(f"{JOBS}{job_id}.decision").decode()
    except ObjectNotFoundError:
        return None


def _save_job(table: TableHandle, job: dict[str, Any], **changes: Any) -> None:
    job.update(changes, updated=time.time())
    _put_json(table, _job_key(job["id"]), job)


def _claim(table: TableHandle, job_id: str, requests: Sequence[Request]) -> list[Request]:
    got = []
    for r in requests:
        claim = f"{CLAIMED}{r.id}.json"
        if not create_once(table.objects, claim,
                           json.dumps({**r.to_json(), "job": job_id}).encode()):
            continue  # another job has it
        if not table.objects.exists(f"{REQUESTS}{r.id}.json"):
            table.objects.delete_many([claim])  # already finished by another job
            continue
        table.objects.delete_many([f"{REQUESTS}{r.id}.json"])
        got.append(r)
    return got


def _claims_of(table: TableHandle, job_id: str) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for o in table.objects.list(CLAIMED):
        doc = _read_json(table, o.key)
        if doc is not None and doc.get("job") == job_id:
            out.append((o.key, doc))
    return out


def _requeue(table: TableHandle, job_id: str) -> None:
    for key, doc in _claims_of(table, job_id):
        r = Request.from_json(doc)
        _put_json(table, f"{REQUESTS}{r.id}.json", r.to_json())
        table.objects.delete_many([key])


def _release(table: TableHandle, job_id: str) -> None:
    table.objects.delete_many([key for key, _ in _claims_of(table, job_id)])


def _fail_requests(table: TableHandle, job_id: str, error: str) -> None:
    for key, doc in _claims_of(table, job_id):
        _put_json(table, f"{FAILED}{doc['id']}.json", {**doc, "error": error})
        table.objects.delete_many([key])


def committed_version(table: TableHandle, base_version: int, files: Sequence[str]) -> int | None:
    """The version of the AddFiles after ``base_version`` that added any of ``files``."""
    wanted = set(files)
    if not wanted:
        return None
    for entry in table.states.log.read_after(base_version):
        txn = entry.transaction
        if isinstance(txn, AddFiles) and any(r.filename in wanted for r in txn.references):
            return entry.version
    return None


def _run_job(table: TableHandle, batch: Batch, route: str, spark: SparkSession | None,
             spill_dir: str | None = None) -> JobOutcome:
    job_id = f"{int(time.time() * 1000):015d}-{uuid.uuid4().hex[:12]}"
    job: dict[str, Any] = {
        "id": job_id, "route": route, "state": "claiming", "reason": batch.reason,
        "base_version": table.version, "requests": [r.to_json() for r in batch.requests],
        "files": [], "version": None, "rows": 0, "error": None, "created": time.time()}
    _save_job(table, job)
    claimed = _claim(table, job_id, batch.requests)
    size = sum(r.size for r in claimed)
    if not claimed:
        _save_job(table, job, state="empty", requests=[])
        return JobOutcome(job_id, route, "empty", 0, 0)
    _save_job(table, job, state="claimed", requests=[r.to_json() for r in claimed])

    def before_commit(staged: StagedFiles) -> None:
        _save_job(table, job, state="staged", files=sorted(w.filename for w in staged.written))
        if not create_once(table.objects, f"{JOBS}{job_id}.decision", b"commit") and \
                _decision(table, job_id) != "commit":
            raise _Aborted(job_id)

    paths = [r.path for r in claimed]
    try:
        if route == "bulk_import":
            from sediment.spark import bulk_import

            assert spark is not None
            result = bulk_import(spark, table, paths, before_commit=before_commit)
        else:
            result = ingest_files(table, paths, before_commit=before_commit,
                                  spill_dir=spill_dir)
    except _Aborted:
        _save_job(table, job, state="aborted", error="given up by a recovering run")
        return JobOutcome(job_id, route, "aborted", len(claimed), size)
    except DataError as e:  # bad input: retrying cannot help
        error = f"{type(e).__name__}: {e}"
        _save_job(table, job, state="failed", error=error)
        _fail_requests(table, job_id, error)
        return JobOutcome(job_id, route, "failed", len(claimed), size, error=error)
    except Exception as e:
        error = f"{type(e).__name__}: {e}"
        version = None
        if job["files"] and _decision(table, job_id) == "commit":
            with contextlib.suppress(SedimentError):
                version = committed_version(table, int(job["base_version"]), job["files"])
        if version is not None:  # the commit happened although it reported an error
            _save_job(table, job, state="committed", version=version)
            _release(table, job_id)
            return JobOutcome(job_id, route, "committed", len(claimed), size, version=version)
        if job["files"] and not definitely_not_committed(e):
            # The commit may still have landed: requeueing could ingest the files twice.
            # The job stays open; ``recover`` settles it by reading once it times out.
            _save_job(table, job, state="unknown", error=error)
            return JobOutcome(job_id, route, "unknown", len(claimed), size, error=error)
        _save_job(table, job, state="failed", error=error)
        _requeue(table, job_id)
        return JobOutcome(job_id, route, "requeued", len(claimed), size, error=error)
    _save_job(table, job, state="committed", version=result.version, rows=result.rows)
    _release(table, job_id)
    return JobOutcome(job_id, route, "committed", len(claimed), size, result.rows,
                      result.version)


def recover(table: TableLike, *, now: float | None = None) -> list[JobOutcome]:
    """Settle jobs whose runner is presumed dead (see the module docs), and finish the
    clean-up of finished jobs that a crash interrupted."""
    table = handle_of(table)
    now = time.time() if now is None else now
    timeout = float(table.properties["batcher.job_timeout_seconds"])
    claimed_by = {doc.get("job") for doc in _list_docs(table, CLAIMED)}
    out = []
    for job in jobs(table):
        job_id, state = job["id"], job.get("state")
        if state in TERMINAL:
            if job_id in claimed_by:  # a crash between recording the outcome and clean-up
                if state == "committed":
                    _release(table, job_id)
                elif state == "failed" and str(job.get("error") or "").startswith("DataError"):
                    _fail_requests(table, job_id, str(job["error"]))
                else:
                    _requeue(table, job_id)
            continue
        if now - float(job.get("updated", job.get("created", 0))) < timeout:
            continue  # its runner may still be working
        if not create_once(table.objects, f"{JOBS}{job_id}.recovering",
                           json.dumps({"time": now, "id": uuid.uuid4().hex}).encode()):
            continue  # another run settles it
        route, files = str(job.get("route", "ingest")), list(job.get("files") or [])
        n, size = len(job.get("requests") or []), sum(int(r["size"]) for r in
                                                      job.get("requests") or [])
        decided = create_once(table.objects, f"{JOBS}{job_id}.decision", b"abort")
        if not decided and _decision(table, job_id) == "commit":
            version = committed_version(table, int(job["base_version"]), files)
            if version is not None:
                _save_job(table, job, state="committed", version=version)
                _release(table, job_id)
                out.append(JobOutcome(job_id, route, "committed", n, size, version=version))
                continue
        delete_staged(table, files)
        _save_job(table, job, state="aborted", error="runner presumed dead; requests re-queued")
        _requeue(table, job_id)
        out.append(JobOutcome(job_id, route, "requeued", n, size))
    return out


def _prune_jobs(table: TableHandle) -> None:
    finished = [j for j in jobs(table) if j.get("state") in TERMINAL]
    old = finished[:-KEEP_FINISHED_JOBS] if len(finished) > KEEP_FINISHED_JOBS else []
    table.objects.delete_many([f"{JOBS}{j['id']}{suffix}" for j in old
                               for suffix in (".json", ".decision", ".recovering")])


def run(table: TableLike, spark: SparkSession | None = None, *, now: float | None = None,
        flush: bool = False, spill_dir: str | None = None) -> RunResult:
    """Settle abandoned jobs, then make and run every job that is due (see module docs).

    With ``spark``, jobs of at least ``batcher.bulk_import_min_bytes`` go to Spark bulk import;
    the rest (or all, without Spark) to standard ingest, spilling to ``spill_dir`` (as
    ``Table.ingest``: else ``$SEDIMENT_SPILL_DIR``, else the system temp folder). ``flush``: a
    group that is neither full nor old enough runs too (``sediment batcher run --now``).
    """
    table = handle_of(table)
    now = time.time() if now is None else now
    recovered = recover(table, now=now)
    props = table.properties
    requests = pending(table)
    batches = plan_batches(requests, props, now, flush=flush)
    outcomes = [_run_job(table, b, route_for(b, props, spark is not None), spark, spill_dir)
                for b in batches]
    _prune_jobs(table)
    waiting = len(requests) - sum(b.files for b in batches)
    return RunResult(tuple(outcomes), tuple(recovered), waiting,
                     tuple(o.error for o in outcomes if o.error))


def status(table: TableLike, *, now: float | None = None) -> dict[str, Any]:
    """Pending requests, the jobs a run would make now, unfinished and recent jobs, failures."""
    table = handle_of(table)
    now = time.time() if now is None else now
    props = table.properties
    requests = pending(table)
    batches = plan_batches(requests, props, now)
    all_jobs = jobs(table)
    released = sum(b.files for b in batches)
    return {
        "table": table.name,
        "pending": {"requests": len(requests), "bytes": sum(r.size for r in requests),
                    "oldest_age_seconds": (now - requests[0].submitted) if requests else None},
        "ready": [{"files": b.files, "bytes": b.bytes, "reason": b.reason,
                   "route_with_spark": route_for(b, props, True)} for b in batches],
        "waiting": len(requests) - released,
        "running": [_job_summary(j) for j in all_jobs if j.get("state") not in TERMINAL],
        "recent": [_job_summary(j) for j in all_jobs if j.get("state") in TERMINAL][-10:],
        "failed_requests": [{"id": d["id"], "path": d["path"], "error": d.get("error")}
                            for d in failed_requests(table)],
        "settings": {k: props[k] for k in ("batcher.max_files", "batcher.max_bytes",
                                           "batcher.max_age_seconds",
                                           "batcher.bulk_import_min_bytes")},
    }


def _job_summary(job: Mapping[str, Any]) -> dict[str, Any]:
    reqs = job.get("requests") or []
    return {"id": job["id"], "route": job.get("route"), "state": job.get("state"),
            "files": len(reqs), "bytes": sum(int(r.get("size", 0)) for r in reqs),
            "version": job.get("version"), "rows": job.get("rows"), "error": job.get("error"),
            "created": job.get("created"), "updated": job.get("updated")}
