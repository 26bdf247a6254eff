"""Dropping a table: late commits to a dropped table fail, and the store-level
collector removes table folders that no catalog entry names once they are old enough.

Every test runs on local disk and on moto S3.
"""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from typer.testing import CliRunner

import sediment as sd
from sediment.cli import app
from sediment.core.state import build_partition_tree
from sediment.core.transactions import InitialiseTable
from sediment.errors import TableNotFoundError
from sediment.maintenance.unnamed import TABLES_PREFIX
from sediment.state.log import LOG_PREFIX
from sediment.state.store import DROPPED_MARKER, StateStore
from sediment.storage.base import ObjectStore
from sediment.store import UNNAMED_TABLE_TIMEOUT_SECONDS

SCHEMA = sd.Schema(row_keys=[("key", pa.string())], values=[("value", pa.int64())])


def data(n: int = 5) -> pa.Table:
    return pa.table({"key": [uuid.uuid4().hex for _ in range(n)], "value": list(range(n))})


def keys_under(objects: ObjectStore, prefix: str) -> list[str]:
    return sorted(o.key for o in objects.list(prefix))


def folder_of(store: sd.Store, table_id: str) -> str:
    return f"{TABLES_PREFIX}{table_id}/"


def make(store_uri: tuple[str, dict[str, Any]], name: str = "events") -> tuple[sd.Store,
                                                                             sd.Table]:
    uri, options = store_uri
    store = sd.Store.open(uri, **options, create=True)
    table = store.create_table(name, SCHEMA)
    table.ingest(data())
    return store, table


def age_folder(store: sd.Store, prefix: str, seconds: float) -> None:
    """Make every file under ``prefix`` look ``seconds`` old (local disk only)."""
    root = Path(store.objects.arrow_filesystem()[1]) / prefix
    when = time.time() - seconds
    for dirpath, _dirs, files in os.walk(root):
        for f in files:
            os.utime(os.path.join(dirpath, f), (when, when))


def is_local(store: sd.Store) -> bool:
    return store.uri.startswith("file://")


# ---- drop ---------------------------------------------------------------------------------
def test_drop_leaves_only_the_marker(store_uri: tuple[str, dict[str, Any]]) -> None:
    store, table = make(store_uri)
    prefix = folder_of(store, table.table_id)
    assert len(keys_under(store.objects, prefix)) > 3
    store.drop_table("events")
    assert store.tables() == []
    with pytest.raises(TableNotFoundError):
        store.table("events")
    assert keys_under(store.objects, prefix) == [prefix + DROPPED_MARKER]
    marker = json.loads(store.objects.get(prefix + DROPPED_MARKER))
    assert marker["name"] == "events" and marker["table_id"] == table.table_id
    # the name is free again, for another table
    again = store.create_table("events", SCHEMA)
    assert again.table_id != table.table_id and again.query().num_rows == 0


def test_a_commit_to_a_dropped_table_is_refused(store_uri: tuple[str, dict[str, Any]]) -> None:
    """A handle opened before the drop (another process, say) can no longer commit."""
    store, table = make(store_uri)
    uri, options = store_uri
    sd.Store.open(uri, **options).drop_table("events")
    with pytest.raises(TableNotFoundError, match="events"):
        table.ingest(data())
    prefix = folder_of(store, table.table_id)
    assert not keys_under(store.objects, prefix + LOG_PREFIX)  # no log entry was written
    assert not keys_under(store.objects, prefix + "status/")


def test_an_ingest_running_while_its_table_is_dropped_fails(
        store_uri: tuple[str, dict[str, Any]], monkeypatch: pytest.MonkeyPatch) -> None:
    store, table = make(store_uri)
    before_commit = threading.Event()
    dropped = threading.Event()
    real_commit = StateStore.commit

    def paused_commit(self: StateStore, *args: Any, **kwargs: Any) -> Any:
        if self is table._handle.states:
            before_commit.set()
            assert dropped.wait(30)
        return real_commit(self, *args, **kwargs)

    monkeypatch.setattr(StateStore, "commit", paused_commit)
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            table.ingest(data(50))
            outcome.append(None)
        except BaseException as e:  # noqa: BLE001 - reported below
            outcome.append(e)

    t = threading.Thread(target=run)
    t.start()
    assert before_commit.wait(30)  # the ingest wrote its files and is about to commit
    store.drop_table("events")
    dropped.set()
    t.join(60)
    assert len(outcome) == 1 and isinstance(outcome[0], TableNotFoundError), outcome
    prefix = folder_of(store, table.table_id)
    assert not keys_under(store.objects, prefix + LOG_PREFIX)
    # whatever the ingest left goes with the folder
    r = store.collect_unnamed_tables(timeout=0)
    assert r.removed == (table.table_id,)
    assert keys_under(store.objects, prefix) == []


# ---- the store-level collector -----------------------------------------------------------------
def killed_create(store: sd.Store) -> str:
    """A table folder whose create (or load) died before its catalog entry was written."""
    table_id = uuid.uuid4().hex
    states = StateStore(store.table_objects(table_id), table_id)
    states.commit(InitialiseTable(SCHEMA, {}, build_partition_tree(SCHEMA, None)))
    store.table_objects(table_id).put("data/root/part.parquet", b"not really parquet")
    return table_id


