"""The checks of ``sediment doctor``: each one looks at one table for one kind of trouble
and says what to do. Every check is cheap (listings, small documents, the head's state):
no data file is read. A check is a function of a :class:`Look` (the table, its head,
the time); :data:`CHECKS` lists them in the order a report shows their findings.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sediment.compaction.runner import stale_jobs
from sediment.core.crowding import files_per_leaf
from sediment.core.state import TableState
from sediment.core.units import human_seconds
from sediment.doctor.findings import Finding
from sediment.dump.dump import LOCK_TIMEOUT_SECONDS
from sediment.dump.lock import LOCK_KEY, read_lock
from sediment.errors import CorruptionError, SedimentError
from sediment.handle import TableHandle
from sediment.ingest.batcher_store import TERMINAL
from sediment.ingest.batcher_store import jobs as batcher_jobs
from sediment.maintenance.gc import stale_leases, survey
from sediment.maintenance.verify_metadata import (
    LOG_ENTRY,
    SNAPSHOT,
    SNAPSHOT_OBJECT,
    TAG,
    Tally,
    check_log,
    check_snapshots,
    check_tags,
)
from sediment.settings import TableSettings, settings_of

CROWDING_FACTOR = 2
"""Without ``ingest.stall_files``, a leaf is over its bound when a read of it merges more
than this many compaction batches' worth of files: a maintainer that keeps up holds every
leaf near one batch (``compaction.batch_size``)."""


@dataclass(frozen=True, slots=True)
class Look:
    """What every check of one table sees: the table, its head (None when it does not load:
    the metadata check says why) and its settings, and the time of the look."""

    table: TableHandle
    head: TableState | None
    settings: TableSettings | None
    now: float

    def finding(self, check: str, problem: str, action: str, *,
                attention: bool = True) -> Finding:
        return Finding(self.table.name, check, f"table {self.table.name}: {problem}", action,
                       attention)


Check = Callable[[Look], list[Finding]]


def look_at(table: TableHandle, now: float | None = None) -> Look:
    """The head of ``table`` read for the checks (None when it does not load)."""
    try:
        head = table.states.head()
    except CorruptionError:
        return Look(table, None, None, time.time() if now is None else now)
    return Look(table, head, settings_of(head, table.name), time.time() if now is None else now)


def metadata(look: Look) -> list[Finding]:
    """``verify``'s metadata checks (tags, every retained log entry, every snapshot and its
    objects): a gap in the log, and any of them unreadable."""
    t, tally = look.table, Tally()
    check_tags(tally, t.states)
    check_log(tally, t.states, 0 if look.head is None else look.head.version)
    check_snapshots(tally, t.states)
    verify = f"run `sediment verify {t.name}` for the versions and tags it breaks"
    out = []
    for f in tally.found:
        if f.kind == LOG_ENTRY and f.problem == "missing":
            out.append(look.finding(
                "log_gap", f"log entry {f.key} is missing (a gap in the log)",
                f"{verify}; reads of later versions need a snapshot past the gap, else restore "
                f"the table from a dump (`sediment load`)"))
        elif f.kind == LOG_ENTRY:
            out.append(look.finding("unreadable_log_entry", f"log entry {f.key}: {f.problem}",
                                    f"{verify}; restore the object from a backup or reload "
                                    f"the table from a dump"))
        elif f.kind == TAG:
            name = f.tags[0] if f.tags else f.key
            out.append(look.finding(
                "unreadable_tag", f"tag {name} ({f.key}): {f.problem}",
                f"GC keeps every unreferenced file while it is unreadable: delete it "
                f"(`sediment tag {t.name} {name} --delete`) and tag the version again"))
        elif f.kind in (SNAPSHOT, SNAPSHOT_OBJECT):
            out.append(look.finding(
                "unreadable_snapshot", f"{f.kind} {f.key}: {f.problem}",
                f"readers fall back to an older snapshot and replay the log; {verify}"))
        else:
            out.append(look.finding("damaged_metadata", f"{f.kind} {f.key}: {f.problem}",
                                    verify))
    if look.head is None and not out:
        out.append(look.finding("unloadable", "its head does not load", verify))
    return out


def leases(look: Look) -> list[Finding]:
    """Pending-file leases whose writers stopped renewing them."""
    dead = stale_leases(look.table, look.now)
    if not dead:
        return []
    return [look.finding(
        "stale_lease", f"{len(dead)} pending-file lease(s) not renewed past the lease "
        f"timeout (their writers died or stalled; first: {dead[0]})",
        "run `sediment gc` (or keep `sediment maintain --loop` running): it records them "
        "expired and collects the files they held")]


def garbage(look: Look) -> list[Finding]:
    """Orphans and unreferenced files past their time: GC has not run since they were due
    (judged on the head: not when it does not load)."""
    if look.head is None:
        return []
    plan = survey(look.table, now=look.now)
    out = []
    if plan.orphans_ready:
        out.append(look.finding(
            "orphans_due", f"{len(plan.orphans_ready)} orphan object(s) past the orphan "
            f"timeout (first: {plan.orphans_ready[0]})",
            "run `sediment gc` (or keep `sediment maintain --loop` running)"))
    if plan.unreferenced_ready:
        out.append(look.finding(
            "garbage_due", f"{len(plan.unreferenced_ready)} unreferenced file(s) past the GC "
            f"delay (first: {plan.unreferenced_ready[0]})",
            "run `sediment gc` (or keep `sediment maintain --loop` running)"))
    return out


def bound_of(settings: TableSettings) -> int:
    """Most files a read of one leaf may merge before the table needs attention:
    ``ingest.stall_files`` when set, else :data:`CROWDING_FACTOR` compaction batches."""
    if settings.ingest_stall_files > 0:
        return settings.ingest_stall_files
    return CROWDING_FACTOR * settings.compaction_batch_size


def crowding(look: Look) -> list[Finding]:
    """Leaves a read merges more files of than the table's bound."""
    if look.head is None or look.settings is None:
        return []
    bound = bound_of(look.settings)
    over = {leaf: n for leaf, n in files_per_leaf(look.head).items() if n > bound}
    if not over:
        return []
    worst = max(over, key=lambda leaf: over[leaf])
    return [look.finding(
        "files_per_leaf", f"{len(over)} leaf partition(s) read from more than {bound} files "
        f"(most: {worst}, {over[worst]} files)",
        f"compaction is behind: run `sediment compact --table {look.table.name}`, and check "
        f"that a maintainer (`sediment maintain --loop`) runs and keeps up")]


