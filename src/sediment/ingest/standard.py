"""Standard ingest (Sleeper's, with AutoMQ's shared files as an option).

Batches are validated and buffered up to ``ingest.memory_limit_bytes``; a full buffer is sorted
and spilled as a sorted run to a local folder chosen by the client (``spill_dir``, see
:mod:`sediment.ingest.spill`). At the end the runs (and what is still in
memory) are merged into one sorted stream, cut at leaf-partition boundaries, and written as one
file per touched leaf (``per_partition``) or as one file referenced from every leaf it covers
(``shared_file``). A large ``per_partition`` ingest that did not spill is cut into one run of the
key order per core, each written by a thread of its own (:func:`_write_partitioned`): the leaf
where two runs meet gets a file from each. All files commit in one AddFiles transaction; on
any failure the written files are deleted and nothing is committed (``sediment.files.staging``).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from sediment.core.head import schema_of
from sediment.core.model import FileReference, FileSums
from sediment.core.state import TableState
from sediment.core.transactions import AddFiles
from sediment.errors import DataError, SedimentError, StorageError
from sediment.files.sidecars import with_sidecars
from sediment.files.staging import Staging
from sediment.files.writer import SortedFileWriter, WrittenFile
from sediment.ingest.sources import IngestInput, conform, expand_paths, iter_input, read_file
from sediment.ingest.spill import SortedRuns, SpillDir, resolve_spill_dir
from sediment.ingest.stall import wait_for_room
from sediment.metrics import traces
from sediment.partitioning import partitioning_of
from sediment.schema import Schema
from sediment.settings import TableSettings, settings_of

if TYPE_CHECKING:
    from sediment.handle import TableHandle

log = logging.getLogger(__name__)

Progress = Callable[[int], None]
"""Called with the number of rows just accepted (for progress bars)."""
BeforeCommit = Callable[["StagedFiles"], None]
"""Called with the written, not yet committed files just before their commit."""


@dataclass(frozen=True, slots=True)
class IngestResult:
    """What an ingest did: rows and files written, bytes, the committed version, time taken
    (``stalled_seconds`` of it waiting for room in crowded leaves: see
    :mod:`sediment.ingest.stall`). ``replayed``: the write was a retry of one an earlier
    call committed under the same idempotency key; this call wrote nothing and answers with
    that write's version (and its rows, files and bytes as recorded)."""

    rows: int
    files: int
    bytes: int
    version: int
    seconds: float
    stalled_seconds: float = 0.0
    replayed: bool = False

    @property
    def rows_per_second(self) -> float:
        return self.rows / self.seconds if self.seconds > 0 else 0.0


def _write_partitioned(table: TableHandle, state: TableState, settings: TableSettings,
                       streams: Sequence[Iterator[pa.RecordBatch]], strategy: str,
                       staging: Staging, rows: int
                       ) -> tuple[list[FileReference], list[WrittenFile]]:
    """Write the sorted rows, ``streams`` (consecutive runs of the key order: one, or several
    written side by side, each on a thread of its own: ``SortedRuns.sorted_streams``), as
    :func:`_write_stream` writes one. A leaf two runs share gets a file from each (rows of
    equal keys are never in two runs). If one run's writing fails, the others stop at their
    next batch and its error is raised: the caller's staging deletes what was written."""
    if len(streams) == 1:
        return _write_stream(table, state, settings, streams[0], strategy, staging, rows,
                             threading.Event())
    stop = threading.Event()
    with ThreadPoolExecutor(len(streams), thread_name_prefix="sediment-write") as pool:
        futures = [pool.submit(_write_stream, table, state, settings, s, strategy, staging,
                               rows, stop) for s in streams]
        done: list[tuple[list[FileReference], list[WrittenFile]]] = []
        errors: list[BaseException] = []
        for f in futures:
            try:
                done.append(f.result())
            except BaseException as e:  # (every run's error waited for, the first raised)
                stop.set()
                errors.append(e)
    if errors:
        raise next((e for e in errors if not isinstance(e, _Stopped)), errors[0])
    return [r for refs, _ in done for r in refs], [w for _, written in done for w in written]


class _Stopped(Exception):
    """A run of the key order stopped writing because another run's writing failed."""


