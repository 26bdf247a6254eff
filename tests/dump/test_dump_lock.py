"""The dump lock under a task that outlives its staleness limit, a
stalled dump whose job another dump resumed, and a blank destination on the command line.

Each lock test runs a dump whose single task is slowed by a monkeypatched ``run_dump_task``
while a second dump of the same table to the same root runs beside it, with a short staleness
limit (``dump_table(lock_timeout=...)``). Whatever happens, no lock, takeover marker or version
tag may remain, and the dump must load back equal to the table.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import sediment as sd
import sediment.dump.dump as dump_mod
from helpers import make_table, rows
from reference import Reference, assert_matches
from sediment.cli import app
from sediment.dump.dump import LOCK_KEY, DumpLockLostError, dump_table
from sediment.dump.lock import TAKEOVER_PREFIX, DumpLock
from sediment.errors import JobError, QueryError
from sediment.handle import TableHandle, handle_of
from sediment.workload import benchmark_schema

SCHEMA = benchmark_schema()


def one_leaf_table(tmp_path: Path) -> tuple[sd.Store, sd.Table, Reference]:
    """A table of one leaf (so a dump has a single task) holding two ingests."""
    store = sd.Store.open(str(tmp_path / "store"), create=True)
    table = make_table(store)
    ref = Reference(SCHEMA)
    for seed in (1, 2):
        data = rows(150, seed)
        table.ingest(data)
        ref.add(data)
    return store, table, ref


def other_process(store: sd.Store, table: sd.Table) -> TableHandle:
    """The same table opened afresh, as another process would."""
    return handle_of(sd.Store.open(store.uri).table(table.name))


def held_lock(table: sd.Table) -> dict[str, Any] | None:
    try:
        return dict(json.loads(table._handle.objects.get(LOCK_KEY)))
    except sd.SedimentError:
        return None


def assert_nothing_left(table: sd.Table) -> None:
    objects = table._handle.objects
    assert not objects.exists(LOCK_KEY)
    assert not list(objects.list(TAKEOVER_PREFIX))
    assert table.tags() == []


def dest_files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


class Gate:
    """Holds the first ``held`` calls of ``run_dump_task`` until their gate opens."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, held: int) -> None:
        self.real = dump_mod.run_dump_task
        self.entered = [threading.Event() for _ in range(held)]
        self.gates = [threading.Event() for _ in range(held)]
        self.calls = 0
        self.mutex = threading.Lock()
        monkeypatch.setattr(dump_mod, "run_dump_task", self.run)

    def run(self, *args: Any) -> list[str]:
        with self.mutex:
            n, self.calls = self.calls, self.calls + 1
        if n < len(self.gates):
            self.entered[n].set()
            assert self.gates[n].wait(60), "the test never opened the gate"
        return self.real(*args)


def no_heartbeat_in(monkeypatch: pytest.MonkeyPatch, thread_name: str) -> None:
    """The dump run by thread ``thread_name`` beats no more: a process stopped (or starved)
    longer than the staleness limit, as far as other dumps can tell."""
    real = DumpLock.heartbeat

    def heartbeat(self: DumpLock) -> contextlib.AbstractContextManager[None]:
        if threading.current_thread().name == thread_name:
            return contextlib.nullcontext()
        return real(self)

    monkeypatch.setattr(DumpLock, "heartbeat", heartbeat)


def in_thread(name: str, work: Any) -> tuple[threading.Thread, list[Any]]:
    out: list[Any] = []

    def run() -> None:
        try:
            out.append(work())
        except BaseException as e:  # handed to the test to assert on
            out.append(e)

    th = threading.Thread(target=run, name=name, daemon=True)
    th.start()
    return th, out


@contextlib.contextmanager
def joined(th: threading.Thread, *gates: threading.Event) -> Iterator[None]:
    try:
        yield
    finally:
        for g in gates:
            g.set()
        th.join(60)


