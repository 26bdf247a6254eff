"""Bulk dump (FoundationDB BulkDump's shape): one job per table at a time, pinned to a version.

Tasks are the dump range cut at leaf-partition boundaries. Task ``t`` writes, per batch ``b``,
``<job>/<t>/<b>/<version>-data.parquet`` (omitted when empty), ``<version>-sample.parquet`` and
``<version>-manifest.json`` (files, key range, version, rows, bytes, SHA-256 checksums); the last
batch's manifest says ``final``. When every task is done the job writes
``<job>/job-manifest.json`` listing every task, with the checksums of their manifests.

- One job at a time: a lock object in the table (put-if-absent) with a heartbeat; a second dump
  is refused while the heartbeat is fresh. A job whose lock went stale is resumed by the next
  ``dump`` to the same root: finished tasks (final manifest present) are kept, the others rerun.
- A task that fails is retried, first clearing its own folder.
- The pinned version is protected from GC by a tag held for the job's life.
"""

from __future__ import annotations

import io
import json
import os
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

from sediment.core.model import FileReference
from sediment.core.ranges import Range
from sediment.core.state import TableState
from sediment.dump.manifest import (
    FORMAT,
    JOB_MANIFEST,
    dumps,
    loads,
    range_to_json,
    sha256,
)
from sediment.errors import JobError, ObjectNotFoundError, QueryError, SedimentError
from sediment.files.sample import KeySampler
from sediment.files.sidecars import SAMPLE, read_sidecar
from sediment.query.planner import SubQuery
from sediment.state.versions import create_tag, delete_tag, list_tags
from sediment.storage.base import ObjectStore
from sediment.storage.conditional import create_once

if TYPE_CHECKING:
    from sediment.handle import TableHandle

LOCK_KEY = "dumps/lock.json"
LOCK_TIMEOUT_SECONDS = 120.0
BATCH_ROWS = 1_000_000
RETRIES = 3


@dataclass(frozen=True, slots=True)
class DumpTask:
    task_id: str
    leaf_id: str
    range: Range
    """The task's tile of the dump range (in its manifests; the tiles cover the dump range)."""
    query: Range | None = None
    """The dump range: the task reads ``query`` within its leaf's region (None: ``range``)."""


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
    """Tasks: the range cut at leaf boundaries, in key order (pure).

    Each task reads ``rng`` within its leaf's region. Its tile (the range its manifests
    record) is the leaf's region, with the first tile starting where ``rng`` starts and the
    last ending where ``rng`` ends, so the tiles cover ``rng`` exactly by construction, also
    when a bound of ``rng`` is a prefix of a multi-field split key.
    """
    leaves = [leaf for leaf in state.leaf_partitions() if rng.overlaps(leaf.region)]
    out = []
    for i, leaf in enumerate(leaves):
        start, s_inc = (rng.start, rng.start_inclusive) if i == 0 else \
            (leaves[i - 1].region.max, True)
        end, e_inc = (rng.end, rng.end_inclusive) if i == len(leaves) - 1 else \
            (leaf.region.max, False)
        out.append(DumpTask(f"task-{i:05d}", leaf.id,
                            Range(start, end, start_inclusive=s_inc, end_inclusive=e_inc), rng))
    return out


def _write_batch(dest: ObjectStore, prefix: str, version: int, data: pa.Table,
                 names: Sequence[str], rng: Range, final: bool, sample_size: int,
                 row_group_rows: int) -> dict[str, Any]:
    files: list[dict[str, Any]] = []
    if data.num_rows:
        buf = io.BytesIO()
        pq.write_table(data, buf, compression="zstd", row_group_size=row_group_rows,
                       sorting_columns=[pq.SortingColumn(i) for i in range(len(names))])
        raw = buf.getvalue()
        path = f"{prefix}/{version}-data.parquet"
        dest.put(path, raw)
        files.append({"path": path, "kind": "data", "rows": data.num_rows, "bytes": len(raw),
                      "sha256": sha256(raw)})
    sampler = KeySampler(names, sample_size)
    if data.num_rows:
        sampler.add(data)
    sample = sampler.sample(pa.schema([data.schema.field(n) for n in names]))
    buf = io.BytesIO()
    pq.write_table(sample, buf, compression="zstd")
    raw = buf.getvalue()
    path = f"{prefix}/{version}-sample.parquet"
    dest.put(path, raw)
    files.append({"path": path, "kind": "sample", "rows": sample.num_rows, "bytes": len(raw),
                  "sha256": sha256(raw)})
    manifest = {"format": FORMAT, "version": version, "range": range_to_json(rng),
                "rows": data.num_rows, "bytes": sum(f["bytes"] for f in files), "files": files,
                "final": final}
    dest.put(f"{prefix}/{version}-manifest.json", dumps(manifest))
    return manifest


