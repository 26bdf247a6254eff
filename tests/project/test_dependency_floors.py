"""Every dependency of pyproject.toml has a floor with its reason, and ``./dev test-floors``
installs exactly those floors (tests/support/floors.py turns them into pip constraints).

A floor names the oldest version the package works with: the comment beside it says which
feature sets it, so raising or lowering one is a decision with a reason, and the floors lane
tests it (CONTRIBUTING.md)."""

from __future__ import annotations

import importlib
import pkgutil
import re
import tomllib
from pathlib import Path

import sediment
from support import floors

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"
TEXT = PYPROJECT.read_text(encoding="utf-8")
DATA = tomllib.loads(TEXT)


def _line_of(requirement: str) -> str:
    lines = [ln for ln in TEXT.splitlines() if f'"{requirement}"' in ln]
    assert len(lines) >= 1, requirement
    return lines[0]


def test_every_dependency_has_a_floor_with_its_reason() -> None:
    reqs = floors.requirements(DATA)
    names = {floors.canonical(floors.split(r)[0]) for r in reqs}
    assert {"pyarrow", "datafusion", "numpy", "pandas", "boto3", "typer", "rich", "pyspark",
            "polars", "duckdb", "starlette", "uvicorn", "jinja2", "plotly"} <= names
    for r in reqs:
        assert floors.floor(r), f"{r!r} has no '>=' floor"
        line = _line_of(r)
        assert "#" in line, f"{r!r} has no comment giving its floor's reason"
        reason = line.split("#", 1)[1].strip()
        assert len(reason.split()) >= 2, f"{r!r}: the reason {reason!r} says too little"
        for spec in floors.split(r)[1]:
            if spec.startswith("<"):  # a ceiling: its comment says why
                assert spec in reason, f"{r!r}: the comment does not explain {spec}"


def test_a_package_named_twice_has_one_floor() -> None:
    seen: dict[str, str] = {}
    for r in floors.requirements(DATA):
        name, f = floors.canonical(floors.split(r)[0]), floors.floor(r)
        assert f is not None
        assert seen.setdefault(name, f) == f, f"{name}: floors {seen[name]} and {f}"


def test_the_floors_lane_pins_every_floor_exactly() -> None:
    pins = floors.pins(DATA)
    for r in floors.requirements(DATA):
        name, f = floors.canonical(floors.split(r)[0]), floors.floor(r)
        assert pins[name] == f
    own = floors.canonical(DATA["project"]["name"])
    assert own not in pins  # the package's own extras are not a dependency
    # extras are dropped from a constraint (pip refuses them there)
    assert floors.split("moto[server]>=5.0") == ("moto", [">=5.0"])
    assert floors.floor("pandas>=2.2,<3") == "2.2"


def test_dev_runs_the_quick_lane_on_the_floors() -> None:
    dev = (PYPROJECT.parent / "dev").read_text(encoding="utf-8")
    assert re.search(r"^\s*test-floors\)", dev, re.M)
    assert "tests/support/floors.py" in dev and "--constraint" in dev
    assert ".venv-floors/" in (PYPROJECT.parent / ".gitignore").read_text(encoding="utf-8")


def test_every_module_imports_on_the_installed_versions() -> None:
    """Every module of the package imports (the extras are installed wherever the tests run):
    a name a floor's version lacks fails here, in the quick lane, even in the rooms (Spark) whose
    tests the quick lane leaves out; on ``./dev test-floors`` that proves the floors."""
    names = [m.name for m in pkgutil.walk_packages(sediment.__path__, "sediment.")
             if not m.name.endswith(".__main__")]  # that one runs the CLI
    assert "sediment.spark.datasource" in names and "sediment.dashboard.app" in names
    for name in names:
        importlib.import_module(name)
