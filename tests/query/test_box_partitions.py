"""Box partitions (``partitioning="dimensions"``): random box trees over two- and three-field
keys (int, string, binary) answer queries, ranges and per-field regions as the reference
does, before and after compaction and splitting; Sleeper's choice of the split field; the
partitioning property's rules."""

from __future__ import annotations

import random
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_regions import TYPES, ref_regions

import sediment as sd
from helpers import make_table
from reference import Reference, RefRange, RefRegion, assert_matches
from sediment.core.regions import Cell
from sediment.core.transactions import SplitPartition
from sediment.errors import PropertyError, SchemaError, TransactionInvalidError
from sediment.partitioning.dimensions import first_field, median_dimension, split_of


def _schema(kinds: list[str]) -> sd.Schema:
    return sd.Schema(row_keys=[(f"k{i}", TYPES[k][0]) for i, k in enumerate(kinds)],
                     sort_keys=[("s", pa.int32())], values=[("v", pa.int64())])


def random_box_tree(table: sd.Table, pools: list[list[Any]], rng: random.Random,
                    cuts: int) -> None:
    """``cuts`` splits of random leaves on random fields at random values inside them."""
    for _ in range(cuts):
        leaves = [p for p in table.partitions() if p.is_leaf]
        leaf = rng.choice(leaves)
        assert isinstance(leaf.region, Cell)
        dim = rng.randrange(len(pools))
        value = rng.choice(pools[dim])
        if not leaf.region.can_cut(dim, value):
            continue
        table._handle.states.commit(SplitPartition(leaf.id, (value,), uuid.uuid4().hex[:16],
                                                   uuid.uuid4().hex[:16], dim))


def _rows(kinds: list[str], rows: list[tuple[Any, ...]], ref: Reference, offset: int = 0
          ) -> pa.Table:
    cols: dict[str, list[Any]] = {f"k{i}": [r[i] for r in rows] for i in range(len(kinds))}
    cols["s"] = [(offset + i) % 3 for i in range(len(rows))]
    cols["v"] = [offset + i for i in range(len(rows))]
    return pa.table(cols, schema=ref.arrow)


@pytest.fixture(scope="module")
def box_store(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("boxes"))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kinds=st.lists(st.sampled_from(sorted(TYPES)), min_size=2, max_size=3),
       seed=st.integers(0, 2**32), cuts=st.integers(0, 8),
       strategy=st.sampled_from(["per_partition", "shared_file"]),
       rule=st.sampled_from(["first", "cycle"]), data=st.data())
def test_random_box_trees_match_reference(box_store: str, kinds: list[str], seed: int,
                                          cuts: int, strategy: str, rule: str,
                                          data: st.DataObject) -> None:
    rng = random.Random(seed)
    pools = [TYPES[k][1] for k in kinds]
    names = [f"k{i}" for i in range(len(kinds))]
    schema = _schema(kinds)
    table = make_table(box_store, schema=schema, partitioning="dimensions",
                       **{"ingest.write_strategy": strategy, "parquet.row_group_rows": 128,
                          "partition.split.threshold": 40, "partition.split.dimension": rule})
    random_box_tree(table, pools, rng, cuts)
    ref = Reference(schema)
    for part in range(2):
        rows = [tuple(rng.choice(p) for p in pools) for _ in range(rng.randint(1, 70))]
        batch = _rows(kinds, rows, ref, 1000 * part)
        table.ingest(batch)
        ref.add(batch)
    regions = data.draw(st.lists(ref_regions(names, pools), min_size=1, max_size=3))
    plain = RefRange((rng.choice(pools[0]),), (rng.choice(pools[0]),), rng.random() < 0.5,
                     rng.random() < 0.5)
    key = ref.row_key(ref.rows[0])
    # a range pinning the first field (a per-field region in disguise: pruned as one)
    pinned = RefRange((key[0], rng.choice(pools[1])), (key[0], rng.choice(pools[1])),
                      rng.random() < 0.5, rng.random() < 0.5)

    def check() -> None:
        assert_matches(table.query(), ref)
        assert_matches(table.scan().read_all(), ref)
        asked = [r.to_sediment() for r in regions]
        assert_matches(table.query(ranges=asked), ref, ranges=regions)
        assert_matches(table.scan(ranges=asked).read_all(), ref, ranges=regions)
        assert_matches(table.query(keys=[key], ranges=[plain.to_sediment()]), ref,
                       keys=[key], ranges=[plain])
        assert_matches(table.query(ranges=[pinned.to_sediment()]), ref, ranges=[pinned])
        assert_matches(table.scan(ranges=[pinned.to_sediment(), *asked]).read_all(), ref,
                       ranges=[pinned, *regions])
        # leaves and regions: a planned leaf's cell can meet a region; every row is in one leaf
        leaves = [p for p in table.partitions() if p.is_leaf]
        for r in ref.rows:
            assert sum(leaf.region.contains(ref.row_key(r)) for leaf in leaves) == 1
        planned = {s.leaf_id for s in table.plan(ranges=asked).subqueries}
        for leaf in leaves:
            holds = any(leaf.region.contains(ref.row_key(r)) and
                        any(x.contains_row(r) for x in regions) for r in ref.rows)
            if holds and table.files() and any(f.partition_id == leaf.id
                                                for f in table.files()):
                assert leaf.id in planned

    check()
    table.compact()
    check()
    table.split()  # the rule's field choice at the leaves' medians, committed as splits
    table.compact()
    check()
    table.store.drop_table(table.name)


