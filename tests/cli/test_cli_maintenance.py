"""CLI maintenance commands (compact, split, gc, maintain, their --loop) and reports."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner, Result

import sediment as sd
from helpers import rows
from reference import Reference, assert_matches
from sediment.cli import app
from sediment.workload import benchmark_schema

SCHEMA = benchmark_schema()
PROPS = {"state.cache.refresh_seconds": 0, "compaction.strategy": "basic",
         "compaction.batch_size": 3, "partition.split.threshold": 500,
         "gc.delay_seconds": 0, "retention.seconds": 0, "gc.clock_skew_seconds": 0}


@pytest.fixture(autouse=True)
def _no_store_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SEDIMENT_STORE", raising=False)


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


@pytest.fixture
def store(tmp_path: Path) -> tuple[str, dict[str, Reference]]:
    """Tables ``a`` and ``b`` (3 files of 300 rows each) and ``off`` (offline, 3 files)."""
    root = str(tmp_path / "store")
    st = sd.Store.open(root, create=True)
    refs = {}
    for name in ("a", "b", "off"):
        t = st.create_table(name, SCHEMA, properties=PROPS)
        refs[name] = Reference(SCHEMA)
        for i in range(3):
            data = rows(300, seed={"a": 0, "b": 10, "off": 20}[name] + i)
            t.ingest(data)
            refs[name].add(data)
    st.table("off").set_online(False)
    return root, refs


def table(root: str, name: str) -> sd.Table:
    return sd.Store.open(root).table(name)


def ok(runner: CliRunner, *args: str) -> Result:
    result = runner.invoke(app, list(args))
    assert result.exit_code == 0, (result.stdout, result.stderr, result.exception)
    return result


def fails(runner: CliRunner, *args: str) -> str:
    result = runner.invoke(app, list(args))
    assert result.exit_code == 1, (result.stdout, result.stderr, result.exception)
    assert isinstance(result.exception, SystemExit)
    assert result.stderr.startswith("error: "), result.stderr
    assert "Traceback" not in result.output
    return result.stderr


def json_docs(text: str) -> list[Any]:
    """Every JSON document printed one after the other (a --loop prints one per pass)."""
    dec = json.JSONDecoder()
    out, i = [], 0
    while True:
        while i < len(text) and text[i].isspace():
            i += 1
        if i >= len(text):
            return out
        doc, i = dec.raw_decode(text, i)
        out.append(doc)


def by_table(rows_: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {r["table"]: r for r in rows_}


# ---- compact / split / gc / maintain ----------------------------------------------------------
def test_compact_one_table(runner: CliRunner, store: tuple[str, dict[str, Reference]]) -> None:
    root, refs = store
    (doc,) = json_docs(ok(runner, "compact", "--store", root, "--table", "a", "--json").stdout)
    (row,) = doc
    assert row["table"] == "a" and row["jobs_created"] == 1 and row["jobs_committed"] == 1
    assert row["jobs_failed"] == 0 and row["rows_in"] == row["rows_out"] == 900
    assert isinstance(row["seconds"], float)
    a = table(root, "a")
    assert [f.records for f in a.files()] == [900]
    assert_matches(a.query(), refs["a"])
    assert len(table(root, "b").files()) == 3  # other tables untouched


def test_compact_whole_store_skips_offline(runner: CliRunner,
                                           store: tuple[str, dict[str, Reference]]) -> None:
    root, refs = store
    (doc,) = json_docs(ok(runner, "compact", "--store", root, "--json").stdout)
    rows_ = by_table(doc)
    assert set(rows_) == {"a", "b"}
    assert rows_["a"]["jobs_committed"] == rows_["b"]["jobs_committed"] == 1
    assert len(table(root, "off").files()) == 3
    (doc,) = json_docs(ok(runner, "compact", "--store", root, "--table", "off", "--json").stdout)
    assert doc == [{"table": "off", "skipped": "offline"}]
    assert len(table(root, "off").files()) == 3
    for name in ("a", "b", "off"):
        assert_matches(table(root, name).query(), refs[name])
    text = ok(runner, "compact", "--store", root).stdout  # rich table for people
    assert "a" in text and "committed" in text


def test_split_skips_offline(runner: CliRunner, store: tuple[str, dict[str, Reference]]) -> None:
    root, refs = store
    (doc,) = json_docs(ok(runner, "split", "--store", root, "--json").stdout)
    rows_ = by_table(doc)
    assert set(rows_) == {"a", "b"}
    assert rows_["a"]["splits"] == 1 and rows_["a"]["unsplittable"] == 0
    assert len(table(root, "a").partitions()) == 3
    assert len(table(root, "off").partitions()) == 1
    (doc,) = json_docs(ok(runner, "split", "--store", root, "--table", "off", "--json").stdout)
    assert doc == [{"table": "off", "skipped": "offline"}]
    assert len(table(root, "off").partitions()) == 1
    assert_matches(table(root, "a").query(), refs["a"])


def test_gc_runs_on_every_table(runner: CliRunner,
                                store: tuple[str, dict[str, Reference]]) -> None:
    root, refs = store
    ok(runner, "compact", "--store", root, "--table", "a")
    (doc,) = json_docs(ok(runner, "gc", "--store", root, "--json").stdout)
    rows_ = by_table(doc)
    assert set(rows_) == {"a", "b", "off"}  # GC also cleans offline tables
    assert rows_["a"]["deleted"] == 3 and rows_["b"]["deleted"] == 0
    assert rows_["a"]["orphans_deleted"] == 0 and rows_["a"]["uploads_aborted"] == 0
    a = table(root, "a")
    assert a.state().unreferenced == {}
    assert_matches(a.query(), refs["a"])


def test_maintain_store_and_table(runner: CliRunner,
                                  store: tuple[str, dict[str, Reference]]) -> None:
    root, refs = store
    (doc,) = json_docs(ok(runner, "maintain", "--store", root, "--json").stdout)
    rows_ = by_table(doc)
    assert set(rows_) == {"a", "b", "off"}
    for name in ("a", "b"):
        assert rows_[name]["splits"] >= 1 and rows_[name]["jobs"] >= 1
        assert rows_[name]["failed"] == 0 and rows_[name]["passes"] >= 2
    assert rows_["off"] == {"table": "off", "passes": 1, "splits": 0, "jobs": 0, "failed": 0,
                            "deleted": 0, "seconds": rows_["off"]["seconds"]}
    off = table(root, "off")
    assert len(off.files()) == 3 and len(off.partitions()) == 1
    for name in ("a", "b", "off"):
        t = table(root, name)
        assert_matches(t.query(), refs[name])
    a = table(root, "a")
    assert all(p.is_leaf or not a.state().references(p.id) for p in a.partitions())
    (doc,) = json_docs(ok(runner, "maintain", "--store", root, "--table", "a",
                          "--json").stdout)
    assert doc[0]["passes"] == 1 and doc[0]["jobs"] == 0


def test_one_off_maintain_prunes_as_the_loop_does(runner: CliRunner, tmp_path: Path,
                                                  no_prune_grace: None) -> None:
    """``sediment maintain`` without --loop ends each table with the loop's metadata bounds:
    log entries and snapshots past retention pruned, events past their retention rolled up."""
    root = str(tmp_path / "store")
    t = sd.Store.open(root, create=True).create_table("p", SCHEMA, properties={
        **PROPS, "state.snapshot.interval": 3, "status.retention.seconds": 0})
    ref = Reference(SCHEMA)
    for i in range(7):
        data = rows(30, seed=i)
        t.ingest(data)
        ref.add(data)
    objects = t._handle.objects
    prefixes = ("log/", "snapshots/", "objects/", "status/")

    def metadata() -> set[str]:
        return {o.key for p in prefixes for o in objects.list(p)
                if not o.key.startswith("status/rollup/")}

    before = metadata()
    (doc,) = json_docs(ok(runner, "maintain", "--store", root, "--table", "p",
                          "--json").stdout)
    (row,) = doc
    assert row["jobs"] >= 1
    gone = before - metadata()
    assert {k.split("/")[0] for k in gone} >= {"log", "snapshots", "status"}
    # it counts what it deleted of the old objects and of those the pass itself wrote
    assert row["pruned"] >= len(gone)
    t = table(root, "p")
    assert t._handle.states.earliest_version() > 1
    assert len(list(objects.list("log/"))) <= 3 + 1  # up to the newest snapshot's interval
    assert [e.version for e in t.history()][-1] == t.version
    assert_matches(t.query(), ref)


@pytest.mark.parametrize("command", ["compact", "split", "gc", "maintain"])
def test_loop_with_max_loops(runner: CliRunner, store: tuple[str, dict[str, Reference]],
                             command: str) -> None:
    root, refs = store
    out = ok(runner, command, "--store", root, "--table", "a", "--loop", "--max-loops", "2",
             "--interval", "0.01", "--json").stdout
    docs = [json.loads(line) for line in out.splitlines()]  # a loop prints JSON lines
    assert len(docs) == 2
    assert all(d["time"].endswith("Z") for d in docs)  # each line says when it was
    assert all(d["table"] == "a" for d in docs)
    if command == "compact":
        assert docs[0]["jobs_committed"] == 1 and docs[1]["jobs_created"] == 0
    assert_matches(table(root, "a").query(), refs["a"])


def test_maintenance_errors(runner: CliRunner, tmp_path: Path,
                            store: tuple[str, dict[str, Reference]]) -> None:
    root, _ = store
    assert "no Sediment store" in fails(runner, "compact", "--store", str(tmp_path / "nope"))
    assert "nope" in fails(runner, "split", "--store", root, "--table", "nope")
    assert "no store given" in fails(runner, "gc")


# ---- reports -------------------------------------------------------------------------------------
def test_report_partitions(runner: CliRunner, store: tuple[str, dict[str, Reference]]) -> None:
    root, _ = store
    ok(runner, "maintain", "--store", root, "--table", "a")
    a = table(root, "a")
    state = a.state()
    rows_ = json.loads(ok(runner, "report", "partitions", "--store", root, "--table", "a",
                          "--json").stdout)
    assert {r["id"] for r in rows_} == set(state.partitions)
    for r in rows_:
        refs = state.references(r["id"])
        p = state.partitions[r["id"]]
        assert r["leaf"] == p.is_leaf and r["parent"] == p.parent_id
        assert r["files"] == len(refs) and r["records"] == sum(f.records for f in refs.values())
        assert r["children"] == list(p.children)
    assert sum(r["records"] for r in rows_ if r["leaf"]) == 900
    text = ok(runner, "report", "partitions", "--store", root, "--table", "a").stdout
    assert "root node" in text
    leaves = [r for r in rows_ if r["leaf"]]
    for r in leaves:
        assert r["id"] in text
        assert f"records={r['records']:,} files={r['files']}" in text
    # the tree: one line per partition, indented four columns per level below the root
    lines = text.splitlines()
    assert len(lines) == len(rows_)
    for r in rows_:
        (line,) = [ln for ln in lines if f"{r['id']} {'leaf' if r['leaf'] else 'node'} " in ln]
        assert line.index(r["id"]) == 4 * len(state.ancestors(r["id"]))


def test_report_files_jobs_tasks(runner: CliRunner,
                                 store: tuple[str, dict[str, Reference]]) -> None:
    root, _ = store
    ok(runner, "compact", "--store", root, "--table", "a")
    a = table(root, "a")
    files = json.loads(ok(runner, "report", "files", "--store", root, "--table", "a",
                          "--json").stdout)
    assert files == [r._asdict() for r in a.files()]
    assert files[0]["records"] == 900 and files[0]["job_id"] is None
    text = ok(runner, "report", "files", "--store", root, "--table", "a").stdout
    assert "1 file references" in text
    jobs = json.loads(ok(runner, "report", "jobs", "--store", root, "--table", "a",
                         "--json").stdout)
    assert len(jobs) == 1 and jobs[0]["status"] == "committed"
    assert jobs[0]["inputs"] == 3 and jobs[0]["rows_out"] == 900
    assert "1 compaction jobs" in ok(runner, "report", "jobs", "--store", root,
                                     "--table", "a").stdout
    tasks = json.loads(ok(runner, "report", "tasks", "--store", root, "--table", "a",
                          "--json").stdout)
    kinds = [t["kind"] for t in tasks]
    assert kinds.count("ingest") == 3 and kinds.count("compaction") == 4
    assert [t["time"] for t in tasks] == sorted(t["time"] for t in tasks)
    assert {"time", "kind", "job_id", "status", "partition_id", "details"} <= set(tasks[0])
    text = ok(runner, "report", "tasks", "--store", root, "--table", "a").stdout
    assert f"{len(tasks)} events" in text
    # an untouched table has no jobs
    assert json.loads(ok(runner, "report", "jobs", "--store", root, "--table", "b",
                         "--json").stdout) == []


def test_report_errors(runner: CliRunner, store: tuple[str, dict[str, Reference]]) -> None:
    root, _ = store
    err = fails(runner, "report", "nonsense", "--store", root, "--table", "a")
    assert "unknown report 'nonsense'" in err
    assert "nope" in fails(runner, "report", "files", "--store", root, "--table", "nope")
    result = runner.invoke(app, ["report", "files", "--store", root])
    assert result.exit_code != 0  # --table is required


def test_maintain_loop_runs_the_batcher_and_reports_its_leases(
        runner: CliRunner, store: tuple[str, dict[str, Reference]], tmp_path: Path) -> None:
    """Files queued with `batcher submit` are ingested by `maintain --loop` with no other
    command; `report maintainers` shows the loop's leases, released when it stopped."""
    root, refs = store
    sd.Store.open(root).table("a").set_properties({"batcher.max_age_seconds": 0})
    paths = []
    for i in range(2):
        data = rows(50, seed=100 + i)
        path = tmp_path / f"queued-{i}.parquet"
        pq.write_table(data, path)
        refs["a"].add(data)
        paths.append(str(path))
    ok(runner, "batcher", "submit", "a", *paths, "--store", root)
    queued = ok(runner, "batcher", "status", "a", "--store", root).stdout
    assert "queue depth" in queued and "2 request(s)" in queued and " s ago" in queued
    out = ok(runner, "maintain", "--store", root, "--loop", "--max-loops", "2", "--interval",
             "0.3", "--workers", "thread", "--batcher-threads", "2", "--json").stdout
    docs = [json.loads(line) for line in out.splitlines()]
    assert sum(int(d["ingests"]) for d in docs if d["table"] == "a") == 1
    # every row has the same keys, from the first report on (0 before the lane reached it)
    assert all({"ingests", "ingests_failed"} <= set(d) for d in docs)
    assert_matches(table(root, "a").query(), refs["a"])
    status = json.loads(ok(runner, "batcher", "status", "a", "--store", root, "--json").stdout)
    assert status["pending"]["requests"] == 0 and status["pending"]["oldest_age_seconds"] is None

    report = json.loads(ok(runner, "report", "maintainers", "--store", root, "--json").stdout)
    assert report["members"] == []  # it left when it stopped...
    leases = {r["lease"]: r for r in report["leases"]}
    assert set(leases) == {"a", "b", "off", "(store)"}  # ...letting every lease go
    assert {r["state"] for r in leases.values()} == {"released"}
    assert len({r["member"] for r in leases.values()}) == 1
    text = ok(runner, "report", "maintainers", "--store", root).stdout
    assert "0 maintainers" in text and "4 leases" in text and "released" in text


def test_loop_arguments_that_cannot_work_are_refused_before_anything_runs(
        runner: CliRunner, store: tuple[str, dict[str, Reference]]) -> None:
    """A table name mistyped (the loop would report it for ever and exit 0), a loop interval
    of no time (it would spin a core) and a negative orphan timeout: refused at once."""
    root, _ = store
    before = table(root, "a").version
    assert "'nosuch'" in fails(runner, "maintain", "--loop", "--table", "nosuch",
                               "--max-loops", "1", "--store", root)
    for args in (["maintain", "--loop", "--interval", "0"],
                 ["compact", "--loop", "--interval", "-1"],
                 ["gc", "--orphan-timeout", "-5"]):
        result = runner.invoke(app, [*args, "--max-loops", "1", "--store", root]
                               if "--loop" in args else [*args, "--store", root])
        assert result.exit_code == 2, (args, result.output)
        assert "must be" in result.output, result.output
    assert table(root, "a").version == before
