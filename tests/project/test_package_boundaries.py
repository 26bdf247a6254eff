"""Package boundaries: the pure core does no I/O; every room has its layer; the public namespace.

The import contracts themselves (core is pure, storage knows no tables, state never reaches files,
the library never imports its CLI, SDKs in their rooms, rooms in layers, no cycles) live in
pyproject.toml and are checked by ``lint-imports`` in ``./dev test``. What the tool cannot see is
checked here: submodules of an external package (it sees ``pyarrow``, not ``pyarrow.fs``), calls
of I/O builtins, what importing the core actually loads, and that every room is placed in a layer.
"""

from __future__ import annotations

import ast
import importlib
import json
import subprocess
import sys
import tomllib
from pathlib import Path

import sediment
from helpers import make_table, rows

SRC = Path(sediment.__file__).resolve().parent
CORE = SRC / "core"
PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"

CORE_FORBIDDEN = {
    # the I/O parts of pyarrow (lint-imports sees only the package, and the core uses pyarrow)
    "pyarrow.fs", "pyarrow.parquet", "pyarrow.dataset", "pyarrow.csv", "pyarrow.json",
}
IO_BUILTINS = {"open", "exec", "eval", "__import__"}


def _module_name(path: Path) -> str:
    rel = path.relative_to(SRC.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import in a file, including function-level ones."""
    return _imports_of(path.read_text(), _module_name(path), is_package=path.name == "__init__.py")


def _imports_of(source: str, module: str, *, is_package: bool = False) -> list[tuple[int, str]]:
    package = module if is_package else module.rpartition(".")[0]
    out: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out.extend((node.lineno, a.name) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                mod = ".".join([*base, node.module] if node.module else base)
            else:
                mod = node.module or ""
            out.append((node.lineno, mod))
            out.extend((node.lineno, f"{mod}.{a.name}") for a in node.names)
    return out


def _hits(module: str, forbidden: set[str]) -> bool:
    return any(module == f or module.startswith(f + ".") for f in forbidden)


def _core_closure() -> list[Path]:
    """Files of sediment.core plus every sediment module they import, transitively."""
    todo = sorted(CORE.rglob("*.py"))
    seen: set[Path] = set()
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        for _, mod in _imports(path):
            if not mod.startswith("sediment."):
                continue
            rel = Path(*mod.split(".")[1:])
            for candidate in (SRC / rel.with_suffix(".py"), SRC / rel / "__init__.py"):
                if candidate.is_file():
                    todo.append(candidate)
    return sorted(seen)


def test_core_imports_no_pyarrow_io() -> None:
    closure = _core_closure()
    names = {_module_name(p) for p in closure}
    assert {"sediment.core.transactions", "sediment.core.state", "sediment.schema",
            "sediment.properties", "sediment.errors"} <= names
    problems = [f"{p.relative_to(SRC.parent)}:{line} imports {mod}"
                for p in closure for line, mod in _imports(p) if _hits(mod, CORE_FORBIDDEN)]
    assert problems == []


def test_core_calls_no_io_builtins() -> None:
    problems = []
    for path in _core_closure():
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id in IO_BUILTINS):
                problems.append(f"{path.relative_to(SRC.parent)}:{node.lineno} calls "
                                f"{node.func.id}()")
    assert problems == []


def test_the_checker_sees_imports() -> None:
    """The AST check catches plain, dotted, from-, relative and function-level imports."""
    source = ("import os.path\nfrom pathlib import Path\nfrom . import keys\n"
              "def f():\n    import boto3\n    from ..storage import base\n")
    found = [m for _, m in _imports_of(source, "sediment.core.x")]
    assert found == ["os.path", "pathlib", "pathlib.Path", "sediment.core", "sediment.core.keys",
                     "boto3", "sediment.storage", "sediment.storage.base"]
    assert not [m for m in found if _hits(m, CORE_FORBIDDEN)]
    assert _hits("pyarrow.parquet", CORE_FORBIDDEN)
    assert _hits("pyarrow.fs.S3FileSystem", CORE_FORBIDDEN)
    assert not _hits("pyarrow", CORE_FORBIDDEN) and not _hits("pyarrow.fsx", CORE_FORBIDDEN)


def test_core_imports_nothing_forbidden_at_run_time() -> None:
    """Import the core (and what it pulls in) without the package facade, in a fresh process."""
    code = f"""
import importlib, json, sys, types
pkg = types.ModuleType("sediment")
pkg.__path__ = [{str(SRC)!r}]
sys.modules["sediment"] = pkg
for m in ("sediment.core", "sediment.core.transactions", "sediment.core.state",
          "sediment.core.regions", "sediment.core.keys", "sediment.core.model"):
    importlib.import_module(m)
print(json.dumps(sorted(sys.modules)))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         timeout=60)
    modules = json.loads(out.stdout)
    assert "sediment.core.transactions" in modules
    forbidden = {"boto3", "botocore", "obstore", "pyspark", "sediment.storage", "sediment.state",
                 "sediment.store", "sediment.table", "pyarrow.fs", "pyarrow.parquet",
                 "pyarrow.dataset"}
    assert [m for m in modules if _hits(m, forbidden)] == []