def test_split_chooses_the_field_as_sleeper_does() -> None:
    cell = Cell.whole(3)
    # field 0's median equals its minimum, field 1's its maximum: field 2 is cut
    assert median_dimension(cell, ["a", 9, 5], ["a", 1, 0], ["z", 9, 7]) == 2
    assert median_dimension(cell, ["m", 9, 5], ["a", 1, 0], ["z", 9, 7]) == 0
    assert median_dimension(cell, ["a", 9, 7], ["a", 1, 0], ["z", 9, 7]) is None
    # a median on the cell's own lower edge cannot cut it
    left, right = cell.cut(0, "m")
    assert median_dimension(right, ["m", 5, 5], ["a", 1, 0], ["z", 9, 7]) == 1


def test_split_field_tried_from_a_chosen_one() -> None:
    cell = Cell.whole(3)
    assert median_dimension(cell, ["m", 5, 5], ["a", 1, 0], ["z", 9, 7], first=1) == 1
    # field 1's median is its maximum: field 2 is next
    assert median_dimension(cell, ["m", 9, 5], ["a", 1, 0], ["z", 9, 7], first=1) == 2
    # neither field 1 nor field 2 can be cut: the search wraps round to field 0
    assert median_dimension(cell, ["m", 9, 7], ["a", 1, 0], ["z", 9, 7], first=1) == 0
    assert median_dimension(cell, ["a", 9, 7], ["a", 1, 0], ["z", 9, 7], first=2) is None
    assert [first_field("cycle", d, 3) for d in range(5)] == [0, 1, 2, 0, 1]
    assert [first_field("first", d, 3) for d in range(5)] == [0] * 5
    with pytest.raises(PropertyError, match="partition.split.dimension"):
        first_field("zorder", 0, 2)


def _settled_edges(store: sd.Store, name: str, rule: str, ref: Reference) -> sd.Table:
    """Edges from 300 sources to random destinations, split and compacted until settled."""
    schema = _schema(["string", "int"])
    table = store.create_table(name, schema, properties={
        "partitioning": "dimensions", "partition.split.threshold": 250,
        "partition.split.dimension": rule})
    rng = random.Random(11)
    rows = [(f"s{rng.randrange(300):03d}", rng.randrange(10_000)) for _ in range(4000)]
    batch = _rows(["string", "int"], rows, ref)
    table.ingest(batch)
    if name == "first":
        ref.add(batch)
    while table.split().splits:
        table.compact()
    return table


