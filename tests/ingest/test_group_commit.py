"""The group committer (sediment.ingest.group) in-process: groups cut at a change of kind
keep the order of ingests and upserts; a group's failure that is not a put's own is retried
put by put when that cannot write twice, and told to each put otherwise."""

from __future__ import annotations

import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from helpers import make_table, rows
from sediment.core.transactions import KeyedWrite
from sediment.errors import CommitConflictError, StorageError
from sediment.handle import handle_of
from sediment.ingest import group
from sediment.ingest.group import GroupCommitter, Write
from sediment.ingest.idempotency import PayloadHash
from sediment.ingest.standard import IngestResult


def write(data: pa.Table, key: str | None = None) -> Write:
    batches = data.to_batches()
    keyed = None
    if key is not None:
        hasher = PayloadHash("ingest")
        for b in batches:
            hasher.update(b)
        keyed = KeyedWrite(key, hasher.hexdigest(), data.num_rows)
    return Write(batches, data.num_rows, keyed, data.nbytes)


def results(futures: list[Future[IngestResult]]) -> list[Any]:
    out: list[Any] = []
    for f in futures:
        try:
            out.append(f.result(timeout=30))
        except Exception as e:  # noqa: BLE001 - compared by the test
            out.append(e)
    return out


def test_groups_are_cut_where_the_kind_changes_and_commit_in_order(tmp_path: Path) -> None:
    """ingest, ingest, upsert, ingest of one key queued within one window: three groups
    (two ingests together), committed in that order, so the upsert replaces the first two
    ingests' records and the last ingest's record stays beside it."""
    table = make_table(tmp_path / "s")
    start = table.version
    one = rows(1, 1)
    key = one.column("key")[0].as_py()

    def of(value: str) -> pa.Table:
        return one.set_column(2, "value", pa.array([value]))

    committer = GroupCommitter(handle_of(table), lambda: 0.3, 1 << 20)
    try:
        futures = [committer.submit(write(of("a")), upsert=False),
                   committer.submit(write(of("b")), upsert=False),
                   committer.submit(write(of("c")), upsert=True),
                   committer.submit(write(of("d")), upsert=False)]
        versions = [r.version for r in results(futures)]
    finally:
        committer.close()
    assert versions == [start + 1, start + 1, start + 2, start + 3]
    got = table.query(keys=[key]).column("value").to_pylist()
    assert got == ["c", "d"]


def test_a_lost_race_of_the_group_is_retried_put_by_put(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    table = make_table(tmp_path / "s")
    start = table.version
    real = group.commit_writes
    calls: list[int] = []

    def flaky(t: Any, writes: list[Write], **kw: Any) -> list[IngestResult]:
        calls.append(len(writes))
        if len(writes) > 1:
            raise CommitConflictError(f"table {table.name}: lost every race")
        return real(t, writes, **kw)

    monkeypatch.setattr(group, "commit_writes", flaky)
    committer = GroupCommitter(handle_of(table), lambda: 0.3, 1 << 20)
    try:
        futures = [committer.submit(write(rows(5, i)), upsert=False) for i in range(3)]
        answers = results(futures)
    finally:
        committer.close()
    assert calls == [3, 1, 1, 1]
    assert [a.version for a in answers] == [start + 1, start + 2, start + 3]
    assert table.query().num_rows == 15


@pytest.mark.parametrize("keyed", [False, True])
def test_a_storage_error_is_told_to_unkeyed_puts_and_retried_for_keyed_ones(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, keyed: bool) -> None:
    """An error that may have committed (a storage error): unkeyed puts are told it (a retry
    could write their records twice); keyed ones are retried alone (their keys make a retry
    safe)."""
    table = make_table(tmp_path / "s")
    real = group.commit_writes

    def failing(t: Any, writes: list[Write], **kw: Any) -> list[IngestResult]:
        if len(writes) > 1:
            raise StorageError(f"table {table.name}: the store did not answer")
        return real(t, writes, **kw)

    monkeypatch.setattr(group, "commit_writes", failing)
    committer = GroupCommitter(handle_of(table), lambda: 0.3, 1 << 20)
    try:
        futures = [committer.submit(write(rows(5, i), f"k{i}" if keyed else None),
                                    upsert=False) for i in range(3)]
        answers = results(futures)
    finally:
        committer.close()
    if keyed:
        assert all(isinstance(a, IngestResult) for a in answers)
        assert table.query().num_rows == 15
    else:
        assert all(isinstance(a, StorageError) and "did not answer" in str(a)
                   for a in answers)
        assert table.query().num_rows == 0


def test_a_group_is_cut_at_its_byte_bound(tmp_path: Path) -> None:
    table = make_table(tmp_path / "s")
    start = table.version
    data = [rows(50, i) for i in range(4)]
    committer = GroupCommitter(handle_of(table), lambda: 0.3,
                               data[0].nbytes * 2 + 1)
    try:
        began = time.monotonic()
        futures = [committer.submit(write(d), upsert=False) for d in data]
        versions = [r.version for r in results(futures)]
    finally:
        committer.close()
    assert versions == [start + 1, start + 1, start + 2, start + 2]
    assert time.monotonic() - began < 10
