"""Which records a delete by whole composite keys removes, for a few records against many keys
(a lookup under a large delete): the code-based membership (``_few_keys_in``) against a
Python set of key tuples."""

from __future__ import annotations

import datetime
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import sediment as sd
import sediment.query.deletes as deletes_module
from sediment.query.deletes import _few_keys_in

NAMES = ["user", "n", "day"]
_DAYS = [datetime.date(2026, 1, d) for d in (1, 2, 3)]
keys = st.tuples(st.sampled_from(["a", "b", "", "é", "a\x00"]), st.integers(-2, 2),
                 st.sampled_from(_DAYS))


def _table(rows: list[tuple[object, ...]], n_type: pa.DataType | None = None) -> pa.Table:
    cols: list[tuple[object, ...]] = list(zip(*rows, strict=True)) if rows else [(), (), ()]
    return pa.table({"user": pa.array(cols[0], pa.string()),
                     "n": pa.array(cols[1], n_type or pa.int64()),
                     "day": pa.array(cols[2], pa.date32())})


@settings(max_examples=100, deadline=None)
@given(records=st.lists(keys, max_size=8), deleted=st.lists(keys, max_size=40))
def test_few_records_against_deleted_keys_match_a_set_of_tuples(
        records: list[tuple[object, ...]], deleted: list[tuple[object, ...]]) -> None:
    # the records' int field is int32 where the deleted keys' is int64: cast, as reads do
    found = _few_keys_in(_table(records, pa.int32()), _table(deleted), NAMES)
    assert found is not None
    dead = set(deleted)
    assert found.tolist() == [r in dead for r in records]


def test_too_many_distinct_values_leave_it_to_the_join(monkeypatch: pytest.MonkeyPatch) -> None:
    # codes past an int64 (three fields of 2M distinct values), scaled down: 11^3 > 1,000
    monkeypatch.setattr(deletes_module, "_FEW_CODES", 1_000)
    deleted = pa.table({"user": pa.array(np.arange(10).astype(str)), "n": pa.array(np.arange(10)),
                        "day": pa.array(np.arange(10), pa.int64())})
    records = pa.table({"user": ["1"], "n": [1], "day": pa.array([1], pa.int64())})
    assert _few_keys_in(records, deleted, NAMES) is None
    assert _few_keys_in(records, deleted.slice(0, 9).filter(
        pa.array([True] * 2 + [False] * 7)), NAMES) is not None  # 3^3 codes fit
    none = _few_keys_in(records, deleted.slice(0, 0), NAMES)
    assert none is not None and none.tolist() == [False]


def test_lookups_under_many_deleted_keys_sharing_long_prefixes(tmp_path: Path) -> None:
    """A lookup finds the deleted keys near its own by an 8-byte prefix of the first field:
    keys that share it (and differ after it, or in the second field) are told apart."""
    schema = sd.Schema(row_keys=[("user", pa.string()), ("n", pa.int64())],
                       values=[("v", pa.int64())])
    table = sd.Store.open(str(tmp_path / "s"), create=True).create_table("t", schema)
    users = [f"same-prefix-{i:03d}" for i in range(60)] + ["same-pre", "same-prf", "s"]
    rows = [(u, n) for u in users for n in (1, 2, 3)]
    table.ingest(pa.table({"user": [u for u, _ in rows], "n": [n for _, n in rows],
                           "v": list(range(len(rows)))}))
    gone = {(u, n) for i, (u, n) in enumerate(rows) if i % 4 != 1}
    table.delete(keys=sorted(gone))
    for key in [*rows, ("same-prefix-999", 1), ("same-pre", 9)]:
        assert table.query(keys=[key]).num_rows == (0 if key in gone or key not in rows
                                                    else 1), key
    assert table.query(keys=[("same-pre",)]).num_rows == 1  # a prefix key: (same-pre, 2)


def test_a_reader_keeps_a_bounded_number_of_compiled_deletions() -> None:
    """A long-lived reader (a server) sees every delete ever committed: it keeps the most
    recently used KEPT_DELETIONS compiled, each with its sorted keys, and recompiles the
    others when asked, with the same answer."""
    from sediment.core.deletions import Deletion
    from sediment.core.regions import Range
    from sediment.files.sequence import SEQ
    from sediment.query.deletes import KEPT_DELETIONS, Deletes

    schema = sd.Schema(row_keys=[("user", pa.string()), ("n", pa.int64())],
                       values=[("v", pa.int64())])
    deletes = Deletes(schema)
    users = [f"u{i:04d}" for i in range(KEPT_DELETIONS + 40)]
    record = pa.table({"user": [users[0]], "n": [1], "v": [0], SEQ: pa.array([0], pa.uint64())})
    for version, user in enumerate(users, start=1):
        # deleted keys: (user, 1) and enough others that a one-record read takes the
        # binary-search route
        gone = tuple(Range.exact_many([(user, 1), *((user, k) for k in range(2, 10))]))
        d = Deletion(version, gone, None, frozenset())
        kept = deletes.apply(record, [d]).num_rows
        assert kept == (0 if user == users[0] else 1), version
        assert len(deletes._compiled) <= KEPT_DELETIONS
        assert set(deletes._by_first) <= set(deletes._compiled)
    first = Deletion(1, tuple(Range.exact_many([(users[0], 1), (users[0], 2)] * 5)), None,
                     frozenset())
    assert 1 not in deletes._compiled  # dropped long ago: compiled again, same answer
    assert deletes.apply(record, [first]).num_rows == 0
