"""Keep-latest's reduction on every pyarrow the project supports.

Keep-latest sorts each batch's rows by (run, ``by``) with ``by``'s nulls first. pyarrow 25 moved
the null placement into each sort key; before 25 a three-item sort key fails to unpack
(``ValueError: too many values to unpack``), which broke every keep-latest table there. These
tests drive the reduction (several rows per key in one batch, null and tied ``by`` values) on
the installed pyarrow, and the pre-25 form of the options on this one, so both branches of
``latest_last_options`` are proven. ``./dev test-floors`` runs them on the oldest pyarrow.
"""

from __future__ import annotations

import warnings
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import sediment as sd
from sediment.iterators import KeepLatest, combine

SCHEMA = sd.Schema(row_keys=[("key", pa.string())], sort_keys=[("ts", pa.int64())],
                   values=[("version", pa.int64()), ("value", pa.string())])

# one batch, several rows per key: nulls, ties (the later row wins) and a single row
ROWS = [
    ("a", 1, 2, "a-old"), ("a", 2, None, "a-null"), ("a", 3, 2, "a-tie-later"),
    ("a", 4, 1, "a-lower"),
    ("b", 1, None, "b-null-first"), ("b", 2, None, "b-null-last"),
    ("c", 5, 7, "c-only"),
    ("d", 1, 9, "d-top"), ("d", 2, None, "d-null"),
]
EXPECTED = [
    {"key": "a", "ts": 3, "version": 2, "value": "a-tie-later"},
    {"key": "b", "ts": 2, "version": None, "value": "b-null-last"},
    {"key": "c", "ts": 5, "version": 7, "value": "c-only"},
    {"key": "d", "ts": 1, "version": 9, "value": "d-top"},
]


def _batch() -> pa.RecordBatch:
    cols = list(zip(*ROWS, strict=True))
    return pa.RecordBatch.from_arrays([pa.array(c, f.type) for c, f in
                                       zip(cols, SCHEMA.to_arrow(), strict=True)],
                                      schema=SCHEMA.to_arrow())


def _keep_latest(batches: list[pa.RecordBatch]) -> list[dict[str, Any]]:
    out = list(KeepLatest("version", SCHEMA).apply(iter(batches)))
    return pa.Table.from_batches(out, schema=SCHEMA.to_arrow()).to_pylist()


def test_keep_latest_reduces_a_batch_with_nulls_and_ties() -> None:
    assert _keep_latest([_batch()]) == EXPECTED
    # the same rows one per batch: the runs straddle batches, the answer does not change
    batch = _batch()
    assert _keep_latest([batch.slice(i, 1) for i in range(batch.num_rows)]) == EXPECTED


def test_keep_latest_options_without_per_key_null_placement(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The options pyarrow before 25 gets: its SortOptions refuses a three-item sort key."""
    real = pc.SortOptions

    def pre_25(sort_keys: Any = (), *, null_placement: Any = None) -> Any:
        if any(len(k) != 2 for k in sort_keys):
            raise ValueError("too many values to unpack (expected 2)")
        with warnings.catch_warnings():  # pyarrow >= 25 deprecates the global placement
            warnings.simplefilter("ignore", FutureWarning)
            return real(sort_keys, null_placement=null_placement)

    monkeypatch.setattr(pc, "SortOptions", pre_25)
    options = combine.latest_last_options()
    monkeypatch.setattr(combine, "_LATEST_LAST", options)
    assert _keep_latest([_batch()]) == EXPECTED
