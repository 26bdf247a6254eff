"""The partitioning protocol (``sediment.partitioning``) on both strategies, against
references computed with pandas over the leaves' regions: where rows go, how a sorted stream
is cut, which leaves a read's ranges prune to, how a dump range is tiled, where a leaf
splits. Pure: states are built in memory from transactions, nothing touches storage."""

from __future__ import annotations

import itertools
import random
import uuid

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from sediment.core.regions import Box, FieldRange, Range, Region
from sediment.core.state import TableState, build_partition_tree
from sediment.core.transactions import InitialiseTable, SplitPartition
from sediment.errors import PropertyError, QueryError
from sediment.files.sample import KeySampler
from sediment.partitioning import (
    PARTITIONINGS,
    Dimensions,
    Lexicographic,
    partitioning_named,
    partitioning_of,
)
from sediment.schema import Schema
from sediment.settings import as_settings

SCHEMA = Schema(row_keys=[("k0", pa.string()), ("k1", pa.int64())], values=[("v", pa.int64())])
NAMES = SCHEMA.row_key_names
FIRST = list("abcdefgh")
SECOND = list(range(20))
DOMAIN = list(itertools.product(FIRST, SECOND))
"""Every key the tests use: references check each of them."""


def _state(kind: str, rng: random.Random, cuts: int) -> TableState:
    """A table state of ``kind`` with about ``cuts`` random splits."""
    state = TableState("t")
    if kind == "lexicographic":
        points = sorted(rng.sample(DOMAIN, cuts))
        InitialiseTable(SCHEMA, {}, build_partition_tree(SCHEMA, points)).apply(state, 0.0)
        return state
    tree = build_partition_tree(SCHEMA, sorted(rng.sample(FIRST[1:], 2)), "dimensions")
    InitialiseTable(SCHEMA, {"partitioning": "dimensions"}, tree).apply(state, 0.0)
    for _ in range(cuts):
        leaf = rng.choice(state.leaf_partitions())
        cell = leaf.region.cell
        assert cell is not None
        dim = rng.randrange(2)
        value = rng.choice(FIRST if dim == 0 else SECOND)
        if cell.can_cut(dim, value):
            SplitPartition(leaf.id, (value,), uuid.uuid4().hex[:16], uuid.uuid4().hex[:16],
                           dim).apply(state, 0.0)
    return state


def _leaf_masks(state: TableState, frame: pd.DataFrame) -> list[np.ndarray]:
    """Each leaf's rows of ``frame`` (in ``leaf_partitions()`` order), by pandas comparisons
    with the leaf's bounds: per field for a cell, on the whole key (lexicographically, as
    tuples) for a region."""
    out = []
    keys = list(zip(frame["k0"], frame["k1"], strict=True))
    for leaf in state.leaf_partitions():
        cell = leaf.region.cell
        if cell is None:
            lo, hi = leaf.region.min, leaf.region.max
            out.append(np.array([(lo is None or k >= lo) and (hi is None or k < hi)
                                 for k in keys], dtype=bool))
            continue
        mask = np.ones(len(frame), dtype=bool)
        for name, (lo, hi) in zip(NAMES, cell.bounds, strict=True):
            if lo is not None:
                mask &= (frame[name] >= lo).to_numpy()
            if hi is not None:
                mask &= (frame[name] < hi).to_numpy()
        out.append(mask)
    return out


def _rows(rng: random.Random, n: int) -> pa.Table:
    keys = [rng.choice(DOMAIN) for _ in range(n)]
    return pa.table({"k0": [k[0] for k in keys], "k1": pa.array([k[1] for k in keys],
                                                                 pa.int64()),
                     "v": pa.array(range(n), pa.int64())})


KINDS = ["lexicographic", "dimensions"]


