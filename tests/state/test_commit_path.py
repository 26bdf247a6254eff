"""The commit path: outcomes are learned by reading, never guessed; a cached head is re-judged
at the real head before a transaction is refused; the head lock never spans object-store I/O.

Faults are injected by wrapping a real store (memory or local disk) so that each case is exact:
a put that lands but whose answer is lost, a store that stops answering, a put that blocks.
The same faults over real HTTP (moto behind a fault-injecting proxy) are in test_faults.py.
"""

from __future__ import annotations

import errno
import os
import threading
import time
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pytest

import sediment as sd
from reference import Reference, assert_matches
from sediment.core.model import FileReference
from sediment.core.transactions import AddFiles, SplitPartition
from sediment.errors import (
    AccessDeniedError,
    CommitOutcomeUnknownError,
    StorageError,
    TransactionInvalidError,
    WriteRefusedError,
)
from sediment.state.log import log_key
from sediment.state.store import StateStore
from sediment.storage.base import ObjectInfo, ObjectStore
from sediment.storage.conditional import create_once
from sediment.storage.local import LocalObjectStore
from sediment.workload import benchmark_schema, generate

SCHEMA = benchmark_schema()


class FaultyStore(ObjectStore):
    """Delegates to ``inner``; ``lose_answers`` puts of log entries land and then raise (the
    answer is lost); ``retried_answers`` puts of log entries land and then answer "taken" (as
    an S3 client's own retry of a put whose answer was lost meets 412); ``dead`` makes every
    call raise; ``block`` holds log puts until set; conditional puts after the first
    ``allowed_puts`` are refused (AccessDeniedError, as a read-only role's)."""

    def __init__(self, inner: ObjectStore) -> None:
        self.inner = inner
        self.uri = inner.uri
        self.probe_limit = inner.probe_limit
        self.lose_answers = 0
        self.retried_answers = 0
        self.dead = False
        self.block: threading.Event | None = None
        self.blocked = threading.Event()
        self.allowed_puts: int | None = None
        self.puts = 0

    def _check(self) -> None:
        if self.dead:
            raise StorageError(f"connection reset talking to {self.uri}")

    def get(self, key: str) -> bytes:
        self._check()
        return self.inner.get(key)

    def get_range(self, key: str, start: int, end: int) -> bytes:
        self._check()
        return self.inner.get_range(key, start, end)

    def put(self, key: str, data: bytes) -> None:
        self._check()
        self.inner.put(key, data)

    def put_if_absent(self, key: str, data: bytes) -> bool:
        self._check()
        self.puts += 1
        if self.allowed_puts is not None and self.puts > self.allowed_puts:
            raise AccessDeniedError(f"S3 conditional put of {key!r} failed: AccessDenied")
        if self.block is not None and "log/" in key:
            self.blocked.set()
            self.block.wait(30)
        created = self.inner.put_if_absent(key, data)
        if "log/" in key and self.lose_answers:
            self.lose_answers -= 1
            raise StorageError(f"connection closed before the answer to PUT {key}")
        if "log/" in key and self.retried_answers and created:
            self.retried_answers -= 1
            return False
        return created

    def list(self, prefix: str, *, start_after: str | None = None) -> Iterator[ObjectInfo]:
        self._check()
        return self.inner.list(prefix, start_after=start_after)

    def delete_many(self, keys: Iterable[str]) -> None:
        self._check()
        self.inner.delete_many(keys)

    def head(self, key: str) -> ObjectInfo | None:
        self._check()
        return self.inner.head(key)

    def arrow_filesystem(self) -> tuple[pafs.FileSystem, str]:
        return self.inner.arrow_filesystem()

    def temporaries(self, prefix: str) -> Iterator[ObjectInfo]:
        return self.inner.temporaries(prefix)


def init_store(objects: ObjectStore) -> StateStore:
    from sediment.core.state import build_partition_tree
    from sediment.core.transactions import InitialiseTable

    states = StateStore(objects, "t1", "events")
    states.commit(InitialiseTable(SCHEMA, {}, build_partition_tree(SCHEMA, None)))
    return states


def ref(name: str, pid: str = "root") -> FileReference:
    return FileReference(name, pid, 10)


# ---- create_once ----------------------------------------------------------------------------
def test_create_once_recognises_its_own_bytes_after_a_lost_answer(tmp_path: Path) -> None:
    objects = FaultyStore(LocalObjectStore(tmp_path))
    objects.lose_answers = 1
    assert create_once(objects, "log/x", b"mine-123")  # landed, answer lost, read back: ours
    assert not create_once(objects, "log/x", b"other-456")  # another writer's bytes are there
    assert objects.inner.get("log/x") == b"mine-123"


def test_create_once_never_guesses_when_the_store_is_gone(tmp_path: Path) -> None:
    objects = FaultyStore(LocalObjectStore(tmp_path))
    objects.dead = True
    with pytest.raises(sd.SedimentError, match="could not learn whether"):
        create_once(objects, "k", b"v", attempts=2)


