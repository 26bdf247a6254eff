"""StateStore: commits, loading any version (snapshot + replay), snapshots, corruption, races."""

from __future__ import annotations

import itertools
import json
import logging
import random
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sediment.core.references as references_module
import sediment.state.snapshot as snapshot_module
from sediment.core.model import FileReference, Partition, Region, file_sequence
from sediment.core.state import ROOT_PARTITION_ID, TableState
from sediment.core.transactions import (
    AddFiles,
    AssignJobIds,
    DeleteFiles,
    InitialiseTable,
    JobAssignment,
    ReplaceFileReferences,
    SetOnline,
    SetProperties,
    SplitFileReferences,
    SplitPartition,
    SplitReference,
    Transaction,
)
from sediment.errors import (
    CorruptMetadataError,
    QueryError,
    TransactionInvalidError,
    UnsupportedFormatError,
)
from sediment.schema import Schema
from sediment.state import StateStore
from sediment.state.log import log_key
from sediment.state.snapshot import (
    object_key,
    read_pointer,
    snapshot_key,
    snapshot_versions,
)
from sediment.storage import LocalObjectStore, MemoryObjectStore, ObjectStore
from support.internals import range_digests

T = TypeVar("T")
TABLE_ID = "tbl"
SCHEMA = Schema(row_keys=[("key", pa.string())], values=[("value", pa.int64())])
ROOT = [Partition(ROOT_PARTITION_ID, None, Region())]
ALPHABET = "abcdefghijklmnopqrstuvwxyz"


def init(interval: int = 3, **props: Any) -> InitialiseTable:
    return InitialiseTable(SCHEMA, {"state.snapshot.interval": interval, **props}, ROOT)


def ref(name: str, pid: str, records: int = 10, job_id: str | None = None) -> FileReference:
    return FileReference(name, pid, records, False, job_id)


def replay(txns: Sequence[Transaction], times: Sequence[float], upto: int) -> TableState:
    """The state after the first ``upto`` transactions, applied to a fresh state directly."""
    state = TableState(TABLE_ID)
    for v, (txn, t) in enumerate(zip(txns[:upto], times[:upto], strict=True), start=1):
        txn.apply(state, t)
        state.version = v
        state.last_update = t
    return state


def assert_every_version_loads(objects: ObjectStore, txns: Sequence[Transaction]) -> None:
    """Every version, loaded by a fresh StateStore (snapshot + replay), equals the pure replay."""
    store = StateStore(objects, TABLE_ID)
    history = store.history()
    assert [h.version for h in history] == list(range(1, len(txns) + 1))
    assert [h.kind for h in history] == [t.kind for t in txns]
    times = [h.time for h in history]
    for v in range(1, len(txns) + 1):
        loaded = store.load(v)
        expected = replay(txns, times, v)
        assert loaded.version == v
        assert loaded.canonical() == expected.canonical(), f"version {v} differs"
    assert store.head() == replay(txns, times, len(txns))


class CountingStore(MemoryObjectStore):
    """A memory store that records the key of every write."""

    def __init__(self) -> None:
        super().__init__()
        self.puts: list[str] = []

    def put(self, key: str, data: bytes) -> None:
        self.puts.append(key)
        super().put(key, data)

    def put_if_absent(self, key: str, data: bytes) -> bool:
        self.puts.append(key)
        return super().put_if_absent(key, data)


class CountingLocalStore(LocalObjectStore):
    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.puts: list[str] = []

    def put(self, key: str, data: bytes) -> None:
        self.puts.append(key)
        super().put(key, data)


@pytest.fixture(params=["memory", "local"])
def objects(request: pytest.FixtureRequest, tmp_path: Path) -> ObjectStore:
    if request.param == "memory":
        return MemoryObjectStore()
    return LocalObjectStore(tmp_path / "table")


# ---- random valid transactions ----------------------------------------------------------------

class Chooser:
    """Random choices from hypothesis (shrinkable) or from a seeded Random."""

    def __init__(self, integer: Callable[[int, int], int],
                 sample: Callable[[Sequence[Any]], Any]) -> None:
        self.integer = integer
        self.sample = sample

    def choice(self, seq: Sequence[T]) -> T:
        return self.sample(seq)

    def subset(self, seq: Sequence[T]) -> list[T]:
        """A non-empty subset, in order."""
        picked = [x for x in seq if self.integer(0, 1)]
        return picked or [seq[0]]


