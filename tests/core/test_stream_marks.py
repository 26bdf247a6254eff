"""Stream marks (sediment.core.transactions.streams): a streaming writer's batch recorded in
the state with its files, pure. A replay is recognised from the state; an older batch id is
refused; a committer that lost the version to the same batch finds it in the new head and
builds nothing; entries are one per stream and dead ones expire; restore and clear keep them;
JSON round trips, plain AddFiles bodies unchanged."""

from __future__ import annotations

import json

import pytest
from test_transactions import SCHEMA, T0, commit, fresh, ref, split_root

from sediment.core.state import TableState
from sediment.core.transactions import (
    AddFiles,
    AddFilesWithSplits,
    ClearTable,
    SplitPartition,
    StreamMark,
    transaction_from_json,
)
from sediment.core.transactions.restore import plan_restore
from sediment.errors import TransactionInvalidError

DAY = 86400.0


def batch(name: str, stream: str, batch_id: int) -> AddFiles:
    return AddFiles([ref(name, "root", 5)], stream=StreamMark(stream, batch_id))


def entries(state: TableState) -> dict[str, int]:
    return {k: v[0] for k, v in state.streams.items()}


def test_a_batch_is_recorded_with_its_files() -> None:
    s = commit(fresh(), batch("f1", "q1", 0), T0)
    assert dict(s.streams) == {"q1": (0, T0)}
    assert "f1" in s.refcount
    assert StreamMark("q1", 0).committed(s) and not StreamMark("q1", 1).committed(s)
    s = commit(s, batch("f2", "q1", 4), T0 + 1)  # gaps are normal: empty batches commit none
    assert dict(s.streams) == {"q1": (4, T0 + 1)}


def test_a_replay_is_refused_and_an_older_batch_names_the_new_sequence() -> None:
    s = commit(fresh(), batch("f1", "q1", 3))
    with pytest.raises(TransactionInvalidError, match="batch 3 is already committed"):
        batch("f2", "q1", 3).validate(s)
    with pytest.raises(TransactionInvalidError, match="batch 0 is older than batch 3.*new "
                                                      "streamId"):
        batch("f2", "q1", 0).validate(s)
    batch("f2", "q2", 0).validate(s)  # another stream: a sequence of its own
    for bad, match in ((StreamMark("", 0), "needs a stream id"),
                       (StreamMark("q", -1), "negative")):
        with pytest.raises(TransactionInvalidError, match=match):
            AddFiles([ref("f3", "root")], stream=bad).validate(s)


def test_a_committer_that_lost_the_version_to_the_same_batch_builds_nothing() -> None:
    """Two committers of batch 5 planned on one head: the first commits; the second, whose
    append found the version taken, re-reads the head and finds the batch there (what
    ``sediment.ingest.streams`` builds from it: nothing); its own transaction, validated
    anyway, is refused. The state holds the first one's files only."""
    head = fresh()
    mine, theirs = batch("mine", "q", 5), batch("theirs", "q", 5)
    mine.validate(head)
    theirs.validate(head)
    after = commit(head.copy(), mine)
    assert StreamMark("q", 5).committed(after)
    with pytest.raises(TransactionInvalidError, match="already committed"):
        theirs.validate(after)
    assert set(after.refcount) == {"mine"}


def test_entries_stay_one_per_stream_and_dead_ones_expire() -> None:
    s = fresh(properties={"stream.retention_seconds": 10 * DAY})
    s = commit(s, batch("a", "dead", 9), T0)
    for i in range(3):
        s = commit(s, batch(f"b{i}", "live", i), T0 + i * DAY)
    assert entries(s) == {"dead": 9, "live": 2}
    s = commit(s, batch("c", "other", 0), T0 + 10 * DAY + 1)  # "dead" is past retention
    assert entries(s) == {"live": 2, "other": 0}
    s = commit(s, batch("d", "late", 0), T0 + 30 * DAY)
    assert entries(s) == {"late": 0}  # the committing stream's own entry always stays
    # the default keeps a month
    t = commit(commit(fresh(), batch("e", "q1", 0), T0), batch("f", "q2", 0), T0 + 29 * DAY)
    assert entries(t) == {"q1": 0, "q2": 0}


def test_restore_and_clear_keep_the_streams_entries() -> None:
    old = commit(fresh(), batch("f1", "q", 0))
    head = commit(old.copy(), batch("f2", "q", 1))
    restored = commit(head.copy(), plan_restore(head, old))
    assert entries(restored) == {"q": 1}  # its replay of batch 1 is still recognised
    assert set(restored.refcount) == {"f1"}
    cleared = commit(head.copy(), ClearTable())
    assert entries(cleared) == {"q": 1} and not cleared.refcount


def test_copies_share_entries_and_states_compare_them() -> None:
    s = commit(fresh(), batch("f1", "q", 0))
    c = s.copy()
    assert c == s
    commit(c, batch("f2", "q", 1))
    assert entries(s) == {"q": 0} and entries(c) == {"q": 1}
    plain = commit(fresh(), AddFiles([ref("f1", "root", 5)]))
    assert plain.canonical()["streams"] == {}
    assert plain.canonical() != {**s.canonical(), "version": plain.version}


@pytest.mark.parametrize("txn", [
    AddFiles([ref("f1", "a", 3)], stream=StreamMark("0f9e-query", 12)),
    AddFiles([ref("f1", "a", 3)], upsert=True, stream=StreamMark("q", 0)),
    AddFilesWithSplits([ref("f4", "L", 3)], [SplitPartition("root", ("m",), "L", "R")],
                       stream=StreamMark("q", 2)),
], ids=["append", "upsert", "with-splits"])
def test_json_round_trip(txn: AddFiles) -> None:
    doc = json.loads(json.dumps({"kind": txn.kind, "transaction": txn.to_json()}))
    back = transaction_from_json(doc["kind"], doc["transaction"], where="test")
    assert back == txn and back.summary() == txn.summary()
    assert doc["transaction"]["stream"] == {"id": txn.stream.stream_id,
                                            "batch": txn.stream.batch_id}
    assert "(stream " in txn.summary()


def test_a_plain_add_files_body_is_unchanged() -> None:
    assert AddFiles([ref("f1", "a", 3)]).to_json() == {
        "references": [{"file": "f1", "partition": "a", "records": 3}]}


def test_a_batch_with_splits_records_its_mark_too() -> None:
    s = commit(split_root(), AddFilesWithSplits(
        [ref("f4", "LL", 3)], [SplitPartition("L", ("c",), "LL", "LR")],
        stream=StreamMark("q", 0)))
    assert entries(s) == {"q": 0} and s.schema == SCHEMA
