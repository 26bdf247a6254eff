"""Settling the batcher's abandoned jobs (``sediment.ingest.batcher``, step 4 of its docs).

A job whose runner is presumed dead (unfinished, not updated for ``batcher.job_timeout_seconds``)
is settled by one run at a time, and by any later run if that one fails or dies:

- **A marker with an owner and an expiry.** The run that settles a job first creates
  ``jobs/<job>.recovering`` (generation 0), or ``jobs/<job>.recovering.<n>`` once every earlier
  generation has expired, with put-if-absent: one run wins each generation. A marker holds for
  the job timeout; a run that fails lets its marker go at once (it rewrites its own generation,
  which nobody else writes, as expired), so the next run tries again; a run that dies leaves it
  to expire. A marker written before markers expired (no ``expires``) holds for the job timeout
  from its ``time``.
- **Reading, never guessing.** A failure to read (a transient S3 error, a damaged object) leaves
  the job as it was: nothing is re-queued or deleted on a guess. The run reports it in its
  ``errors`` (and the job record keeps it for ``batcher status``) and the next run tries again.
- **The pin.** Every attempt first renews the job's pin (``batcher_store``), so the log after
  its base version and its staged files outlive any prune or GC until it is settled. When the
  log after the base version is gone all the same (the pin lapsed, or the job predates pins),
  whether the job committed cannot be told: the job is reported, never settled, and its files
  stay pinned (at the table's latest version, which loads) for a person to decide.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sediment.errors import CorruptMetadataError, SedimentError, VersionExpiredError
from sediment.handle import handle_of
from sediment.ingest.batcher_store import (
    CLAIMED,
    JOBS,
    TERMINAL,
    check_decision,
    committed_version,
    decision,
    decision_key,
    encode_json,
    fail_requests,
    job_key,
    job_pins,
    jobs,
    list_docs,
    pin_job,
    put_json,
    read_json,
    release,
    requeue,
    save_job,
    unpin_job,
)
from sediment.ingest.standard import delete_staged
from sediment.settings import settings_of
from sediment.storage.conditional import create_once

if TYPE_CHECKING:
    from sediment.handle import TableHandle, TableLike


@dataclass(frozen=True, slots=True)
class JobOutcome:
    """What one batcher job did (or, for a job being recovered, what became of it)."""

    job_id: str
    route: str
    state: str  # committed | failed | requeued | aborted | empty | unknown | unsettled
    files: int
    bytes: int
    rows: int = 0
    version: int | None = None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class _Marker:
    key: str
    doc: dict[str, Any]


def _marker_key(job_id: str, generation: int) -> str:
    base = f"{JOBS}{job_id}.recovering"
    return base if generation == 0 else f"{base}.{generation}"


def _markers(table: TableHandle, job_id: str) -> list[tuple[int, str]]:
    """(generation, key) of the job's recovery markers, oldest first."""
    base = f"{JOBS}{job_id}.recovering"
    out = []
    for o in table.objects.list(base):
        rest = o.key[len(base):]
        if rest == "":
            out.append((0, o.key))
        elif rest[:1] == "." and rest[1:].isdigit():
            out.append((int(rest[1:]), o.key))
    return sorted(out)


def _expires(doc: Mapping[str, Any] | None, hold: float) -> float:
    """When a marker stops holding (0: at once, for one that vanished or does not parse)."""
    if doc is None:
        return 0.0
    try:
        return float(doc["expires"]) if "expires" in doc else float(doc.get("time", 0)) + hold
    except (TypeError, ValueError):
        return 0.0


def _take(table: TableHandle, job_id: str, now: float, hold: float) -> _Marker | None:
    """This run's marker for settling the job, or None while another run's holds."""
    found = _markers(table, job_id)
    generation = 0
    if found:
        generation, key = found[-1]
        if _expires(read_json(table, key), hold) > now:
            return None  # another run is settling it
        generation += 1
    doc = {"owner": uuid.uuid4().hex, "host": f"{socket.gethostname()}:{os.getpid()}",
           "time": now, "expires": now + hold}
    key = _marker_key(job_id, generation)
    if not create_once(table.objects, key, encode_json(doc)):
        return None  # another run took this generation first
    return _Marker(key, doc)


def _still_ours(table: TableHandle, job_id: str, marker: _Marker) -> bool:
    """Whether no later run has taken the job over (this run outlived its marker)."""
    found = _markers(table, job_id)
    return bool(found) and found[-1][1] == marker.key


def _let_go(table: TableHandle, marker: _Marker, error: str) -> None:
    """Mark this run's marker expired, so the next run tries at once (best effort: failing,
    it expires on its own)."""
    with contextlib.suppress(SedimentError):
        put_json(table, marker.key, {**marker.doc, "expires": 0, "error": error})


def _note(table: TableHandle, job: dict[str, Any], error: str, now: float) -> None:
    """Keep the failed attempt in the job record (for ``batcher status``), without touching
    ``updated``: the job stays due for the next run."""
    job.update(recovery_error=error, recovery_attempts=int(job.get("recovery_attempts") or 0) + 1,
               recovery_time=now)
    with contextlib.suppress(SedimentError):
        put_json(table, job_key(job["id"]), job)


