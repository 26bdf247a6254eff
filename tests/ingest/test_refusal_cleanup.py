"""A commit refused for certain leaves nothing behind: its files, their sidecars and its
lease entry are deleted at once, not an hour later by GC's orphan pass (nor, for a dropped
table's folder, by a whole-store ``maintain``).

A refusal is certain when ``StateStore.commit`` raised before anything could land: the
transaction is invalid, every attempt lost the race, or the table was dropped
(``definitely_not_committed``). The dropped-table case is checked on local disk and on moto's
S3 server; compaction and load refusals on local disk (the clean-up is the same function).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import sediment as sd
from helpers import SCHEMA, make_table, rows
from sediment.compaction.runner import commit_job, create_jobs, execute_job
from sediment.errors import TableNotFoundError
from sediment.files.sidecars import with_sidecars
from sediment.ingest.standard import ingest
from sediment.state import pending
from sediment.state.store import DROPPED_MARKER


def _objects_left(table: sd.Table) -> list[str]:
    """The table folder's objects but folder markers (pyarrow's S3 ``create_dir`` writes
    them; they hold nothing)."""
    return sorted(o.key for o in table._handle.objects.list("")
                  if o.key and not o.key.endswith("/"))


@pytest.mark.parametrize("where", ["local", pytest.param("s3", marks=pytest.mark.s3)])
def test_an_ingest_into_a_dropped_table_leaves_nothing(
        where: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """The table is dropped while the ingest reads its input: the files it then writes
    (data, sample, key filter) and its lease go as the TableNotFoundError is raised."""
    uri, options = (str(tmp_path / "store"), {}) if where == "local" else \
        request.getfixturevalue("s3_store_uri")
    store = sd.Store.open(uri, **options, create=True)
    table = make_table(store, name="events", split_points=["m"])
    objects = table._handle.objects
    written: list[str] = []
    real_register = pending.register

    def spy(objs: Any, names: Any) -> None:
        names = list(names)
        written.extend(names)
        real_register(objs, names)

    real_later = pending.register_later

    def spy_later(objs: Any, names: Any) -> Any:  # (ingest writes its lease on a thread)
        names = list(names)
        written.extend(names)
        return real_later(objs, names)

    def drop_first(_: int) -> None:  # called once the batch is accepted, before any write
        if not objects.exists(DROPPED_MARKER):
            store.drop_table("events")

    pending.register = spy  # type: ignore[assignment]
    pending.register_later = spy_later  # type: ignore[assignment]
    try:
        with pytest.raises(TableNotFoundError, match="events was dropped"):
            ingest(table._handle, rows(2000, seed=1), progress=drop_first)
    finally:
        pending.register = real_register  # type: ignore[assignment]
        pending.register_later = real_later  # type: ignore[assignment]
    assert len(set(written)) == 2, "one file per leaf was written after the drop"
    assert _objects_left(table) == [DROPPED_MARKER]  # no file, sidecar or lease
    assert pending.held(objects, with_sidecars(written)) == []


def test_a_refused_compaction_deletes_its_output_at_once(tmp_path: Path) -> None:
    """A job whose inputs were taken from it (here by ``clear``) is refused for certain:
    its output file and sidecars go with the refusal."""
    table = make_table(tmp_path / "store")
    for seed in range(2):
        table.ingest(rows(500, seed=seed))
    handle = table._handle
    jobs = create_jobs(handle, full=True)
    assert len(jobs) == 1
    state = handle.states.head()
    out = execute_job(handle, jobs[0], state.partitions[jobs[0].partition_id].region)
    assert not isinstance(out, str) and out.written is not None
    output = out.written.filename
    assert handle.objects.exists(output)
    table.clear()  # drops every reference and job assignment
    result = commit_job(handle, jobs[0], out)
    assert not result.committed and "TransactionInvalidError" in (result.error or "")
    assert [k for k in with_sidecars([output]) if handle.objects.exists(k)] == []
    assert pending.held(handle.objects, [output]) == []


def test_a_load_into_a_dropped_table_leaves_nothing(tmp_path: Path) -> None:
    """``store.load`` into an existing table dropped just before the dump's files were
    copied: the copies go with the TableNotFoundError."""
    source = make_table(tmp_path / "store", name="source")
    source.ingest(rows(1000, seed=3))
    job = source.dump(str(tmp_path / "dump"))
    store = source.store
    target = make_table(store, schema=SCHEMA, name="target")
    objects = target._handle.objects

    def drop_before_copying(done: int, total: int) -> None:  # (0, total) comes first
        if done == 0 and not objects.exists(DROPPED_MARKER):
            store.drop_table("target")

    with pytest.raises(TableNotFoundError, match="target was dropped"):
        store.load(job.manifest_uri, "target", progress=drop_before_copying)
    assert _objects_left(target) == [DROPPED_MARKER]


@pytest.mark.s3
def test_an_ingest_on_s3_writes_no_folder_markers(
        s3_store_uri: tuple[str, dict[str, Any]]) -> None:
    """S3 has no folders: the data file writer creates none (each marker would be one more
    request, one more chance to fail under faults), and the files read back whole."""
    uri, options = s3_store_uri
    table = make_table(uri, options)
    table.ingest(rows(500, seed=3))
    store_keys = [o.key for o in sd.Store.open(uri, **options).objects.list("")]
    assert not [k for k in store_keys if k.endswith("/")]
    assert _objects_left(table) and table.query().num_rows == 500