def next_transaction(state: TableState, c: Chooser,
                     ids: itertools.count[int]) -> Transaction | None:
    """A transaction valid after ``state``, or None when the chosen kind does not apply."""
    op = c.choice(["add", "add", "split", "push", "assign", "replace", "delete", "props",
                   "online"])
    if op == "add":
        pids = sorted(state.partitions)
        refs = []
        for _ in range(c.integer(1, 3)):
            name = f"f{next(ids)}"
            for pid in sorted({c.choice(pids) for _ in range(c.integer(1, 2))}):
                refs.append(FileReference(name, pid, c.integer(0, 100), bool(c.integer(0, 1))))
        return AddFiles(refs)
    if op == "split":
        leaf = c.choice(state.leaf_partitions())
        key = ("".join(c.choice(ALPHABET) for _ in range(c.integer(1, 3))),)
        if not leaf.region.is_strictly_inside(key):
            return None
        n = next(ids)
        return SplitPartition(leaf.id, key, f"p{n}l", f"p{n}r")
    if op == "push":
        candidates = [(pid, name) for pid in sorted(state.partitions)
                      if not state.partitions[pid].is_leaf
                      for name, r in sorted(state.references(pid).items()) if r.job_id is None]
        if not candidates:
            return None
        pid, name = c.choice(candidates)
        kids = [k for k in state.partitions[pid].children if name not in state.references(k)]
        if not kids:
            return None
        kids = c.subset(kids)
        records = state.references(pid)[name].records
        return SplitFileReferences([SplitReference(
            name, pid, [FileReference(name, k, records // len(kids), True) for k in kids])])
    if op == "assign":
        candidates = [pid for pid in sorted(state.partitions)
                      if any(r.job_id is None for r in state.references(pid).values())]
        if not candidates:
            return None
        pid = c.choice(candidates)
        free = sorted(n for n, r in state.references(pid).items() if r.job_id is None)
        return AssignJobIds([JobAssignment(f"job{next(ids)}", pid, c.subset(free))])
    if op == "replace":
        jobs = sorted({(r.job_id, r.partition_id) for r in state.all_references()
                       if r.job_id is not None})
        if not jobs:
            return None
        job, pid = c.choice(jobs)
        inputs = sorted(n for n, r in state.references(pid).items() if r.job_id == job)
        out = None if c.integer(0, 4) == 0 else ref(f"f{next(ids)}", pid, c.integer(0, 100))
        return ReplaceFileReferences(job, pid, inputs, out)
    if op == "delete":
        if not state.unreferenced:
            return None
        return DeleteFiles(c.subset(sorted(state.unreferenced)))
    if op == "props":
        kind = c.integer(0, 2)
        if kind == 0:
            return SetProperties({}, ["compaction.batch_size"])
        if kind == 1:
            return SetProperties({"state.snapshot.interval": c.integer(1, 4)})
        return SetProperties({"compaction.batch_size": c.integer(2, 20),
                              "compaction.strategy": c.choice(["basic", "size_ratio"])})
    return SetOnline(bool(c.integer(0, 1)))


def run_random_commits(objects: ObjectStore, c: Chooser, steps: int) -> list[Transaction]:
    store = StateStore(objects, TABLE_ID)
    txns: list[Transaction] = [init(3)]
    last = store.commit(txns[0])
    assert last.version == 1
    ids = itertools.count()
    model = store.head()
    tries = 0
    while len(txns) <= steps and tries < steps * 4:
        tries += 1
        txn = next_transaction(model, c, ids)
        if txn is None:
            continue
        txn.validate(model)  # the generator only builds valid transactions
        new = store.commit(txn)
        assert new.version == last.version + 1
        assert new.last_update >= last.last_update
        last = new
        txns.append(txn)
        model = store.head()
    return txns


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.data())
def test_random_histories_load_at_every_version(data: st.DataObject) -> None:
    c = Chooser(lambda lo, hi: data.draw(st.integers(lo, hi)),
                lambda seq: data.draw(st.sampled_from(seq)))
    objects = MemoryObjectStore()
    txns = run_random_commits(objects, c, steps=data.draw(st.integers(1, 24)))
    assert_every_version_loads(objects, txns)


@pytest.mark.parametrize("seed", [1, 2])
def test_long_random_history_on_local_disk(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    objects = LocalObjectStore(tmp_path / "t")
    txns = run_random_commits(objects, Chooser(rng.randint, rng.choice), steps=60)
    assert len(txns) > 40
    snaps = snapshot_versions(objects)
    assert snaps and all(v <= len(txns) for v in snaps)
    assert_every_version_loads(objects, txns)


# ---- commits and loads ------------------------------------------------------------------------

def _basic_history(interval: int = 3) -> list[Transaction]:
    return [
        init(interval),
        AddFiles([ref("a", "root"), ref("b", "root")]),
        SplitPartition("root", ("m",), "L", "R"),
        SplitFileReferences([SplitReference("a", "root", [ref("a", "L", 5), ref("a", "R", 5)])]),
        AssignJobIds([JobAssignment("j1", "L", ["a"])]),
        ReplaceFileReferences("j1", "L", ["a"], ref("c", "L", 5)),
        AddFiles([ref("d", "R", 1)]),
        SetProperties({"compaction.batch_size": 4}),
        SetOnline(False),
        SplitPartition("L", ("c",), "LL", "LR"),
    ]


def test_commit_returns_increasing_versions_and_loads_each(objects: ObjectStore) -> None:
    store = StateStore(objects, TABLE_ID)
    txns = _basic_history()
    for v, txn in enumerate(txns, start=1):
        state = store.commit(txn)
        assert state.version == v
        assert store.head().version == v
    assert snapshot_versions(objects) == [3, 6, 9]
    assert_every_version_loads(objects, txns)
    # the committing instance loads old versions as well
    times = [h.time for h in store.history()]
    for v in (1, 3, 4, 9, 10):
        assert store.load(v) == replay(txns, times, v)
    assert store.load() == replay(txns, times, len(txns))


def test_load_rejects_versions_outside_the_log(objects: ObjectStore) -> None:
    store = StateStore(objects, TABLE_ID)
    store.commit(init())
    store.commit(SetOnline(False))
    for v in (0, 3, -1):
        with pytest.raises(QueryError, match=f"no version {v}"):
            store.load(v)


def test_head_of_an_empty_log_is_an_empty_state() -> None:
    state = StateStore(MemoryObjectStore(), TABLE_ID).head()
    assert state.version == 0 and state.schema is None


def test_returned_states_are_private_copies(objects: ObjectStore) -> None:
    store = StateStore(objects, TABLE_ID)
    store.commit(init())
    store.commit(AddFiles([ref("a", "root")]))
    mine = store.head()
    mine.remove_reference("root", "a", 0.0)
    mine.properties["x"] = 1
    assert store.head().refcount == {"a": 1}
    assert "x" not in store.head().properties
    store.commit(AddFiles([ref("b", "root")]))
    assert dict(mine.references("root")) == {}


def test_history_lists_every_commit(objects: ObjectStore) -> None:
    store = StateStore(objects, TABLE_ID)
    txns = _basic_history()
    times = [store.commit(t).last_update for t in txns]
    history = store.history()
    assert [(h.version, h.time, h.kind, h.summary) for h in history] == [
        (v, t, txn.kind, txn.summary())
        for v, (t, txn) in enumerate(zip(times, txns, strict=True), 1)]
    assert times == sorted(times)
    assert history[1].summary == "2 files, 20 records"
    assert history[2].summary == "root split at ('m',)"
    assert StateStore(objects, TABLE_ID).history() == history


def test_summaries_count_in_words_a_person_reads() -> None:
    one = AddFiles([FileReference("a", "root", 1)])
    assert one.summary() == "1 file, 1 record"
    assert AddFiles([FileReference("a", "root", 2), FileReference("b", "root", 3)]
                    ).summary() == "2 files, 5 records"
    assert ReplaceFileReferences("j", "root", ["a"], None).summary() == "job j: 1 file -> 1 in root"


def test_history_reads_logged_summaries_and_decodes_entries_without_one(
        objects: ObjectStore) -> None:
    """Entries carry their summary line, so history builds no transaction; an entry written
    before summaries were logged (no ``summary`` field) is decoded whole, with the same row."""
    store = StateStore(objects, TABLE_ID)
    for t in _basic_history():
        store.commit(t)
    history = store.history()
    assert all(json.loads(objects.get(log_key(h.version)))["summary"] == h.summary
               for h in history)
    for h in history:
        _edit(objects, h.version, lambda d: {k: v for k, v in d.items() if k != "summary"})
    assert StateStore(objects, TABLE_ID).history() == history


def test_partition_totals_match_the_references(objects: ObjectStore) -> None:
    """Per-partition (references, records), from a snapshot's Arrow slices still undecoded,
    from decoded ones and from references added since, equal the references' own sums."""
    store, _ = _eight_commits(objects)

    def expected(state: TableState) -> dict[str, tuple[int, int]]:
        return {pid: (len(r), sum(x.records for x in r.values()))
                for pid in state.partitions_with_references()
                for r in [state.references(pid)]}

    loaded = StateStore(objects, TABLE_ID).load(6)  # straight from snapshot 6: lazy
    totals = loaded.partition_totals()
    assert totals == expected(loaded) == loaded.partition_totals()  # decoded now
    head = store.head()
    assert head.partition_totals() == expected(head)


def test_decoding_a_whole_snapshot_table_gives_each_partitions_references(
        objects: ObjectStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """A plan of every leaf decodes the snapshot's reference table in one pass; each
    partition then holds exactly what decoding its own slice gives."""
    _eight_commits(objects)
    one_by_one = StateStore(objects, TABLE_ID).load(6)
    expected = {pid: dict(one_by_one.references(pid))
                for pid in one_by_one.partitions_with_references()}
    whole = StateStore(objects, TABLE_ID).load(6)
    monkeypatch.setattr(references_module, "WHOLE_DECODE_MIN_PARTITIONS", 1)  # a small table too
    whole.decode_all_references()
    assert {pid: dict(whole.references(pid))
            for pid in whole.partitions_with_references()} == expected


def test_invalid_transaction_writes_nothing(objects: ObjectStore) -> None:
    store = StateStore(objects, TABLE_ID)
    store.commit(init())
    with pytest.raises(TransactionInvalidError, match="no partition 'L'"):
        store.commit(AddFiles([ref("a", "L")]))
    assert [o.key for o in objects.list("log/")] == [log_key(1)]
    assert store.head().version == 1


# ---- snapshots ------------------------------------------------------------------------------

def _tree(depth: int) -> list[Partition]:
    """A balanced tree with deterministic ids and 2**depth leaves over keys 'k0000'..."""
    out: list[Partition] = []
    n_leaves = 2 ** depth

    def build(pid: str, parent: str | None, lo: int, hi: int) -> None:
        region = Region(None if lo == 0 else (f"k{lo:04d}",),
                        None if hi == n_leaves else (f"k{hi:04d}",))
        if hi - lo == 1:
            out.append(Partition(pid, parent, region))
            return
        mid = (lo + hi) // 2
        left, right = f"p{lo:04d}-{mid:04d}", f"p{mid:04d}-{hi:04d}"
        out.append(Partition(pid, parent, region, (left, right), (f"k{mid:04d}",)))
        build(left, pid, lo, mid)
        build(right, pid, mid, hi)

    build(ROOT_PARTITION_ID, None, 0, n_leaves)
    return out


@pytest.mark.parametrize("kind", ["memory", "local"])
def test_unchanged_snapshot_ranges_are_reused(kind: str, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(snapshot_module, "RANGE_MIN_ROWS", 5)
    monkeypatch.setattr(snapshot_module, "RANGE_MAX_ROWS", 20)
    objects: CountingStore | CountingLocalStore = (
        CountingStore() if kind == "memory" else CountingLocalStore(tmp_path / "t"))
    parts = _tree(6)
    leaves = sorted(p.id for p in parts if p.is_leaf)
    assert len(leaves) == 64
    store = StateStore(objects, TABLE_ID)
    txns: list[Transaction] = [
        InitialiseTable(SCHEMA, {"state.snapshot.interval": 1000}, parts),
        AddFiles([ref(f"{pid}-{i}", pid, i + 1) for pid in leaves for i in range(3)]),
    ]
    for t in txns:
        store.commit(t)
    store.write_snapshot()
    before = range_digests(objects, 2, TABLE_ID)
    assert len(before) >= 8
    assert sum(r.rows for r in before) == 192
    assert all(r.rows <= 20 for r in before)
    mtimes = {r.digest: objects.head(object_key(r.digest)).mtime for r in before}

    def commit_and_snapshot(writer: StateStore, txn: Transaction) -> list[str]:
        txns.append(txn)
        writer.commit(txn)
        objects.puts.clear()
        writer.write_snapshot()
        return list(objects.puts)

    def check(old_version: int, new_version: int, touched: str, puts: list[str]) -> None:
        old = range_digests(objects, old_version, TABLE_ID)
        new = range_digests(objects, new_version, TABLE_ID)
        old_digests = {r.digest for r in old}
        changed = [r for r in new if r.digest not in old_digests]
        assert 1 <= len(changed) <= 2, (old, new)
        assert len(new) - len(changed) >= len(new) - 2
        assert any(r.first_partition <= touched <= r.last_partition for r in changed)
        pointer = read_pointer(objects, new_version, TABLE_ID)
        assert sorted(puts) == sorted([object_key(r.digest) for r in changed]
                                      + [object_key(pointer["metarange"]),
                                         snapshot_key(new_version)])
        for r in new:
            if r.digest in mtimes:
                assert objects.head(object_key(r.digest)).mtime == mtimes[r.digest]

    touched = leaves[20]
    puts = commit_and_snapshot(store, AddFiles([ref("new-1", touched, 7)]))
    check(2, 3, touched, puts)

    # a fresh writer that loaded the state from the snapshot (references kept lazily as Arrow)
    # writes byte-identical ranges for the partitions it did not touch
    fresh = StateStore(objects, TABLE_ID)
    assert fresh.head().version == 3
    for r in range_digests(objects, 3, TABLE_ID):
        mtimes.setdefault(r.digest, objects.head(object_key(r.digest)).mtime)
    touched2 = leaves[50]
    puts2 = commit_and_snapshot(fresh, AddFiles([ref("new-2", touched2, 7)]))
    check(3, 4, touched2, puts2)
    assert_every_version_loads(objects, txns)


def _eight_commits(objects: ObjectStore) -> tuple[StateStore, list[Transaction]]:
    store = StateStore(objects, TABLE_ID)
    txns = _basic_history()[:8]
    for t in txns:
        store.commit(t)
    assert snapshot_versions(objects) == [3, 6]
    return store, txns


def _metarange_key(objects: ObjectStore, v: int) -> str:
    return object_key(read_pointer(objects, v, TABLE_ID)["metarange"])


CORRUPTIONS: dict[str, Callable[[ObjectStore], None]] = {
    "pointer not json": lambda o: o.put(snapshot_key(6), b"\x00garbage"),
    "pointer not an object": lambda o: o.put(snapshot_key(6), b"[1, 2]"),
    # edited pointers drop their seal ("crc32"): an unsealed pointer with the damage under test
    "pointer newer format": lambda o: o.put(snapshot_key(6), json.dumps(
        {**_unsealed(o.get(snapshot_key(6))), "format": 999}).encode()),
    "pointer missing field": lambda o: o.put(snapshot_key(6), json.dumps(
        {k: v for k, v in _unsealed(o.get(snapshot_key(6))).items() if k != "schema"}).encode()),
    "metarange corrupt": lambda o: o.put(_metarange_key(o, 6), b"PAR1 not parquet"),
    "metarange missing": lambda o: o.delete_many([_metarange_key(o, 6)]),
    "range missing": lambda o: o.delete_many(
        [object_key(r.digest) for r in range_digests(o, 6, TABLE_ID)]),
    "partitions corrupt": lambda o: o.put(
        f"objects/{read_pointer(o, 6, TABLE_ID)['partitions']}.json", b"{"),
}


@pytest.mark.parametrize("corruption", sorted(CORRUPTIONS))
def test_corrupt_snapshot_falls_back_to_replay(objects: ObjectStore, corruption: str,
                                               caplog: pytest.LogCaptureFixture) -> None:
    _, txns = _eight_commits(objects)
    CORRUPTIONS[corruption](objects)
    with caplog.at_level(logging.WARNING, logger="sediment.state.store"):
        assert_every_version_loads(objects, txns)
    assert "ignoring snapshot 6" in caplog.text


def test_snapshot_of_a_loaded_state_round_trips(objects: ObjectStore) -> None:
    store, txns = _eight_commits(objects)
    head = StateStore(objects, TABLE_ID).load(6)  # straight from snapshot 6
    assert head.partitions_with_references() == ["L", "R", "root"]
    times = [h.time for h in store.history()]
    assert head == replay(txns, times, 6)
    assert head.last_update == times[5]


# ---- corrupt log entries --------------------------------------------------------------------

def _unsealed(raw: bytes) -> dict[str, Any]:
    """A sealed document without its seal: re-encoded, it is an object written before seals
    (read unchecked), so the damage a test makes reaches the check it is about."""
    return {k: v for k, v in json.loads(raw).items() if k != "crc32"}


def _edit(objects: ObjectStore, version: int, edit: Callable[[dict[str, Any]], Any]) -> None:
    doc = _unsealed(objects.get(log_key(version)))
    objects.put(log_key(version), json.dumps(edit(doc)).encode())


LOG_CORRUPTIONS: dict[str, tuple[Callable[[ObjectStore], None], str]] = {
    "invalid json": (lambda o: o.put(log_key(3), b'{"format": 1, "vers'), "not valid JSON"),
    "not utf-8": (lambda o: o.put(log_key(3), b"\xff\xfe\x00"), "not valid JSON"),
    "not an object": (lambda o: o.put(log_key(3), b"[]"), "not a JSON object"),
    "wrong version": (lambda o: _edit(o, 3, lambda d: {**d, "version": 5}), "claims version 5"),
    "unknown kind": (lambda o: _edit(o, 3, lambda d: {**d, "kind": "explode"}),
                     "unknown transaction kind 'explode'"),
    "missing format": (lambda o: _edit(o, 3, lambda d: {k: v for k, v in d.items()
                                                        if k != "format"}),
                       "missing format version"),
    "missing time": (lambda o: _edit(o, 3, lambda d: {k: v for k, v in d.items() if k != "time"}),
                     "lacks field 'time'"),
    "malformed body": (lambda o: _edit(o, 3, lambda d: {**d, "transaction": {"x": 1}}),
                       "malformed split_partition"),
}


@pytest.mark.parametrize("corruption", sorted(LOG_CORRUPTIONS))
def test_corrupt_log_entry_names_the_entry(objects: ObjectStore, corruption: str) -> None:
    store = StateStore(objects, TABLE_ID)
    for t in _basic_history(100)[:4]:
        store.commit(t)
    edit, message = LOG_CORRUPTIONS[corruption]
    edit(objects)
    with pytest.raises(CorruptMetadataError) as info:
        StateStore(objects, TABLE_ID).head()
    text = str(info.value)
    assert "log entry 3 of table tbl" in text and log_key(3) in text
    assert message in text


def test_log_entry_of_a_newer_format_is_unsupported(objects: ObjectStore) -> None:
    store = StateStore(objects, TABLE_ID)
    for t in _basic_history(100)[:4]:
        store.commit(t)
    _edit(objects, 2, lambda d: {**d, "format": 999})
    with pytest.raises(UnsupportedFormatError, match=r"log entry 2 of table tbl .*format 999"):
        StateStore(objects, TABLE_ID).head()
    assert issubclass(UnsupportedFormatError, CorruptMetadataError)


def test_a_gap_in_the_log_is_detected(objects: ObjectStore) -> None:
    store = StateStore(objects, TABLE_ID)
    for t in _basic_history(100)[:5]:
        store.commit(t)
    objects.delete_many([log_key(2)])
    with pytest.raises(CorruptMetadataError, match="gap: version 2 is missing"):
        StateStore(objects, TABLE_ID).head()
    objects2 = MemoryObjectStore()
    s2 = StateStore(objects2, TABLE_ID)
    for t in _basic_history(100)[:2]:
        s2.commit(t)
    objects2.delete_many([log_key(1)])
    with pytest.raises(CorruptMetadataError, match="version 1 is missing"):
        StateStore(objects2, TABLE_ID).history()


def test_a_gap_covered_by_a_snapshot_is_not_needed(objects: ObjectStore) -> None:
    _, txns = _eight_commits(objects)
    objects.delete_many([log_key(2)])
    store = StateStore(objects, TABLE_ID)
    state = store.load(7)
    assert state.version == 7 and state.refcount == {"a": 1, "b": 1, "c": 1, "d": 1}
    state = store.load(8)
    assert state.version == 8 and state.properties["compaction.batch_size"] == 4
    assert store.load(5).version == 5  # snapshot 3 + entries 4, 5
    assert store.load(1).version == 1
    # below the snapshot the gap matters again, also when it is the last entry wanted
    with pytest.raises(CorruptMetadataError, match="gap: version 2 is missing"):
        store.load(2)


# ---- racing writers ---------------------------------------------------------------------------

def test_commit_retries_after_another_writer_took_the_version(objects: ObjectStore) -> None:
    a = StateStore(objects, TABLE_ID)
    a.commit(init(100))
    b = StateStore(objects, TABLE_ID)
    assert b.commit(SplitPartition("root", ("m",), "L", "R")).version == 2
    # a still caches version 1: it tries version 2, loses, reads entry 2, re-validates, lands at 3
    state = a.commit(AddFiles([ref("f", "root")]))
    assert state.version == 3
    assert set(state.partitions) == {"root", "L", "R"}
    # the file's sequence is that of the version the commit landed at, not the one it tried
    assert dict(state.references("root")) == {"f": ref("f", "root")._replace(
        sequence=file_sequence(3, 0))}
    assert [h.kind for h in a.history()] == ["initialise", "split_partition", "add_files"]

    # b now caches 2; a splits L at 4; b's split of the same leaf is re-validated and refused
    assert a.commit(SplitPartition("L", ("c",), "LL", "LR")).version == 4
    with pytest.raises(TransactionInvalidError, match="partition L is no longer a leaf"):
        b.commit(SplitPartition("L", ("d",), "X", "Y"))
    assert [o.key for o in objects.list("log/")] == [log_key(v) for v in range(1, 5)]
    assert b.head().version == 4 and "X" not in b.head().partitions


def test_a_transaction_source_is_rebuilt_from_the_new_head(objects: ObjectStore) -> None:
    a = StateStore(objects, TABLE_ID)
    a.commit(init(100))
    a.commit(AddFiles([ref("f", "root")]))
    b = StateStore(objects, TABLE_ID)
    b.commit(AddFiles([ref("g", "root")]))
    seen: list[int] = []

    def assign_all(head: TableState) -> Transaction:
        seen.append(head.version)
        return AssignJobIds([JobAssignment("j", "root", sorted(head.references("root")))])

    state = a.commit(assign_all)
    assert seen == [2, 3]
    assert state.version == 4
    assert {r.job_id for r in state.references("root").values()} == {"j"}


def test_concurrent_writers_all_land(tmp_path: Path) -> None:
    objects = LocalObjectStore(tmp_path / "t")
    StateStore(objects, TABLE_ID).commit(init(5))
    errors: list[BaseException] = []

    def writer(w: int) -> None:
        s = StateStore(objects, TABLE_ID)
        try:
            for i in range(8):
                s.commit(AddFiles([ref(f"w{w}-{i}", "root", 1)]))
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    head = StateStore(objects, TABLE_ID).head()
    assert head.version == 33
    assert sorted(head.refcount) == sorted(f"w{w}-{i}" for w in range(4) for i in range(8))
    assert [h.version for h in StateStore(objects, TABLE_ID).history()] == list(range(1, 34))
    assert snapshot_versions(objects) == [5, 10, 15, 20, 25, 30]
    assert StateStore(objects, TABLE_ID).load(17).reference_count() == 16


# ---- refresh by reading the next log slots ----------------------------------------------------
@pytest.fixture(params=["memory", "local", "local-limit1"])
def probe_objects(request: pytest.FixtureRequest, tmp_path: Path) -> ObjectStore:
    """Stores where a refresh reads the next slots (64 at most, or 1 as on S3) before it lists."""
    if request.param == "memory":
        return MemoryObjectStore()
    o = LocalObjectStore(tmp_path).child("t")
    if request.param == "local-limit1":
        o.probe_limit = 1
    return o


def _fresh(objects: ObjectStore) -> TableState:
    return StateStore(objects, TABLE_ID).head()


def _add(store: StateStore, i: int) -> TableState:
    return store.commit(AddFiles([ref(f"f{i}", "root")]))


@pytest.mark.parametrize("n", [0, 1, 5, 63, 64, 65, 200])
def test_refresh_catches_up(probe_objects: ObjectStore, n: int) -> None:
    w = StateStore(probe_objects, TABLE_ID)
    w.commit(init(interval=7))
    r = StateStore(probe_objects, TABLE_ID)
    assert r.head().version == 1
    for i in range(n):
        _add(w, i)
    got = r.head()
    assert got.version == n + 1 and got == _fresh(probe_objects)
    assert r.head() == got  # nothing new


@pytest.mark.parametrize("behind", [1, 3, 10])
def test_refresh_behind_a_prune_reloads(probe_objects: ObjectStore,
                                        monkeypatch: pytest.MonkeyPatch, behind: int) -> None:
    import sediment.state.versions as versions

    monkeypatch.setattr(versions, "PRUNE_GRACE_SECONDS", 0.0)
    monkeypatch.setattr(versions, "CLOCK_SKEW_SECONDS", 0.0)
    w = StateStore(probe_objects, TABLE_ID)
    w.commit(init(interval=3))
    for i in range(4):
        _add(w, i)
    r = StateStore(probe_objects, TABLE_ID)
    r.head()  # version 5
    for i in range(4, 4 + behind + 5):
        _add(w, i)
    assert versions.prune(w, 0.0).log_entries > 0
    assert not probe_objects.exists(log_key(6))  # the reader's next slot is gone
    got = r.head()
    assert got.version == w.head().version and got == _fresh(probe_objects)
    _add(w, 999)  # and it keeps up afterwards
    assert r.head() == _fresh(probe_objects)


def test_refresh_when_the_heads_own_entry_was_pruned(probe_objects: ObjectStore,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    import sediment.state.versions as versions

    monkeypatch.setattr(versions, "PRUNE_GRACE_SECONDS", 0.0)
    monkeypatch.setattr(versions, "CLOCK_SKEW_SECONDS", 0.0)
    w = StateStore(probe_objects, TABLE_ID)
    w.commit(init(interval=3))
    for i in range(4):
        _add(w, i)  # head 5, snapshot at 3
    r = StateStore(probe_objects, TABLE_ID)
    r.heads.publish(r.heads.load_from_storage(3), 0.0)  # a reader pinned at 3
    versions.prune(w, 0.0)  # base 3: log 1..3 go
    assert not probe_objects.exists(log_key(3)) and probe_objects.exists(log_key(4))
    assert r.head() == _fresh(probe_objects)


def test_commit_after_conflict_uses_new_entries(probe_objects: ObjectStore) -> None:
    a = StateStore(probe_objects, TABLE_ID)
    a.commit(init())
    b = StateStore(probe_objects, TABLE_ID)
    b.head()
    for i in range(3):
        _add(a, i)
    st = _add(b, 100)  # conflicts, refreshes, retries
    assert st.version == 5 and st == _fresh(probe_objects)


def test_a_reader_materialising_a_lazy_partition_never_hides_it_from_another(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A published head is read by many threads: while one decodes a partition loaded lazily
    from a snapshot, another reader of that partition and a copy of the state taken meanwhile
    both still see its references (the interleaving is forced inside the decode)."""
    objects = MemoryObjectStore()
    parts = _tree(2)
    leaves = sorted(p.id for p in parts if p.is_leaf)
    writer = StateStore(objects, TABLE_ID)
    writer.commit(InitialiseTable(SCHEMA, {}, parts))
    writer.commit(AddFiles([ref(f"{pid}-{i}", pid, i + 1) for pid in leaves for i in range(2)]))
    writer.write_snapshot()
    state = StateStore(objects, TABLE_ID).load()
    leaf = leaves[0]
    assert leaf in state._lazy  # loaded from the snapshot, not yet decoded
    seen: dict[str, Any] = {}
    decode = references_module.LazyReferences.decode

    def interleaved(self: references_module.LazyReferences) -> dict[str, FileReference]:
        if not seen:
            seen["started"] = True  # the other reader decodes too: no third interleaving
            seen["other reader"] = dict(state.references(leaf))
            seen["copy"] = dict(state.copy().references(leaf))
        return decode(self)

    monkeypatch.setattr(references_module.LazyReferences, "decode", interleaved)
    mine = dict(state.references(leaf))
    assert sorted(mine) == [f"{leaf}-0", f"{leaf}-1"]
    assert seen["other reader"] == mine and seen["copy"] == mine
    assert state.reference_count() == 2 * len(leaves)


def test_a_head_read_past_half_its_age_limit_is_refreshed_in_the_background() -> None:
    """Refresh-ahead: a read of a head older than half ``state.cache.refresh_seconds`` gets
    it at once and has the log re-read on a background thread; a read past the limit still
    re-reads the log itself before answering."""
    objects = MemoryObjectStore()
    writer = StateStore(objects, TABLE_ID)
    writer.commit(InitialiseTable(SCHEMA, {"state.cache.refresh_seconds": 0.6},
                                  _tree(1)))
    reader = StateStore(objects, TABLE_ID)
    assert reader.cached_head().version == 1
    writer.commit(AddFiles([ref("a", "p0000-0001")]))
    assert reader.cached_head().version == 1  # fresh: trusted as it is
    time.sleep(0.35)
    assert reader.cached_head().version == 1  # past half the limit: answered at once...
    deadline = time.monotonic() + 10
    while reader.heads.cached()[0].version != 2:  # ...and re-read meanwhile, with no other read
        assert time.monotonic() < deadline, "the background refresh did not happen"
        time.sleep(0.01)
    writer.commit(AddFiles([ref("b", "p0001-0002")]))
    time.sleep(0.7)  # past the limit: this read waits for the log
    assert reader.cached_head().version == 3


def test_no_background_refresh_when_the_cache_is_off() -> None:
    objects = MemoryObjectStore()
    writer = StateStore(objects, TABLE_ID)
    writer.commit(InitialiseTable(SCHEMA, {"state.cache.refresh_seconds": 0}, _tree(1)))
    reader = StateStore(objects, TABLE_ID)
    for v in range(2, 6):
        writer.commit(AddFiles([ref(f"f{v}", "p0000-0001")]))
        assert reader.cached_head().version == v
    assert not [t for t in threading.enumerate() if t.name.startswith("sediment-refresh")]
