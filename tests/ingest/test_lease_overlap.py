"""The pending-file lease of an ingest is written on a thread while the rows are sorted and
encoded (``Staging.new_file_later``): no data file or sidecar is created before the lease
naming it is stored, a lease write that fails fails the ingest with nothing left, and a
process killed at any moment leaves every file it created named by its lease or committed
(what GC's orphan pass relies on: docs/guarantees.md, "What GC may delete")."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import sediment as sd
from helpers import make_table, rows
from sediment.errors import StorageError
from sediment.files.sidecars import with_sidecars
from sediment.state.documents import read_sealed
from sediment.storage.local import LocalObjectStore


def _created(root: Path) -> set[str]:
    """Table-rooted keys of the data files and sidecars on disk under ``root``."""
    return {p.relative_to(root).as_posix() for p in (root / "data").rglob("*")
            if p.is_file() and not p.name.startswith(".tmp-")} if (root / "data").is_dir() \
        else set()


def _leased(table: sd.Table) -> set[str]:
    objects = table._handle.objects
    names: set[str] = set()
    for o in objects.list("pending/"):
        names.update(str(f) for f in read_sealed(objects, o.key, o.key)["files"])
    return names


def test_no_file_is_created_before_its_lease_is_stored(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The lease's write is held back: the writer meanwhile encodes, but creates neither the
    data file nor its key filter until the lease naming them is on disk."""
    table = make_table(tmp_path / "store", split_points=["m"])
    root = Path(table._handle.objects.local_path("x")).parent
    seen: list[tuple[set[str], set[str]]] = []
    real_put = LocalObjectStore.put

    def slow_lease(self: LocalObjectStore, key: str, data: bytes) -> None:
        if "pending/" in key:
            time.sleep(0.2)  # long enough for a writer that did not wait to create its file
            seen.append((_created(root), set(json.loads(data)["files"])))
        real_put(self, key, data)

    monkeypatch.setattr(LocalObjectStore, "put", slow_lease)
    data = rows(30_000, seed=1)
    table.ingest(data)
    assert seen, "the ingest wrote its lease"
    stored: set[str] = set()
    for created, named in seen:  # files named for the first time: none may exist yet
        new = set(with_sidecars(named - stored))
        assert new and not created & new, "a file existed before the lease naming it"
        stored |= named
    assert table.describe()["records"] == data.num_rows


def test_a_lease_that_cannot_be_written_fails_the_ingest(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    table = make_table(tmp_path / "store")
    root = Path(table._handle.objects.local_path("x")).parent
    real_put = LocalObjectStore.put

    def failing(self: LocalObjectStore, key: str, data: bytes) -> None:
        if "pending/" in key:
            raise StorageError(f"writing {key!r}: disk full")
        real_put(self, key, data)

    monkeypatch.setattr(LocalObjectStore, "put", failing)
    with pytest.raises(StorageError, match="disk full"):
        table.ingest(rows(5_000, seed=2))
    monkeypatch.undo()
    assert _created(root) == set()  # no data file, sample or key filter
    assert table.describe()["records"] == 0


_WORKER = """
import sys, time
import sediment as sd
from sediment.storage.local import LocalObjectStore
sys.path.insert(0, {tests!r})
from helpers import rows
real_put = LocalObjectStore.put
def slow_lease(self, key, data):
    if "pending/" in key:
        time.sleep(0.01)
    real_put(self, key, data)
LocalObjectStore.put = slow_lease
table = sd.Store.open({uri!r}).table("t")
print("ready", flush=True)
for seed in range(1000):
    table.ingest(rows(3_000, seed=seed))
"""


@pytest.mark.slow
def test_a_kill_leaves_every_created_file_leased_or_committed(tmp_path: Path) -> None:
    """kill -9 at random moments of ingests whose leases are slow to write: after each kill,
    every data file and sidecar on disk is named by a lease on disk or committed."""
    uri = str(tmp_path / "store")
    table = make_table(uri, name="t", split_points=["g", "p"])
    root = Path(table._handle.objects.local_path("x")).parent
    tests = str(Path(__file__).resolve().parents[1])
    rng = random.Random(43)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [p for p in (os.environ.get("PYTHONPATH"), tests) if p])}
    for _ in range(4):
        proc = subprocess.Popen([sys.executable, "-c", _WORKER.format(tests=tests, uri=uri)],
                                stdout=subprocess.PIPE, env=env, text=True)
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        time.sleep(rng.uniform(0.05, 0.6))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
        state = table._handle.states.head()
        committed = {r.filename for r in state.all_references()}
        safe = set(with_sidecars(committed | _leased(table)))
        assert _created(root) - safe == set(), "a file neither leased nor committed"