def run_dump_task(table: TableHandle, dest: ObjectStore, job_id: str, version: int,
                  task: DumpTask) -> list[str]:
    """Write one task's batches (clearing its folder first); returns its manifest paths."""
    folder = f"{job_id}/{task.task_id}"
    dest.delete_many([o.key for o in dest.list(folder + "/")])
    state = table.state(version)
    leaf = state.partitions[task.leaf_id]
    refs = list(state.references(leaf.id).values())
    for anc in state.ancestors(leaf.id):
        refs.extend(state.references(anc.id).values())
    schema = table.schema
    executor = table.executors.get(state)  # the table's own, with its caches
    whole = _whole_file(table, executor, refs, task)
    if whole is not None:
        return [_copy_file(table, dest, f"{folder}/batch-00000", version, task, whole)]
    sub = SubQuery(leaf.id, leaf.region, tuple(refs), (task.query or task.range,))
    props = table.properties
    batches = executor.stream(_plan_of(state, sub), schema.field_names,
                              table.compaction_iterators())
    paths: list[str] = []
    pending: list[pa.RecordBatch] = []
    held = 0

    def flush(final: bool) -> None:
        nonlocal pending, held
        data = pa.Table.from_batches(pending, schema=schema.to_arrow())
        prefix = f"{folder}/batch-{len(paths):05d}"
        _write_batch(dest, prefix, version, data, schema.row_key_names, task.range, final,
                     int(props["sample.size"]), int(props["parquet.row_group_rows"]))
        paths.append(f"{prefix}/{version}-manifest.json")
        pending, held = [], 0

    for b in batches:
        pending.append(b)
        held += b.num_rows
        if held >= BATCH_ROWS:
            flush(False)
    flush(True)
    return paths


def _whole_file(table: TableHandle, executor: Any, refs: Sequence[FileReference],
                task: DumpTask) -> FileReference | None:
    """The task's only file when it can be copied byte for byte: one exact reference, no
    compaction iterators, and every row strictly inside the task's range (judged on the
    first row-key field from the cached footer statistics)."""
    if len(refs) != 1 or refs[0].approximate or table.compaction_iterators():
        return None
    ref = refs[0]
    _, footer = executor.footers.open(ref.filename)
    if footer.metadata.num_rows != ref.records or not footer.mins or \
            any(m is None for m in footer.mins + footer.maxs):
        return None
    lo, hi = min(footer.mins), max(footer.maxs)
    # The tile, not the dump range (``task.query``): the file may be an ancestor's (not yet
    # pushed down) or shared with other leaves, holding rows of other tiles; the tile lies
    # inside the dump range and the leaf's region, so rows inside it are exactly the task's.
    rng = task.range
    if rng.start is not None and not lo > rng.start[0]:
        return None
    if rng.end is not None and not hi < rng.end[0]:
        return None
    return ref


