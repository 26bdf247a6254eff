"""Idempotent writes: a keyed ingest, upsert or delete commits exactly once per key.

The reference is counting: the log entries carrying a key (every one, read back), and the
table's rows against the rows written once."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import sediment as sd
from helpers import make_table, rows, run_together
from sediment.errors import CommitOutcomeUnknownError, DataError, WriteOutcomeUnknownError
from sediment.ingest import idempotency
from sediment.maintenance.gc import gc
from sediment.state.log import TransactionLog


def keyed_versions(table: sd.Table) -> dict[str, list[int]]:
    """Every idempotency key the table's log carries, with the versions carrying it."""
    log = table._handle.states.log
    out: dict[str, list[int]] = {}
    for v in range(1, table.version + 1):
        for k in log.keys_at(v) or ():
            out.setdefault(k.key, []).append(v)
    return out


def objects(root: Path) -> set[str]:
    """The store's objects but the writers' lease files (released lazily)."""
    return {str(p.relative_to(root)) for p in root.rglob("*")
            if p.is_file() and "/pending/" not in str(p)}


def test_a_retry_with_the_same_key_and_records_returns_the_first_version_and_writes_nothing(
        tmp_path: Path) -> None:
    table = make_table(tmp_path / "s")
    data = rows(50, 1)
    first = table.ingest(data, idempotency_key="job-1")
    before = objects(tmp_path / "s")
    again = table.ingest(data, idempotency_key="job-1")  # an Arrow table: hashed, not staged
    rechunked = pa.RecordBatchReader.from_batches(data.schema, data.to_batches(max_chunksize=7))
    streamed = table.ingest(rechunked, idempotency_key="job-1")  # staged, then dropped
    assert again.version == streamed.version == first.version == table.version
    assert (again.rows, again.files, again.bytes) == (first.rows, first.files, first.bytes)
    assert again.replayed and streamed.replayed and not first.replayed
    assert objects(tmp_path / "s") == before
    assert table.query().num_rows == 50
    assert keyed_versions(table) == {"job-1": [first.version]}


SCHEMA_CHANGES = {
    "added": lambda t: t.add_columns([("colour", pa.string())]),
    "widened": lambda t: t.widen_column("value", pa.large_string()),
    "dropped": lambda t: t.drop_columns(["nullable_value"]),
}


@pytest.mark.parametrize("change", sorted(SCHEMA_CHANGES))
def test_a_retry_after_a_schema_change_is_the_same_payload(tmp_path: Path, change: str) -> None:
    """A retry is the same records sent again: hashed as given, not as fitted to the schema
    the table has when the retry comes, so a column added, widened or dropped in between
    leaves it the same payload, answered with the first attempt's version (found by the chaos
    soak: a retry after a column was added was refused as another payload)."""
    table = make_table(tmp_path / "s")
    data = rows(30, 5)
    first = table.upsert(data, idempotency_key="job-2")
    SCHEMA_CHANGES[change](table)
    again = table.upsert(data, idempotency_key="job-2")
    streamed = table.upsert(pa.RecordBatchReader.from_batches(
        data.schema, data.to_batches(max_chunksize=7)), idempotency_key="job-2")
    assert again.version == streamed.version == first.version
    assert table.version == first.version + 1
    assert table.query().num_rows == 30
    with pytest.raises(sd.IdempotencyKeyReusedError, match="this call committed nothing"):
        table.upsert(data.append_column("colour", pa.array(["red"] * 30)),
                     idempotency_key="job-2")


def test_the_same_key_with_other_records_is_refused_naming_table_and_key(
        tmp_path: Path) -> None:
    table = make_table(tmp_path / "s")
    table.ingest(rows(10, 1), idempotency_key="k")
    version = table.version
    with pytest.raises(sd.IdempotencyKeyReusedError, match=rf"table {table.name}: .*'k'"):
        table.ingest(rows(10, 2), idempotency_key="k")
    with pytest.raises(sd.IdempotencyKeyReusedError):  # the same records upserted differ
        table.upsert(rows(10, 1), idempotency_key="k")
    with pytest.raises(sd.IdempotencyKeyReusedError):
        table.delete(keys=["a"], idempotency_key="k")
    assert table.version == version
    with pytest.raises(DataError, match="idempotency key"):
        table.ingest(rows(1, 1), idempotency_key="")


