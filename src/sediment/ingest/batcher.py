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
    batcher/jobs/<job>.recovering[.<n>]  the marker of the run settling an abandoned job
    tags/batcher-<job>.json       the job's pin: its base version and staged files

Request ids start with the submit time in microseconds, so listing order is submit order.

Exactly once. Every request is ingested by at most one committed transaction, and a request is
only given up by an explicit, recorded failure:

1. *Claim.* A job first writes its record and pins its base version (``table.pin``: prune keeps
   the log after it, see 4), then claims each request by creating
   ``claimed/<id>`` with put-if-absent (one job wins), checks that ``requests/<id>`` still
   exists (else the request was finished by another job, which deleted it when claiming: the
   claim is released), and deletes ``requests/<id>``. A request is pending, or claimed by
   exactly one job; a claimed request is never planned again.
2. *Stage, record, decide.* The job writes its data files (not yet committed), records their
   names and the table version it started from in its record, pins the files with its base
   version (GC keeps them while the job is unsettled, lease or no lease), and only then creates
   ``jobs/<job>.decision`` = ``commit`` with put-if-absent. If that object already says
   ``abort`` (a recovering run gave the job up), the job deletes its files and stops.
3. *Commit* the files in one AddFiles transaction, record the version in the job record,
   delete the claims and let the pin go. A crash after the commit leaves claims behind but
   never re-queues them.
4. *Recover* (``batcher_recovery``). ``run`` first looks at unfinished jobs older than
   ``batcher.job_timeout_seconds`` (their runner is presumed dead). One run at a time holds
   the job's recovery marker (an owner and an expiry: a run that fails or dies does not stop
   later ones) and settles it: if it can create the decision ``abort``, the job can no longer
   commit, so its staged
   files are deleted and its requests go back to ``requests/``. If the decision is already
   ``commit``, the log after the job's base version is searched for an AddFiles of its staged
   files: found, the job is recorded as committed at that version (the crash was after the
   commit); not found, the commit never happened (a committer that decided to commit finishes
   or dies within the timeout), so the requests are re-queued. Log entries name the files they
   add, so the answer holds even after compaction and GC removed those files; the pin keeps
   those entries from prune until the job is settled. A job a run cannot settle (a read that
   fails, a log pruned all the same) stays as it is, files kept, and is reported in the run's
   ``errors`` and by ``status``; the next run tries again.
5. A job that fails on bad input (DataError: unreadable file, wrong schema, null key) moves its
   requests to ``failed/`` with the error (``status`` lists them; submit them again once fixed).
   Any other failure re-queues the requests, after checking the log as in 4 in case the commit
   happened although it reported an error.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow.fs as pafs

from sediment.errors import DataError, SedimentError
from sediment.handle import handle_of
from sediment.ingest.batch_planning import RUNNER_OF_ROUTE as RUNNER_OF_ROUTE
from sediment.ingest.batch_planning import Batch as Batch
from sediment.ingest.batch_planning import batcher_limits
from sediment.ingest.batch_planning import plan_batches as plan_batches
from sediment.ingest.batch_planning import route_for as route_for
from sediment.ingest.batcher_recovery import JobOutcome as JobOutcome
from sediment.ingest.batcher_recovery import recover as recover
from sediment.ingest.batcher_store import CLAIMED as CLAIMED
from sediment.ingest.batcher_store import (
    FAILED,
    JOBS,
    REQUESTS,
    TERMINAL,
    Request,
    check_decision,
    pin_job,
    unpin_job,
)
from sediment.ingest.batcher_store import PREFIX as PREFIX
from sediment.ingest.batcher_store import committed_version as committed_version
from sediment.ingest.batcher_store import decision as _decision
from sediment.ingest.batcher_store import encode_json as _encode_json
from sediment.ingest.batcher_store import fail_requests as _fail_requests
from sediment.ingest.batcher_store import jobs as _jobs
from sediment.ingest.batcher_store import list_docs as _list_docs
from sediment.ingest.batcher_store import put_json as _put_json
from sediment.ingest.batcher_store import release as _release
from sediment.ingest.batcher_store import requeue as _requeue
from sediment.ingest.batcher_store import save_job as _save_job
from sediment.ingest.sources import expand_paths, file_format
from sediment.ingest.standard import StagedFiles, ingest_files
from sediment.runners import load_runner
from sediment.settings import settings_of
from sediment.state.store import definitely_not_committed
from sediment.storage.conditional import create_once

if TYPE_CHECKING:
    from sediment.handle import TableHandle, TableLike
    from sediment.ingest.standard import IngestResult

SparkSession = Any
"""A ``pyspark.sql.SparkSession`` (only sediment.spark imports pyspark)."""

KEEP_FINISHED_JOBS = 200
"""Finished job records kept for ``status`` (older ones are deleted by ``run``)."""