def test_create_once_raises_a_refusal_at_once(tmp_path: Path) -> None:
    objects = FaultyStore(LocalObjectStore(tmp_path))
    objects.allowed_puts = 0
    started = time.monotonic()
    with pytest.raises(AccessDeniedError):
        create_once(objects, "log/x", b"mine-123")
    assert objects.puts == 1 and time.monotonic() - started < 1  # no retries, no backoff
    assert not objects.inner.exists("log/x")


@pytest.mark.parametrize("blocker", ["a file on the path", "a read-only folder"])
def test_a_disk_that_cannot_hold_the_object_refuses_at_once(tmp_path: Path, blocker: str
                                                            ) -> None:
    """Local disk: a write that cannot land (a file where a folder must be, a folder the
    process may not write) is a WriteRefusedError at once, not eight tries and ~12 s of
    backoff ending in "could not learn whether it was created"."""
    if blocker == "a file on the path":
        (tmp_path / "store").write_text("")
        root = tmp_path / "store" / "inside"
    else:
        if os.geteuid() == 0:
            pytest.skip("file permissions do not bind root")
        root = tmp_path / "ro"
        root.mkdir()
        root.chmod(0o555)
    objects = LocalObjectStore(root)
    started = time.monotonic()
    try:
        with pytest.raises(WriteRefusedError, match=r"log/x"):
            create_once(objects, "log/x", b"mine-123")
    finally:
        if blocker != "a file on the path":
            root.chmod(0o755)
    assert time.monotonic() - started < 1  # no retries, no backoff


@pytest.mark.parametrize(("code", "refused"), [(errno.EROFS, True), (errno.ENOSPC, True),
                                               (errno.EIO, False)])
def test_a_link_refused_is_an_answer_and_an_io_error_is_not(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int, refused: bool) -> None:
    """The link that makes a local object: refused for a reason that says it made nothing
    (read-only, no room) -> WriteRefusedError; an I/O error (which a network file system may
    give for a link it did make) stays an unknown outcome, settled by reading the key."""
    from sediment.storage import local

    objects = LocalObjectStore(tmp_path)

    def link(src: str, dst: str) -> None:
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(local.os, "link", link)
    with pytest.raises(StorageError) as e:
        objects.put_if_absent("log/x", b"mine")
    assert isinstance(e.value, WriteRefusedError) is refused
    assert not (tmp_path / "log" / "x").exists()


