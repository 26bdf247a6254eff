"""The runner registry (sediment.runners): job kind x runner name -> a dotted path, imported
when chosen. What it proves: the built-ins resolve to the functions they name, an unknown
runner is refused naming it and the known ones (before a dump writes anything), a runner
registered by dotted path from outside the library is the one that runs, pyspark missing
still says what to install, and no library module outside the Spark room (and the CLI and
demo above it) imports sediment.spark, at module level or in a function."""

from __future__ import annotations

import ast
import sys
import tomllib
import uuid
from pathlib import Path
from typing import Any

import pytest

import sediment
from helpers import make_table, rows
from sediment.compaction.runner import run_jobs_locally
from sediment.dump.local_runner import run_tasks_locally
from sediment.errors import JobError, MissingDependencyError
from sediment.ingest.batcher import ingest_batch
from sediment.runners import load_runner, register_runner, runner_names, runner_path

SRC = Path(sediment.__file__).resolve().parent
PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"
KINDS = ("batcher", "compaction", "dump")


def test_every_kind_has_a_local_and_a_spark_runner() -> None:
    for kind in KINDS:
        assert {"local", "spark"} <= set(runner_names(kind)), kind
    assert load_runner("compaction", "local") is run_jobs_locally
    assert load_runner("dump", "local") is run_tasks_locally
    assert load_runner("batcher", "local") is ingest_batch


@pytest.mark.parametrize("kind", KINDS)
def test_spark_runners_are_functions_of_the_spark_room(kind: str) -> None:
    """Read, not imported (that needs pyspark): the path names a function defined at the
    top of a module of sediment.spark."""
    module, _, function = runner_path(kind, "spark").partition(":")
    assert module.startswith("sediment.spark.")
    path = SRC.parent / (module.replace(".", "/") + ".py")
    tree = ast.parse(path.read_text())
    assert function in {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}


def test_an_unknown_runner_is_refused_naming_it_and_the_known_ones(tmp_path: Path) -> None:
    table = make_table(tmp_path / "s", name="t", **{"compaction.strategy": "basic",
                                                    "compaction.batch_size": 2})
    table.ingest(rows(20, 1))
    table.ingest(rows(20, 2))
    known = r"\(runners: local, spark\)"
    with pytest.raises(JobError, match=f"^table t: unknown compaction runner 'sprak' {known}"):
        table.compact(runner="sprak")
    with pytest.raises(JobError, match=f"^table t: unknown compaction runner 'sprak' {known}"):
        table.maintain(runner="sprak")
    with pytest.raises(JobError, match=f"^table t: unknown compaction runner 'sprak' {known}"):
        table.store.maintain(runner="sprak")
    with pytest.raises(JobError, match=f"^table t: unknown dump runner 'threads' {known}"):
        table.dump(str(tmp_path / "dumps"), runner="threads")
    # refused before anything was written: no lock, no tag, no job; a dump now just runs
    assert table.tags() == [] and table.jobs("dump") == []
    assert not (tmp_path / "dumps").exists()
    assert table.dump(str(tmp_path / "dumps")).rows == 40
    assert table.compact().jobs_committed == 1


def probe_compaction_runner(table: Any, state: Any, jobs: Any, **kw: Any) -> Any:
    """A compaction runner registered by its dotted path below: records, then runs locally."""
    CALLS.append(("compaction", [j.job_id for j in jobs], sorted(kw)))
    return run_jobs_locally(table, state, jobs, **kw)


def probe_dump_runner(table: Any, dest: Any, job_id: str, version: int, tasks: Any,
                      owner: Any = None, **kw: Any) -> None:
    CALLS.append(("dump", [t.task_id for t in tasks], sorted(kw)))
    run_tasks_locally(table, dest, job_id, version, tasks, owner, **kw)


CALLS: list[tuple[str, list[str], list[str]]] = []
NOT_A_FUNCTION = 42