def test_every_room_has_a_layer() -> None:
    """The layers contract names every top-level module, so a new room must be placed."""
    contracts = tomllib.loads(PYPROJECT.read_text())["tool"]["importlinter"]["contracts"]
    (layers,) = [c["layers"] for c in contracts if c.get("id") == "layers"]
    placed = {name.strip() for layer in layers for name in layer.split("|")}
    rooms = {f"sediment.{p.stem if p.is_file() else p.name}" for p in SRC.iterdir()
             if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").is_file()}
    assert rooms == placed


# ---- public namespace ------------------------------------------------------------------------

def test_all_is_sorted_unique_and_importable() -> None:
    names = sediment.__all__
    assert names == sorted(names)
    assert len(set(names)) == len(names)
    for name in names:
        assert hasattr(sediment, name), name
    namespace: dict[str, object] = {}
    exec("from sediment import *", namespace)  # noqa: S102 - the star import is the subject
    assert sorted(k for k in namespace if k != "__builtins__") == sorted(names)


def test_all_names_the_public_api() -> None:
    for name in ("Store", "Schema", "Table", "Range", "Region", "Partition", "FileReference",
                 "HistoryEntry", "SedimentError", "Usage", "StoreUsage"):
        assert name in sediment.__all__
    assert isinstance(sediment.__version__, str)
    # every public class comes from a sediment module
    for name in sediment.__all__:
        obj = getattr(sediment, name)
        if isinstance(obj, type):
            assert obj.__module__.startswith("sediment."), (name, obj.__module__)


def test_all_in_a_fresh_interpreter() -> None:
    code = ("import sediment, json; "
            "print(json.dumps([n for n in sediment.__all__ if not hasattr(sediment, n)]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         timeout=60)
    assert json.loads(out.stdout) == []
    assert importlib.import_module("sediment.errors").SedimentError is sediment.SedimentError


# ---- the façade ------------------------------------------------------------------------------

TABLE_PUBLIC = {
    "abandon_dump", "clear", "compact", "delete_tag", "describe", "diff", "dump", "events",
    "files", "gc", "history", "ingest", "ingest_files", "jobs", "leaves", "maintain", "name",
    "online", "partitions", "pin", "plan", "prepare", "properties", "prune", "query",
    "reinitialise",
    "resolve_version", "restore", "scan", "schema", "set_online", "set_properties", "split",
    "state", "store", "table_id", "tag", "tag_version", "tags", "unpin", "upsert",
    "upsert_files", "verify", "version", "writer", "delete", "purge", "usage",
    "add_columns", "drop_columns", "rename_column", "widen_column", "schema_at",
    "changes", "changes_of", "follow",
    # conversions and engines
    "inspect", "plan_files", "register_datafusion", "to_arrow", "to_batches", "to_duckdb",
    "to_pandas", "to_polars",
}


def test_table_exposes_its_api_not_its_internals(tmp_path: Path) -> None:
    """Internals (state store, object store, samples, status, executors) stay behind the
    handle; what users read of them comes through public methods (jobs, events, files...)."""
    table = make_table(tmp_path)
    public = {n for n in dir(table) if not n.startswith("_")}
    assert public == TABLE_PUBLIC
    for internal in ("states", "objects", "samples", "status", "compaction_iterators"):
        assert not hasattr(table, internal), internal


def test_services_take_the_handle_not_the_facade() -> None:
    """No service module names the façade, even for typing: they take a TableHandle."""
    services = ["compaction", "dump", "ingest", "maintenance", "query", "files", "state",
                "status", "storage", "core", "iterators"]
    offenders = []
    for room in services:
        for path in (SRC / room).rglob("*.py"):
            text = path.read_text()
            if "from sediment.table import" in text or "import sediment.table" in text:
                offenders.append(str(path.relative_to(SRC)))
    assert offenders == []


def test_report_apis_read_job_events(tmp_path: Path) -> None:
    table = make_table(tmp_path, **{"compaction.strategy": "basic",
                                    "compaction.batch_size": 2})
    table.ingest(rows(50, 1))
    table.ingest(rows(50, 2))
    assert table.compact().jobs_committed == 1
    (job,) = table.jobs("compaction")
    assert job["status"] == "committed" and job["rows_in"] == 100
    statuses = [e.status for e in table.events("compaction")]
    assert statuses == ["created", "started", "finished", "committed"]


def test_the_command_line_starts_without_pandas() -> None:
    """Importing the CLI must not import pandas (some 0.24 s of every command's start-up):
    pyarrow imports it on the first ``pa.array()`` of Python objects, so no module builds one
    at import time."""
    import subprocess
    import sys

    code = "import sys, sediment.cli.app; print('pandas' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False"