def test_keyed_upsert_and_delete_commit_once(tmp_path: Path) -> None:
    table = make_table(tmp_path / "s")
    data = rows(20, 3)
    v1 = table.upsert(data, idempotency_key="u").version
    assert table.upsert(data, idempotency_key="u").version == v1
    key = data.column("key")[0].as_py()
    v2 = table.delete(keys=[key], idempotency_key="d")
    assert table.delete(keys=[key], idempotency_key="d") == v2 == table.version
    with pytest.raises(sd.IdempotencyKeyReusedError):
        table.delete(keys=["zz"], idempotency_key="d")
    assert keyed_versions(table) == {"u": [v1], "d": [v2]}


def test_threads_racing_one_key_commit_once(tmp_path: Path) -> None:
    table = make_table(tmp_path / "s")
    data = rows(30, 4)

    def put(_: int) -> int:  # each thread a Store of its own, as separate processes
        t = sd.Store.open(str(tmp_path / "s")).table(table.name)
        return t.ingest(data, idempotency_key="race").version

    versions = run_together(range(6), put)
    assert len(set(versions)) == 1
    assert keyed_versions(table) == {"race": versions[:1]}
    assert table.query().num_rows == 30


WRITER = textwrap.dedent("""
    import sys, time, sediment as sd
    from helpers import rows
    table = sd.Store.open(sys.argv[1]).table(sys.argv[2])
    while time.time() < float(sys.argv[3]):
        time.sleep(0.001)
    print(table.ingest(rows(40, 5), idempotency_key="proc").version)
""")


