"""The in-memory buffer of an ingest is sorted once and gathered a piece at a time, the next
piece on a thread (``SortedRuns._gathered``): the stream is the stable sort of the input, in
pieces of at most four row groups, with the thread's path and the at-once path alike."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import sediment.ingest.spill as spill
from sediment.ingest.spill import SortedRuns


@pytest.mark.parametrize("ahead", [0, 1 << 30])
@pytest.mark.parametrize("rows", [1, 500, 4_097, 20_000])
def test_gathered_stream_is_the_stable_sort(ahead: int, rows: int, tmp_path: object,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(spill, "_GATHER_AHEAD_ROWS", ahead)
    rng = np.random.default_rng(rows)
    keys = [f"k{v:07d}" for v in rng.integers(0, max(1, rows // 3), rows)]  # many ties
    t = pa.table({"key": keys, "ts": rng.integers(0, 3, rows), "pos": np.arange(rows)})
    runs = SortedRuns(t.schema, ["key", "ts"], 1 << 40, str(tmp_path), 1024)
    for b in t.to_batches(max_chunksize=3_000):
        runs.add(b)
    pieces = list(runs.sorted_stream())
    assert all(p.num_rows <= 4 * 1024 for p in pieces)
    got = pa.Table.from_batches(pieces)
    order = pc.sort_indices(t, sort_keys=[("key", "ascending"), ("ts", "ascending"),
                                          ("pos", "ascending")])
    assert got.equals(t.take(order))
