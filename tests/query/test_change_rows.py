"""The difference of two reads as change rows (sediment.query.change_rows), against a reference
built of Python Counters.

The reference: records are compared whole as multisets; what both sides hold equally changed
nothing; of the rest, a record key (here ``k``, ``s``) left only before is deleted, only after
inserted, on both sides updated (old records as pre-images, new ones as post-images). Rows come
grouped by record key, pre-images before post-images (a one-sided difference as given).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from sediment.query.change_rows import labelled, record_changes

SCHEMA = pa.schema([("k", pa.string()), ("s", pa.int64()), ("v", pa.int64()),
                    ("w", pa.string())])
KEY = ["k", "s"]
LABELS = ["delete", "update_preimage", "update_postimage", "insert"]

record = st.tuples(st.sampled_from(["a", "b", "é", ""]), st.sampled_from([None, 1, 2]),
                   st.sampled_from([None, 0, 7]), st.sampled_from([None, "x", "y"]))


def _table(rows: list[tuple[Any, ...]]) -> pa.Table:
    return pa.table({n: [r[i] for r in rows] for i, n in enumerate(SCHEMA.names)},
                    schema=SCHEMA)


def _reference(before: list[tuple[Any, ...]], after: list[tuple[Any, ...]]
               ) -> Counter[tuple[str, tuple[Any, ...]]]:
    old, new = Counter(before), Counter(after)
    old_left, new_left = old - new, new - old
    keys_old = {r[:2] for r in old_left.elements()}
    keys_new = {r[:2] for r in new_left.elements()}
    out: Counter[tuple[str, tuple[Any, ...]]] = Counter()
    for r in old_left.elements():
        out[("update_preimage" if r[:2] in keys_new else "delete", r)] += 1
    for r in new_left.elements():
        out[("update_postimage" if r[:2] in keys_old else "insert", r)] += 1
    return out


@settings(max_examples=300, deadline=None)
@given(st.lists(record, max_size=12), st.lists(record, max_size=12))
def test_changes_are_the_multiset_difference_labelled_by_record_key(before: list[Any],
                                                                     after: list[Any]) -> None:
    rows, rank = record_changes(_table(before), _table(after), KEY)
    got = Counter((LABELS[int(r)], tuple(row.values()))
                  for r, row in zip(rank, rows.to_pylist(), strict=True))
    assert got == _reference(before, after)
    if not before or not after:
        return  # one side only: its rows as given (a read gives them in key order)
    # grouped by record key, and within a key pre-images before post-images
    keys = [(row["k"], row["s"]) for row in rows.to_pylist()]
    seen: set[Any] = set()
    for i, k in enumerate(keys):
        if i and keys[i - 1] == k:
            assert rank[i - 1] <= rank[i]
        else:
            assert k not in seen, f"rows of record key {k} are not together"
            seen.add(k)


def test_labelled_rows_carry_their_commit() -> None:
    rows = labelled(_table([("a", 1, 2, "x")]), 3, 12, 1_700_000_000.1234)
    assert rows.column("_change_type").to_pylist() == ["insert"]
    assert rows.column("_commit_version").to_pylist() == [12]
    assert rows.schema.field("_commit_timestamp").type == pa.timestamp("ms", tz="UTC")
    assert rows.column("_commit_timestamp").cast(pa.int64()).to_pylist() == [1_700_000_000_123]