@pytest.mark.slow
def test_processes_racing_one_key_commit_once(tmp_path: Path) -> None:
    table = make_table(tmp_path / "s")
    start = time.time() + 3.0  # both imported and waiting by then
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(Path(__file__).parents[1]), *sys.path])}
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path / "s"), table.name,
                               str(start)], stdout=subprocess.PIPE, env=env)
             for _ in range(2)]
    outs = [p.communicate(timeout=60)[0].decode().split() for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert outs[0] == outs[1]
    assert keyed_versions(table) == {"proc": [int(outs[0][0])]}
    assert table.query().num_rows == 40


def test_a_lost_commit_answer_is_resolved_by_reading_the_log(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The log entry lands, its answer is lost: the next attempt reads the log and finds
    its own key (nothing committed twice, the files kept: they are the table's)."""
    table = make_table(tmp_path / "s")
    real = TransactionLog.try_append
    lost: list[int] = []

    def try_append(self: TransactionLog, version: int, *args: object, **kw: object) -> bool:
        landed = real(self, version, *args, **kw)  # type: ignore[arg-type]
        if not lost:
            lost.append(version)
            raise WriteOutcomeUnknownError("connection reset after the put")
        return landed

    monkeypatch.setattr(TransactionLog, "try_append", try_append)
    result = table.ingest(rows(25, 6), idempotency_key="lost")
    assert result.version == lost[0]
    assert keyed_versions(table) == {"lost": lost}
    assert table.query().num_rows == 25


def test_a_writer_that_died_after_its_commit_is_answered_from_the_log(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The commit lands but its writer never records the version (it died, or the answer
    never reached the client): a retry finds the claim without a version, reads the log
    from the claim on, and commits nothing."""
    table = make_table(tmp_path / "s")
    data = rows(25, 7)
    with monkeypatch.context() as m:
        def died(*args: object) -> None:
            raise CommitOutcomeUnknownError("process killed before recording")

        m.setattr(idempotency.KeyIndex, "record_all", died)
        with pytest.raises(CommitOutcomeUnknownError):
            table.ingest(data, idempotency_key="died")
    committed = table.version
    table.ingest(rows(5, 8))  # another write after it
    retry = sd.Store.open(str(tmp_path / "s")).table(table.name)
    assert retry.ingest(data, idempotency_key="died").version == committed
    assert retry.ingest(data, idempotency_key="died").version == committed  # recorded now
    assert keyed_versions(table) == {"died": [committed]}
    assert table.query().num_rows == 30


def test_a_key_expires_after_its_window_and_gc_deletes_its_record(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    table = make_table(tmp_path / "s", **{"write.idempotency_window_seconds": 3600})
    data = rows(10, 9)
    first = table.ingest(data, idempotency_key="old").version
    assert table.gc().expired_keys == 0
    later = time.time() + 3601
    monkeypatch.setattr(idempotency.time, "time", lambda: later)
    second = table.ingest(data, idempotency_key="old").version  # a new write by now
    assert second > first and table.query().num_rows == 20
    monkeypatch.undo()
    skew = table.properties["gc.clock_skew_seconds"]
    assert gc(table._handle, now=time.time() + 3600 + skew + 10).expired_keys == 1
    assert not list(table._handle.objects.list(idempotency.INDEX_PREFIX))


def test_the_window_is_a_registered_property_of_at_least_an_hour(tmp_path: Path) -> None:
    table = make_table(tmp_path / "s")
    assert table.properties["write.idempotency_window_seconds"] >= 3600
    with pytest.raises(sd.SedimentError, match="write.idempotency_window_seconds"):
        table.set_properties({"write.idempotency_window_seconds": 60})


def test_the_payload_hash_does_not_depend_on_batch_cuts() -> None:
    data = rows(1000, 10)
    hashes = set()
    for size in (1000, 7, 333):
        h = idempotency.PayloadHash("ingest")
        for b in data.to_batches(max_chunksize=size):
            h.update(b)
        hashes.add(h.hexdigest())
    assert len(hashes) == 1


def test_the_cli_passes_its_idempotency_key_on(tmp_path: Path) -> None:
    import pyarrow.parquet as pq
    from typer.testing import CliRunner

    from sediment.cli import app

    table = make_table(tmp_path / "s")
    pq.write_table(rows(12, 11), tmp_path / "in.parquet")
    args = ["ingest", table.name, str(tmp_path / "in.parquet"), "--store",
            str(tmp_path / "s"), "--idempotency-key", "cli-1", "--json"]
    outs = [CliRunner().invoke(app, args) for _ in range(2)]
    assert [o.exit_code for o in outs] == [0, 0], [o.output for o in outs]
    import json

    assert [json.loads(o.stdout)["version"] for o in outs] == [2, 2]
    assert [json.loads(o.stdout)["replayed"] for o in outs] == [False, True]
    human = CliRunner().invoke(app, args[:-1])
    assert human.exit_code == 0 and "a retry under its idempotency key: nothing written" \
        in " ".join(human.output.split()), human.output
    assert keyed_versions(table) == {"cli-1": [2]}
    assert table.query().num_rows == 12
    refused = CliRunner().invoke(app, ["delete", table.name, "--key", "x", "--store",
                                       str(tmp_path / "s"), "--idempotency-key", "cli-1"])
    assert refused.exit_code != 0 and "cli-1" in refused.output
    # a delete's retry says it was replayed, not that there was nothing to delete
    key = table.query().column("key")[0].as_py()
    delete = ["delete", table.name, "--key", key, "--store", str(tmp_path / "s"),
              "--idempotency-key", "cli-2", "--json"]
    outs = [CliRunner().invoke(app, delete) for _ in range(2)]
    docs = [json.loads(o.stdout) for o in outs]
    assert [(d["committed"], d["replayed"]) for d in docs] == [(True, False), (False, True)]
    assert docs[0]["version"] == docs[1]["version"] == 3
    human = CliRunner().invoke(app, delete[:-1])
    assert "was committed at version 3 before: nothing deleted again" in \
        " ".join(human.output.split()), human.output


def test_keyed_writes_through_lost_s3_answers_commit_once(proxied_s3: Any) -> None:
    """On moto S3 through the fault proxy: the answer to the claim's PUT, then to the log
    entry's PUT, then to the record's PUT, is dropped after the request is forwarded; each
    keyed write still commits once, and its retry (a fresh process's handle) writes
    nothing."""
    store = proxied_s3.open()
    table = make_table(store)
    for i, path in enumerate((r"/idempotency/", r"/log/\d{20}\.json$", r"/idempotency/")):
        data = rows(20, 20 + i)
        skip = 1 if i == 2 else 0  # the record's rewrite: the second PUT of the key
        rule = proxied_s3.proxy.add_rule("drop_response", method="PUT", path=path, count=1,
                                         skip=skip)
        try:
            version = table.ingest(data, idempotency_key=f"s3-{i}").version
        finally:
            proxied_s3.proxy.remove_rule(rule)
        assert rule.fired == 1
        fresh = proxied_s3.open_direct().table(table.name)
        assert fresh.ingest(data, idempotency_key=f"s3-{i}").version == version
    assert {k: len(v) for k, v in keyed_versions(table).items()} == {
        "s3-0": 1, "s3-1": 1, "s3-2": 1}
    assert proxied_s3.open_direct().table(table.name).query().num_rows == 60


@pytest.mark.parametrize(("key", "said"), [(42, "is a string, not int 42"),
                                           ("", "non-empty string"),
                                           ("k" * 600, "(600 characters)")],
                         ids=["int", "empty", "long"])
def test_a_bad_key_is_refused_before_anything_is_written(tmp_path: Path, key: Any,
                                                         said: str) -> None:
    table = make_table(tmp_path / "s")
    with pytest.raises(DataError, match=rf"table {table.name}: .*{re.escape(said)}"):
        table.ingest(rows(3, 1), idempotency_key=key)
    assert table.version == 1
