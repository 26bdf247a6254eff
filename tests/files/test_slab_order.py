"""The order of a merge slab (sediment.files.slab_order): placing a few small runs into a large
one gives the stable sort's order, against an independent reference (a sort of every row by
key, then piece, then position; pandas' keep-last for the rows ``last_of`` may leave out)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sediment.files.merge import merge_sorted
from sediment.files.slab_order import place_into_largest, slab_order, sort_all

# keys sharing 8-byte prefixes ("prefix00…"), shorter than 8 bytes, and ending in NUL: the
# prefix ties that must be ordered by the full key
STRING_KEYS = ["", "a", "a\x00", "b", "prefix00", "prefix00a", "prefix00b", "prefix01",
               "prefix00\x00", "zz", "é", "😀"]
INT_KEYS = [-(2**63), -5, -1, 0, 1, 2, 2**40, 2**63 - 1]
TIMESTAMP_KEYS = [-5, -1, 0, 1, 2, 2**40]  # (inside Python's datetime range: read back)


def _piece(rows: list[tuple[Any, int, int]], key_type: pa.DataType, piece: int
           ) -> pa.RecordBatch:
    rows = sorted(rows, key=lambda r: (_order_key(r[0]), r[1], r[2]))
    return pa.RecordBatch.from_pydict({
        "k": pa.array([r[0] for r in rows], key_type),
        "ts": pa.array([r[1] for r in rows], pa.int64()),
        "seq": pa.array([r[2] for r in rows], pa.int64()),
        "piece": pa.array([piece] * len(rows), pa.int64()),
        "pos": pa.array(range(len(rows)), pa.int64())})


def _order_key(k: Any) -> Any:
    return k.encode() if isinstance(k, str) else k


def _hex(k: Any) -> Any:
    return k.encode().hex() if isinstance(k, str) else k


def _rows(keys: list[Any], lo: int, hi: int) -> st.SearchStrategy[list[tuple[Any, int, int]]]:
    return st.lists(st.tuples(st.sampled_from(keys), st.integers(0, 2), st.integers(0, 2)),
                    min_size=lo, max_size=hi)


@st.composite
def slabs(draw: st.DrawFn) -> tuple[list[pa.RecordBatch], str]:
    kind = draw(st.sampled_from(["string", "int", "timestamp"]))
    keys: list[Any] = {"string": STRING_KEYS, "int": INT_KEYS,
                       "timestamp": TIMESTAMP_KEYS}[kind]
    key_type = {"string": pa.string(), "int": pa.int64(),
                "timestamp": pa.timestamp("us")}[kind]
    # at most 5 x 2 small rows: within placement's fraction (1/8) of the large run's 80+
    large = draw(_rows(keys, 80, 120))
    smalls = draw(st.lists(_rows(keys, 0, 2), min_size=1, max_size=5))
    at = draw(st.integers(0, len(smalls)))  # the large piece's place among the streams
    rows = [*smalls[:at], large, *smalls[at:]]
    return [_piece(r, key_type, i) for i, r in enumerate(rows)], kind


def _reference(pieces: list[pa.RecordBatch]) -> list[tuple[int, int]]:
    """(piece, pos) of every row, sorted by key, then piece, then position."""
    rows = pa.Table.from_batches(pieces).to_pylist()
    rows.sort(key=lambda r: (_order_key(r["k"]), r["ts"], r["seq"], r["piece"], r["pos"]))
    return [(r["piece"], r["pos"]) for r in rows]


def _ordered(pieces: list[pa.RecordBatch], order: Any) -> list[tuple[int, int]]:
    t = pa.Table.from_batches(pieces).take(order)
    return list(zip(t.column("piece").to_pylist(), t.column("pos").to_pylist(), strict=True))


def _keep_last(pieces: list[pa.RecordBatch], rows: list[tuple[int, int]]
               ) -> list[tuple[int, int]]:
    """pandas' reference of merge="last": of each run of equal (k, ts), the last row."""
    frame = pa.Table.from_batches(pieces).to_pandas()
    frame["k"] = frame["k"].map(_hex)  # pandas hashes "a" and "a\x00" alike
    by = {(p, q): i for i, (p, q) in enumerate(zip(frame["piece"], frame["pos"], strict=True))}
    ordered = frame.iloc[[by[r] for r in rows]]
    kept = ordered.drop_duplicates(subset=["k", "ts"], keep="last")
    return list(zip(kept["piece"], kept["pos"], strict=True))