def ingest_batch(table: TableHandle, paths: Sequence[str], *,
                 before_commit: Callable[[StagedFiles], None] | None = None,
                 spill_dir: str | None = None, spark: SparkSession | None = None
                 ) -> IngestResult:
    """The local batcher runner: standard ingest of one job's files in one transaction
    (``spark`` is the Spark runner's, unused here)."""
    return ingest_files(table, paths, before_commit=before_commit, spill_dir=spill_dir)


# ---- submitting and listing ------------------------------------------------------------------
def _request_id(submitted: float) -> str:
    return f"{int(submitted * 1_000_000):020d}-{uuid.uuid4().hex[:12]}"


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


def pending(table: TableLike) -> list[Request]:
    """Requests waiting for a job, oldest first."""
    table = handle_of(table)
    return sorted((Request.from_json(d)
                   for d in _list_docs(table, REQUESTS, settled=lambda d: True)),
                  key=lambda r: (r.submitted, r.id))


def failed_requests(table: TableLike) -> list[dict[str, Any]]:
    """Requests whose job failed on bad input, with the error."""
    table = handle_of(table)
    return sorted(_list_docs(table, FAILED), key=lambda d: (d.get("submitted", 0), d["id"]))


def jobs(table: TableLike) -> list[dict[str, Any]]:
    """Every recorded batcher job, oldest first."""
    return _jobs(handle_of(table))


# ---- running ---------------------------------------------------------------------------------
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
                "waiting": self.waiting, "errors": list(self.errors)}


def _outcome_json(o: JobOutcome) -> dict[str, Any]:
    return {"job_id": o.job_id, "route": o.route, "state": o.state, "files": o.files,
            "bytes": o.bytes, "rows": o.rows, "version": o.version, "error": o.error}


class _Aborted(Exception):
    """A recovering run gave this job up before it could decide to commit."""


def _claim(table: TableHandle, job_id: str, requests: Sequence[Request]) -> list[Request]:
    got = []
    for r in requests:
        claim = f"{CLAIMED}{r.id}.json"
        if not create_once(table.objects, claim, _encode_json({**r.to_json(), "job": job_id})):
            continue  # another job has it
        if not table.objects.exists(f"{REQUESTS}{r.id}.json"):
            table.objects.delete_many([claim])  # already finished by another job
            continue
        table.objects.delete_many([f"{REQUESTS}{r.id}.json"])
        got.append(r)
    return got


def _run_job(table: TableHandle, batch: Batch, route: str, spark: SparkSession | None,
             spill_dir: str | None = None) -> JobOutcome:
    job_id = f"{int(time.time() * 1000):015d}-{uuid.uuid4().hex[:12]}"
    job: dict[str, Any] = {
        "id": job_id, "route": route, "state": "claiming", "reason": batch.reason,
        "base_version": table.version, "requests": [r.to_json() for r in batch.requests],
        "files": [], "version": None, "rows": 0, "error": None, "created": time.time()}
    _save_job(table, job)
    pin_job(table, job)  # until settled: prune keeps the log after the base version
    claimed = _claim(table, job_id, batch.requests)
    size = sum(r.size for r in claimed)
    if not claimed:
        _save_job(table, job, state="empty", requests=[])
        unpin_job(table, job_id)
        return JobOutcome(job_id, route, "empty", 0, 0)
    _save_job(table, job, state="claimed", requests=[r.to_json() for r in claimed])

    def before_commit(staged: StagedFiles) -> None:
        _save_job(table, job, state="staged", files=sorted(w.filename for w in staged.written))
        pin_job(table, job)  # and GC the staged files, whatever becomes of the lease
        if not create_once(table.objects, f"{JOBS}{job_id}.decision", b"commit",
                           verify=check_decision) and \
                _decision(table, job_id) != "commit":
            raise _Aborted(job_id)

    paths = [r.path for r in claimed]
    try:
        import_batch = load_runner("batcher", RUNNER_OF_ROUTE[route], table=table.name)
        result = import_batch(table, paths, before_commit=before_commit, spill_dir=spill_dir,
                              spark=spark)
    except _Aborted:
        _save_job(table, job, state="aborted", error="given up by a recovering run")
        unpin_job(table, job_id)
        return JobOutcome(job_id, route, "aborted", len(claimed), size)
    except DataError as e:  # bad input: retrying cannot help
        error = f"{type(e).__name__}: {e}"
        _save_job(table, job, state="failed", error=error)
        _fail_requests(table, job_id, error)
        unpin_job(table, job_id)
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
            unpin_job(table, job_id)
            return JobOutcome(job_id, route, "committed", len(claimed), size, version=version)
        if job["files"] and not definitely_not_committed(e):
            # The commit may still have landed: requeueing could ingest the files twice.
            # The job stays open, and pinned; ``recover`` settles it by reading once it times
            # out.
            _save_job(table, job, state="unknown", error=error)
            return JobOutcome(job_id, route, "unknown", len(claimed), size, error=error)
        _save_job(table, job, state="failed", error=error)
        _requeue(table, job_id)
        unpin_job(table, job_id)
        return JobOutcome(job_id, route, "requeued", len(claimed), size, error=error)
    _save_job(table, job, state="committed", version=result.version, rows=result.rows)
    _release(table, job_id)
    unpin_job(table, job_id)
    return JobOutcome(job_id, route, "committed", len(claimed), size, result.rows,
                      result.version)


