"""Leaf assignment for bulk import (``sediment.partitioning.lexicographic.leaf_indices``, no
Spark needed): the binary search on the first row-key field agrees with a row-by-row
reference, for single and composite keys, ints, strings and binaries, with keys equal to
boundaries."""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pytest

from sediment.partitioning import lexicographic

TYPES = {"int": pa.int64(), "str": pa.string(), "bin": pa.binary()}


def _value(rng: random.Random, kind: str) -> object:
    if kind == "int":
        return rng.randint(-5, 5)
    if kind == "str":
        return "".join(rng.choice("abc") for _ in range(rng.randint(0, 3)))
    return bytes(rng.choice(b"ab") for _ in range(rng.randint(0, 3)))


@pytest.mark.parametrize("kinds", [["int"], ["str"], ["bin"], ["str", "int"], ["int", "str"]])
def test_leaf_indices_match_reference(kinds: list[str]) -> None:
    rng = random.Random(len(kinds) * 7 + len(kinds[0]))
    names = [f"k{i}" for i in range(len(kinds))]
    for _ in range(60):
        n = rng.randint(0, 200)
        rows = [tuple(_value(rng, k) for k in kinds) for _ in range(n)]
        bounds = sorted({tuple(_value(rng, k) for k in kinds) for _ in range(rng.randint(0, 6))})
        data = pa.table({nm: pa.array([r[i] for r in rows], TYPES[k])
                         for i, (nm, k) in enumerate(zip(names, kinds, strict=True))})
        boundaries = pa.table({nm: pa.array([b[i] for b in bounds], TYPES[k])
                               for i, (nm, k) in enumerate(zip(names, kinds, strict=True))})
        want = [sum(1 for b in bounds if b <= r) for r in rows]
        got = lexicographic.leaf_indices(data, names, boundaries)
        assert got.dtype == np.int32
        assert got.tolist() == want
        if n:
            batch = data.combine_chunks().to_batches()[0]
            assert lexicographic.leaf_indices(batch, names, boundaries).tolist() == want


def test_leaf_indices_without_search_sorted(monkeypatch: pytest.MonkeyPatch) -> None:
    """pyarrow before 26 has no ``pc.search_sorted``: the joint sort gives the same answers."""
    monkeypatch.setattr(lexicographic, "_SEARCH_SORTED", None)
    for kinds in (["int"], ["str"], ["bin"], ["str", "int"]):
        test_leaf_indices_match_reference(kinds)
