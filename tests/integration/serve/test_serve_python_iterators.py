"""Python iterators over Flight, against one ``sediment serve`` process that trusts one module
(by ``$SEDIMENT_TRUSTED_ITERATOR_MODULES``) and not another, both on its Python path: the
trusted one runs in tables' properties, in requests and in ``create-table``; the other is
refused in each, as IteratorModuleError naming the module, and the server never imports it."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from serve_helpers import Server

import sediment as sd
from sediment.errors import IteratorModuleError
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


@pytest.fixture(scope="module")
def modules(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, str]:
    folder = tmp_path_factory.mktemp("iterator-modules")
    return folder, write_iterator_module(folder, "served"), write_iterator_module(folder,
                                                                                  "stranger")


@pytest.fixture(scope="module")
def served(modules: tuple[Path, str, str], start_server: Callable[..., Server],
           tmp_path_factory: pytest.TempPathFactory) -> tuple[Server, sd.Store, Path]:
    folder, trusted, _ = modules
    store = sd.Store.open(str(tmp_path_factory.mktemp("store") / "s"), create=True)
    with pytest.MonkeyPatch.context() as mp:  # this process makes a table using it
        mp.syspath_prepend(str(folder))
        mp.setenv(TRUST_ENV, trusted)
        store.create_table("evens", SCHEMA, properties={
            "query.iterators": json.dumps([keep_even(trusted)])}).ingest(DATA)
    store.create_table("plain", SCHEMA).ingest(DATA)
    log = folder / "imports.log"
    env = environment(folder, trusted, log)
    server = start_server(store.uri, env={k: env[k] for k in
                                          ("PYTHONPATH", TRUST_ENV, "ACME_IMPORT_LOG")})
    return server, store, log


def test_a_trusted_module_runs_in_properties_requests_and_new_tables(
        served: tuple[Server, sd.Store, Path], modules: tuple[Path, str, str]) -> None:
    server, _, log = served
    _, trusted, _ = modules
    c = server.connect()
    assert row_set(c.table("evens").query()) == even_rows(DATA)
    assert row_set(c.table("evens").query(keys=["k1"])) == \
        {r for r in even_rows(DATA) if r[0] == "k1"}
    assert row_set(c.table("plain").query(iterators=[keep_even(trusted)])) == even_rows(DATA)
    made = c.create_table("made", SCHEMA, properties={
        "compaction.iterators": json.dumps([keep_even(trusted)])})
    made.ingest(DATA)
    assert row_set(made.query()) == even_rows(DATA)
    assert imports_logged(log) == 1  # once, by the server


def test_an_untrusted_module_is_refused_in_requests_and_create_table(
        served: tuple[Server, sd.Store, Path], modules: tuple[Path, str, str]) -> None:
    server, store, log = served
    _, trusted, stranger = modules
    c = server.connect()
    before = imports_logged(log)
    refused = f"module '{stranger}' is not trusted by this process \\(trusted: {trusted}\\)"
    with pytest.raises(IteratorModuleError, match=refused):
        c.table("plain").query(iterators=[keep_even(stranger)])
    with pytest.raises(IteratorModuleError, match=refused):
        c.table("plain").query(keys=["k2"], iterators=[keep_even(stranger)])
    props: dict[str, Any] = {"query.iterators": json.dumps([keep_even(stranger)])}
    with pytest.raises(IteratorModuleError, match=refused):
        c.create_table("strange", SCHEMA, properties=props)
    assert "strange" not in store.tables()
    assert imports_logged(log) == before  # never imported
