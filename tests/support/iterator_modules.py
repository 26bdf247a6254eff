"""Iterator modules of a user's own, written into a test's folder: what the python-iterator
tests load (in this process, a CLI command, a server, maintainer workers, Spark), and the
records they read through them.

``acme_iters_<tag>`` holds ``KeepEven`` (keeps rows whose integer ``field`` is even: a
RecordIterator subclass) and ``NotAnIterator`` (a plain class). Importing it appends a line
to the file ``$ACME_IMPORT_LOG`` names, when set: a test sees whether a process imported
it at all.
"""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa

import sediment as sd

SCHEMA = sd.Schema(row_keys=[("key", pa.string())], sort_keys=[("ts", pa.int64())],
                   values=[("value", pa.int64())])
"""The schema of the tables these tests make."""

DATA = pa.table({"key": [f"k{i % 9}" for i in range(60)], "ts": list(range(60)),
                 "value": [(i * 7) % 19 for i in range(60)]}, schema=SCHEMA.to_arrow())
"""60 records over 9 keys, about half of them with an even value."""

SOURCE = '''
import os

import pyarrow as pa
import pyarrow.compute as pc

from sediment.iterators import RecordIterator

if os.environ.get("ACME_IMPORT_LOG"):
    with open(os.environ["ACME_IMPORT_LOG"], "a") as log:
        log.write(f"{os.getpid()}\\n")


class KeepEven(RecordIterator):
    def __init__(self, field):
        self.field = field

    def fields(self):
        return {self.field}

    def apply(self, batches):
        for b in batches:
            kept = b.filter(pc.equal(pc.bit_wise_and(b.column(self.field), 1), 0))
            if kept.num_rows:
                yield kept


class NotAnIterator:
    def __init__(self, **options):
        raise AssertionError("a class that is no RecordIterator was called")
'''


def write_iterator_module(folder: Path, tag: str) -> str:
    """Write module ``acme_iters_<tag>`` into ``folder`` (put it on the Python path); returns
    its name."""
    name = f"acme_iters_{tag}"
    (folder / f"{name}.py").write_text(SOURCE, encoding="utf-8")
    return name


def keep_even(module: str, field: str = "value") -> dict[str, str]:
    """The configuration of ``module``'s KeepEven on ``field``."""
    return {"type": "python", "class": f"{module}:KeepEven", "field": field}


def row_set(data: pa.Table) -> set[tuple[object, ...]]:
    """The rows of ``data`` as a set of tuples (an answer's order aside)."""
    return {tuple(r.values()) for r in data.to_pylist()}


def even_rows(data: pa.Table, field: str = "value") -> set[tuple[object, ...]]:
    """The reference answer of KeepEven: the rows of ``data`` whose ``field`` is even, as a
    set of row tuples (computed row by row in plain Python, not by the iterator's code)."""
    return {tuple(r.values()) for r in data.to_pylist() if r[field] % 2 == 0}


def imports_logged(log: Path) -> int:
    """How many times processes imported the module (lines of ``$ACME_IMPORT_LOG``)."""
    return len(log.read_text().splitlines()) if log.exists() else 0


def environment(folder: Path, trusted: str | None, log: Path | None = None) -> dict[str, str]:
    """The environment of a child process: ``folder`` on its Python path, ``trusted`` as its
    trusted modules (None: none), its imports logged to ``log``."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(folder), *filter(None, [os.environ.get("PYTHONPATH")])])}
    env.pop("SEDIMENT_TRUSTED_ITERATOR_MODULES", None)
    if trusted is not None:
        env["SEDIMENT_TRUSTED_ITERATOR_MODULES"] = trusted
    if log is not None:
        env["ACME_IMPORT_LOG"] = str(log)
    return env
