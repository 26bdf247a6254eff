"""The in-memory buffer of an ingest is sorted once and gathered a piece at a time, the next
piece on a thread (``SortedRuns._gathered``): the stream is the stable sort of the input, in
pieces of at most four row groups, with the thread's path and the at-once path alike."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import sediment.files.sort as sort_mod
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


def test_ranges_sorted_on_the_thread_make_the_stable_sort(tmp_path: object,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Keys the normalised-key sort serves are sorted a key range at a time on the gathering
    thread (``files.sort.ordered_ranges``): the stream is still the stable sort, equal keys
    (1 in 50 rows repeats a key) in input order."""
    monkeypatch.setattr(spill, "_GATHER_AHEAD_ROWS", 0)
    monkeypatch.setattr(sort_mod, "_DATAFUSION_MIN_ROWS", 0)
    monkeypatch.setattr(sort_mod, "_RANGE_ROWS", 1_500)
    rows = 20_000
    rng = np.random.default_rng(5)
    keys = [f"{v:012d}" for v in rng.integers(0, 10**12, rows)]
    for i in range(0, rows, 50):
        keys[i] = keys[(i * 7919) % rows]
    t = pa.table({"key": keys, "ts": rng.integers(0, 2, rows), "pos": np.arange(rows)})
    served: list[bool] = []

    def ranges(*args: object) -> object:
        out = sort_mod.ordered_ranges(*args)  # type: ignore[arg-type]
        served.append(out is not None)
        return out

    monkeypatch.setattr(spill, "ordered_ranges", ranges)
    runs = SortedRuns(t.schema, ["key", "ts"], 1 << 40, str(tmp_path), 1024)
    for b in t.to_batches(max_chunksize=3_000):
        runs.add(b)
    got = pa.Table.from_batches(list(runs.sorted_stream()))
    order = pc.sort_indices(t, sort_keys=[("key", "ascending"), ("ts", "ascending"),
                                          ("pos", "ascending")])
    assert served == [True] and got.equals(t.take(order))
