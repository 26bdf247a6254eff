"""File checksums through the state store (issue 38): every version loaded by a fresh store
(snapshot + replay) has the sums a pure replay of the log gives; snapshots keep them per
reference row (decoded only when asked for) and for unreferenced files; logs and snapshots
written before checksums load, their files without sums."""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pytest

import sediment.state.snapshot as snapshot_module
from sediment.core.model import FileReference, FileSums, Partition, Region
from sediment.core.references import SUM_COLUMNS, SnapshotSums
from sediment.core.state import ROOT_PARTITION_ID, TableState
from sediment.core.transactions import (
    AddFiles,
    AddFilesWithSplits,
    AssignJobIds,
    DeleteFiles,
    InitialiseTable,
    JobAssignment,
    ReplaceFileReferences,
    SplitFileReferences,
    SplitPartition,
    SplitReference,
    Transaction,
)
from sediment.schema import Schema
from sediment.state import StateStore
from sediment.state.snapshot import read_pointer, snapshot_versions
from sediment.storage import MemoryObjectStore, ObjectStore

TABLE_ID = "tbl"
SCHEMA = Schema(row_keys=[("key", pa.string())], values=[("value", pa.int64())])
ROOT = ROOT_PARTITION_ID


def sums(i: int, sample: bool = True) -> FileSums:
    return FileSums(1000 + i, 0x10000 + i, 0xFFFF0000 + i, 7 * i if sample else None)


def history() -> list[Transaction]:
    """Files with and without sums, added, split, compacted, unreferenced and deleted."""
    return [
        InitialiseTable(SCHEMA, {"state.snapshot.interval": 2},
                        [Partition(ROOT, None, Region())]),
        AddFiles([FileReference("a", ROOT, 10), FileReference("b", ROOT, 20)],
                 checksums={"a": sums(1), "b": sums(2, sample=False)}),
        AddFiles([FileReference("legacy", ROOT, 5)]),  # an entry from before checksums
        SplitPartition(ROOT, ("m",), "L", "R"),
        SplitFileReferences([SplitReference("a", ROOT, [FileReference("a", "L", 4, True),
                                                        FileReference("a", "R", 6, True)])]),
        AddFilesWithSplits([FileReference("c", "L1", 3)], [SplitPartition("L", ("f",), "L1", "L2")],
                           checksums={"c": sums(3)}),
        AssignJobIds([JobAssignment("j", ROOT, ["b", "legacy"])]),
        ReplaceFileReferences("j", ROOT, ["b", "legacy"], FileReference("d", ROOT, 25),
                              checksums={"d": sums(4)}),
        AssignJobIds([JobAssignment("k", "R", ["a"])]),
        ReplaceFileReferences("k", "R", ["a"], None),  # a: still referenced in L
        DeleteFiles(["legacy"]),
        AddFiles([FileReference("e", "R", 1)], checksums={"e": sums(5)}),
    ]


def commit_all(objects: ObjectStore, txns: Sequence[Transaction]) -> StateStore:
    store = StateStore(objects, TABLE_ID)
    for t in txns:
        store.commit(t)
    return store


def replay(txns: Sequence[Transaction], times: Sequence[float], upto: int) -> TableState:
    state = TableState(TABLE_ID)
    for v, (txn, t) in enumerate(zip(txns[:upto], times[:upto], strict=True), start=1):
        txn.apply(state, t)
        state.version = v
        state.last_update = t
    return state


def test_every_version_loads_with_the_sums_of_a_replay() -> None:
    objects = MemoryObjectStore()
    txns = history()
    store = commit_all(objects, txns)
    assert len(snapshot_versions(objects)) >= 4
    times = [h.time for h in store.history()]
    for v in range(1, len(txns) + 1):
        loaded = StateStore(objects, TABLE_ID).load(v)
        expected = replay(txns, times, v)
        assert loaded.canonical() == expected.canonical(), f"version {v} differs"
        assert loaded.all_file_sums() == expected.all_file_sums()
    head = StateStore(objects, TABLE_ID).head()
    assert head.all_file_sums() == {"a": sums(1), "b": sums(2, False), "c": sums(3),
                                    "d": sums(4), "e": sums(5)}
    # b: unreferenced (compacted), kept until deleted; legacy: deleted
    assert "b" in head.unreferenced and head.file_sums("legacy") is None