NAMES = ["k", "ts", "seq"]


@settings(max_examples=60, deadline=None)
@given(slabs())
def test_placement_equals_the_stable_sort(slab: tuple[list[pa.RecordBatch], str]) -> None:
    pieces, _ = slab
    want = _reference(pieces)
    order = place_into_largest(pieces, NAMES)
    assert order is not None  # a large run and a few small ones: placement applies
    assert _ordered(pieces, order) == want
    assert _ordered(pieces, sort_all(pieces, NAMES)) == want


@settings(max_examples=60, deadline=None)
@given(slabs())
def test_placement_leaves_out_only_what_keep_last_drops(
        slab: tuple[list[pa.RecordBatch], str]) -> None:
    """With ``last_of``, the rows left out are earlier rows of runs of equal record keys:
    what is left is in order, and keep-last of it equals keep-last of everything."""
    pieces, _ = slab
    want = _reference(pieces)
    got = _ordered(pieces, slab_order(pieces, NAMES, ["k", "ts"]))
    position = {r: i for i, r in enumerate(want)}
    assert [position[r] for r in got] == sorted(position[r] for r in got)
    assert _keep_last(pieces, got) == _keep_last(pieces, want)


def test_many_small_runs_or_no_prefix_sort_the_slab() -> None:
    """Placement declines where it would not pay or cannot order: small runs holding more
    than its fraction of the large one's rows, a first key with nulls or no prefix."""
    large = _piece([(f"k{i:03d}", 0, 0) for i in range(40)], pa.string(), 0)
    many = _piece([(f"k{i:03d}", 1, 1) for i in range(10)], pa.string(), 1)
    assert place_into_largest([large, many], NAMES) is None
    floats = pa.RecordBatch.from_pydict({"k": pa.array([0.5] * 40), "ts": [0] * 40,
                                         "seq": [0] * 40})
    assert place_into_largest([floats, floats.slice(0, 1)], NAMES) is None
    assert len(slab_order([floats, floats.slice(0, 1)], NAMES)) == 41


@st.composite
def upserted_slabs(draw: st.DrawFn) -> list[pa.RecordBatch]:
    """A base whose keys differ in their first 8 bytes, each once, and small runs re-writing
    some of them: where a key is re-written once, the one-to-one pairs placement orders
    without a sort."""
    pool = [f"k{i:07d}" for i in range(200)]
    base = sorted(draw(st.lists(st.sampled_from(pool), min_size=80, max_size=120,
                                unique=True)))
    large = [(k, draw(st.integers(0, 2)), draw(st.integers(0, 2))) for k in base]
    # mostly distinct (pairs), some keys re-written twice (sorted with their base record)
    rewritten = sorted(draw(st.lists(st.sampled_from(pool), min_size=1, max_size=10,
                                     unique=draw(st.booleans()))))
    cuts = sorted(draw(st.lists(st.integers(0, len(rewritten)), max_size=3)))
    bounds = [0, *cuts, len(rewritten)]
    smalls = [[(k, draw(st.integers(0, 2)), draw(st.integers(0, 2))) for k in rewritten[a:z]]
              for a, z in zip(bounds, bounds[1:], strict=False)]
    at = draw(st.integers(0, len(smalls)))
    rows = [*smalls[:at], large, *smalls[at:]]
    return [_piece(r, pa.string(), i) for i, r in enumerate(rows)]


