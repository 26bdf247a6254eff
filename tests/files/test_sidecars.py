"""Sidecar names: samples and key filters out of the way of ``*.parquet``
globs, legacy names still read, GC-safe under both names, and migrated by an explicit command."""

from __future__ import annotations

import fnmatch
import glob
import json
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

import sediment as sd
from sediment.cli.app import app
from sediment.files.sidecars import (
    KEYS,
    SAMPLE,
    data_file_of,
    migrate_sidecars,
    parse_sidecar,
    read_sidecar,
    sidecar_name,
    sidecar_names,
    with_sidecars,
)
from sediment.maintenance.gc import gc

SCHEMA = sd.Schema(row_keys=[("key", pa.string())], sort_keys=[("ts", pa.int64())],
                   values=[("value", pa.int64())])
ROWS = 3000


def data(n: int = ROWS, start: int = 0) -> pa.Table:
    return pa.table({"key": [f"k{i % 997:04d}" for i in range(start, start + n)],
                     "ts": list(range(start, start + n)),
                     "value": [i * 7 for i in range(start, start + n)]})


def make_table(root: Path) -> sd.Table:
    store = sd.Store.open(str(root / "store"), create=True)
    table = store.create_table("t", SCHEMA, split_points=["k0300", "k0600"],
                               properties={"parquet.row_group_rows": 256})
    table.ingest(data())
    table.ingest(data(500, ROWS))  # several files per leaf
    return table


def stored(table: sd.Table) -> set[str]:
    return {o.key for o in table._handle.objects.list("data/")}


def to_legacy(table: sd.Table) -> int:
    """Rename every sidecar to its legacy name: a store as written before this layout."""
    objects = table._handle.objects
    n = 0
    for key in sorted(stored(table)):
        s = parse_sidecar(key)
        if s is not None and not s.legacy:
            objects.put(sidecar_name(s.data_file, s.kind, legacy=True), objects.get(key))
            objects.delete_many([key])
            n += 1
    return n


def sorted_query(table: sd.Table, **kw: object) -> pa.Table:
    return table.query(**kw).sort_by([("key", "ascending"), ("ts", "ascending")])


def test_names_round_trip() -> None:
    f = "data/p1/0123abcd.parquet"
    assert sidecar_name(f, SAMPLE) == "data/p1/_0123abcd.sample"
    assert sidecar_name(f, KEYS) == "data/p1/_0123abcd.keys"
    assert sidecar_name(f, SAMPLE, legacy=True) == "data/p1/0123abcd.sample.parquet"
    assert sidecar_name(f, KEYS, legacy=True) == "data/p1/0123abcd.keys"
    assert len(set(sidecar_names(f))) == 4
    for name in sidecar_names(f):
        assert data_file_of(name) == f
        s = parse_sidecar(name)
        assert s is not None and sidecar_name(f, s.kind, legacy=s.legacy) == name
    for current in (sidecar_name(f, k) for k in (SAMPLE, KEYS)):
        assert not fnmatch.fnmatch(current, "*.parquet")
        assert current.rsplit("/", 1)[1].startswith("_")  # skipped by directory readers
    assert data_file_of(f) == f and parse_sidecar(f) is None
    assert sidecar_name("f.parquet", SAMPLE) == "_f.sample"
    assert with_sidecars([f]) == [f, sidecar_name(f, SAMPLE), sidecar_name(f, KEYS)]
    assert set(with_sidecars([f], legacy=True)) == {f, *sidecar_names(f)}
    with pytest.raises(ValueError, match="not a data file"):
        sidecar_name("data/p1/_x.sample", SAMPLE)


def test_parquet_glob_reads_exactly_the_data_files(tmp_path: Path) -> None:
    table = make_table(tmp_path)
    folder = Path(table._handle.objects.path("data"))
    listed = stored(table)
    assert any(parse_sidecar(k) is not None for k in listed)  # sidecars are there...
    paths = sorted(glob.glob(str(folder / "**" / "*.parquet"), recursive=True))
    names = {f.filename for f in table.files()}
    assert {p[len(str(folder)) - len("data"):] for p in paths} == names  # ...but not globbed
    rows = ds.dataset(paths, format="parquet").to_table()
    assert rows.num_rows == ROWS + 500 == sum(f.records for f in table.files())
    assert sorted(rows.column("ts").to_pylist()) == list(range(ROWS + 500))
    # a directory read (pyarrow skips names starting with "_" or ".") sees the same rows
    assert ds.dataset(str(folder), format="parquet").count_rows() == ROWS + 500


