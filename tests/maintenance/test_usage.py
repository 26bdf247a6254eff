"""Where the bytes go (issue 46 item 3): ``Table.usage()``, ``Store.usage()`` and
``sediment du`` sort every byte of a table's folder into live data, sidecars, unreferenced and
orphaned files by the reason GC keeps them, metadata and status, checked against the bytes on
disk and against what GC itself keeps."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import helpers
import sediment as sd
from helpers import rows
from sediment.cli import app
from sediment.files.sidecars import data_file_of
from sediment.files.writer import new_data_filename
from sediment.state import pending
from support.internals import write_sorted_file


def disk_bytes(root: Path, prefix: str = "") -> int:
    """Bytes of the files under ``root/prefix`` as the file system counts them (leftover
    temporaries aside)."""
    base = root / prefix
    return sum(p.stat().st_size for p in base.rglob("*")
               if p.is_file() and not p.name.startswith("."))


def test_usage_sorts_every_byte_by_what_holds_it(tmp_path: Path) -> None:
    table = helpers.make_table(tmp_path, **{"compaction.strategy": "basic",
                                            "compaction.batch_size": 3})
    for i in range(3):
        table.ingest(rows(200, i))
    inputs = {r.filename for r in table.files()}
    table.tag("before", table.version)  # holds the compacted inputs
    assert table.compact().jobs_committed == 1
    table.ingest(rows(50, 9))
    # an uncommitted file whose writer is gone: an orphan, younger than the orphan timeout
    data = rows(20, 7).sort_by([("key", "ascending"), ("timestamp", "ascending")])
    orphan = new_data_filename("root")
    write_sorted_file(table._handle.objects, orphan, helpers.SCHEMA, table.properties, [data])
    pending.release(table._handle.objects, [orphan])

    pending.flush()  # (an emptied lease is deleted now, not by the heartbeat mid-test)
    u = table.usage()
    root = Path(table._handle.objects.local_path(""))
    objects = {str(p.relative_to(root)): p.stat().st_size for p in root.rglob("*")
               if p.is_file() and not p.name.startswith(".")}
    live = {r.filename for r in table.files()}
    assert u.files == len(live) == 2
    assert u.live == sum(objects[f] for f in live)
    assert u.sidecars == sum(s for k, s in objects.items()
                             if data_file_of(k) in live and k not in live)
    assert u.unreferenced == {"tag": sum(s for k, s in objects.items()
                                         if data_file_of(k) in inputs)}
    assert u.orphaned == {"orphan_timeout": sum(s for k, s in objects.items()
                                                if data_file_of(k) == orphan)}
    assert u.status == disk_bytes(root, "status") > 0
    assert u.metadata == sum(s for k, s in objects.items()
                             if not k.startswith(("data/", "status/"))) > 0
    assert u.total == sum(objects.values())
    kept = table.gc().kept  # the same classifier: what GC keeps is what usage names
    assert {r: k.bytes for r, k in kept.unreferenced.items()} == u.unreferenced
    assert {r: k.bytes for r, k in kept.orphans.items()} == u.orphaned

    store = table.store
    other = helpers.make_table(store, name="other")
    other.ingest(rows(10, 1))
    pending.flush()
    su = store.usage()
    assert set(su.tables) == {table.name, "other"}
    assert su.tables[table.name] == table.usage()
    assert su.total.total == su.tables[table.name].total + su.tables["other"].total
    # every byte of the store, catalogs included, and a dropped table's folder apart
    assert su.bytes == disk_bytes(tmp_path)
    store.drop_table("other")
    after = store.usage()
    assert set(after.tables) == {table.name}
    assert after.bytes == disk_bytes(tmp_path) and after.unnamed > 0

    runner = CliRunner()
    r = runner.invoke(app, ["du", "--store", str(tmp_path), "--table", table.name, "--json"])
    assert r.exit_code == 0, (r.stdout, r.stderr)
    assert json.loads(r.stdout) == {"table": table.name, **table.usage().to_json()}
    r = runner.invoke(app, ["du", "--store", str(tmp_path), "--json"])
    assert r.exit_code == 0, (r.stdout, r.stderr)
    assert json.loads(r.stdout) == store.usage().to_json()
    r = runner.invoke(app, ["du", "--store", str(tmp_path)])
    assert r.exit_code == 0 and table.name in r.stdout and "unreferenced tag" in r.stdout
    assert os.path.isdir(tmp_path)


@pytest.mark.s3
def test_store_usage_on_s3_counts_every_object(s3_store_uri: tuple[str, dict[str, Any]]
                                               ) -> None:
    uri, options = s3_store_uri
    store = sd.Store.open(uri, **options, create=True)
    table = helpers.make_table(store, **{"compaction.strategy": "basic",
                                         "compaction.batch_size": 2})
    table.ingest(rows(100, 1))
    table.ingest(rows(100, 2))
    table.compact()
    # the heartbeat deletes this process's emptied pending-file lease at any moment: done
    # now, so the two listings below see the same objects
    pending.flush()
    u = store.usage()
    listed = {o.key: o.size for o in store.objects.list("") if not o.key.endswith("/")}
    assert u.bytes == sum(listed.values())
    assert u.tables[table.name].unreferenced == {"retention": sum(
        s for k, s in listed.items() if "/data/" in k) - u.tables[table.name].live
        - u.tables[table.name].sidecars}
    assert u.catalog == sum(s for k, s in listed.items() if not k.startswith("tables/"))