# ---- the heartbeat keeps a long task's lock live ----------------------------------------------
def test_a_task_longer_than_the_lock_limit_keeps_the_lock(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The one task takes three staleness limits; a second dump to the same root (which would
    resume a stale job) tries all along and is refused every time, since the background
    heartbeat keeps the lock fresh; the first dump then finishes normally."""
    limit = 1.5
    store, table, ref = one_leaf_table(tmp_path)
    root = str(tmp_path / "dumps")
    gate = Gate(monkeypatch, held=1)
    th, out = in_thread("first", lambda: dump_table(table._handle, root, lock_timeout=limit))
    beats: list[int] = []
    refusals = 0
    with joined(th, *gate.gates):
        assert gate.entered[0].wait(30)
        deadline = time.monotonic() + 3 * limit
        while time.monotonic() < deadline:
            with pytest.raises(JobError, match="is running"):
                dump_table(other_process(store, table), root, lock_timeout=limit)
            refusals += 1
            doc = held_lock(table)
            assert doc is not None and doc["heartbeat"] != 0
            beats.append(int(doc["beats"]))
            time.sleep(limit / 5)
    assert len(out) == 1 and isinstance(out[0], dump_mod.DumpJob), out
    job = out[0]
    assert refusals >= 3 and beats[-1] >= 4, (refusals, beats)  # ~4 beats per limit
    assert gate.calls == 1 and job.resumed_tasks == 0
    assert_nothing_left(table)
    assert_matches(store.load(job.manifest_uri, "copy").query(), ref)


# ---- a stalled dump whose job another dump resumed ---------------------------------------------
def test_a_peer_that_finished_the_stalled_job_is_not_an_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first dump stalls (no heartbeat) past the limit inside its task; a second dump
    resumes the job and finishes it. The first then wakes: its task writes nothing (it checks
    the lock first), it neither deletes nor writes back the lock, and it returns the job the
    second one finished: the same manifest."""
    limit = 0.5
    store, table, ref = one_leaf_table(tmp_path)
    root = tmp_path / "dumps"
    gate = Gate(monkeypatch, held=1)
    no_heartbeat_in(monkeypatch, "stalled")
    th, out = in_thread("stalled",
                        lambda: dump_table(table._handle, str(root), lock_timeout=limit))
    with joined(th, *gate.gates):
        assert gate.entered[0].wait(30)
        first = held_lock(table)
        assert first is not None
        time.sleep(2 * limit)
        peer = dump_table(other_process(store, table), str(root), lock_timeout=limit)
        assert peer.job_id == first["job_id"] and peer.resumed_tasks == 0
        assert_nothing_left(table)
        written = dest_files(root)
    assert len(out) == 1 and isinstance(out[0], dump_mod.DumpJob), out
    job = out[0]
    assert (job.job_id, job.manifest_uri, job.rows, job.tasks) == \
        (peer.job_id, peer.manifest_uri, peer.rows, peer.tasks)
    assert dest_files(root) == written  # the woken dump wrote nothing more
    assert_nothing_left(table)
    assert_matches(store.load(job.manifest_uri, "copy").query(), ref)


def test_a_stalled_dump_leaves_a_running_peers_lock_alone(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """As above, but the first dump wakes while the resuming dump still runs: it fails with
    DumpLockLostError and leaves the peer's lock as it is (not marked stale, not deleted); the
    peer then finishes the job and nothing is left behind."""
    limit = 0.5
    store, table, ref = one_leaf_table(tmp_path)
    root = str(tmp_path / "dumps")
    gate = Gate(monkeypatch, held=2)
    no_heartbeat_in(monkeypatch, "stalled")
    th, out = in_thread("stalled", lambda: dump_table(table._handle, root, lock_timeout=limit))
    with joined(th, *gate.gates):
        assert gate.entered[0].wait(30)
        time.sleep(2 * limit)
        th2, out2 = in_thread("peer", lambda: dump_table(other_process(store, table), root,
                                                         lock_timeout=limit))
        with joined(th2, gate.gates[1]):
            assert gate.entered[1].wait(30)
            peers = held_lock(table)
            assert peers is not None
            gate.gates[0].set()  # the stalled dump wakes
            th.join(60)
            assert len(out) == 1 and isinstance(out[0], DumpLockLostError), out
            assert "lost its lock" in str(out[0]) and table.name in str(out[0])
            now = held_lock(table)
            assert now is not None and now["owner"] == peers["owner"] and now["heartbeat"] != 0
    assert len(out2) == 1 and isinstance(out2[0], dump_mod.DumpJob), out2
    assert_nothing_left(table)
    assert_matches(store.load(out2[0].manifest_uri, "copy").query(), ref)


# ---- a blank destination -----------------------------------------------------------------------
def test_a_blank_dump_destination_is_refused(tmp_path: Path) -> None:
    store, table, _ = one_leaf_table(tmp_path)
    for blank in ("", "  "):
        with pytest.raises(QueryError, match=r"dump destination \(root\) .* is blank"):
            table.dump(blank)
    with pytest.raises(QueryError, match="names no folder"):
        table.dump("s3://")
    assert_nothing_left(table)


def test_cli_dump_to_a_blank_destination_fails_and_prints_real_manifest_paths(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``sediment dump t ''`` exits 1 with one line naming the argument and writes nothing
    into the working directory; a dump that runs prints a manifest path that exists."""
    store, table, ref = one_leaf_table(tmp_path)
    monkeypatch.delenv("SEDIMENT_STORE", raising=False)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    runner = CliRunner()
    for blank in ("", " "):
        result = runner.invoke(app, ["dump", table.name, blank, "--store", store.uri])
        assert result.exit_code == 1, (result.stdout, result.stderr, result.exception)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
        assert "dump destination (root)" in lines[0] and "blank" in lines[0]
        assert "Traceback" not in result.output
    assert list(cwd.iterdir()) == []
    assert_nothing_left(table)
    for i, root in enumerate(("out", "out2/", str(tmp_path / "abs") + "//")):
        result = runner.invoke(app, ["dump", table.name, root, "--store", store.uri, "--json"])
        assert result.exit_code == 0, (result.stdout, result.stderr, result.exception)
        manifest = json.loads(result.stdout)["manifest"]
        assert "//" not in manifest and Path(manifest).is_file(), manifest
        assert_matches(store.load(manifest, f"copy{i}").query(), ref)
