"""Python iterators in the maintainer's worker processes, which are spawned with the
maintainer's environment: a module the maintainer trusted before spawning them loads in a
worker, which compacts through it (checked against a row-by-row reference, the import logged
by the worker's own process); one it did not trust then is refused by the worker, naming the
module, and nothing of that job is committed. One pool for both: a spawn costs seconds."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import sediment as sd
from sediment.compaction.runner import create_jobs
from sediment.handle import handle_of
from sediment.iterators.trust import TRUST_ENV
from sediment.maintenance.workers import WorkerProcesses
from sediment.query.request import ReadRequest
from support.iterator_modules import (
    DATA,
    SCHEMA,
    even_rows,
    keep_even,
    row_set,
    write_iterator_module,
)


def _table(store: sd.Store, name: str, module: str) -> sd.Table:
    table = store.create_table(name, SCHEMA, properties={
        "compaction.iterators": json.dumps([keep_even(module)]),
        "compaction.strategy": "basic", "compaction.batch_size": 2})
    table.ingest(DATA.slice(0, 30))
    table.ingest(DATA.slice(30))
    return table


@pytest.mark.slow  # a spawned worker process (seconds to import Sediment): the full lane
def test_workers_load_the_iterators_their_maintainer_trusts(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    trusted = write_iterator_module(tmp_path, "workers_a")
    later = write_iterator_module(tmp_path, "workers_b")
    monkeypatch.syspath_prepend(str(tmp_path))  # (a spawned worker gets the parent's path)
    log = tmp_path / "imports.log"
    monkeypatch.setenv("ACME_IMPORT_LOG", str(log))
    monkeypatch.setenv(TRUST_ENV, "")
    sd.iterators.trust_iterator_modules([trusted])
    workers = WorkerProcesses(1)  # spawned now: trusting the first module only
    try:
        sd.iterators.trust_iterator_modules([later])  # (this process plans with both)
        store = sd.Store.open(str(tmp_path / "store"), create=True)
        good, refused = _table(store, "good", trusted), _table(store, "refused", later)
        results = {}
        for table in (good, refused):
            handle = handle_of(table)
            (job,) = create_jobs(handle)
            results[table.name] = workers.run_job(handle, handle.states.head(), job)
        pids = workers.pids()
    finally:
        workers.close()
    assert results["good"].committed, results["good"].error
    assert len(good.files()) == 1
    stored = good.prepare(ReadRequest(raw=True)).to_arrow()  # the records as written
    assert row_set(stored) == even_rows(DATA)
    assert not results["refused"].committed
    assert f"module '{later}' is not trusted by this process (trusted: {trusted})" in \
        str(results["refused"].error)
    assert len(refused.files()) == 2  # nothing committed
    importers = [int(p) for p in log.read_text().split()]
    assert pids and os.getpid() not in pids and set(pids) <= set(importers)
