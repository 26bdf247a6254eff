"""File checksums in transactions and the state (issue 38): AddFiles, AddFilesWithSplits and
ReplaceFileReferences carry ``checksums`` (an optional log key, omitted when empty so every
older entry stays byte-identical: tests/core/test_transactions.py's golden bodies); apply puts
them in the state, where ``file_sums`` answers for the table's live files only."""

from __future__ import annotations

import json
from types import MappingProxyType

import pyarrow as pa
import pytest

from sediment.core.model import FileReference, FileSums, Partition, Region
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
    transaction_from_json,
)
from sediment.errors import TransactionInvalidError
from sediment.schema import Schema

SCHEMA = Schema(row_keys=[("key", pa.string())], values=[("value", pa.int64())])
S1 = FileSums(1000, 0xDEADBEEF, 0x12345678, 0x0BADF00D)
S2 = FileSums(2000, 1, 2, None)
S3 = FileSums(3000, 3, 4, 5)

# New bodies, pinned like GOLDEN_LOG_BODIES: sums are [size, footer, crc, sample] by filename
GOLDEN_WITH_SUMS: list[tuple[Transaction, str]] = [
    (AddFiles([FileReference("f2", "a", 1), FileReference("f1", "a", 2)],
              checksums={"f2": S2, "f1": S1}),
     '{"kind":"add_files","transaction":{"references":[{"file":"f2","partition":"a",'
     '"records":1},{"file":"f1","partition":"a","records":2}],"checksums":{"f1":[1000,'
     '3735928559,305419896,195948557],"f2":[2000,1,2,null]}}}'),
    (AddFilesWithSplits([FileReference("f4", "L", 3)], [SplitPartition("root", ("m",), "L", "R")],
                        checksums={"f4": S3}),
     '{"kind":"add_files_with_splits","transaction":{"splits":[{"partition":"root",'
     '"split_key":["m"],"left":"L","right":"R"}],"references":[{"file":"f4","partition":"L",'
     '"records":3}],"checksums":{"f4":[3000,3,4,5]}}}'),
    (ReplaceFileReferences("job-1", "a", ["f1", "f2"], FileReference("f3", "a", 11),
                           checksums={"f3": S3}),
     '{"kind":"replace_file_references","transaction":{"job_id":"job-1","partition":"a",'
     '"inputs":["f1","f2"],"output":{"file":"f3","partition":"a","records":11},'
     '"checksums":{"f3":[3000,3,4,5]}}}'),
]


def body(txn: Transaction) -> str:
    return json.dumps({"kind": txn.kind, "transaction": txn.to_json()}, separators=(",", ":"))


@pytest.mark.parametrize("txn, golden", GOLDEN_WITH_SUMS, ids=lambda x: getattr(x, "kind", ""))
def test_log_bodies_with_checksums_are_pinned(txn: Transaction, golden: str) -> None:
    assert body(txn) == golden
    back = transaction_from_json(txn.kind, json.loads(golden)["transaction"], where="golden")
    assert back == txn and back.checksums == txn.checksums  # type: ignore[attr-defined]


def test_without_checksums_the_key_is_omitted_and_the_default_is_shared_and_immutable() -> None:
    a = AddFiles([FileReference("f", "root", 1)])
    assert "checksums" not in a.to_json()
    assert a.checksums == {} and isinstance(a.checksums, MappingProxyType)
    back = AddFiles.from_json(a.to_json())
    assert back == a and back.checksums is a.checksums
    r = ReplaceFileReferences("j", "root", ["f"], None)
    assert "checksums" not in r.to_json() and ReplaceFileReferences.from_json(r.to_json()) == r


def initialised() -> TableState:
    st = TableState("t")
    InitialiseTable(SCHEMA, {}, [Partition(ROOT_PARTITION_ID, None, Region())]).apply(st, 0.0)
    return st


def commit(st: TableState, txn: Transaction, t: float = 1.0) -> None:
    txn.validate(st)
    txn.apply(st, t)
    st.version += 1


def test_sums_follow_a_file_from_add_to_delete() -> None:
    st = initialised()
    commit(st, AddFiles([FileReference("f1", "root", 5), FileReference("f2", "root", 6)],
                        checksums={"f1": S1}))
    assert st.file_sums("f1") == S1
    assert st.file_sums("f2") is None  # added without: unchecked
    assert st.file_sums("nope") is None
    before = st.copy()
    # a split moves the references: the sums are the file's, by name
    commit(st, SplitPartition(ROOT_PARTITION_ID, ("m",), "L", "R"))
    commit(st, SplitFileReferences([SplitReference("f1", ROOT_PARTITION_ID, [
        FileReference("f1", "L", 2, True), FileReference("f1", "R", 3, True)])]))
    assert st.file_sums("f1") == st.file_sums("f1", "R") == S1
    # compaction: the output has its sums; an input left unreferenced keeps its own
    commit(st, AssignJobIds([JobAssignment("j", "L", ["f1"])]))
    commit(st, ReplaceFileReferences("j", "L", ["f1"], FileReference("f3", "L", 2),
                                     checksums={"f3": S3}))
    assert st.file_sums("f3") == S3 and st.file_sums("f1") == S1  # still referenced in R
    commit(st, AssignJobIds([JobAssignment("k", "R", ["f1"])]))
    commit(st, ReplaceFileReferences("k", "R", ["f1"], None))
    assert "f1" in st.unreferenced and st.file_sums("f1") == S1
    commit(st, DeleteFiles(["f1"]))
    assert st.file_sums("f1") is None and "f1" not in st.sums
    assert st.all_file_sums() == {"f3": S3}
    assert before.file_sums("f1") == S1 and before.all_file_sums() == {"f1": S1}  # a copy
    assert st.canonical()["sums"] == {"f3": tuple(S3)}


def test_sums_are_part_of_state_equality() -> None:
    a, b = initialised(), initialised()
    commit(a, AddFiles([FileReference("f", "root", 1)], checksums={"f": S1}))
    commit(b, AddFiles([FileReference("f", "root", 1)], checksums={"f": S2}))
    assert a != b
    c = initialised()
    commit(c, AddFiles([FileReference("f", "root", 1)], checksums={"f": S1}))
    assert a == c


@pytest.mark.parametrize("txn, message", [
    (AddFiles([FileReference("f", "root", 1)], checksums={"g": S1}),
     "checksums of g, which is not a new file"),
    (AddFiles([FileReference("f", "root", 1)], checksums={"f": (1, 2, 3, 4)}),  # type: ignore[dict-item]
     "are not a FileSums"),
    (AddFiles([FileReference("f", "root", 1)], checksums={"f": FileSums(-1, 0, 0)}),
     "are not a FileSums"),
    (ReplaceFileReferences("j", "root", [], None, checksums={"f": S1}),
     "checksums of f, which is not a new file"),
])
def test_checksums_of_other_files_are_refused(txn: Transaction, message: str) -> None:
    st = initialised()
    with pytest.raises(TransactionInvalidError, match=message):
        txn.validate(st)