def _copy_file(table: TableHandle, dest: ObjectStore, prefix: str, version: int, task: DumpTask,
               ref: FileReference) -> str:
    """Dump a whole data file and its sample by copying their bytes (no re-encoding)."""
    files: list[dict[str, Any]] = []
    for kind in ("data", "sample"):
        # the sample under its current name, or its legacy one (sediment.files.sidecars)
        raw = table.objects.get(ref.filename) if kind == "data" else \
            read_sidecar(table.objects, ref.filename, SAMPLE)[1]
        path = f"{prefix}/{version}-{kind}.parquet"
        dest.put(path, raw)
        rows = ref.records if kind == "data" else pq.ParquetFile(pa.BufferReader(raw)
                                                                 ).metadata.num_rows
        files.append({"path": path, "kind": kind, "rows": rows, "bytes": len(raw),
                      "sha256": sha256(raw)})
    manifest = {"format": FORMAT, "version": version, "range": range_to_json(task.range),
                "rows": ref.records, "bytes": sum(f["bytes"] for f in files), "files": files,
                "final": True, "copied": True}
    path = f"{prefix}/{version}-manifest.json"
    dest.put(path, dumps(manifest))
    return path


def _plan_of(state: TableState, sub: SubQuery) -> Any:
    from sediment.query.planner import QueryPlan

    return QueryPlan(state.version, (sub,))


def _task_done(dest: ObjectStore, job_id: str, task: DumpTask, version: int) -> list[str] | None:
    """The manifests of a finished task (its last batch is final), else None."""
    manifests = sorted(o.key for o in dest.list(f"{job_id}/{task.task_id}/")
                       if o.key.endswith(f"/{version}-manifest.json"))
    if not manifests:
        return None
    try:
        last = loads(dest.get(manifests[-1]), manifests[-1])
    except SedimentError:
        return None
    return manifests if last.get("final") else None


def run_dump_task_retried(table: TableHandle, dest: ObjectStore, job_id: str, version: int,
                          task: DumpTask) -> tuple[str, list[str]]:
    """``(task id, manifest paths)`` of :func:`run_dump_task`, tried up to ``RETRIES`` times
    (each try clears the task's folder first); JobError when every try fails. Used by the
    local threads and by Spark tasks."""
    last: Exception | None = None
    for _ in range(RETRIES):
        try:
            return task.task_id, run_dump_task(table, dest, job_id, version, task)
        except SedimentError as e:
            last = e
    raise JobError(f"dump job {job_id}: task {task.task_id} failed {RETRIES} times: {last}")


class _Lock:
    """The table's one-dump-at-a-time lock, with a heartbeat."""

    def __init__(self, table: TableHandle, root: str, rng: Range, version: int | None,
                 job_id: str | None = None) -> None:
        self.table = table
        self.doc: dict[str, Any] = {
            "job_id": job_id or uuid.uuid4().hex[:16], "root": root, "range": range_to_json(rng),
            "version": version, "started": time.time(), "heartbeat": time.time()}

    def acquire(self) -> bool:
        """True when the job is new; False when it resumes a stale job to the same root."""
        objects = self.table.objects
        if create_once(objects, LOCK_KEY, json.dumps(self.doc).encode()):
            return True
        try:
            held = json.loads(objects.get(LOCK_KEY))
        except (ObjectNotFoundError, ValueError):
            return self.acquire()
        age = time.time() - float(held.get("heartbeat", 0))
        if age < LOCK_TIMEOUT_SECONDS:
            raise JobError(f"table {self.table.name}: dump job {held.get('job_id')} to "
                           f"{held.get('root')} is running (heartbeat {age:.0f} s ago); one dump "
                           "job per table at a time")
        if held.get("root") != self.doc["root"] or held.get("range") != self.doc["range"]:
            raise JobError(f"table {self.table.name}: an interrupted dump job "
                           f"{held.get('job_id')} to {held.get('root')} must be resumed (dump "
                           "to that root and range again) or abandoned (`sediment dump "
                           "--abandon`) first")
        self.doc = {**held, "heartbeat": time.time()}
        self.beat()
        return False

    def beat(self) -> None:
        self.doc["heartbeat"] = time.time()
        self.table.objects.put(LOCK_KEY, json.dumps(self.doc).encode())

    def mark_stale(self) -> None:
        """Heartbeat 0: the next dump to the same root resumes the job at once."""
        self.doc["heartbeat"] = 0.0
        self.table.objects.put(LOCK_KEY, json.dumps(self.doc).encode())

    def release(self) -> None:
        self.table.objects.delete_many([LOCK_KEY])


