"""Packaging: the distribution is ``sediment-lsm`` with optional extras, pyspark is optional
(everything but Spark works without it, and Spark says what to install), and the wheel ships
LICENSE and ``py.typed``.

"Without pyspark" is a child interpreter whose ``sitecustomize`` (on ``PYTHONPATH``) puts a meta
path finder first that refuses ``pyspark`` and its submodules, as if it were not installed.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from helpers import build_wheel

ROOT = Path(__file__).resolve().parents[2]
HINT = "pip install 'sediment-lsm[spark]'"

_NO_PYSPARK = '''
import sys


class _NoPyspark:
    """Refuses pyspark, as if it were not installed."""

    def find_spec(self, name, path=None, target=None):
        if name == "pyspark" or name.startswith("pyspark."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, _NoPyspark())
'''


@pytest.fixture(scope="module")
def no_pyspark_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    site = tmp_path_factory.mktemp("no-pyspark")
    (site / "sitecustomize.py").write_text(_NO_PYSPARK)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SEDIMENT_", "PYSPARK_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(site), *filter(None, [env.get("PYTHONPATH")])])
    env["COLUMNS"] = "200"
    return env


def _run(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=120)


def _python(code: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return _run(["-c", code], env, cwd)


def _cli(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return _run(["-m", "sediment.cli", *args], env, cwd)


def test_distribution_name_and_extras() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["name"] == "sediment-lsm"
    assert not any(d.startswith("pyspark") for d in project["dependencies"])
    extras = project["optional-dependencies"]
    assert [d for d in extras["spark"] if d.startswith("pyspark")]
    assert [d for d in extras["polars"] if d.startswith("polars")]
    assert [d for d in extras["duckdb"] if d.startswith("duckdb")]
    # ./dev installs .[test]: it must bring every engine the tests run.
    assert any(d.startswith("sediment-lsm[") and all(e in d for e in ("spark", "polars", "duckdb"))
               for d in extras["test"])


def test_install_lines_use_the_distribution_name() -> None:
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        for line in doc.read_text().splitlines():
            if "pip install" in line and "sediment" in line:
                assert "sediment-lsm" in line, f"{doc.name}: {line.strip()}"


def _paragraphs(text: str) -> list[str]:
    return [p for p in re.split(r"\n\s*\n", text) if p.strip()]


INDEX_INSTALL = re.compile(r"pip install (?!.*--find-links)[^#`]*\bsediment-lsm\b")
"""An install of the distribution from the package index, where it is not published yet."""


def test_install_lines_lead_with_what_works_today() -> None:
    """The package is not on the package index yet: every page's first install line installs
    from a checkout (``pip install .``/``'.[extra]'``) or a wheel built from one
    (``--find-links dist``), and any line installing ``sediment-lsm`` from the index says, in
    its paragraph, that it works "once released"."""
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        text = doc.read_text()
        installs = [ln for ln in text.splitlines() if re.search(r"pip install \S", ln)
                    and ("sediment" in ln or "'.[" in ln or "pip install ." in ln)]
        if installs:
            first = installs[0]
            assert re.search(r"pip install (-e )?(\.|'\.\[)|--find-links", first), \
                f"{doc.name}: {first.strip()}"
        for para in _paragraphs(text):
            if INDEX_INSTALL.search(para):
                assert "once released" in para.lower(), f"{doc.name}: {para.strip()[:200]}"


def test_import_sediment_does_not_import_pyspark(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SEDIMENT_")}
    out = _python("import sys, sediment, sediment.cli.app\n"
                  "print(sorted(m for m in sys.modules if m.split('.')[0] == 'pyspark'))",
                  env, tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


@pytest.mark.slow  # builds a venv without PySpark: the full lane
def test_without_pyspark_the_cli_works_and_spark_commands_say_what_to_install(
        tmp_path: Path, no_pyspark_env: dict[str, str]) -> None:
    env = {**no_pyspark_env, "SEDIMENT_STORE": str(tmp_path / "store")}
    blocked = _python("import pyspark", env, tmp_path)
    assert blocked.returncode != 0 and "ModuleNotFoundError" in blocked.stderr

    pq.write_table(pa.table({"key": ["b", "a"], "ts": [2, 1], "value": ["x", "y"]}),
                   tmp_path / "in.parquet")
    for args in (["--help"], ["init"],
                 ["create-table", "events", "--row-key", "key:string", "--sort-key", "ts:int64",
                  "--value", "value:string"],
                 ["ingest", "events", str(tmp_path / "in.parquet")]):
        done = _cli(args, env, tmp_path)
        assert done.returncode == 0, (args, done.stdout, done.stderr)
    query = _cli(["query", "events", "--key", "a", "--format", "json"], env, tmp_path)
    assert query.returncode == 0, query.stderr
    assert '"y"' in query.stdout

    spark = _cli(["bulk-import", "events", str(tmp_path / "in.parquet")], env, tmp_path)
    assert spark.returncode == 1, (spark.stdout, spark.stderr)
    assert "Traceback" not in spark.stderr
    assert spark.stderr.startswith("error:") and HINT in spark.stderr, spark.stderr


@pytest.mark.slow  # builds a venv without PySpark: the full lane
def test_without_pyspark_the_api_works_and_spark_raises_missing_dependency(
        tmp_path: Path, no_pyspark_env: dict[str, str]) -> None:
    code = f'''
import pyarrow as pa
import sediment as sd
from sediment.errors import MissingDependencyError, SedimentError

assert issubclass(MissingDependencyError, SedimentError)
store = sd.Store.open({str(tmp_path / "store")!r}, create=True)
schema = sd.Schema(row_keys=[("key", pa.string())], values=[("value", pa.string())])
table = store.create_table("events", schema, split_points=["m"])
table.ingest(pa.table({{"key": ["b", "z"], "value": ["x", "y"]}}))
assert table.query(keys=["b"]).column("value").to_pylist() == ["x"]
table.maintain()
for spark_call in (lambda: __import__("sediment.spark"),
                   lambda: table.compact(runner="spark")):
    try:
        spark_call()
    except MissingDependencyError as exc:
        assert {HINT!r} in str(exc), exc
    else:
        raise AssertionError("no MissingDependencyError")
print("ok")
'''
    done = _python(code, no_pyspark_env, tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


@pytest.mark.slow  # builds a wheel and installs it: the full lane
def test_wheel_ships_license_and_py_typed(tmp_path: Path) -> None:
    """Builds the wheel from a copy of the sources (not the work tree: no stale build/): its
    license, py.typed, extras, and the dashboard's templates and static files."""
    wheel = build_wheel(ROOT, tmp_path)
    names = zipfile.ZipFile(wheel).namelist()
    assert "sediment/py.typed" in names
    licenses = [n for n in names if n.endswith("/LICENSE") and ".dist-info/" in n]
    assert licenses, names
    text = zipfile.ZipFile(wheel).read(licenses[0]).decode()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text
    metadata = next(n for n in names if n.endswith(".dist-info/METADATA"))
    meta = zipfile.ZipFile(wheel).read(metadata).decode()
    assert "Name: sediment-lsm" in meta
    assert "Provides-Extra: spark" in meta
    assert not any(line.startswith("Requires-Dist: pyspark") and "extra ==" not in line
                   for line in meta.splitlines())
    # the dashboard's templates and static files, and its extra (one wheel built for both:
    # a build is some 7 s of CPU)
    package = ROOT / "src" / "sediment" / "dashboard"
    shipped = {f"sediment/dashboard/{p.relative_to(package)}"
               for folder in ("templates", "static") for p in (package / folder).iterdir()}
    assert len(shipped) >= 8 and shipped <= set(names), shipped - set(names)
    assert "Provides-Extra: dashboard" in meta
    for dep in ("starlette", "uvicorn", "jinja2", "plotly"):
        assert any(line.startswith(f"Requires-Dist: {dep}") and 'extra == "dashboard"' in line
                   for line in meta.splitlines()), dep
