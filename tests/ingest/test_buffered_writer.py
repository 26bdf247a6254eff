"""The buffered writer: concurrent small writes against a pandas reference, one commit per
flush, failures surfaced by flush()/close(), keyed retries not duplicated, back-pressure."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pytest

import sediment as sd
from helpers import make_table, rows, run_together
from sediment.errors import DataError, TableNotFoundError
from sediment.ingest import group
from support.races import as_another_process

COLUMNS = ["key", "timestamp", "value", "nullable_value"]


def frame(t: object) -> pd.DataFrame:
    df = t.to_pandas() if hasattr(t, "to_pandas") else t  # type: ignore[union-attr]
    return df[COLUMNS].sort_values(COLUMNS, na_position="first").reset_index(drop=True)


def test_threads_writing_at_once_land_every_record_once_in_few_commits(tmp_path: Path) -> None:
    table = make_table(tmp_path / "s")
    start = table.version
    pieces = {(t, i): rows(20, 1000 * t + i) for t in range(4) for i in range(40)}
    with table.writer(max_rows=500, max_seconds=0.2) as w:
        def produce(t: int) -> None:
            for i in range(40):
                key = f"w{t}-{i}" if i % 2 else None
                w.write(pieces[t, i], idempotency_key=key)
                if i == 20 and t == 0:
                    w.write(pieces[t, i - 1], idempotency_key=f"w{t}-{i - 1}")  # a retry

        run_together(range(4), produce)
        versions = w.flush()
        assert w.flush() == []  # nothing written since
    commits = table.version - start
    assert commits <= 4 * 40 * 20 // 500 + 5  # flushed by size and age, not per write
    assert sorted(versions) == versions and versions and versions[-1] == table.version
    expected = pd.concat([p.to_pandas() for p in pieces.values()])
    pd.testing.assert_frame_equal(frame(table.query()), frame(expected))


def test_a_write_returns_once_buffered_and_flush_returns_once_committed(
        tmp_path: Path) -> None:
    table = make_table(tmp_path / "s")
    w = table.writer(max_rows=10_000, max_seconds=60)
    w.write(rows(10, 1))
    w.write(rows(10, 2))
    assert table.version == 1 and table.query().num_rows == 0  # buffered, not committed
    assert w.flush() == [2]
    assert table.query().num_rows == 20
    assert w.close() == []
    with pytest.raises(DataError, match="closed"):
        w.write(rows(1, 3))


def test_keyed_writes_retried_after_a_flush_are_not_duplicated(tmp_path: Path) -> None:
    table = make_table(tmp_path / "s")
    data = [rows(15, i) for i in range(5)]
    with table.writer(max_seconds=60) as w:
        for i, d in enumerate(data):
            w.write(d, idempotency_key=f"k{i}")
        (v,) = w.flush()
        for i, d in enumerate(data):  # every answer lost: all retried
            w.write(d, idempotency_key=f"k{i}")
        assert w.flush() == []
        with pytest.raises(sd.IdempotencyKeyReusedError, match="k0"):
            w.write(data[1], idempotency_key="k0")
    with sd.Store.open(str(tmp_path / "s")).table(table.name).writer() as again:
        again.write(data[3], idempotency_key="k3")  # another process's retry
    assert table.version == v
    assert table.query().num_rows == 75
    assert table.ingest(data[2], idempotency_key="k2").version == v  # one key index


def test_a_failing_background_flush_surfaces_in_flush_and_close(tmp_path: Path) -> None:
    store = sd.Store.open(str(tmp_path / "s"), create=True)
    table = make_table(store, name="doomed")
    w = table.writer(max_rows=5, max_seconds=60)
    w.write(rows(3, 1))
    store.drop_table("doomed")
    w.write(rows(3, 2))  # past max_rows: the background flush commits, and fails
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not w._errors:
        time.sleep(0.01)
    with pytest.raises(TableNotFoundError, match="doomed"):
        w.flush()
    w.write(rows(1, 3))
    with pytest.raises(TableNotFoundError):
        w.close()


def test_a_full_buffer_blocks_the_writer_while_a_flush_runs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    table = make_table(tmp_path / "s")
    release, staging = threading.Event(), threading.Event()
    real = group.stage_batches

    def slow_stage(*args: object, **kw: object) -> object:
        staging.set()
        release.wait(10)
        return real(*args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(group, "stage_batches", slow_stage)
    piece = rows(100, 1)
    w = table.writer(max_bytes=piece.nbytes + 1, max_seconds=60)
    w.write(piece)
    w.write(rows(100, 2))  # no room: the buffer is taken by a flush, which stalls
    assert staging.wait(10)  # the buffer now holds the second piece
    done = threading.Event()
    blocked = threading.Thread(target=lambda: (w.write(rows(100, 3)), done.set()))
    blocked.start()
    assert not done.wait(0.3)  # blocked behind the running flush
    release.set()
    assert done.wait(10)
    blocked.join()
    w.close()
    assert table.query().num_rows == 300


def test_bad_records_are_refused_at_write(tmp_path: Path) -> None:
    table = make_table(tmp_path / "s")
    with table.writer() as w, pytest.raises(DataError, match=table.name):
        w.write(rows(3, 1).drop_columns(["value"]))
    assert table.version == 1


def test_a_flush_whose_key_another_writer_committed_commits_only_the_rest(
        tmp_path: Path) -> None:
    table = make_table(tmp_path / "s")
    keyed, plain = rows(10, 1), rows(10, 2)
    with table.writer(max_seconds=60) as w:
        w.write(keyed, idempotency_key="shared")
        other = sd.Store.open(str(tmp_path / "s")).table(table.name)
        first = other.ingest(keyed, idempotency_key="shared").version  # wins the key
        w.write(plain)
        (v,) = w.flush()
    assert v == first + 1
    expected = pd.concat([keyed.to_pandas(), plain.to_pandas()])
    pd.testing.assert_frame_equal(frame(table.query()), frame(expected))


def test_writes_across_schema_changes_commit_under_the_changed_schema(tmp_path: Path) -> None:
    """A write is validated against the table's schema when it is made, and what waited in
    the buffer across a change is committed as any write prepared before it: a renamed
    column keeps its values, an added one is null, a dropped one is left out."""
    table = make_table(tmp_path / "s")
    w = table.writer(max_rows=10_000, max_seconds=60)
    first = rows(10, 1)
    w.write(first)
    table.rename_column("value", "amount")
    table.add_columns([("note", "string")])
    second = rows(10, 2).rename_columns(["key", "timestamp", "amount", "nullable_value"])
    second = second.append_column("note", pa.array(["n"] * 10))
    w.write(second)  # the columns the table has now, at once
    with pytest.raises(DataError, match="'value'"):
        w.write(rows(1, 3))  # and no longer the old name
    assert w.close() == [table.version]
    got = table.query().to_pandas().sort_values(["key", "timestamp"]).reset_index(drop=True)
    want = pd.concat([first.rename_columns(second.column_names[:4]).to_pandas().assign(note=None),
                      second.to_pandas()]).sort_values(["key", "timestamp"])
    pd.testing.assert_frame_equal(got, want.reset_index(drop=True), check_dtype=False)


def test_a_change_another_process_made_reshapes_the_waiting_writes(tmp_path: Path) -> None:
    """The writer's head is cached (another process's change not yet seen): its writes are
    validated against the schema it knows and the flush commits them under the new one."""
    table = make_table(tmp_path / "s", **{"state.cache.refresh_seconds": 3600})
    w = table.writer(max_rows=10_000, max_seconds=60)
    other = as_another_process(sd.Store.open(str(tmp_path / "s")).table(table.name))
    other.rename_column("value", "amount")
    other.drop_columns(["nullable_value"])
    data = rows(20, 4)
    w.write(data)  # as the writer's cached head has the table
    assert w.close() == [other.version]
    got = other.query().to_pandas().sort_values(["key", "timestamp"]).reset_index(drop=True)
    want = data.select(["key", "timestamp", "value"]).rename_columns(
        ["key", "timestamp", "amount"]).to_pandas().sort_values(["key", "timestamp"])
    pd.testing.assert_frame_equal(got, want.reset_index(drop=True))