def _prune_jobs(table: TableHandle) -> None:
    finished = [j for j in jobs(table) if j.get("state") in TERMINAL]
    old = {j["id"] for j in (finished[:-KEEP_FINISHED_JOBS]
                             if len(finished) > KEEP_FINISHED_JOBS else [])}
    if old:  # its record, decision and recovery markers (any generation)
        table.objects.delete_many([o.key for o in table.objects.list(JOBS)
                                   if o.key[len(JOBS):].split(".", 1)[0] in old])


@dataclass(frozen=True, slots=True)
class DueBatches:
    """What a run finds to do: the abandoned jobs it settled, the batches due now with their
    routes, how many requests wait for their group to fill or age, and when (``time.time()``)
    that group comes of age if nothing else releases it first (None: nothing waits): the
    continuous maintainer looks again at that moment, not a polling period later."""

    recovered: tuple[JobOutcome, ...]
    batches: tuple[tuple[Batch, str], ...]
    waiting: int
    next_due: float | None = None
    max_age: float = 0.0
    """The table's ``batcher.max_age_seconds``: a request seen within half of it is planned
    before it comes of age (the lane looks at an idle queue less often, up to that)."""


def due(table: TableLike, *, now: float | None = None, flush: bool = False,
        spark_available: bool = False) -> DueBatches:
    """The first half of ``run``: settle abandoned jobs, prune old job records, and plan the
    batches due now (each with its route). The continuous maintainer calls it, then runs the
    batches with :func:`run_batch` on its own threads, several at once."""
    table = handle_of(table)
    now = time.time() if now is None else now
    recovered = recover(table, now=now)
    _prune_jobs(table)
    props = settings_of(table.states.head(), table.name)
    requests = pending(table)
    batches = plan_batches(requests, props, now, flush=flush)
    planned = {r.id for b in batches for r in b.requests}
    waiting = [r.submitted for r in requests if r.id not in planned]
    max_age = batcher_limits(props)[2]
    return DueBatches(tuple(recovered),
                      tuple((b, route_for(b, props, spark_available)) for b in batches),
                      len(waiting), min(waiting) + max_age if waiting else None, max_age)


def run_batch(table: TableLike, batch: Batch, route: str, spark: SparkSession | None = None,
              *, spill_dir: str | None = None) -> JobOutcome:
    """Run one planned batch as one job (claim, stage, decide, commit: see the module
    docstring); jobs of one table may run side by side, each claiming its own requests."""
    return _run_job(handle_of(table), batch, route, spark, spill_dir)


def run(table: TableLike, spark: SparkSession | None = None, *, now: float | None = None,
        flush: bool = False, spill_dir: str | None = None) -> RunResult:
    """Settle abandoned jobs, then make and run every job that is due (see module docs).

    With ``spark``, jobs of at least ``batcher.bulk_import_min_bytes`` go to Spark bulk import;
    the rest (or all, without Spark) to standard ingest, spilling to ``spill_dir`` (as
    ``Table.ingest``: else ``$SEDIMENT_SPILL_DIR``, else the system temp folder). ``flush``: a
    group that is neither full nor old enough runs too (``sediment batcher run --now``).
    """
    table = handle_of(table)
    d = due(table, now=now, flush=flush, spark_available=spark is not None)
    outcomes = [_run_job(table, b, route, spark, spill_dir) for b, route in d.batches]
    errors = [o.error for o in outcomes if o.error]
    errors += [o.error for o in d.recovered if o.state == "unsettled" and o.error]
    return RunResult(tuple(outcomes), d.recovered, d.waiting, tuple(errors))


def status(table: TableLike, *, now: float | None = None) -> dict[str, Any]:
    """Pending requests, the jobs a run would make now, unfinished and recent jobs, failures."""
    table = handle_of(table)
    now = time.time() if now is None else now
    props = settings_of(table.states.head(), table.name)
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
        "unsettled": [_job_summary(j) for j in all_jobs
                      if j.get("state") not in TERMINAL and j.get("recovery_error")],
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
            "created": job.get("created"), "updated": job.get("updated"),
            "recovery_error": job.get("recovery_error"),
            "recovery_attempts": job.get("recovery_attempts", 0)}
