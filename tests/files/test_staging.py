"""The staging object: a write's leases, adoption, and keep-or-delete by the error's property.

``Staging`` (sediment.files.staging) holds the lease of every file a write puts into a table
until the write settles; the Parquet writer holds none. A failed write's files are deleted at
once when the error says its commit surely wrote nothing (``SedimentError.committed is False``),
or when no commit was tried; any other failure keeps them for GC's orphan pass. Checked on local
disk against the lease objects themselves (``pending/*.json``) and the table's state.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import sediment as sd
from helpers import make_table, rows
from sediment.core.model import FileReference
from sediment.core.transactions import AddFiles
from sediment.errors import (
    CommitConflictError,
    CommitOutcomeUnknownError,
    SedimentError,
    StorageError,
    TableNotFoundError,
    TransactionInvalidError,
    definitely_not_committed,
)
from sediment.files.sidecars import with_sidecars
from sediment.files.staging import Staging
from sediment.files.writer import SortedFileWriter, WrittenFile
from sediment.state import pending
from sediment.state.store import StateStore


def _leased(table: sd.Table) -> set[str]:
    """Every file the table's lease objects name (what GC's orphan pass reads)."""
    objects = table._handle.objects
    pending.flush()  # what the heartbeat would write by now
    return {f for o in objects.list(pending.PENDING_PREFIX)
            for f in json.loads(objects.get(o.key))["files"]}


def _write(table: sd.Table, filename: str, n: int = 50) -> WrittenFile:
    handle = table._handle
    writer = SortedFileWriter(handle.objects, filename, table.schema, table.properties)
    data = rows(n, seed=3).sort_by([(k, "ascending") for k in table.schema.key_names])
    writer.write(data)
    return writer.close()


def _present(table: sd.Table, names: list[str]) -> list[str]:
    return [k for k in with_sidecars(names) if table._handle.objects.exists(k)]


class Refusing:
    """A state store whose commit raises ``error`` (what ``Staging.commit`` settles on)."""

    def __init__(self, error: BaseException) -> None:
        self.error = error

    def commit(self, source: object) -> None:
        raise self.error


def test_a_writer_alone_takes_no_lease(tmp_path: Path) -> None:
    table = make_table(tmp_path)
    w = _write(table, "data/root/alone.parquet")
    assert table._handle.objects.exists(w.filename)
    assert pending.held(table._handle.objects, [w.filename]) == []
    assert _leased(table) == set()


def test_a_staged_file_is_leased_before_it_is_written_and_let_go_once_committed(
        tmp_path: Path) -> None:
    table = make_table(tmp_path)
    handle = table._handle
    staging = Staging(handle.objects, table.name)
    name = staging.new_file("root")
    assert not handle.objects.exists(name) and _leased(table) == {name}
    w = _write(table, name)
    assert staging.files == [name]
    state = staging.commit(handle.states, AddFiles([FileReference(name, "root", w.rows)]))
    assert state.refcount == {name: 1} and table.query().num_rows == w.rows
    assert staging.files == [] and pending.held(handle.objects, [name]) == []
    assert _leased(table) == set()


@pytest.mark.parametrize("error", [
    TransactionInvalidError("invalid at the head"),
    CommitConflictError("lost every race"),
    TableNotFoundError("dropped"),
], ids=lambda e: type(e).__name__)
def test_a_commit_that_surely_wrote_nothing_deletes_the_files(tmp_path: Path,
                                                             error: SedimentError) -> None:
    assert error.committed is False and definitely_not_committed(error)
    table = make_table(tmp_path)
    staging = Staging(table._handle.objects, table.name)
    name = staging.new_file("root")
    _write(table, name)
    with pytest.raises(type(error)):
        staging.commit(Refusing(error), AddFiles([]))  # type: ignore[arg-type]
    assert _present(table, [name]) == [] and _leased(table) == set()


@pytest.mark.parametrize("error", [
    CommitOutcomeUnknownError("no answer"),
    StorageError("the store failed mid-commit"),
    KeyboardInterrupt(),
    RuntimeError("not Sediment's"),
], ids=lambda e: type(e).__name__)
def test_a_commit_that_may_have_landed_keeps_the_files_for_gc(tmp_path: Path,
                                                             error: BaseException) -> None:
    assert not definitely_not_committed(error)
    table = make_table(tmp_path)
    staging = Staging(table._handle.objects, table.name)
    name = staging.new_file("root")
    _write(table, name)
    with pytest.raises(type(error)):
        staging.commit(Refusing(error), AddFiles([]))  # type: ignore[arg-type]
    assert table._handle.objects.exists(name)  # and its sidecars: it may be referenced
    assert _leased(table) == set()  # let go: GC's orphan pass judges them by reading


def test_only_the_property_decides_not_the_class() -> None:
    """An error of any class that says "nothing committed" is believed; a look-alike
    attribute on a foreign exception is not."""
    class Refused(SedimentError):
        committed = False

    foreign = RuntimeError("x")
    foreign.committed = False  # type: ignore[attr-defined]
    assert definitely_not_committed(Refused("y")) and not definitely_not_committed(foreign)
    assert SedimentError.committed is None and CommitOutcomeUnknownError.committed is None


def test_a_failure_before_any_commit_deletes_the_files_whatever_it_is(tmp_path: Path) -> None:
    table = make_table(tmp_path)
    with pytest.raises(KeyboardInterrupt), \
            Staging(table._handle.objects, table.name) as staging:
        name = staging.new_file("root")
        _write(table, name)
        raise KeyboardInterrupt  # nothing was committed: nothing can reference the file
    assert _present(table, [name]) == [] and _leased(table) == set()


def test_a_real_refusal_deletes_and_names_the_table(tmp_path: Path) -> None:
    """Through the real commit loop: a transaction invalid at the head (a partition the
    table lacks) is refused naming the table by its name; the file and lease go."""
    table = make_table(tmp_path, name="events")
    handle = table._handle
    staging = Staging(handle.objects, table.name)
    name = staging.new_file("nowhere")
    w = _write(table, name)
    with pytest.raises(TransactionInvalidError, match="table events at version 1") as e:
        staging.commit(handle.states, AddFiles([FileReference(name, "nowhere", w.rows)]))
    assert handle.table_id not in str(e.value)
    assert _present(table, [name]) == [] and _leased(table) == set()


def test_files_written_elsewhere_are_adopted_and_handed_over(tmp_path: Path) -> None:
    """A worker stages and writes, then hands its file over; the committer adopts it (its
    lease names it from then on) and commits it."""
    table = make_table(tmp_path)
    handle = table._handle
    worker = Staging(handle.objects, table.name)
    name = worker.new_file("root")
    w = _write(table, name)
    assert worker.hand_over() == [name] and _leased(table) == set()
    committer = Staging(handle.objects, table.name)
    committer.adopt([name])
    assert _leased(table) == {name} and committer.files == [name]
    committer.commit(handle.states, AddFiles([FileReference(name, "root", w.rows)]))
    assert table.state().refcount == {name: 1} and _leased(table) == set()


def test_an_ingest_holds_its_leases_until_its_commit(tmp_path: Path) -> None:
    """What every writer path does, seen from the outside: the files an ingest wrote are
    leased while they are staged (here: just before the commit) and not after it."""
    table = make_table(tmp_path, split_points=["m"])
    seen: list[set[str]] = []
    real = StateStore.commit

    def look(self: StateStore, source: object) -> object:
        seen.append(_leased(table))
        return real(self, source)  # type: ignore[arg-type]

    StateStore.commit = look  # type: ignore[method-assign]
    try:
        table.ingest(rows(400, seed=1))
    finally:
        StateStore.commit = real  # type: ignore[method-assign]
    files = {f.filename for f in table.files()}
    assert len(files) == 2 and seen == [files]
    assert _leased(table) == set()


def test_a_delete_that_fails_still_lets_the_lease_go(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """What a failed delete leaves is an orphan for GC: a long-lived process must not keep
    a lease on it (the lease object, whose delete failed too, lapses by its age)."""
    table = make_table(tmp_path)
    objects = table._handle.objects
    staging = Staging(objects, table.name)
    name = staging.new_file("root")
    _write(table, name)

    def refuse(keys: object) -> None:
        raise StorageError("the store refuses deletes")

    monkeypatch.setattr(objects, "delete_many", refuse)
    staging.delete()
    monkeypatch.undo()
    assert objects.exists(name) and staging.files == []
    assert pending.held(objects, [name]) == []


def test_a_compaction_job_that_cannot_create_its_output_keeps_no_lease(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The job stages its output's name before the file exists; when the file cannot be
    created, the name leaves the lease with the failure (a maintainer lives long)."""
    from sediment.compaction import job as job_module
    from sediment.compaction.runner import create_jobs, execute_job

    table = make_table(tmp_path)
    for seed in range(2):
        table.ingest(rows(300, seed=seed))
    handle = table._handle
    (job,) = create_jobs(handle, full=True)

    def cannot_create(objects: object, filename: str, *args: object, **kwargs: object) -> None:
        raise StorageError(f"cannot create data file {filename}")

    monkeypatch.setattr(job_module, "SortedFileWriter", cannot_create)
    out = execute_job(handle, job, handle.states.head().partitions[job.partition_id].region)
    assert isinstance(out, str) and "cannot create data file" in out
    assert _leased(table) == set()