def test_a_store_in_a_folder_that_cannot_be_made_fails_at_once(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("")
    started = time.monotonic()
    with pytest.raises(WriteRefusedError, match="store.json"):
        sd.Store.open(str(tmp_path / "a-file" / "store"), create=True)
    assert time.monotonic() - started < 1


# ---- lost answers and unknown outcomes ---------------------------------------------------------
def test_a_commit_whose_answer_was_lost_is_recognised_as_committed(tmp_path: Path) -> None:
    objects = FaultyStore(LocalObjectStore(tmp_path))
    states = init_store(objects)
    objects.lose_answers = 1
    state = states.commit(AddFiles([ref("f1")]))
    assert state.version == 2 and "f1" in state.refcount
    fresh = StateStore(objects.inner, "t1").head()
    assert fresh.version == 2 and "f1" in fresh.refcount
    assert [o.key for o in objects.inner.list("log/")] == [log_key(1), log_key(2)]


def test_an_ingest_whose_answer_was_lost_keeps_its_files(tmp_path: Path) -> None:
    """The defect: a retried put got 412, the ingest took it for a lost race, raised and
    deleted the data files of the version that did commit."""
    store = sd.Store.open(str(tmp_path / "s"), create=True)
    table = store.create_table("events", SCHEMA, split_points=["m"])
    faulty = FaultyStore(table._handle.objects)
    table._handle.objects = table._handle.states.objects = table._handle.states.log.objects = faulty
    faulty.lose_answers = 1
    data = pa.Table.from_batches(list(generate(500, seed=1, batch_rows=500)))
    result = table.ingest(data)
    assert result.rows == 500
    again = sd.Store.open(str(tmp_path / "s")).table("events")
    ref_ = Reference(SCHEMA)
    ref_.add(data)
    assert_matches(again.query(), ref_)
    for f in again.state().refcount:
        assert again._handle.objects.exists(f)


def test_a_landed_put_answered_taken_is_read_back_not_taken_for_a_lost_race(
        tmp_path: Path) -> None:
    """The same defect where the client's own retry answers: the commit's log entry landed,
    the retried put met 412 ("taken"); only reading the entry back tells it is ours. Taken for
    a lost race, the ingest would re-validate, commit again or fail, and drop its files."""
    store = sd.Store.open(str(tmp_path / "s"), create=True)
    table = store.create_table("events", SCHEMA, split_points=["m"])
    faulty = FaultyStore(table._handle.objects)
    table._handle.objects = table._handle.states.objects = table._handle.states.log.objects = faulty
    faulty.retried_answers = 1
    before = table.version
    data = pa.Table.from_batches(list(generate(300, seed=2, batch_rows=300)))
    assert table.ingest(data).rows == 300
    assert faulty.retried_answers == 0  # the fault fired
    again = sd.Store.open(str(tmp_path / "s")).table("events")
    assert again.version == before + 1  # one entry: the landed one, not a second commit
    ref_ = Reference(SCHEMA)
    ref_.add(data)
    assert_matches(again.query(), ref_)
    for f in again.state().refcount:
        assert again._handle.objects.exists(f)


def test_an_unknown_outcome_raises_and_keeps_the_staged_files(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = sd.Store.open(str(tmp_path / "s"), create=True)
    table = store.create_table("events", SCHEMA)
    faulty = FaultyStore(table._handle.objects)
    table._handle.objects = table._handle.states.objects = table._handle.states.log.objects = faulty
    before = {o.key for o in faulty.inner.list("data/")}

    original = faulty.put_if_absent

    def put_then_die(key: str, data: bytes) -> bool:
        if "log/" in key:
            faulty.dead = True  # the store stops answering before the put is answered
        return original(key, data)

    faulty.put_if_absent = put_then_die  # type: ignore[method-assign]
    data = pa.Table.from_batches(list(generate(100, seed=2, batch_rows=100)))
    monkeypatch.setattr("sediment.storage.conditional.ATTEMPTS", 2)
    with pytest.raises(CommitOutcomeUnknownError, match="could not learn whether version 2"):
        table.ingest(data)
    faulty.dead = False
    staged = {o.key for o in faulty.inner.list("data/")} - before
    assert staged, "the files of a commit that may have landed were deleted"
    assert sd.Store.open(str(tmp_path / "s")).table("events").version == 1


# ---- re-validation at the real head ------------------------------------------------------------
def test_a_stale_cache_is_re_read_before_a_transaction_is_refused(tmp_path: Path) -> None:
    objects = LocalObjectStore(tmp_path)
    a = init_store(objects)
    b = StateStore(objects, "t1", "events")
    b.head()  # b caches version 1
    a.commit(SplitPartition("root", ("m",), "L", "R"))  # another handle splits the root
    # invalid against b's cache (no partition L there), valid at the real head: committed
    state = b.commit(AddFiles([ref("f", "L")]))
    assert state.version == 3 and "f" in state.references("L")


def test_a_refusal_names_the_real_heads_version(tmp_path: Path) -> None:
    objects = LocalObjectStore(tmp_path)
    a = init_store(objects)
    b = StateStore(objects, "t1", "events")
    b.head()
    a.commit(AddFiles([ref("f")]))
    a.commit(AddFiles([ref("g")]))
    with pytest.raises(TransactionInvalidError, match=r"at version 3: file f is already"):
        b.commit(AddFiles([ref("f")]))


# ---- the lock ------------------------------------------------------------------------------------
def test_readers_never_wait_behind_a_committing_writer(tmp_path: Path) -> None:
    objects = FaultyStore(LocalObjectStore(tmp_path))
    states = init_store(objects)
    objects.block = threading.Event()
    writer = threading.Thread(target=lambda: states.commit(AddFiles([ref("f")])))
    writer.start()
    try:
        assert objects.blocked.wait(10), "the writer never reached its put"
        got: list[int] = []
        reader = threading.Thread(target=lambda: got.append(states.head(refresh=False).version))
        reader.start()
        reader.join(5)
        assert got == [1], "a reader of the cached head waited behind the writer's put"
    finally:
        objects.block.set()
        writer.join(30)
    assert states.head().version == 2


def test_a_commit_is_refused_when_its_files_are_gone(tmp_path: Path) -> None:
    """A writer stalled past its lease: GC collected its files; committing them would lose
    records, so the commit is refused instead."""
    from sediment.state import pending

    store = sd.Store.open(str(tmp_path / "s"), create=True)
    table = store.create_table("events", SCHEMA)
    name = f"data/root/{uuid.uuid4().hex}.parquet"
    pending.register(table._handle.objects, [name])  # written by this process (then lost)
    with pytest.raises(TransactionInvalidError, match="no longer exist"):
        table._handle.states.commit(AddFiles([FileReference(name, "root", 5)]))
    pending.release(table._handle.objects, [name])
    assert table.version == 1


def test_writers_of_one_process_take_turns_instead_of_racing(tmp_path: Path) -> None:
    """Threads of one process committing at once never lose a version to each other: each
    puts exactly once (they queue for the commit, not for the head readers use)."""
    states = init_store(LocalObjectStore(tmp_path))
    puts: list[int] = []
    original = states.log.try_append

    def counting(version: int, t: float, txn: object, commit_id: str,
                 scheme_version: int | None = None) -> bool:
        puts.append(version)
        return original(version, t, txn, commit_id, scheme_version)  # type: ignore[arg-type]

    states.log.try_append = counting  # type: ignore[method-assign]
    threads = [threading.Thread(target=lambda i=i: states.commit(AddFiles([ref(f"f{i}")])))
               for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(puts) == list(range(2, 10))
    assert states.head().version == 9