def test_a_snapshot_keeps_sums_per_reference_row_and_of_unreferenced_files() -> None:
    objects = MemoryObjectStore()
    txns = history()[:10]  # ends with b and legacy unreferenced
    store = commit_all(objects, txns)
    store.write_snapshot()
    doc = read_pointer(objects, len(txns), TABLE_ID)
    assert "unreferenced_sums" in doc  # b's (legacy had none)
    loaded = StateStore(objects, TABLE_ID).load(len(txns))
    assert set(loaded.sums) == {"b"}  # the referenced files' stay in the Arrow rows
    assert loaded._snapshot_sums is not None
    # found through a partition's rows, or without a partition (the whole-table index)
    assert loaded.file_sums("a", "L") == loaded.file_sums("a") == sums(1)
    assert loaded.file_sums("b") == sums(2, False)
    assert loaded.file_sums("d", ROOT) == sums(4)
    assert loaded == store.head()


def test_lookups_through_one_partition_decode_only_its_rows() -> None:
    table = pa.table({
        "partition_id": ["p", "p", "q"], "filename": ["x", "y", "z"],
        "size": [1, None, 3], "footer_crc": [4, None, 6], "file_crc": [7, None, 9],
        "sample_crc": [None, None, 12]})
    ss = SnapshotSums.of(table, [("p", 0, 2), ("q", 2, 3)])
    assert ss is not None
    assert ss.lookup("x", "p") == FileSums(1, 4, 7, None)
    assert ss.lookup("y", "p") is None  # a row without sums
    assert ss._index is None and set(ss._parts) == {"p"}
    assert ss.lookup("z", "p") == FileSums(3, 6, 9, 12)  # not in p: the whole-table index
    assert ss._index is not None
    assert SnapshotSums.of(table.drop_columns(list(SUM_COLUMNS)), []) is None
    nulls = table.set_column(2, "size", pa.nulls(3, pa.int64()))
    assert SnapshotSums.of(nulls, []) is None


def test_logs_and_snapshots_from_before_checksums_load(monkeypatch: pytest.MonkeyPatch) -> None:
    """A snapshot written before checksums has no sum columns and no unreferenced sums; its
    files read without sums, and a later commit's files with theirs, in a new snapshot too."""
    objects = MemoryObjectStore()
    legacy = [InitialiseTable(SCHEMA, {"state.snapshot.interval": 2},
                              [Partition(ROOT, None, Region())]),
              AddFiles([FileReference("old1", ROOT, 1), FileReference("old2", ROOT, 2)]),
              AssignJobIds([JobAssignment("j", ROOT, ["old2"])]),
              ReplaceFileReferences("j", ROOT, ["old2"], None)]
    real = snapshot_module._state_references_table
    monkeypatch.setattr(snapshot_module, "_state_references_table",
                        lambda st: real(st).drop_columns(list(SUM_COLUMNS)))
    store = commit_all(objects, legacy)
    store.write_snapshot()
    monkeypatch.undo()
    doc = read_pointer(objects, 4, TABLE_ID)
    assert "unreferenced_sums" not in doc
    old = StateStore(objects, TABLE_ID).load(4)
    assert old._snapshot_sums is None
    assert old.file_sums("old1") is None and old.file_sums("old2") is None
    assert old.all_file_sums() == {}
    store = StateStore(objects, TABLE_ID)
    store.commit(AddFiles([FileReference("new", ROOT, 3)], checksums={"new": sums(9)}))
    store.write_snapshot()
    for st in (StateStore(objects, TABLE_ID).head(), StateStore(objects, TABLE_ID).load(5)):
        assert st.all_file_sums() == {"new": sums(9)}
        assert st.file_sums("old1") is None