def _write_stream(table: TableHandle, state: TableState, settings: TableSettings,
                  stream: Iterator[pa.RecordBatch], strategy: str, staging: Staging,
                  rows: int, stop: threading.Event
                  ) -> tuple[list[FileReference], list[WrittenFile]]:
    """Write the sorted stream cut at ``state``'s leaves (by its partitioning): a file per
    touched leaf, or (``shared_file``) one file referenced from every leaf it touches with
    that leaf's exact count, each staged in ``staging`` before it is created. When the cut
    gives each leaf's rows together, in key order, one file is open at a time; otherwise one
    per touched leaf. On failure (or ``stop``, checked at each batch) the open writers are
    aborted and the error raised: the caller's staging deletes what was written."""
    schema = schema_of(state, table.name)
    partitioning = partitioning_of(state)
    refs: list[FileReference] = []
    written: list[WrittenFile] = []
    writers: dict[str, SortedFileWriter] = {}  # open, by leaf id ("shared": the one file)
    counts: dict[str, int] = {}

    def close(key: str) -> None:
        w = writers[key].close()  # (one that fails to close stays open: it is aborted)
        del writers[key]
        written.append(w)
        if w.synced:  # durable already: the commit does not sync them again
            staging.synced(with_sidecars([w.filename]))
        if key == "shared":
            refs.extend(FileReference(w.filename, pid, n) for pid, n in counts.items())
        else:
            refs.append(FileReference(w.filename, key, w.rows))

    try:
        for batch, pieces in partitioning.cut(state, stream, schema.row_key_names):
            if stop.is_set():
                raise _Stopped(f"ingest into table {table.name}: stopped")
            if strategy == "shared_file":  # the pieces cover the (sorted) batch: it goes whole
                for piece in pieces:
                    counts[piece.leaf.id] = counts.get(piece.leaf.id, 0) + piece.rows
                if pieces:
                    if "shared" not in writers:
                        writers["shared"] = _new_writer(table, staging, "shared", schema,
                                                        settings, rows)
                    writers["shared"].write(batch)
                continue
            for piece in pieces:
                writer = writers.get(piece.leaf.id)
                if writer is None:
                    if partitioning.cuts_in_order:  # the leaves before it are done
                        for key in list(writers):
                            close(key)
                    writer = _new_writer(table, staging, piece.leaf.id, schema, settings,
                                         rows)
                    writers[piece.leaf.id] = writer
                writer.write(piece.of(batch))
        for key in list(writers):
            close(key)
    except BaseException as e:
        failed = next(iter(writers.values())).filename \
            if partitioning.cuts_in_order and writers else None
        for writer in writers.values():
            writer.abort()
        if isinstance(e, OSError) and not isinstance(e, SedimentError):
            # a full disk or a lost mount under a local store: Arrow's IOError is an OSError
            what = f"data file {failed}" if failed else "data files"
            raise StorageError(f"ingest into table {table.name}: cannot write {what} to "
                               f"{table.objects.uri}: {e}") from e
        raise
    return refs, written




def _new_writer(table: TableHandle, staging: Staging, partition_id: str, schema: Schema,
                settings: TableSettings, rows: int) -> SortedFileWriter:
    """A writer of a new file of ``partition_id`` (of at most ``rows`` rows): its lease is
    written on a thread while the writer encodes, and the file created only once the lease
    is stored (``Staging.new_file_later``)."""
    name, ready = staging.new_file_later(partition_id)
    return SortedFileWriter(table.objects, name, schema, settings, ready=ready,
                            rows_hint=rows)


def delete_staged(table: TableHandle, filenames: Sequence[str]) -> None:
    """Delete staged (never committed) files, their sidecars and their lease entry at once
    (:meth:`sediment.files.staging.Staging.delete`): for files whose writer is gone (the
    batcher's recovery of a dead runner's job)."""
    Staging(table.objects, table.name).delete(filenames)


def verb_of(upsert: bool) -> str:
    """What errors call the write: ``upsert`` or ``ingest``."""
    return "upsert" if upsert else "ingest"


def ingest(table: TableHandle, data: IngestInput, *, progress: Progress | None = None,
           source: str = "input", spill_dir: SpillDir = None,
           upsert: bool = False) -> IngestResult:
    """Ingest records into ``table`` as one transaction (see module docs; ``spill_dir``: see
    :func:`sediment.ingest.spill.resolve_spill_dir`). The head is read once, here: the
    records are cut at its leaves with its settings, and committed on it (the log is read
    again only if another writer commits first). ``upsert``: each record replaces every
    older record of its record key (the last of equal keys in the input wins)."""
    folder = resolve_spill_dir(spill_dir, table.name)  # before reading any input
    return _ingest_batches(table, table.states.head(),
                           ((source, b) for b in iter_input(data, table.name, source,
                                                            verb=verb_of(upsert))),
                           progress, spill_dir=folder, upsert=upsert)


