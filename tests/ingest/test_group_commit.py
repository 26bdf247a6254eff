"""The group committer (sediment.ingest.group) in-process: groups cut at a change of kind
keep the order of ingests and upserts; a group's failure that is not a put's own is retried
put by put when that cannot write twice, and told to each put otherwise; pipelined groups
(the next staged while one commits) commit in the order they were cut, a failed one beside
them; the adaptive window spaces the cuts."""

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


# ---- the pipeline: group N+1 staged while group N commits -----------------------------------
def submit_in_turn(committer: GroupCommitter, writes: list[tuple[Write, bool]]
                   ) -> list[Future[IngestResult]]:
    """Submit each write once the one before it was cut into a group (a group each)."""
    futures = []
    for w, upsert in writes:
        futures.append(committer.submit(w, upsert=upsert))
        deadline = time.monotonic() + 10
        while committer.waiting() and time.monotonic() < deadline:
            time.sleep(0.002)
    return futures


def test_pipelined_groups_commit_in_the_order_they_were_cut(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Upserts of one key, a group each, with a slow commit: the next group is staged while
    the one before it commits (the log shows it), and the groups commit in the order they
    were cut, so the last upsert's value is the key's."""
    table = make_table(tmp_path / "s")
    start = table.version
    one = rows(1, 1)
    key = one.column("key")[0].as_py()
    spans: dict[str, list[tuple[float, float]]] = {"stage": [], "commit": []}
    real_stage, real_commit = group.stage_writes, group.commit_staged

    def timed(kind: str, fn: Any, pause: float) -> Any:
        def wrapper(*a: Any, **kw: Any) -> Any:
            began = time.monotonic()
            time.sleep(pause)
            try:
                return fn(*a, **kw)
            finally:
                spans[kind].append((began, time.monotonic()))
        return wrapper

    monkeypatch.setattr(group, "stage_writes", timed("stage", real_stage, 0.0))
    monkeypatch.setattr(group, "commit_staged", timed("commit", real_commit, 0.15))
    values = [str(i) for i in range(5)]
    committer = GroupCommitter(handle_of(table), lambda: 0.0, 1 << 20)
    try:
        futures = submit_in_turn(committer, [
            (write(one.set_column(2, "value", pa.array([v]))), True) for v in values])
        versions = [r.version for r in results(futures)]
    finally:
        committer.close()
    assert versions == list(range(start + 1, start + 1 + len(values)))
    assert table.query(keys=[key]).column("value").to_pylist() == [values[-1]]
    # some group's files were written while the group before it was committing
    assert any(s[0] < c[1] for s, c in zip(spans["stage"][1:], spans["commit"], strict=False))


def test_a_failed_group_does_not_hold_back_the_group_staged_behind_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first group's commit fails with an error that may have committed (its unkeyed
    puts are told it); the group staged behind it meanwhile commits on its own, after it."""
    table = make_table(tmp_path / "s")
    start = table.version
    real = group.commit_staged
    calls: list[int] = []

    def first_fails(t: Any, staged: Any, *a: Any, **kw: Any) -> IngestResult:
        calls.append(staged.rows)
        time.sleep(0.15)  # the next group is cut and staged meanwhile
        if len(calls) == 1:
            raise StorageError(f"table {table.name}: the store did not answer")
        return real(t, staged, *a, **kw)

    monkeypatch.setattr(group, "commit_staged", first_fails)
    committer = GroupCommitter(handle_of(table), lambda: 0.0, 1 << 20)
    try:
        futures = submit_in_turn(committer, [(write(rows(5, 0)), False),
                                             (write(rows(7, 1)), False)])
        answers = results(futures)
    finally:
        committer.close()
    assert isinstance(answers[0], StorageError) and "did not answer" in str(answers[0])
    assert isinstance(answers[1], IngestResult) and answers[1].version == start + 1
    assert calls == [5, 7]
    assert table.query().num_rows == 7


def test_a_group_that_fails_to_stage_is_settled_in_its_turn(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Staging (writing the files) fails for a group of keyed puts: nothing of it was
    committed, so each put is retried on its own, and each lands once."""
    table = make_table(tmp_path / "s")
    real = group.stage_writes
    failed: list[int] = []

    def flaky(t: Any, writes: list[Write], **kw: Any) -> Any:
        if len(writes) > 1 and not failed:
            failed.append(len(writes))
            raise StorageError(f"table {table.name}: cannot write a data file")
        return real(t, writes, **kw)

    monkeypatch.setattr(group, "stage_writes", flaky)
    committer = GroupCommitter(handle_of(table), lambda: 0.3, 1 << 20)
    try:
        futures = [committer.submit(write(rows(5, i), f"k{i}"), upsert=False)
                   for i in range(3)]
        answers = results(futures)
    finally:
        committer.close()
    assert failed == [3]
    assert all(isinstance(a, IngestResult) for a in answers)
    assert len({a.version for a in answers}) == 3
    assert table.query().num_rows == 15


# ---- the adaptive window ------------------------------------------------------------------
def test_group_cuts_are_spaced_and_each_carries_more(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Puts arriving every 10 ms with no window: with a spacing of 0.25 s between cuts, no
    two groups are cut closer than that, so the puts of a second share few commits."""
    table = make_table(tmp_path / "s")
    start = table.version
    cuts: list[float] = []
    real = group.stage_writes

    def recorded(t: Any, writes: list[Write], **kw: Any) -> Any:
        cuts.append(time.monotonic())
        return real(t, writes, **kw)

    monkeypatch.setattr(group, "stage_writes", recorded)
    committer = GroupCommitter(handle_of(table), lambda: 0.0, 1 << 20, spacing=lambda: 0.25)
    try:
        futures = []
        for i in range(60):
            futures.append(committer.submit(write(rows(2, i)), upsert=False))
            time.sleep(0.01)
        answers = results(futures)
    finally:
        committer.close()
    assert all(isinstance(a, IngestResult) for a in answers)
    # recorded as staging starts, just after the committer's own cut: a gap may look up to
    # ``slack`` shorter than the spacing
    slack = 0.05
    gaps = [b - a for a, b in zip(cuts, cuts[1:], strict=False)]
    assert gaps and min(gaps) >= 0.25 - slack
    commits = table.version - start
    assert commits == len(cuts) <= 1 + (cuts[-1] - cuts[0]) / (0.25 - slack)
    assert table.query().num_rows == 120


def test_a_groups_status_event_is_written_after_its_puts_are_answered(
        tmp_path: Path) -> None:
    """The commit's status event (a PUT on S3) is off the puts' path: when ``after_commit``
    runs (just before the puts are answered) no event of the group is written yet; each
    committed group's event is there once it is answered."""
    table = make_table(tmp_path / "s")
    handle = handle_of(table)
    seen: list[int] = []

    def after(answers: list[IngestResult]) -> None:
        seen.append(sum(1 for e in handle.status.events("ingest")
                        if e.job_id == f"v{answers[0].version}"))

    committer = GroupCommitter(handle, lambda: 0.05, 1 << 20, after_commit=after)
    try:
        answers = results([committer.submit(write(rows(3, i)), upsert=False)
                           for i in range(4)])
    finally:
        committer.close()
    versions = {a.version for a in answers}
    assert seen and set(seen) == {0}
    recorded = {e.job_id for e in handle.status.events("ingest")}
    assert {f"v{v}" for v in versions} <= recorded


def test_puts_validated_before_a_schema_change_commit_under_it(tmp_path: Path) -> None:
    """A put validated against the schema before a rename and a drop, grouped with one
    validated after them: one commit, the first put's values under the new name."""
    table = make_table(tmp_path / "s")
    old = table.schema
    before = rows(5, 1)
    table.rename_column("value", "amount")
    table.drop_columns(["nullable_value"])
    after = rows(5, 2).select(["key", "timestamp", "value"]).rename_columns(
        ["key", "timestamp", "amount"])
    committer = GroupCommitter(handle_of(table), lambda: 0.3, 1 << 20)
    try:
        first = write(before)
        first.schema = old
        second = write(after)
        second.schema = table.schema
        versions = [r.version for r in results([committer.submit(first, upsert=False),
                                                committer.submit(second, upsert=False)])]
    finally:
        committer.close()
    assert versions == [table.version] * 2
    want = pa.concat_tables([before.select(["key", "timestamp", "value"]).rename_columns(
        after.column_names), after]).sort_by([("key", "ascending"), ("timestamp", "ascending")])
    got = table.query().sort_by([("key", "ascending"), ("timestamp", "ascending")])
    assert got.to_pylist() == want.to_pylist()
