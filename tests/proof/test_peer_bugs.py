"""The peers' data-loss bugs, each as a Sediment test: the same race, forced at its dangerous
point, against Sediment's equivalent mechanism, with the result checked against the reference.

- apache/paimon #4802: a compaction racing an insert into its leaf dropped the inserted rows;
- apache/paimon #5762: two writers racing for one log version lost one writer's update;
- delta-io/delta-rs PR #3835: vacuum deleted a concurrent writer's written, uncommitted files;
- PostHog PR #78455: a short-retention vacuum left the log (and the versions readers held)
  pointing at deleted files.

Each race is forced, not hoped for: a thread (or, where the race is between processes, a
worker process) is held at the exact point where the peer went wrong, by wrapping the library
function that point lies in, while the other side acts; then it is let go. No sleeps decide
an outcome. Run as ``python tests/proof/test_peer_bugs.py '<json args>'`` for the worker of
the GC race.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __name__ == "__main__":  # the worker: make ``sediment`` and the test helpers importable
    sys.path[:0] = [str(Path(__file__).resolve().parents[2] / "src"),
                    str(Path(__file__).resolve().parents[1])]

import pytest

import sediment as sd
from helpers import make_table, rows
from reference import Reference, assert_matches
from sediment.errors import VersionExpiredError
from support.races import WAIT, Gate, InThread

HERE = Path(__file__).resolve()


def _wait(condition: Callable[[], bool], what: str, timeout: float = WAIT) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def _files_missing(table: sd.Table, version: int | None = None) -> list[str]:
    objects = table._handle.objects
    return [r.filename for r in table.files(version=version)
            if not objects.exists(r.filename)]


# ---- (a) apache/paimon #4802 -------------------------------------------------------------------
def test_compaction_racing_an_insert_into_its_leaf_keeps_the_insert(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """apache/paimon #4802: a (sort) compaction ran while another session inserted into the
    same table; the insert was acknowledged and then gone, because the compaction committed
    like an overwrite, marking deleted every file of the *latest* snapshot, the insert's
    new file among them, not the files it had read.

    Here a full compaction of the table's one leaf is held after it has read its inputs and
    written its output, just before its commit (``commit_job``); an ingest into the same
    leaf commits meanwhile; then the compaction commits. Sediment's compaction commit is a
    ``ReplaceFileReferences`` naming the exact input files its job was assigned: validated
    against the head it meets (the inputs still there, still its job's), it replaces those
    references only, so the concurrently added file keeps its reference and its rows."""
    from sediment.compaction import runner

    table = make_table(tmp_path / "store")
    reference = Reference(table.schema)
    for seed in (1, 2, 3):
        table.ingest(rows(300, seed=seed))
        reference.add(rows(300, seed=seed))
    before = {r.filename for r in table.files()}
    assert len(before) == 3 and len(table.partitions()) == 1

    gate = Gate()
    real_commit_job = runner.commit_job

    def held(*args: Any, **kwargs: Any) -> Any:
        gate.arrive()
        return real_commit_job(*args, **kwargs)

    monkeypatch.setattr(runner, "commit_job", held)
    job = InThread(lambda: table.compact(full=True))
    gate.wait_arrived("the compaction to reach its commit")
    concurrent = rows(250, seed=4)
    inserted = table.ingest(concurrent)  # acknowledged while the compaction is in flight
    reference.add(concurrent)
    gate.release()
    result = job.result()

    assert result.jobs_committed == 1 and not result.errors, result
    history = table.history()
    assert [h.kind for h in history if h.version > inserted.version] == \
        ["replace_file_references"], "the compaction committed after the insert"
    refs = {r.filename for r in table.files()}
    assert not refs & before, "the compaction replaced the files it read"
    assert len(refs) == 2, "its output and the concurrent insert's file, nothing else"
    assert not _files_missing(table)
    assert_matches(table.query(), reference)


# ---- (b) apache/paimon #5762 -------------------------------------------------------------------
def test_two_writers_racing_one_log_version_under_lost_answers_lose_nothing(
        proxied_s3: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """apache/paimon #5762: two Spark jobs committed at the same moment; both read snapshot
    9793 as the latest and both wrote snapshot 9794 (a temp file renamed into place), and
    the second rename's writer lost its whole update without an error.

    Here two writers (separate stores, so separate commit loops: no in-process lock orders
    them) are both held at their log append until both have built their entry for the same
    version, then let go together, on moto's S3 through the fault proxy, which loses the
    answers to both racing PUTs (the write happens, the writer never hears; the SDK's retry
    finds the slot taken). Sediment's append is a put-if-absent (``If-None-Match: *``)
    carrying the commit's random id: exactly one writer creates the entry; each writer, not
    knowing whose it is, reads the slot back and finds its own id (landed) or another's (lost
    the race: re-read the log, re-validate, append at the next version). Both updates land,
    at two versions, each acknowledged once."""
    from sediment.state.commit import CommitLoop

    s3 = proxied_s3
    uri, options = s3.uri, s3.options
    first = make_table(uri, options, name="events")
    second = sd.Store.open(uri, **options).table("events")  # a store (and commit loop) apart
    start = first.version
    both = threading.Barrier(2, timeout=WAIT)
    tried: list[int] = []
    raced: set[int] = set()
    real_append = CommitLoop._append

    def racing(self: CommitLoop, version: int, *rest: Any) -> bool:
        me = threading.get_ident()
        if me not in raced:  # each writer's first attempt only: the race for one version
            raced.add(me)
            tried.append(version)
            both.wait()
        return real_append(self, version, *rest)

    monkeypatch.setattr(CommitLoop, "_append", racing)
    # the answers to the two racing PUTs are lost (the first two log-entry PUTs: nothing
    # else writes the log meanwhile); the SDK's retries of them are answered 412
    lost = s3.proxy.add_rule("drop_response", method="PUT", path=r"/log/\d{20}\.json$",
                             count=2, name="lost log-entry answer")
    batches = [rows(200, seed=11), rows(200, seed=12)]
    jobs = [InThread(lambda t=t, b=b: t.ingest(b))
            for t, b in zip((first, second), batches, strict=True)]
    try:
        results = [j.result() for j in jobs]
    finally:
        s3.proxy.clear()

    assert tried == [start + 1, start + 1], "both writers raced for one version"
    versions = sorted(r.version for r in results)
    assert versions == [start + 1, start + 2], "each update committed once, at its own version"
    assert lost.fired == 2, "the answers to both racing appends were lost"
    # checked through the proxy, now without rules (a third store's client costs a second)
    assert [h.kind for h in first.history() if h.version > start] == ["add_files"] * 2
    reference = Reference(first.schema)
    for b in batches:
        reference.add(b)
    assert_matches(first.query(), reference)
    assert not _files_missing(first)


# ---- (c) delta-io/delta-rs PR #3835 ------------------------------------------------------------
def _worker(args: dict[str, Any]) -> None:
    """Ingest one batch, held between writing its files and appending its log entry (touch
    ``ready``, wait for ``go``); one JSON line with the version it committed."""
    from sediment.state.commit import CommitLoop

    folder = Path(args["folder"])
    real_append = CommitLoop._append

    def held(self: CommitLoop, version: int, *rest: Any) -> bool:
        (folder / "ready").touch()
        deadline = time.monotonic() + WAIT
        while not (folder / "go").exists():  # bounded: the test fails on its own timeout
            if time.monotonic() > deadline:
                raise SystemExit("never let go")
            time.sleep(0.01)
        return real_append(self, version, *rest)

    CommitLoop._append = held  # type: ignore[method-assign]
    table = sd.Store.open(args["uri"]).table(args["table"])
    result = table.ingest(rows(400, seed=args["seed"]))
    (folder / "out.json").write_text(json.dumps({"version": result.version}))


def test_gc_racing_an_uncommitted_writer_keeps_its_files(tmp_path: Path) -> None:
    """delta-io/delta-rs PR #3835 (issue #3645): ``vacuum(full=True)`` ran while another
    process appended; the append's Parquet file was written but its log entry not yet, so
    vacuum saw a file no version referenced and deleted it; then the entry landed, and the
    table's log pointed at a missing file. (The fix: spare unreferenced files younger than
    the retention period.)

    Here a writer process is held after writing its data files and before appending its log
    entry (``CommitLoop._append``), and this process runs GC with the orphan timeout at 0,
    so that age protects nothing: the same pass deletes a planted orphan (a file written with
    no lease), proving it would delete anything unprotected. Sediment's writers name every
    file in a pending-file *lease* (``pending/<id>.json``) before creating it, renewed by a
    heartbeat until the commit settles; GC lists the data files first, then reads the live
    leases, and never deletes what a live lease names. Let go, the writer commits, and
    every file the table references exists and reads as the reference."""
    from sediment.files.sidecars import data_file_of
    from sediment.state import pending
    from support.internals import write_sorted_file

    uri = str(tmp_path / "store")
    table = make_table(uri, name="events", split_points=["m"])
    table.ingest(rows(200, seed=1))
    objects = table._handle.objects
    committed = {r.filename for r in table.files()}
    planted = "data/root/planted-orphan.parquet"
    write_sorted_file(objects, planted, table.schema, table.properties,
                      [rows(10, seed=9).sort_by("key")])
    args = {"uri": uri, "table": "events", "folder": str(tmp_path), "seed": 2}
    proc = subprocess.Popen([sys.executable, str(HERE), json.dumps(args)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        _wait(lambda: (tmp_path / "ready").exists() or proc.poll() is not None,
              "the writer to reach its append")
        assert proc.poll() is None, proc.communicate()[0].decode()
        pending_files = {o.key for o in objects.list("data/")
                         if data_file_of(o.key) == o.key} - committed - {planted}
        assert len(pending_files) == 2, "the writer wrote one file per leaf, uncommitted"
        leased = pending.scan_leases(objects, time.time()).protected
        assert pending_files <= leased, "its lease names them"

        result = table.gc(orphan_timeout=0)

        assert result.orphans_deleted == 1 and not objects.exists(planted), \
            "GC deleted the unleased orphan: age protected nothing"
        assert all(objects.exists(f) for f in pending_files), "the writer's files survived"
        kept = result.kept.orphans["lease"]
        assert set(kept.names) == pending_files, kept
        (tmp_path / "go").touch()
        output = proc.communicate(timeout=WAIT)[0].decode()
        assert proc.returncode == 0, output
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    version = json.loads((tmp_path / "out.json").read_text())["version"]
    assert [h.kind for h in table.history() if h.version >= version] == ["add_files"]
    assert {r.filename for r in table.files()} == committed | pending_files
    assert not _files_missing(table)
    reference = Reference(table.schema)
    reference.add(rows(200, seed=1))
    reference.add(rows(400, seed=2))
    assert_matches(table.query(), reference)


# ---- (d) PostHog PR #78455 ---------------------------------------------------------------------
SHORT = {"retention.seconds": 0, "gc.delay_seconds": 0, "gc.clock_skew_seconds": 0,
         "state.snapshot.interval": 1}
"""Retention at its shortest: no time keeps an old version, only tags and pins."""


@pytest.mark.usefixtures("no_prune_grace")
def test_short_retention_keeps_what_readers_pinned(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """PostHog PR #78455: every vacuum ran with a 24-hour retention and delta-rs's retention
    guard off, deleting files that a concurrent snapshot (a reader on an old version) still
    referenced, so the log, and the versions readers held, pointed at Parquet files S3
    answered 404 for: a hollow table, rebuilt from source.

    Here retention is 0 (no GC delay, no clock-skew margin, no prune grace), so nothing but
    tags and pins keeps an old version. Readers pin old versions (``Table.pin``), one before
    GC runs, one while GC is held between reading the pins and recording its deletions (the
    race: GC decided without the pin), one while GC is held between recording them and
    deleting the files. Sediment's GC and pins meet in a handshake: GC records its deletions
    in the log (``DeleteFiles``), then reads the pins again and spares the files a pin now
    holds; a pin, once written, reads the log and refuses (VersionExpiredError, the pin let
    go) when its version's files are already recorded deleted. So a pin either holds its
    version's files or fails; it never succeeds with its files gone. Then prune runs: it never
    goes below a pin. Every pinned version reads as the reference; every other version reads
    as the reference or raises VersionExpiredError; the head references no missing file."""
    from sediment.maintenance import gc as gc_module

    table = make_table(tmp_path / "store", split_points=None, **SHORT)
    reference = Reference(table.schema)
    adds: dict[int, int] = {}  # version -> ingests it holds (compactions change none)

    def ingest(seed: int) -> int:
        data = rows(200, seed=seed)
        table.ingest(data)
        reference.add(data)
        adds[table.version] = len(reference.history)
        return table.version

    def compact() -> None:
        assert table.compact(full=True).jobs_committed == 1
        adds[table.version] = len(reference.history)

    ingest(1)
    pinned_before = ingest(2)  # files A, B
    compact()  # C
    pinned_during = ingest(3)  # C, D
    compact()  # E
    pinned_late = ingest(4)  # E, F
    compact()  # G: A-F unreferenced, due at once
    table.pin("reader-before", pinned_before, 600)

    first, second = Gate(), Gate()
    gates = [first, second]
    real_tag_holds = gc_module.tag_holds

    def held(*args: Any, **kwargs: Any) -> Any:
        holds = real_tag_holds(*args, **kwargs)
        if gates:  # the first read of the pins (planning), then the one after recording
            gates.pop(0).arrive()
        return holds

    monkeypatch.setattr(gc_module, "tag_holds", held)
    job = InThread(lambda: table.gc())
    first.wait_arrived("GC to read the pins")
    table.pin("reader-during", pinned_during, 600)  # GC planned without it
    first.release()
    second.wait_arrived("GC to record its deletions and read the pins again")
    with pytest.raises(VersionExpiredError):
        table.pin("reader-late", pinned_late, 600)  # its files are recorded deleted
    assert "reader-late" not in {t.name for t in table.tags()}, "a refused pin is let go"
    second.release()
    result = job.result()
    assert result.deleted == 2, "GC deleted E and F, recorded C and D but spared them"

    def final_adds(v: int) -> int:
        return adds[max(k for k in adds if k <= v)]

    def check_pinned(version: int) -> None:
        assert not _files_missing(table, version)
        assert_matches(table.query(version=version), reference.upto(final_adds(version)))

    check_pinned(pinned_before)
    check_pinned(pinned_during)
    with pytest.raises(VersionExpiredError):
        table.query(version=pinned_late)

    pruned = table.prune()
    assert pruned.log_entries > 0 and pruned.base is not None
    assert pruned.base <= pinned_before, "prune never goes below a pin"
    # spared files are orphans now, kept while their pin lives, collected once it is let go
    assert table.gc(orphan_timeout=0).kept.orphans["pin"].files == 2
    check_pinned(pinned_during)
    table.unpin("reader-during")
    assert table.gc(orphan_timeout=0).orphans_deleted == 2
    with pytest.raises(VersionExpiredError):
        table.query(version=pinned_during)
    check_pinned(pinned_before)

    assert not _files_missing(table)
    assert_matches(table.query(), reference)
    expired = 0
    for v in range(1, table.version + 1):  # each version: right, or cleanly expired
        try:
            got = table.query(version=v)
        except VersionExpiredError:
            expired += 1
            continue
        assert_matches(got, reference.upto(final_adds(v)))
    assert expired > 0, "short retention expired the versions nobody pinned"


if __name__ == "__main__":
    _worker(json.loads(sys.argv[1]))