def ingest_files(table: TableHandle, paths: Sequence[str] | str, *,
                 progress: Progress | None = None,
                 before_commit: BeforeCommit | None = None,
                 spill_dir: SpillDir = None, upsert: bool = False) -> IngestResult:
    """Ingest Parquet, CSV and JSON-lines files (local or S3, globs allowed) in one transaction
    (``before_commit``: see :func:`commit_staged`; ``spill_dir``, ``upsert``: as
    :func:`ingest`)."""
    folder = resolve_spill_dir(spill_dir, table.name)
    if isinstance(paths, str):
        paths = [paths]
    files = expand_paths(paths, table.objects)
    if not files:
        raise DataError(f"{verb_of(upsert)} into table {table.name}: no input files given")
    state = table.states.head()
    schema = schema_of(state, table.name)

    def batches() -> Iterator[tuple[str, pa.RecordBatch]]:
        for fs, path in files:
            for b in read_file(fs, path, schema):
                yield path, b

    return _ingest_batches(table, state, batches(), progress, before_commit, spill_dir=folder,
                           upsert=upsert)


@dataclass(frozen=True, slots=True)
class StagedFiles:
    """Data files written for an ingest but not yet committed."""

    rows: int
    references: list[FileReference]
    written: list[WrittenFile]
    staging: Staging | None = field(default=None, compare=False, repr=False)
    """The staging that holds them in this process (None for files written by another
    process, such as Spark tasks: :func:`commit_staged` adopts them)."""

    @property
    def bytes(self) -> int:
        return sum(w.bytes for w in self.written)

    @property
    def checksums(self) -> dict[str, FileSums]:
        """The written files' checksums, for their commit (files without have none)."""
        return {w.filename: w.sums for w in self.written if w.sums is not None}


def stage_batches(table: TableHandle, state: TableState,
                  batches: Iterator[tuple[str, pa.RecordBatch]],
                  progress: Progress | None = None, *, spill_dir: SpillDir = None,
                  on_batch: Callable[[pa.RecordBatch], None] | None = None,
                  writers: int | None = None, verb: str = "ingest") -> StagedFiles:
    """Validate, sort (spilling past the memory limit to ``spill_dir``, else as
    :func:`~sediment.ingest.spill.resolve_spill_dir` finds) and write files cut at the leaves
    of ``state``; nothing is committed (the files stay staged, protected from GC, until
    :func:`commit_staged`; on failure they are deleted). Used by standard ingest and by Spark
    tasks (which spill where their executor's environment says). ``on_batch`` sees each
    batch as given, once it validated, in input order (a keyed write hashes its payload
    there: see :class:`~sediment.ingest.idempotency.PayloadHash`). ``writers``: how many
    runs of the key order a large input is written in, side by side (None: one per core; a
    Spark task gives 1, its executor's cores running other tasks). ``verb``: the write, as
    errors name it (``ingest``, ``upsert``)."""
    schema = schema_of(state, table.name)
    settings = settings_of(state, table.name)
    runs = SortedRuns(schema.to_arrow(), schema.key_names, settings.ingest_memory_limit_bytes,
                      resolve_spill_dir(spill_dir, table.name),
                      settings.parquet_row_group_rows, table.name)
    rows = 0
    offsets: dict[str, int] = {}
    try:
        for src, batch in batches:
            offset = offsets.get(src, 0)
            checked = conform(batch, schema, table.name, offset, src, verb=verb)
            if on_batch is not None:
                on_batch(batch)
            runs.add(checked)
            offsets[src] = offset + batch.num_rows
            rows += batch.num_rows
            if progress is not None:
                progress(batch.num_rows)
        if rows == 0:
            return StagedFiles(0, [], [])
        with Staging(table.objects, table.name) as staging:  # an error deletes the files
            strategy = settings.ingest_write_strategy
            # per leaf, a large ingest's sorted rows are written by a writer per core, each a
            # run of the key order (its sort, gather and Parquet encoding its own)
            streams = runs.sorted_streams(writers or os.cpu_count() or 1) \
                if strategy == "per_partition" else [runs.sorted_stream()]
            refs, written = _write_partitioned(table, state, settings, streams, strategy,
                                               staging, rows)
        return StagedFiles(rows, refs, written, staging)
    finally:
        runs.cleanup()