def test_the_strategy_is_chosen_from_the_tree() -> None:
    rng = random.Random(1)
    assert isinstance(partitioning_of(_state("lexicographic", rng, 3)), Lexicographic)
    assert isinstance(partitioning_of(_state("dimensions", rng, 3)), Dimensions)
    assert PARTITIONINGS == ("lexicographic", "dimensions")
    assert [partitioning_named(n).name for n in PARTITIONINGS] == list(PARTITIONINGS)
    with pytest.raises(PropertyError, match="zorder"):
        partitioning_named("zorder")


@pytest.mark.parametrize("kind", KINDS)
def test_each_row_finds_its_leaf(kind: str) -> None:
    """``leaf_finder`` (bulk import's tasks) against the pandas masks of every leaf."""
    rng = random.Random(hash(kind) % 1000)
    for _ in range(8):
        state = _state(kind, rng, rng.randint(0, 8))
        data = _rows(rng, rng.randint(0, 300))
        masks = _leaf_masks(state, data.to_pandas())
        want = np.zeros(data.num_rows, dtype=np.int32)
        for i, m in enumerate(masks):
            want[m] = i
        assert all(sum(m[r] for m in masks) == 1 for r in range(data.num_rows))
        finder = partitioning_of(state).leaf_finder(state)
        assert finder.indices(data, NAMES).tolist() == want.tolist()
        for batch in data.combine_chunks().to_batches():  # a batch as well as a table
            assert finder.indices(batch, NAMES).tolist() == want.tolist()
        # the JVM's count of boundaries is offered only where it is right
        assert (finder.boundaries is not None) == (kind == "lexicographic")


@pytest.mark.parametrize("kind", KINDS)
def test_a_sorted_stream_is_cut_into_each_leafs_sorted_rows(kind: str) -> None:
    rng = random.Random(7 + len(kind))
    for _ in range(8):
        state = _state(kind, rng, rng.randint(0, 8))
        data = _rows(rng, rng.randint(1, 400))
        data = data.sort_by([(n, "ascending") for n in NAMES])
        batches = data.to_batches(max_chunksize=rng.randint(1, 60))
        strategy = partitioning_of(state)
        got: dict[str, list[pa.RecordBatch]] = {}
        order: list[str] = []
        seen = 0
        for batch, pieces in strategy.cut(state, iter(batches), NAMES):
            assert sum(p.rows for p in pieces) == batch.num_rows  # every row, once
            seen += batch.num_rows
            for p in pieces:
                piece = p.of(batch)
                assert piece.num_rows == p.rows
                got.setdefault(p.leaf.id, []).append(piece)
                if not order or order[-1] != p.leaf.id:
                    order.append(p.leaf.id)
        assert seen == data.num_rows
        frame = data.to_pandas()
        leaves = state.leaf_partitions()
        for leaf, mask in zip(leaves, _leaf_masks(state, frame), strict=True):
            want = frame[mask].reset_index(drop=True)
            pieces = got.get(leaf.id, [])
            have = pa.Table.from_batches(pieces, data.schema).to_pandas() if pieces else \
                frame.iloc[0:0].reset_index(drop=True)
            pd.testing.assert_frame_equal(have, want)  # the leaf's rows, in sorted order
        if strategy.cuts_in_order:  # each leaf once, in key order
            position = {p.id: i for i, p in enumerate(leaves)}
            assert len(order) == len(set(order))
            assert [position[x] for x in order] == sorted(position[x] for x in order)


def _random_range(rng: random.Random) -> Range:
    a, b = sorted(rng.sample(DOMAIN, 2))
    shape = rng.randrange(4)
    if shape == 0:
        return Range.exact(a)
    if shape == 1:
        return Range((a[0],), (b[0],), end_inclusive=rng.random() < 0.5)
    if shape == 2:
        return Range((a[0], a[1]), (a[0], max(a[1], b[1])), end_inclusive=True)
    lo, hi = sorted(rng.sample(SECOND, 2))  # a box: a range of the second field alone
    return Box({"k1": Range(lo, hi)}).bind(NAMES, [FieldRange(), FieldRange(lo, True, hi)])


