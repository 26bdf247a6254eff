"""Sealed metadata: every JSON object Sediment writes carries a CRC-32 trailer, checked on
every read (``sediment.state.documents``, ``sediment.storage.checksums``).

For each kind of metadata object, made by the public API on a local store:

- a byte flipped on disk (lasting damage) is read again, then refused with
  CorruptMetadataError naming the table and the object's key; never read as data;
- a byte flipped on the way, in the first GET only (a store wrapper), is read again and the
  read succeeds;
- the object written as before seals (no trailer) reads as before.

The reference for "damaged" is the object's own bytes with one bit changed; the reads are
counted at the store, so "read again" is observed, not assumed.
"""

from __future__ import annotations

import itertools
import json
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import sediment as sd
from helpers import make_table, rows
from sediment.core.model import FileReference
from sediment.core.transactions import AddFiles
from sediment.dump.lock import LOCK_KEY, read_lock
from sediment.errors import CorruptMetadataError, WriteOutcomeUnknownError
from sediment.ingest import batcher, batcher_store
from sediment.ingest.batcher_store import decision
from sediment.state import log as log_module
from sediment.state import pending
from sediment.state.documents import open_sealed, sealed
from sediment.state.log import TransactionLog, log_key
from sediment.state.snapshot import object_key, read_pointer, read_snapshot, snapshot_key
from sediment.state.store import DROPPED_MARKER
from sediment.storage.base import ObjectStore
from sediment.storage.checksums import unseal_json
from sediment.storage.conditional import create_once
from sediment.storage.local import LocalObjectStore
from sediment.storage.memory import MemoryObjectStore