def _settle(table: TableHandle, job: dict[str, Any], marker: _Marker) -> JobOutcome | None:
    """Settle one abandoned job (None: another run took it over meanwhile)."""
    job_id, base = job["id"], int(job["base_version"])
    route, files = str(job.get("route", "ingest")), list(job.get("files") or [])
    reqs = job.get("requests") or []
    n, size = len(reqs), sum(int(r["size"]) for r in reqs)
    # hold the log after the base version, and the files, while reading (a job found
    # unsettlable before stays pinned where it was, at a version that loads)
    pin_job(table, job, job.get("pinned_at"))
    decided = decision(table, job_id)
    if decided is None:
        # the job has not decided: deciding "abort" now means it can never commit
        decided = "abort" if create_once(table.objects, decision_key(job_id), b"abort",
                                         verify=check_decision) \
            else decision(table, job_id)
    if decided == "commit":
        version = committed_version(table, base, files)
        if version is not None:  # the runner died after its commit
            save_job(table, job, state="committed", version=version)
            release(table, job_id)
            unpin_job(table, job_id)
            return JobOutcome(job_id, route, "committed", n, size, version=version)
    # aborted, or decided to commit and never did (a committer that decided finishes or dies
    # within the job timeout): the files go, the requests go back to the queue
    if not _still_ours(table, job_id, marker):
        return None
    delete_staged(table, files)
    save_job(table, job, state="aborted", error="runner presumed dead; requests re-queued")
    requeue(table, job_id)
    unpin_job(table, job_id)
    return JobOutcome(job_id, route, "requeued", n, size)


def _unsettled(table: TableHandle, job: dict[str, Any], marker: _Marker, e: SedimentError,
               now: float) -> JobOutcome:
    """Leave the job as it is after a failed attempt: recorded, reported, marker let go."""
    job_id, base = job["id"], int(job["base_version"])
    files = list(job.get("files") or [])
    reqs = job.get("requests") or []
    if isinstance(e, CorruptMetadataError | VersionExpiredError):  # the log after base is gone
        error = (f"batcher job {job_id} of table {table.name} cannot be settled: {e}; whether "
                 f"its staged files {files[:3]} were committed after version {base} cannot be "
                 "told without that log, so its requests are neither re-queued nor given up "
                 "and its files are kept (pinned); check the table for the rows of "
                 f"{[r.get('path') for r in reqs[:3]]}")
        with contextlib.suppress(SedimentError):  # keep its files, not a version gone anyway
            job["pinned_at"] = table.states.head().version
            pin_job(table, job, job["pinned_at"])
    else:
        error = _retry_error(table, job_id, e)
    _note(table, job, error, now)
    _let_go(table, marker, error)
    return _reported(job, error)


def _retry_error(table: TableHandle, job_id: str, e: SedimentError) -> str:
    return (f"batcher job {job_id} of table {table.name} could not be settled in this run "
            f"({type(e).__name__}: {e}); a later run tries again, its files are kept")


def _reported(job: Mapping[str, Any], error: str) -> JobOutcome:
    """The outcome of a job left unsettled (reported in the run's ``errors``)."""
    reqs = job.get("requests") or []
    return JobOutcome(str(job["id"]), str(job.get("route", "ingest")), "unsettled", len(reqs),
                      sum(int(r.get("size", 0)) for r in reqs), error=error)


def _tidy(table: TableHandle, job: dict[str, Any], claimed_by: set[Any]) -> None:
    """Finish the clean-up of a finished job that a crash interrupted."""
    job_id, state = job["id"], job.get("state")
    if job_id in claimed_by:  # a crash between recording the outcome and clean-up
        if state == "committed":
            release(table, job_id)
        elif state == "failed" and str(job.get("error") or "").startswith("DataError"):
            fail_requests(table, job_id, str(job["error"]))
        else:
            requeue(table, job_id)


def recover(table: TableLike, *, now: float | None = None) -> list[JobOutcome]:
    """Settle jobs whose runner is presumed dead (see the module docs), finish the clean-up of
    finished jobs that a crash interrupted, and let go the pins of settled jobs. A job that
    cannot be settled now is an outcome of state ``unsettled`` naming why."""
    table = handle_of(table)
    now = time.time() if now is None else now
    timeout = settings_of(table.states.head(), table.name).batcher_job_timeout_seconds
    claimed_by = {doc.get("job") for doc in list_docs(table, CLAIMED)}
    out = []
    all_jobs = jobs(table)
    for job in all_jobs:
        job_id = job["id"]
        if job.get("state") in TERMINAL:
            try:
                _tidy(table, job, claimed_by)
            except SedimentError as e:
                out.append(JobOutcome(job_id, str(job.get("route", "ingest")), "unsettled", 0, 0,
                                      error=f"batcher job {job_id} of table {table.name}: its "
                                      f"clean-up failed ({type(e).__name__}: {e}); a later "
                                      "run tries again"))
            continue
        if now - float(job.get("updated", job.get("created", 0))) < timeout:
            continue  # its runner may still be working
        try:
            marker = _take(table, job_id, now, timeout)
        except SedimentError as e:  # the store never said whether this run holds it
            out.append(_reported(job, _retry_error(table, job_id, e)))
            continue
        if marker is None:
            continue  # another run settles it
        try:
            outcome = _settle(table, job, marker)
        except SedimentError as e:
            outcome = _unsettled(table, job, marker, e, now)
        if outcome is not None:
            out.append(outcome)
    settled = {j["id"] for j in all_jobs if j.get("state") in TERMINAL}
    with contextlib.suppress(SedimentError):  # leftovers of a failed unpin: next run again
        for job_id in job_pins(table):
            if job_id in settled:
                unpin_job(table, job_id)
    return out