@pytest.mark.parametrize("kind", KINDS)
def test_a_plan_keeps_every_leaf_a_range_reaches(kind: str) -> None:
    """Pruning is sound (a leaf holding a key some range selects is kept, with that range)
    and, for a whole key, exact (only the key's own leaf)."""
    rng = random.Random(11 + len(kind))
    domain = pd.DataFrame(DOMAIN, columns=NAMES)
    for _ in range(10):
        state = _state(kind, rng, rng.randint(0, 10))
        strategy = partitioning_of(state)
        ranges = strategy.read_ranges([_random_range(rng) for _ in range(rng.randint(1, 3))],
                                      NAMES)
        kept = {leaf.id: hit for leaf, hit in strategy.prune(state, ranges)}
        masks = _leaf_masks(state, domain)
        for leaf, mask in zip(state.leaf_partitions(), masks, strict=True):
            for r in ranges:
                if any(r.contains(k) for k, m in zip(DOMAIN, mask, strict=True) if m):
                    hit = kept.get(leaf.id)
                    assert hit is not None and r in hit, (leaf.region, r)
        assert [leaf.id for leaf, hit in strategy.prune(state, None)] == \
            [p.id for p in state.leaf_partitions()]
        key = rng.choice(DOMAIN)
        only = [leaf.id for leaf, _ in strategy.prune(
            state, strategy.read_ranges([Range.exact(key)], NAMES))]
        assert only == [p.id for p in state.leaf_partitions() if p.region.contains(key)]


@pytest.mark.parametrize("kind", KINDS)
def test_a_dump_range_is_tiled_exactly(kind: str) -> None:
    """The tiles cover the range, in key order, without overlap; each key's tile reads the
    key's leaf and keeps the key."""
    rng = random.Random(23 + len(kind))
    for _ in range(10):
        state = _state(kind, rng, rng.randint(0, 10))
        strategy = partitioning_of(state)
        dump = Range() if rng.random() < 0.3 else _random_range(rng)
        tiles = strategy.tiles(state, dump)
        assert tiles
        for key in DOMAIN:
            owners = [t for t in tiles if t.range.contains(key)]
            if not Range(dump.start, dump.end, start_inclusive=dump.start_inclusive,
                         end_inclusive=dump.end_inclusive).contains(key):
                assert owners == []
                continue
            assert len(owners) == 1, (key, [t.range for t in owners])
            tile = owners[0]
            leaf = next(p for p in state.leaf_partitions() if p.region.contains(key))
            if dump.contains(key):
                assert leaf.id in tile.leaves
                assert tile.query.contains(key)
        starts = [t.range.start for t in tiles[1:]]
        assert starts == sorted(starts)
    # the manifest says how to load it back
    assert partitioning_named("lexicographic").dump_fields() == {}
    assert partitioning_named("dimensions").dump_fields() == {"partitioning": "dimensions"}


def _sample(table: pa.Table) -> pa.Table:
    sampler = KeySampler(NAMES, table.num_rows + 1)  # every key: the sample is exact
    sampler.add(table.sort_by([(n, "ascending") for n in NAMES]))
    return sampler.sample(pa.schema([table.schema.field(n) for n in NAMES]))