def abandon_dump(table: TableHandle) -> None:
    """Remove the dump lock (and the version tag) of an interrupted job."""
    try:
        held = json.loads(table.objects.get(LOCK_KEY))
    except ObjectNotFoundError:
        return
    try:
        delete_tag(table.states, f"dump-{held['job_id']}")
    except QueryError:
        pass
    table.objects.delete_many([LOCK_KEY])


def dump_table(table: TableHandle, root: str, *, range: Range | None = None,  # noqa: A002
               version: int | str | None = None, threads: int = 0,
               progress: Callable[[int, int], None] | None = None,
               runner: str = "local") -> DumpJob:
    """Dump ``range`` (default: everything) of ``table`` at ``version`` under ``root``."""
    started = time.perf_counter()
    rng = range or Range()
    if rng.is_empty():  # no task could tile it: the dump would not load
        raise QueryError(f"table {table.name}: dump range {rng} is empty")
    root = root.rstrip("/")
    v = table.resolve_version(version) or table.version
    lock = _Lock(table, root, rng, v)
    new = lock.acquire()
    job_id = str(lock.doc["job_id"])
    v = int(lock.doc["version"] or v)
    tag = f"dump-{job_id}"
    try:
        # a resumed job may lack its tag (a crash before it was created)
        if new or all(x.name != tag for x in list_tags(table.states)):
            table.states.load(v)  # QueryError for an unknown or pruned version
            create_tag(table.states, tag, v)
    except BaseException:
        if new:  # nothing written yet (e.g. an unknown version): free the table at once
            lock.release()
        else:
            lock.mark_stale()
        raise
    dest = table.object_store_at(root)
    try:
        state = table.state(v)
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

        if runner == "spark" and todo:
            from sediment.spark.dump_runner import run_tasks_on_spark

            # executors resolve a relative path against their own working directory: give
            # them the destination's normalised URI (file:///abs/path or s3://...)
            for tid, paths in run_tasks_on_spark(table, dest.uri, job_id, v, todo):
                done[tid] = paths
            if progress is not None:  # Spark's own console bar shows its tasks meanwhile
                progress(len(done), len(tasks))
        else:
            n = threads or os.cpu_count() or 2
            with ThreadPoolExecutor(max(1, min(n, len(todo) or 1))) as pool:
                for tid, paths in pool.map(
                        lambda t: run_dump_task_retried(table, dest, job_id, v, t), todo):
                    done[tid] = paths
                    lock.beat()
                    if progress is not None:
                        progress(len(done), len(tasks))
        entries, rows, size = [], 0, 0
        for t in tasks:
            manifests = []
            for p in done[t.task_id]:
                raw = dest.get(p)
                doc = loads(raw, p)
                rows += int(doc["rows"])
                size += int(doc["bytes"])
                manifests.append({"path": p, "sha256": sha256(raw), "rows": doc["rows"]})
            entries.append({"task_id": t.task_id, "leaf_id": t.leaf_id,
                            "range": range_to_json(t.range), "manifests": manifests})
        schema = table.schema
        job = {"format": FORMAT, "job_id": job_id, "table": table.name, "version": v,
               "schema": schema.to_json(), "range": range_to_json(rng), "tasks": entries,
               "rows": rows, "bytes": size, "created": time.time()}
        dest.put(f"{job_id}/{JOB_MANIFEST}", dumps(job))
    except BaseException:
        lock.mark_stale()  # (``beat()`` would stamp the current time: fresh, not stale)
        raise
    delete_tag(table.states, tag)
    lock.release()
    table.status.record("dump", job_id, "finished", rows=rows, bytes=size, tasks=len(tasks),
                        root=root, version=v)
    return DumpJob(job_id, root, f"{root}/{job_id}/{JOB_MANIFEST}", v, len(tasks), rows, size,
                   time.perf_counter() - started, resumed)
