"""Bulk dump (FoundationDB BulkDump's shape): one job per table at a time, pinned to a version.

Tasks are the dump range cut at leaf-partition boundaries. Task ``t`` writes, per batch ``b``,
``<job>/<t>/<b>/<version>-data.parquet`` (omitted when empty), ``<version>-sample.parquet`` and
``<version>-manifest.json`` (files, key range, version, rows, bytes, and each file's CRC-32,
with its SHA-256 too where its bytes passed through the dump); the last batch's manifest says
``final``. Files of any size: a data file is streamed into the destination as it is encoded
(S3: a multipart upload), and a whole file is copied inside the storage service where both
ends are on it (``sediment.storage.transfer``), else streamed part by part. When every task is
done the job writes ``<job>/job-manifest.json`` listing every task, with the checksums of their
manifests, and the table's schema and properties at the version (a table loaded from the dump
answers alike).

- One job at a time: a lock object in the table (put-if-absent) with a heartbeat that a
  background thread keeps fresh while tasks run (``sediment.dump.lock``); a second dump is
  refused while it is fresh. A job whose lock went stale is resumed by the next ``dump`` to the
  same root: finished tasks (final manifest present) are kept, the others rerun. A stalled dump
  that lost its lock that way writes nothing more, and succeeds with the resumer's job manifest
  once it is written.
- A task that fails is retried, first clearing its own folder (and aborting the multipart
  uploads an earlier try left there: a killed dump's files are written again from their
  first part).
- The pinned version is protected from GC by a tag held for the job's life.
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from sediment.core.deletions import applicable
from sediment.core.head import Head
from sediment.core.regions import Range
from sediment.core.state import TableState
from sediment.core.transactions.table import SCHEME_PROPERTIES
from sediment.dump.batches import clear_task_folder
from sediment.dump.batches import write_batch as _write_batch
from sediment.dump.lock import (
    GUARD,
    LOCK_KEY,
    DumpLock,
    DumpLockLostError,
    check_owner,
    guard,
    lock_age,
    read_lock,
)
from sediment.dump.lock import abandon as abandon_lock
from sediment.dump.manifest import (
    FORMAT,
    JOB_MANIFEST,
    dumps,
    range_to_json,
    read_manifest,
    sha256,
)
from sediment.dump.pinned import PINNED as _PINNED
from sediment.dump.whole import copy_file, whole_file
from sediment.errors import CorruptDataError, JobError, QueryError, SedimentError
from sediment.partitioning import partitioning_of
from sediment.query.planner import QueryPlan, SubQuery, check_range, sums_of
from sediment.runners import load_runner
from sediment.state.versions import create_tag, delete_tag, list_tags
from sediment.storage.base import ObjectStore

if TYPE_CHECKING:
    from sediment.handle import TableHandle

log = logging.getLogger(__name__)

__all__ = ["LOCK_KEY", "DumpJob", "DumpLockLostError", "DumpTask", "abandon_dump", "dump_table",
           "plan_dump_tasks", "run_dump_task", "run_dump_task_retried"]

LOCK_TIMEOUT_SECONDS = 120.0
"""How long the dump lock may go without a heartbeat (by the store's clock) before another dump
to the same root resumes the job (``dump_table(lock_timeout=...)`` overrides it)."""
BATCH_ROWS = 1_000_000
BATCH_BYTES = 32 * 1024 * 1024
"""A batch file is written once this many bytes of rows (Arrow's in-memory size) are held,
whatever their count: what a dump task holds at once (a few tasks run at a time) stays far
below the 256 MiB a process may use, however wide the rows."""
RETRIES = 3
@dataclass(frozen=True, slots=True)
class DumpTask:
    task_id: str
    leaf_id: str
    range: Range
    """The task's tile of the dump range (in its manifests; the tiles cover the dump range)."""
    query: Range | None = None
    """The dump range: the task reads ``query`` within its leaf's region (None: ``range``)."""
    leaves: tuple[str, ...] = ()
    """Every leaf the task reads, merged in key order (one, unless leaves are boxes)."""


@dataclass(frozen=True, slots=True)
class DumpJob:
    """A finished dump: where its job manifest is, and what it holds."""

    job_id: str
    root: str
    manifest_uri: str
    version: int
    tasks: int
    rows: int
    bytes: int
    seconds: float
    resumed_tasks: int = 0


def plan_dump_tasks(state: TableState, rng: Range) -> list[DumpTask]:
    """Tasks: the range tiled by the table's partitioning, in key order (pure): the tiles
    cover ``rng`` exactly, each reading ``rng`` within its leaves (see
    :meth:`sediment.partitioning.Partitioning.tiles`)."""
    return [DumpTask(f"task-{i:05d}", t.leaves[0] if t.leaves else "", t.range, t.query,
                     t.leaves)
            for i, t in enumerate(partitioning_of(state).tiles(state, rng))]


def run_dump_task(table: TableHandle, dest: ObjectStore, job_id: str, version: int,
                  task: DumpTask) -> list[str]:
    """Write one task's batches (clearing its folder first); returns its manifest paths."""
    folder = f"{job_id}/{task.task_id}"
    guard()  # a job resumed by another dump is that dump's to write
    clear_task_folder(dest, folder)
    head = _PINNED.get(table, version)
    state = head.state
    subs = []
    for leaf_id in task.leaves:
        leaf = state.partitions[leaf_id]
        refs = list(state.references(leaf.id).values())
        for anc in state.ancestors(leaf.id):
            refs.extend(state.references(anc.id).values())
        subs.append(SubQuery(leaf.id, leaf.region, tuple(refs), (task.query or task.range,),
                             sums_of(state, refs),
                             applicable(state.deletions, leaf.id, leaf.region)))
    schema, settings = head.schema, head.settings
    executor = table.executors.get(state)  # the table's own, with its caches
    # a per-field region or a box leaf leaves out rows inside the tile: never a whole file
    # (and a file written under another schema is rewritten: the dump holds the version's)
    runs = len(subs) == 1 and subs[0].as_stored and subs[0].region.cell is None and \
        (task.query or task.range).per_field is None and \
        executor.file_map(subs[0].references[0], subs[0]).identity
    whole = whole_file(executor, list(subs[0].references), task.range, head.iterators,
                       subs[0].sums) if runs else None
    # a file written before checksums (no sums) is rewritten: nothing to check a copy by
    sums = None if whole is None else subs[0].sums.get(whole.filename)
    if whole is not None and sums is not None:
        return [copy_file(table, dest, f"{folder}/batch-00000", version, task.range,
                          whole, sums)]
    # (a dump reads every byte once and vouches for it: not through the block cache)
    batches = executor.stream(QueryPlan(state.version, tuple(subs)), schema.field_names,
                              head.iterators, block_cache=False)
    paths: list[str] = []
    pending: list[pa.RecordBatch] = []
    held = size = 0

    def flush(final: bool) -> None:
        nonlocal pending, held, size
        data = pa.Table.from_batches(pending, schema=schema.to_arrow())
        prefix = f"{folder}/batch-{len(paths):05d}"
        guard()
        _write_batch(dest, prefix, version, data, schema.row_key_names, task.range, final,
                     settings.sample_size, settings.parquet_row_group_rows)
        paths.append(f"{prefix}/{version}-manifest.json")
        pending, held, size = [], 0, 0

    for b in batches:
        pending.append(b)
        held += b.num_rows
        size += b.nbytes
        if held >= BATCH_ROWS or size >= BATCH_BYTES:
            flush(False)
    flush(True)
    return paths


def _task_done(dest: ObjectStore, job_id: str, task: DumpTask, version: int) -> list[str] | None:
    """The manifests of a finished task (its last batch is final), else None."""
    manifests = sorted(o.key for o in dest.list(f"{job_id}/{task.task_id}/")
                       if o.key.endswith(f"/{version}-manifest.json"))
    if not manifests:
        return None
    try:
        _, last = read_manifest(dest, manifests[-1], manifests[-1])
    except SedimentError:
        return None
    return manifests if last.get("final") else None


def run_dump_task_retried(table: TableHandle, dest: ObjectStore, job_id: str, version: int,
                          task: DumpTask, owner: str | None = None) -> tuple[str, list[str]]:
    """``(task id, manifest paths)`` of :func:`run_dump_task`, tried up to ``RETRIES`` times
    (each try clears the task's folder first); JobError when every try fails, but
    CorruptDataError at once (the damaged file was read again already). Used by the
    local threads and by Spark tasks. With ``owner`` (the job's lock owner), the task checks
    that the job still holds the table's dump lock before it clears or writes anything, and
    stops with DumpLockLostError (never retried) when it does not."""
    token = GUARD.set(None if owner is None else
                       partial(check_owner, table.objects, owner, table.name, job_id))
    last: Exception | None = None
    try:
        for _ in range(RETRIES):
            try:
                return task.task_id, run_dump_task(table, dest, job_id, version, task)
            except (DumpLockLostError, CorruptDataError):
                raise  # a damaged file was read again already: the same bytes every try
            except SedimentError as e:
                last = e
    finally:
        GUARD.reset(token)
    raise JobError(f"dump job {job_id}: task {task.task_id} failed {RETRIES} times: {last}")


def abandon_dump(table: TableHandle, root: str | None = None, *, force: bool = False,
                 lock_timeout: float | None = None) -> dict[str, Any] | None:
    """Remove the dump lock (and the version tag) of an interrupted job, and abort the
    multipart uploads its killed tasks left under its folder (S3 keeps, and bills, their
    parts; a root that cannot be reached any more is left as it is, with a warning). The
    abandoned lock's document, or None when no dump held the lock.

    Refused (JobError, nothing removed) when the lock's heartbeat is younger than
    ``lock_timeout`` (its dump may be running: abandoning it would break it) unless
    ``force``, and when ``root`` names another folder than the lock's job writes to."""
    lock = read_lock(table.objects)
    if lock is not None:
        doc = lock[1]
        if root is not None and doc.get("root") is not None and \
                not _same_root(str(doc["root"]), dump_root_of(table, root)):
            raise JobError(f"table {table.name}: the dump lock is held by job "
                           f"{doc.get('job_id')} to {doc.get('root')}, not to {root}: name "
                           "that root to abandon it")
        age = lock_age(table.objects, doc)
        limit = LOCK_TIMEOUT_SECONDS if lock_timeout is None else lock_timeout
        if not force and age is not None and age < limit:
            raise JobError(f"table {table.name}: dump job {doc.get('job_id')} to "
                           f"{doc.get('root')} may be running (heartbeat {age:.0f} s ago): "
                           f"its lock is abandoned once its heartbeat is {limit:.0f} s old "
                           "(stop the dump first; force=True / --force abandons it now)")
    held = abandon_lock(table.objects)
    if held is not None and held.get("job_id"):
        _forget_tag(table, f"dump-{held['job_id']}")
        try:
            dest = table.object_store_at(str(held["root"]))
            dest.abort_uploads(list(dest.multipart_uploads(f"{held['job_id']}/")))
        except (SedimentError, KeyError) as e:
            log.warning("table %s: the abandoned dump's uploads under %s were not aborted: %s",
                        table.name, held.get("root"), e)
    return held


def _forget_tag(table: TableHandle, tag: str) -> None:
    """Delete a job's version tag; one already gone (deleted by a peer) is no error."""
    try:
        delete_tag(table.states, tag)
    except QueryError:
        pass


def _same_root(a: str, b: str) -> bool:
    """Whether two dump roots name one folder (local paths compared absolute, from here)."""
    if "://" in a or "://" in b:
        return a.rstrip("/") == b.rstrip("/")
    return os.path.abspath(a) == os.path.abspath(b)


def dump_root_of(table: TableHandle, root: str) -> str:
    """``root`` without trailing slashes; a blank one (which would dump into the working
    directory) or a scheme alone is refused, naming the argument."""
    if not root.strip():
        raise QueryError(f"table {table.name}: dump destination (root) {root!r} is blank; give "
                         "a folder or s3://bucket/prefix")
    out = root.rstrip("/") or "/"
    if out.endswith(":"):
        raise QueryError(f"table {table.name}: dump destination (root) {root!r} names no "
                         "folder; give a folder or s3://bucket/prefix")
    tables = table.objects.uri.rstrip("/").rsplit("/", 1)[0]  # the folder of table folders
    if _inside(out, tables):
        raise QueryError(f"table {table.name}: dump destination (root) {root!r} is inside the "
                         f"store's table folders ({tables}): the store's maintenance would "
                         "take it for a dropped table's folder and delete it; dump to a "
                         "folder outside it")
    return out


def _inside(root: str, store: str) -> bool:
    """Whether the dump root ``root`` (a path or URI) is the folder ``store`` (a URI) or in
    it."""
    if store.startswith("file://"):
        if "://" in root and not root.startswith("file://"):
            return False
        here = os.path.abspath(root.removeprefix("file://"))
        base = os.path.abspath(store.removeprefix("file://"))
        return here == base or here.startswith(base.rstrip("/") + "/")
    base = store.rstrip("/")
    return root == base or root.startswith(base + "/")


def _finished_by_peer(dest: ObjectStore, root: str, job_id: str, started: float,
                      resumed: int) -> DumpJob | None:
    """The job as a peer finished it (its job manifest is written), else None."""
    key = f"{job_id}/{JOB_MANIFEST}"
    try:
        _, doc = read_manifest(dest, key, key)
        return DumpJob(job_id, root, _join(root, key), int(doc["version"]), len(doc["tasks"]),
                       int(doc["rows"]), int(doc["bytes"]), time.perf_counter() - started,
                       resumed)
    except (SedimentError, KeyError, TypeError, ValueError):
        return None


def _join(root: str, key: str) -> str:
    return f"{root}{key}" if root.endswith("/") else f"{root}/{key}"


def dump_table(table: TableHandle, root: str, *, range: Range | None = None,  # noqa: A002
               version: int | str | None = None, threads: int = 0,
               progress: Callable[[int, int], None] | None = None,
               runner: str = "local", lock_timeout: float | None = None) -> DumpJob:
    """Dump ``range`` (default: everything) of ``table`` at ``version`` under ``root``.

    ``lock_timeout`` (default ``LOCK_TIMEOUT_SECONDS``) is how long the table's dump lock may
    go without a heartbeat before another dump to the same root resumes the job; the heartbeat
    runs every quarter of it while tasks run. When this dump loses the lock (it stalled past
    the limit and another dump resumed the job) and that dump has finished, the result is that
    dump's job: the same job manifest. ``runner`` names a dump runner of
    :mod:`sediment.runners` (``"local"`` threads, ``"spark"``): JobError for an unknown one,
    MissingDependencyError for ``"spark"`` without pyspark, before anything is written."""
    started = time.perf_counter()
    run_tasks = load_runner("dump", runner, table=table.name)
    head = table.read_head()  # the dump's one read of the head
    # checked as a query's range is (a per-field region bound: tiles cut its lexicographic
    # bounds); ends in the model's form
    try:
        rng = Range() if range is None else check_range(head.schema, range, table.name)
    except QueryError as e:
        raise QueryError(f"table {table.name}: dump range {range} is empty or invalid: "
                         f"{e}") from None
    if rng.is_empty():  # no task could tile it: the dump would not load
        raise QueryError(f"table {table.name}: dump range {rng} is empty")
    root = dump_root_of(table, root)
    dest = table.object_store_at(root)  # a bad URI fails here, before any lock is taken
    v = table.resolve_version(version) or head.state.version
    lock = DumpLock(table.objects, table.name, {
        "job_id": uuid.uuid4().hex[:16], "root": root, "range": range_to_json(rng),
        "version": v}, LOCK_TIMEOUT_SECONDS if lock_timeout is None else lock_timeout)
    new = lock.acquire()
    job_id = lock.job_id
    v = int(lock.doc["version"] or v)
    tag = f"dump-{job_id}"
    try:
        # the version's head (QueryError for an unknown or pruned version), which the dump's
        # tasks share (a past version is loaded once, not once per task)
        at = head if v == head.state.version else Head.of(table.states.load(v), table.name)
        # a resumed job may lack its tag (a crash before it was created)
        if new or all(x.name != tag for x in list_tags(table.states)):
            create_tag(table.states, tag, v)
    except BaseException:
        if new:  # nothing written yet (e.g. an unknown version): free the table at once
            lock.release()
        else:
            lock.mark_stale()
        raise
    resumed = 0
    try:
        with lock.heartbeat(), _PINNED.pinned(table, at):
            resumed, rows, size, n_tasks = _run_job(table, dest, lock, new, at, rng, threads,
                                                    progress, run_tasks)
            lock.check()  # the tag and lock are another dump's once it resumed this job
            _forget_tag(table, tag)
            lock.release()
    except Exception:
        if lock.mark_stale():  # still ours: the next dump to this root resumes the job
            raise
        peer = _finished_by_peer(dest, root, job_id, started, resumed)
        if peer is None:
            raise
        return peer  # a dump that resumed this one after it stalled finished the job
    except BaseException:
        lock.mark_stale()
        raise
    table.status.record("dump", job_id, "finished", rows=rows, bytes=size, tasks=n_tasks,
                        root=root, version=v)
    return DumpJob(job_id, root, _join(root, f"{job_id}/{JOB_MANIFEST}"), v, n_tasks, rows,
                   size, time.perf_counter() - started, resumed)


def dumped_properties(state: TableState) -> dict[str, Any]:
    """The table properties a dump carries (as of its version): every one, so that a table
    loaded from it answers as the source did (``query.iterators``, ``compaction.iterators``:
    an aggregating table aggregates alike), except a scheme membership, which names a scheme
    of the source store (a loaded table has a tree of its own), and a member's split
    threshold (its scheme's, counting every member's records, not its own)."""
    member = bool(state.properties.get("partition.scheme"))
    return {k: v for k, v in state.properties.items() if k not in SCHEME_PROPERTIES
            and not (member and k == "partition.split.threshold")}


def _run_job(table: TableHandle, dest: ObjectStore, lock: DumpLock, new: bool, at: Head,
             rng: Range, threads: int, progress: Callable[[int, int], None] | None,
             run_tasks: Callable[..., None]) -> tuple[int, int, int, int]:
    """Run the job's unfinished tasks on ``at``, the head of the dumped version, with
    ``run_tasks`` (a dump runner of :mod:`sediment.runners`), and write its job manifest
    (after checking the lock is still ours); ``(resumed tasks, rows, bytes, tasks)``."""
    job_id = lock.job_id
    state, v = at.state, at.state.version
    tasks = plan_dump_tasks(state, rng)
    done: dict[str, list[str]] = {}
    for t in tasks:
        m = _task_done(dest, job_id, t, v) if not new else None
        if m is not None:
            done[t.task_id] = m
    resumed = len(done)
    todo = [t for t in tasks if t.task_id not in done]
    if progress is not None:  # the total at once (a progress bar's "0/N")
        progress(len(done), len(tasks))

    def finished(tid: str, paths: list[str]) -> None:
        done[tid] = paths
        if progress is not None:
            progress(len(done), len(tasks))

    if todo:
        run_tasks(table, dest, job_id, v, todo, lock.owner, threads=threads, on_done=finished)
    entries, rows, size = [], 0, 0
    for t in tasks:
        manifests = []
        for p in done[t.task_id]:
            raw, doc = read_manifest(dest, p, p)
            rows += int(doc["rows"])
            size += int(doc["bytes"])
            manifests.append({"path": p, "sha256": sha256(raw), "rows": doc["rows"]})
        entries.append({"task_id": t.task_id, "leaf_id": t.leaf_id,
                        "range": range_to_json(t.range), "manifests": manifests})
    job = {"format": FORMAT, "job_id": job_id, "table": table.name, "version": v,
           "schema": at.schema.to_json(), "range": range_to_json(rng), "tasks": entries,
           "rows": rows, "bytes": size, "created": time.time(),
           "properties": dumped_properties(state)}
    job.update(partitioning_of(state).dump_fields())  # so that a load makes its kind
    lock.check()  # a dump that resumed this job after a stall writes the manifest, not us
    dest.put(f"{job_id}/{JOB_MANIFEST}", dumps(job))
    return resumed, rows, size, len(tasks)
