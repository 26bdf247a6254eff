"""Iterators by import path (``{"type": "python", "class": "module:Name"}``), in this process:
loaded only from trusted modules (prefixes at a dot), checked to be RecordIterators before
anything is called, refused otherwise with an error naming the module and without importing
an untrusted one. Answers are checked against a row-by-row reference."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

import sediment as sd
from sediment.errors import IteratorModuleError, PropertyError
from sediment.iterators import trust_iterator_modules, trusted_iterator_modules
from sediment.iterators.trust import TRUST_ENV, is_trusted
from sediment.query.request import ReadRequest
from support.iterator_modules import (
    DATA,
    SCHEMA,
    even_rows,
    imports_logged,
    keep_even,
    row_set,
    write_iterator_module,
)


@pytest.fixture
def module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, Path]]:
    """A fresh iterator module on the path, nothing trusted, its imports logged."""
    monkeypatch.setenv(TRUST_ENV, "")
    log = tmp_path / "imports.log"
    monkeypatch.setenv("ACME_IMPORT_LOG", str(log))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield write_iterator_module(tmp_path, tmp_path.name.replace("-", "_").lower()), log


def _store(tmp_path: Path) -> sd.Store:
    return sd.Store.open(str(tmp_path / "store"), create=True)


def test_a_trusted_module_iterator_runs_on_reads_and_compactions(
        module: tuple[str, Path], tmp_path: Path) -> None:
    name, _ = module
    trust_iterator_modules([name])
    store = _store(tmp_path)
    read = store.create_table("r", SCHEMA, properties={
        "query.iterators": json.dumps([keep_even(name)])})
    read.ingest(DATA)
    assert row_set(read.query()) == even_rows(DATA)
    compacted = store.create_table("c", SCHEMA, properties={
        "compaction.iterators": json.dumps([keep_even(name)])})
    compacted.ingest(DATA.slice(0, 20))
    compacted.ingest(DATA.slice(20))
    compacted.compact(full=True)
    assert len(compacted.files()) == 1
    # the records as stored: compaction dropped the odd ones
    raw = compacted.prepare(ReadRequest(raw=True)).to_arrow()
    assert row_set(raw) == even_rows(DATA)
    # a request's iterator too
    plain = store.create_table("p", SCHEMA)
    plain.ingest(DATA)
    assert row_set(plain.query(iterators=[keep_even(name)])) == even_rows(DATA)


def test_an_untrusted_module_is_refused_naming_it_and_never_imported(
        module: tuple[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    name, log = module
    store = _store(tmp_path)
    with pytest.raises(IteratorModuleError, match=f"module '{name}' is not trusted") as e:
        store.create_table("t", SCHEMA, properties={
            "query.iterators": json.dumps([keep_even(name)])})
    assert "query.iterators" in str(e.value) and isinstance(e.value, PropertyError)
    assert "t" not in store.tables()
    # a table made where the module is trusted, read where it is not
    trust_iterator_modules([name])
    table = store.create_table("t", SCHEMA, properties={
        "query.iterators": json.dumps([keep_even(name)])})
    table.ingest(DATA)
    monkeypatch.setenv(TRUST_ENV, "")
    reopened = sd.Store.open(store.uri).table("t")
    with pytest.raises(IteratorModuleError, match=f"module '{name}' is not trusted"):
        reopened.query()
    assert imports_logged(log) == 1  # only while trusted


def test_trust_is_by_prefix_at_a_dot(module: tuple[str, Path], tmp_path: Path) -> None:
    name, log = module
    trust_iterator_modules(["acme_iters"])  # a prefix of the name, not of a package
    with pytest.raises(IteratorModuleError, match=name):
        sd.iterators.iterator_from_config(keep_even(name), SCHEMA)
    assert imports_logged(log) == 0
    assert is_trusted("acme.iters.ttl", ["acme.iters"]) and is_trusted("acme", ["acme"])
    assert not is_trusted("acme.iterators", ["acme.iters"])


def test_a_class_that_is_no_record_iterator_is_refused_before_it_is_called(
        module: tuple[str, Path]) -> None:
    name, _ = module
    trust_iterator_modules([name])
    with pytest.raises(IteratorModuleError, match=f"module '{name}' has no RecordIterator "
                                                  f"subclass 'NotAnIterator'"):
        sd.iterators.iterator_from_config({"type": "python",
                                           "class": f"{name}:NotAnIterator"}, SCHEMA)
    with pytest.raises(IteratorModuleError, match=f"module '{name}' has no RecordIterator "
                                                  f"subclass 'Missing'"):
        sd.iterators.iterator_from_config({"type": "python", "class": f"{name}:Missing"})


def test_unknown_modules_bad_paths_and_options(module: tuple[str, Path],
                                              tmp_path: Path) -> None:
    name, _ = module
    trust_iterator_modules([name, "nowhere_such"])
    assert trusted_iterator_modules() == (name, "nowhere_such")
    with pytest.raises(IteratorModuleError, match="module 'nowhere_such.mod' cannot be "
                                                  "imported"):
        sd.iterators.iterator_from_config({"type": "python",
                                           "class": "nowhere_such.mod:X"})
    for bad in ("no_colon", "a:b:c", ".rel:X", "a.b:not-a-name", None, 3):
        with pytest.raises(IteratorModuleError, match="'package.module:Name'"):
            sd.iterators.iterator_from_config({"type": "python", "class": bad})
    with pytest.raises(PropertyError, match="invalid python iterator"):  # KeepEven(fld=...)
        sd.iterators.iterator_from_config({"type": "python", "class": f"{name}:KeepEven",
                                           "fld": "value"})
    with pytest.raises(PropertyError, match="unknown field 'nope'"):
        sd.iterators.iterator_from_config(keep_even(name, "nope"), SCHEMA)
    (tmp_path / "broken_iters.py").write_text("raise RuntimeError('half written')\n")
    trust_iterator_modules(["broken_iters"])
    with pytest.raises(IteratorModuleError, match="module 'broken_iters' cannot be imported "
                                                  "here: RuntimeError: half written"):
        sd.iterators.iterator_from_config({"type": "python", "class": "broken_iters:X"})
    with pytest.raises(IteratorModuleError, match="'a..b' is not a module path"):
        trust_iterator_modules(["a..b"])
