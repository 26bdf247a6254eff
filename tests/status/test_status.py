"""Status events: every job kind Sediment records shows up in reports."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from sediment.status import StatusStore
from sediment.status.events import KINDS
from sediment.storage import LocalObjectStore


def test_every_recorded_kind_is_reported(tmp_path: Path) -> None:
    status = StatusStore(LocalObjectStore(tmp_path))
    for i, kind in enumerate(KINDS):
        status.record(kind, f"job-{i}", "committed", rows=i)
    assert {e.kind for e in status.events()} == set(KINDS)
    assert "bulk_import" in KINDS  # bulk imports commit with kind="bulk_import"
    jobs = status.jobs("bulk_import")
    assert [j["status"] for j in jobs] == ["committed"]


def test_deferred_events_are_written_when_the_block_ends(tmp_path: Path) -> None:
    """Events recorded inside ``deferred()`` on this thread are held until the block ends
    (also when it ends with an error), each with the time it was recorded; another thread's
    events, and events after the block, are written at once."""
    status = StatusStore(LocalObjectStore(tmp_path))
    with pytest.raises(RuntimeError), status.deferred():
        first = status.record("ingest", "v1", "committed")
        with status.deferred():  # nested: the outer block writes
            status.record("ingest", "v2", "committed")
        other = threading.Thread(target=status.record, args=("gc", "g1", "finished"))
        other.start()
        other.join()
        assert [e.job_id for e in status.events()] == ["g1"]
        raise RuntimeError("the block fails")
    status.record("ingest", "v3", "committed")
    events = list(status.events("ingest"))
    assert [e.job_id for e in events] == ["v1", "v2", "v3"]
    assert events[0].time == first.time


def test_an_event_is_written_without_a_disk_flush(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A status event is a report no guarantee rests on (``ObjectStore.put_report``): on
    local disk it is renamed into place complete, with no fsync, where every other put syncs
    the file and its folder."""
    import os

    from sediment.storage import local

    objects = LocalObjectStore(tmp_path)
    status = StatusStore(objects)
    status.record("ingest", "v0", "committed")  # its folders exist from here on
    synced: list[int] = []
    monkeypatch.setattr(os, "fsync", lambda fd: synced.append(fd))
    monkeypatch.setattr(local, "_fsync_directory", lambda path: synced.append(-1))
    status.record("ingest", "v1", "committed", rows=3)
    assert synced == []
    assert [(e.job_id, e.details) for e in status.events("ingest")][1] == ("v1", {"rows": 3})
    assert not [p for p in tmp_path.rglob("*") if p.name.startswith(local._TMP)]
    objects.put("other.json", b"{}")
    assert len(synced) >= 2  # the file, then its folder