def test_spark_tasks_hand_their_files_over_to_the_driver(tmp_path: Path) -> None:
    """A Spark task's Python worker outlives the task: the compaction task and the bulk
    import's staging task hand their files over (the driver adopts them), so no worker keeps
    a lease that would protect an orphan for as long as it lives. Run in-process: these are
    the functions Spark calls on an executor."""
    from sediment.compaction.runner import create_jobs
    from sediment.spark.runner import _run_on_executor
    from sediment.spark.tasks import stage_partition

    table = make_table(tmp_path)
    for seed in range(2):
        table.ingest(rows(300, seed=seed))
    handle = table._handle
    spec = handle.store_spec()
    (job,) = create_jobs(handle, full=True)
    region = handle.states.head().partitions[job.partition_id].region
    out = _run_on_executor(spec, table.name, job, region, handle.table_id)
    assert out["filename"] and handle.objects.exists(out["filename"])
    assert _leased(table) == set()

    data = rows(200, seed=9)
    staged = list(stage_partition(iter(data.to_batches()), spec, table.name, table.version,
                                  handle.table_id))
    names = [n for b in staged for n in b.column("filename").to_pylist()]
    assert names and all(handle.objects.exists(n) for n in names)
    assert _leased(table) == set()


def test_a_commit_makes_its_files_durable_before_the_log_entry(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch
                                                               ) -> None:
    # the log entry is fsynced by its put: the data files it names must be durable first, or
    # an OS crash could leave a committed entry naming a truncated file
    import sediment.storage.local as local

    table = make_table(tmp_path)
    events: list[tuple[str, str]] = []
    real_fsync, real_put = local._fsync_file, local.LocalObjectStore.put_if_absent

    def fsync(path: Path) -> None:
        events.append(("fsync", path.name))
        real_fsync(path)

    def put_if_absent(self: local.LocalObjectStore, key: str, data: bytes) -> bool:
        if "/log/" in f"/{key}":
            events.append(("log", key))
        return real_put(self, key, data)

    real_fsync_dir = local._fsync_directory

    def fsync_dir(path: Path) -> None:
        events.append(("fsync", f"{path.name}/"))
        real_fsync_dir(path)

    real_plain_put = local.LocalObjectStore.put

    def put(self: local.LocalObjectStore, key: str, data: bytes) -> None:
        real_plain_put(self, key, data)  # (durable as it returns: the module's promise)
        events.append(("fsync", key.rsplit("/", 1)[-1]))

    monkeypatch.setattr(local, "_fsync_file", fsync)
    monkeypatch.setattr(local, "_fsync_directory", fsync_dir)
    monkeypatch.setattr(local.LocalObjectStore, "put", put)
    monkeypatch.setattr(local.LocalObjectStore, "put_if_absent", put_if_absent)
    table.ingest(rows(50, seed=0))
    (ref,) = table.state().all_references()
    first_log = next(i for i, (kind, _) in enumerate(events) if kind == "log")
    # the file, its sidecars (the writer syncs the file and its key filter as it closes;
    # the sample is put) and the folder naming them: each durable before the entry
    folder, _, name = ref.filename.rpartition("/")
    for synced in [name, *(n.rsplit("/", 1)[-1] for n in with_sidecars([ref.filename])),
                   f"{folder.rsplit('/', 1)[-1]}/"]:
        assert ("fsync", synced) in events[:first_log], synced


def test_files_that_cannot_be_made_durable_are_not_committed(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch
                                                             ) -> None:
    import sediment.storage.local as local

    table = make_table(tmp_path)
    table.ingest(rows(10, seed=0))
    before = table.state().version

    def failing(path: Path) -> None:
        raise OSError(5, "Input/output error", str(path))

    monkeypatch.setattr(local, "_fsync_file", failing)
    with pytest.raises(sd.SedimentError, match="could not make files durable"):
        table.ingest(rows(10, seed=1))
    monkeypatch.undo()
    assert table.state().version == before
    committed = {r.filename for r in table.state().all_references()}
    assert [o.key for o in table._handle.objects.list("data/")
            if o.key.endswith(".parquet") and o.key not in committed] == []  # deleted