def test_the_cycle_rule_cuts_every_field_and_prunes_by_the_second(tmp_path: Path) -> None:
    """Under Sleeper's rule a first field of many values is the only one ever cut, so a query
    on the second field reads every leaf; under ``cycle`` a split d levels down cuts field
    d mod 2, and the same query reads a fraction of the leaves, with the same answer."""
    store = sd.Store.open(str(tmp_path / "s"), create=True)
    ref = Reference(_schema(["string", "int"]))
    tables = {rule: _settled_edges(store, rule, rule, ref) for rule in ("first", "cycle")}
    region = RefRegion({"k1": (6100, True, 6200, False)})
    planned = {}
    for rule, table in tables.items():
        parts = {p.id: p for p in table.partitions()}
        leaves = [p for p in parts.values() if p.is_leaf]
        assert len(leaves) >= 16
        for p in parts.values():
            if p.is_leaf:
                continue
            dim, _ = split_of(p, parts[p.children[0]])
            depth = len(table._handle.states.head().ancestors(p.id))
            assert dim == (depth % 2 if rule == "cycle" else 0), (rule, depth, dim)
        assert_matches(table.query(), ref)
        assert_matches(table.query(ranges=[region.to_sediment()]), ref, ranges=[region])
        planned[rule] = len(table.plan(ranges=[region.to_sediment()]).subqueries)
        if rule == "first":
            assert planned[rule] == len(leaves)
    assert planned["cycle"] * 2 < planned["first"]
    # the rule may change at any time: it only picks the field of later splits
    tables["cycle"].set_properties({"partition.split.dimension": "first"})
    with pytest.raises(PropertyError):
        tables["cycle"].set_properties({"partition.split.dimension": "widest"})


def test_splitting_a_box_table_cuts_the_second_field_when_the_first_is_one_value(
        tmp_path: Path) -> None:
    schema = _schema(["string", "int"])
    table = make_table(tmp_path, schema=schema, partitioning="dimensions",
                       **{"partition.split.threshold": 100})
    ref = Reference(schema)
    batch = _rows(["string", "int"], [("a", i) for i in range(1000)], ref)
    table.ingest(batch)
    ref.add(batch)
    assert table.split().splits == 1
    leaves = sorted((p for p in table.partitions() if p.is_leaf), key=lambda p: str(p.region))
    cells = [p.region for p in leaves]
    assert all(isinstance(c, Cell) for c in cells)
    assert {c.bounds[0] for c in cells} == {(None, None)}  # type: ignore[attr-defined]
    cut = cells[0].bounds[1][1] or cells[1].bounds[1][1]  # type: ignore[attr-defined]
    assert 450 <= cut <= 550  # the median, from the sample
    table.compact()
    assert_matches(table.query(), ref)
    region = RefRegion({"k1": (600, True, None, True)})
    plan = table.plan(ranges=[region.to_sediment()])
    assert len(plan.subqueries) == 1
    assert_matches(table.query(ranges=[region.to_sediment()]), ref, ranges=[region])


def test_partitioning_property_rules(tmp_path: Path) -> None:
    schema = _schema(["string", "int"])
    store = sd.Store.open(str(tmp_path / "s"), create=True)
    plain = store.create_table("plain", schema)
    assert plain.properties["partitioning"] == "lexicographic"
    assert not isinstance(plain.partitions()[0].region, Cell)
    # an empty table may switch; its tree becomes one partition of the new kind
    plain.set_properties({"partitioning": "dimensions"})
    assert isinstance(plain.partitions()[0].region, Cell)
    plain.ingest(pa.table({"k0": ["a"], "k1": [1], "s": [0], "v": [1]},
                          schema=schema.to_arrow()))
    with pytest.raises(TransactionInvalidError, match="cannot switch its partitioning"):
        plain.set_properties({"partitioning": "lexicographic"})
    with pytest.raises(TransactionInvalidError, match="cannot switch its partitioning"):
        plain.set_properties(remove=["partitioning"])
    plain.set_properties({"partitioning": "dimensions"})  # no switch: allowed
    with pytest.raises(sd.errors.PropertyError):
        store.create_table("bad", schema, properties={"partitioning": "zorder"})
    # split points of a box table cut its first field
    boxes = store.create_table("boxes", schema, split_points=["c", ("m",)],
                               properties={"partitioning": "dimensions"})
    leaves = [p.region for p in boxes.partitions() if p.is_leaf]
    assert sorted((c.bounds[0] for c in leaves), key=repr) == sorted(  # type: ignore
        [(None, "c"), ("c", "m"), ("m", None)], key=repr)
    with pytest.raises(SchemaError, match="first row-key field"):
        store.create_table("bad2", schema, split_points=[("c", 1)],
                           properties={"partitioning": "dimensions"})
    # a box table's leaves refuse a whole-key split, a lexicographic one a field cut
    root = boxes.partitions()[0]
    leaf = next(p for p in boxes.partitions() if p.is_leaf)
    with pytest.raises(TransactionInvalidError, match="is a box partition"):
        boxes._handle.states.commit(SplitPartition(leaf.id, ("d", 1), "x1", "x2"))
    with pytest.raises(TransactionInvalidError):
        boxes._handle.states.commit(SplitPartition(root.id, ("d",), "x1", "x2", 0))
    lex = store.create_table("lex", schema)
    with pytest.raises(TransactionInvalidError, match="is not a box partition"):
        lex._handle.states.commit(SplitPartition(lex.partitions()[0].id, (3,), "y1", "y2", 1))
    with pytest.raises(TransactionInvalidError, match="is not a box partition"):
        lex._handle.states.commit(SplitPartition(lex.partitions()[0].id, ("a",), "y1", "y2", 0))