def test_a_runner_registered_by_dotted_path_is_the_one_that_runs(tmp_path: Path) -> None:
    name = f"probe-{uuid.uuid4().hex[:8]}"
    register_runner("compaction", name, f"{__name__}:probe_compaction_runner")
    register_runner("dump", name, f"{__name__}:probe_dump_runner")
    assert name in runner_names("compaction") and name in runner_names("dump")
    table = make_table(tmp_path / "s", **{"compaction.strategy": "basic",
                                          "compaction.batch_size": 2})
    table.ingest(rows(30, 1))
    table.ingest(rows(30, 2))
    CALLS.clear()
    ticks: list[tuple[int, int]] = []
    result = table.compact(runner=name, progress=lambda d, t: ticks.append((d, t)))
    assert result.jobs_committed == 1 and len(table.files()) == 1
    (call,) = CALLS
    assert call[0] == "compaction" and len(call[1]) == 1 and call[2] == ["head", "on_done"]
    assert ticks == [(0, 1), (1, 1)]  # the runner's on_done drives the progress
    CALLS.clear()
    job = table.dump(str(tmp_path / "dumps"), runner=name)
    assert job.rows == 60 and CALLS and CALLS[0][0] == "dump"
    assert CALLS[0][2] == ["on_done", "threads"]


def test_bad_registrations_are_refused(tmp_path: Path) -> None:
    with pytest.raises(JobError, match=r"unknown job kind 'ingest' .*\(kinds: batcher, "
                                       r"compaction, dump\)"):
        register_runner("ingest", "x", f"{__name__}:probe_dump_runner")
    with pytest.raises(JobError, match="is not a dotted path"):
        register_runner("dump", "x", "tests.no_function")
    name = f"broken-{uuid.uuid4().hex[:8]}"
    register_runner("dump", name, "sediment_no_such_module.runner:run")
    with pytest.raises(JobError, match=f"dump runner '{name}': no module "
                                       "'sediment_no_such_module.runner'"):
        load_runner("dump", name)
    register_runner("dump", name, f"{__name__}:NOT_A_FUNCTION")
    with pytest.raises(JobError, match="names no function"):
        load_runner("dump", name)


def test_the_spark_runners_without_pyspark_say_what_to_install(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """pyspark made unimportable (None in sys.modules) and sediment.spark forgotten, so it is
    imported again: every Spark runner raises MissingDependencyError, not an ImportError."""
    monkeypatch.setitem(sys.modules, "pyspark", None)
    for mod in [m for m in sys.modules if m == "sediment.spark" or
                m.startswith("sediment.spark.")]:
        monkeypatch.delitem(sys.modules, mod)
    for kind in KINDS:
        with pytest.raises(MissingDependencyError, match=r"pip install .*\[spark\]"):
            load_runner(kind, "spark")


def _imports_of_spark(path: Path) -> list[int]:
    """Lines of ``path`` that import sediment.spark (module level or in a function)."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text())):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            names = [node.module or ""] + [f"{node.module}.{a.name}" for a in node.names]
        if any(n == "sediment.spark" or n.startswith("sediment.spark.") for n in names):
            lines.append(node.lineno)
    return lines


def test_only_the_spark_room_and_what_sits_above_it_import_spark() -> None:
    above = {SRC / "spark", SRC / "cli"}
    offenders = [f"{p.relative_to(SRC)}:{line}" for p in sorted(SRC.rglob("*.py"))
                 if not any(a in p.parents for a in above) and p != SRC / "demo.py"
                 for line in _imports_of_spark(p)]
    assert offenders == []


def test_the_layers_contract_ignores_no_spark_import() -> None:
    contracts = tomllib.loads(PYPROJECT.read_text())["tool"]["importlinter"]["contracts"]
    ignored = [i for c in contracts for i in c.get("ignore_imports", [])]
    assert [i for i in ignored if "sediment.spark" in i] == []
    assert "sediment.iterators.base -> sediment.iterators.registry" not in ignored
