"""Python iterators in ``sediment query``: a command process that trusts the module
(``--trust-iterator-module``) answers through it, importing it once; a command that trusts
another module only is one error line naming the module (run in this process: the refusal is
decided before any import). The variable's way of trusting is the serve tests'."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

import sediment as sd
from sediment.cli.app import app
from sediment.iterators.trust import TRUST_ENV
from support.iterator_modules import (
    DATA,
    SCHEMA,
    environment,
    even_rows,
    imports_logged,
    keep_even,
    row_set,
    write_iterator_module,
)


def _query(store: str, env: dict[str, str], *before: str, out: Path
           ) -> subprocess.CompletedProcess[str]:
    """``sediment query`` of table ``events`` in a process of its own, to ``out``."""
    return subprocess.run([sys.executable, "-m", "sediment.cli", *before, "query", "--store",
                           store, "events", "--format", "parquet", "-o", str(out)],
                          capture_output=True, text=True, env=env, timeout=120)


@pytest.mark.slow  # a command process (a second or more to start): the full lane
def test_query_loads_a_trusted_module_only(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    name = write_iterator_module(tmp_path, "cli")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv(TRUST_ENV, name)  # this process makes the table
    store = sd.Store.open(str(tmp_path / "store"), create=True)
    store.create_table("events", SCHEMA, properties={
        "query.iterators": json.dumps([keep_even(name)])}).ingest(DATA)
    log = tmp_path / "imports.log"

    by_option = _query(store.uri, environment(tmp_path, None, log),
                       "--trust-iterator-module", name, out=tmp_path / "a.parquet")
    assert by_option.returncode == 0, by_option.stderr
    got = pq.read_table(tmp_path / "a.parquet")
    assert row_set(got) == even_rows(DATA)
    assert imports_logged(log) == 1

    # the refusal needs no process of its own: this one, trusting another module only
    monkeypatch.setenv(TRUST_ENV, "")
    refused = CliRunner().invoke(app, ["--trust-iterator-module", "acme_iters", "query",
                                       "--store", store.uri, "events", "--format", "parquet",
                                       "-o", str(tmp_path / "c.parquet")])
    assert refused.exit_code == 1
    lines = refused.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: table events property "
                                                   "query.iterators: python iterator")
    assert f"module '{name}' is not trusted by this process (trusted: acme_iters)" in lines[0]
    assert not (tmp_path / "c.parquet").exists()