def test_unnamed_folders_go_after_the_timeout(store_uri: tuple[str, dict[str, Any]]) -> None:
    store, kept = make(store_uri, "kept")
    _, dropped = make(store_uri, "dropped")
    store.drop_table("dropped")
    orphan = killed_create(store)
    # young folders wait (the default timeout is at least an hour)
    r = store.collect_unnamed_tables()
    assert r.removed == () and set(r.waiting) == {dropped.table_id, orphan}
    assert UNNAMED_TABLE_TIMEOUT_SECONDS >= 3600
    r = store.collect_unnamed_tables(timeout=0)
    assert set(r.removed) == {dropped.table_id, orphan} and r.objects_deleted >= 3
    for tid in (dropped.table_id, orphan):
        assert keys_under(store.objects, folder_of(store, tid)) == []
    assert store.objects.list_folders(TABLES_PREFIX) == [kept.table_id]
    # the named table is untouched
    assert store.tables() == ["kept"] and store.table("kept").query().num_rows == 5
    kept.ingest(data())
    assert store.table("kept").query().num_rows == 10
    assert store.collect_unnamed_tables(timeout=0).removed == ()
    if is_local(store):  # no empty directories are left behind either
        root = Path(store.objects.arrow_filesystem()[1])
        assert sorted(os.listdir(root / "tables")) == [kept.table_id]


def test_the_newest_object_decides(tmp_path: Path) -> None:
    """A folder is judged by its newest object, by the store's clock (local disk: mtimes are
    set back to stand for time passing)."""
    store = sd.Store.open(str(tmp_path / "s"), create=True)
    old, busy = killed_create(store), killed_create(store)
    for tid in (old, busy):
        age_folder(store, folder_of(store, tid), 7200)
    store.table_objects(busy).put("pending/lease.json", b"{}")  # a writer still at work
    r = store.collect_unnamed_tables()
    assert r.removed == (old,) and r.waiting == (busy,)
    assert keys_under(store.objects, folder_of(store, busy))
    # a leftover temp file of a put counts as an object too
    age_folder(store, folder_of(store, busy), 7200)
    tmp = Path(store.objects.arrow_filesystem()[1]) / folder_of(store, busy) / "log" / \
        ".tmp-leftover"
    tmp.write_bytes(b"x")
    assert store.collect_unnamed_tables().waiting == (busy,)
    age_folder(store, folder_of(store, busy), 7200)
    assert store.collect_unnamed_tables().removed == (busy,)
    assert not (tmp_path / "s" / "tables" / busy).exists()


def test_a_corrupt_catalog_entry_stops_the_collector(store_uri: tuple[str, dict[str, Any]]
                                                     ) -> None:
    store, _ = make(store_uri)
    orphan = killed_create(store)
    store.objects.put("catalog/broken.json", b"{not json")
    r = store.collect_unnamed_tables(timeout=0)
    assert r.removed == () and "broken" in r.note
    assert keys_under(store.objects, folder_of(store, orphan))


def test_maintain_collects_unnamed_folders(store_uri: tuple[str, dict[str, Any]]) -> None:
    store, kept = make(store_uri, "kept")
    _, dropped = make(store_uri, "dropped")
    store.drop_table("dropped")
    orphan = killed_create(store)
    store.maintain()  # default timeout: nothing is old enough
    assert set(store.objects.list_folders(TABLES_PREFIX)) == \
        {kept.table_id, dropped.table_id, orphan}
    store.maintain(table="kept", orphan_timeout=0)  # one table: no store pass
    assert len(store.objects.list_folders(TABLES_PREFIX)) == 3
    store.maintain(orphan_timeout=0)
    assert store.objects.list_folders(TABLES_PREFIX) == [kept.table_id]
    assert store.table("kept").query().num_rows == 5


def test_sediment_maintain_collects_unnamed_folders(store_uri: tuple[str, dict[str, Any]],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    uri, options = store_uri
    store, kept = make(store_uri, "kept")
    store.drop_table("kept")
    killed_create(store)
    if options:  # the CLI reads S3 settings from the environment
        monkeypatch.setenv("AWS_ENDPOINT_URL", options["endpoint_url"])
    runner = CliRunner()
    r = runner.invoke(app, ["maintain", "--store", uri, "--json"])
    assert r.exit_code == 0, (r.stdout, r.exception)
    assert len(store.objects.list_folders(TABLES_PREFIX)) == 2
    r = runner.invoke(app, ["maintain", "--store", uri, "--json", "--orphan-timeout", "0"])
    assert r.exit_code == 0, (r.stdout, r.exception)
    rows = json.loads(r.stdout)
    assert {"table": "(unnamed tables)", "removed": 2}.items() <= rows[0].items()
    assert store.objects.list_folders(TABLES_PREFIX) == []


def test_maintain_loop_collects_unnamed_folders(tmp_path: Path) -> None:
    store, _ = make((str(tmp_path / "s"), {}), "kept")
    orphan = killed_create(store)
    r = CliRunner().invoke(app, ["maintain", "--store", str(tmp_path / "s"), "--loop",
                                 "--interval", "0.2", "--max-loops", "2", "--json",
                                 "--orphan-timeout", "0"])
    assert r.exit_code == 0, (r.stdout, r.exception)
    assert orphan not in store.objects.list_folders(TABLES_PREFIX)
    assert store.table("kept").query().num_rows == 5