def test_a_lexicographic_leaf_splits_at_its_median_key() -> None:
    state = _state("lexicographic", random.Random(3), 0)
    keys = [(a, b) for a in FIRST for b in SECOND]  # distinct, so the median is one key
    data = pa.table({"k0": [k[0] for k in keys], "k1": pa.array([k[1] for k in keys])})
    half = data.num_rows // 2
    samples = [_sample(data.slice(0, half)), _sample(data.slice(half))]
    leaf = state.leaf_partitions()[0]
    choice = partitioning_of(state).choose_split(state, leaf, samples, NAMES,
                                                 as_settings({}))
    want = data.to_pandas().sort_values(NAMES).iloc[data.num_rows // 2]
    assert choice.key == (want["k0"], want["k1"]) and choice.dimension is None
    one = pa.table({"k0": ["a"] * 10, "k1": pa.array([5] * 10)})
    stuck = partitioning_of(state).choose_split(state, leaf, [_sample(one)], NAMES,
                                                as_settings({}))
    assert stuck.key is None and "one row key" in stuck.reason


@pytest.mark.parametrize("rule", ["first", "cycle"])
def test_a_box_leaf_splits_a_field_at_its_median(rule: str) -> None:
    """The first field (from the rule's) whose median is neither its minimum nor its
    maximum in the leaf, at that median (pandas' sorted values at ``n // 2``)."""
    rng = random.Random(5)
    state = _state("dimensions", rng, 0)
    settings = as_settings({"partition.split.dimension": rule})
    for leaf in state.leaf_partitions():
        cell = leaf.region.cell
        assert cell is not None
        rows = _rows(rng, 200)
        frame = rows.to_pandas()
        inside = frame[_leaf_masks(state, frame)[state.leaf_partitions().index(leaf)]]
        choice = partitioning_of(state).choose_split(state, leaf, [_sample(rows)], NAMES,
                                                     settings)
        depth = len(state.ancestors(leaf.id))
        first = depth % 2 if rule == "cycle" else 0
        want = None
        for dim in (first, 1 - first):
            values = inside[NAMES[dim]].sort_values().to_list()
            if not values:
                break
            med = values[len(values) // 2]
            if med not in (values[0], values[-1]) and cell.can_cut(dim, med):
                want = (dim, med)
                break
        if want is None:
            assert choice.key is None and choice.reason
        else:
            assert (choice.dimension, choice.key) == (want[0], (want[1],))


@pytest.mark.parametrize("kind", KINDS)
def test_bulk_import_splits_bring_leaves_near_the_target(kind: str) -> None:
    """Leaves getting more than the target are split, as a split would cut them, and every
    planned split applies to the state in order."""
    rng = random.Random(31)
    state = _state(kind, rng, 2)
    data = _rows(rng, 2_000)
    merged = _sample(data)
    splits = partitioning_of(state).import_splits(merged, NAMES, state, 300)
    assert splits
    after = state.copy()
    for s in splits:
        s.validate(after)
        s.apply(after, 0.0)
    frame = data.to_pandas()
    sizes = [int(m.sum()) for m in _leaf_masks(after, frame)]
    before = [int(m.sum()) for m in _leaf_masks(state, frame)]
    assert max(sizes) < max(before)


def test_a_region_is_not_patched_at_import_time() -> None:
    """``Region({...})`` makes a box and a cell's JSON reads back as a cell, with nothing
    registered by another module."""
    box = Region({"k1": Range(3, 9)})
    assert isinstance(box, Box) and box.per_field is box
    tree = build_partition_tree(SCHEMA, ["c"], "dimensions")
    for p in tree:
        again = Region.from_json(p.region.to_json())
        assert again == p.region and again.cell is not None
    assert Region.from_json(Region(("a", 1), None).to_json()).cell is None


def test_a_range_reads_as_written_in_messages() -> None:
    """``str(Range)`` is the interval (errors print it), not the dataclass's repr."""
    assert str(Range("m", "a")) == "['m', 'a')"
    assert str(Range(None, 5, end_inclusive=True)) == "[-inf, 5]"
    assert str(Range(("a", 1), ("b",), start_inclusive=False)) == "(('a', 1), 'b')"


def test_a_ranges_sleeper_aliases_agree_with_its_names_or_are_refused() -> None:
    assert Range(1, 60, min_inclusive=False) == Range(1, 60, start_inclusive=False)
    assert Range(1, 60, max_inclusive=True, end_inclusive=True).end_inclusive
    with pytest.raises(QueryError, match="start_inclusive=True and min_inclusive=False"):
        Range(1, 60, min_inclusive=False, start_inclusive=True)
    with pytest.raises(QueryError, match="end_inclusive=False and max_inclusive=True"):
        Range(1, 60, max_inclusive=True, end_inclusive=False)