def jobs(look: Look) -> list[Finding]:
    """Compaction jobs assigned past the job timeout that never committed: the maintainer
    (or runner) that took them stopped (a maintainer leaves no other heartbeat)."""
    if look.head is None or look.settings is None:
        return []
    timeout = look.settings.compaction_job_timeout_seconds
    stuck = stale_jobs(look.head, timeout, exclude=set(), now=look.now)
    if not stuck:
        return []
    return [look.finding(
        "stalled_jobs", f"{len(stuck)} compaction job(s) assigned more than "
        f"{human_seconds(timeout)} ago never committed (first: {stuck[0].job_id}): the "
        f"maintainer or runner that took them stopped",
        "start or restart `sediment maintain --loop` (it runs them again), or run "
        "`sediment compact`")]


def dumps(look: Look) -> list[Finding]:
    """A dump lock whose heartbeat stopped: a dump that died or hangs."""
    info = look.table.objects.head(LOCK_KEY)
    if info is None:
        return []
    age = look.now - info.mtime
    if age < LOCK_TIMEOUT_SECONDS:
        return []
    held = read_lock(look.table.objects)
    doc = {} if held is None else held[1]
    job, root = doc.get("job_id", "?"), doc.get("root", "?")
    return [look.finding(
        "dump_stuck", f"dump job {job} to {root} holds the dump lock without a heartbeat "
        f"for {human_seconds(age)}",
        f"dump to {root} with the same range again to resume it, or drop it "
        f"(`sediment dump {look.table.name} {root} --abandon`)")]


def batcher(look: Look) -> list[Finding]:
    """Batcher jobs left unfinished past ``batcher.job_timeout_seconds`` (their runner
    died): their requests stay claimed and their files pinned until a run settles them."""
    if look.settings is None:
        return []
    timeout = look.settings.batcher_job_timeout_seconds
    stuck = [j for j in batcher_jobs(look.table) if j.get("state") not in TERMINAL and
             look.now - float(j.get("updated", j.get("created", 0))) >= timeout]
    if not stuck:
        return []
    return [look.finding(
        "batcher_stuck", f"{len(stuck)} batcher job(s) unfinished for more than "
        f"{human_seconds(timeout)} (first: {stuck[0]['id']})",
        f"run `sediment batcher run {look.table.name}`: it settles abandoned jobs (commits "
        f"or requeues their requests)")]


CHECKS: Sequence[Check] = (metadata, leases, garbage, crowding, jobs, dumps, batcher)
"""Every check, in the order findings are listed."""


def check_table(table: TableHandle, *, now: float | None = None) -> list[Finding]:
    """Every check of :data:`CHECKS` on ``table``. A check that cannot read what it needs
    reports that as a finding of its own; the others still run."""
    look = look_at(table, now)
    out: list[Finding] = []
    for check in CHECKS:
        try:
            out.extend(check(look))
        except SedimentError as e:
            out.append(look.finding(check.__name__, f"the {check.__name__} check could not "
                                    f"read: {type(e).__name__}: {e}",
                                    f"run `sediment verify {table.name}`; check the store's "
                                    f"access"))
    return out