def commit_staged(table: TableHandle, staged: StagedFiles, started: float, *,
                  kind: str = "ingest", before_commit: BeforeCommit | None = None,
                  state: TableState | None = None, upsert: bool = False,
                  overwrite: bool = False) -> IngestResult:
    """Commit staged files in one AddFiles transaction (deleting them when it surely did not
    land: see :class:`~sediment.files.staging.Staging`). ``state``: the head the files were
    staged on, when the caller read it (its version answers an ingest of nothing; its
    settings give the stall); ``upsert``: the files' records are upserted (AddFiles.upsert);
    ``overwrite``: they replace every record of the table in the same commit.

    ``before_commit`` is called with the staged files just before the commit (the ingest
    batcher records them there); if it raises, the files are deleted and nothing is
    committed. A write stall (``ingest.stall_files``) waits before it, so that what
    ``before_commit`` decides is followed by the commit at once."""
    stalled, crowded = 0.0, None
    staging = staged.staging
    if staging is None:  # written by other processes (Spark tasks): this one's to protect now
        staging = Staging(table.objects, table.name)
        staging.adopt(w.filename for w in staged.written)
    with staging:  # an error before the commit deletes the files; one of it, as it says
        if staged.rows:
            stalled, crowded = _stall(table, staged, kind, state)
        if before_commit is not None:
            before_commit(staged)
        if staged.rows == 0 and not overwrite:
            version = table.version if state is None else state.version
            return IngestResult(0, 0, 0, version, time.perf_counter() - started)
        new_state = staging.commit(table.states, AddFiles(staged.references,
                                                          checksums=staged.checksums,
                                                          upsert=upsert, overwrite=overwrite))
    result = IngestResult(staged.rows, len(staged.written), staged.bytes, new_state.version,
                          time.perf_counter() - started, stalled)
    # a stall's time, and the leaf it gave up on, in the ingest's event (``sediment report
    # tasks``)
    stall: dict[str, Any] = {"stalled_seconds": round(stalled, 3)} if stalled else {}
    if crowded is not None:
        stall["crowded_leaf"], stall["crowded_leaf_files"] = crowded
    table.status.record(kind, f"v{result.version}", "committed", rows=result.rows,
                        files=result.files, bytes=result.bytes, seconds=result.seconds,
                        rows_per_second=result.rows_per_second, **stall)
    return result


def _stall(table: TableHandle, staged: StagedFiles, kind: str, state: TableState | None
           ) -> tuple[float, tuple[str, int] | None]:
    """Wait for room in the leaves ``staged`` adds to, as ``ingest.stall_files`` asks (see
    :mod:`sediment.ingest.stall`): the seconds waited, and the fullest leaf (id, files)
    still crowded when the wait timed out."""
    # the staged-on (else the cached) head's settings: no read of the log to find the stall
    # off
    settings = settings_of(table.states.cached_head() if state is None else state, table.name)
    limit = settings.ingest_stall_files
    if limit <= 0:
        return 0.0, None
    pids = [r.partition_id for r in staged.references]
    waited, crowded = wait_for_room(table.states.head, pids, limit,
                                    settings.ingest_stall_max_seconds)
    if not crowded:
        return waited, None
    leaf, files = max(crowded.items(), key=lambda kv: kv[1])
    log.warning("%s into table %s: leaf %s still holds %d files (ingest.stall_files = %d) "
                "after waiting %.1f s for compaction; committing anyway (is a maintainer "
                "running?)", kind, table.name, leaf, files, limit, waited)
    return waited, (leaf, files)


def _ingest_batches(table: TableHandle, state: TableState,
                    batches: Iterator[tuple[str, pa.RecordBatch]],
                    progress: Progress | None,
                    before_commit: BeforeCommit | None = None, *,
                    spill_dir: SpillDir = None, upsert: bool = False) -> IngestResult:
    started = time.perf_counter()
    with traces.span("sediment.ingest", table.name):
        staged = stage_batches(table, state, batches, progress, spill_dir=spill_dir,
                               verb=verb_of(upsert))
        return commit_staged(table, staged, started, before_commit=before_commit, state=state,
                             kind="upsert" if upsert else "ingest", upsert=upsert)
