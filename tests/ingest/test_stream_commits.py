"""Committing a stream's batch exactly once (sediment.ingest.streams.commit_stream_batch) on a
real local table: a replay adds nothing and deletes its files; two committers racing for one
batch commit it once; a commit whose outcome the store did not tell is tried again and read
back (landed: nothing more; not landed: committed); the entries survive snapshots, a reload
and a restore."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import sediment as sd
from sediment.core.transactions import StreamMark
from sediment.errors import CommitOutcomeUnknownError
from sediment.ingest.standard import StagedFiles, stage_batches
from sediment.ingest.streams import commit_stream_batch
from sediment.state.commit import CommitLoop

SCHEMA = sd.Schema(row_keys=[("key", pa.int64())], values=[("v", pa.string())])


def rows(start: int, n: int = 20) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict({"key": list(range(start, start + n)),
                                       "v": [f"v{i}" for i in range(start, start + n)]},
                                      schema=SCHEMA.to_arrow())


def staged(table: sd.Table, batch: pa.RecordBatch) -> StagedFiles:
    """Files written for ``batch`` and handed over, as a Spark task leaves them."""
    handle = table._handle
    out = stage_batches(handle, handle.state(), iter([("test", batch)]))
    assert out.staging is not None
    out.staging.hand_over()
    return out


def keys(table: sd.Table) -> list[int]:
    return sorted(table.query().column("key").to_pylist())


def exists(table: sd.Table, files: StagedFiles) -> list[bool]:
    return [table._handle.objects.exists(w.filename) for w in files.written]


@pytest.fixture
def table(tmp_path: Path) -> sd.Table:
    return sd.Store.open(str(tmp_path / "s"), create=True).create_table(
        "events", SCHEMA, properties={"state.snapshot.interval": 2})


def test_a_replay_adds_nothing_and_deletes_its_files(table: sd.Table) -> None:
    first = commit_stream_batch(table._handle, staged(table, rows(0)), StreamMark("q", 0))
    assert first.committed and first.rows == 20
    again = staged(table, rows(0))
    replay = commit_stream_batch(table._handle, again, StreamMark("q", 0))
    assert not replay.committed and replay.version == first.version
    assert keys(table) == list(range(20))
    assert exists(table, again) == [False] * len(again.written)
    empty = commit_stream_batch(table._handle, StagedFiles(0, [], []), StreamMark("q", 1))
    assert not empty.committed and table.version == first.version  # nothing to record


def test_two_committers_of_one_batch_commit_it_once(table: sd.Table) -> None:
    """Both planned on the same head; the loser's append finds the version taken, re-reads
    the head, finds the batch there, commits nothing and deletes its own files."""
    a, b = staged(table, rows(0)), staged(table, rows(0))
    barrier = threading.Barrier(2)
    results: list[Any] = []

    def run(handle: Any, files: StagedFiles) -> None:
        barrier.wait()
        results.append(commit_stream_batch(handle, files, StreamMark("q", 3)))

    # two handles of one table, as two drivers have: each commits through its own loop
    other = sd.Store.open(table.store.uri).table("events")
    threads = [threading.Thread(target=run, args=(table._handle, a)),
               threading.Thread(target=run, args=(other._handle, b))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(r.committed for r in results) == [False, True]
    fresh = sd.Store.open(table.store.uri).table("events")
    assert keys(fresh) == list(range(20)) and fresh.version == 2
    winner, loser = (a, b) if all(exists(fresh, a)) else (b, a)
    assert all(exists(fresh, winner)) and not any(exists(fresh, loser))


@pytest.mark.parametrize("landed", [True, False], ids=["landed", "not-landed"])
def test_an_unknown_outcome_is_read_back_not_guessed(table: sd.Table, landed: bool,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    real = CommitLoop._append
    faults = [1]

    def append(self: CommitLoop, *args: Any, **kwargs: Any) -> bool:
        if faults:
            faults.pop()
            if landed:
                real(self, *args, **kwargs)
            raise CommitOutcomeUnknownError("table events: no answer (test)")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(CommitLoop, "_append", append)
    files = staged(table, rows(0))
    done = commit_stream_batch(table._handle, files, StreamMark("q", 0))
    assert done.committed is not landed  # landed: the retry found the batch committed
    fresh = sd.Store.open(table.store.uri).table("events")
    assert keys(fresh) == list(range(20)) and fresh.version == 2
    assert all(exists(fresh, files))  # referenced, never deleted


def test_unknown_outcomes_past_the_attempts_raise_and_keep_the_files(
        table: sd.Table, monkeypatch: pytest.MonkeyPatch) -> None:
    def append(self: CommitLoop, *args: Any, **kwargs: Any) -> bool:
        raise CommitOutcomeUnknownError("table events: no answer (test)")

    monkeypatch.setattr(CommitLoop, "_append", append)
    files = staged(table, rows(0))
    with pytest.raises(CommitOutcomeUnknownError):
        commit_stream_batch(table._handle, files, StreamMark("q", 0))
    assert all(exists(table, files))  # may have landed: GC's orphan pass judges them


def test_entries_survive_snapshots_reloads_and_restores(table: sd.Table) -> None:
    for i in range(3):
        commit_stream_batch(table._handle, staged(table, rows(i * 20)), StreamMark("q", i))
    commit_stream_batch(table._handle, staged(table, rows(100)), StreamMark("r", 0))
    head = table.state()
    assert {k: v[0] for k, v in head.streams.items()} == {"q": 2, "r": 0}
    fresh = sd.Store.open(table.store.uri).table("events")
    assert fresh.state() == head  # loaded from a snapshot (interval 2) and the log after it
    assert fresh._handle.states.heads.load_from_storage(head.version - 1).streams == {
        "q": head.streams["q"]}
    table.restore(2)
    assert dict(table.state().streams) == dict(head.streams)
    assert keys(table) == list(range(20))
    replay = commit_stream_batch(table._handle, staged(table, rows(100)), StreamMark("r", 0))
    assert not replay.committed and keys(table) == list(range(20))