def test_legacy_store_read_gc_migrate(tmp_path: Path) -> None:
    table = make_table(tmp_path)
    expected = sorted_query(table)
    lookup = sorted_query(table, keys=["k0042", "k0700"])
    n = to_legacy(table)
    assert n == 2 * len({f.filename for f in table.files()})
    legacy = stored(table)
    store = sd.Store.open(str(tmp_path / "store"))  # a fresh process: nothing cached
    old = store.table("t")
    assert sorted_query(old).equals(expected)
    assert sorted_query(old, keys=["k0042", "k0700"]).equals(lookup)
    for f in old.files():
        name, raw = read_sidecar(old._handle.objects, f.filename, SAMPLE)
        assert name == sidecar_name(f.filename, SAMPLE, legacy=True)
        assert pq.read_table(pa.BufferReader(raw)).num_rows > 0
        assert old._handle.samples.sample(f.filename).num_rows > 0
    assert stored(old) == legacy  # reads never write (nor migrate)

    # GC and orphan detection keep the legacy sidecars of live files
    gc(old._handle, now=time.time() + 10 * 86400, orphan_timeout=0)
    assert stored(old) == legacy
    # compaction (which estimates from the legacy samples) then GC delete old files with
    # their legacy sidecars; new files get current names
    old.set_properties({"gc.delay_seconds": 0, "retention.seconds": 0})
    old.maintain()
    gc(old._handle, now=time.time() + 10 * 86400, orphan_timeout=0)
    assert sorted_query(old).equals(expected)
    live = {f.filename for f in old.files()}
    for key in stored(old):
        assert data_file_of(key) in live, f"{key} outlived its data file"

    # migration: only current names afterwards, same answers, and a rerun does nothing
    dry = migrate_sidecars(old._handle.objects, dry_run=True)
    assert dry.dry_run and dry.renamed == dry.legacy
    before = stored(old)
    assert before == stored(old)
    r = migrate_sidecars(old._handle.objects)
    assert r.legacy == dry.legacy and r.renamed == dry.renamed
    after = stored(old)
    assert all(not s.legacy for k in after if (s := parse_sidecar(k)) is not None)
    assert {data_file_of(k) for k in after} == live
    for f in live:
        assert set(with_sidecars([f])) <= after
    assert sorted_query(sd.Store.open(str(tmp_path / "store")).table("t")).equals(expected)
    again = migrate_sidecars(old._handle.objects)
    assert (again.legacy, again.renamed, again.removed) == (0, 0, 0)
    assert stored(old) == after


def test_interrupted_migration_is_finished_by_a_rerun(tmp_path: Path) -> None:
    table = make_table(tmp_path)
    objects = table._handle.objects
    f = table.files()[0].filename
    # a crash between copy and delete leaves both names: readers find the current one
    for kind in (SAMPLE, KEYS):
        objects.put(sidecar_name(f, kind, legacy=True), objects.get(sidecar_name(f, kind)))
    assert read_sidecar(objects, f, SAMPLE)[0] == sidecar_name(f, SAMPLE)
    gc(table._handle, now=time.time() + 10 * 86400, orphan_timeout=0)
    assert set(sidecar_names(f)) <= stored(table)  # a live file's sidecars: kept
    r = migrate_sidecars(objects)
    assert (r.legacy, r.renamed, r.removed) == (2, 0, 2)
    assert not {sidecar_name(f, k, legacy=True) for k in (SAMPLE, KEYS)} & stored(table)


def test_migrate_sidecars_command(tmp_path: Path) -> None:
    table = make_table(tmp_path)
    expected = sorted_query(table)
    to_legacy(table)
    legacy = stored(table)
    runner = CliRunner()
    root = str(tmp_path / "store")
    res = runner.invoke(app, ["migrate-sidecars", "--store", root, "t", "--dry-run", "--json"])
    assert res.exit_code == 0, res.output
    [row] = json.loads(res.stdout)
    assert row["table"] == "t" and row["to_rename"] == row["legacy_sidecars"] > 0
    assert stored(table) == legacy  # a dry run writes nothing
    res = runner.invoke(app, ["migrate-sidecars", "--store", root])
    assert res.exit_code == 0, res.output
    assert "renamed" in res.stdout
    assert all(not s.legacy for k in stored(table) if (s := parse_sidecar(k)) is not None)
    assert sorted_query(sd.Store.open(root).table("t")).equals(expected)
    res = runner.invoke(app, ["migrate-sidecars", "--store", root, "t", "--json"])
    assert res.exit_code == 0 and json.loads(res.stdout)[0]["legacy_sidecars"] == 0
    res = runner.invoke(app, ["migrate-sidecars", "--store", root, "nope"])
    assert res.exit_code != 0