def _flipped(data: bytes, at: int | None = None) -> bytes:
    out = bytearray(data)
    out[len(out) // 2 if at is None else at] ^= 0x01
    return bytes(out)


class Reads:
    """Counts local GETs of keys matching ``pattern``; the first ``flips`` GETs of each such
    key come back with a byte flipped (a fault on the way, gone on the next read)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, pattern: str, flips: int = 0) -> None:
        self.pattern = re.compile(pattern)
        self.counts: dict[str, int] = {}
        real = LocalObjectStore.get

        def get(store: LocalObjectStore, key: str) -> bytes:
            data = real(store, key)
            if self.pattern.search(key):
                n = self.counts[key] = self.counts.get(key, 0) + 1
                if n <= flips and data:
                    data = _flipped(data)
            return data

        monkeypatch.setattr(LocalObjectStore, "get", get)


@dataclass(frozen=True)
class Made:
    """One metadata object made through the API: where it is, a read that needs it, and
    what its errors must name."""

    objects: ObjectStore
    key: str
    read: Callable[[], object]
    names: tuple[str, ...]
    legacy: bool = True
    """Whether the object can be rewritten as before seals (not a digest-named object)."""


def _table(tmp_path: Path, **props: object) -> sd.Table:
    store = sd.Store.open(str(tmp_path / "s"), create=True)
    return make_table(store, name="events", **props)


def _reopened(table: sd.Table) -> sd.Table:
    return sd.Store.open(table.store.uri).table(table.name)


def _log_entry(tmp_path: Path) -> Made:
    table = _table(tmp_path)
    table.ingest(rows(20, 1))
    return Made(table._handle.objects, log_key(table.version),
                lambda: _reopened(table).history(), ("table events",))


def _snapshotted(tmp_path: Path) -> sd.Table:
    table = _table(tmp_path, **{"state.snapshot.interval": 2})
    for i in range(3):
        table.ingest(rows(20, i))  # versions 2..4: snapshots at 2 and 4
    return table


def _snapshot_pointer(tmp_path: Path) -> Made:
    table = _snapshotted(tmp_path)
    objects = table._handle.objects
    return Made(objects, snapshot_key(4),
                lambda: read_pointer(objects, 4, table.table_id, name="events"),
                ("snapshot 4 of table events",))


def _snapshot_object(tmp_path: Path) -> Made:
    table = _snapshotted(tmp_path)
    objects = table._handle.objects
    key = object_key(read_pointer(objects, 4, table.table_id)["metarange"])
    return Made(objects, key,
                lambda: read_snapshot(objects, 4, table.table_id, name="events").canonical(),
                ("snapshot 4 of table events",), legacy=False)


def _tag(tmp_path: Path) -> Made:
    table = _table(tmp_path)
    table.tag("v1")
    return Made(table._handle.objects, "tags/v1.json", lambda: _reopened(table).tags(),
                ("table events",))


def _pin(tmp_path: Path) -> Made:
    table = _table(tmp_path)
    table.pin("hold", None, 3600)
    return Made(table._handle.objects, "tags/hold.json", lambda: _reopened(table).tags(),
                ("table events",))


def _store_file(tmp_path: Path) -> Made:
    store = sd.Store.open(str(tmp_path / "s"), create=True)
    return Made(store.objects, "store.json", lambda: sd.Store.open(store.uri).properties,
                (store.uri,))


def _catalog_entry(tmp_path: Path) -> Made:
    table = _table(tmp_path)
    return Made(table.store.objects, "catalog/events.json",
                lambda: sd.Store.open(table.store.uri).table("events").table_id,
                ("table events",))


def _scheme_entry(tmp_path: Path) -> Made:
    store = sd.Store.open(str(tmp_path / "s"), create=True)
    store.create_scheme("zones", [("key", pa.string())])
    return Made(store.objects, "scheme-catalog/zones.json",
                lambda: sd.Store.open(store.uri).describe_scheme("zones"), ("scheme zones",))


def _dumped(tmp_path: Path) -> tuple[sd.Table, str, ObjectStore, dict]:
    table = _table(tmp_path)
    table.ingest(rows(30, 1))
    job = table.dump(str(tmp_path / "dumps"))
    dest = LocalObjectStore(str(tmp_path / "dumps"))
    doc = json.loads(dest.get(f"{job.job_id}/job-manifest.json"))
    return table, job.manifest_uri, dest, doc


def _loader(table: sd.Table, uri: str) -> Callable[[], object]:
    """Load the dump into a new table each time; its records."""
    loads = itertools.count()
    return lambda: table.store.load(uri, f"copy{next(loads)}").query().to_pylist()


def _job_manifest(tmp_path: Path) -> Made:
    table, uri, dest, doc = _dumped(tmp_path)
    return Made(dest, f"{doc['job_id']}/job-manifest.json", _loader(table, uri),
                ("dump job manifest",))


def _task_manifest(tmp_path: Path) -> Made:
    table, uri, dest, doc = _dumped(tmp_path)
    key = doc["tasks"][0]["manifests"][0]["path"]
    # its SHA-256 is in the job manifest: rewritten unsealed, it would fail that instead
    return Made(dest, key, _loader(table, uri), ("task manifest",), legacy=False)


def _lease(tmp_path: Path) -> Made:
    table = _table(tmp_path)
    objects = table._handle.objects
    key = "pending/0123456789abcdef0123456789abcdef.json"
    objects.put(key, sealed({"writer": "elsewhere:1", "files": ["data/x.parquet"]}))
    return Made(objects, key, lambda: pending.scan_leases(objects, time.time(), table="events"),
                ("table events",))


def _batcher_request(tmp_path: Path) -> Made:
    table = _table(tmp_path)
    path = tmp_path / "in.parquet"
    pq.write_table(rows(10, 1), path)
    [request] = batcher.submit(table, [str(path)])
    def read() -> Any:
        batcher_store._SETTLED.clear()  # a request is read once per process: read it anew
        return batcher.pending(table)

    return Made(table._handle.objects, f"batcher/requests/{request.id}.json", read,
                ("table events",))


def _batcher_decision(tmp_path: Path) -> Made:
    table = _table(tmp_path)
    key = "batcher/jobs/j1.decision"
    create_once(table._handle.objects, key, b"commit")
    return Made(table._handle.objects, key, lambda: decision(table._handle, "j1"),
                ("table events",), legacy=False)


KINDS: dict[str, Callable[[Path], Made]] = {
    "log entry": _log_entry, "snapshot pointer": _snapshot_pointer,
    "snapshot object": _snapshot_object, "tag": _tag, "pin": _pin, "store.json": _store_file,
    "catalog entry": _catalog_entry, "scheme catalog entry": _scheme_entry,
    "dump job manifest": _job_manifest, "dump task manifest": _task_manifest,
    "pending-file lease": _lease, "batcher request": _batcher_request,
    "batcher decision": _batcher_decision,
}


def _path(made: Made) -> Path:
    local = made.objects.local_path(made.key)
    assert local is not None
    return Path(local)


@pytest.mark.parametrize("kind", KINDS)
def test_a_flipped_byte_on_disk_is_read_again_then_refused_naming_the_object(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str) -> None:
    made = KINDS[kind](tmp_path)
    path = _path(made)
    raw = path.read_bytes()
    assert kind in ("snapshot object", "batcher decision") or unseal_json(raw) is True
    path.write_bytes(_flipped(raw))
    reads = Reads(monkeypatch, re.escape(made.key) + "$")
    with pytest.raises(CorruptMetadataError) as caught:
        made.read()
    message = str(caught.value)
    assert "checksum mismatch" in message, message
    assert made.key in message, message
    for name in made.names:
        assert name in message, message
    assert max(reads.counts.values()) >= 2, reads.counts  # read again before refusing


@pytest.mark.parametrize("kind", KINDS)
def test_a_byte_flipped_on_the_way_is_read_again_and_the_read_succeeds(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str) -> None:
    made = KINDS[kind](tmp_path)
    expected = made.read()
    reads = Reads(monkeypatch, re.escape(made.key) + "$", flips=1)
    assert made.read() == expected
    assert reads.counts and min(reads.counts.values()) >= 2, reads.counts


@pytest.mark.parametrize("kind", [k for k in KINDS if k not in
                                  ("snapshot object", "dump task manifest", "batcher decision")])
def test_an_object_written_before_seals_reads_unchecked(tmp_path: Path, kind: str) -> None:
    made = KINDS[kind](tmp_path)
    path = _path(made)
    doc = json.loads(path.read_bytes())
    assert doc.pop("crc32")
    path.write_bytes(json.dumps(doc).encode())  # as written before seals
    assert unseal_json(path.read_bytes()) is None
    made.read()  # no error


def test_a_re_encoded_object_keeping_its_crc_field_is_refused(tmp_path: Path) -> None:
    """An edit that re-encodes a sealed object keeps ``"crc32"`` but not the trailer: a
    checksum that cannot be checked is not taken on trust."""
    made = _catalog_entry(tmp_path)
    path = _path(made)
    path.write_bytes(json.dumps(json.loads(path.read_bytes()), indent=2).encode())
    with pytest.raises(CorruptMetadataError, match=r"catalog/events\.json.*checksum mismatch"):
        made.read()


def test_a_dropped_marker_is_sealed(tmp_path: Path) -> None:
    table = _table(tmp_path)
    objects = table._handle.objects
    table.store.drop_table("events")
    assert open_sealed(objects.get(DROPPED_MARKER), "marker")["name"] == "events"
    assert unseal_json(objects.get(DROPPED_MARKER)) is True


def test_a_damaged_dump_lock_is_read_again_and_else_a_lock_of_nobody(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
        ) -> None:
    """As an unreadable lock was before seals: it can only be abandoned or resumed."""
    objects = LocalObjectStore(str(tmp_path / "t"))
    objects.put(LOCK_KEY, sealed({"job_id": "j", "owner": "o", "heartbeat": 1.0}))
    raw = objects.get(LOCK_KEY)
    with monkeypatch.context() as m:
        reads = Reads(m, re.escape(LOCK_KEY) + "$", flips=1)
        assert read_lock(objects) == (raw, {"job_id": "j", "owner": "o", "heartbeat": 1.0})
        assert reads.counts == {LOCK_KEY: 2}
    objects.put(LOCK_KEY, _flipped(raw))
    with caplog.at_level(logging.WARNING, logger="sediment.dump.lock"):
        assert read_lock(objects) == (_flipped(raw), {})
    assert "checksum mismatch" in caplog.text and LOCK_KEY in caplog.text


def test_a_damaged_status_event_is_left_out_with_a_warning(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    table = _table(tmp_path)
    status = table._handle.status
    status.record("gc", "job-1", "started")
    status.record("gc", "job-1", "finished", deleted=3)
    keys = [o.key for o in table._handle.objects.list("status/gc/")]
    assert all(unseal_json(table._handle.objects.get(k)) for k in keys)
    damaged = Path(str(table._handle.objects.local_path(keys[0])))
    damaged.write_bytes(_flipped(damaged.read_bytes()))
    with caplog.at_level(logging.WARNING, logger="sediment.status.events"):
        events = table.events("gc")
    assert [e.status for e in events] == ["finished"]
    assert keys[0] in caplog.text and "checksum mismatch" in caplog.text


# ---- create_once: a damaged read-back is no answer -------------------------------------------
class LostAnswerFlippedReadBack(MemoryObjectStore):
    """A put-if-absent that lands but answers "taken" (a client's retry meeting its own
    write), and a first read-back with a byte flipped on the way."""

    def __init__(self) -> None:
        super().__init__("lost-answer-flipped-read-back")
        self.lose = 0
        self.flip = 0
        self.gets = 0

    def put_if_absent(self, key: str, data: bytes) -> bool:
        created = super().put_if_absent(key, data)
        if created and self.lose:
            self.lose -= 1
            return False
        return created

    def get(self, key: str) -> bytes:
        self.gets += 1
        data = super().get(key)
        if self.flip:
            self.flip -= 1
            data = _flipped(data)
        return data


def test_create_once_reads_a_damaged_read_back_again_instead_of_losing_the_race() -> None:
    objects = LostAnswerFlippedReadBack()
    mine = sealed({"id": "mine", "n": 1})
    objects.lose, objects.flip = 1, 1
    assert create_once(objects, "k.json", mine)  # ours: the damaged read was no answer
    assert objects.gets == 2
    # another writer's (intact) object is still another writer's
    assert not create_once(objects, "k.json", sealed({"id": "theirs", "n": 1}))
    # unsealed bytes keep the old rule: a differing read-back is another writer's
    objects.lose, objects.flip = 1, 1
    assert not create_once(objects, "raw", b"ours")
    # a read-back that stays damaged leaves the outcome unknown, never "lost"
    objects.lose, objects.flip = 1, 100
    with pytest.raises(WriteOutcomeUnknownError, match="k2.json"):
        create_once(objects, "k2.json", mine, attempts=2)


def test_a_commit_whose_read_back_is_damaged_lands_once() -> None:
    """The committer's put landed but its answer was lost and the read-back came damaged: the
    commit is its own (version 2), not a lost race retried at version 3."""
    objects = LostAnswerFlippedReadBack()
    states = TransactionLog(objects, "t1", "events")
    ref = FileReference("data/a.parquet", "root", 5)
    objects.lose, objects.flip = 1, 1
    assert states.try_append(2, 1.0, AddFiles([ref]), "commit-1")
    assert [o.key for o in objects.list("log/")] == [log_key(2)]
    assert states.read(2).transaction == AddFiles([ref])


# ---- the log's envelope carries the seal; the transaction body is unchanged ------------------
SEALED_ENVELOPE = (
    b'{"format":1,"table_id":"t1","version":2,"time":1.5,"writer":"host:1",'
    b'"commit_id":"c1","kind":"add_files","summary":"SUMMARY",'
    b'"transaction":TRANSACTION,"crc32":"CRC"}')


def test_the_seal_is_on_the_log_envelope_and_the_transaction_body_is_unchanged(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(log_module, "_WRITER", "host:1")
    txn = AddFiles([FileReference("data/a.parquet", "root", 5)])
    raw = TransactionLog(MemoryObjectStore("envelope"), "t1").encode(2, 1.5, txn, "c1")
    body = json.dumps(txn.to_json(), separators=(",", ":")).encode()
    crc = raw[-10:-2]
    assert raw == SEALED_ENVELOPE.replace(b"SUMMARY", txn.summary().encode()) \
        .replace(b"TRANSACTION", body).replace(b"CRC", crc)
    assert unseal_json(raw) is True
    doc = open_sealed(raw, "entry")
    assert "crc32" not in doc and doc["transaction"] == txn.to_json()