@settings(max_examples=60, deadline=None)
@given(upserted_slabs())
def test_pairs_of_a_base_record_and_its_upsert_order_as_the_sort(
        pieces: list[pa.RecordBatch]) -> None:
    want = _reference(pieces)
    assert _ordered(pieces, slab_order(pieces, NAMES)) == want
    got = _ordered(pieces, slab_order(pieces, NAMES, ["k", "ts"]))
    position = {r: i for i, r in enumerate(want)}
    assert [position[r] for r in got] == sorted(position[r] for r in got)
    assert _keep_last(pieces, got) == _keep_last(pieces, want)


def _batches(t: pa.Table, cuts: list[int]) -> Iterator[pa.RecordBatch]:
    bounds = [0, *sorted(min(c, t.num_rows) for c in cuts), t.num_rows]
    return (b for a, z in zip(bounds, bounds[1:], strict=False) if z > a
            for b in t.slice(a, z - a).to_batches())


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 239), max_size=4), st.lists(_rows(STRING_KEYS, 0, 4),
                                                           min_size=1, max_size=4))
def test_merge_with_last_of_keeps_what_keep_last_keeps(cuts: list[int],
                                                       smalls: list[list[Any]]) -> None:
    """merge_sorted with ``last_of``, the large stream cut into several batches so small
    runs span slab edges (and runs of a key straddle slabs), then keep-last: pandas'
    sort and drop_duplicates(keep="last") of every row."""
    large = pa.Table.from_batches([_piece([(STRING_KEYS[i % 12], i % 3, 0)
                                           for i in range(240)], pa.string(), 0)])
    tables = [large, *(pa.Table.from_batches([_piece(r, pa.string(), i + 1)])
                       for i, r in enumerate(smalls))]
    schema = tables[0].schema
    merged = pa.Table.from_batches(
        list(merge_sorted([_batches(large, cuts), *(iter(t.to_batches()) for t in tables[1:])],
                          NAMES, schema, last_of=["k", "ts"])), schema=schema)
    got = merged.to_pandas()
    got = got[~got.assign(k=got["k"].map(_hex)).duplicated(["k", "ts"], keep="last")]
    frame = pd.concat([t.to_pandas() for t in tables], ignore_index=True)
    frame["byte_key"] = frame["k"].map(_hex)  # (pandas hashes "a" and "a\x00" alike)
    want = frame.sort_values(["byte_key", "ts", "seq", "piece", "pos"], kind="stable") \
        .drop_duplicates(subset=["byte_key", "ts"], keep="last").drop(columns="byte_key")
    assert got.reset_index(drop=True).equals(want.reset_index(drop=True))


@pytest.mark.parametrize("key_type", [pa.int8(), pa.uint32(), pa.date32(), pa.time64("ns")])
def test_integer_and_temporal_prefixes_order_as_the_values(key_type: pa.DataType) -> None:
    """Every integer and temporal width maps to uint64 in order (sign bit flipped)."""
    values = {pa.int8(): [-128, -1, 0, 5, 127], pa.uint32(): [0, 1, 2**31, 2**32 - 1]}.get(
        key_type, [0, 1, 1000, 10**9])
    large = pa.RecordBatch.from_pydict({"k": pa.array(sorted(values * 5), key_type),
                                        "ts": [0] * len(values) * 5, "seq": [0] * len(values) * 5})
    small = pa.RecordBatch.from_pydict({"k": pa.array([values[-1], values[0]][::-1], key_type),
                                        "ts": [1, 1], "seq": [1, 1]})
    order = place_into_largest([large, small], NAMES)
    assert order is not None
    got = pa.Table.from_batches([large, small]).take(order)
    want = pa.Table.from_batches([large, small])
    want = want.take(np.asarray(sort_all([large, small], NAMES)))
    assert got.equals(want)