@pytest.mark.parametrize("asked", [
    None,
    RefRange(("b",), ("q",), True, True),
    RefRegion({"k1": (20, True, 60, False)}),
    RefRegion({"k0": ("c", False, "x", True), "k1": (None, True, 50, True)}),
], ids=repr)
def test_dump_and_load_of_a_box_table(tmp_path: Path, asked: Any) -> None:
    kinds = ["string", "int"]
    schema = _schema(kinds)
    store = sd.Store.open(str(tmp_path / "s"), create=True)
    table = make_table(store, schema=schema, partitioning="dimensions",
                       **{"partition.split.threshold": 150})
    ref = Reference(schema)
    rng = random.Random(3)
    for part in range(2):
        rows = [(rng.choice("abcmnqxz"), rng.randint(0, 99)) for _ in range(400)]
        batch = _rows(kinds, rows, ref, 1000 * part)
        table.ingest(batch)
        ref.add(batch)
    for _ in range(3):
        table.split()
        table.compact()
    assert sum(p.is_leaf for p in table.partitions()) > 3
    ranges = None if asked is None else [asked]
    job = table.dump(str(tmp_path / "dumps"),
                     range=None if asked is None else asked.to_sediment())
    assert job.rows == len(ref.query(ranges=ranges))
    copy = store.load(job.manifest_uri, "copy")
    assert copy.properties["partitioning"] == "dimensions"
    assert all(isinstance(p.region, Cell) for p in copy.partitions())
    assert_matches(copy.query(), ref, ranges=ranges)
    # into an existing box table cut elsewhere
    other = make_table(store, schema=schema, partitioning="dimensions", split_points=["n"])
    random_box_tree(other, [list("abcmnqxz"), list(range(100))], rng, 6)
    store.load(job.manifest_uri, other.name)
    assert_matches(other.query(), ref, ranges=ranges)
    other.compact()
    assert_matches(other.query(), ref, ranges=ranges)


def test_a_range_pinning_leading_fields_prunes_box_leaves(tmp_path: Path) -> None:
    schema = _schema(["string", "int"])
    table = make_table(tmp_path, schema=schema, partitioning="dimensions", split_points=["m"])
    ref = Reference(schema)
    batch = _rows(["string", "int"], [(s, d) for s in "am" for d in range(100)], ref)
    table.ingest(batch)
    ref.add(batch)
    left = next(p for p in table.partitions() if p.is_leaf
                and p.region.bounds[0] == (None, "m"))  # type: ignore[attr-defined]
    table._handle.states.commit(SplitPartition(left.id, (50,), "low", "high", 1))
    table.compact()
    rng = RefRange(("a", 10), ("a", 20), True, False)
    plan = table.plan(ranges=[rng.to_sediment()])
    assert [s.leaf_id for s in plan.subqueries] == ["low"]
    assert_matches(table.query(ranges=[rng.to_sediment()]), ref, ranges=[rng])
    whole = RefRange(("a",), ("a",), True, True)
    assert {s.leaf_id for s in table.plan(ranges=[whole.to_sediment()]).subqueries} == \
        {"low", "high"}
    assert_matches(table.query(ranges=[whole.to_sediment()]), ref, ranges=[whole])
