"""sort_table equals Arrow's own sort on keys that stress the normalised-key path: shared
prefixes (ties resolved by the full keys), embedded NULs, binary, empty strings, and the
DataFusion fallback when ties are common."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import sediment.files.sort as sort_mod
from sediment.files.sort import sort_table

KEYS = st.one_of(
    st.text(alphabet="ab\x00é", max_size=12),
    st.text(alphabet="abcdefghijklmnopqrstuvwxyz", min_size=8, max_size=10),
)


def _reference(t: pa.Table, names: list[str]) -> pa.Table:
    return t.take(pc.sort_indices(t, sort_keys=[(n, "ascending") for n in names]))


@pytest.fixture(autouse=True)
def _always_sort_big(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sort_mod, "_DATAFUSION_MIN_ROWS", 0)
    monkeypatch.setattr(sort_mod, "_NORMALISED_MIN_ROWS", 0)
    monkeypatch.setattr(sort_mod, "_MAX_TIE_FRACTION", sort_mod._MAX_TIE_FRACTION)  # restored


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(KEYS, st.integers(-5, 5)), min_size=1, max_size=300),
       st.booleans(), st.floats(0.0, 1.0))
def test_sort_table_equals_arrow_sort(rows: list[tuple[str, int]], binary: bool,
                                      tie_fraction: float) -> None:
    sort_mod._MAX_TIE_FRACTION = tie_fraction  # exercise both the tie pass and the fallback
    keys = [k.encode() if binary else k for k, _ in rows]
    t = pa.table({"key": pa.array(keys, pa.binary() if binary else pa.string()),
                  "ts": pa.array([v for _, v in rows], pa.int64()),
                  "value": pa.array(range(len(rows)), pa.int64())})
    got = sort_table(t, ["key", "ts"])
    want = _reference(t, ["key", "ts"])
    assert got.select(["key", "ts"]).equals(want.select(["key", "ts"]))
    assert sorted(got.column("value").to_pylist()) == list(range(len(rows)))


def test_sorted_slices_and_chunked_tables() -> None:
    t = pa.concat_tables([pa.table({"key": [f"k{i % 97:03d}{i}" for i in range(500)],
                                    "ts": list(range(500))})] * 3)
    sub = t.slice(100, 1000)
    assert sort_table(sub, ["key", "ts"]).equals(_reference(sub, ["key", "ts"]))


@settings(max_examples=40, deadline=None)
@given(st.lists(st.binary(max_size=11), min_size=1, max_size=60), st.integers(0, 5))
def test_prefix_keys_are_the_first_eight_bytes(values: list[bytes], start: int) -> None:
    """The one-gather prefix (a byte-strided view) equals each value's first 8 bytes, zero
    padded, read big-endian: on sliced arrays and values shorter than 8 bytes too."""
    col = pa.array([b"pad"] * start + values, pa.binary()).slice(start)
    got = sort_mod.prefix_keys(col)
    assert got is not None
    assert got.tolist() == [int.from_bytes(v[:8].ljust(8, b"\0"), "big") for v in values]


def test_sort_order_on_small_tables_is_stable(monkeypatch: pytest.MonkeyPatch) -> None:
    """Between the normalised-key threshold and DataFusion's, a table the normalised sort
    cannot serve (integer keys) is sorted by pyarrow, stably, not by DataFusion."""
    monkeypatch.setattr(sort_mod, "_DATAFUSION_MIN_ROWS", 65_536)
    monkeypatch.setattr(sort_mod, "_NORMALISED_MIN_ROWS", 2_048)
    monkeypatch.setattr(sort_mod, "_datafusion_sort", None)  # (called: a TypeError)
    n = 5_000
    t = pa.table({"key": pa.array([i % 7 for i in range(n)], pa.int64()),
                  "ts": pa.array([0] * n, pa.int64()), "pos": pa.array(range(n), pa.int64())})
    got = sort_table(t.select(["key", "ts", "pos"]), ["key", "ts"])
    want = sorted(range(n), key=lambda i: (i % 7, i))
    assert got.column("pos").to_pylist() == want


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(KEYS, st.integers(-2, 2)), min_size=1, max_size=400),
       st.integers(2, 4), st.floats(0.0, 1.0))
def test_split_orders_are_runs_of_the_stable_sort(rows: list[tuple[str, int]], parts: int,
                                                  tie_fraction: float) -> None:
    """The runs ``split_orders`` gives, joined, are the stable sort (equal keys in input
    order), and rows of equal keys (equal prefixes) are never in two runs."""
    sort_mod._MAX_TIE_FRACTION = tie_fraction
    t = pa.table({"key": [k for k, _ in rows], "ts": pa.array([v for _, v in rows], pa.int64()),
                  "pos": pa.array(range(len(rows)), pa.int64())})
    orders = sort_mod.split_orders(t, ["key", "ts"], parts)
    if orders is None:  # one prefix for every row: nothing to cut
        return
    assert 2 <= len(orders) <= parts
    got = t.take(pa.chunked_array(orders))
    want = t.take(pc.sort_indices(t, sort_keys=[("key", "ascending"), ("ts", "ascending"),
                                                ("pos", "ascending")]))
    assert got.equals(want)
    runs = [set(t.take(o).column("key").to_pylist()) for o in orders]
    assert all(not (a & b) for i, a in enumerate(runs) for b in runs[i + 1:])


def test_split_orders_need_a_string_first_key() -> None:
    t = pa.table({"key": pa.array(range(5000), pa.int64()), "ts": pa.array([0] * 5000)})
    assert sort_mod.split_orders(t, ["key", "ts"], 2) is None
    one = pa.table({"key": ["same-key"] * 5000, "ts": list(range(5000))})
    assert sort_mod.split_orders(one, ["key", "ts"], 2) is None  # nothing to cut
